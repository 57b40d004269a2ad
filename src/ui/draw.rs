//! The screen, drawn from the state alone: `draw(frame, app)` reads `App`
//! and writes cells, nothing else. ratatui diffs each frame against the last
//! one, so only changed cells reach the terminal (no flicker, little output
//! over SSH).
//!
//! Layout, top to bottom: header, concurrency line, TTFT | ITL bars, chart |
//! level table, counters, footer. Below 76 columns the chart goes (or stacks
//! above the table when there are rows to spare); lines drop their least
//! useful parts whole, so nothing is ever cut in the middle of a number.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget};
use ratatui::Frame;

use super::app::{
    App, CostView, LevelRow, LevelState, Pending, Phase, RunView, SparkPoint, OWN_COLUMN,
};
use super::theme::Palette;
use super::widgets::{
    self, clock, compact, dollars, ellipsize, figure, fit, grouped, keep_fitting, percent, times,
    ChartPoint, FrontierChart, Part, PointKind, Spark, ThroughputChart, CAPACITY_GLYPH, KNEE_GLYPH,
    P99_GLYPH, P99_GLYPH_B,
};
use crate::load::driver::Mode;

/// Below this the screen only says it is too small.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 12;
/// Narrower than this, the chart is left out or stacked.
const SIDE_BY_SIDE: u16 = 76;
/// The chart is not worth drawing narrower than this.
const CHART_MIN_WIDTH: u16 = 30;

pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    render(area, frame.buffer_mut(), app);
}

/// The whole screen into `buf` (what `draw` does; benches and tests call it
/// on a bare buffer).
pub fn render(area: Rect, buf: &mut Buffer, app: &App) {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(area, buf, app);
        return;
    }
    if app.is_saved() {
        render_saved(area, buf, app);
        return;
    }
    let h = area.height;
    let counters_h = if h >= 20 { 2 } else { 1 };
    // Bars grow with the screen, but the chart and the table matter more.
    let spark_h = match h {
        0..=29 => 3,
        30..=39 => 5,
        _ => 7,
    };
    let [header, status, sparks, main, counters, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(spark_h),
        Constraint::Min(0),
        Constraint::Length(counters_h),
        Constraint::Length(1),
    ])
    .areas(area);

    let clock = Span::styled(
        format!("{} ", clock(app.elapsed.as_secs())),
        app.palette.strong,
    );
    header_line(app, &app.run, None, clock, header).render(header, buf);
    status_line(app, status).render(status, buf);
    latency_panels(app, sparks, buf);
    main_panels(app, main, buf);
    counter_lines(app, counters, buf);
    footer_line(app, footer).render(footer, buf);
    if app.show_help {
        help(app, area, buf);
    }
}

/// A run read back from disk (`tokbench view`): its identity (or both
/// runs', and a warning when they differ in shape), the chart, the table
/// and the result; no live parts.
fn render_saved(area: Rect, buf: &mut Buffer, app: &App) {
    let Some(saved) = &app.saved else {
        return;
    };
    let top_h = 2 + u16::from(saved.warning.is_some());
    let [top, main, counters, footer] = Layout::vertical([
        Constraint::Length(top_h),
        Constraint::Min(0),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    let p = &app.palette;
    let row = |n: u16| Rect::new(top.x, top.y + n, top.width, 1);
    let started = |run: &RunView| {
        let text = run
            .started_at
            .as_deref()
            .map_or_else(String::new, |s| started_text(s, area.width));
        Span::styled(format!("{text} "), p.dim)
    };
    match saved.other.as_deref() {
        Some(other) => {
            // A first, B second, whichever the table shows.
            let shown = (saved.label, &app.run, true);
            let back = (other.label, &other.run, false);
            let (first, second) = if saved.label == 'A' {
                (shown, back)
            } else {
                (back, shown)
            };
            for (n, (letter, run, is_shown)) in [first, second].into_iter().enumerate() {
                let versus = if is_shown { &other.run } else { &app.run };
                let tag = Tag {
                    letter,
                    shown: is_shown,
                    versus,
                };
                header_line(app, run, Some(tag), started(run), row(n as u16))
                    .render(row(n as u16), buf);
            }
        }
        None => {
            header_line(app, &app.run, None, started(&app.run), row(0)).render(row(0), buf);
            saved_status_line(app, row(1)).render(row(1), buf);
        }
    }
    if let Some(warning) = &saved.warning {
        let room = usize::from(top.width).saturating_sub(2);
        Line::from(vec![
            Span::raw(" "),
            Span::styled(ellipsize(warning, room), p.bad),
        ])
        .render(row(2), buf);
    }
    main_panels(app, main, buf);
    counter_lines(app, counters, buf);
    footer_line(app, footer).render(footer, buf);
    if app.show_help {
        help(app, area, buf);
    }
}

/// `2026-11-29T19:14:00Z` -> `2026-11-29 19:14:00Z` on a wide screen,
/// `2026-11-29 19:14` on a middling one, `2026-11-29` on a narrow one.
fn started_text(iso: &str, width: u16) -> String {
    let spaced = iso.replacen('T', " ", 1);
    // Shorter forms only when it has the expected shape.
    let iso_like = spaced.as_bytes().get(13) == Some(&b':');
    match width {
        120.. => spaced,
        100..=119 if iso_like => spaced.get(..16).unwrap_or(&spaced).to_string(),
        _ if iso_like => spaced.get(..10).unwrap_or(&spaced).to_string(),
        _ => spaced,
    }
}

/// Under a single saved run's header: what it is and what it was judged by.
fn saved_status_line(app: &App, area: Rect) -> Line<'static> {
    let p = &app.palette;
    let levels = app.levels.len();
    let partial = app.levels.iter().filter(|l| l.is_partial()).count();
    let mut parts = vec![Part::text(
        0,
        " SAVED RUN ",
        p.badge_plan.add_modifier(Modifier::REVERSED),
    )];
    let mut count = format!("{levels} level{}", if levels == 1 { "" } else { "s" });
    if partial > 0 {
        count.push_str(&format!(" ({partial} partial)"));
    }
    parts.push(Part::text(0, count, p.text));
    if let Some(slo) = app.saved.as_ref().and_then(|s| s.slo.as_deref()) {
        parts.push(Part::text(2, format!("SLO: {slo}"), p.dim));
    }
    with_right(parts, Span::styled("? help ", p.dim), area.width)
}

fn too_small(area: Rect, buf: &mut Buffer, app: &App) {
    let text = format!("terminal too small: {MIN_WIDTH}x{MIN_HEIGHT} or more");
    let lines = vec![
        Line::styled(text, app.palette.strong),
        Line::styled(
            if app.is_saved() {
                "q quits"
            } else {
                "q quits and saves"
            },
            app.palette.dim,
        ),
    ];
    let y = area.y + area.height.saturating_sub(2) / 2;
    let rest = Rect::new(
        area.x,
        y,
        area.width,
        area.height.saturating_sub(y - area.y),
    );
    Paragraph::new(lines)
        .centered()
        .wrap(ratatui::widgets::Wrap { trim: true })
        .render(rest, buf);
}

// ---------------------------------------------------------------- top lines

/// A run's letter in `tokbench view A B`.
#[derive(Clone, Copy)]
struct Tag<'a> {
    letter: char,
    /// The run the table shows.
    shown: bool,
    /// The other run: what both share matters less on a narrow line than
    /// what sets them apart.
    versus: &'a RunView,
}

