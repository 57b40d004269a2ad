//! A sweep fitted to a budget (`DriverConfig::fit`): fitted levels that end
//! once steady, the plan stopped past the knee, the budget's deadline, the
//! warmup's capped answers and the estimate after it; and a plan without a
//! fit, which sends its counts as before.
//!
//! The steady rule (`stats::steady`) judges per-second throughput over the
//! seconds that are complete: those older than the longest request so far.
//! So a level of requests `L` long is steady at the earliest once it is
//! `L + 2 s` old (two complete seconds, the fewest an error can be had
//! from), and never before its floor of completions (`floor_completions`).
//! Every server below streams (nearly) the same tokens each second, so the
//! error is far under the 5% bound once two seconds are complete: which
//! request ends a level follows from the clock and the floor alone.

use super::*;
use crate::analysis::fit::{LevelEnd, SkipReason, Speed};
use crate::load::driver::{FitConfig, FitEvent};
use crate::stats::steady::STEADY_RSE;

/// `plan` fitted to `budget`, a level steady at `per_stream` completions a
/// stream and the default error bound.
fn fitted(plan: Vec<LevelPlan>, budget: Duration, per_stream: u32) -> DriverConfig {
    DriverConfig {
        fit: Some(FitConfig {
            budget,
            default_budget: false,
            tune_share: false,
            per_stream,
            max_rse: STEADY_RSE,
        }),
        ..config(plan)
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A server whose answers take `ttft_ms` to the first token and then
/// `tpot_ms` for each further token of what was asked (`max_tokens`), so
/// the warmup measures a decode speed of 1000 / `tpot_ms` tok/s.
fn paced(ttft_ms: u64, tpot_ms: u64) -> FakeServer {
    FakeServer::new(move |s| {
        let rest = u64::from(s.max_tokens.saturating_sub(1));
        ok(ttft_ms, ttft_ms + tpot_ms * rest)
    })
}

impl Run {
    /// The fit's events, each with its place among all events.
    fn fit_events(&self) -> Vec<(usize, Duration, &FitEvent)> {
        self.events
            .iter()
            .enumerate()
            .filter_map(|(i, (at, e))| match e {
                DriverEvent::Fit(f) => Some((i, *at, f)),
                _ => None,
            })
            .collect()
    }

    /// Each `LevelEnded`: (level, why), in order.
    fn level_ends(&self) -> Vec<(usize, LevelEnd)> {
        self.fit_events()
            .into_iter()
            .filter_map(|(_, _, f)| match f {
                FitEvent::LevelEnded { index, end } => Some((*index, *end)),
                _ => None,
            })
            .collect()
    }

    /// Each `Skipped`: (when, place, levels, why).
    fn skipped(&self) -> Vec<(Duration, usize, Vec<u32>, SkipReason)> {
        self.fit_events()
            .into_iter()
            .filter_map(|(i, at, f)| match f {
                FitEvent::Skipped {
                    concurrencies,
                    reason,
                } => Some((at, i, concurrencies.clone(), reason.clone())),
                _ => None,
            })
            .collect()
    }

    /// Where level `index`'s `LevelEnded` and `LevelFinished` came.
    fn end_and_finish(&self, index: usize) -> (usize, usize) {
        let ended = self.when(
            |e| matches!(e, DriverEvent::Fit(FitEvent::LevelEnded { index: i, .. }) if *i == index),
        );
        let finished =
            self.when(|e| matches!(e, DriverEvent::LevelFinished { index: i, .. } if *i == index));
        (
            ended.expect("a LevelEnded").1,
            finished.expect("a LevelFinished").1,
        )
    }

    /// The one Estimate of the run.
    fn estimate(&self) -> Estimate<'_> {
        let estimates: Vec<Estimate<'_>> = self
            .fit_events()
            .into_iter()
            .filter_map(|(_, _, f)| match f {
                FitEvent::Estimate {
                    line,
                    seconds,
                    shortened,
                    suggestion,
                    speed,
                } => Some(Estimate {
                    line,
                    seconds: *seconds,
                    shortened: *shortened,
                    suggestion: suggestion.as_deref(),
                    speed: *speed,
                }),
                _ => None,
            })
            .collect();
        assert_eq!(estimates.len(), 1, "{estimates:?}");
        estimates[0]
    }

    /// `max_tokens` of every warmup request, in the order sent.
    fn warmup_max_tokens(&self) -> Vec<u32> {
        self.server
            .sent()
            .iter()
            .filter(|s| s.level == usize::MAX)
            .map(|s| s.max_tokens)
            .collect()
    }
}

/// What `FitEvent::Estimate` said.
#[derive(Clone, Copy, Debug)]
struct Estimate<'a> {
    line: &'a str,
    seconds: f64,
    shortened: Option<(u32, u32)>,
    suggestion: Option<&'a str>,
    speed: Speed,
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

// ---------------------------------------------------------------------------
// A fitted level ends once steady.

#[tokio::test(start_paused = true)]
async fn a_fitted_level_ends_steady_at_its_floor_and_its_stragglers_count() {
    // Four streams of 1 s answers (first token at 100 ms), 4 a stream:
    // the floor is 4 x 4 = 16 completions. Rounds of four go out at 0, 1,
    // 2, 3 s and come back together a second later.
    // - At 3 s two seconds are complete (3 - 1 s longest), both alike, so
    //   the error is 0; but 12 < 16 completions: not steady yet. The floor,
    //   not the clock, is what holds this level.
    // - At 4 s the fourth round comes back one record at a time: the 13th,
    //   14th and 15th each free a stream, refilled at once (ids 16, 17,
    //   18); the 16th reaches the floor with the error still 0: steady, and
    //   the fourth stream is not refilled.
    // - The three sent at 4 s are in flight when the level becomes steady:
    //   they finish at 5 s and count for it, so it ends at 5 s with
    //   16 + 3 = 19 records (what `fitted_requests(4, 4, 40)` expects),
    //   well under its cap of 40.
    let server = FakeServer::new(|_| ok(100, 1000));
    let cfg = fitted(vec![LevelPlan::closed(4, 40)], secs(600), 4);
    let run = Harness::start(cfg, server).finish().await;

    let mut want_sent = Vec::new();
    for round in 0..4 {
        want_sent.extend([secs(round); 4]);
    }
    want_sent.extend([secs(4); 3]);
    assert_eq!(run.server.sent_at(0), want_sent);
    assert_eq!(
        crate::analysis::fit::fitted_requests(4, 4, 40),
        19,
        "the model's guess for this level"
    );

    let records = run.level_records(0);
    assert_eq!(records.len(), 19);
    assert!(records.iter().all(|r| r.is_ok() && !r.transition));
    // The stragglers: sent at 4 s, back at 5 s, counted for level 0 ...
    let stragglers: Vec<u64> = records
        .iter()
        .filter(|r| r.start == secs(4))
        .map(|r| r.id)
        .collect();
    assert_eq!(stragglers, vec![16, 17, 18]);
    assert!(records
        .iter()
        .filter(|r| r.start == secs(4))
        .all(|r| r.end == secs(5)));
    // ... and before the level's LevelFinished, which waits for them.
    run.assert_records_before_their_finish();
    assert_eq!(run.level_finished(0), Some((secs(5), false)));

    // Why it ended, said just before its LevelFinished (nothing between:
    // no level before it to judge a knee against, no warmup to time from).
    assert_eq!(run.level_ends(), vec![(0, LevelEnd::Steady)]);
    let (ended, finished_at) = run.end_and_finish(0);
    assert_eq!(ended + 1, finished_at);
    assert!(run.skipped().is_empty());
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_fitted_level_that_cannot_settle_in_its_count_ends_by_its_count() {
    // Two streams of 100 ms answers, a cap of 3 under the floor of 4 (2 a
    // stream): two go at 0, the third at 100 ms, and the count is spent
    // before the level could be steady; done at 200 ms, it says `Count`.
    let server = FakeServer::new(|_| ok(10, 100));
    let cfg = fitted(vec![LevelPlan::closed(2, 3)], secs(600), 2);
    let run = Harness::start(cfg, server).finish().await;

    assert_eq!(run.level_records(0).len(), 3);
    assert_eq!(run.level_finished(0), Some((ms(200), false)));
    assert_eq!(run.level_ends(), vec![(0, LevelEnd::Count)]);
    let (ended, finished_at) = run.end_and_finish(0);
    assert_eq!(ended + 1, finished_at);
    assert_eq!(*run.last(), finished(false));
}

// ---------------------------------------------------------------------------
// The knee.

#[tokio::test(start_paused = true)]
async fn a_one_slot_server_is_past_the_knee_at_four_and_sixteen_is_skipped() {
    // One slot: each request waits for the one before it, then takes 100 ms
    // (first token at 10 ms). 2 completions a stream.
    //
    // Level 1 (index 0, from 0 s): a request every 100 ms. Its first wave
    // (one request) is left out of the requests' own rates; the next three,
    // at 200, 300 and 400 ms, are alike: error 0, and the floor of
    // max(1 x 2, 3) = 3 is passed: steady at 400 ms, long before two whole
    // seconds of per-second throughput. Nothing else is in flight: 4
    // records, 20 tokens each over 0.4 s = 200 tok/s, every TTFT 10 ms.
    //
    // Level 4 (index 1, from 400 ms; times below from its start): four go
    // out at 0 and are served one after another, request k ending at
    // 0.1 (k + 1). Each end frees a stream, refilled at once, so request k
    // (k >= 4) is sent at 0.1 (k - 3) and waits for three before it: TTFT
    // 0.1 k + 0.01 - 0.1 (k - 3) = 310 ms (the first four: 10, 110, 210,
    // 310), and 400 ms send to end. The first four are the first wave; the
    // rates from the fifth on are alike, and the floor is 8: steady at the
    // 8th completion, 0.8 s, and the stream it freed is not refilled.
    // Requests 8, 9 and 10, sent at 0.5, 0.6 and 0.7, are still out: they
    // end at 0.9, 1.0, 1.1 and count. 11 records, 20 tokens each over 1.1 s
    // = 200 tok/s.
    //
    // The step 1 -> 4: 200 / 200 tok/s, a gain of 0 per doubling (< 10%),
    // while p99 TTFT grew 310 / 10 = 31x (>= 2x): the knee. Level 16 is
    // skipped when level 4 closes, at 0.4 + 1.1 = 1.5 s, and the run ends.
    let server = FakeServer::new(|_| ok(10, 100)).with_slots(1);
    let plan = vec![
        LevelPlan::closed(1, 1000),
        LevelPlan::closed(4, 1000),
        LevelPlan::closed(16, 1000),
    ];
    let run = Harness::start(fitted(plan, secs(600), 2), server)
        .finish()
        .await;

    let levels: Vec<(u32, Duration)> = run
        .levels()
        .iter()
        .map(|l| (l.concurrency, l.started_at))
        .collect();
    assert_eq!(levels, vec![(1, ms(0)), (4, ms(400))], "no level 16");
    assert_eq!(run.level_records(0).len(), 4);
    assert!(run.level_records(0).iter().all(|r| r.ttft == Some(ms(10))));
    let ttfts: Vec<Option<Duration>> = run.level_records(1).iter().map(|r| r.ttft).collect();
    let mut want = vec![Some(ms(10)), Some(ms(110)), Some(ms(210))];
    want.extend([Some(ms(310)); 8]);
    assert_eq!(ttfts, want, "the queue the one slot makes");
    assert_eq!(run.server.max_in_flight(1), 4);
    assert_eq!(run.level_finished(0), Some((ms(400), false)));
    assert_eq!(run.level_finished(1), Some((ms(1500), false)));

    assert_eq!(
        run.level_ends(),
        vec![(0, LevelEnd::Steady), (1, LevelEnd::Steady)]
    );
    let skipped = run.skipped();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let (at, place, concurrencies, reason) = &skipped[0];
    assert_eq!(*at, ms(1500));
    assert_eq!(*concurrencies, vec![16]);
    assert_eq!(*reason, SkipReason::PastKnee { from: 1, to: 4 });
    // Judged as level 4 closes: after its LevelEnded, before its
    // LevelFinished (the recorder has both before it writes the level).
    let (ended, finished_at) = run.end_and_finish(1);
    assert!(ended < *place && *place < finished_at, "{:?}", run.events);
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(1500)));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_server_that_batches_runs_every_level() {
    // No slot limit: every request takes 100 ms (first token at 10 ms)
    // whatever runs beside it, so throughput grows with the streams.
    // A level of c streams: its first wave (c requests, back at 100 ms) is
    // left out of the requests' own rates; the second wave comes back at
    // 200 ms, and its completions each refill their stream until the one
    // that makes the level steady (level 1: its 4th completion, three
    // rates past the wave; level 4 and 16: the 2c-th, the floor of 2 a
    // stream). What it refilled, c - 1 requests, ends at 300 ms and counts:
    // level 1 has 1 + 1 + 1 + 1 = 4 records over 0.4 s, levels 4 and 16
    // 3c - 1 = 11 and 47 over 0.3 s. They start at 0, 0.4 and 0.7 s;
    // throughput 200, 733, 3,133 tok/s: 91% and 107% a doubling, no knee.
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(1, 1000),
        LevelPlan::closed(4, 1000),
        LevelPlan::closed(16, 1000),
    ];
    let run = Harness::start(fitted(plan, secs(600), 2), server)
        .finish()
        .await;

    let levels: Vec<(u32, Duration)> = run
        .levels()
        .iter()
        .map(|l| (l.concurrency, l.started_at))
        .collect();
    assert_eq!(levels, vec![(1, ms(0)), (4, ms(400)), (16, ms(700))]);
    for (index, records, end) in [(0, 4, 400), (1, 11, 700), (2, 47, 1000)] {
        assert_eq!(run.level_records(index).len(), records, "level {index}");
        assert_eq!(run.level_finished(index), Some((ms(end), false)));
    }
    assert_eq!(
        run.level_ends(),
        vec![
            (0, LevelEnd::Steady),
            (1, LevelEnd::Steady),
            (2, LevelEnd::Steady)
        ]
    );
    assert!(run.skipped().is_empty(), "{:?}", run.skipped());
    assert_eq!(*run.last(), finished(false));
}

