//! Full-screen snapshots through ratatui's `TestBackend`: every screen of
//! `scenes::Screen` at 80x24 and 160x48, compared with the text files under
//! `src/ui/snapshots/` (review them like code: they are the screen).
//!
//! After an intended change to the screen, regenerate with
//! `UPDATE_SNAPSHOTS=1 cargo test --lib ui::snapshot_tests` and read the diff.

use std::path::PathBuf;

use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::Terminal;

use super::app::App;
use super::draw;
use super::scenes::Screen;
use super::theme::ColorMode;

const SIZES: [(u16, u16); 2] = [(80, 24), (160, 48)];

fn render(app: &App, w: u16, h: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|frame| draw::draw(frame, app))
        .expect("draw on a test backend");
    terminal.backend().buffer().clone()
}

/// A screen drawn at w x h, as text.
pub(crate) fn render_text(app: &App, w: u16, h: u16) -> String {
    text(&render(app, w, h))
}

/// The buffer as text, one line a row, trailing blanks cut.
pub(crate) fn text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        let mut skip = 0;
        for x in area.left()..area.right() {
            // A wide glyph covers the next cell(s); their content is not drawn.
            if skip > 0 {
                skip -= 1;
                continue;
            }
            let sym = buf[(x, y)].symbol();
            skip = ratatui::text::Span::raw(sym).width().saturating_sub(1);
            line.push_str(sym);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn snapshot_path(name: &str, w: u16, h: u16) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/ui/snapshots")
        .join(format!("{name}-{w}x{h}.txt"))
}

fn check_snapshot(name: &str, w: u16, h: u16, got: &str) {
    let path = snapshot_path(name, w, h);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir snapshots");
        std::fs::write(&path, got).expect("write snapshot");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with UPDATE_SNAPSHOTS=1 cargo test --lib ui::snapshot_tests",
            path.display()
        )
    });
    if want != got {
        let diff: Vec<String> = want
            .lines()
            .zip(got.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| format!("line {}:\n  want |{a}|\n  got  |{b}|", i + 1))
            .collect();
        panic!(
            "{name} at {w}x{h} differs from {}:\n{}\n\nthe whole screen:\n{got}",
            path.display(),
            diff.join("\n")
        );
    }
}

/// What every screen must show, whatever the size.
fn common_checks(screen: Screen, w: u16, h: u16, t: &str) {
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), usize::from(h));
    for line in &lines {
        assert!(
            line.chars().count() <= usize::from(w),
            "{screen:?} {w}x{h}: a line is wider than the screen: {line}"
        );
    }
    // A tune's line comes first; the run's own header under it.
    let tune = matches!(screen, Screen::Tune | Screen::TuneStarting);
    if tune {
        assert!(lines[0].starts_with(" TUNE  setting 2/3 np=2"), "{t}");
    }
    let header = lines[usize::from(tune)];
    assert!(header.contains("tokbench"), "{header}");
    assert!(header.contains("in 1024 / out 1024"), "{header}");
    if screen != Screen::Help && screen != Screen::TuneStarting {
        // The header's clock is at the right edge.
        assert!(
            header.trim_end().len() >= 8
                && header.trim_end().ends_with(|c: char| c.is_ascii_digit()),
            "{header}"
        );
        assert!(t.contains("TTFT ms") && t.contains("ITL ms"), "{t}");
        shows(t, &["levels", "ok "]);
    }
    if w >= 76 {
        assert!(
            t.contains("output tok/s"),
            "{screen:?} {w}x{h}: no chart\n{t}"
        );
    }
}

#[test]
fn screens_match_their_snapshots() {
    for screen in Screen::ALL {
        let app = screen.build(ColorMode::None);
        for (w, h) in SIZES {
            let got = text(&render(&app, w, h));
            common_checks(screen, w, h, &got);
            check_snapshot(screen.name(), w, h, &got);
        }
    }
}

