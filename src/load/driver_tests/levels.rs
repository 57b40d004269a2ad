//! Planned and manual levels, steering, pause, and a face that hangs up.

use super::*;
use crate::load::driver::BetweenLevels;

#[test]
fn a_level_of_so_many_requests_a_stream() {
    // 4 streams x 3 a stream = 12; a count of 0 a stream still sends one each.
    assert_eq!(LevelPlan::per_stream(4, 3), LevelPlan::closed(4, 12));
    assert_eq!(LevelPlan::per_stream(4, 0).num_prompts, 4);
    assert_eq!(LevelPlan::per_stream(u32::MAX, 2).num_prompts, u32::MAX);
}

#[tokio::test(start_paused = true)]
async fn planned_levels_run_in_order_with_their_counts() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(1, 3),
        LevelPlan::closed(2, 4),
        LevelPlan::closed(4, 8),
    ];
    let run = Harness::start(config(plan), server).finish().await;
    let levels = run.levels();
    let shape: Vec<_> = levels
        .iter()
        .map(|l| {
            (
                l.index,
                l.concurrency,
                l.mode,
                l.num_prompts,
                l.plan_index,
                l.started_at,
                l.series,
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 1, Mode::Planned, Some(3), Some(0), ms(0), 0),
            (1, 2, Mode::Planned, Some(4), Some(1), ms(300), 0),
            (2, 4, Mode::Planned, Some(8), Some(2), ms(500), 0),
        ]
    );
    for (level, n, c) in [(0, 3, 1), (1, 4, 2), (2, 8, 4)] {
        let records = run.level_records(level);
        assert_eq!(records.len(), n, "level {level}");
        assert!(records.iter().all(|r| r.is_ok() && !r.transition));
        assert_eq!(run.server.max_in_flight(level), c, "level {level}");
        assert_eq!(run.level_finished(level).map(|f| f.1), Some(false));
    }
    // Closed loop keeps the target full: 2 rounds of 100 ms for the last level.
    assert_eq!(run.level_finished(2).map(|f| f.0), Some(ms(700)));
    let ids: Vec<u64> = run.server.sent().iter().map(|s| s.id).collect();
    assert_eq!(ids, (0..15).collect::<Vec<u64>>());
    run.assert_records_before_their_finish();
    // Headless: no watch, so no PlanDone; the run ends by itself.
    assert_eq!(run.count(|e| *e == DriverEvent::PlanDone), 0);
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_request_belongs_to_the_level_it_was_sent_in() {
    // A slow request of level 0 outlives the level change by 'n'.
    let server = FakeServer::one_off(0, ok(10, 1000), ok(10, 100));
    let plan = vec![LevelPlan::closed(2, 100), LevelPlan::closed(3, 3)];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(250), Command::NextLevel).await;
    let run = h.finish().await;
    let slow = run.records().into_iter().find(|r| r.id == 0).cloned();
    assert_eq!(slow.map(|r| (r.level, r.end)), Some((0, ms(1000))));
    // Level 0 finishes only when its last request is back.
    assert_eq!(run.level_finished(0), Some((ms(1000), true)));
    // Level 1 ran beside it, the target counting what level 0 still has
    // out: one sent at 250 ms (two of level 0 out), one at 300 ms, one at 350 ms.
    assert_eq!(run.levels()[1].started_at, ms(250));
    assert_eq!(run.server.sent_at(1), vec![ms(250), ms(300), ms(350)]);
    assert_eq!(run.level_finished(1), Some((ms(450), false)));
    run.assert_records_before_their_finish();
}

// ---------------------------------------------------------------------------
// Manual levels and steering.

#[tokio::test(start_paused = true)]
async fn manual_takeover_then_resume_the_plan() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(2, 10_000),
        LevelPlan::closed(4, 10_000),
        LevelPlan::closed(8, 16),
    ];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(250), Command::SetConcurrency(5)).await;
    h.run_until(ms(260)).await;
    // Dispatch follows the new target at once: 2 of level 0 plus 3 new.
    assert_eq!(h.handle.in_flight.load(Ordering::Relaxed), 5);
    // Off the 50 ms grid requests end on: no tie between a command and a join.
    h.send_at(ms(1075), Command::NextLevel).await;
    let run = h.finish().await;
    let levels = run.levels();
    assert_eq!(
        (
            levels[1].index,
            levels[1].concurrency,
            levels[1].mode,
            levels[1].num_prompts
        ),
        (1, 5, Mode::Manual, None)
    );
    assert_eq!(levels[1].started_at, ms(250));
    assert!(
        run.count(|e| matches!(e, DriverEvent::TargetChanged { target: 5, at } if *at == ms(250)))
            == 1
    );
    // The planned level was cut short: partial, once its last two are back.
    assert_eq!(run.level_finished(0), Some((ms(300), true)));
    // 'n' ends the manual level complete and resumes the plan above 5: at 8.
    assert_eq!(
        (
            levels[2].concurrency,
            levels[2].mode,
            levels[2].plan_index,
            levels[2].started_at
        ),
        (8, Mode::Planned, Some(2), ms(1075))
    );
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(false));
    assert_eq!(run.level_records(2).len(), 16);
    assert_eq!(run.level_finished(2).map(|f| f.1), Some(false));
    run.assert_records_before_their_finish();
    assert_eq!(*run.last(), finished(false));
}

