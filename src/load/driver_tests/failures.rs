//! A failing server: the headless fatal stop, and the live view's watch
//! (held failures, an outage, polls, a new series).

use super::*;

/// The live view's config: a server that goes away pauses the run.
fn watched(plan: Vec<LevelPlan>) -> DriverConfig {
    let mut cfg = config(plan);
    cfg.watch_server = true;
    cfg
}

#[tokio::test(start_paused = true)]
async fn every_request_failing_stops_a_headless_run() {
    let server = FakeServer::new(|_| fail(5, ErrorClass::Http(503)));
    let plan = vec![LevelPlan::closed(2, 4), LevelPlan::closed(4, 4)];
    let run = Harness::start(config(plan), server).finish().await;
    let error = run.fatal_error();
    assert!(
        error.starts_with(
            "every request failed at concurrency 2 (4 of 4; first: http_503: scripted http_503)"
        ),
        "{error}"
    );
    assert_eq!(run.levels().len(), 1);
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
    // Headless: failures are not held, they count as they come.
    assert_eq!(run.records().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn one_dead_level_is_survivable_two_in_a_row_are_not() {
    let server = FakeServer::new(|s| {
        if [1, 3, 4].contains(&s.level) {
            fail(5, ErrorClass::Http(500))
        } else {
            ok(10, 100)
        }
    });
    let plan = (1..=6).map(|c| LevelPlan::closed(c, 2)).collect();
    let run = Harness::start(config(plan), server).finish().await;
    assert_eq!(run.levels().len(), 5);
    let error = run.fatal_error();
    assert!(
        error.starts_with("every request failed at concurrency 5"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------
// The server watch (the live view).

#[tokio::test(start_paused = true)]
async fn connection_failures_are_held_until_a_success_flushes_them() {
    let server = FakeServer::one_off(4, fail(10, ErrorClass::ConnectionClosed), ok(10, 100));
    let cfg = watched(vec![LevelPlan::closed(4, 12)]);
    let mut h = Harness::start(cfg, server);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    let (at, i) = run
        .when(|e| matches!(e, DriverEvent::Record(r) if r.id == 4))
        .expect("record 4");
    // Back at 110 ms, held until the next answer got through at 200 ms, and
    // then counted as it is: a failure of its level, not a restart.
    assert_eq!(at, ms(200));
    let DriverEvent::Record(failed) = &run.events[i].1 else {
        unreachable!()
    };
    assert_eq!(
        failed.outcome,
        Outcome::Failed(ErrorClass::ConnectionClosed)
    );
    assert!(!failed.transition);
    assert!(
        matches!(&run.events[i + 1].1, DriverEvent::Record(r) if r.is_ok() && r.end == ms(200))
    );
    // While it was held, nothing new went out.
    let sent = run.server.sent_at(0);
    assert!(
        sent.iter().all(|at| !(ms(110)..ms(200)).contains(at)),
        "{sent:?}"
    );
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::ServerGone { .. })),
        0
    );
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
}

#[tokio::test(start_paused = true)]
async fn a_gone_server_pauses_the_run_until_it_answers() {
    // Down from 1 s to 5 s: requests are refused at once, the root is silent.
    let down = |at: Duration| (ms(1000)..ms(5000)).contains(&at);
    let server = FakeServer::new(move |s| {
        if down(s.at) {
            fail(1, ErrorClass::ConnectRefused)
        } else {
            ok(10, 100)
        }
    })
    .answering(move |at| !down(at));
    let cfg = watched(vec![LevelPlan::closed(2, 10_000), LevelPlan::closed(4, 10)]);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(6000), Command::NewSeries).await;
    h.send_at(ms(6250), Command::Stop).await;
    let run = h.finish().await;
    // Two seconds of nothing but failures, with nothing in flight: gone,
    // since the first failure.
    let gone = run.when(|e| matches!(e, DriverEvent::ServerGone { since } if *since == ms(1001)));
    assert_eq!(gone.map(|g| g.0), Some(ms(3001)));
    let restart: Vec<&RequestRecord> = run
        .records()
        .into_iter()
        .filter(|r| r.outcome == Outcome::Failed(ErrorClass::ServerRestart))
        .collect();
    assert_eq!(restart.len(), 2);
    assert!(restart.iter().all(|r| r.transition && r.level == 0));
    assert!(run
        .records()
        .iter()
        .all(|r| r.outcome != Outcome::Failed(ErrorClass::ConnectRefused)));
    // The planned level was cut short by it.
    assert_eq!(run.level_finished(0), Some((ms(3001), true)));
    // A refused connect with nothing in flight is a suspected restart: the
    // root is asked at once and every 100 ms; silent for the whole grace,
    // the server is gone, and it is asked every 500 ms until it answers.
    let mut polls: Vec<Duration> = (0..=20).map(|k| ms(1001 + 100 * k)).collect();
    polls.extend([ms(3501), ms(4001), ms(4501), ms(5001)]);
    assert_eq!(run.server.polls(), polls);
    // Gone, not a quick restart: its marks are never compared.
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::RestartSuspected { .. })),
        0
    );
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::ServerBack { at } if *at == ms(5001)))
            .map(|w| w.0),
        Some(ms(5001))
    );
    // Nothing is sent until the new series, which starts the plan again.
    let sent: Vec<Duration> = run.server.sent().iter().map(|s| s.at).collect();
    assert!(
        sent.iter().all(|at| *at <= ms(1000) || *at >= ms(6000)),
        "{sent:?}"
    );
    assert_eq!(
        run.when(|e| *e
            == DriverEvent::SeriesStarted {
                series: 1,
                at: ms(6000)
            })
        .map(|w| w.0),
        Some(ms(6000))
    );
    let levels = run.levels();
    assert_eq!(levels.len(), 2);
    assert_eq!(
        (
            levels[1].plan_index,
            levels[1].series,
            levels[1].concurrency,
            levels[1].started_at
        ),
        (Some(0), 1, 2, ms(6000))
    );
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn an_outage_with_a_request_still_streaming_is_no_outage() {
    // One long request keeps streaming while every other is refused.
    let server = FakeServer::one_off(0, ok(10, 10_000), fail(1, ErrorClass::ConnectRefused))
        .answering(|_| false);
    let cfg = watched(vec![LevelPlan::closed(2, 10_000)]);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(5000), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::ServerGone { .. })),
        0
    );
    assert!(run.server.polls().is_empty());
    // Held for the grace, then counted as they are.
    let refused = run.records().into_iter().find(|r| r.id == 1).cloned();
    let at = run.when(|e| matches!(e, DriverEvent::Record(r) if r.id == 1));
    assert_eq!(at.map(|a| a.0), Some(ms(2001)));
    assert_eq!(
        refused.map(|r| (r.outcome, r.transition)),
        Some((Outcome::Failed(ErrorClass::ConnectRefused), false))
    );
    assert!(run
        .records()
        .iter()
        .all(|r| r.outcome != Outcome::Failed(ErrorClass::ServerRestart)));
}

