//! Open loop: a rate level's schedule, lateness under a full cap, pause, SetRate, replay.

use super::*;

/// tokio's timers fire on whole milliseconds: a request due at 94.2 ms goes
/// out at 95 ms, with that 0.8 ms counted in its `send_lag`.
fn on_time(sent: Duration, due: Duration) -> bool {
    sent >= due && sent - due < ms(1)
}

/// The send times a rate level's arrivals give, from `from`.
fn schedule(seed: u64, index: u64, rate: f64, n: usize, from: Duration) -> Vec<Duration> {
    let mut arrivals = Arrivals::new(seed ^ index.wrapping_mul(0x9E37_79B9), rate, 1.0);
    let mut at = from;
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(at);
        at += Duration::from_secs_f64(arrivals.next_gap_s().min(1e6));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_rate_level_goes_out_on_its_arrival_schedule() {
    let server = FakeServer::new(|_| ok(10, 50));
    let run = Harness::start(config(vec![rate(100, 20, 10.0)]), server)
        .finish()
        .await;
    let info = run.levels()[0].clone();
    assert_eq!(
        (info.mode, info.rate, info.concurrency),
        (Mode::Rate, Some(10.0), 100)
    );
    let expected = schedule(7, 0, 10.0, 20, Duration::ZERO);
    let sent = run.server.sent();
    assert_eq!(sent.len(), 20);
    for (s, due) in sent.iter().zip(&expected) {
        assert_eq!(s.scheduled, Some(*due));
        assert!(on_time(s.at, *due), "{s:?} due {due:?}");
    }
    // Not one went out late, past the timer's millisecond.
    assert!(run.records().iter().all(|r| r.send_lag < Some(ms(1))));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_full_cap_sends_late_and_counts_from_the_intended_time() {
    // 100 requests/s against 2 slots of 100 ms: each goes out when one frees.
    let server = FakeServer::new(|_| ok(10, 100));
    let run = Harness::start(config(vec![rate(2, 20, 100.0)]), server)
        .finish()
        .await;
    assert_eq!(run.server.max_in_flight(0), 2);
    let expected = schedule(7, 0, 100.0, 20, Duration::ZERO);
    let mut sent = run.server.sent();
    sent.sort_by_key(|s| s.id);
    // Each goes out when it is due or, when both are busy, the moment the
    // earlier of the two frees (100 ms after it went out).
    let mut free = [Duration::ZERO; 2];
    let mut sends = Vec::new();
    for (s, due) in sent.iter().zip(&expected) {
        assert_eq!(s.scheduled, Some(*due));
        let slot = if free[0] <= free[1] { 0 } else { 1 };
        if free[slot] > *due {
            assert_eq!(s.at, free[slot], "{s:?}");
        } else {
            assert!(on_time(s.at, *due), "{s:?}");
        }
        free[slot] = s.at + ms(100);
        sends.push(s.at);
    }
    for r in run.records() {
        let due = expected[r.id as usize];
        assert_eq!(r.start, due, "timings count from the intended send");
        assert_eq!(r.send_lag, Some(sends[r.id as usize] - due));
    }
    let last = run.records().into_iter().max_by_key(|r| r.id).cloned();
    // The backlog grows: the last went out more than half a second late.
    assert!(last.and_then(|r| r.send_lag) > Some(ms(500)));
}

#[tokio::test(start_paused = true)]
async fn pause_moves_the_open_loop_schedule_on() {
    let server = FakeServer::new(|_| ok(5, 10));
    let mut h = Harness::start(config(vec![rate(100, 40, 10.0)]), server);
    h.send_at(ms(1000), Command::TogglePause).await;
    h.send_at(ms(3000), Command::TogglePause).await;
    let run = h.finish().await;
    let expected = schedule(7, 0, 10.0, 40, Duration::ZERO);
    let sent = run.server.sent();
    let before = sent.iter().filter(|s| s.at < ms(1000)).count();
    assert!(before > 0 && before < 40, "{before}");
    for (s, due) in sent.iter().zip(&expected) {
        // The schedule waited with the user: no backlog of late sends.
        let due = if s.id as usize >= before {
            *due + ms(2000)
        } else {
            *due
        };
        assert_eq!(s.scheduled, Some(due), "{s:?}");
        assert!(on_time(s.at, due), "{s:?}");
    }
    assert!(sent.iter().all(|s| s.at < ms(1000) || s.at >= ms(3000)));
}

#[tokio::test(start_paused = true)]
async fn set_rate_starts_a_manual_rate_level() {
    let server = FakeServer::new(|_| ok(10, 150));
    let mut h = Harness::start(config(vec![rate(8, 10_000, 10.0)]), server);
    h.send_at(ms(1000), Command::SetRate(20.0)).await;
    h.send_at(ms(1100), Command::SetRate(20.0)).await;
    h.send_at(ms(1200), Command::SetRate(f64::NAN)).await;
    h.send_at(ms(2000), Command::Stop).await;
    let run = h.finish().await;
    let levels = run.levels();
    assert_eq!(levels.len(), 2, "the same rate, or no rate, starts nothing");
    assert_eq!(
        (
            levels[1].mode,
            levels[1].rate,
            levels[1].concurrency,
            levels[1].num_prompts
        ),
        (Mode::Manual, Some(20.0), 8, None)
    );
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(true));
    // Its own schedule, from when it started.
    let expected = schedule(7, 1, 20.0, 40, ms(1000));
    let sent = run.server.sent_at(1);
    assert!(sent.len() > 5);
    for (at, due) in sent.iter().zip(&expected) {
        assert!(on_time(*at, *due), "{at:?} due {due:?}");
    }
    // Open loop: steady once nothing of the level before is out.
    let last_of_0 = run.level_records(0).iter().map(|r| r.end).max();
    let reached = run
        .when(|e| matches!(e, DriverEvent::TargetReached { index: 1, .. }))
        .map(|w| w.0);
    assert_eq!(reached, last_of_0.filter(|end| *end > ms(1000)));
    for r in run.level_records(1) {
        if r.outcome == Outcome::Ok {
            assert_eq!(r.transition, Some(r.start) < reached, "{r:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_is_sent_on_its_timeline_at_its_speed() {
    let server = FakeServer::new(|_| ok(10, 100));
    let entry =
        |t: f64, input: Option<u32>, output: Option<u32>, prompt: Option<&str>| ReplayEntry {
            t,
            input_len: input,
            output_len: output,
            prompt: prompt.map(str::to_string),
            blocks: None,
        };
    let entries = vec![
        entry(0.0, Some(40), Some(5), None),
        entry(0.5, Some(80), Some(6), None),
        entry(1.0, None, None, Some("one two three")),
        entry(2.0, Some(10), Some(7), None),
    ];
    let mut cfg = config(vec![LevelPlan::closed(1, 99)]);
    cfg.replay = Some(Replay::new(entries, 2.0, 4));
    // A calibrated server: 1.3 tokens a word and a 26-token chat template.
    cfg.workload.calibration = Calibration {
        tokens_per_word: 1.3,
        overhead_tokens: 26.0,
        slope_from_tokenizer: false,
    };
    let run = Harness::start(cfg, server).finish().await;
    let levels = run.levels();
    assert_eq!(levels.len(), 1, "the replay replaces the plan");
    assert_eq!(
        (
            levels[0].mode,
            levels[0].concurrency,
            levels[0].num_prompts,
            levels[0].timeline
        ),
        (Mode::Replay, 4, Some(4), Some(ms(1000)))
    );
    let sent = run.server.sent();
    let at: Vec<Duration> = sent.iter().map(|s| s.at).collect();
    assert_eq!(at, vec![ms(0), ms(250), ms(500), ms(1000)]);
    let lengths: Vec<(u32, u32)> = sent
        .iter()
        .map(|s| (s.input_tokens_target, s.max_tokens))
        .collect();
    // The logged text's three words: 3 x 1.3 + 26 = 29.9, so 30 tokens,
    // the template counted as it is for a dataset's own text.
    assert_eq!(lengths, vec![(40, 5), (80, 6), (30, 20), (10, 7)]);
    assert!(sent[2].body.contains("one two three"));
    assert_eq!(*run.last(), finished(false));
}
