//! The tally on made-up events: no file, no socket, no clock. Each
//! expected figure is worked out by hand in the test's comment.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::analysis::decide::CapacitySlo;
use crate::record::{ErrorClass, Outcome, RequestRecord};

/// A run whose capacity rule is "p99 TTFT at most 150 ms, errors under
/// 1%", at $2 per GPU-hour against an API's $1 per million.
fn run(kind: &str) -> RunInfo {
    let mut run = RunInfo::example();
    run.kind = kind.into();
    run.decision.slo = CapacitySlo {
        ttft_p99_ms: Some(150.0),
        min_stream_tok_s: None,
        tpot_p99_ms: None,
        max_error_rate: 0.01,
    };
    run.decision.gpu_price_per_hour = Some(2.0);
    run.decision.api_price_per_m = Some(1.0);
    run
}

fn info(index: usize, concurrency: u32, mode: Mode, started_ms: u64, series: usize) -> LevelInfo {
    LevelInfo {
        num_prompts: Some(concurrency),
        plan_index: Some(index),
        series,
        ..LevelInfo::new(index, concurrency, mode, Duration::from_millis(started_ms))
    }
}

fn answer(id: u64, level: usize, start_ms: u64, ttft_ms: u64, end_ms: u64) -> RequestRecord {
    let mut r = RequestRecord::empty(id, level);
    r.start = Duration::from_millis(start_ms);
    r.end = Duration::from_millis(end_ms);
    r.ttft = Some(Duration::from_millis(ttft_ms));
    r.e2el = Some(Duration::from_millis(end_ms - start_ms));
    r.output_tokens = 100;
    r.output_tokens_requested = 100;
    r
}

fn reading(cpu_ms: u64, wall_ms: u64, lag_ms: &[f64]) -> ClientReading {
    ClientReading {
        cpu_time: Duration::from_millis(cpu_ms),
        wall_time: Duration::from_millis(wall_ms),
        loop_lag_ms: lag_ms.to_vec(),
    }
}

/// One closed-loop level at `concurrency`: every stream sends one request
/// at the level's start, which answers its first token after `ttft_ms` and
/// its 100th token a second after it was sent.
fn level(tally: &mut Tally, index: usize, concurrency: u32, ttft_ms: u64, series: usize) {
    let start = index as u64 * 1000;
    tally.on_event(
        &DriverEvent::LevelStarted(info(index, concurrency, Mode::Planned, start, series)),
        || reading(0, start, &[]),
    );
    for stream in 0..u64::from(concurrency) {
        let record = answer(
            index as u64 * 100 + stream,
            index,
            start,
            ttft_ms,
            start + 1000,
        );
        tally.on_event(&DriverEvent::Record(record), ClientReading::default);
    }
    let closed = tally
        .close_level(index, false, reading(0, start + 1000, &[]))
        .expect("the level was running");
    tally.keep(closed.level);
}

/// Planned levels in series 0, one per `(streams, p99 TTFT ms)`, in order.
fn sweep(tally: &mut Tally, levels: &[(u32, u64)]) {
    for (index, (streams, ttft_ms)) in levels.iter().enumerate() {
        level(tally, index, *streams, *ttft_ms, 0);
    }
}

/// Levels at 1, 2 and 4 streams, each sending one 100-token request per
/// stream that lasts 1 s, with p99 TTFT 50, 100 and 200 ms:
/// - output throughput is 100 x streams / 1 s: 100, 200, 400 tok/s;
/// - the 150 ms SLO passes 1 and 2 and fails 4, so capacity is 2 streams
///   at 200 tok/s, half of the 400 tok/s peak;
/// - throughput doubles with every doubling of streams: no knee;
/// - cost at capacity: $2/h over 200 tok/s x 3,600 s = 0.72 M tokens an
///   hour is $2.777... per million; break-even against the $1 API is
///   2 / 1 x 1e6 / 3,600 = 555.55... tok/s.
#[test]
fn three_levels_make_the_decision_and_cost_worked_by_hand() {
    let mut tally = Tally::new(run("sweep"), None);
    sweep(&mut tally, &[(1, 50), (2, 100), (4, 200)]);

    let throughputs: Vec<f64> = tally
        .saved_levels()
        .iter()
        .map(|l| l.stats.output_throughput)
        .collect();
    assert_eq!(throughputs, [100.0, 200.0, 400.0]);

    let decision = tally.decision();
    assert!(decision.knee.is_none(), "{:?}", decision.knee);
    let capacity = decision.capacity.as_ref().expect("a capacity");
    assert_eq!(capacity.concurrency, 2);
    assert_eq!(capacity.output_throughput, 200.0);
    assert_eq!(capacity.share_of_peak, 0.5);

    let cost = tally.cost(&decision).expect("a GPU price was given");
    let per_m = cost.cost_per_m_output.expect("a capacity throughput");
    assert!((per_m - 2.0 / 0.72).abs() < 1e-9, "{per_m}");
    let break_even = cost.break_even_output_tok_s.expect("an API price");
    assert!((break_even - 2.0e6 / 3600.0).abs() < 1e-9, "{break_even}");

    // What the faces print: the capacity first, the cost where asked for.
    let printed = tally.verdict_lines(&decision, true);
    assert_eq!(printed[0], decision.capacity_line());
    assert_eq!(printed[1], format!("cost: {}", cost.verdict));
    let live = tally.verdict_lines(&decision, false);
    assert!(live.iter().all(|l| !l.starts_with("cost: ")), "{live:?}");
    assert_eq!(printed.len(), live.len() + 1);
}

