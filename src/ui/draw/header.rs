//! The top lines: each run's identity (engine, model, server, started) and
//! the status line (phase, level, gauge, mode, slots in use).

use super::chart::series_of;
use crate::load::driver::Mode;
use crate::ui::app::{App, LevelRow, Pending, Phase, RunView};
use crate::ui::theme::Palette;
use crate::ui::widgets::{clock, compact, ellipsize, fit, grouped, keep_fitting, Part, PointKind};
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

/// A run's letter in `tokbench view A B`.
#[derive(Clone, Copy)]
pub(super) struct Tag<'a> {
    pub(super) letter: char,
    /// The run the table shows.
    pub(super) shown: bool,
    /// The other run: what both share matters less on a narrow line than
    /// what sets them apart.
    pub(super) versus: &'a RunView,
}

/// A run's identity on one line, `right` at the right edge.
pub(super) fn header_line(
    app: &App,
    run: &RunView,
    label: Option<Tag<'_>>,
    right: Span<'static>,
    area: Rect,
) -> Line<'static> {
    let room = usize::from(area.width.saturating_sub(right.width() as u16 + 2));
    let w = usize::from(area.width);
    let p = &app.palette;
    // A live run: what the requests really had, beside the profile.
    let extended;
    let run = match (&run.profile, RunView::achieved_text(app.achieved)) {
        (Some(profile), Some(achieved)) if label.is_none() => {
            extended = RunView {
                profile: Some(format!("{profile} {achieved}")),
                ..run.clone()
            };
            &extended
        }
        _ => run,
    };
    if label.is_some() {
        // Two runs: what sets this one apart is worth an ellipsis on the
        // names; what both share goes first.
        // Every knob at full length when all that differs fits; else only
        // the knobs that differ, names shortened while all that differs
        // fits; else whole names, and what must stay (the knobs that
        // differ, or the target) kept.
        let w3 = (w / 3).max(10);
        let tries = std::iter::once((w3, false, APART))
            .chain((10..=w3).rev().map(|n| (n, true, APART)))
            .chain(std::iter::once((w3, true, MUST)));
        let apart = tries.into_iter().find_map(|(name_room, diff_only, must)| {
            let (parts, _) = header_parts(p, run, label, name_room, w, diff_only);
            let keep = keep_fitting(&parts, room, 2);
            parts
                .iter()
                .zip(&keep)
                .all(|(part, kept)| *kept || part.prio > must)
                .then_some(parts)
        });
        let parts = apart.unwrap_or_else(|| header_parts(p, run, label, w3, w, true).0);
        return with_right(parts, right, area.width);
    }
    // The target is worth an ellipsis before it is worth dropping: try
    // shorter forms of the names until it fits.
    for name_room in [w / 3, w / 4, 20, 14] {
        let (parts, target) = header_parts(p, run, label, name_room.max(14), w, false);
        if keep_fitting(&parts, room, 2)[target] {
            return with_right(parts, right, area.width);
        }
    }
    with_right(
        header_parts(p, run, label, 14, w, false).0,
        right,
        area.width,
    )
}

/// In a two-run header, parts up to this priority tell the runs apart.
const APART: u8 = 2;
/// ... and these are kept whole, others dropped first: the knobs that
/// differ, or the target when the knobs do not.
const MUST: u8 = 1;

