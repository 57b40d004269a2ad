//! Warmup: calibration, its failures, and steering while it runs.

use super::*;

/// `plan` after `warmup` requests of warmup.
fn with_warmup(plan: Vec<LevelPlan>, warmup: u32) -> DriverConfig {
    let mut cfg = config(plan);
    cfg.warmup = warmup;
    cfg
}

#[tokio::test(start_paused = true)]
async fn warmup_calibrates_from_what_the_server_reports() {
    // The server counts 3 tokens a word plus a 10-token template.
    let server = FakeServer::new(|s| Reply::Ok {
        ttft: ms(10),
        total: ms(50),
        prompt_tokens: Some(3 * s.words as u32 + 10),
    });
    let cfg = with_warmup(vec![LevelPlan::closed(2, 2)], 4);
    let run = Harness::start(cfg, server).finish().await;
    assert_eq!(
        run.events[0].1,
        DriverEvent::WarmupStarted {
            requests: 4,
            concurrency: 2
        }
    );
    let Some(DriverEvent::WarmupFinished {
        ok,
        failed,
        calibration,
        reported_prompt_tokens,
    }) = run
        .events
        .iter()
        .map(|(_, e)| e)
        .find(|e| matches!(e, DriverEvent::WarmupFinished { .. }))
    else {
        panic!("no WarmupFinished: {:?}", run.events);
    };
    assert_eq!((*ok, *failed), (4, 0));
    assert!(
        (calibration.tokens_per_word - 3.0).abs() < 1e-9,
        "{calibration:?}"
    );
    assert!(
        (calibration.overhead_tokens - 10.0).abs() < 1e-6,
        "{calibration:?}"
    );
    assert_eq!(reported_prompt_tokens.len(), 4);
    // Two prompt lengths (full and half), at the first level's concurrency.
    let warm: Vec<Sent> = run.server.sent().into_iter().take(4).collect();
    assert_ne!(warm[0].words, warm[1].words);
    assert_eq!(run.server.max_in_flight(usize::MAX), 2);
    // Warmup records are the driver's own: none goes out as a Record.
    assert_eq!(run.records().len(), 2);
    assert!(run.records().iter().all(|r| r.level == 0));
    // The level starts once warmup is over: 2 rounds of 50 ms.
    assert_eq!(run.levels()[0].started_at, ms(100));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn warmup_all_failed_ends_the_run_with_the_first_error() {
    let server = FakeServer::new(|_| fail(5, ErrorClass::Http(500)));
    let cfg = with_warmup(vec![LevelPlan::closed(2, 10)], 3);
    let run = Harness::start(cfg, server).finish().await;
    let error = run.fatal_error();
    assert_eq!(
        error,
        "all 3 warmup requests failed; first error: http_500: scripted http_500"
    );
    assert!(run.levels().is_empty());
    assert!(run.records().is_empty());
}

#[tokio::test(start_paused = true)]
async fn warmup_partly_failed_goes_on() {
    let server = FakeServer::one_off(1, fail(5, ErrorClass::Timeout), ok(10, 50));
    let cfg = with_warmup(vec![LevelPlan::closed(1, 2)], 3);
    let run = Harness::start(cfg, server).finish().await;
    assert!(
        run.count(|e| matches!(
            e,
            DriverEvent::WarmupFinished {
                ok: 2,
                failed: 1,
                ..
            }
        )) == 1
    );
    assert_eq!(run.level_records(0).len(), 2);
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn stop_during_warmup_ends_without_a_level() {
    let server = FakeServer::new(|_| ok(100, 1000));
    let cfg = with_warmup(vec![LevelPlan::closed(2, 10)], 4);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(300), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(*run.last(), finished(true));
    // The warmup requests in flight were cancelled at once.
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(300)));
    assert!(run.levels().is_empty());
}

#[tokio::test(start_paused = true)]
async fn steering_during_warmup_is_applied_after_it() {
    let server = FakeServer::new(|_| ok(10, 100));
    let cfg = with_warmup(vec![LevelPlan::closed(2, 10_000)], 2);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(50), Command::SetConcurrency(5)).await;
    h.run_until(ms(250)).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    let levels = run.levels();
    assert_eq!(levels.len(), 2, "{levels:?}");
    // The planned level starts after warmup and gives way to the key at once.
    assert_eq!(
        (levels[0].mode, levels[0].started_at),
        (Mode::Planned, ms(100))
    );
    assert_eq!(
        (levels[1].mode, levels[1].concurrency, levels[1].started_at),
        (Mode::Manual, 5, ms(100))
    );
    assert_eq!(run.server.max_in_flight(1), 5);
    assert!(run.level_records(0).is_empty());
}