// ---------------------------------------------------------------------------
// The budget.

#[tokio::test(start_paused = true)]
async fn the_budget_ends_the_run_mid_level_at_its_deadline() {
    // Two streams of 1 s answers, budget 2.5 s. Level 2 is not steady by
    // then: at 2 s it has its floor (4) but only 2 - 1 = 1 complete second,
    // too few for an error. Its third round goes out at 2 s.
    // At 2.5 s the deadline wakes the driver: the level is cut (partial,
    // `Budget`), level 4 is skipped as `Spent`, the two in flight are
    // cancelled, and the run ends. Cancelling takes no time on this clock
    // and 2.5 s is a whole millisecond (tokio's timers' grain), so all of
    // it happens at exactly 2.5 s: the bound is 0.
    let server = FakeServer::new(|_| ok(100, 1000));
    let plan = vec![LevelPlan::closed(2, 1000), LevelPlan::closed(4, 1000)];
    let budget = ms(2500);
    let run = Harness::start(fitted(plan, budget, 2), server)
        .finish()
        .await;

    assert_eq!(run.levels().len(), 1, "level 4 never starts");
    assert_eq!(run.server.sent_at(0), [0, 0, 1, 1, 2, 2].map(secs));
    let outcomes: Vec<(Outcome, Duration)> = run
        .level_records(0)
        .iter()
        .map(|r| (r.outcome, r.end))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (Outcome::Ok, secs(1)),
            (Outcome::Ok, secs(1)),
            (Outcome::Ok, secs(2)),
            (Outcome::Ok, secs(2)),
            (Outcome::Cancelled, budget),
            (Outcome::Cancelled, budget),
        ]
    );
    assert_eq!(run.level_finished(0), Some((budget, true)));
    assert_eq!(run.level_ends(), vec![(0, LevelEnd::Budget)]);
    let (ended, finished_at) = run.end_and_finish(0);
    assert!(ended < finished_at);

    let skipped = run.skipped();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let (at, place, concurrencies, reason) = &skipped[0];
    assert_eq!(*at, budget);
    assert_eq!(*concurrencies, vec![4]);
    assert_eq!(
        *reason,
        SkipReason::Spent {
            budget,
            cut: Some(2)
        }
    );
    // Said before the level's LevelFinished, so the recorder has it when
    // it writes the cut level.
    assert!(*place < finished_at);

    // Not the user's stop, and no error: the budget ended it, on time.
    assert_eq!(*run.last(), finished(false));
    assert_eq!(run.events.last().map(|e| e.0), Some(budget));
}