/// Client load over a level: CPU time went 1.0 -> 1.5 s while the meter's
/// clock went 10 -> 12 s, so 0.5 / 2 = 25%. The loop lag is the finish
/// reading's samples only (the start reading's 99 ms fell before the level):
/// p99 of 1, 2, 3, 4 ms interpolates at rank 0.99 x 3 = 2.97, so 3.97 ms.
#[test]
fn client_load_is_the_readings_difference() {
    let mut tally = Tally::new(run("sweep"), None);
    tally.on_event(
        &DriverEvent::LevelStarted(info(0, 1, Mode::Planned, 0, 0)),
        || reading(1000, 10_000, &[99.0]),
    );
    tally.on_event(
        &DriverEvent::Record(answer(1, 0, 0, 50, 1000)),
        ClientReading::default,
    );
    let closed = tally
        .close_level(0, false, reading(1500, 12_000, &[4.0, 1.0, 3.0, 2.0]))
        .expect("running");
    assert_eq!(closed.level.client.cpu_percent, Some(25.0));
    let lag = closed.level.client.loop_lag_ms_p99.expect("lag samples");
    assert!((lag - 3.97).abs() < 1e-9, "{lag}");
}

/// Records count for their own level only; transition records are counted
/// apart; a record of a level not running is dropped; a level that was
/// never started cannot be closed.
#[test]
fn records_go_to_their_level_and_transition_ones_stay_apart() {
    let mut tally = Tally::new(run("sweep"), None);
    tally.on_event(
        &DriverEvent::LevelStarted(info(0, 2, Mode::Planned, 0, 0)),
        ClientReading::default,
    );
    let mut transition = answer(1, 0, 0, 10, 500);
    transition.transition = true;
    let mut failed = answer(2, 0, 0, 10, 800);
    failed.outcome = Outcome::Failed(ErrorClass::Http(503));
    failed.ttft = None;
    for record in [
        transition,
        failed,
        answer(3, 0, 0, 40, 1000),
        answer(4, 7, 0, 40, 1000),
    ] {
        tally.on_event(&DriverEvent::Record(record), ClientReading::default);
    }
    assert!(tally
        .close_level(5, false, ClientReading::default())
        .is_none());
    let closed = tally
        .close_level(0, false, ClientReading::default())
        .expect("running");
    assert_eq!(closed.level.transition, 1);
    assert_eq!(closed.level.stats.completed, 1);
    assert_eq!(closed.level.stats.failed, 1);
    assert_eq!(closed.level.stats.errors.get("http_503"), Some(&1));
    // Two records folded: the transition one and level 7's are not among them.
    assert_eq!(closed.records.records(), 2);
    assert!(closed.level.has_answers());
    assert!(tally.open_levels().is_empty());
}