/// Each of `parts` is on the screen `t`.
fn shows(t: &str, parts: &[&str]) {
    for part in parts {
        assert!(t.contains(part), "{part} missing\n{t}");
    }
}

fn screen_text(screen: Screen, w: u16, h: u16) -> String {
    text(&render(&screen.build(ColorMode::None), w, h))
}

/// With the server's running count, the status line splits the waiting
/// into in prefill (running, not streaming yet) and queued (the rest):
/// 16 in flight, 8 streaming, the server running 12: 4 in prefill, 4
/// queued. Without one (Ollama), the single count stays.
#[test]
fn the_waiting_are_split_by_the_servers_running_count() {
    let mut app = Screen::FirstLevel.build(ColorMode::None);
    app.set_queue(16, 8);
    assert_eq!(app.waiting_split(), None);
    let t = text(&render(&app, 120, 40));
    shows(&t, &["streaming 8 · waiting 8", "sent, no token yet"]);
    // Ollama: one count, and the panel says when the split comes.
    let mut ollama = Screen::FirstLevel.build(ColorMode::None);
    ollama.shown.run.engine = "ollama".into();
    ollama.set_queue(16, 8);
    let t = text(&render(&ollama, 120, 40));
    shows(&t, &["streaming 8 · waiting 8", "split at level end"]);
    app.server = Some([("running", 12.0)].into_iter().collect());
    assert_eq!(app.waiting_split(), Some((4, 4)));
    for (w, h) in SIZES {
        let t = text(&render(&app, w, h));
        let prefill = if w >= 120 {
            "in prefill 4"
        } else {
            "prefill 4"
        };
        shows(&t, &[&format!("streaming 8 · {prefill} · queued 4")]);
    }
    // At 100 columns the level's position still fits beside the split.
    let t = text(&render(&app, 100, 30));
    shows(&t, &["streaming 8 · prefill 4 · queued 4", "level 1/6"]);
    // More running than in flight (another client's requests): none of
    // this client's is queued.
    app.server = Some([("slots_busy", 30.0)].into_iter().collect());
    assert_eq!(app.waiting_split(), Some((8, 0)));
    let t = text(&render(&app, 160, 48));
    shows(
        &t,
        &[
            "in prefill 8 · queued 0",
            "server runs 30: 14 not this sweep's",
        ],
    );
    // A level that just drained, the scrape still counting its requests:
    // not another client.
    app.server = Some([("running", 16.0)].into_iter().collect());
    app.set_queue(2, 2);
    assert_eq!(app.other_traffic(), None);
}

#[test]
fn first_level_running() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::FirstLevel, w, h);
        shows(&t, &["Concurrency 1", "streaming 1 · waiting 0"]);
        if w >= 100 {
            assert!(t.contains("(in flight 1: streaming 1"), "{t}");
        }
        shows(&t, &["level 1/6", "5/10", "PLANNED"]);
        assert!(t.contains('▶'), "the running row is marked\n{t}");
    }
}

#[test]
fn mid_sweep_shows_the_article_table() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::MidSweep, w, h);
        shows(&t, &["Concurrency 32", "level 4/6", "214/320"]);
        // Three finished planned levels on the chart and in the table,
        // the capacity (16) as a star in both.
        assert_eq!(
            t.matches('●').count(),
            2 + 2 + 1,
            "2 points, 2 rows, 1 legend\n{t}"
        );
        assert_eq!(t.matches('★').count(), 3, "point, row, legend\n{t}");
        assert!(t.contains('◉'), "the running level's point\n{t}");
        // The ticks of the log2 axis carry real concurrency values.
        assert!(t.contains(" 16 ") && t.contains(" 64 "), "{t}");
    }
}