#[tokio::test(start_paused = true)]
async fn a_level_the_budget_left_cannot_hold_is_skipped_before_it_starts() {
    // Answers of 20 tokens: first at 10 ms, then 5 ms a token, 105 ms in
    // all. The warmup (2 at level 1's one stream, 0 .. 210 ms) measures
    // TTFT 10 ms and 200 tok/s. Budget 0.8 s.
    // Level 1 from 210 ms: an answer every 105 ms; past its first wave the
    // requests' own rates are alike, three of them by the 4th answer,
    // 420 ms in: steady (floor 3). It ends at 630 ms, having made 4 x 20
    // tokens in 0.42 s = 190.5 tok/s.
    // Level 64 needs its floor of 128 even at full gain (64 x that):
    // 0.01 + 128 x 20 / (64 x 190.5) = 0.01 + 0.21 = 0.22 s, and the
    // budget has 0.8 - 0.63 = 0.17 s left: skipped, and the run ends.
    let cfg = DriverConfig {
        warmup: 2,
        ..fitted(
            vec![LevelPlan::closed(1, 1000), LevelPlan::closed(64, 1000)],
            ms(800),
            2,
        )
    };
    let run = Harness::start(cfg, paced(10, 5)).finish().await;

    assert_eq!(run.levels().len(), 1);
    assert_eq!(run.levels()[0].started_at, ms(210));
    assert_eq!(run.level_records(0).len(), 4);
    assert_eq!(run.level_finished(0), Some((ms(630), false)));
    assert_eq!(run.level_ends(), vec![(0, LevelEnd::Steady)]);
    let skipped = run.skipped();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let (at, _, concurrencies, reason) = &skipped[0];
    assert_eq!(*at, ms(630));
    assert_eq!(*concurrencies, vec![64]);
    match reason {
        SkipReason::Budget { left_s, needs_s } => {
            assert!(close(*left_s, 0.17), "{left_s}");
            assert!((needs_s - 0.22).abs() < 1e-6, "{needs_s}");
        }
        other => panic!("{other:?}"),
    }
    // The plan ran out before the deadline: an ordinary end.
    assert_eq!(*run.last(), finished(false));
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(630)));
}

