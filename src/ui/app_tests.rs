//! Tests of `app.rs`: the live view's state folded from driver events and
//! keys, with no clock of its own. `run_view` is shared with other tests.

use super::*;
use crate::load::driver::LevelInfo;
use crate::record::{ErrorClass, RequestRecord};
use crate::stats::summary::level_stats;
use crate::ui::theme::{ColorMode, Palette};

/// The article's header (its plan: 1, 4, 16, 32, 64, 128), against a real server.
pub(crate) fn run_view() -> RunView {
    crate::ui::scenes::article_run(false)
}

pub(crate) fn app() -> App {
    App::new(run_view(), Palette::new(ColorMode::None))
}

pub(crate) fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

pub(crate) fn level(index: usize, concurrency: u32, mode: Mode, at_s: u64) -> DriverEvent {
    DriverEvent::LevelStarted(LevelInfo {
        num_prompts: (mode == Mode::Planned).then_some(concurrency * 10),
        plan_index: (mode == Mode::Planned).then_some(index),
        ..LevelInfo::new(index, concurrency, mode, Duration::from_secs(at_s))
    })
}

fn running_at(concurrency: u32) -> App {
    let mut app = app();
    // Keys act at once here; the settle window has tests of its own.
    app.settle = Duration::ZERO;
    app.on_driver_event(&level(0, concurrency, Mode::Planned, 0));
    app.on_driver_event(&DriverEvent::TargetChanged {
        at: Duration::ZERO,
        target: concurrency,
    });
    app
}

fn send(app: &mut App, c: char) -> Option<Action> {
    app.on_key(key(c))
}

#[test]
fn concurrency_keys_send_the_new_target() {
    let mut app = running_at(4);
    // Each key steps from what was asked, before the driver confirms.
    for (c, to) in [('+', 5), ('=', 6), (']', 12), ('[', 6), ('-', 5)] {
        assert_eq!(
            send(&mut app, c),
            Some(Action::Send(Command::SetConcurrency(to))),
            "{c}"
        );
    }
    assert_eq!(app.target, 5);
}

/// Presses within the settle window make one change, sent when the
/// window closes; the window restarts with each press.
#[test]
fn quick_presses_coalesce_into_one_change() {
    let mut app = running_at(64);
    app.settle = Duration::from_secs(1);
    app.on_tick(Duration::from_millis(10_000));
    assert_eq!(send(&mut app, '+'), None);
    app.on_tick(Duration::from_millis(10_100));
    assert_eq!(send(&mut app, '+'), None);
    app.on_tick(Duration::from_millis(10_250));
    assert_eq!(send(&mut app, '+'), None);
    assert!(matches!(app.pending, Some((Pending::Concurrency(67), _))));
    // 1 s after the last press, not the first.
    app.on_tick(Duration::from_millis(11_200));
    assert_eq!(app.due_command(), None);
    app.on_tick(Duration::from_millis(11_250));
    assert_eq!(app.due_command(), Some(Command::SetConcurrency(67)));
    assert_eq!(app.due_command(), None, "sent once");
    // `]` twice: x4, as one level.
    app.target = 67;
    app.on_tick(Duration::from_millis(20_000));
    send(&mut app, ']');
    send(&mut app, ']');
    app.on_tick(Duration::from_millis(21_000));
    assert_eq!(app.due_command(), Some(Command::SetConcurrency(268)));
}

/// Open loop: the same keys step the rate, ±10% and x2/÷2.
#[test]
fn under_a_rate_the_keys_step_the_rate() {
    let mut app = running_at(8);
    app.rate = Some(10.0);
    app.settle = Duration::from_secs(1);
    send(&mut app, ']');
    send(&mut app, '+');
    app.on_tick(Duration::from_secs(2));
    assert_eq!(app.due_command(), Some(Command::SetRate(22.0)));
    app.rate = Some(22.0);
    send(&mut app, '[');
    app.on_tick(Duration::from_secs(4));
    assert_eq!(app.due_command(), Some(Command::SetRate(11.0)));
}

