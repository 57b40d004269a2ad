//! The screen, drawn from the state alone: `draw(frame, app)` reads `App`
//! and writes cells, nothing else. ratatui diffs each frame against the last
//! one, so only changed cells reach the terminal (no flicker, little output
//! over SSH).
//!
//! Layout, top to bottom: header, concurrency line, TTFT | ITL bars, chart |
//! level table, counters, footer. Below 76 columns the chart goes (or stacks
//! above the table when there are rows to spare); lines drop their least
//! useful parts whole, so nothing is ever cut in the middle of a number.
//!
//! This file keeps `draw`/`render` and the layout of the panels; each part
//! of the screen has its own file: `header` (top lines), `latency` (bars),
//! `verdict`, `chart`, `table` (level table), `footer` (bottom lines), `help`.
//! See docs/architecture.md, section 6 (a screen panel).

mod chart;
pub(crate) use chart::SERIES_STYLES;
mod footer;
mod header;
mod help;
mod latency;
mod ramp;
pub(crate) use ramp::{saved_ramp_figures, RampFigures};
mod table;
mod verdict;

use super::app::{App, RunView};
use super::widgets::{clock, ellipsize, Part};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};
use ratatui::Frame;

use chart::chart_panel;
use footer::{counter_lines, footer_line};
use header::{header_line, status_line, tune_line, with_right, Tag};
use help::help;
use latency::latency_panels;
use table::LevelTable;
use verdict::{has_result, verdict_panel, VERDICT_MIN_HEIGHT};

/// Below this the screen only says it is too small.
pub(crate) const MIN_WIDTH: u16 = 40;
pub(crate) const MIN_HEIGHT: u16 = 12;
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
pub(crate) fn render(area: Rect, buf: &mut Buffer, app: &App) {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(area, buf, app);
        return;
    }
    if app.is_saved() {
        render_saved(area, buf, app);
        return;
    }
    // A tune takes the top row for where it is.
    let area = match app.tune {
        Some(_) => {
            let row = Rect::new(area.x, area.y, area.width, 1);
            tune_line(app, row).render(row, buf);
            Rect::new(area.x, area.y + 1, area.width, area.height - 1)
        }
        None => area,
    };
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
        match app.seconds_left() {
            Some(left) => format!(
                "{} ~{} left ",
                clock(app.elapsed.as_secs()),
                crate::analysis::fit::duration_words(left)
            ),
            None => format!("{} ", clock(app.elapsed.as_secs())),
        },
        app.palette.strong,
    );
    header_line(app, &app.shown.run, None, clock, header).render(header, buf);
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
            let shown = (app.shown.label, &app.shown.run, true);
            let back = (other.label, &other.run, false);
            let (first, second) = if app.shown.label == 'A' {
                (shown, back)
            } else {
                (back, shown)
            };
            for (n, (letter, run, is_shown)) in [first, second].into_iter().enumerate() {
                let versus = if is_shown { &other.run } else { &app.shown.run };
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
            header_line(app, &app.shown.run, None, started(&app.shown.run), row(0))
                .render(row(0), buf);
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
    let levels = app.shown.levels.len();
    let partial = app.shown.levels.iter().filter(|l| l.is_partial()).count();
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
    if let Some(slo) = app.shown.slo.as_deref() {
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

#[cfg(test)]
mod server_line_tests {
    use super::footer::server_text;
    use super::*;
    use crate::ui::scenes::{article_run, Scene};
    use crate::ui::theme::ColorMode;

    #[test]
    fn server_gauges_read_as_one_phrase() {
        let mut scene = Scene::new(article_run(false), ColorMode::None);
        let app = &mut scene.app;
        assert_eq!(server_text(app), None, "nothing before the first scrape");
        app.on_server_sample(&crate::probe::live::ServerSample::of(&[
            ("running", 32.0),
            ("waiting", 3.0),
            ("kv_cache_usage", 0.714),
            ("preemptions", 0.0),
        ]));
        assert_eq!(
            server_text(app).as_deref(),
            Some("server: running 32 waiting 3 KV 71%")
        );
        // A GPU sample joins the server's gauges instead of replacing them.
        app.on_server_sample(&crate::probe::live::ServerSample::of(&[
            ("gpu_util_pct", 85.0),
            ("gpu_power_w", 400.0),
        ]));
        assert_eq!(
            server_text(app).as_deref(),
            Some("server: running 32 waiting 3 KV 71% GPU 85% 400 W")
        );
        // A DCGM exporter's energy counters: 9000 J = 2.5 Wh.
        app.on_server_sample(&crate::probe::live::ServerSample::of(&[(
            crate::stats::gauges::ENERGY_J,
            9000.0,
        )]));
        assert_eq!(
            server_text(app).as_deref(),
            Some("server: running 32 waiting 3 KV 71% GPU 85% 400 W 2.5 Wh so far")
        );
        app.server_missing = true;
        assert_eq!(server_text(app).as_deref(), Some("no server metrics"));
    }

    /// With no error to show, the footer's second line carries the last
    /// finished level's own account from the server, and the waiting split
    /// by its prefill times: 3.1 waiting of which 0.9 in prefill is 2.2
    /// queued. Cut to fit at 80 columns.
    #[test]
    fn the_footer_tells_the_servers_own_account_of_the_last_level() {
        use crate::ui::scenes::Screen;
        let mut app = Screen::MidSweep.build(ColorMode::None);
        assert_eq!(super::footer::last_account(&app), None);
        let finished: Vec<usize> = (0..app.shown.levels.len())
            .filter(|&i| {
                let l = &app.shown.levels[i];
                !l.is_running() && !l.is_partial()
            })
            .collect();
        let last = *finished.last().expect("a finished level");
        let level = &mut app.shown.levels[last];
        level.account_line =
            Some("TTFT mean: client 14 ms, server 13 ms (queue 1.2, prefill 11): 0.8 ms outside the engine".into());
        level.waiting_mean = Some(3.1);
        level.in_prefill_mean = Some(0.9);
        let c = level.info.concurrency;
        let text = super::footer::last_account(&app).expect("an account");
        assert_eq!(
            text,
            format!("c{c} server's own TTFT mean: client 14 ms, server 13 ms (queue 1.2, prefill 11): 0.8 ms outside the engine · queued 2.2, in prefill 0.9")
        );
        for (w, h) in [(80u16, 24u16), (160, 48)] {
            let mut terminal =
                ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).expect("terminal");
            terminal.draw(|f| draw(f, &app)).expect("draw");
            let screen: Vec<String> = (0..h)
                .map(|y| {
                    (0..w)
                        .map(|x| terminal.backend().buffer()[(x, y)].symbol().to_string())
                        .collect()
                })
                .collect();
            assert!(
                screen
                    .iter()
                    .any(|l| l.contains(&format!("c{c} server's own TTFT mean: client 14 ms"))),
                "{w}x{h}:\n{}",
                screen.join("\n")
            );
        }
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