/// A run's identity on one line, `right` at the right edge.
fn header_line(
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

    if let Some(ignore_eos) = run.ignore_eos {
        parts.push(Part::text(
            prio(4, 10, |r| format!("{:?}", r.ignore_eos)),
            if ignore_eos {
                "ignore_eos"
            } else {
                "no ignore_eos"
            },
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
fn with_right(parts: Vec<Part<'static>>, right: Span<'static>, width: u16) -> Line<'static> {
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

fn status_line(app: &App, area: Rect) -> Line<'static> {
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
            let wide = area.width >= 100;
            let (open, close) = if wide {
                (format!("(in flight {}: ", app.in_flight), ")")
            } else {
                (String::new(), "")
            };
            parts.push(Part::new(
                0,
                vec![
                    Span::styled(format!("{open}streaming {}", app.streaming), p.text),
                    Span::styled(" · ", p.dim),
                    Span::styled(
                        format!("waiting {}", app.waiting()),
                        if app.waiting() > 0 { p.strong } else { p.text },
                    ),
                    Span::styled(close, p.text),
                ],
            ));
            if let Some(level) = app.current() {
                if let (Some(k), Some(total)) = (level.info.plan_index, level.info.num_prompts) {
                    let position = if level.info.mode == Mode::Search {
                        format!("probe {}", k + 1)
                    } else {
                        format!("level {}/{}", k + 1, app.run.plan.len())
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
fn slots_in_use(app: &App) -> Option<String> {
    let slots = crate::analysis::engine_checks::flat_streaming(
        &app.levels
            .iter()
            .filter(|l| l.info.series == app.series && !l.is_partial())
            .filter_map(|l| Some((l.info.concurrency, l.streaming_mean?)))
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

// ---------------------------------------------------------------- latency

fn latency_panels(app: &App, area: Rect, buf: &mut Buffer) {
    // The queue gets its own bars beside the latencies when the screen is
    // wide enough for three panels; the status line always has its count.
    let (left, right) = if area.width >= QUEUE_BARS_MIN_WIDTH {
        let [left, right, queue] = Layout::horizontal([
            Constraint::Ratio(1, 3),
            Constraint::Ratio(1, 3),
            Constraint::Ratio(1, 3),
        ])
        .areas(area);
        queue_panels(app, queue, buf);
        (left, right)
    } else {
        let [left, right] =
            Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(area);
        (left, right)
    };
    let l = &app.latency;
    let p = &app.palette;
    let ttft: fn(&SparkPoint) -> Option<u64> = |pt| pt.ttft_p99_us;
    let itl: fn(&SparkPoint) -> Option<u64> = |pt| pt.itl_p99_us;
    let panels = [
        (left, "TTFT ms", l.ttft_p50_ms, l.ttft_p99_ms, p.ttft, ttft),
        (right, "ITL ms", l.itl_p50_ms, l.itl_p99_ms, p.itl, itl),
    ];
    for (rect, name, p50, p99, style, value) in panels {
        let title_room = rect.width.saturating_sub(4);
        let title = fit(
            vec![
                // Narrow panels keep the figure and drop the unit word.
                Part::text(
                    0,
                    if title_room >= 22 {
                        name
                    } else {
                        name.trim_end_matches(" ms")
                    },
                    p.title,
                ),
                Part::text(1, format!("p50 {}", figure(p50)), p.strong),
                Part::text(0, format!("p99 {}", figure(p99)), p.strong),
            ],
            title_room,
            2,
        );
        let mut block = Block::bordered()
            .border_type(BorderType::Rounded)
            .border_style(p.border)
            .title(Line::from(padded(title)));
        let caption = "p99 each second, last minute";
        if usize::from(rect.width) >= caption.len() + 6 && rect.height >= 3 {
            block = block.title_bottom(Line::styled(format!(" {caption} "), p.dim).right_aligned());
        }
        let inner = block.inner(rect);
        block.render(rect, buf);
        Spark {
            points: &l.points,
            value,
            style,
            marker_style: p.marker,
        }
        .render(inner, buf);
    }
}

/// Narrower screens show the queue as a count on the status line only.
const QUEUE_BARS_MIN_WIDTH: u16 = 100;

/// Requests waiting for their first token, each second of the last minute:
/// the client's count, and beside it the server's own queue gauge when the
/// probe reads one (vLLM waiting, llama.cpp deferred).
fn queue_panels(app: &App, rect: Rect, buf: &mut Buffer) {
    let client_peak = app
        .latency
        .points
        .iter()
        .filter_map(|pt| pt.waiting)
        .max()
        .unwrap_or(0) as f64;
    if app.server_queue.is_empty() {
        let client: fn(&SparkPoint) -> Option<u64> = |pt| pt.waiting;
        let now = f64::from(app.waiting());
        let peak = client_peak.max(now);
        bars_panel(
            app,
            rect,
            buf,
            "waiting",
            (now, peak),
            client,
            "sent, no token yet",
        );
        return;
    }
    let [left, right] =
        Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(rect);
    let client: fn(&SparkPoint) -> Option<u64> = |pt| pt.waiting;
    let caption = if app.queue_disagrees() {
        "≠ server by >2"
    } else {
        "client"
    };
    let now = f64::from(app.waiting());
    bars_panel(
        app,
        left,
        buf,
        "waiting",
        (now, client_peak.max(now)),
        client,
        caption,
    );
    let server: fn(&SparkPoint) -> Option<u64> = |pt| pt.server_queue;
    let now = app
        .server_queue
        .values()
        .next_back()
        .copied()
        .unwrap_or(0.0);
    let peak = app.server_queue.values().copied().fold(0.0, f64::max);
    bars_panel(
        app,
        right,
        buf,
        "server queue",
        (now, peak),
        server,
        "server",
    );
}

/// One bordered bar panel: `name now N max M` on top, a caption below.
#[allow(clippy::too_many_arguments)]
fn bars_panel(
    app: &App,
    rect: Rect,
    buf: &mut Buffer,
    name: &str,
    (now, peak): (f64, f64),
    value: fn(&SparkPoint) -> Option<u64>,
    caption: &str,
) {
    let p = &app.palette;
    let title = fit(
        vec![
            Part::text(0, name.to_string(), p.title),
            Part::text(0, format!("{now:.0}"), p.strong),
            Part::text(1, format!("max {peak:.0}"), p.strong),
        ],
        rect.width.saturating_sub(4),
        1,
    );
    let mut block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(title)));
    if usize::from(rect.width) >= caption.chars().count() + 6 && rect.height >= 3 {
        let style = if caption.starts_with('≠') {
            p.bad
        } else {
            p.dim
        };
        block = block.title_bottom(Line::styled(format!(" {caption} "), style).right_aligned());
    }
    let inner = block.inner(rect);
    block.render(rect, buf);
    Spark {
        points: &app.latency.points,
        value,
        style: p.itl,
        marker_style: p.marker,
    }
    .render(inner, buf);
}

/// A title with a space either side, as borders want it.
fn padded(line: Line<'_>) -> Vec<Span<'_>> {
    let mut spans = vec![Span::raw(" ")];
    spans.extend(line.spans);
    spans.push(Span::raw(" "));
    spans
}

// ---------------------------------------------------------------- chart and table

fn main_panels(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height < 3 {
        return;
    }
    let table = LevelTable::build(app);
    // Side by side, the table takes its natural width up to a bit over
    // half: the chart needs columns for its x axis.
    let wide_room = area
        .width
        .saturating_sub(CHART_MIN_WIDTH + 2)
        .min(area.width * 11 / 20);
    if area.width >= SIDE_BY_SIDE && area.height >= 6 {
        let variant = table.variant_for(wide_room);
        let table_w = (table.width(&variant) + 2).min(wide_room);
        let [chart_area, right] =
            Layout::horizontal([Constraint::Min(0), Constraint::Length(table_w)]).areas(area);
        chart_panel(app, chart_area, buf);
        // Under the table, what the levels so far add up to, when there is
        // room for it.
        let table_h = (table.rows.len() as u16 + 3).max(5);
        if has_result(app) && right.height >= table_h + VERDICT_MIN_HEIGHT {
            let [table_area, verdict_area] =
                Layout::vertical([Constraint::Length(table_h), Constraint::Min(0)]).areas(right);
            table.render(app, &variant, table_area, buf);
            verdict_panel(app, verdict_area, buf);
        } else {
            table.render(app, &variant, right, buf);
        }
    } else if area.height >= 16 {
        let variant = table.variant_for(area.width.saturating_sub(2));
        let rows_h = (table.rows.len() as u16 + 3).clamp(5, area.height / 2);
        let [chart_area, table_area] =
            Layout::vertical([Constraint::Min(0), Constraint::Length(rows_h)]).areas(area);
        chart_panel(app, chart_area, buf);
        table.render(app, &variant, table_area, buf);
    } else {
        let variant = table.variant_for(area.width.saturating_sub(2));
        table.render(app, &variant, area, buf);
    }
}

/// The verdict panel is not worth fewer rows than this.
const VERDICT_MIN_HEIGHT: u16 = 5;

fn has_result(app: &App) -> bool {
    !app.verdict.is_empty() || app.cost.is_some()
}

/// A word of the result panel and its style.
type Word = (String, Style);

fn words(text: &str, style: Style) -> impl Iterator<Item = Word> + '_ {
    text.split_whitespace().map(move |w| (w.to_string(), style))
}

/// `capacity: ...` with its head word in the head's colour.
fn sentence(line: &str, p: &Palette) -> Vec<Word> {
    match line.split_once(": ") {
        Some((head, rest)) if head.len() <= 12 => {
            let style = match head {
                "capacity" => p.capacity,
                "knee" => p.knee,
                _ => p.strong,
            };
            let mut out: Vec<Word> = words(head, style).collect();
            if let Some(last) = out.last_mut() {
                last.0.push(':');
            }
            out.extend(words(rest, p.text));
            out
        }
        _ => words(line, p.text).collect(),
    }
}

/// The cost at capacity in figures, the verdict first:
/// `cost: $0.322/M vs API $0.65/M: 2.0x cheaper; break-even 855 tok/s =
/// 49% utilization (GPU $2/h at full use)`.
fn cost_words(c: &CostView, p: &Palette) -> Vec<Word> {
    let Some(full) = c.cost_per_m else {
        // Nothing to show in figures: the analysis says why.
        return sentence(&c.verdict, p);
    };
    let (own, at) = match c.effective {
        Some((e, u)) => (e, format!("{} use", percent(u))),
        None => (full, "full use".to_string()),
    };
    let cmp = c.api_price_per_m.map(|api| own.total_cmp(&api));
    let own_style = match cmp {
        Some(std::cmp::Ordering::Less) => p.good,
        Some(std::cmp::Ordering::Greater) => p.bad,
        _ => p.strong,
    };
    let mut w: Vec<Word> = vec![
        ("cost:".into(), p.strong),
        (format!("{}/M", dollars(own)), own_style),
    ];
    if let Some(api) = c.api_price_per_m {
        w.extend(words("vs API", p.text));
        w.push((format!("{}/M:", dollars(api)), p.strong));
        if own < api {
            w.push((times(api / own), p.good));
            w.push(("cheaper;".into(), p.text));
        } else if own > api {
            w.push(("API".into(), p.text));
            w.push((times(own / api), p.bad));
            w.push(("cheaper;".into(), p.text));
        } else {
            w.extend(words("the same;", p.text));
        }
        if let Some(even) = c.break_even_tok_s {
            w.push(("break-even".into(), p.text));
            w.push((grouped(even.round().max(0.0) as u64), p.strong));
            w.push(("tok/s".into(), p.text));
            if let Some(u) = c.break_even_utilization {
                w.push(("=".into(), p.text));
                w.push((percent(u), if u > 1.0 { p.bad } else { p.strong }));
                w.push(("utilization".into(), p.text));
            }
        }
    }
    match c.gpu_price_per_hour {
        Some(gpu) => {
            w.push((format!("(GPU {}/h", dollars(gpu)), p.dim));
            w.extend(words(&format!("at {at})"), p.dim));
        }
        None => w.push((format!("(at {at})"), p.dim)),
    }
    w
}

fn words_width(line: &[Word]) -> usize {
    line.iter()
        .map(|(t, _)| Span::raw(t.as_str()).width())
        .sum::<usize>()
        + line.len().saturating_sub(1)
}

/// Words in lines of `width`, at most `max_lines` of them; an entry cut
/// short ends in `…` after a whole word, so no figure is ever cut.
fn wrap_words(words: &[Word], width: usize, max_lines: usize, p: &Palette) -> Vec<Line<'static>> {
    if width == 0 || max_lines == 0 {
        return Vec::new();
    }
    let mut lines: Vec<Vec<Word>> = Vec::new();
    let mut line: Vec<Word> = Vec::new();
    for (text, style) in words {
        let w = Span::raw(text.as_str()).width();
        let text = if w > width {
            ellipsize(text, width)
        } else {
            text.clone()
        };
        let needed = Span::raw(text.as_str()).width() + usize::from(!line.is_empty());
        if !line.is_empty() && words_width(&line) + needed > width {
            lines.push(std::mem::take(&mut line));
        }
        line.push((text, *style));
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > max_lines {
        lines.truncate(max_lines);
        if let Some(last) = lines.last_mut() {
            while last.len() > 1 && words_width(last) + 2 > width {
                last.pop();
            }
            if words_width(last) + 2 <= width {
                last.push(("…".into(), p.dim));
            }
        }
    }
    lines
        .into_iter()
        .map(|l| {
            let mut spans = Vec::new();
            for (i, (text, style)) in l.into_iter().enumerate() {
                if i > 0 {
                    spans.push(Span::raw(" "));
                }
                spans.push(Span::styled(text, style));
            }
            Line::from(spans)
        })
        .collect()
}

/// What the result panel says, in order, each with its claim on spare
/// lines (lower first) when not everything fits.
fn result_entries(app: &App) -> Vec<(Vec<Word>, u8)> {
    let p = &app.palette;
    let mut entries: Vec<(Vec<Word>, u8)> = Vec::new();
    let mut rest = app.verdict.iter().peekable();
    if let Some(first) =
        rest.next_if(|l| l.starts_with("capacity:") || l.starts_with("no capacity:"))
    {
        entries.push((sentence(first, p), 1));
    }
    if let Some(cost) = &app.cost {
        entries.push((cost_words(cost, p), 0));
    }
    for line in rest {
        let rank = if line.starts_with("knee:") { 2 } else { 3 };
        entries.push((sentence(line, p), rank));
    }
    if app.other().is_some() {
        // Two runs: the header has no room for the SLO; it goes here.
        if let Some(slo) = app.saved.as_ref().and_then(|s| s.slo.as_deref()) {
            entries.push((sentence(&format!("SLO: {slo}"), p), 4));
        }
    }
    entries
}

/// Lines per entry for `height` rows: everything when it fits; else one
/// line each (in order, while rows last), then the spare rows by rank.
fn share_lines(full: &[usize], ranks: &[u8], height: usize) -> Vec<usize> {
    if full.iter().sum::<usize>() <= height {
        return full.to_vec();
    }
    let mut given = vec![0; full.len()];
    let mut left = height;
    for g in given.iter_mut() {
        if left == 0 {
            break;
        }
        *g = 1;
        left -= 1;
    }
    let mut order: Vec<usize> = (0..full.len()).collect();
    order.sort_by_key(|&i| ranks[i]);
    for i in order {
        if given[i] == 0 {
            continue;
        }
        let more = (full[i] - given[i]).min(left);
        given[i] += more;
        left -= more;
    }
    given
}

/// Capacity, cost, knee and the checks that fired, over the levels so far
/// (or the saved run's).
fn verdict_panel(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let title = match &app.saved {
        Some(saved) if saved.other.is_some() => format!("result {}", saved.label),
        Some(_) => "result".into(),
        None if app.is_finished() => "result".into(),
        None => "so far".into(),
    };
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(Line::styled(title, p.title))));
    let inner = block.inner(area);
    block.render(area, buf);
    let width = usize::from(inner.width);
    let height = usize::from(inner.height);
    let entries = result_entries(app);
    let full: Vec<usize> = entries
        .iter()
        .map(|(w, _)| wrap_words(w, width, usize::MAX, p).len())
        .collect();
    let ranks: Vec<u8> = entries.iter().map(|(_, r)| *r).collect();
    let given = share_lines(&full, &ranks, height);
    let mut y = inner.y;
    for ((w, _), n) in entries.iter().zip(given) {
        for line in wrap_words(w, width, n, p) {
            line.render(Rect::new(inner.x, y, inner.width, 1), buf);
            y += 1;
        }
    }
}

/// A series' colour on the chart and in the legend.
pub fn series_style(p: &Palette, series: u8) -> Style {
    widgets::series_style(p, series % SERIES_STYLES as u8)
}

/// The chart series of a run's letter: `A` (and the live run) 0, `B` 1.
fn series_of(label: char) -> u8 {
    u8::from(label == 'B')
}

/// The series of the run the table shows.
fn shown_series(app: &App) -> u8 {
    app.saved.as_ref().map_or(0, |s| series_of(s.label))
}

/// A complete planned (or search) level at the capacity's concurrency: the
/// capacity point on the chart and the highlighted row of the table.
fn is_capacity(capacity: Option<u32>, l: &LevelRow) -> bool {
    l.state == (LevelState::Finished { partial: false })
        && l.info.mode != Mode::Manual
        && capacity == Some(l.info.concurrency)
}

/// `series`: the chart series of every level (a run of `view A B`), or
/// None to give each level its own run's series (a run of several series).
fn points_of(
    levels: &[LevelRow],
    series: Option<u8>,
    capacity: Option<u32>,
    capacity_series: usize,
) -> Vec<ChartPoint> {
    levels
        .iter()
        // A hand-set level that never settled is no result: table only.
        .filter(|l| l.has_results() && !l.unsteady)
        .map(|l| ChartPoint {
            concurrency: l.info.concurrency,
            tok_s: l.figures.output_tok_s,
            p99_ttft_ms: l.figures.ttft_p99_ms,
            kind: kind_of(l),
            partial: l.is_partial(),
            series: series.unwrap_or((l.info.series % SERIES_STYLES) as u8),
            capacity: l.info.series == capacity_series && is_capacity(capacity, l),
        })
        .collect()
}

/// Distinct marks and colours for series; more series than this repeat.
const SERIES_STYLES: usize = 4;

/// The run has more than one series (server settings compared in one run).
fn has_series(levels: &[LevelRow]) -> bool {
    levels
        .iter()
        .any(|l| l.info.series != levels[0].info.series)
}

/// The run shown with its capacity marked, and the other run of `view A B`.
fn chart_points(app: &App) -> Vec<ChartPoint> {
    if app.other().is_none() {
        let latest = app.levels.iter().map(|l| l.info.series).max().unwrap_or(0);
        return points_of(&app.levels, None, app.capacity, latest);
    }
    let series = shown_series(app);
    let mut points = points_of(&app.levels, Some(series), app.capacity, usize::MAX);
    if let Some(other) = app.other() {
        points.extend(points_of(&other.levels, Some(1 - series), None, usize::MAX));
    }
    points
}

fn kind_of(l: &LevelRow) -> PointKind {
    if l.is_running() {
        PointKind::Running
    } else if l.info.mode == Mode::Manual {
        PointKind::Manual
    } else {
        PointKind::Planned
    }
}

fn chart_panel(app: &App, area: Rect, buf: &mut Buffer) {
    if app.frontier {
        return frontier_panel(app, area, buf);
    }
    let p = &app.palette;
    let points = chart_points(app);
    let room = area.width.saturating_sub(4);
    let title = fit(
        vec![
            Part::text(0, "output tok/s", p.title),
            Part::text(1, "vs streams", p.title),
        ],
        room,
        1,
    );
    let legend = chart_legend(app, &points, room, true);
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(title)))
        .title_bottom(Line::from(padded(legend)).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    let x_max = app
        .run
        .plan
        .iter()
        .copied()
        .chain(points.iter().map(|pt| pt.concurrency))
        .chain(app.levels.iter().map(|l| l.info.concurrency))
        .chain(std::iter::once(app.target))
        .max()
        .unwrap_or(1);
    ThroughputChart {
        points: &points,
        x_max,
        palette: p,
        knee: app.knee,
        front: if app.other().is_some() {
            shown_series(app)
        } else {
            (app.series % SERIES_STYLES) as u8
        },
    }
    .render(inner, buf);
}

/// The chart panel toggled by `v`: the same levels as per-user speed
/// against total throughput, each labelled with its streams.
fn frontier_panel(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let points = chart_points(app);
    let room = area.width.saturating_sub(4);
    let unit = match app.run.gpus {
        Some(n) if n > 0 => format!("output tok/s per GPU ({n})"),
        _ => "output tok/s".into(),
    };
    let title = fit(
        vec![
            Part::text(0, unit, p.title),
            Part::text(1, "vs tok/s per user", p.title),
            Part::text(2, "(v: vs streams)", p.dim),
        ],
        room,
        1,
    );
    // Neither p99 TTFT nor the knee is on this chart: no legend entry.
    let legend = chart_legend(app, &points, room, false);
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(title)))
        .title_bottom(Line::from(padded(legend)).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    FrontierChart {
        points: &points,
        palette: p,
        gpus: app.run.gpus,
        front: if app.other().is_some() {
            shown_series(app)
        } else {
            (app.series % SERIES_STYLES) as u8
        },
    }
    .render(inner, buf);
}

/// The marks in use, in words when they fit, glyphs alone when not; the
/// p99 series always says its unit and its axis (`with_p99`: the streams
/// chart; the frontier has neither it nor the knee).
fn chart_legend(app: &App, points: &[ChartPoint], room: u16, with_p99: bool) -> Line<'static> {
    let p = &app.palette;
    let two = app.other().is_some();
    let labels: Vec<(usize, String)> = if !two && has_series(&app.levels) {
        let mut seen: Vec<usize> = app.levels.iter().map(|l| l.info.series).collect();
        seen.dedup();
        seen.into_iter().map(|s| (s, app.series_label(s))).collect()
    } else {
        Vec::new()
    };
    let mut marks: Vec<(char, &str, Style)> = if two {
        vec![
            (PointKind::Planned.glyph_in(0, false), "A", p.point_planned),
            (PointKind::Planned.glyph_in(1, false), "B", p.point_b),
        ]
    } else if !labels.is_empty() {
        labels
            .iter()
            .map(|(s, label)| {
                let series = (*s % SERIES_STYLES) as u8;
                (
                    PointKind::Planned.glyph_in(series, false),
                    label.as_str(),
                    series_style(p, series),
                )
            })
            .collect()
    } else {
        vec![(PointKind::Planned.glyph(false), "level", p.point_planned)]
    };
    if points.iter().any(|pt| pt.partial) {
        marks.push((PointKind::Planned.glyph(true), "partial", p.point_planned));
    }
    if points.iter().any(|pt| pt.kind == PointKind::Manual) {
        marks.push((PointKind::Manual.glyph(false), "manual", p.point_manual));
    }
    if points.iter().any(|pt| pt.kind == PointKind::Running) {
        marks.push((PointKind::Running.glyph(false), "now", p.running));
    }
    if points.iter().any(|pt| pt.capacity) {
        marks.push((CAPACITY_GLYPH, "capacity", p.capacity));
    }
    // The knee and p99 TTFT are marks of the streams axis only.
    if app.knee.is_some() && with_p99 {
        marks.push((KNEE_GLYPH, "knee", p.knee));
    }
    let p99 = if two {
        Part::new(
            0,
            vec![
                Span::styled(P99_GLYPH.to_string(), p.p99),
                Span::styled(P99_GLYPH_B.to_string(), p.p99_b),
                Span::styled(" p99 TTFT ms (right)", p.p99),
            ],
        )
    } else {
        Part::text(0, format!("{P99_GLYPH} p99 TTFT ms (right)"), p.p99)
    };
    let p99_width = if with_p99 {
        p99.spans.iter().map(Span::width).sum::<usize>()
    } else {
        0
    };
    let worded: usize = marks.iter().map(|(_, w, _)| w.len() + 4).sum::<usize>() + p99_width;
    let mut parts = Vec::new();
    if worded <= usize::from(room) {
        for (glyph, word, style) in marks {
            parts.push(Part::text(0, format!("{glyph} {word}"), style));
        }
    } else {
        let glyphs: Vec<Span<'static>> = marks
            .iter()
            .map(|(glyph, _, style)| Span::styled(glyph.to_string(), *style))
            .chain(std::iter::once(Span::styled(" tok/s", p.dim)))
            .collect();
        parts.push(Part::new(1, glyphs));
    }
    if with_p99 {
        parts.push(p99);
    }
    fit(parts, room, 2)
}

/// A column of the level table: its header in three lengths (long, the
/// sketch's, shortest), how much it matters when space runs out (0 stays
/// longest).
struct Column {
    heads: [&'static str; 3],
    prio: u8,
}

const NOTE: usize = 6;

const COLUMNS: [Column; 7] = [
    Column {
        heads: ["streams", "streams", "strm"],
        prio: 0,
    },
    Column {
        heads: ["tok/s/stream", "tok/s/str", "/strm"],
        prio: 1,
    },
    Column {
        heads: ["total tok/s", "tok/s", "tok/s"],
        prio: 0,
    },
    Column {
        heads: ["TTFT p50", "p50", "p50"],
        prio: 3,
    },
    Column {
        heads: ["TTFT p99", "p99", "p99"],
        prio: 1,
    },
    Column {
        heads: ["errors", "err", "err"],
        prio: 2,
    },
    Column {
        heads: ["note", "note", "note"],
        prio: 2,
    },
];

struct TableRow {
    /// A series' heading (its label) instead of a level.
    group: Option<String>,
    mark: char,
    cells: [String; 7],
    style: Style,
    note_style: Style,
    failed: bool,
}

struct LevelTable {
    rows: Vec<TableRow>,
}

/// Which headers (0 long, 1 the sketch's, 2 short) and columns a table is
/// drawn with, and the spaces between columns.
struct Variant {
    tier: usize,
    keep: [bool; 7],
    gap: u16,
}

impl LevelTable {
    fn build(app: &App) -> LevelTable {
        let grouped = app.other().is_none() && has_series(&app.levels);
        let mut rows = Vec::new();
        let mut last_series = None;
        for l in app
            .levels
            .iter()
            .filter(|l| l.has_results() || l.is_running())
        {
            if grouped && last_series != Some(l.info.series) {
                last_series = Some(l.info.series);
                rows.push(TableRow {
                    group: Some(app.series_label(l.info.series)),
                    mark: PointKind::Planned.glyph_in((l.info.series % SERIES_STYLES) as u8, false),
                    cells: Default::default(),
                    style: series_style(&app.palette, (l.info.series % SERIES_STYLES) as u8),
                    note_style: app.palette.dim,
                    failed: false,
                });
            }
            rows.push(Self::row(app, l));
        }
        LevelTable { rows }
    }

    fn row(app: &App, l: &LevelRow) -> TableRow {
        let p = &app.palette;
        let f = &l.figures;
        // Each series has its own capacity; the run's is the latest one's.
        let series_capacity = app
            .series_results
            .iter()
            .find(|r| r.index == l.info.series)
            .map_or(app.capacity, |r| r.capacity);
        let capacity = is_capacity(series_capacity, l);
        let mark = if l.is_running() {
            '▶'
        } else if capacity {
            CAPACITY_GLYPH
        } else {
            // A run of several series marks each row with its series' glyph.
            let series = if app.other().is_none() {
                (l.info.series % SERIES_STYLES) as u8
            } else {
                shown_series(app)
            };
            kind_of(l).glyph_in(series, l.is_partial())
        };
        let complete_plan =
            l.state == (LevelState::Finished { partial: false }) && l.info.mode != Mode::Manual;
        let c = l.info.concurrency;
        let rse = |l: &LevelRow| l.estimate.map(|(_, r)| format!("±{:.0}%", r * 100.0));
        let (note, note_style) = match l.state {
            // A hand-set level says whether it has settled yet.
            LevelState::Running if l.info.mode == Mode::Manual => match (l.is_steady, rse(l)) {
                (true, Some(r)) => (r, p.good),
                (false, Some(r)) => (format!("settling… {r}"), p.dim),
                (_, None) => ("settling…".to_string(), p.dim),
            },
            LevelState::Running => (String::new(), p.text),
            LevelState::Draining => ("draining".into(), p.dim),
            _ if l.unsteady => ("not steady".into(), p.dim),
            LevelState::Finished { partial: true } => ("partial".into(), p.dim),
            LevelState::Finished { partial: false } => {
                if capacity {
                    ("capacity".into(), p.capacity)
                } else if complete_plan && app.knee.is_some_and(|(_, to)| to == c) {
                    ("knee".into(), p.knee)
                } else if l.info.mode == Mode::Manual && l.is_steady {
                    (rse(l).unwrap_or_default(), p.text)
                } else {
                    (String::new(), p.text)
                }
            }
        };
        let has = l.has_results();
        let num = |x: f64| if has { figure(Some(x)) } else { "-".into() };
        TableRow {
            group: None,
            mark,
            cells: [
                c.to_string(),
                num(f.per_stream_tok_s),
                num(f.output_tok_s),
                figure(f.ttft_p50_ms),
                figure(f.ttft_p99_ms),
                grouped(u64::from(l.failed)),
                note,
            ],
            style: if l.is_running() {
                p.running
            } else if capacity {
                // The row the sweep is for: it stands out whole.
                p.capacity
            } else if l.is_partial() || l.unsteady {
                p.dim
            } else {
                p.text
            },
            note_style,
            failed: l.failed > 0,
        }
    }

    fn col_width(&self, i: usize, tier: usize) -> u16 {
        let head = COLUMNS[i].heads[tier];
        self.rows
            .iter()
            .filter(|r| r.group.is_none())
            .map(|r| r.cells[i].chars().count())
            .chain(std::iter::once(head.chars().count()))
            .max()
            .unwrap_or(0) as u16
    }

    /// Mark column, then each kept column with `gap` spaces before it.
    fn width(&self, v: &Variant) -> u16 {
        1 + (0..7)
            .filter(|&i| v.keep[i])
            .map(|i| self.col_width(i, v.tier) + v.gap)
            .sum::<u16>()
    }

    /// Long headers when they fit, then shorter ones and tighter gaps,
    /// then the least useful columns go, until the table fits `room`
    /// (border included).
    fn variant_for(&self, room: u16) -> Variant {
        // The note column only when some row has a note.
        let any_note = self.rows.iter().any(|r| !r.cells[NOTE].is_empty());
        let mut base = [true; 7];
        base[NOTE] = any_note;
        for (tier, gap) in [(0, 2), (1, 2), (2, 1)] {
            let v = Variant {
                tier,
                keep: base,
                gap,
            };
            if self.width(&v) + 2 <= room {
                return v;
            }
        }
        let parts: Vec<Part<'_>> = (0..7)
            .map(|i| {
                let w = if base[i] { self.col_width(i, 2) + 1 } else { 0 };
                Part::text(
                    COLUMNS[i].prio,
                    " ".repeat(usize::from(w)),
                    Style::default(),
                )
            })
            .collect();
        let fits = keep_fitting(&parts, usize::from(room.saturating_sub(3)), 0);
        let mut keep = [false; 7];
        for i in 0..7 {
            keep[i] = base[i] && fits[i];
        }
        Variant {
            tier: 2,
            keep,
            gap: 1,
        }
    }

    fn render(&self, app: &App, v: &Variant, area: Rect, buf: &mut Buffer) {
        let p = &app.palette;
        let mut parts = vec![Part::text(0, "levels", p.title)];
        if let Some(saved) = app.saved.as_ref().filter(|s| s.other.is_some()) {
            // Which run the rows are, and how to see the other.
            parts.push(Part::text(0, format!("run {}", saved.label), p.strong));
            let other = if saved.label == 'A' { 'B' } else { 'A' };
            parts.push(Part::text(2, format!("Tab: {other}"), p.key));
        }
        parts.push(Part::text(1, "TTFT in ms", p.dim));
        let title = fit(parts, area.width.saturating_sub(4), 2);
        let block = Block::new()
            .borders(Borders::ALL)
            .border_type(BorderType::Rounded)
            .border_style(p.border)
            .title(Line::from(padded(title)));
        let inner = block.inner(area);
        block.render(area, buf);
        if inner.height == 0 {
            return;
        }
        let widths: Vec<usize> = (0..7)
            .map(|i| usize::from(self.col_width(i, v.tier)))
            .collect();
        let gap = " ".repeat(usize::from(v.gap));
        // Numbers right-aligned under right-aligned headers; the note is
        // text, left-aligned.
        let cell = |i: usize, text: &str| {
            if i == NOTE {
                format!("{text:<w$}", w = widths[i])
            } else {
                format!("{text:>w$}", w = widths[i])
            }
        };
        let mut header = vec![Span::raw(" ")];
        for i in (0..7).filter(|&i| v.keep[i]) {
            header.push(Span::raw(gap.clone()));
            header.push(Span::styled(cell(i, COLUMNS[i].heads[v.tier]), p.header));
        }
        Line::from(header).render(Rect::new(inner.x, inner.y, inner.width, 1), buf);
        let body_h = usize::from(inner.height - 1);
        if self.rows.is_empty() {
            if body_h > 0 {
                Line::styled("  no level has results yet", p.dim)
                    .render(Rect::new(inner.x, inner.y + 1, inner.width, 1), buf);
            }
            return;
        }
        // The newest rows when they do not all fit: the running level is last.
        let skip = self.rows.len().saturating_sub(body_h);
        for (n, row) in self.rows.iter().skip(skip).enumerate() {
            let y = inner.y + 1 + n as u16;
            if let Some(label) = &row.group {
                let room = usize::from(inner.width).saturating_sub(3);
                Line::from(vec![
                    Span::styled(row.mark.to_string(), row.style),
                    Span::styled(format!(" {}", ellipsize(label, room)), row.style),
                ])
                .render(Rect::new(inner.x, y, inner.width, 1), buf);
                continue;
            }
            let mut spans = vec![Span::styled(row.mark.to_string(), row.style)];
            for i in (0..7).filter(|&i| v.keep[i]) {
                spans.push(Span::raw(gap.clone()));
                let style = match i {
                    5 if row.failed => p.bad,
                    NOTE => row.note_style,
                    _ => row.style,
                };
                spans.push(Span::styled(cell(i, &row.cells[i]), style));
            }
            Line::from(spans).render(Rect::new(inner.x, y, inner.width, 1), buf);
        }
    }
}

// ---------------------------------------------------------------- bottom lines

fn counter_lines(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let c = &app.counters;
    let count_style = |n: u64| if n > 0 { p.bad } else { p.dim };
    let mut parts = vec![
        Part::new(
            0,
            vec![
                Span::styled(" ok ", p.text),
                Span::styled(grouped(c.ok), p.good),
            ],
        ),
        Part::new(
            0,
            vec![
                Span::styled("failed ", p.text),
                Span::styled(grouped(c.failed), count_style(c.failed)),
            ],
        ),
    ];
    let names = ["503", "429", "timeout", "stalled", "closed"];
    // 503, 429 and timeouts also as a rate over the last seconds: a total
    // says what happened, a rate says whether it is still happening.
    let rates = app.failure_rates();
    for (i, (key, name)) in OWN_COLUMN.iter().zip(names).enumerate() {
        let n = c.class(key);
        let rate = rates
            .get(i)
            .copied()
            .flatten()
            .map_or_else(String::new, |r| format!(" {}/s", rate_figure(r)));
        let text = if name.starts_with(|ch: char| ch.is_ascii_digit()) {
            format!("{name} ×{}{rate}", grouped(n))
        } else {
            format!("{name} {}{rate}", grouped(n))
        };
        // 503 and 429 stay longest: they say the server's queue is full.
        let prio = if name.len() == 3 { 1 } else { 2 };
        parts.push(Part::text(prio, text, count_style(n)));
    }
    let other = c.other();
    if other > 0 {
        parts.push(Part::text(2, format!("other {}", grouped(other)), p.bad));
    }
    if c.cancelled > 0 {
        parts.push(Part::text(
            3,
            format!("cancelled {}", grouped(c.cancelled)),
            p.dim,
        ));
    }
    if let Some(text) = server_text(app) {
        parts.push(Part::text(3, text, p.dim));
    }
    if !app.is_saved() {
        let cpu = app
            .client_cpu
            .map_or_else(|| "-".to_string(), |v| format!("{v:.0}%"));
        parts.push(Part::text(3, format!("client cpu {cpu}"), p.dim));
        // Beside it, how late the client read its sockets (kernel clock only).
        if let Some(lag) = app.client_rx_lag_p99() {
            parts.push(Part::text(3, format!("rx lag p99 {lag:.1} ms"), p.dim));
        }
    }
    fit(parts, area.width, 2).render(Rect::new(area.x, area.y, area.width, 1), buf);
    if area.height >= 2 {
        let line = match &c.last_error {
            Some(e) => {
                let label = " last error: ";
                let room = usize::from(area.width).saturating_sub(label.len() + 1);
                Line::from(vec![
                    Span::styled(label, p.text),
                    Span::styled(ellipsize(e, room), p.bad),
                ])
            }
            None => Line::styled(" no errors", p.dim),
        };
        line.render(Rect::new(area.x, area.y + 1, area.width, 1), buf);
    }
}

/// A per-second rate: one decimal under 10, whole above.
fn rate_figure(r: f64) -> String {
    if r < 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.0}")
    }
}

/// The server's own gauges in one short phrase, in the order a person reads
/// them: what runs, what waits, how full the cache is.
fn server_text(app: &App) -> Option<String> {
    if app.server_missing {
        return Some("no server metrics".into());
    }
    let g = app.server.as_ref()?;
    let mut words = Vec::new();
    let int = |v: f64| format!("{v:.0}");
    if let Some(v) = g.get("running") {
        words.push(format!("running {}", int(*v)));
    }
    if let Some(v) = g.get("waiting") {
        words.push(format!("waiting {}", int(*v)));
    }
    if let Some(v) = g.get("kv_cache_usage") {
        words.push(format!("KV {:.0}%", v * 100.0));
    }
    if let Some(v) = g.get("preemptions").filter(|v| **v > 0.0) {
        words.push(format!("preempt {}", int(*v)));
    }
    if let (Some(b), Some(t)) = (g.get("slots_busy"), g.get("slots_total")) {
        words.push(format!("slots {}/{}", int(*b), int(*t)));
    } else if let Some(v) = g.get("processing") {
        words.push(format!("processing {}", int(*v)));
    }
    if let Some(v) = g.get("deferred") {
        words.push(format!("deferred {}", int(*v)));
    }
    if let Some(v) = g.get("gpu_share") {
        words.push(format!("on GPU {:.0}%", v * 100.0));
    }
    if let Some(v) = g.get("gpu_util_pct") {
        words.push(format!("GPU {:.0}%", v));
    }
    if let Some(v) = g.get("gpu_power_w") {
        words.push(format!("{:.0} W", v));
    }
    (!words.is_empty()).then(|| format!("server: {}", words.join(" ")))
}

fn footer_line(app: &App, area: Rect) -> Line<'static> {
    let p = &app.palette;
    let key = |k: &str, what: &str, prio: u8| {
        Part::new(
            prio,
            vec![
                Span::styled(k.to_string(), p.key),
                Span::styled(format!(" {what}"), p.dim),
            ],
        )
    };
    let mut parts = Vec::new();
    if let Some(prompt) = &app.prompt {
        // The `s` prompt takes the whole line.
        let mut spans = vec![
            Span::styled(" new series label: ", p.strong),
            Span::styled(
                prompt.text.clone(),
                p.text.add_modifier(Modifier::UNDERLINED),
            ),
            Span::styled("▏", p.key),
        ];
        match &prompt.error {
            Some(e) => spans.push(Span::styled(format!("  {e}"), p.bad)),
            None => spans.push(Span::styled("  Enter accepts, Esc cancels", p.dim)),
        }
        return Line::from(spans);
    }
    if let Some(note) = app.status() {
        parts.push(Part::text(0, note.to_string(), p.strong));
    }
    match &app.phase {
        _ if app.is_saved() => {
            parts.push(key("q", "quit", 0));
            if let Some(saved) = app.saved.as_ref().filter(|s| s.other.is_some()) {
                let other = if saved.label == 'A' { 'B' } else { 'A' };
                parts.push(key("Tab", &format!("table of run {other}"), 0));
            }
            parts.push(key("?", "help", 1));
            parts.push(Part::text(
                2,
                format!("results: {}", app.run.result_dir),
                p.dim,
            ));
        }
        Phase::Finished { error: Some(e), .. } => {
            parts.push(Part::text(0, format!("run failed: {e}"), p.bad));
            parts.push(key("q", "quit", 0));
        }
        Phase::Finished { .. } => {
            parts.push(Part::text(0, "sweep finished — q to quit", p.strong));
            parts.push(key("s", "new series (or restart the server)", 1));
            parts.push(Part::text(
                1,
                format!("results: {}", app.run.result_dir),
                p.dim,
            ));
            parts.push(key("?", "help", 2));
        }
        _ if app.quitting => {
            parts.push(Part::text(
                0,
                "stopping: cancelling requests in flight, saving results…",
                p.strong,
            ));
        }
        _ => {
            parts.push(key("+ - ] [", "concurrency", 0));
            parts.push(key("n", "next level", 1));
            parts.push(key("s", "series", 2));
            parts.push(key("p", if app.paused { "resume" } else { "pause" }, 1));
            parts.push(key("q", "quit & save", 0));
            parts.push(key("?", "help", 2));
        }
    }
    let mut line = fit(parts, area.width.saturating_sub(1), 2);
    line.spans.insert(0, Span::raw(" "));
    line
}