/// The header's parts, names cut to `name_room`, and where the target is.
/// With a tag (two runs), what differs from the other run ranks high and
/// what both share low; `diff_only` shows only the knobs that differ.
fn header_parts(
    p: &Palette,
    run: &RunView,
    label: Option<Tag<'_>>,
    name_room: usize,
    width: usize,
    diff_only: bool,
) -> (Vec<Part<'static>>, usize) {
    let versus = label.map(|t| t.versus);
    // (prio alone, prio when it sets the runs apart, prio when shared)
    let prio = |alone: u8, shared: u8, f: fn(&RunView) -> String| match versus {
        None => alone,
        Some(v) if f(v) == f(run) => shared,
        Some(_) => APART,
    };
    let mut parts = vec![Part::text(0, " tokbench", p.brand)];
    if let Some(Tag { letter, shown, .. }) = label {
        let series = series_of(letter);
        let glyph = PointKind::Planned.glyph_in(series, false);
        let point = if series == 1 {
            p.point_b
        } else {
            p.point_planned
        };
        let name = if shown {
            p.strong.add_modifier(Modifier::REVERSED)
        } else {
            p.strong
        };
        parts.push(Part::new(
            0,
            vec![
                Span::styled(glyph.to_string(), point),
                Span::styled(format!(" {letter} "), name),
            ],
        ));
    }
    if run.simulated {
        // Two headers on a narrow screen: the badge keeps its colour and
        // gives up its length.
        let badge = if label.is_some() && width < 120 {
            " SIM "
        } else {
            " SIMULATED SERVER "
        };
        parts.push(Part::text(0, badge, p.badge_sim));
    }
    let knobs_differ = versus.is_some_and(|v| v.knobs != run.knobs);
    let target = parts.len();
    let target_prio = match prio(1, 7, |r| r.target.clone()) {
        APART if !knobs_differ => MUST,
        other => other,
    };
    parts.push(Part::text(
        target_prio,
        // What must stay is not cut to the others' length.
        ellipsize(
            &run.target,
            if target_prio == MUST && label.is_some() {
                name_room.max(width / 2)
            } else {
                name_room
            },
        ),
        p.text,
    ));
    let engine = engine_text(run);
    if !engine.is_empty() {
        parts.push(Part::text(
            prio(3, 9, engine_text),
            ellipsize(&engine, name_room),
            p.dim,
        ));
    }
    parts.push(Part::text(
        prio(2, 8, |r| r.model.clone()),
        ellipsize(&run.model, name_room),
        p.strong,
    ));
    parts.push(Part::text(0, run.shape(), p.strong));
    if let Some(profile) = &run.profile {
        parts.push(Part::text(
            prio(3, 9, |r| format!("{:?}", r.profile)),
            ellipsize(profile, name_room),
            p.text,
        ));
    }

    if let Some(ask) = run.length_ask {
        parts.push(Part::text(
            prio(4, 10, |r| format!("{:?}", r.length_ask)),
            ask.label(),
            p.dim,
        ));
    }
    if let Some(knobs) = &run.knobs {
        // Two runs: the knobs this one has and the other has not.
        let other: Vec<&str> = versus
            .and_then(|v| v.knobs.as_deref())
            .map(|k| k.split(' ').collect())
            .unwrap_or_default();
        let own: Vec<&str> = knobs.split(' ').filter(|k| !other.contains(k)).collect();
        let (text, prio) = match versus {
            None => (knobs.clone(), 5),
            Some(_) if own.is_empty() => (knobs.clone(), 11),
            Some(_) if diff_only => (own.join(" "), MUST),
            Some(_) => (knobs.clone(), MUST),
        };
        let room = if prio == MUST && label.is_some() {
            name_room.max(width / 2)
        } else {
            name_room
        };
        parts.push(Part::text(prio, ellipsize(&text, room), p.dim));
    }
    (parts, target)
}

/// `vLLM 0.11.2`.
fn engine_text(run: &RunView) -> String {
    match &run.engine_version {
        Some(v) => format!("{} {v}", run.engine),
        None => run.engine.clone(),
    }
}

/// `parts` fitted to the left and `right` at the right edge.
pub(super) fn with_right(
    parts: Vec<Part<'static>>,
    right: Span<'static>,
    width: u16,
) -> Line<'static> {
    let right_w = right.width() as u16;
    let mut line = fit(parts, width.saturating_sub(right_w + 2), 2);
    let pad = usize::from(width).saturating_sub(line.width() + usize::from(right_w));
    line.spans.push(Span::raw(" ".repeat(pad)));
    line.spans.push(right);
    line
}

fn gauge(done: u32, total: u32, width: usize, style: Style, dim: Style) -> Vec<Span<'static>> {
    let filled = if total == 0 {
        0
    } else {
        ((u64::from(done.min(total)) * width as u64) / u64::from(total)) as usize
    };
    vec![
        Span::styled("█".repeat(filled), style),
        Span::styled("░".repeat(width - filled), dim),
    ]
}