/// A hand-set level at 2 streams needs 2 x 2 = 4 completions to be steady;
/// one is too few, so it is saved as unsteady and never judged, and the
/// sweep's single planned level is all the decision sees.
#[test]
fn an_unsteady_manual_level_is_kept_but_not_judged() {
    let mut tally = Tally::new(run("sweep"), None);
    level(&mut tally, 0, 1, 50, 0);
    tally.on_event(
        &DriverEvent::LevelStarted(info(1, 2, Mode::Manual, 1000, 0)),
        ClientReading::default,
    );
    tally.on_event(
        &DriverEvent::TargetReached {
            index: 1,
            at: Duration::from_millis(1000),
        },
        ClientReading::default,
    );
    tally.on_event(
        &DriverEvent::Record(answer(10, 1, 1000, 20, 2000)),
        ClientReading::default,
    );
    let closed = tally
        .close_level(1, false, ClientReading::default())
        .expect("running");
    let steadiness = closed
        .level
        .steadiness
        .clone()
        .expect("manual levels are judged");
    assert!(!steadiness.steady);
    assert!(closed.level.is_unsteady());
    tally.keep(closed.level);
    assert_eq!(tally.saved_levels().len(), 2);
    let capacity = tally.decision().capacity.expect("the planned level passes");
    assert_eq!(capacity.concurrency, 1);
}

/// A hand-set level at 2 streams, steady from its start, left by a stop
/// that cancels one request in flight. Every answer is 100 tokens over 2 s
/// (50 tok/s a stream). Stream A runs 0-2, 2-4, 4-6 s and is cancelled in
/// 6-7; B runs 1-3, 3-5, 5-7. From the target (1 s), the seconds hold 100,
/// 100, 100, 100, 100 and then 50 (A's cancelled tokens are missing). With
/// the last second the RSE would be 20.4 / sqrt(6) / 91.7 = 9.1%, not
/// steady; on the seconds whole before the longest request (2 s) it is
/// four seconds of 100: steady, RSE 0. A level closed whole that still
/// holds a cancelled request is judged so too.
#[test]
fn a_level_left_by_a_stop_is_judged_on_its_whole_seconds() {
    let judged = |cancelled_came_back: bool, partial: bool| {
        let mut tally = Tally::new(run("sweep"), None);
        tally.on_event(
            &DriverEvent::LevelStarted(info(0, 2, Mode::Manual, 0, 0)),
            ClientReading::default,
        );
        tally.on_event(
            &DriverEvent::TargetReached {
                index: 0,
                at: Duration::from_millis(1000),
            },
            ClientReading::default,
        );
        let answers = [
            (0, 2000),
            (1000, 3000),
            (2000, 4000),
            (3000, 5000),
            (4000, 6000),
            (5000, 7000),
        ];
        for (id, (start, end)) in (1..).zip(answers) {
            tally.on_event(
                &DriverEvent::Record(answer(id, 0, start, 0, end)),
                ClientReading::default,
            );
        }
        // A's last request: back cancelled before the level closed, or not
        // back at all when the stop closed it.
        if cancelled_came_back {
            let mut cancelled = RequestRecord::empty(99, 0);
            cancelled.start = Duration::from_millis(6000);
            cancelled.end = Duration::from_millis(7000);
            cancelled.outcome = Outcome::Cancelled;
            tally.on_event(&DriverEvent::Record(cancelled), ClientReading::default);
        }
        let closed = tally
            .close_level(0, partial, ClientReading::default())
            .expect("running");
        closed.level.steadiness.clone().expect("judged")
    };
    for (came_back, partial) in [(false, true), (true, true), (true, false)] {
        let steadiness = judged(came_back, partial);
        assert!(steadiness.steady, "{came_back} {partial}: {steadiness:?}");
        assert_eq!(steadiness.rse, Some(0.0), "{came_back} {partial}");
    }
    // Closed whole with every request back, the last second counts: 9.1%.
    let whole = judged(false, false);
    assert!(!whole.steady, "{whole:?}");
    let rse = whole.rse.expect("an estimate");
    assert!((rse - 0.0909).abs() < 0.001, "{rse}");
}

/// One level is a single-level sweep, which the diagnoses say; an open-loop
/// run sets no concurrency, so the same level says nothing of the kind.
#[test]
fn sweep_checks_apply_to_sweeps_only() {
    let ids = |kind: &str| {
        let mut tally = Tally::new(run(kind), None);
        level(&mut tally, 0, 1, 50, 0);
        tally
            .diagnoses()
            .into_iter()
            .map(|d| d.id)
            .collect::<Vec<_>>()
    };
    assert!(ids("sweep").contains(&"single_level"), "{:?}", ids("sweep"));
    assert!(!ids("rate").contains(&"single_level"), "{:?}", ids("rate"));
}