#[test]
fn v_turns_the_chart_to_the_frontier() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Frontier, w, h);
        assert!(t.contains("output tok/s vs tok/s per user"), "{t}");
        // The same levels, each beside its streams: the running one too.
        for label in ["●1", "●4", "★16", "◉32"] {
            assert!(t.contains(label), "{label}\n{t}");
        }
        // Nothing of the streams axis: no p99 TTFT series, no log2 ticks.
        assert!(!t.contains("p99 TTFT ms (right)"), "{t}");
        assert!(
            t.lines()
                .filter(|l| !l.contains("503 ×"))
                .all(|l| !l.contains('×')),
            "{t}"
        );
        let streams = screen_text(Screen::MidSweep, w, h);
        assert!(
            streams.contains("p99 TTFT ms (right)") || w < 100,
            "{streams}"
        );
        // Per GPU (`--gpus 8`): 2,034 tok/s at the top is 254 a GPU.
        let t = screen_text(Screen::FrontierFinished, w, h);
        shows(&t, &["output tok/s per GPU (8)", "500┤", "★32", "●128"]);
    }
}

#[test]
fn manual_mode_is_visible() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Manual, w, h);
        shows(&t, &["MANUAL", "Concurrency 34"]);
        // The planned level cut short is hollow on the chart and in the table.
        assert!(t.contains('○'), "the cut planned level\n{t}");
        if w >= 160 {
            assert!(t.contains("partial"), "{t}");
        }
        assert!(t.contains('◆'), "manual levels have their own mark\n{t}");
        assert!(t.contains('│'), "{t}");
    }
}

#[test]
fn paused_is_visible() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Paused, w, h);
        assert!(t.contains("PAUSED"), "{t}");
        assert!(t.contains("resume"), "the footer offers to resume\n{t}");
    }
}

#[test]
fn errors_are_counted_by_class() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Errors, w, h);
        shows(&t, &["503 ×", "429 ×", "last error:"]);
        let failed_line = t.lines().find(|l| l.contains("failed ")).expect("counters");
        assert!(!failed_line.contains("failed 0"), "{failed_line}");
    }
}

#[test]
fn help_explains_every_metric() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Help, w, h);
        shows(
            &t,
            &[
                "TTFT",
                "ITL",
                "p50 p99",
                "tok/s/stream",
                "in flight",
                "errors",
            ],
        );
    }
}

#[test]
fn finished_waits_for_q_and_says_simulated() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Finished, w, h);
        shows(
            &t,
            &["SIMULATED SERVER", "sweep finished — q to quit", "FINISHED"],
        );
    }
}

/// No size panics and nothing overlaps: every screen at every size from
/// 1x1 up, and below 40x12 the note says so.
#[test]
fn any_size_renders() {
    let apps: Vec<(Screen, App)> = Screen::ALL
        .iter()
        .map(|s| (*s, s.build(ColorMode::Ansi16)))
        .collect();
    let mut sizes: Vec<(u16, u16)> = Vec::new();
    for w in (1..=200).step_by(7) {
        for h in (1..=60).step_by(5) {
            sizes.push((w, h));
        }
    }
    for w in 38..=42 {
        for h in 10..=14 {
            sizes.push((w, h));
        }
    }
    for (screen, app) in &apps {
        for &(w, h) in &sizes {
            let t = text(&render(app, w, h));
            if w < draw::MIN_WIDTH || h < draw::MIN_HEIGHT {
                if w >= 30 && h >= 3 {
                    assert!(t.contains("too small"), "{screen:?} {w}x{h}\n{t}");
                }
            } else if *screen != Screen::Help {
                assert!(t.contains("tokbench"), "{screen:?} {w}x{h}\n{t}");
            }
        }
    }
}