// ---------------------------------------------------------------------------
// The warmup and the estimate.

#[tokio::test(start_paused = true)]
async fn a_fitted_warmup_asks_64_tokens_and_the_answers_are_shortened_to_fit() {
    // Answers of 1,024 tokens asked; the server: first token at 370 ms,
    // then 10 ms a token. Capped at 64, a warmup answer takes
    // 0.37 + 63 x 0.01 = 1 s; two at level 1's one stream end at 2 s.
    // Speed: TTFT 0.37 s, TPOT 630 / 63 = 10 ms, so 100 tok/s.
    // The first two levels, fitted: 1 stream: its first wave and three
    // past it, 4; 4 streams: 4 x 2 + 3 = 11; 15 requests. At 1,024 tokens,
    // one at a time, each takes 0.37 + 10.23 = 10.6 s: 159 s, over 70% of
    // the 92 - 2 = 90 s left (63 s). Shortened: 63 / 15 - 0.37 = 3.83 s a
    // request, so 1 + 3.83 x 100 = 384 tokens, a multiple of 16.
    // At 384: 0.37 + 3.83 = 4.2 s a request, 15 x 4.2 = 63 s,
    // 15 x 384 = 5,760 tokens.
    let plan = vec![
        LevelPlan::closed(1, 1000),
        LevelPlan::closed(4, 1000),
        LevelPlan::closed(16, 1000),
    ];
    let mut cfg = fitted(plan, secs(92), 2);
    cfg.warmup = 2;
    cfg.workload = Workload::new(1, 16, 1024);
    let mut h = Harness::start(cfg, paced(370, 10));
    // The first answer of level 1: 2 s + 4.2 s.
    h.wait_for(|e| matches!(e, DriverEvent::Record(_))).await;
    assert_eq!(h.now(), ms(6200));
    h.send(Command::Stop);
    let run = h.finish().await;

    assert_eq!(run.warmup_max_tokens(), vec![64, 64]);
    assert_eq!(run.levels()[0].started_at, secs(2));
    let Estimate {
        line,
        seconds,
        shortened,
        suggestion,
        speed,
    } = run.estimate();
    assert_eq!(shortened, Some((1024, 384)));
    assert_eq!(
        speed,
        Speed {
            ttft_s: 0.37,
            decode_tok_s: 100.0
        }
    );
    assert!(close(seconds, 63.0), "{seconds}");
    assert_eq!(
        line,
        "this plan: about 63 s for levels 1 and 4 (15 requests, 5,760 output tokens) \
         at 100.0 tok/s per stream if the server serves one stream at a time, then 16 \
         only while throughput still gains; each level ends once steady, within the \
         given budget of 92s"
    );
    assert_eq!(suggestion, None, "a fitted run needs no budget suggested");
    // Then the time left, from the end of the warmup: the same two levels,
    // within the 90 s left.
    let time_left: Vec<(f64, Duration)> = run
        .fit_events()
        .into_iter()
        .filter_map(|(_, _, f)| match f {
            FitEvent::TimeLeft { seconds, at } => Some((*seconds, *at)),
            _ => None,
        })
        .collect();
    assert_eq!(time_left.len(), 1, "{time_left:?}");
    assert!(close(time_left[0].0, 63.0), "{time_left:?}");
    assert_eq!(time_left[0].1, secs(2));
    // The level asks the shortened length.
    let level_asks: Vec<u32> = run
        .server
        .sent()
        .iter()
        .filter(|s| s.level == 0)
        .map(|s| s.max_tokens)
        .collect();
    assert!(!level_asks.is_empty());
    assert!(level_asks.iter().all(|&n| n == 384), "{level_asks:?}");
}