// ---------------------------------------------------------------- help

const HELP: [(&str, &str); 12] = [
    (
        "TTFT",
        "request sent -> first generated token: prefill + queueing",
    ),
    (
        "ITL",
        "gap between output chunks of a stream, pooled over streams",
    ),
    (
        "bars",
        "one column a second: its p99; │ marks a concurrency change",
    ),
    (
        "p50 p99",
        "median, 99th percentile; queueing shows in p99 first",
    ),
    (
        "tok/s/stream",
        "total output tok/s / streams: what each user gets",
    ),
    (
        "total tok/s",
        "output tokens of all streams per second: capacity",
    ),
    (
        "in flight",
        "requests sent and not yet answered, all levels",
    ),
    (
        "errors",
        "503 queue full, 429 overloaded, timeout, stalled, closed",
    ),
    ("client cpu", "this tokbench process, % of one core"),
    (
        "chart",
        "● level ○ partial ◆ manual ◉ running × p99 TTFT (right)",
    ),
    (
        "capacity",
        "★ highest level meeting the SLO, at or below the knee",
    ),
    (
        "knee",
        "┊ where more streams add little output, p99 TTFT jumps",
    ),
];

const KEYS: [(&str, &str); 6] = [
    ("+ =  -", "one stream more / fewer (switches to MANUAL)"),
    ("]  [", "double / halve the streams (MANUAL)"),
    ("n", "next planned level (a planned one ends as partial)"),
    ("p", "pause / resume sending; requests in flight finish"),
    (
        "q Esc",
        "stop, save all (current level partial), print table",
    ),
    // One line with `?`: at 80x24 the help has no row to spare.
    (
        "?  v",
        "this help (Esc closes it); v: chart vs tok/s per user",
    ),
];