/// Each row of the level table that is shown holds its figures whole, and
/// the running level is always shown.
#[test]
fn numbers_are_never_cut() {
    let app = Screen::MidSweep.build(ColorMode::None);
    for (w, h) in [(80, 24), (60, 20), (40, 12), (160, 48)] {
        let t = text(&render(&app, w, h));
        let rows: Vec<&str> = t
            .lines()
            .filter(|l| l.contains(['●', '▶', '○', '◆', '◇', '★']) && !l.contains("level"))
            .collect();
        assert!(rows.iter().any(|r| r.contains('▶')), "{w}x{h}\n{t}");
        for level in app.shown.levels.iter().filter(|l| l.has_results()) {
            let c = level.info.concurrency.to_string();
            let Some(row) = rows
                .iter()
                .find(|r| r.split([' ', '│']).filter(|x| !x.is_empty()).nth(1) == Some(c.as_str()))
            else {
                continue;
            };
            let cells: Vec<&str> = row.split([' ', '│']).filter(|x| !x.is_empty()).collect();
            let total = super::widgets::figure(Some(level.figures.output_tok_s));
            assert!(
                cells.contains(&total.as_str()),
                "{total} cut or missing in {row} at {w}x{h}"
            );
            let p99 = super::widgets::figure(level.figures.ttft_p99_ms);
            assert!(
                cells.contains(&p99.as_str()),
                "{p99} cut or missing in {row} at {w}x{h}"
            );
        }
    }
}

// ---------------------------------------------------------------- tokbench view

/// The saved-run screens: fixtures under `tests/fixtures/view/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ViewScreen {
    /// `tokbench view a`.
    One,
    /// `tokbench view a` with `?` pressed.
    Help,
    /// `tokbench view a b`.
    Two,
    /// `tokbench view a b`, then `Tab`: run B in the table.
    TwoTab,
    /// `tokbench view a b'` where b' has another output length.
    Shapes,
}

impl ViewScreen {
    const ALL: [ViewScreen; 5] = [
        ViewScreen::One,
        ViewScreen::Help,
        ViewScreen::Two,
        ViewScreen::TwoTab,
        ViewScreen::Shapes,
    ];

    fn name(self) -> &'static str {
        match self {
            ViewScreen::One => "view",
            ViewScreen::Help => "view-help",
            ViewScreen::Two => "view-two",
            ViewScreen::TwoTab => "view-two-tab",
            ViewScreen::Shapes => "view-shapes",
        }
    }

    fn build(self, mode: ColorMode) -> App {
        use crate::report::saved::SavedRun;
        let fixture = |name: &str| {
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/view")
                .join(name);
            let mut run = SavedRun::load(&path).expect("fixture");
            // The folder as a user would type it, not this checkout's path.
            run.source = PathBuf::from(format!("results/{name}/summary.json"));
            run
        };
        let palette = super::theme::Palette::new(mode);
        let runs = match self {
            ViewScreen::One | ViewScreen::Help => vec![fixture("a")],
            ViewScreen::Two | ViewScreen::TwoTab => vec![fixture("a"), fixture("b")],
            ViewScreen::Shapes => {
                let mut raw = fixture("b").raw;
                raw["run"]["output_len"] = serde_json::json!(256);
                let b = SavedRun::from_value(raw, std::path::Path::new("results/b/summary.json"))
                    .expect("reads");
                vec![fixture("a"), b]
            }
        };
        let mut app = super::view::app_of(&runs, palette);
        match self {
            ViewScreen::Help => app.show_help = true,
            ViewScreen::TwoTab => {
                app.swap_runs();
            }
            _ => {}
        }
        app
    }
}

#[test]
fn view_screens_match_their_snapshots() {
    for screen in ViewScreen::ALL {
        let app = screen.build(ColorMode::None);
        for (w, h) in SIZES {
            let got = text(&render(&app, w, h));
            let lines: Vec<&str> = got.lines().collect();
            assert_eq!(lines.len(), usize::from(h));
            for line in &lines {
                assert!(line.chars().count() <= usize::from(w), "{screen:?}: {line}");
            }
            assert!(lines[0].contains("tokbench"), "{got}");
            check_snapshot(screen.name(), w, h, &got);
        }
    }
}

fn view_text(screen: ViewScreen, w: u16, h: u16) -> String {
    text(&render(&screen.build(ColorMode::None), w, h))
}