/// The search's failing bound at 4 streams: the 4-stream probe is past the
/// capacity whatever its own SLO says (here it would pass, at 120 ms).
#[test]
fn the_searchs_failing_bound_caps_the_capacity() {
    let mut tally = Tally::new(run("find-capacity"), None);
    sweep(&mut tally, &[(1, 50), (2, 100), (4, 120)]);
    assert_eq!(tally.decision().capacity.expect("passes").concurrency, 4);
    tally.on_event(
        &DriverEvent::Search(SearchProgress {
            passing: Some(2),
            failing: Some(4),
            next: None,
        }),
        ClientReading::default,
    );
    assert_eq!(tally.decision().capacity.expect("passes").concurrency, 2);
    // The table lists 4 streams at 400 tok/s: the capacity line's peak is
    // the one below the bound, and it says so, naming the table's.
    let reason = tally.decision().capacity.expect("passes").reason;
    assert!(
        reason.contains("100% of the best below 4 streams, 200 tok/s at 2 streams"),
        "{reason}"
    );
    assert!(
        reason.contains(
            "(the search judges only the levels below 4 streams, where the SLO failed or \
             throughput stopped growing; 4 streams made 400 tok/s)"
        ),
        "{reason}"
    );
}

/// Series: a restart starts series 2 under its default label until it is
/// named; each series has its own decision, and the run's is the latest's.
#[test]
fn each_series_is_judged_on_its_own() {
    let mut tally = Tally::new(run("sweep"), None);
    sweep(&mut tally, &[(1, 50), (2, 100)]);
    tally.on_event(
        &DriverEvent::SeriesStarted {
            series: 1,
            at: Duration::from_millis(2000),
        },
        ClientReading::default,
    );
    assert_eq!(tally.series_label(1), "series 2");
    tally.set_series(1, "slots 4".into(), json!({"total_slots": 4}));
    level(&mut tally, 2, 1, 60, 1);
    assert_eq!(tally.series_indexes(), [0, 1]);
    assert_eq!(tally.series_label(1), "slots 4");
    assert_eq!(
        tally.decision_of(0).capacity.expect("passes").concurrency,
        2
    );
    assert_eq!(tally.decision().capacity.expect("passes").concurrency, 1);
    let series = tally.series_entries();
    assert_eq!(series[1].label.as_deref(), Some("slots 4"));
    assert_eq!(series[1].server["total_slots"], 4);
    let capacity = |i: usize| series[i].capacity.as_ref().and_then(|c| c.concurrency);
    assert_eq!(capacity(0), Some(2));
}

/// A resumed run: its kept point at 8 streams (500 tok/s, p99 TTFT 140 ms)
/// joins the new levels, so the capacity is 8; new levels are numbered
/// on from the kept ones.
#[test]
fn a_resumed_runs_levels_still_count() {
    use crate::analysis::decide::{Figures, LevelPoint};
    let kept = LevelPoint {
        concurrency: 8,
        kind: Mode::Planned,
        partial: false,
        figures: Figures {
            output_throughput: 500.0,
            per_stream_tok_s: 62.5,
            p50_ttft_ms: Some(100.0),
            p99_ttft_ms: Some(140.0),
            ..Figures::default()
        },
    };
    let prior = PriorRun {
        levels: vec![json!({"max_concurrency": 8})],
        points: vec![kept],
        point_series: vec![0],
        point_servers: vec![Value::Null],
        last_series: 0,
        series_labels: vec![(0, "first".into())],
        next_level_index: 3,
        run: json!({}),
        new_series: false,
    };
    let mut tally = Tally::new(run("sweep"), Some(prior.clone()));
    assert_eq!(tally.level_offset(), 3);
    assert_eq!(tally.series_label(0), "first");
    sweep(&mut tally, &[(1, 50), (2, 100)]);
    let capacity = tally.decision().capacity.expect("passes");
    assert_eq!(
        (capacity.concurrency, capacity.output_throughput),
        (8, 500.0)
    );
    // The table the run prints holds the kept level, first, marked (and
    // with its series, named "first"): the capacity above is one of its rows.
    let table = crate::report::text::sweep_table(
        tally.finished(),
        &tally.kept_levels(),
        tally.run(),
        &|i| tally.series_label(i),
    );
    let first_row = table.lines().nth(2).expect("a row");
    assert_eq!(
        first_row.split_whitespace().collect::<Vec<_>>(),
        ["8", "62.5", "500.0", "100.0", "140.0", "-", "kept,", "first"],
        "{table}"
    );
    // One concurrency resumed beside a kept other is not a one-level run.
    let mut one_more = Tally::new(run("sweep"), Some(prior));
    sweep(&mut one_more, &[(2, 100)]);
    let ids: Vec<&str> = one_more.diagnoses().iter().map(|d| d.id).collect();
    assert!(!ids.contains(&"single_level"), "{ids:?}");
}