/// Open loop: a send more than 5 ms (`stats::lateness::LATE_AFTER`) past its
/// schedule counts once as late, as the level file's `lateness` counts it.
#[test]
fn a_late_send_counts_once() {
    let mut app = running_at(4);
    for (id, lag_ms) in [(1, 3), (2, 6), (3, 5), (4, 12)] {
        let mut r = RequestRecord::empty(id, 0);
        r.end = Duration::from_secs(1);
        r.send_lag = Some(Duration::from_millis(lag_ms));
        app.on_driver_event(&DriverEvent::Record(r));
    }
    // 6 and 12 ms are late; 3 ms and exactly 5 ms are not.
    let row = &app.shown.levels[0];
    assert_eq!(
        (row.late_sends, row.max_send_lag),
        (2, Duration::from_millis(12))
    );
}

/// The transition rule as the view applies it: a transition record is
/// counted apart and never in the level's figures.
#[test]
fn transition_records_stay_out_of_the_figures() {
    let mut app = running_at(4);
    let mut r = RequestRecord::empty(1, 0);
    r.start = Duration::from_secs(1);
    r.end = Duration::from_secs(2);
    r.ttft = Some(Duration::from_millis(100));
    r.output_tokens = 100;
    r.transition = true;
    app.on_driver_event(&DriverEvent::Record(r.clone()));
    assert_eq!(
        (app.shown.levels[0].done, app.shown.levels[0].transition),
        (0, 1)
    );
    r.transition = false;
    app.on_driver_event(&DriverEvent::Record(r));
    assert_eq!(
        (app.shown.levels[0].done, app.shown.levels[0].transition),
        (1, 1)
    );
}

#[test]
fn the_waiting_counter_is_in_flight_less_streaming() {
    let mut app = running_at(4);
    app.set_queue(4, 1);
    assert_eq!(app.waiting(), 3);
    // A streaming count ahead of in flight (read a moment apart) never
    // makes waiting negative.
    app.set_queue(2, 3);
    assert_eq!((app.streaming, app.waiting()), (2, 0));
}

/// 503s as a rate: 10 in the last 5 complete seconds is 2/s; a class
/// with none has no rate.
#[test]
fn failures_show_as_rates_over_the_last_seconds() {
    let mut app = running_at(4);
    for i in 0..10u64 {
        let mut r = RequestRecord::empty(i, 0);
        r.end = Duration::from_millis(5_000 + 400 * i);
        r.outcome = Outcome::Failed(ErrorClass::Http(503));
        app.on_driver_event(&DriverEvent::Record(r));
    }
    app.on_tick(Duration::from_secs(10));
    let [r503, r429, timeout] = app.failure_rates();
    assert_eq!(r503, Some(2.0));
    assert_eq!((r429, timeout), (None, None));
    // A minute later the rate is gone; the total stays.
    app.on_tick(Duration::from_secs(70));
    assert_eq!(app.failure_rates()[0], None);
    assert_eq!(app.shown.counters.class("http_503"), 10);
}

/// The client's and the server's queue counts 3 apart for 5 s in a row
/// make the note; 2 apart do not.
#[test]
fn queue_disagreement_needs_five_seconds_over_two() {
    let mut app = running_at(8);
    let mut seen = Vec::new();
    for second in 0..9u64 {
        // The tick of a new second judges the second before it.
        app.on_tick(Duration::from_millis(second * 1000 + 500));
        seen.push(app.queue_disagrees());
        app.set_queue(8, 3); // waiting 5
        let mut sample = crate::probe::live::ServerSample {
            at: Duration::from_millis(second * 1000 + 500),
            ..Default::default()
        };
        // Seconds 0 and 1: 2 apart (fine); from second 2 on: 4 apart.
        sample
            .gauges
            .insert("waiting", if second < 2 { 3.0 } else { 1.0 });
        app.on_server_sample(&sample);
    }
    // Disagreeing since second 2: said from the 7th second on.
    assert_eq!(
        seen,
        [false, false, false, false, false, false, false, true, true]
    );
}