const SAVED_KEYS: [(&str, &str); 4] = [
    ("q Esc", "quit (nothing is sent: a saved run)"),
    ("Tab", "two runs: the table, marks and result of the other"),
    ("v", "chart: tok/s vs streams, or vs tok/s per user"),
    ("?", "this help; Esc closes it"),
];

/// The help's lines that speak of live parts, left out for a saved run.
const LIVE_ONLY: [&str; 4] = ["ITL", "bars", "in flight", "client cpu"];

fn help(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let saved = app.is_saved();
    let two = app.other().is_some();
    let help: Vec<(&str, &str)> = HELP
        .iter()
        .copied()
        .filter(|(k, _)| !saved || !LIVE_ONLY.contains(k))
        .map(|(k, what)| match k {
            "chart" if two => (k, "● A ■ B ○ partial ◆ manual  × + p99 TTFT (right)"),
            "chart" if saved => (k, "● level ○ partial ◆ manual  × p99 TTFT (right)"),
            _ => (k, what),
        })
        .collect();
    let keys: Vec<(&str, &str)> = if saved {
        SAVED_KEYS
            .iter()
            .copied()
            .filter(|(k, _)| two || *k != "Tab")
            .collect()
    } else {
        KEYS.to_vec()
    };
    let label_w = help
        .iter()
        .chain(keys.iter())
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<Line<'_>> = Vec::new();
    let shape = format!("figures at {} tokens", app.run.shape());
    lines.push(Line::styled(format!(" {shape}"), p.dim));
    for (k, what) in help {
        lines.push(Line::from(vec![
            Span::styled(format!(" {k:<label_w$}  "), p.strong),
            Span::styled(what, p.text),
        ]));
    }
    lines.push(Line::raw(""));
    for &(k, what) in &keys {
        lines.push(Line::from(vec![
            Span::styled(format!(" {k:<label_w$}  "), p.key),
            Span::styled(what, p.text),
        ]));
    }
    let content_w = lines.iter().map(Line::width).max().unwrap_or(0) as u16 + 1;
    let w = (content_w + 2).min(area.width.saturating_sub(2));
    let h = (lines.len() as u16 + 2).min(area.height.saturating_sub(2));
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    Clear.render(rect, buf);
    // Lines wider than a small screen are cut at the border: this is prose,
    // not figures.
    Paragraph::new(lines)
        .block(
            Block::bordered()
                .border_type(BorderType::Double)
                .border_style(p.title)
                .title(Line::styled(" what the figures mean ", p.title)),
        )
        .render(rect, buf);
}