/// A saved run: its identity, every level, the marks, the result and the
/// cost in figures; nothing live (no bars, no in-flight gauge).
#[test]
fn a_saved_run_shows_table_marks_and_result() {
    for (w, h) in SIZES {
        let t = view_text(ViewScreen::One, w, h);
        assert!(
            t.contains("Qwen/Qwen3-8B") && t.contains("in 1024 / out 1024"),
            "{t}"
        );
        assert!(t.contains("2026-11-29"), "started at\n{t}");
        assert!(t.contains("SAVED RUN"), "{t}");
        assert!(!t.contains("in flight") && !t.contains("ITL ms"), "{t}");
        shows(&t, &["1,136", "1,728", "2,304", "3,820"]);
        assert_eq!(t.matches('★').count(), 3, "chart, table row, legend\n{t}");
        assert!(t.contains('┊') && t.contains("knee"), "the knee mark\n{t}");
        assert!(t.contains("capacity: 32 streams"), "{t}");
        assert!(
            t.contains("cost: $0.322/M vs API $0.65/M"),
            "the cost in figures\n{t}"
        );
        shows(&t, &["503 ×3", "q quit"]);
    }
    let t = view_text(ViewScreen::One, 160, 48);
    assert!(
        t.contains("break-even 855 tok/s = 49%") && t.contains("(GPU $2/h at full use)"),
        "all the cost figures at 160x48\n{t}"
    );
}

#[test]
fn two_runs_overlay_and_tab_brings_the_other_forward() {
    for (w, h) in SIZES {
        let t = view_text(ViewScreen::Two, w, h);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].contains(" A ") && lines[0].contains("0.11.2"),
            "{t}"
        );
        assert!(
            lines[1].contains(" B ") && lines[1].contains("0.12.0"),
            "{t}"
        );
        assert!(t.contains('■'), "B's points\n{t}");
        assert!(t.contains("run A"), "the table says whose rows\n{t}");
        assert!(t.contains("Tab"), "{t}");
        let t = view_text(ViewScreen::TwoTab, w, h);
        shows(&t, &["run B", "capacity: 64 streams"]);
        assert!(t.contains('◆'), "B's manual level\n{t}");
        // A stays first in the header.
        assert!(
            t.lines().next().is_some_and(|l| l.contains("0.11.2")),
            "{t}"
        );
    }
}

#[test]
fn different_shapes_warn_in_the_header() {
    for (w, h) in SIZES {
        let t = view_text(ViewScreen::Shapes, w, h);
        let third = t.lines().nth(2).unwrap_or_default();
        assert!(third.contains("not like for like"), "{t}");
        assert!(third.contains("out 256"), "{t}");
    }
}

#[test]
fn saved_screens_render_at_any_size() {
    let apps: Vec<App> = ViewScreen::ALL
        .iter()
        .map(|s| s.build(ColorMode::Ansi16))
        .collect();
    for app in &apps {
        for w in (1..=200).step_by(9) {
            for h in (1..=60).step_by(4) {
                let t = text(&render(app, w, h));
                assert_eq!(t.lines().count(), usize::from(h));
            }
        }
    }
}

/// Two runs against different servers with different knobs, at 80
/// columns: the knobs that differ stay whole; names give way first.
#[test]
fn two_run_headers_keep_what_differs_whole() {
    use crate::report::saved::SavedRun;
    let load = |name: &str, target: &str| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/view")
            .join(name);
        let mut raw = SavedRun::load(&path).expect("fixture").raw;
        raw["run"]["target"] = serde_json::json!(target);
        raw["run"]["engine"] = serde_json::json!("tokbench-sim");
        raw["run"]["engine_version"] = serde_json::json!("0.0.0");
        SavedRun::from_value(raw, &path.join("summary.json")).expect("reads")
    };
    let runs = [
        load("a", "http://127.0.0.1:18716"),
        load("b", "http://127.0.0.1:18764"),
    ];
    let app = super::view::app_of(&runs, super::theme::Palette::new(ColorMode::None));
    for (w, h) in SIZES {
        let t = text(&render(&app, w, h));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].contains("max-num-seqs=512"), "{t}");
        assert!(lines[0].contains("SIM"), "{t}");
        for line in &lines[..2] {
            assert!(!line.contains('…'), "nothing cut: {line}");
        }
    }
}