pub(super) fn status_line(app: &App, area: Rect) -> Line<'static> {
    let p = &app.palette;
    let mut parts = Vec::new();
    let in_flight = format!("(in flight {})", app.in_flight);
    match &app.phase {
        Phase::Starting => {
            parts.push(Part::text(0, " starting", p.strong));
        }
        Phase::Warmup {
            requests,
            concurrency,
        } => {
            parts.push(Part::text(0, " WARMUP ", p.badge_paused));
            parts.push(Part::text(
                1,
                format!("{requests} requests at concurrency {concurrency}, not counted"),
                p.text,
            ));
            parts.push(Part::text(0, in_flight, p.text));
        }
        Phase::Running | Phase::Finished { .. } => {
            let label = if area.width >= 60 {
                " Concurrency "
            } else {
                " c "
            };
            let mut concurrency = vec![
                Span::styled(label, p.text),
                Span::styled(app.target.to_string(), p.strong),
            ];
            // A change waiting out the settle window: where it is going.
            match app.pending {
                Some((Pending::Concurrency(n), _)) => {
                    concurrency.push(Span::styled(format!(" → {n}"), p.badge_manual));
                }
                Some((Pending::Rate(r), _)) => {
                    concurrency.push(Span::styled(
                        format!(" → {}/s", crate::report::recorder::rate_label(r)),
                        p.badge_manual,
                    ));
                }
                None => {}
            }
            parts.push(Part::new(0, concurrency));
            if let Some(since) = app.server_gone_since {
                let text = if app.server_back {
                    format!(
                        "server gone since {} — back, starting a new series",
                        clock(since.as_secs())
                    )
                } else {
                    format!(
                        "server gone since {} — waiting (q quits)",
                        clock(since.as_secs())
                    )
                };
                parts.push(Part::text(0, text, p.bad));
            }
            // What is in flight, split: streaming, and waiting for a first
            // token (the client's view of the server's queue).
            // Narrow screens drop the total: it is the sum of the two.
            // The split is longer: it keeps the level's position beside it
            // at 100 columns by dropping the total there too.
            let split = app.waiting_split();
            let wide = area.width >= if split.is_some() { 120 } else { 100 };
            let (open, close) = if wide {
                (format!("(in flight {}: ", app.in_flight), ")")
            } else {
                (String::new(), "")
            };
            // Where the server counts what it runs, the waiting are split
            // each scrape: in prefill inside it, or queued before it.
            let mut spans = vec![
                Span::styled(format!("{open}streaming {}", app.streaming), p.text),
                Span::styled(" · ", p.dim),
            ];
            let busy = |n: u32| if n > 0 { p.strong } else { p.text };
            match split {
                Some((in_prefill, queued)) => {
                    let prefill = if wide { "in prefill" } else { "prefill" };
                    spans.push(Span::styled(format!("{prefill} {in_prefill}"), p.text));
                    spans.push(Span::styled(" · ", p.dim));
                    spans.push(Span::styled(format!("queued {queued}"), busy(queued)));
                }
                None => spans.push(Span::styled(
                    format!("waiting {}", app.waiting()),
                    busy(app.waiting()),
                )),
            }
            spans.push(Span::styled(close, p.text));
            parts.push(Part::new(0, spans));
            // The split caps in prefill at this client's waiting; the rest
            // the server runs is someone else's.
            if let Some((running, others)) = app.other_traffic() {
                parts.push(Part::text(
                    2,
                    format!("server runs {running}: {others} not this sweep's"),
                    p.dim,
                ));
            }
            if let Some(level) = app.current() {
                if let (Some(k), Some(total)) = (level.info.plan_index, level.info.num_prompts) {
                    let plan = app.shown.run.plan.len();
                    let position = match level.info.mode {
                        Mode::Search => format!("probe {}", k + 1),
                        Mode::Replay if app.shown.run.ramp.is_some() => "ramp".into(),
                        Mode::Replay => "replay".into(),
                        Mode::Rate => "rate".into(),
                        // Never `k/n` with k past n.
                        _ if k < plan => format!("level {}/{plan}", k + 1),
                        _ => format!("level {}", k + 1),
                    };
                    // One part, one space: at 80 columns every character
                    // of the status line is spoken for.
                    parts.push(Part::text(
                        1,
                        format!("{position} {}/{total}", level.done),
                        p.text,
                    ));
                    let width = if area.width >= 120 { 20 } else { 8 };
                    parts.push(Part::new(
                        3,
                        gauge(level.done, total, width, p.gauge, p.dim),
                    ));
                } else {
                    parts.push(Part::text(
                        1,
                        format!("{} done", grouped(u64::from(level.done))),
                        p.text,
                    ));
                }
            }
            if let Some(text) = app.current().and_then(|level| mode_text(app, level)) {
                parts.push(Part::text(1, text, p.strong));
            }
            if app.quitting && !app.is_finished() {
                parts.push(Part::text(0, " STOPPING ", p.badge_paused));
            } else if app.is_finished() {
                parts.push(Part::text(0, " FINISHED ", p.badge_plan));
            } else if app.is_manual() {
                parts.push(Part::text(0, " MANUAL ", p.badge_manual));
            } else if app.current().is_some() {
                parts.push(Part::text(0, " PLANNED ", p.badge_plan));
            }
            if app.paused && !app.is_finished() {
                parts.push(Part::text(0, " PAUSED ", p.badge_paused));
            }
            if let Some(level) = app.current().filter(|l| l.info.rate.is_some()) {
                // Open loop: what was offered, what came, how late it went.
                let achieved = level.done as f64
                    / app
                        .elapsed
                        .saturating_sub(level.info.started_at)
                        .as_secs_f64()
                        .max(1.0);
                parts.push(Part::text(2, format!("achieved {achieved:.1}/s"), p.text));
                let late = if level.late_sends == 0 {
                    "sends on time".to_string()
                } else {
                    format!(
                        "{} sent late (max {:.0} ms)",
                        level.late_sends,
                        level.max_send_lag.as_secs_f64() * 1000.0
                    )
                };
                parts.push(Part::text(2, late, p.text));
            }
            if let Some(step) = &app.step_summary {
                parts.push(Part::text(1, step.clone(), p.strong));
            }
            if app.current().is_some() {
                parts.push(Part::text(
                    2,
                    format!("now {} tok/s", compact(app.recent_tok_s)),
                    p.text,
                ));
            }
            if let Some(slots) = slots_in_use(app) {
                parts.push(Part::text(2, slots, p.text));
            }
        }
    }
    with_right(parts, Span::styled("? help ", p.dim), area.width)
}