#[test]
fn v_toggles_the_frontier_and_leaves_a_pending_change_alone() {
    let mut app = running_at(8);
    app.settle = Duration::from_secs(1);
    assert!(!app.frontier);
    // A `]` waiting out its settle window ...
    assert_eq!(send(&mut app, ']'), None);
    let pending = app.pending;
    assert!(pending.is_some(), "the step waits to settle");
    // ... is still there, unchanged, after `v` twice.
    assert_eq!(send(&mut app, 'v'), None);
    assert!(app.frontier);
    assert_eq!(app.pending, pending);
    assert_eq!(send(&mut app, 'V'), None);
    assert!(!app.frontier);
    assert_eq!(app.pending, pending);
    // Inside the label prompt `v` is a letter of the label.
    send(&mut app, 's');
    app.prompt.as_mut().expect("prompt").text.clear();
    send(&mut app, 'v');
    assert!(!app.frontier);
    assert_eq!(app.prompt.as_ref().map(|p| p.text.as_str()), Some("v"));
}

#[test]
fn the_label_prompt_takes_a_label_and_refuses_bad_ones() {
    let mut app = running_at(4);
    assert_eq!(send(&mut app, 's'), Some(Action::ProbeForLabel));
    app.offer_label("slots 2 → 4".into());
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
        Some(Action::NewSeries("slots 2 → 4".into()))
    );
    send(&mut app, 's');
    // Typing replaces the default; an empty label is refused.
    for _ in 0..3 {
        app.on_key(KeyEvent::new(KeyCode::Backspace, KeyModifiers::NONE));
    }
    app.prompt.as_mut().expect("prompt").text.clear();
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
        None
    );
    assert!(app
        .prompt
        .as_ref()
        .and_then(|p| p.error.as_deref())
        .is_some());
    for _ in 0..61 {
        send(&mut app, 'x');
    }
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
        None
    );
    assert!(app
        .prompt
        .as_ref()
        .and_then(|p| p.error.as_deref())
        .is_some_and(|e| e.contains("60")));
    // Esc cancels; q inside the prompt is a letter, not quit.
    assert_eq!(send(&mut app, 'q'), None);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
        None
    );
    assert!(app.prompt.is_none() && !app.quitting);
}

#[test]
fn concurrency_is_bounded() {
    let mut app = running_at(1);
    // Already at 1: `-` and `[` send nothing and say why.
    assert_eq!(send(&mut app, '-'), None);
    assert_eq!(send(&mut app, '['), None);
    assert!(app.status().is_some_and(|s| s.contains("stays at 1")));
    let mut app = running_at(3000);
    assert_eq!(
        send(&mut app, ']'),
        Some(Action::Send(Command::SetConcurrency(MAX_CONCURRENCY)))
    );
    assert_eq!(send(&mut app, '+'), None);
}

#[test]
fn level_pause_and_quit_keys() {
    let mut app = running_at(4);
    assert_eq!(send(&mut app, 'n'), Some(Action::Send(Command::NextLevel)));
    assert_eq!(
        send(&mut app, 'p'),
        Some(Action::Send(Command::TogglePause))
    );
    assert_eq!(send(&mut app, 'q'), Some(Action::Send(Command::Stop)));
    assert!(app.quitting);
    // Once quitting, nothing else is sent; a second q does not resend.
    assert_eq!(send(&mut app, '+'), None);
    assert_eq!(send(&mut app, 'q'), None);
    // When the driver is done, q leaves.
    app.on_driver_event(&DriverEvent::Finished {
        stopped_by_user: true,
        error: None,
    });
    assert_eq!(send(&mut app, 'q'), Some(Action::Exit));
}

#[test]
fn esc_and_ctrl_c_quit_and_esc_closes_help_first() {
    let mut app = running_at(4);
    assert_eq!(send(&mut app, '?'), None);
    assert!(app.show_help);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
        None
    );
    assert!(!app.show_help);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
        Some(Action::Send(Command::Stop))
    );
    let mut app = running_at(4);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Some(Action::Send(Command::Stop))
    );
}