/// One request at a time, and the server drops one connection: every
/// request in flight closed at once, a suspected restart, but the root
/// answers and no mark says the process is another, so it is no restart:
/// the failure counts as it is, the level goes on, and the view is told.
#[tokio::test(start_paused = true)]
async fn a_dropped_connection_at_one_stream_is_no_restart_when_the_root_answers() {
    let server = FakeServer::one_off(3, fail(5, ErrorClass::ConnectionClosed), ok(10, 100))
        .answering(|_| true);
    let cfg = watched(vec![LevelPlan::closed(1, 8)]);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(10_000), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::ServerGone { .. })),
        0
    );
    // Request 3 failed at 305 ms: one question at once, and its marks
    // read when it answered, then none until the plan is done and the
    // idle watch begins.
    let polls = run.server.polls();
    let done = run.when(|e| *e == DriverEvent::PlanDone).map(|w| w.0);
    assert_eq!(polls.first(), Some(&ms(305)), "{polls:?}");
    assert_eq!(run.server.marks_reads()[..2], [ms(0), ms(305)]);
    assert_eq!(
        run.when(|e| *e
            == DriverEvent::RestartSuspected {
                at: ms(305),
                failures: 1,
                level: Some(0),
                restart: None,
            })
        .map(|w| w.0),
        Some(ms(305))
    );
    assert!(done.is_some_and(|d| polls[1] > d), "{polls:?} {done:?}");
    let dropped = run.records().into_iter().find(|r| r.id == 3).cloned();
    assert_eq!(
        dropped.map(|r| (r.outcome, r.transition)),
        Some((Outcome::Failed(ErrorClass::ConnectionClosed), false))
    );
    // The level went on after the answer and finished whole.
    assert_eq!(run.records().len(), 8);
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
}