/// The client's receive lag sits beside its CPU once a kernel-timed read
/// came in, and is absent before (user clock, reqwest).
#[test]
fn the_footer_shows_the_client_rx_lag_beside_its_cpu() {
    use crate::load::driver::DriverEvent;
    use crate::record::{Outcome, RequestRecord};
    let mut app = Screen::FirstLevel.build(ColorMode::None);
    let before = text(&render(&app, 160, 48));
    assert!(before.contains("client cpu 4%"), "{before}");
    assert!(!before.contains("rx lag"), "{before}");
    let mut r = RequestRecord::empty(10_000, 0);
    r.outcome = Outcome::Cancelled;
    r.rx_lag_ms = vec![3.0; 50];
    app.on_driver_event(&DriverEvent::Record(r));
    let after = text(&render(&app, 160, 48));
    assert!(
        after.contains("client cpu 4%  rx lag p99 3.0 ms"),
        "{after}"
    );
}

#[test]
fn a_tune_says_where_it_is_and_overlays_the_settings_before() {
    for (w, h) in SIZES {
        let t = screen_text(Screen::Tune, w, h);
        // Each setting's row and the recommendation so far, in the result panel.
        shows(
            &t,
            &[
                "np=1: capacity 32",
                "np=2: running",
                "np=4: waiting",
                "keep np=1",
            ],
        );
        // The keys of a tune: n is the next setting, there is no s.
        shows(&t, &["n next setting"]);
        assert!(!t.contains("s series"), "{t}");
        let starting = screen_text(Screen::TuneStarting, w, h);
        shows(
            &starting,
            &[
                "starting server 14 s",
                "log: INFO",
                "np=2: starting",
                "n skip this setting",
            ],
        );
        // np=1's curve is on the chart while np=2's server starts.
        let chart: String = starting
            .lines()
            .map(|l| l.chars().take(usize::from(w) / 2).collect::<String>())
            .collect();
        assert!(chart.contains('●'), "{starting}");
    }
    let wide = screen_text(Screen::Tune, 160, 48);
    shows(&wide, &["● np=1", "■ np=2"]);
    // A finished setting's memory, in the tune's own words (80 columns cut
    // the row before it).
    shows(&wide, &["ready 14.8 s · KV 272,000 tok"]);
}

/// `tune --predict`: the settings it predicted are dashed curves on the
/// tune's chart, each named by its setting, never rows of the table.
#[test]
fn a_tune_draws_its_predicted_settings_dashed_and_named() {
    let mut app = Screen::Tune.build(ColorMode::None);
    app.predicted = super::tune::predicted_curves(vec![(
        "np=8".to_string(),
        vec![(1, 30.0), (8, 120.0), (64, 250.0)],
    )]);
    let t = render_text(&app, 160, 48);
    shows(&t, &["np=8 predicted", "┄ predicted"]);
    assert!(!t.lines().any(|l| l.contains("│np=8")), "{t}");
}