#[test]
fn only_presses_count() {
    let mut app = running_at(4);
    let mut release = key('+');
    release.kind = KeyEventKind::Release;
    assert_eq!(app.on_key(release), None);
    let mut repeat = key('+');
    repeat.kind = KeyEventKind::Repeat;
    assert_eq!(app.on_key(repeat), None);
    assert_eq!(app.target, 4);
}

#[test]
fn steering_waits_for_the_first_level() {
    let mut app = app();
    app.on_driver_event(&DriverEvent::WarmupStarted {
        requests: 4,
        concurrency: 1,
    });
    assert_eq!(send(&mut app, '+'), None);
    assert_eq!(send(&mut app, 'n'), None);
    assert!(app.status().is_some());
    // Quitting works at any time.
    assert_eq!(send(&mut app, 'q'), Some(Action::Send(Command::Stop)));
}

#[test]
fn after_the_sweep_only_quit_and_help() {
    let mut app = running_at(4);
    app.on_driver_event(&DriverEvent::LevelFinished {
        index: 0,
        partial: false,
    });
    app.on_driver_event(&DriverEvent::Finished {
        stopped_by_user: false,
        error: None,
    });
    assert_eq!(send(&mut app, '+'), None);
    assert_eq!(send(&mut app, 'p'), None);
    assert_eq!(send(&mut app, '?'), None);
    assert!(app.show_help);
    assert_eq!(send(&mut app, 'q'), Some(Action::Exit));
}

/// The running sums give exactly what `level_stats` saves.
#[test]
fn row_figures_match_the_saved_statistics() {
    let mut app = running_at(4);
    let mut records = Vec::new();
    for i in 0..37u64 {
        let mut r = RequestRecord::empty(i, 0);
        r.start = Duration::from_millis(100 + 13 * i);
        r.end = r.start + Duration::from_millis(900 + (i * 7919) % 400);
        r.ttft = Some(Duration::from_micros(20_000 + (i * 104_729) % 90_000));
        r.output_tokens = 100 + (i as u32 % 3);
        r.outcome = match i % 10 {
            3 => Outcome::Failed(ErrorClass::Http(503)),
            7 => Outcome::Cancelled,
            _ => Outcome::Ok,
        };
        app.on_driver_event(&DriverEvent::Record(r.clone()));
        records.push(r);
    }
    app.on_driver_event(&DriverEvent::LevelFinished {
        index: 0,
        partial: false,
    });
    let want = level_stats(&records, 4, &[50.0, 99.0]);
    let got = app.shown.levels[0].figures;
    assert!((got.output_tok_s - want.output_throughput).abs() < 1e-9);
    assert!((got.per_stream_tok_s - want.per_stream_tok_s).abs() < 1e-9);
    let ttft = want.ttft.expect("ttft");
    assert_eq!(got.ttft_p50_ms, ttft.percentile(50.0));
    assert_eq!(got.ttft_p99_ms, ttft.percentile(99.0));
    assert_eq!(app.shown.counters.class("http_503"), 4);
    assert_eq!(app.shown.counters.cancelled, 3);
    assert!(
        app.shown.levels[0].ttft_ms.is_empty(),
        "freed once finished"
    );
}

#[test]
fn levels_move_through_their_states() {
    let mut app = running_at(4);
    app.on_driver_event(&level(1, 5, Mode::Manual, 3));
    assert_eq!(app.shown.levels[0].state, LevelState::Draining);
    assert!(app.is_manual());
    app.on_driver_event(&DriverEvent::LevelFinished {
        index: 0,
        partial: true,
    });
    assert!(app.shown.levels[0].is_partial());
    assert_eq!(app.current().map(|l| l.info.concurrency), Some(5));
}

#[test]
fn the_clock_stops_with_the_run() {
    let mut app = running_at(4);
    app.on_tick(Duration::from_secs(90));
    app.on_driver_event(&DriverEvent::Finished {
        stopped_by_user: false,
        error: None,
    });
    app.on_tick(Duration::from_secs(300));
    assert_eq!(app.elapsed, Duration::from_secs(90));
}

#[test]
fn server_text_cannot_reach_the_terminal_raw() {
    assert_eq!(one_line("a\x1b[2Jb\nc\t"), "a [2Jb c");
}