/// Ollama's marks: the model loaded until `until` (Unix s), or none.
fn ollama_marks(at: Duration, loaded: bool) -> Option<ServerMarks> {
    Some(ServerMarks {
        read_at_unix_s: at.as_secs_f64(),
        identity: vec![("version".into(), "0.9".into())],
        loaded_until: Some(if loaded {
            vec![("sim".into(), 300.0)]
        } else {
            vec![]
        }),
        ..ServerMarks::default()
    })
}

/// Killed at 950 ms with four requests in flight, back at 1450: half a
/// second, well under the 2 s grace, yet every stream closed at once and
/// the model the old process kept loaded is gone: a restart. The level is
/// cut short, its four failures are `restart` (charged to no level), and
/// the view is told the server went and came back, to start a series.
#[tokio::test(start_paused = true)]
async fn a_burst_that_closes_every_stream_is_a_restart_when_the_marks_say_so() {
    let down = |at: Duration| (ms(950)..ms(1450)).contains(&at);
    let server = FakeServer::new(move |s| {
        if s.at < ms(950) && s.at + ms(100) > ms(950) {
            // In flight at the kill: cut then.
            Reply::Fail {
                after: ms(950) - s.at,
                class: ErrorClass::ConnectionClosed,
            }
        } else if down(s.at) {
            fail(1, ErrorClass::ConnectRefused)
        } else {
            ok(10, 100)
        }
    })
    .answering(move |at| !down(at))
    .with_marks(move |at| ollama_marks(at, at < ms(950)));
    let cfg = watched(vec![LevelPlan::closed(4, 10_000), LevelPlan::closed(8, 8)]);
    let mut h = Harness::start(cfg, server);
    h.wait_for(|e| matches!(e, DriverEvent::ServerBack { .. }))
        .await;
    h.send(Command::NewSeries);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    assert_eq!(
        run.when(|e| *e
            == DriverEvent::RestartSuspected {
                at: ms(1450),
                failures: 4,
                level: Some(0),
                restart: Some("sim unloaded before its keep-alive ended".into()),
            })
        .map(|w| w.0),
        Some(ms(1450))
    );
    // Asked at once and every 100 ms until it answered.
    let polls: Vec<Duration> = (0..=5).map(|k| ms(950 + 100 * k)).collect();
    assert_eq!(run.server.polls()[..6], polls[..]);
    assert_eq!(run.server.marks_reads()[..2], [ms(0), ms(1450)]);
    assert_eq!(
        run.when(|e| *e == DriverEvent::ServerGone { since: ms(950) })
            .map(|w| w.0),
        Some(ms(1450))
    );
    assert_eq!(
        run.when(|e| *e == DriverEvent::ServerBack { at: ms(1450) })
            .map(|w| w.0),
        Some(ms(1450))
    );
    assert_eq!(run.level_finished(0), Some((ms(1450), true)));
    let level0: Vec<&RequestRecord> = run
        .records()
        .into_iter()
        .filter(|r| r.level == 0 && !r.is_ok())
        .collect();
    assert_eq!(level0.len(), 4);
    assert!(
        level0
            .iter()
            .all(|r| r.outcome == Outcome::Failed(ErrorClass::ServerRestart) && r.transition),
        "{level0:?}"
    );
    // Nothing went out between the kill and the new series, which starts
    // the plan again against the new process.
    let sent = run.server.sent_at(0);
    assert!(sent.iter().all(|at| *at < ms(950)), "{sent:?}");
    let levels = run.levels();
    assert_eq!(
        (levels[1].series, levels[1].plan_index, levels[1].started_at),
        (1, Some(0), ms(1450))
    );
}