#[tokio::test(start_paused = true)]
async fn without_fit_the_warmup_asks_the_full_length_and_nothing_is_shortened() {
    // The same server and answers, no fit. The warmup asks 1,024 tokens:
    // 0.37 + 1023 x 0.01 = 10.6 s each, two one after another: 21.2 s.
    // The speed is the same (TPOT 10 ms). The fixed plan is closed, so it
    // still gets its cost: 3 + 8 = 11 requests at 10.6 s one at a time =
    // 116.6 s ("2 min"), 11 x 1,024 = 11,264 tokens; under 30 min, so no
    // budget is suggested.
    let plan = vec![LevelPlan::closed(1, 3), LevelPlan::closed(4, 8)];
    let mut cfg = config(plan);
    cfg.warmup = 2;
    cfg.workload = Workload::new(1, 16, 1024);
    let run = Harness::start(cfg, paced(370, 10)).finish().await;

    assert_eq!(run.warmup_max_tokens(), vec![1024, 1024]);
    assert_eq!(run.levels()[0].started_at, ms(21_200));
    let Estimate {
        line,
        seconds,
        shortened,
        suggestion,
        speed,
    } = run.estimate();
    assert_eq!(shortened, None);
    assert_eq!(suggestion, None);
    assert_eq!(
        speed,
        Speed {
            ttft_s: 0.37,
            decode_tok_s: 100.0
        }
    );
    assert!(close(seconds, 116.6), "{seconds}");
    assert_eq!(
        line,
        "this plan: 2 levels, 11 requests, 11,264 output tokens: about 2 min at 100.0 \
         tok/s per stream if the server serves one stream at a time"
    );
    // Every level asks the full length, and runs its count.
    assert!(run.server.sent().iter().all(|s| s.max_tokens == 1024));
    assert_eq!(run.level_records(0).len(), 3);
    assert_eq!(run.level_records(1).len(), 8);
    assert_eq!(*run.last(), finished(false));
}