#[test]
fn markers_fall_on_the_seconds_the_target_changed() {
    let mut app = running_at(4);
    app.on_driver_event(&DriverEvent::TargetChanged {
        at: Duration::from_millis(2500),
        target: 5,
    });
    app.recompute(Duration::from_secs(4));
    let marked: Vec<u64> = app
        .latency
        .points
        .iter()
        .filter(|p| p.marker)
        .map(|p| p.second)
        .collect();
    assert_eq!(marked, [0, 2]);
}

/// The step line, worked by hand. Level 0 (4 streams): four answers of
/// 100 tokens from 0 to 1 s, first token at 100 ms: 400 tok/s, p99 TTFT
/// 100 ms, nothing waiting. Level 1 (8 streams, steady from 2 s): five
/// rounds of eight answers, each 100 tokens streamed from s + 0.2 to s + 1:
/// every second holds 800 tokens (RSE 0), p99 TTFT 200 ms, two waiting.
/// So: +100.0% tok/s, p99 TTFT x2.0, queue +2.
#[test]
fn the_step_line_says_what_the_step_did() {
    let mut app = running_at(4);
    let answer = |id: u64, level: usize, start_ms: u64, ttft_ms: u64| {
        let mut r = RequestRecord::empty(id, level);
        r.start = Duration::from_millis(start_ms);
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.end = r.start + Duration::from_secs(1);
        r.output_tokens = 100;
        r
    };
    for id in 0..4 {
        app.on_driver_event(&DriverEvent::Record(answer(id, 0, 0, 100)));
    }
    app.on_driver_event(&DriverEvent::LevelFinished {
        index: 0,
        partial: false,
    });
    app.shown.levels[0].waiting_mean = Some(0.0);
    app.on_driver_event(&level(1, 8, Mode::Manual, 2));
    app.on_driver_event(&DriverEvent::TargetReached {
        index: 1,
        at: Duration::from_secs(2),
    });
    for round in 0..5u64 {
        app.on_tick(Duration::from_millis(2_500 + 1000 * round));
        app.set_queue(8, 6);
        for k in 0..8 {
            let r = answer(100 + 8 * round + k, 1, 2_000 + 1000 * round, 200);
            app.on_driver_event(&DriverEvent::Record(r));
        }
    }
    app.on_tick(Duration::from_millis(7_600));
    assert!(
        app.shown.levels[1].is_steady,
        "{:?}",
        app.shown.levels[1].estimate
    );
    assert_eq!(
        app.step_summary.as_deref(),
        Some("4 → 8 streams: +100.0% tok/s, p99 TTFT ×2.0, queue +2")
    );
    // Two more seconds of 80 tokens (eight answers of 10): the spread grows
    // past the limit and the badge goes, as the saved verdict would; the
    // step line stays.
    for round in 5..7u64 {
        for k in 0..8 {
            let mut r = answer(100 + 8 * round + k, 1, 2_000 + 1000 * round, 200);
            r.output_tokens = 10;
            app.on_driver_event(&DriverEvent::Record(r));
        }
    }
    app.on_tick(Duration::from_millis(9_600));
    let level = &app.shown.levels[1];
    assert!(!level.is_steady, "{:?}", level.estimate);
    assert!(
        level.estimate.is_some_and(|(_, rse)| rse >= 0.05),
        "{:?}",
        level.estimate
    );
    assert!(app.step_summary.is_some());
}

/// A suspected restart the server's marks did not confirm is said in the
/// status line, with the level it hit; a confirmed one says why.
#[test]
fn a_suspected_restart_is_said_either_way() {
    let mut app = running_at(4);
    app.on_driver_event(&DriverEvent::RestartSuspected {
        at: Duration::from_secs(3),
        failures: 4,
        level: Some(0),
        restart: None,
    });
    let said = app.status().unwrap_or_default().to_string();
    assert!(
        said.contains("4 connection failures at 4 streams") && said.contains("no mark"),
        "{said}"
    );
    app.on_driver_event(&DriverEvent::RestartSuspected {
        at: Duration::from_secs(9),
        failures: 4,
        level: Some(0),
        restart: Some("slots 1 → 4".into()),
    });
    let said = app.status().unwrap_or_default().to_string();
    assert!(
        said.contains("server restarted at 4 streams (slots 1 → 4)"),
        "{said}"
    );
}