/// One stream, and between two of its requests the server went away: the
/// next connect is refused. Back 300 ms later with four slots where it had
/// one: a restart, though nothing was in flight to be cut.
#[tokio::test(start_paused = true)]
async fn a_refused_connect_is_a_restart_when_the_slots_changed() {
    let down = |at: Duration| (ms(300)..ms(600)).contains(&at);
    let slots = |at: Duration| Some(if at < ms(300) { 1 } else { 4 });
    let server = FakeServer::new(move |s| {
        if down(s.at) {
            fail(1, ErrorClass::ConnectRefused)
        } else {
            ok(10, 100)
        }
    })
    .answering(move |at| !down(at))
    .with_marks(move |at| {
        Some(ServerMarks {
            identity: vec![("slots".into(), slots(at)?.to_string())],
            ..ServerMarks::default()
        })
    });
    let mut h = Harness::start(watched(vec![LevelPlan::closed(1, 100)]), server);
    h.wait_for(|e| matches!(e, DriverEvent::ServerBack { .. }))
        .await;
    h.send(Command::Stop);
    let run = h.finish().await;
    assert_eq!(
        run.when(
            |e| matches!(e, DriverEvent::RestartSuspected { restart, failures: 1, .. }
            if restart.as_deref() == Some("slots 1 → 4"))
        )
        .map(|w| w.0),
        Some(ms(601))
    );
    assert_eq!(
        run.when(|e| *e == DriverEvent::ServerGone { since: ms(301) })
            .map(|w| w.0),
        Some(ms(601))
    );
    let refused = run.records().into_iter().find(|r| r.id == 3).cloned();
    assert_eq!(
        refused.map(|r| (r.outcome, r.transition)),
        Some((Outcome::Failed(ErrorClass::ServerRestart), true))
    );
    assert_eq!(run.level_finished(0), Some((ms(601), true)));
}

/// The same refused connect against a server whose marks did not change
/// (a listener that blinked, not a new process): no restart; the failure
/// counts for its level and the level goes on whole.
#[tokio::test(start_paused = true)]
async fn a_refused_connect_with_the_same_marks_is_no_restart() {
    let down = |at: Duration| (ms(300)..ms(600)).contains(&at);
    let server = FakeServer::new(move |s| {
        if down(s.at) {
            fail(1, ErrorClass::ConnectRefused)
        } else {
            ok(10, 100)
        }
    })
    .answering(move |at| !down(at))
    .with_marks(|_| {
        Some(ServerMarks {
            identity: vec![("slots".into(), "1".into())],
            ..ServerMarks::default()
        })
    });
    let mut h = Harness::start(watched(vec![LevelPlan::closed(1, 8)]), server);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    assert_eq!(
        run.when(|e| matches!(
            e,
            DriverEvent::RestartSuspected {
                restart: None,
                failures: 1,
                ..
            }
        ))
        .map(|w| w.0),
        Some(ms(601))
    );
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::ServerGone { .. })),
        0
    );
    let refused = run.records().into_iter().find(|r| r.id == 3).cloned();
    assert_eq!(
        refused.map(|r| (r.outcome, r.transition)),
        Some((Outcome::Failed(ErrorClass::ConnectRefused), false))
    );
    assert_eq!(run.records().len(), 8);
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
}