/// A seed given again, on a server that keeps no cache gauge but counts
/// each answer's cached prompt tokens (llama-server): 511 of 512 prompt
/// tokens cached is 99.8%, and the note says so.
#[test]
fn a_given_seed_is_told_the_cache_from_the_answers_own_count() {
    let mut run = run("sweep");
    run.seed_given = true;
    run.seed = 42;
    run.input_len = 512;
    let mut tally = Tally::new(run, None);
    tally.on_event(
        &DriverEvent::LevelStarted(info(0, 1, Mode::Planned, 0, 0)),
        || reading(0, 0, &[]),
    );
    let mut record = answer(1, 0, 0, 40, 1000);
    record.input_tokens_reported = Some(512);
    record.cached_tokens = Some(511);
    tally.on_event(&DriverEvent::Record(record), ClientReading::default);
    let closed = tally
        .close_level(0, false, reading(0, 1000, &[]))
        .expect("running");
    tally.keep(closed.level);
    let told: Vec<String> = tally
        .diagnoses()
        .into_iter()
        .filter(|d| d.id == "seed_repeat")
        .map(|d| d.message)
        .collect();
    assert_eq!(
        told,
        ["--seed 42 repeats earlier prompts: the server's prefix cache answered 100% of prompt tokens, \
          so TTFT reads lower than a first run's; leave --seed out for prompts new to the server"],
        "{:?}",
        tally.diagnoses()
    );
}

/// The warmup's figures, rounded to the thousandth, as summary.json has them.
#[test]
fn warmup_is_kept_rounded() {
    let mut tally = Tally::new(run("sweep"), None);
    tally.on_event(
        &DriverEvent::WarmupFinished {
            ok: 3,
            failed: 1,
            calibration: Calibration {
                tokens_per_word: 1.33333,
                overhead_tokens: 12.0004,
                slope_from_tokenizer: false,
            },
            reported_prompt_tokens: vec![40, 41],
        },
        ClientReading::default,
    );
    assert_eq!(
        tally.warmup(),
        Some(&json!({
            "ok": 3,
            "failed": 1,
            "tokens_per_word": 1.333,
            "template_overhead_tokens": 12.0,
            "reported_prompt_tokens": [40, 41],
        }))
    );
}

/// The verdict lines in their order: capacity, knee, cost (when asked
/// for), then the notes. The sweep of `three_levels_...` plus 8 streams
/// whose 100-token answers take 2 s (first token at 800 ms): 8 x 100 / 2 s
/// = 400 tok/s, no more than at 4 streams, while p99 TTFT goes 200 -> 800
/// ms (4.0x), so the knee is 4 -> 8 adding 0.0%. Capacity stays 2 streams
/// (the 150 ms SLO).
#[test]
fn the_verdict_lines_say_capacity_knee_cost_then_notes() {
    let mut tally = Tally::new(run("sweep"), None);
    sweep(&mut tally, &[(1, 50), (2, 100), (4, 200)]);
    tally.on_event(
        &DriverEvent::LevelStarted(info(3, 8, Mode::Planned, 3000, 0)),
        || reading(0, 3000, &[]),
    );
    for stream in 0..8 {
        let record = answer(300 + stream, 3, 3000, 800, 5000);
        tally.on_event(&DriverEvent::Record(record), ClientReading::default);
    }
    let closed = tally
        .close_level(3, false, reading(0, 5000, &[]))
        .expect("running");
    tally.keep(closed.level);
    let decision = tally.decision();
    let lines = tally.verdict_lines(&decision, true);
    assert!(lines[0].starts_with("capacity: 2 streams"), "{lines:?}");
    assert_eq!(
        lines[1],
        "knee: 4 -> 8 streams adds 0.0% throughput while p99 TTFT grows 4.0x: \
         KV cache or batch full, requests queue"
    );
    assert!(lines[2].starts_with("cost: "), "{lines:?}");
    assert!(lines.len() > 3, "the one-round note: {lines:?}");
    assert!(
        lines[3..].iter().all(|l| l.starts_with("note: ")),
        "{lines:?}"
    );
    // The live view leaves the cost out and keeps the rest in order.
    let live = tally.verdict_lines(&decision, false);
    assert_eq!(live[..2], lines[..2]);
    assert_eq!(live[2..], lines[3..]);
}

