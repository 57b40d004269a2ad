//! Knee, capacity and the decision, on sweeps worked by hand.

use super::*;

/// A planned, complete level; decode speed = per-stream speed (the
/// article gives no TPOT), p50 TTFT as given.
fn level(c: u32, per_stream: f64, total: f64, p50: f64, p99: f64) -> LevelPoint {
    LevelPoint {
        concurrency: c,
        kind: Mode::Planned,
        partial: false,
        figures: Figures {
            output_throughput: total,
            per_stream_tok_s: per_stream,
            stream_decode_tok_s: Some(per_stream),
            p50_ttft_ms: Some(p50),
            p99_ttft_ms: Some(p99),
            ..Figures::default()
        },
    }
}

/// docs/decide.md, "From numbers to a decision", the seed article's six levels.
fn article() -> Vec<LevelPoint> {
    vec![
        level(1, 92.0, 92.0, 48.0, 61.0),
        level(4, 88.0, 352.0, 71.0, 96.0),
        level(16, 71.0, 1136.0, 152.0, 244.0),
        level(32, 54.0, 1728.0, 287.0, 498.0),
        level(64, 34.0, 2176.0, 611.0, 1240.0),
        level(128, 18.0, 2304.0, 1490.0, 3820.0),
    ]
}

/// An SLO of p99 TTFT <= `ms`, the other terms at their defaults.
fn ttft_slo(ms: f64) -> CapacitySlo {
    CapacitySlo {
        ttft_p99_ms: Some(ms),
        ..CapacitySlo::default()
    }
}