/// A change by hand pauses the plan: the planned level it cut short (16
/// streams, just started) is saved partial, and when the plan resumes
/// below it, it runs again whole before the plan goes on.
#[tokio::test(start_paused = true)]
async fn a_planned_level_cut_short_by_hand_runs_again_when_the_plan_resumes() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(2, 4),
        LevelPlan::closed(16, 32),
        LevelPlan::closed(32, 32),
    ];
    let mut h = Harness::start(config(plan), server);
    // Level 0 ends at 200 ms and 16 starts; the change lands at 250 ms.
    h.send_at(ms(250), Command::SetConcurrency(5)).await;
    h.send_at(ms(1075), Command::NextLevel).await;
    let run = h.finish().await;
    let shape: Vec<(u32, Mode, Option<usize>)> = run
        .levels()
        .iter()
        .map(|l| (l.concurrency, l.mode, l.plan_index))
        .collect();
    assert_eq!(
        shape,
        vec![
            (2, Mode::Planned, Some(0)),
            (16, Mode::Planned, Some(1)),
            (5, Mode::Manual, None),
            (16, Mode::Planned, Some(1)),
            (32, Mode::Planned, Some(2)),
        ]
    );
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(true));
    // The second time, whole.
    assert_eq!(run.level_records(3).len(), 32);
    assert_eq!(run.level_finished(3).map(|f| f.1), Some(false));
    assert_eq!(run.levels()[3].started_at, ms(1075));
    run.assert_records_before_their_finish();
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn requests_across_a_change_are_transition() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 10_000)]), server);
    h.send_at(ms(250), Command::SetConcurrency(6)).await;
    h.send_at(ms(1020), Command::SetConcurrency(3)).await;
    h.send_at(ms(1500), Command::Stop).await;
    let run = h.finish().await;
    // Going from 2 to 6, the four sent to fill the level are transition;
    // what it sent once full is steady, and so are not the six still out
    // when it was left at 1020 ms.
    let level1 = run.level_records(1);
    assert!(level1.len() > 30, "{}", level1.len());
    for r in &level1 {
        let filling = r.start == ms(250);
        let left_in_flight = r.end > ms(1020);
        assert_eq!(r.transition, filling || left_in_flight, "{r:?}");
    }
    assert_eq!(level1.iter().filter(|r| r.start == ms(250)).count(), 4);
    assert_eq!(level1.iter().filter(|r| r.end > ms(1020)).count(), 6);
    // The planned level before it is not hand-set: nothing of it is transition.
    assert!(run.level_records(0).iter().all(|r| !r.transition));
    // Each manual level reached its target once: at once here, since the
    // first dispatch filled it (and going down, it is full already).
    let reached: Vec<(usize, Duration)> = run
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            DriverEvent::TargetReached { index, at } => Some((*index, *at)),
            _ => None,
        })
        .collect();
    assert_eq!(reached, vec![(1, ms(250)), (2, ms(1020))]);
}

#[tokio::test(start_paused = true)]
async fn target_reached_waits_for_the_level_to_fill() {
    // Paused, a new manual level cannot fill: its steady state starts on resume.
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 10_000)]), server);
    h.send_at(ms(150), Command::TogglePause).await;
    h.send_at(ms(200), Command::SetConcurrency(4)).await;
    h.send_at(ms(400), Command::TogglePause).await;
    h.send_at(ms(650), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::TargetReached { index: 1, .. }))
            .map(|w| w.0),
        Some(ms(400))
    );
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::TargetReached { .. })),
        1
    );
    let sent = run.server.sent_at(1);
    assert_eq!(sent.iter().filter(|at| **at == ms(400)).count(), 4);
    let level1 = run.level_records(1);
    assert!(level1
        .iter()
        .filter(|r| r.start == ms(400))
        .all(|r| r.transition));
    // Sent once full, and back before the level was left (the Stop, which
    // makes what is still out transition and cancelled): steady state.
    let steady: Vec<_> = level1.iter().filter(|r| r.start > ms(400)).collect();
    assert!(!steady.is_empty());
    assert!(steady
        .iter()
        .all(|r| r.transition == (r.outcome == Outcome::Cancelled)));
}

#[tokio::test(start_paused = true)]
async fn the_same_concurrency_again_changes_nothing() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 10_000)]), server);
    h.send_at(ms(150), Command::SetConcurrency(3)).await;
    h.send_at(ms(250), Command::SetConcurrency(3)).await;
    // 0 streams is not a level: it clamps to one.
    h.send_at(ms(350), Command::SetConcurrency(0)).await;
    h.send_at(ms(450), Command::Stop).await;
    let run = h.finish().await;
    let shape: Vec<(u32, Mode)> = run
        .levels()
        .iter()
        .map(|l| (l.concurrency, l.mode))
        .collect();
    assert_eq!(
        shape,
        vec![(2, Mode::Planned), (3, Mode::Manual), (1, Mode::Manual)]
    );
}