/// `slots in use ~1` when the streaming mean stayed flat while concurrency
/// grew over the run's finished levels: the server's effective slot count.
/// Where the server told each request's prefill time, those in prefill
/// hold a slot too.
fn slots_in_use(app: &App) -> Option<String> {
    let levels: Vec<&LevelRow> = app
        .shown
        .levels
        .iter()
        .filter(|l| l.info.series == app.series && !l.is_partial())
        .collect();
    let prefill_known = levels.iter().all(|l| l.in_prefill_mean.is_some());
    let slots = crate::analysis::engine_checks::flat_streaming(
        &levels
            .iter()
            .filter_map(|l| {
                let prefill = if prefill_known {
                    l.in_prefill_mean?
                } else {
                    0.0
                };
                Some((l.info.concurrency, l.streaming_mean? + prefill))
            })
            .collect::<Vec<_>>(),
    )?;
    Some(format!("slots in use ~{slots:.0}"))
}

/// What an open-loop level or a search probe adds to the status line:
/// `rate 20/s`, `replay 12.3/40.0 s`, `search 8 ok, 16 no -> 12`.
fn mode_text(app: &App, level: &LevelRow) -> Option<String> {
    match level.info.mode {
        Mode::Rate => level
            .info
            .rate
            .map(|r| format!("rate {}/s", crate::report::recorder::rate_label(r))),
        Mode::Manual if level.info.rate.is_some() => level
            .info
            .rate
            .map(|r| format!("offered {}/s", crate::report::recorder::rate_label(r))),
        Mode::Replay => level.info.timeline.map(|t| {
            let on = app.elapsed.saturating_sub(level.info.started_at).min(t);
            format!("replay {:.1}/{:.1} s", on.as_secs_f64(), t.as_secs_f64())
        }),
        Mode::Search => Some(match app.search {
            None => "search: first probe".into(),
            Some(s) => {
                let bound = |c: Option<u32>| c.map_or_else(|| "-".into(), |c| c.to_string());
                format!(
                    "search {} ok, {} no -> {}",
                    bound(s.passing),
                    bound(s.failing),
                    bound(s.next)
                )
            }
        }),
        Mode::Planned | Mode::Manual => None,
    }
}

/// A tune's line above the run's own: where the tune is, and while a
/// server starts the last line of its log.
pub(super) fn tune_line(app: &App, area: Rect) -> Line<'static> {
    let p = &app.palette;
    let Some(tune) = &app.tune else {
        return Line::default();
    };
    let mut parts = vec![
        Part::text(0, " TUNE ", p.badge_plan.add_modifier(Modifier::REVERSED)),
        Part::text(0, tune.line.clone(), p.strong),
    ];
    if let Some(log) = &tune.log_line {
        let room = usize::from(area.width).saturating_sub(tune.line.chars().count() + 12);
        if room >= 12 {
            parts.push(Part::text(
                1,
                format!("log: {}", ellipsize(log, room - 5)),
                p.dim,
            ));
        }
    }
    fit(parts, area.width.saturating_sub(1), 1)
}