#[cfg(test)]
mod server_line_tests {
    use super::*;
    use crate::ui::scenes::{article_run, Scene};
    use crate::ui::theme::ColorMode;

    #[test]
    fn server_gauges_read_as_one_phrase() {
        let mut scene = Scene::new(article_run(false), ColorMode::None);
        let app = &mut scene.app;
        assert_eq!(server_text(app), None, "nothing before the first scrape");
        let mut sample = crate::probe::live::ServerSample::default();
        sample.gauges.insert("running", 32.0);
        sample.gauges.insert("waiting", 3.0);
        sample.gauges.insert("kv_cache_usage", 0.714);
        sample.gauges.insert("preemptions", 0.0);
        app.on_server_sample(&sample);
        assert_eq!(
            server_text(app).as_deref(),
            Some("server: running 32 waiting 3 KV 71%")
        );
        // A GPU sample joins the server's gauges instead of replacing them.
        let mut gpu = crate::probe::live::ServerSample::default();
        gpu.gauges.insert("gpu_util_pct", 85.0);
        gpu.gauges.insert("gpu_power_w", 400.0);
        app.on_server_sample(&gpu);
        assert_eq!(
            server_text(app).as_deref(),
            Some("server: running 32 waiting 3 KV 71% GPU 85% 400 W")
        );
        app.server_missing = true;
        assert_eq!(server_text(app).as_deref(), Some("no server metrics"));
    }