#[tokio::test(start_paused = true)]
async fn next_level_cuts_a_planned_level_short() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![LevelPlan::closed(2, 100), LevelPlan::closed(3, 3)];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(250), Command::NextLevel).await;
    let run = h.finish().await;
    assert_eq!(run.level_finished(0), Some((ms(300), true)));
    assert_eq!(run.level_records(0).len(), 6);
    assert_eq!(run.levels()[1].started_at, ms(250));
    assert_eq!(run.level_records(1).len(), 3);
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(false));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn next_level_from_manual_above_the_plan_ends_it() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![LevelPlan::closed(2, 100), LevelPlan::closed(4, 100)];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(150), Command::SetConcurrency(10)).await;
    h.send_at(ms(375), Command::NextLevel).await;
    let run = h.finish().await;
    // Nothing in the plan above 10: no level starts after the manual one.
    assert_eq!(run.levels().len(), 2);
    assert_eq!(run.level_finished(1), Some((ms(450), false)));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn pause_holds_dispatch_and_stop_cancels_in_flight() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(3, 100)]), server);
    h.send_at(ms(150), Command::TogglePause).await;
    h.run_until(ms(900)).await;
    // Paused: the three out at 150 ms finished, nothing new went out.
    assert_eq!(h.handle.in_flight.load(Ordering::Relaxed), 0);
    h.send(Command::TogglePause);
    h.send_at(ms(1050), Command::Stop).await;
    let run = h.finish().await;
    let sent = run.server.sent_at(0);
    assert!(
        sent.iter().all(|at| *at <= ms(100) || *at >= ms(900)),
        "{sent:?}"
    );
    assert_eq!(sent.iter().filter(|at| **at == ms(900)).count(), 3);
    assert_eq!(run.count(|e| *e == DriverEvent::Paused(true)), 1);
    assert_eq!(run.count(|e| *e == DriverEvent::Paused(false)), 1);
    // Stop takes no time: the three out come back cancelled at once.
    let cancelled: Vec<Duration> = run
        .records()
        .iter()
        .filter(|r| r.outcome == Outcome::Cancelled)
        .map(|r| r.end)
        .collect();
    assert_eq!(cancelled, vec![ms(1050); 3]);
    assert_eq!(run.level_finished(0), Some((ms(1050), true)));
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(1050)));
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn hanging_up_while_paused_ends_the_run() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 100)]), server);
    h.send_at(ms(50), Command::TogglePause).await;
    h.run_until(ms(60)).await;
    h.hang_up();
    let run = h.finish().await;
    // Nobody can resume it: once the two out are back, the run ends.
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(100)));
    assert_eq!(run.level_finished(0), Some((ms(100), true)));
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn hanging_up_lets_the_plan_run_out() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 4)]), server);
    h.run_until(ms(50)).await;
    h.hang_up();
    let run = h.finish().await;
    assert_eq!(run.level_finished(0), Some((ms(200), false)));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_load_task_still_lets_its_level_finish() {
    let server = FakeServer::one_off(1, Reply::Panic, ok(10, 100));
    let run = Harness::start(config(vec![LevelPlan::closed(1, 3)]), server)
        .finish()
        .await;
    let ids: Vec<u64> = run.records().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![0, 2]);
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
    assert_eq!(*run.last(), finished(false));
}

/// The work between levels (a cache reset) runs once between each two
/// planned levels, after the first has drained, and the next level waits
/// for it: 50 ms of work moves each later start by 50 ms.
#[tokio::test(start_paused = true)]
async fn the_work_between_levels_runs_between_each_two_and_is_waited_for() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(1, 3),
        LevelPlan::closed(2, 4),
        LevelPlan::closed(4, 8),
    ];
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let origin = tokio::time::Instant::now();
    let seen = calls.clone();
    let work = BetweenLevels(Arc::new(move || {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().expect("calls").push(origin.elapsed());
            tokio::time::sleep(ms(50)).await;
        })
    }));
    let cfg = DriverConfig {
        between_levels: Some(work),
        ..config(plan)
    };
    let run = Harness::start(cfg, server).finish().await;
    let starts: Vec<Duration> = run.levels().iter().map(|l| l.started_at).collect();
    // Level 0: 3 x 100 ms; the work 300..350; level 1: 2 rounds, 350..550;
    // the work 550..600; level 2 from 600. Never after the last level.
    assert_eq!(starts, vec![ms(0), ms(350), ms(600)]);
    assert_eq!(*calls.lock().expect("calls"), vec![ms(300), ms(550)]);
    assert_eq!(run.level_finished(2).map(|f| f.0), Some(ms(800)));
    assert_eq!(*run.last(), finished(false));
}