/// A level of `streams` one-request streams in `series` whose answers
/// take `lasts_ms` (first token at `ttft_ms`), with one scrape of the
/// server's gauges while it runs.
fn level_with_gauges(
    tally: &mut Tally,
    (index, series): (usize, usize),
    (streams, ttft_ms, lasts_ms): (u32, u64, u64),
    gauges: &[(&'static str, f64)],
) {
    let start = index as u64 * 10_000;
    tally.on_event(
        &DriverEvent::LevelStarted(info(index, streams, Mode::Planned, start, series)),
        || reading(0, start, &[]),
    );
    tally.on_server_sample(&ServerSample::of(gauges));
    for stream in 0..u64::from(streams) {
        let record = answer(
            index as u64 * 100 + stream,
            index,
            start,
            ttft_ms,
            start + lasts_ms,
        );
        tally.on_event(&DriverEvent::Record(record), ClientReading::default);
    }
    let closed = tally
        .close_level(index, false, reading(0, start + lasts_ms, &[]))
        .expect("running");
    tally.keep(closed.level);
}

/// A tune's first setting, kept in the folder while the second runs,
/// saves the knee cause it printed, not the client's guess. Its levels:
/// 1, 2 and 4 streams of 100-token answers; 1 and 2 last 1 s (100 and 200
/// tok/s), 4 last 2 s (4 x 100 / 2 = 200 tok/s: +0.0%) while p99 TTFT
/// goes 100 -> 800 ms (8.0x): the knee is 2 -> 4. The server's gauges
/// show 2 running at 2 streams, and at 4 still 2 running with 2 waiting:
/// the batch cap, vLLM's --max-num-seqs 2.
#[test]
fn a_kept_series_saves_the_knee_cause_it_printed() {
    let gauges: [&[(&'static str, f64)]; 3] = [
        &[("running", 1.0), ("waiting", 0.0)],
        &[("running", 2.0), ("waiting", 0.0)],
        &[("running", 2.0), ("waiting", 2.0)],
    ];
    let shape = [(1, 50, 1000), (2, 100, 1000), (4, 800, 2000)];
    let mut first = Tally::new(run("sweep"), None);
    for (index, (level, g)) in shape.iter().zip(gauges).enumerate() {
        level_with_gauges(&mut first, (index, 0), *level, g);
    }
    let printed = first.verdict_lines(&first.decision(), false)[1].clone();
    assert_eq!(
        printed,
        "knee: 2 -> 4 streams adds 0.0% throughput while p99 TTFT grows 8.0x: \
         the server runs 2 at a time while up to 2 wait (the batch cap, --max-num-seqs 2)"
    );
    // The same levels as summary.json kept them, with their gauges.
    let saved = |index: u64, streams: u64, tok_s: f64, ttft: f64, g: &[(&str, f64)]| {
        let server: serde_json::Map<String, Value> = g
            .iter()
            .map(|(k, v)| (k.to_string(), json!({"min": v, "mean": v, "max": v})))
            .collect();
        json!({"level_index": index, "max_concurrency": streams, "mode": "planned",
               "partial": false, "series": 0, "output_throughput": tok_s,
               "per_stream_tok_s": tok_s / streams as f64, "median_ttft_ms": ttft,
               "p99_ttft_ms": ttft, "completed": streams, "failed": 0, "server": server})
    };
    let summary = json!({"run": {}, "series": [{"index": 0, "label": "np=1"}], "levels": [
        saved(0, 1, 100.0, 50.0, gauges[0]),
        saved(1, 2, 200.0, 100.0, gauges[1]),
        saved(2, 4, 200.0, 800.0, gauges[2]),
    ]});
    let prior = PriorRun::from_summary(&summary)
        .expect("a summary")
        .into_new_series("np=2".into());
    let mut second = Tally::new(run("sweep"), Some(prior));
    level(&mut second, 3, 1, 50, 1);
    let entries = second.series_entries();
    let kept = entries[0].knee.as_ref().and_then(|k| k.reason.as_deref());
    assert_eq!(kept, printed.strip_prefix("knee: "));
}

/// What the text face prints of the levels (`report::text`): the table
/// and the level block.
mod text_face {
    use super::*;
    use crate::analysis::goodput::Slo as GoodputSlo;
    use crate::report::text::{level_block, sweep_table};

    /// Keep each finished level as the recorder would after saving it.
    fn saved(tally: &Tally) -> Vec<FinishedLevel> {
        tally
            .finished()
            .iter()
            .cloned()
            .map(|mut l| {
                l.file = Some("level.json".into());
                l
            })
            .collect()
    }

    /// A rate level of two requests, 0-400 ms and 600-1000 ms, 100 tokens
    /// each: 0.8 s in flight over its 1 s, a mean of 0.8 requests; 200
    /// tok/s in all, so 250 tok/s per request in flight, more than the
    /// total, never the total again nor `~0` streams.
    #[test]
    fn an_open_loop_row_shows_its_mean_in_flight() {
        let mut tally = Tally::new(run("sweep"), None);
        let mut level_info = info(0, 4096, Mode::Rate, 0, 0);
        level_info.rate = Some(2.0);
        tally.on_event(&DriverEvent::LevelStarted(level_info), || {
            reading(0, 0, &[])
        });
        for (id, start) in [(1, 0), (2, 600)] {
            let record = answer(id, 0, start, 50, start + 400);
            tally.on_event(&DriverEvent::Record(record), ClientReading::default);
        }
        let closed = tally
            .close_level(0, false, reading(0, 1000, &[]))
            .expect("running");
        let level = tally.keep(closed.level).clone();
        let mean = level
            .occupancy
            .as_ref()
            .expect("occupancy")
            .in_flight_mean();
        assert!((mean - 0.8).abs() < 1e-9, "{mean}");
        let s = &level.stats;
        assert!((s.per_stream_tok_s - s.output_throughput / 0.8).abs() < 1e-6);
        let table = sweep_table(&saved(&tally), &[], tally.run(), &|i| tally.series_label(i));
        let row = table.lines().nth(2).expect("a row");
        assert!(row.trim_start().starts_with("~0.80"), "{table}");
        assert!(row.contains("rate 2/s"), "{table}");
        let block = level_block(&level, tally.run());
        assert!(
            block.contains("Mean requests in flight:                 ~0.80"),
            "{block}"
        );
    }

    /// A level whose requests opened their connections: the block says
    /// connecting's share of TTFT once connect p99 is over 10% of TTFT p99,
    /// and names the cure; with reused connections it says nothing.
    #[test]
    fn the_level_block_gives_the_share_of_ttft_that_was_connecting() {
        let block_of = |connects: [u64; 2]| {
            let mut tally = Tally::new(run("sweep"), None);
            tally.on_event(
                &DriverEvent::LevelStarted(info(0, 2, Mode::Planned, 0, 0)),
                || reading(0, 0, &[]),
            );
            // TTFT 60 and 80 ms; connects as given.
            for (id, (ttft, connect)) in [(60, connects[0]), (80, connects[1])]
                .into_iter()
                .enumerate()
            {
                let mut record = answer(id as u64, 0, 0, ttft, 1000);
                record.connect = Some(Duration::from_millis(connect));
                tally.on_event(&DriverEvent::Record(record), ClientReading::default);
            }
            let closed = tally
                .close_level(0, false, reading(0, 1000, &[]))
                .expect("running");
            let level = tally.keep(closed.level).clone();
            level_block(&level, tally.run())
        };
        // Connect 10 and 30 ms: p99 at rank 0.99 of 10..30 = 29.8 ms; TTFT
        // p99 60 + 0.99 * 20 = 79.8 ms; 29.8 / 79.8 = 37.3%, said as 37%.
        // After connect 50 and 50 ms.
        let block = block_of([10, 30]);
        assert!(
            block.contains(
                "Connecting was 37% of TTFT: connect p99 29.80 ms of TTFT p99 79.80 ms \
                 (TTFT after connect p99 50.00 ms). Warmed keep-alive connections"
            ),
            "{block}"
        );
        // Reused connections (0 ms): no share to speak of.
        assert!(!block_of([0, 0]).contains("Connecting was"));
        // Connect 0 and 8 ms: p99 7.92 ms, 9.9% of 79.8 ms: not over 10%.
        assert!(!block_of([0, 8]).contains("Connecting was"));
    }

    /// A ramp is replayed on its own schedule: its level reads `ramp`, not
    /// `replay`.
    #[test]
    fn a_ramp_reads_as_a_ramp() {
        let mut run = run("sweep");
        run.ramp = Some(crate::load::ramp::Ramp {
            kind: crate::load::ramp::RampKind::Linear,
            from: 2.0,
            to: 20.0,
            duration_s: 10.0,
        });
        let mut tally = Tally::new(run, None);
        tally.on_event(
            &DriverEvent::LevelStarted(info(0, 4096, Mode::Replay, 0, 0)),
            || reading(0, 0, &[]),
        );
        let record = answer(1, 0, 0, 50, 400);
        tally.on_event(&DriverEvent::Record(record), ClientReading::default);
        let closed = tally
            .close_level(0, false, reading(0, 1000, &[]))
            .expect("running");
        let level = tally.keep(closed.level).clone();
        let table = sweep_table(&saved(&tally), &[], tally.run(), &|i| tally.series_label(i));
        let row = table.lines().nth(2).expect("a row");
        assert!(row.ends_with("  ramp"), "{table}");
        assert!(!row.contains("4096"), "{table}");
        let block = level_block(&level, tally.run());
        assert!(block.contains("= ramp 2 -> 20 req/s ="), "{block}");
        assert!(block.contains("Mean requests in flight:"), "{block}");
    }

    /// Two series of levels at 1 and 2 streams: every row says its series.
    #[test]
    fn every_row_of_a_run_of_several_series_names_its_series() {
        let mut tally = Tally::new(run("sweep"), None);
        sweep(&mut tally, &[(1, 50), (2, 100)]);
        tally.on_event(
            &DriverEvent::SeriesStarted {
                series: 1,
                at: Duration::from_millis(2000),
            },
            ClientReading::default,
        );
        tally.set_series(1, "slots 4".into(), json!({}));
        level(&mut tally, 2, 1, 60, 1);
        level(&mut tally, 3, 2, 60, 1);
        let table = sweep_table(&saved(&tally), &[], tally.run(), &|i| tally.series_label(i));
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 4, "{table}");
        for (row, label) in rows
            .iter()
            .zip(["series 1", "series 1", "slots 4", "slots 4"])
        {
            assert!(row.ends_with(label), "{label}: {table}");
        }
        // One series: no label.
        let mut one = Tally::new(super::run("sweep"), None);
        sweep(&mut one, &[(1, 50)]);
        let table = sweep_table(&saved(&one), &[], one.run(), &|i| one.series_label(i));
        assert!(!table.contains("series"), "{table}");
        // One series named apart from its number, as a tune's setting is:
        // its rows say it, the folder holding the other settings' too.
        one.set_series(0, "np=2".into(), json!({}));
        let table = sweep_table(&saved(&one), &[], one.run(), &|i| one.series_label(i));
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r.ends_with("np=2")),
            "{table}"
        );
    }

    /// `--goodput`: the block and the table say it with its SLOs; without,
    /// nothing of it.
    #[test]
    fn goodput_is_said_with_its_slos_only_when_given() {
        let mut run = run("sweep");
        run.decision.goodput = Some(GoodputSlo {
            ttft_ms: Some(75.0),
            tpot_ms: None,
            e2el_ms: None,
        });
        let mut tally = Tally::new(run, None);
        // TTFT 50 ms at 1 stream: within 75; 100 ms at 2 streams: not.
        sweep(&mut tally, &[(1, 50), (2, 100)]);
        let levels = saved(&tally);
        let block = level_block(&levels[0], tally.run());
        assert!(
            block.contains("goodput 1.0 req/s (100% of requests within TTFT<=75 ms)"),
            "{block}"
        );
        let block = level_block(&levels[1], tally.run());
        assert!(
            block.contains("goodput 0.0 req/s (0% of requests within TTFT<=75 ms)"),
            "{block}"
        );
        let table = sweep_table(&levels, &[], tally.run(), &|i| tally.series_label(i));
        assert!(table.contains(" goodput req/s  note"), "{table}");
        assert!(table.contains("1.0 (100%)"), "{table}");
        assert!(
            table.contains("goodput: requests per second within TTFT<=75 ms"),
            "{table}"
        );
        let mut plain = Tally::new(super::run("sweep"), None);
        sweep(&mut plain, &[(1, 50)]);
        let levels = saved(&plain);
        assert!(!level_block(&levels[0], plain.run()).contains("goodput"));
        assert!(
            !sweep_table(&levels, &[], plain.run(), &|i| plain.series_label(i)).contains("goodput")
        );
    }
}