    #[test]
    fn the_server_queue_gets_its_bars_on_a_wide_screen_only() {
        let render = |app: &App, w: u16, h: u16| {
            let mut terminal =
                ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).expect("terminal");
            terminal.draw(|f| draw(f, app)).expect("draw");
            let buffer = terminal.backend().buffer().clone();
            buffer
                .content()
                .iter()
                .map(|c| c.symbol())
                .collect::<String>()
        };
        let mut scene = Scene::new(article_run(false), ColorMode::None);
        let app = &mut scene.app;
        // The client's own queue bars are there from the start.
        let first = render(app, 160, 48);
        assert!(
            !first.contains("server queue") && first.contains("waiting 0"),
            "{first}"
        );
        for (second, waiting) in [(1u64, 0.0), (2, 5.0), (3, 24.0)] {
            let mut sample = crate::probe::live::ServerSample {
                at: std::time::Duration::from_secs(second),
                ..Default::default()
            };
            sample.gauges.insert("waiting", waiting);
            app.on_server_sample(&sample);
        }
        let wide = render(app, 160, 48);
        assert!(wide.contains("server queue"), "{wide}");
        assert!(wide.contains("server queue 24 max 24"), "{wide}");
        // At 80 columns the two latency panels keep the row; the status
        // line still counts what waits.
        let narrow = render(app, 80, 24);
        assert!(
            !narrow.contains("server queue") && narrow.contains("waiting"),
            "{narrow}"
        );
    }
}