/// A ramp's chart: the offered rate as a line, each second that is over as
/// its achieved rate, and the second where p99 TTFT first failed, at both
/// sizes; the streams chart is not drawn for it.
#[test]
fn a_ramp_shows_offered_against_achieved_and_where_it_broke() {
    use crate::load::driver::{DriverEvent, LevelInfo, Mode};
    use crate::load::ramp::{Ramp, RampKind};
    use crate::record::RequestRecord;
    use std::time::Duration;
    let mut run = super::scenes::article_run(true);
    run.plan = vec![20];
    run.ramp = Some(super::app::RampView {
        ramp: Ramp::new(RampKind::Linear, 2.0, 20.0, 6.0).expect("ramp"),
        slo_ttft_p99_ms: Some(50.0),
    });
    let mut app = App::new(run, super::theme::Palette::new(ColorMode::None));
    app.on_driver_event(&DriverEvent::LevelStarted(LevelInfo::new(
        0,
        20,
        Mode::Replay,
        Duration::from_secs(1),
    )));
    // Seconds 0..3 of the ramp: 2, 5, 8, 11 requests, TTFT 20 ms, then 300
    // ms in second 3 (over the 50 ms SLO), offered 2 + 18 * 3.5 / 6 = 12.5
    // req/s in its middle.
    let mut id = 0;
    for (second, n, ttft) in [(0u64, 2u64, 20u64), (1, 5, 20), (2, 8, 20), (3, 11, 300)] {
        for i in 0..n {
            let start = 1000 + second * 1000 + i * 1000 / n;
            let mut r = RequestRecord::empty(id, 0);
            id += 1;
            r.start = Duration::from_millis(start);
            r.send_lag = Some(Duration::ZERO);
            r.ttft = Some(Duration::from_millis(ttft));
            r.end = Duration::from_millis(start + ttft.min(900));
            r.output_tokens = 8;
            app.on_driver_event(&DriverEvent::Record(r));
        }
    }
    app.elapsed = Duration::from_millis(5_500);
    let wide = text(&render(&app, 160, 48));
    shows(
        &wide,
        &[
            "req/s",
            "linear ramp",
            "offered",
            "achieved",
            "broke s3 at 12.5 req/s (p99 TTFT 300 > 50 ms)",
        ],
    );
    assert!(!wide.contains("vs streams"), "{wide}");
    let small = text(&render(&app, 80, 24));
    shows(&small, &["req/s", "broke s3"]);
}

/// A saved ramp (`tokbench view`) draws its chart from its level file's
/// seconds and `broke_at`: a linear ramp 1 -> 3 req/s over 2 s whose
/// seconds finished 1, 2 and (draining after the ramp) 1 request, broken
/// in second 1 at 2.5 req/s.
#[test]
fn a_saved_ramp_shows_its_seconds_and_where_it_broke() {
    use crate::report::saved::SavedRun;
    let second = |t: u64, completed: u64| {
        serde_json::json!({"t": t, "offered": 2, "sent": 2, "completed": completed,
            "failed": 0, "ttft_p99_ms": 10.0})
    };
    let summary = serde_json::json!({
        "run": {"target": "http://127.0.0.1:8081", "model": "m", "engine": "llamacpp"},
        "levels": [{
            "max_concurrency": 64, "mode": "replay", "completed": 4, "failed": 0,
            "trace": {"format": "ramp",
                      "ramp": {"kind": "linear", "from": 1.0, "to": 3.0, "duration_s": 2.0}},
            "rate_series": {
                "seconds": [second(0, 1), second(1, 2), second(2, 1)],
                "broke_at": {"second": 1, "offered_rate": 2.5, "ttft_p99_ms": 300.0,
                             "limit_ms": 30.0, "rule": "baseline"}
            }
        }]
    });
    let run = SavedRun::from_value(summary, std::path::Path::new("/tmp/ramp/summary.json"))
        .expect("reads");
    let app = super::view::app_of(&[run], super::theme::Palette::new(ColorMode::None));
    let figures = app.saved_ramp.clone().expect("a saved ramp");
    assert_eq!(figures.achieved, vec![(0.5, 1.0), (1.5, 2.0), (2.5, 1.0)]);
    assert_eq!(figures.broke, Some((1, 2.5, 300.0, 30.0)));
    assert_eq!(figures.offered.first(), Some(&(0.0, 1.0)));
    assert_eq!(figures.offered.last(), Some(&(2.0, 3.0)));
    let t = text(&render(&app, 100, 30));
    shows(
        &t,
        &[
            "linear ramp",
            "1..3 req/s over 2 s",
            "broke s1 at 2.5 req/s",
        ],
    );
    assert!(!t.contains("vs streams"), "{t}");
}
