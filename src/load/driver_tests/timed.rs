//! Timed levels (`--duration`) and the `--start-at` schedule shards step
//! to (`start_at + k * (duration + level_gap)`), a shard with no part of a
//! level, and a drain that runs past the gap.

use super::*;

fn timed(plan: Vec<LevelPlan>, duration_ms: u64) -> DriverConfig {
    DriverConfig {
        duration: Some(ms(duration_ms)),
        ..config(plan)
    }
}

fn scheduled(plan: Vec<LevelPlan>, start_ms: u64, duration_ms: u64, gap_ms: u64) -> DriverConfig {
    DriverConfig {
        start_at: Some(ms(start_ms)),
        level_gap: ms(gap_ms),
        ..timed(plan, duration_ms)
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_level_sends_for_its_window_then_drains() {
    // Two streams of 300 ms answers in a 1 s window: rounds at 0, 300, 600
    // and 900 ms; the last round, sent inside the window, comes back at
    // 1200 ms and still counts for the level.
    let server = FakeServer::new(|_| ok(10, 300));
    let plan = vec![LevelPlan::closed(2, 999), LevelPlan::closed(1, 999)];
    let run = Harness::start(timed(plan, 1000), server).finish().await;
    assert_eq!(
        run.server.sent_at(0),
        [0, 0, 300, 300, 600, 600, 900, 900].map(ms)
    );
    let records = run.level_records(0);
    assert_eq!(records.len(), 8);
    assert!(records.iter().all(|r| r.is_ok() && !r.transition));
    assert_eq!(run.level_finished(0), Some((ms(1200), false)));
    // The count does not end a timed level (999 was never reached), and
    // none is announced.
    let levels = run.levels();
    assert_eq!(levels[0].num_prompts, None);
    // Without a schedule the next level starts when this one has drained,
    // and gets its own full window: 1200 + 1000, rounds every 300 ms.
    assert_eq!(levels[1].started_at, ms(1200));
    assert_eq!(run.server.sent_at(1), [1200, 1500, 1800, 2100].map(ms));
    assert_eq!(run.level_finished(1), Some((ms(2400), false)));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn the_window_is_half_open_a_request_due_at_its_end_is_not_sent() {
    // 250 ms answers in a 1 s window: sends at 0, 250, 500, 750; the one
    // that would go at 1000 ms is past the window.
    let server = FakeServer::new(|_| ok(10, 250));
    let run = Harness::start(timed(vec![LevelPlan::closed(1, 5)], 1000), server)
        .finish()
        .await;
    assert_eq!(run.server.sent_at(0), [0, 250, 500, 750].map(ms));
    assert_eq!(run.level_finished(0), Some((ms(1000), false)));
}

#[tokio::test(start_paused = true)]
async fn a_timed_rate_level_sends_its_arrivals_inside_the_window() {
    // 20 requests/s for 1 s: every arrival of the seeded schedule before
    // 1000 ms goes out on time, none after.
    let server = FakeServer::new(|_| ok(10, 50));
    let run = Harness::start(timed(vec![rate(100, 5, 20.0)], 1000), server)
        .finish()
        .await;
    let mut arrivals = Arrivals::new(7, 20.0, 1.0);
    let mut due = Vec::new();
    let mut at = Duration::ZERO;
    while at < ms(1000) {
        due.push(at);
        at += Duration::from_secs_f64(arrivals.next_gap_s());
    }
    let sent = run.server.sent();
    let scheduled: Vec<Duration> = sent.iter().filter_map(|s| s.scheduled).collect();
    assert_eq!(scheduled, due);
    // More than the 5 of its count: the window, not the count, ends it.
    assert!(due.len() > 5, "{due:?}");
    assert_eq!(run.levels()[0].mode, Mode::Rate);
    // It ends when the window does, or when its last answer is back.
    let last = sent.last().map(|s| s.at).expect("sent");
    assert_eq!(
        run.level_finished(0),
        Some(((last + ms(50)).max(ms(1000)), false))
    );
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_run_waits_for_start_at_then_steps_on_the_clock() {
    // Warmup of 2 (100 ms each, one at a time), then nothing until 5 s.
    // Level k starts at 5000 + k * (1000 + 500) ms: 5000 and 6500.
    let server = FakeServer::new(|s| {
        if s.level == usize::MAX {
            ok(10, 100)
        } else {
            ok(10, 300)
        }
    });
    let mut cfg = scheduled(
        vec![LevelPlan::closed(1, 9), LevelPlan::closed(2, 9)],
        5000,
        1000,
        500,
    );
    cfg.warmup = 2;
    let run = Harness::start(cfg, server).finish().await;
    let (warmed, _) = run
        .when(|e| matches!(e, DriverEvent::WarmupFinished { .. }))
        .expect("warmup");
    assert_eq!(warmed, ms(200));
    let levels = run.levels();
    assert_eq!(levels[0].started_at, ms(5000));
    assert_eq!(run.server.sent_at(0), [5000, 5300, 5600, 5900].map(ms));
    // Drained at 6200 ms, inside the gap: the next level waits for 6500.
    assert_eq!(run.level_finished(0), Some((ms(6200), false)));
    assert_eq!(levels[1].started_at, ms(6500));
    assert_eq!(
        run.server.sent_at(1),
        [6500, 6500, 6800, 6800, 7100, 7100, 7400, 7400].map(ms)
    );
    assert_eq!(run.level_finished(1), Some((ms(7700), false)));
    // Nothing went out between the warmup and the start.
    let measured: Vec<Duration> = run
        .server
        .sent()
        .iter()
        .filter(|s| s.level != usize::MAX)
        .map(|s| s.at)
        .collect();
    assert!(measured.iter().all(|at| *at >= ms(5000)), "{measured:?}");
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_drain_past_the_gap_does_not_delay_the_next_level() {
    // 700 ms answers: sends at 1000 and 1700 ms in the window [1000, 2000);
    // the second is back at 2400 ms, past level 1's start at
    // 1000 + (1000 + 200) = 2200 ms. Level 1 starts on time beside it,
    // with all of its own streams (as the other shards' level 1 does).
    let server = FakeServer::new(|_| ok(10, 700));
    let plan = vec![LevelPlan::closed(1, 9), LevelPlan::closed(1, 9)];
    let run = Harness::start(scheduled(plan, 1000, 1000, 200), server)
        .finish()
        .await;
    assert_eq!(run.server.sent_at(0), [1000, 1700].map(ms));
    let levels = run.levels();
    assert_eq!(levels[1].started_at, ms(2200));
    assert_eq!(run.server.sent_at(1)[0], ms(2200));
    // The late answer still counts for level 0, which closes complete.
    let late = run
        .level_records(0)
        .into_iter()
        .find(|r| r.id == 1)
        .cloned();
    assert_eq!(
        late.map(|r| (r.end, r.transition, r.is_ok())),
        Some((ms(2400), false, true))
    );
    assert_eq!(run.level_finished(0), Some((ms(2400), false)));
    // Level 1 sent from 2200 to 3200: at 2200 and 2900, back at 3600.
    assert_eq!(run.server.sent_at(1), [2200, 2900].map(ms));
    assert_eq!(run.level_finished(1), Some((ms(3600), false)));
    run.assert_records_before_their_finish();
}

#[tokio::test(start_paused = true)]
async fn a_warmup_past_start_at_starts_late_and_ends_on_schedule() {
    // The warmup ends at 100 ms, past the start at 50 ms: level 0 starts at
    // once and its window still ends at 50 + 1000 ms, like every shard's.
    let server = FakeServer::new(|_| ok(10, 100));
    let mut cfg = scheduled(vec![LevelPlan::closed(1, 99)], 50, 1000, 0);
    cfg.warmup = 1;
    let run = Harness::start(cfg, server).finish().await;
    assert_eq!(run.levels()[0].started_at, ms(100));
    let sent = run.server.sent_at(0);
    assert_eq!(sent.first(), Some(&ms(100)));
    // Sends every 100 ms from 100 to 1000: the window is [100, 1050).
    assert_eq!(sent.len(), 10);
    assert_eq!(run.level_finished(0), Some((ms(1100), false)));
}

#[tokio::test(start_paused = true)]
async fn a_shard_with_no_part_of_a_level_keeps_step() {
    // Shard 3 of 4 at concurrency 1 then 4: its parts are 0 and 1. The
    // empty level sends nothing and lasts its window, so the next level
    // starts with the other shards': 500 + 1 * (1000 + 0) ms.
    let server = FakeServer::new(|_| ok(10, 300));
    let plan = vec![LevelPlan::closed(0, 0), LevelPlan::closed(1, 0)];
    let run = Harness::start(scheduled(plan, 500, 1000, 0), server)
        .finish()
        .await;
    let levels = run.levels();
    assert_eq!((levels[0].started_at, levels[0].concurrency), (ms(500), 0));
    assert!(run.server.sent_at(0).is_empty());
    assert!(run.level_records(0).is_empty());
    assert_eq!(run.level_finished(0), Some((ms(1500), false)));
    assert_eq!(levels[1].started_at, ms(1500));
    assert_eq!(run.server.sent_at(1), [1500, 1800, 2100, 2400].map(ms));

    // Without --duration an empty part ends at once, sending nothing.
    let server = FakeServer::new(|_| ok(10, 300));
    let plan = vec![LevelPlan::closed(0, 0), LevelPlan::closed(1, 2)];
    let run = Harness::start(config(plan), server).finish().await;
    assert_eq!(run.level_finished(0), Some((ms(0), false)));
    assert_eq!(run.server.sent_at(1), [0, 300].map(ms));
}

#[tokio::test(start_paused = true)]
async fn stop_while_waiting_for_the_start_ends_the_run() {
    let server = FakeServer::new(|_| ok(10, 300));
    let mut h = Harness::start(
        scheduled(vec![LevelPlan::closed(1, 9)], 10_000, 1000, 0),
        server,
    );
    h.send_at(ms(3000), Command::Stop).await;
    let run = h.finish().await;
    assert!(run.levels().is_empty());
    assert!(run.server.sent().is_empty());
    let (at, _) = run
        .when(|e| matches!(e, DriverEvent::Finished { .. }))
        .expect("finished");
    assert_eq!(at, ms(3000));
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn a_schedule_ignores_steering_but_pauses() {
    // A hand-set level would break step with the other shards: the keys
    // that change levels do nothing; pause still holds dispatch.
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(scheduled(vec![LevelPlan::closed(1, 9)], 0, 1000, 0), server);
    h.send_at(ms(150), Command::SetConcurrency(8)).await;
    h.send(Command::NextLevel);
    h.send(Command::SetRate(5.0));
    h.send_at(ms(450), Command::TogglePause).await;
    h.send_at(ms(750), Command::TogglePause).await;
    let run = h.finish().await;
    assert_eq!(run.levels().len(), 1);
    // Sends every 100 ms, none while paused (the one out at 450 finishes
    // at 500), the window still ending at 1000 ms.
    assert_eq!(
        run.server.sent_at(0),
        [0, 100, 200, 300, 400, 750, 850, 950].map(ms)
    );
    assert_eq!(run.level_finished(0), Some((ms(1050), false)));
}