/// An object's keys, in the (sorted) order written.
fn keys(j: &Value) -> Vec<&str> {
    j.as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// The capacity's concurrency, or the reason there is none.
fn capacity(levels: &[LevelPoint], slo: &CapacitySlo) -> Result<u32, String> {
    decide(levels, slo)
        .capacity
        .map(|c| c.concurrency)
        .map_err(|no| no.reason)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn article_steps_by_hand() {
    // 1 -> 4: 352/92 = 3.826, two doublings: sqrt = 1.956 -> +95.6%; p99 96/61 = 1.57x
    // 4 -> 16: 1136/352 = 3.227, sqrt = 1.796 -> +79.6%; p99 244/96 = 2.54x
    // 16 -> 32: 1728/1136 = 1.521 -> +52.1%; p99 498/244 = 2.04x
    // 32 -> 64: 2176/1728 = 1.259 -> +25.9%; p99 1240/498 = 2.49x
    // 64 -> 128: 2304/2176 = 1.0588 -> +5.88%; p99 3820/1240 = 3.08x  <- knee
    let s = steps(&sweep_points(&article()));
    let gains: Vec<f64> = s.iter().filter_map(|s| s.gain_per_doubling).collect();
    let want = [0.956, 0.796, 0.521, 0.259, 0.0588];
    assert_eq!(gains.len(), 5);
    for (g, w) in gains.iter().zip(want) {
        assert!(close(*g, w, 0.001), "{g} vs {w}");
    }
    assert!(close(s[0].p99_ttft_growth.unwrap_or(0.0), 1.574, 0.001));
    assert!(close(s[4].p99_ttft_growth.unwrap_or(0.0), 3.081, 0.001));
}

#[test]
fn article_knee_is_64_to_128() {
    let d = decide(&article(), &CapacitySlo::default());
    let knee = d.knee.clone().expect("a knee");
    assert_eq!((knee.from_concurrency, knee.to_concurrency), (64, 128));
    assert!(close(knee.throughput_gain, 0.0588, 0.0001));
    assert!(close(knee.p99_ttft_growth, 3.0806, 0.0001));
    assert!(!knee.no_rise);
    assert_eq!(
        knee.reason,
        "64 -> 128 streams adds 5.9% throughput while p99 TTFT grows 3.1x: \
         KV cache or batch full, requests queue"
    );
    let j = knee.to_json();
    assert_eq!(
        keys(&j),
        [
            "from_concurrency",
            "p99_ttft_growth",
            "reason",
            "throughput_gain",
            "to_concurrency"
        ]
    );
    assert_eq!(j["throughput_gain"], json!(0.0588));
    // Without a TTFT SLO capacity stops at the knee's from: 64 (decode
    // 34 >= 20). Share 2176/2304 = 94.4%.
    let cap = d.capacity.expect("capacity");
    assert_eq!(cap.concurrency, 64);
    assert!(close(cap.share_of_peak, 0.9444, 0.0001));
    assert!(
        cap.reason.starts_with(
            "64 streams: the level before the knee (64 -> 128 streams; no TTFT SLO given)"
        ),
        "{}",
        cap.reason
    );
}

#[test]
fn article_capacity_with_ttft_slo_is_32() {
    // p99 TTFT <= 500: 1, 4, 16, 32 (498) meet it, 64 (1240) does not.
    // Decode >= 20: 32 has 54. Share 1728/2304 = 0.75 exactly.
    let slo = ttft_slo(500.0);
    let d = decide(&article(), &slo);
    let cap = d.capacity.clone().expect("capacity");
    assert_eq!(cap.concurrency, 32);
    assert_eq!(cap.output_throughput, 1728.0);
    assert_eq!(cap.per_stream_tok_s, 54.0);
    assert_eq!(cap.p99_ttft_ms, Some(498.0));
    assert_eq!(cap.share_of_peak, 0.75);
    assert_eq!(
        cap.reason,
        "32 streams: the highest level meeting the SLO (p99 TTFT <= 500 ms: 498 ms, \
         decode >= 20 tok/s per stream: 54 tok/s); 75% of the peak 2,304 tok/s at 128 streams"
    );
    let j = d.capacity_json();
    assert_eq!(
        keys(&j),
        [
            "concurrency",
            "output_throughput",
            "p99_ttft_ms",
            "per_stream_tok_s",
            "reason",
            "rule",
            "share_of_peak",
            "stream_decode_tok_s"
        ]
    );
    assert_eq!(j["rule"], json!("slo"));
    assert_eq!(j["share_of_peak"], json!(0.75));
    assert_eq!(d.knee_json()["from_concurrency"], json!(64));
}

#[test]
fn an_slo_nobody_meets_gives_no_capacity() {
    // The lowest level's p99 TTFT is 61 ms > 50.
    let slo = ttft_slo(50.0);
    let d = decide(&article(), &slo);
    let no = d.capacity.clone().expect_err("no capacity");
    assert!(no.slo_not_met);
    // Closest: 1 stream, 61 / 50 = 1.22 (+22%); 4 streams' 96 ms is 1.92.
    assert_eq!(
        no.reason,
        "no level meets your SLO (p99 TTFT <= 50 ms): the lowest level, 1 stream, has 61 ms; \
         closest: 1 stream, p99 TTFT 61 ms over your 50 ms (+22%)"
    );
    assert_eq!(d.capacity_json(), Value::Null);
    assert!(d
        .capacity_line()
        .starts_with("no capacity: no level meets your SLO"));
    // Two terms failing at once are both named, in the same order.
    let slo = CapacitySlo {
        min_stream_tok_s: Some(100.0),
        ..ttft_slo(50.0)
    };
    let no = decide(&article(), &slo).capacity.expect_err("no capacity");
    // 1 stream misses TTFT by 61 / 50 - 1 = 22% and decode by 1 - 92 / 100
    // = 8%: its worst is 22%, 4 streams' is 96 / 50 - 1 = 92%.
    assert_eq!(
        no.reason,
        "no level meets your SLO (p99 TTFT <= 50 ms; decode >= 100 tok/s per stream): \
         the lowest level, 1 stream, has 61 ms and 92 tok/s; \
         closest: 1 stream, p99 TTFT 61 ms over your 50 ms (+22%)"
    );
}

/// Ollama with OLLAMA_NUM_PARALLEL=1: one answer at a time at 30 tok/s;
/// the total stays ~30 and waiting requests pile up in TTFT.
fn ollama_flat() -> Vec<LevelPoint> {
    let mut v = vec![
        level(1, 30.0, 30.0, 90.0, 100.0),
        level(2, 15.25, 30.5, 2100.0, 4300.0),
        level(4, 7.5, 30.0, 6000.0, 12000.0),
        level(8, 3.725, 29.8, 14000.0, 28000.0),
    ];
    // Each answer still streams at 30 tok/s once it runs.
    for l in &mut v {
        l.figures.stream_decode_tok_s = Some(30.0);
    }
    v
}

#[test]
fn flat_ollama_series_does_not_rise_and_has_capacity_1() {
    // 1 -> 2: 30.5/30 = +1.7% per doubling, p99 4300/100 = 43x -> knee at the
    // first step; peak 30.5 < 30 * 1.1 = 33 -> flat.
    let d = decide(&ollama_flat(), &CapacitySlo::default());
    let knee = d.knee.clone().expect("knee");
    assert_eq!((knee.from_concurrency, knee.to_concurrency), (1, 2));
    assert!(knee.no_rise);
    assert_eq!(
        knee.reason,
        "throughput does not rise with concurrency: the server runs one request at a time \
         (one slot: OLLAMA_NUM_PARALLEL=1, llama-server -np 1, SGLang --max-running-requests 1, TGI --max-batch-size 1, vLLM --max-num-seqs 1?) or one \
         stream already uses all its compute; more streams only queue"
    );
    assert!(is_flat(&d.points));
    // No TTFT SLO: capped at 1; decode 30 >= 20 -> capacity 1, 30/30.5 = 98%.
    let cap = d.capacity.expect("capacity");
    assert_eq!(cap.concurrency, 1);
    assert!(close(cap.share_of_peak, 0.9836, 0.0001));
    // With a 500 ms TTFT SLO: only level 1 (100 ms) meets it.
    let slo = ttft_slo(500.0);
    let cap = decide(&ollama_flat(), &slo).capacity.expect("capacity");
    assert_eq!(cap.concurrency, 1);
}

#[test]
fn rounds_merge_as_medians_and_other_levels_are_ignored() {
    let mut levels = article();
    // Two more rounds at 32 (1728 is the median of 1600, 1728, 1800;
    // p99 TTFT median of 498, 520, 470 = 498).
    let mut r2 = level(32, 50.0, 1600.0, 290.0, 520.0);
    r2.figures.error_rate = 0.02;
    levels.push(r2);
    levels.push(level(32, 56.25, 1800.0, 280.0, 470.0));
    // A partial level and a manual level that would move everything.
    let mut partial = level(256, 1.0, 9000.0, 9000.0, 90000.0);
    partial.partial = true;
    levels.push(partial);
    let mut manual = level(48, 60.0, 2880.0, 300.0, 400.0);
    manual.kind = Mode::Manual;
    levels.push(manual);
    let points = sweep_points(&levels);
    let cs: Vec<u32> = points.iter().map(|p| p.concurrency).collect();
    assert_eq!(cs, [1, 4, 16, 32, 64, 128]);
    let p32 = &points[3];
    assert_eq!(p32.rounds, 3);
    assert_eq!(p32.figures.output_throughput, 1728.0);
    assert_eq!(p32.figures.p99_ttft_ms, Some(498.0));
    assert_eq!(p32.figures.per_stream_tok_s, 54.0);
    assert_eq!(p32.figures.error_rate, 0.0);
    let slo = ttft_slo(500.0);
    assert_eq!(capacity(&levels, &slo), Ok(32));
}

#[test]
fn errors_decode_and_tpot_slos_exclude_levels() {
    let mut levels = article();
    // 32 streams: 1% errors is not below 1% -> falls to 16.
    levels[3].figures.error_rate = 0.01;
    let slo = ttft_slo(500.0);
    assert_eq!(capacity(&levels, &slo), Ok(16));
    // Decode >= 80: only 1 (92) and 4 (88).
    let slo = CapacitySlo {
        min_stream_tok_s: Some(80.0),
        ..ttft_slo(500.0)
    };
    assert_eq!(capacity(&article(), &slo), Ok(4));
    // A TPOT SLO with no TPOT measured is not met anywhere.
    let slo = CapacitySlo {
        tpot_p99_ms: Some(50.0),
        ..ttft_slo(500.0)
    };
    // No level has a TPOT to measure the miss by: no closest.
    assert_eq!(
        capacity(&article(), &slo).expect_err("no capacity"),
        "no level meets your SLO (p99 TPOT <= 50 ms): the lowest level, 1 stream, has no p99 TPOT"
    );
}

#[test]
fn no_levels_no_knee_no_capacity() {
    let d = decide(&[], &CapacitySlo::default());
    assert!(d.knee.is_none());
    let no = d.capacity.expect_err("none");
    assert!(!no.slo_not_met);
    // One level: no step, no knee; capacity is that level.
    let d = decide(&article()[..1], &CapacitySlo::default());
    assert!(d.knee.is_none());
    assert_eq!(d.capacity.map(|c| c.concurrency), Ok(1));
    // Zero throughput and zero TTFT do not divide into NaN.
    let mut z = article();
    z[0].figures.output_throughput = 0.0;
    z[0].figures.p99_ttft_ms = Some(0.0);
    let s = steps(&sweep_points(&z));
    assert_eq!(s[0].gain_per_doubling, None);
    assert_eq!(s[0].p99_ttft_growth, None);
}

#[test]
fn falling_throughput_and_non_doubling_steps_are_worded() {
    // 8 -> 24 streams: 1000 -> 800 tok/s = -20% (per doubling over
    // log2(3) = 1.585 doublings: 0.8^(1/1.585) - 1 = -13.1%); p99 100 -> 400 = 4x.
    let v = vec![
        level(1, 200.0, 200.0, 50.0, 60.0),
        level(8, 125.0, 1000.0, 80.0, 100.0),
        level(24, 33.3, 800.0, 300.0, 400.0),
    ];
    let knee = find_knee(&sweep_points(&v)).expect("knee");
    assert!(
        close(knee.throughput_gain, -0.1313, 0.0001),
        "{}",
        knee.throughput_gain
    );
    assert_eq!(
        knee.reason,
        "8 -> 24 streams loses 20.0% throughput (-13.1% per doubling) while p99 TTFT grows 4.0x: \
         past saturation: too many parallel slots, or part of the model on the CPU?"
    );
    // A flat start at 16 streams names the level instead of Ollama.
    assert!(no_rise_message(16).starts_with("throughput does not rise above 16 streams"));
}

#[test]
fn level_point_from_stats() {
    use crate::stats::summary::level_stats;
    let mut s = level_stats(&[], 8, &[50.0, 99.0]);
    s.completed = 99;
    s.failed = 1;
    let p = LevelPoint::from_stats(8, Mode::Search, false, &s);
    assert_eq!(p.figures.error_rate, 0.01);
    assert_eq!(p.figures.p99_ttft_ms, None);
    assert_eq!(Mode::parse("search"), Some(Mode::Search));
    assert_eq!(Mode::parse("bogus"), None);
    assert!(!Mode::Manual.is_sweep());
}

#[test]
fn the_error_rate_counts_failures_among_answered_requests() {
    // 1 failed of 3 + 1 = 0.25; no request at all is no failing level.
    assert_eq!(error_rate(3, 1), 0.25);
    assert_eq!(error_rate(0, 2), 1.0);
    assert_eq!(error_rate(0, 0), 0.0);
}

/// The SLO in the decision's words reads as the user set it: 2,500 ms and
/// 12.5 tok/s, not 2500 and 12. On the article: p99 TTFT <= 2,500 keeps 1
/// to 64 (1,240 ms) and drops 128 (3,820); decode >= 12.5 keeps 64 (34).
/// An error limit of 0.005 is "errors < 0.5%", not "0%".
#[test]
fn the_slo_reads_in_the_decision_as_it_was_set() {
    let slo = CapacitySlo {
        min_stream_tok_s: Some(12.5),
        ..ttft_slo(2500.0)
    };
    let cap = decide(&article(), &slo).capacity.expect("capacity");
    assert_eq!(cap.concurrency, 64);
    assert!(
        cap.reason.starts_with(
            "64 streams: the highest level meeting the SLO (p99 TTFT <= 2,500 ms: 1,240 ms, \
             decode >= 12.5 tok/s per stream: 34 tok/s)"
        ),
        "{}",
        cap.reason
    );
    assert_eq!(slo_terms::errors(0.005), "errors < 0.5%");
    assert_eq!(slo_terms::tpot(5.0), "p99 TPOT <= 5 ms");
    // Nobody meets 40 ms: the reason names the term as set.
    let no = decide(&article(), &ttft_slo(40.5))
        .capacity
        .expect_err("none");
    assert!(no.reason.contains("(p99 TTFT <= 40.5 ms)"), "{}", no.reason);
}

/// A level whose answers each decode at `decode` tok/s, `total` tok/s in
/// all, p99 TTFT `p99` ms.
fn slow(c: u32, decode: f64, total: f64, p99: f64) -> LevelPoint {
    let mut l = level(c, total / f64::from(c), total, p99 / 2.0, p99);
    l.figures.stream_decode_tok_s = Some(decode);
    l
}

/// A 10 tok/s box with two slots: each answer decodes at 13 tok/s alone
/// and 12 beside another; 1 -> 2 streams doubles nearly (13 -> 24 tok/s,
/// +84.6%), 2 -> 4 adds 25 / 24 - 1 = 4.2% while p99 TTFT grows 900 / 120
/// = 7.5x: the knee is 2 -> 4. No level reaches the default 20 tok/s (the
/// best is 13 at 1 stream) and no SLO was given, so the knee judges
/// alone: 2 streams, 24 / 25 = 96% of the peak.
#[test]
fn without_an_slo_a_slow_server_is_judged_by_the_knee() {
    let box2 = [
        slow(1, 13.0, 13.0, 100.0),
        slow(2, 12.0, 24.0, 120.0),
        slow(4, 12.0, 25.0, 900.0),
    ];
    let d = decide_judged(&box2, &CapacitySlo::default(), false);
    let cap = d.capacity.clone().expect("the knee's capacity");
    assert_eq!(cap.concurrency, 2);
    assert_eq!(cap.rule, CapacityRule::KneeFallback);
    assert!(close(cap.share_of_peak, 0.96, 1e-12));
    assert_eq!(
        cap.reason,
        "no level reaches decode >= 20 tok/s per stream (13 at 1 stream); \
         capacity judged by the knee alone: 2 streams"
    );
    assert_eq!(
        d.capacity_line(),
        "capacity: no level reaches decode >= 20 tok/s per stream (13 at 1 stream); \
         capacity judged by the knee alone: 2 streams"
    );
    assert_eq!(d.capacity_json()["rule"], json!("knee_fallback"));
    // The same 20 tok/s given by the user is their SLO: none meets it.
    // Closest: 1 stream misses by 1 - 13 / 20 = 35%, 2 and 4 by 40%.
    let no = decide_judged(&box2, &CapacitySlo::default(), true)
        .capacity
        .expect_err("none meets 20 tok/s");
    assert_eq!(
        no.reason,
        "no level meets your SLO (decode >= 20 tok/s per stream): the lowest level, 1 stream, \
         has 13 tok/s; closest: 1 stream, decode 13 tok/s under 20 tok/s per stream (-35%)"
    );
    // `decide` judges as the user's SLO (a saved run that does not say).
    assert_eq!(decide(&box2, &CapacitySlo::default()).capacity, Err(no));
}

/// The knee's level fails the error limit: the fallback keeps the limit
/// and goes below it. 2 streams with 5% errors: 1 stream, the highest
/// level before the knee (2 -> 4) with errors under 1%.
#[test]
fn the_knee_fallback_keeps_the_error_limit() {
    let mut box2 = vec![
        slow(1, 13.0, 13.0, 100.0),
        slow(2, 12.0, 24.0, 120.0),
        slow(4, 12.0, 25.0, 900.0),
    ];
    box2[1].figures.error_rate = 0.05;
    let cap = decide_judged(&box2, &CapacitySlo::default(), false)
        .capacity
        .expect("1 stream");
    assert_eq!(cap.concurrency, 1);
    assert_eq!(
        cap.reason,
        "no level reaches decode >= 20 tok/s per stream (13 at 1 stream); \
         capacity judged by the knee (2 -> 4 streams) and errors < 1%: 1 stream"
    );
}

/// No knee in the levels measured: throughput gains 10 -> 19 -> 36 tok/s
/// (+90% and +89% per doubling) while p99 TTFT grows 1.1x and 1.2x. The
/// top level measured is the capacity, and the line says the knee was not
/// reached. One level alone shows no knee either.
#[test]
fn the_knee_fallback_without_a_knee_says_so() {
    let rising = [
        slow(1, 10.0, 10.0, 100.0),
        slow(2, 9.5, 19.0, 110.0),
        slow(4, 9.0, 36.0, 130.0),
    ];
    let d = decide_judged(&rising, &CapacitySlo::default(), false);
    assert!(d.knee.is_none());
    let cap = d.capacity.expect("the top level");
    assert_eq!((cap.concurrency, cap.rule), (4, CapacityRule::KneeFallback));
    assert_eq!(
        cap.reason,
        "no level reaches decode >= 20 tok/s per stream (10 at 1 stream); \
         the knee was not reached: capacity is the top level measured, 4 streams"
    );
    let cap = decide_judged(&[slow(1, 9.0, 9.0, 100.0)], &CapacitySlo::default(), false)
        .capacity
        .expect("the only level");
    assert_eq!(
        cap.reason,
        "no level reaches decode >= 20 tok/s per stream (9.0 at 1 stream); \
         one level shows no knee: capacity is the only level measured, 1 stream"
    );
    // A level that reaches 20 tok/s keeps the SLO's rule: 1 stream at 21.
    let mut one_fast = rising.to_vec();
    one_fast[0].figures.stream_decode_tok_s = Some(21.0);
    let cap = decide_judged(&one_fast, &CapacitySlo::default(), false)
        .capacity
        .expect("1 stream by the SLO");
    assert_eq!((cap.concurrency, cap.rule), (1, CapacityRule::Slo));
}

/// The closest level is the one whose worst term misses least against its
/// limit, p99 TTFT <= 1,000 ms here, decode 30 >= 20 everywhere:
/// - 1 stream: TTFT 900 (met), 3% errors: 0.03 / 0.01 - 1 = +200%;
/// - 2 streams: TTFT 1,100 (+10%), 2% errors (+100%): worst +100%;
/// - 4 streams: TTFT 1,240 (+24%), no errors: worst +24%;
/// - 8 streams: TTFT 2,600 (+160%).
///
/// So 4 streams, though 2 streams' TTFT misses by less.
#[test]
fn the_closest_level_misses_least_at_its_worst() {
    let mut levels = vec![
        slow(1, 30.0, 30.0, 900.0),
        slow(2, 30.0, 60.0, 1100.0),
        slow(4, 30.0, 120.0, 1240.0),
        slow(8, 30.0, 240.0, 2600.0),
    ];
    levels[0].figures.error_rate = 0.03;
    levels[1].figures.error_rate = 0.02;
    let no = decide(&levels, &ttft_slo(1000.0))
        .capacity
        .expect_err("none meets it");
    assert_eq!(
        no.reason,
        "no level meets your SLO (errors < 1%): the lowest level, 1 stream, has 3.0% errors; \
         closest: 4 streams, p99 TTFT 1,240 ms over your 1,000 ms (+24%)"
    );
    // An error rate is measured against its limit too: 1 stream alone.
    let no = decide(&levels[..1], &ttft_slo(1000.0))
        .capacity
        .expect_err("3% errors");
    assert!(
        no.reason
            .ends_with("closest: 1 stream, 3.0% errors over the 1% limit (+200%)"),
        "{}",
        no.reason
    );
}

/// Only a user sets a TTFT or TPOT limit, or a reading speed other than
/// 20: those values tell a given SLO on their own.
#[test]
fn values_off_the_defaults_are_the_users() {
    assert!(!CapacitySlo::default().set_by_hand());
    assert!(ttft_slo(500.0).set_by_hand());
    let no_speed = CapacitySlo {
        min_stream_tok_s: None,
        ..CapacitySlo::default()
    };
    assert!(no_speed.set_by_hand());
}