// ---------------------------------------------------------------------------
// Without a fit.

#[tokio::test(start_paused = true)]
async fn without_fit_a_plan_of_counts_sends_exactly_its_counts() {
    // The one-slot server of the knee test: fitted, level 1 would end
    // steady at its 4th answer and level 16 be skipped past the knee.
    // Without a fit every level sends its count, one slot serving them
    // 100 ms each: warmup 2 (0 .. 0.2 s), level 1: 30 (to 3.2 s), level 4:
    // 30 (to 6.2 s), level 16: 32 (to 9.4 s).
    let server = FakeServer::new(|_| ok(10, 100)).with_slots(1);
    let plan = vec![
        LevelPlan::closed(1, 30),
        LevelPlan::closed(4, 30),
        LevelPlan::closed(16, 32),
    ];
    let mut cfg = config(plan);
    cfg.warmup = 2;
    let run = Harness::start(cfg, server).finish().await;

    let starts: Vec<(u32, Duration)> = run
        .levels()
        .iter()
        .map(|l| (l.concurrency, l.started_at))
        .collect();
    assert_eq!(
        starts,
        vec![(1, ms(200)), (4, ms(3200)), (16, ms(6200))],
        "nothing skipped"
    );
    for (index, n, end) in [(0, 30, 3200), (1, 30, 6200), (2, 32, 9400)] {
        assert_eq!(run.server.sent_at(index).len(), n, "level {index}");
        let records = run.level_records(index);
        assert_eq!(records.len(), n, "level {index}");
        assert!(records.iter().all(|r| r.is_ok()));
        assert_eq!(run.level_finished(index), Some((ms(end), false)));
    }
    // The estimate and the time left are said for any closed plan; why a
    // level ended and what was skipped only for a fitted one.
    assert_eq!(run.estimate().shortened, None);
    assert!(run.level_ends().is_empty(), "{:?}", run.level_ends());
    assert!(run.skipped().is_empty(), "{:?}", run.skipped());
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_steady_level_still_draining_at_the_deadline_stays_whole() {
    // Two streams of 1 s answers, except request 5, which takes 5 s.
    // Requests 0,1 go at 0 s, 2,3 at 1 s, 4,5 at 2 s. At 3 s request 4 is
    // back: 5 completions over the floor of 4, two complete seconds (age
    // 3 s less the longest, 1 s) with the same tokens each: steady, and its
    // stream is not refilled. Request 5 is still out when the budget of
    // 4 s ends: the level was steady, so what it measured stands. It is
    // closed whole with `Steady`, request 5 is cancelled, level 4 is
    // skipped as `Spent` with no level cut, and the run ends at 4 s.
    let server = FakeServer::new(|sent| {
        if sent.id == 5 {
            ok(100, 5000)
        } else {
            ok(100, 1000)
        }
    });
    let plan = vec![LevelPlan::closed(2, 1000), LevelPlan::closed(4, 1000)];
    let budget = secs(4);
    let run = Harness::start(fitted(plan, budget, 2), server)
        .finish()
        .await;

    assert_eq!(run.levels().len(), 1, "level 4 never starts");
    let outcomes: Vec<(Outcome, Duration)> = run
        .level_records(0)
        .iter()
        .map(|r| (r.outcome, r.end))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (Outcome::Ok, secs(1)),
            (Outcome::Ok, secs(1)),
            (Outcome::Ok, secs(2)),
            (Outcome::Ok, secs(2)),
            (Outcome::Ok, secs(3)),
            (Outcome::Cancelled, budget),
        ]
    );
    assert_eq!(run.level_finished(0), Some((budget, false)));
    assert_eq!(run.level_ends(), vec![(0, LevelEnd::Steady)]);
    let skipped = run.skipped();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].2, vec![4]);
    assert_eq!(skipped[0].3, SkipReason::Spent { budget, cut: None });
    assert_eq!(*run.last(), finished(false));
}