#[tokio::test(start_paused = true)]
async fn after_the_plan_the_driver_watches_the_idle_server() {
    let down = |at: Duration| (ms(1000)..ms(3000)).contains(&at);
    let server = FakeServer::new(|_| ok(10, 100)).answering(move |at| !down(at));
    let cfg = watched(vec![LevelPlan::closed(1, 2)]);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(4000), Command::NewSeries).await;
    h.send_at(ms(4500), Command::Stop).await;
    let run = h.finish().await;
    let plan_done: Vec<Duration> = run
        .events
        .iter()
        .filter(|(_, e)| *e == DriverEvent::PlanDone)
        .map(|(at, _)| *at)
        .collect();
    // The plan ran out and the run went on: once, and again in the new series.
    assert_eq!(plan_done, vec![ms(200), ms(4200)]);
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::ServerGone { since } if *since == ms(1200)))
            .map(|g| g.0),
        Some(ms(1200))
    );
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::ServerBack { .. }))
            .map(|g| g.0),
        Some(ms(3200))
    );
    assert_eq!(
        &run.server.polls()[..6],
        &[ms(700), ms(1200), ms(1700), ms(2200), ms(2700), ms(3200)]
    );
    let levels = run.levels();
    assert_eq!((levels[1].series, levels[1].plan_index), (1, Some(0)));
    assert_eq!(run.count(|e| matches!(e, DriverEvent::Finished { .. })), 1);
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn a_new_series_cuts_the_level_short_and_restarts_the_plan() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![LevelPlan::closed(1, 100), LevelPlan::closed(2, 100)];
    let cfg = watched(plan);
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(250), Command::NextLevel).await;
    h.send_at(ms(450), Command::NewSeries).await;
    h.send_at(ms(650), Command::SetConcurrency(3)).await;
    h.send_at(ms(850), Command::NewSeries).await;
    h.send_at(ms(1000), Command::Stop).await;
    let run = h.finish().await;
    let shape: Vec<(usize, Mode, Option<usize>, Duration)> = run
        .levels()
        .iter()
        .map(|l| (l.series, l.mode, l.plan_index, l.started_at))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, Mode::Planned, Some(0), ms(0)),
            (0, Mode::Planned, Some(1), ms(250)),
            (1, Mode::Planned, Some(0), ms(450)),
            (1, Mode::Manual, None, ms(650)),
            (2, Mode::Planned, Some(0), ms(850)),
        ]
    );
    // A planned level cut by it is partial; a manual one is complete.
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(true));
    assert_eq!(run.level_finished(3).map(|f| f.1), Some(false));
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::SeriesStarted { .. })),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_goes_on_in_its_series() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut cfg = watched(vec![LevelPlan::closed(1, 1), LevelPlan::closed(2, 2)]);
    cfg.first_series = 2;
    let mut h = Harness::start(cfg, server);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::NewSeries);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    let series: Vec<usize> = run.levels().iter().map(|l| l.series).collect();
    assert_eq!(series, vec![2, 2, 3, 3]);
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::SeriesStarted { series: 3, .. })),
        1
    );
}

/// A panic of the driver itself ends the run as failed, in one line that
/// says so, rather than closing the events as if the run had ended well.
#[tokio::test]
async fn a_driver_that_panics_ends_the_run_with_an_error() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    crate::load::driver::finish_on_panic(async { panic!("level 3 has no\nstate") }, tx).await;
    match rx.recv().await {
        Some(DriverEvent::Finished {
            stopped_by_user: false,
            error: Some(error),
        }) => assert_eq!(
            error,
            "the load driver stopped on an internal error (level 3 has no state); \
             the levels finished so far are saved"
        ),
        other => panic!("not a failed end: {other:?}"),
    }
    assert!(rx.recv().await.is_none(), "nothing after the end");
    // A driver that returns sends nothing more of its own.
    let (tx, mut rx) = mpsc::unbounded_channel();
    crate::load::driver::finish_on_panic(async {}, tx).await;
    assert!(rx.recv().await.is_none());
}