/// The header's time left: the driver's last figure less the time since
/// it said it, never below zero, and gone once the run is over. Said at
/// 10 s as 120 s: at 40 s, 90 s are left; at 200 s, none.
#[test]
fn the_time_left_counts_down_from_the_drivers_last_word() {
    use crate::load::driver::FitEvent;
    let mut app = running_at(4);
    assert_eq!(app.seconds_left(), None);
    app.on_driver_event(&DriverEvent::Fit(FitEvent::TimeLeft {
        seconds: 120.0,
        at: Duration::from_secs(10),
    }));
    app.elapsed = Duration::from_secs(40);
    assert_eq!(app.seconds_left(), Some(90.0));
    app.elapsed = Duration::from_secs(200);
    assert_eq!(app.seconds_left(), Some(0.0));
    app.on_driver_event(&DriverEvent::Finished {
        stopped_by_user: false,
        error: None,
    });
    assert_eq!(app.seconds_left(), None);
}

/// Answers shortened after the warmup: the header's shape is the one the
/// levels run with.
#[test]
fn a_shortened_answer_length_is_the_headers_shape() {
    use crate::analysis::fit::Speed;
    use crate::load::driver::FitEvent;
    let mut app = app();
    let asked = app.shown.run.output_len;
    app.on_driver_event(&DriverEvent::Fit(FitEvent::Estimate {
        line: String::new(),
        seconds: 60.0,
        shortened: Some((asked, 352)),
        suggestion: None,
        speed: Speed {
            ttft_s: 0.1,
            decode_tok_s: 10.0,
        },
    }));
    assert_eq!(app.shown.run.output_len, 352);
    assert!(
        app.shown.run.shape().ends_with("out 352"),
        "{}",
        app.shown.run.shape()
    );
}

/// `+` pressed as the plan moved from 4 to 16 streams, before the view had
/// the driver's new target: the change starts from 16 (16 -> 17), not from
/// the level before it (4 -> 5). Steps replay in order: `] +` from 16 is 33.
#[test]
fn a_change_pressed_at_a_level_boundary_starts_from_the_new_level() {
    let mut app = running_at(4);
    app.settle = Duration::from_secs(1);
    app.on_tick(Duration::from_millis(10_000));
    assert_eq!(send(&mut app, '+'), None);
    assert!(matches!(app.pending, Some((Pending::Concurrency(5), _))));
    app.on_driver_event(&level(1, 16, Mode::Planned, 10));
    app.on_driver_event(&DriverEvent::TargetChanged {
        at: Duration::from_millis(10_050),
        target: 16,
    });
    assert!(
        matches!(app.pending, Some((Pending::Concurrency(17), _))),
        "{:?}",
        app.pending
    );
    app.on_tick(Duration::from_millis(11_100));
    assert_eq!(app.due_command(), Some(Command::SetConcurrency(17)));

    let mut app = running_at(4);
    app.settle = Duration::from_secs(1);
    app.on_tick(Duration::from_millis(10_000));
    assert_eq!(send(&mut app, ']'), None);
    assert_eq!(send(&mut app, '+'), None);
    assert!(matches!(app.pending, Some((Pending::Concurrency(9), _))));
    app.on_driver_event(&DriverEvent::TargetChanged {
        at: Duration::from_millis(10_050),
        target: 16,
    });
    assert!(matches!(app.pending, Some((Pending::Concurrency(33), _))));
    // `-` pressed at 2, then the plan moved to 1: back to the target, so
    // nothing is left to send.
    let mut app = running_at(2);
    app.settle = Duration::from_secs(1);
    assert_eq!(send(&mut app, '-'), None);
    app.on_driver_event(&DriverEvent::TargetChanged {
        at: Duration::from_millis(50),
        target: 1,
    });
    assert_eq!(app.pending, None);
}
