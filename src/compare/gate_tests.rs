use super::*;
use serde_json::json;
use std::path::Path;

fn span(values: &[f64]) -> Span {
    Span::of(values).expect("values")
}

fn verdict(base: &[f64], new: &[f64], higher: bool, pct: f64) -> (Verdict, Why) {
    let j = judge(span(base), span(new), higher, pct);
    (j.verdict, j.why)
}

/// One round each: the change against PCT.
#[test]
fn one_round_is_judged_against_pct() {
    // tok/s 1000 -> 940: 940 < 1000 x 0.95 = 950, worse by 6%: a regression.
    let j = judge(span(&[1000.0]), span(&[940.0]), true, 5.0);
    assert_eq!((j.verdict, j.why), (Verdict::Regression, Why::BeyondPct));
    assert!((j.change_pct.unwrap_or(0.0) + 6.0).abs() < 1e-9);
    // 1000 -> 960: -4%, not under 950: within 5%.
    assert_eq!(
        verdict(&[1000.0], &[960.0], true, 5.0),
        (Verdict::WithinNoise, Why::WithinPct)
    );
    // 1000 -> 1060: above 1000 x 1.05 = 1050: an improvement, not a failure.
    assert_eq!(
        verdict(&[1000.0], &[1060.0], true, 5.0),
        (Verdict::Improvement, Why::BeyondPct)
    );
    // Lower is better (p99 TPOT): 10 ms -> 12 ms is above 10 x 1.05 = 10.5.
    assert_eq!(
        verdict(&[10.0], &[12.0], false, 5.0),
        (Verdict::Regression, Why::BeyondPct)
    );
    // 10 -> 9: below 10 x 0.95 = 9.5: better.
    assert_eq!(
        verdict(&[10.0], &[9.0], false, 5.0),
        (Verdict::Improvement, Why::BeyondPct)
    );
    // PCT 0: any worsening fails; the same value does not.
    assert_eq!(
        verdict(&[10.0], &[10.01], false, 0.0),
        (Verdict::Regression, Why::BeyondPct)
    );
    assert_eq!(
        verdict(&[10.0], &[10.0], false, 0.0),
        (Verdict::WithinNoise, Why::WithinPct)
    );
}

/// Rounds: the new rounds against the baseline's span widened by PCT.
#[test]
fn rounds_are_judged_against_their_spread() {
    // Baseline 980, 1000, 1020: widened by 5% its low edge is 980 x 0.95 = 931.
    let base = [980.0, 1000.0, 1020.0];
    // New 900, 925, 940: median 925 is -7.5% (beyond 5%), but 940 > 931:
    // one round overlaps the widened baseline, so within noise.
    let j = judge(span(&base), span(&[900.0, 925.0, 940.0]), true, 5.0);
    assert_eq!(
        (j.verdict, j.why),
        (Verdict::WithinNoise, Why::WithinSpread)
    );
    assert!((j.change_pct.unwrap_or(0.0) + 7.5).abs() < 1e-9);
    // New 900, 910, 920: all under 931: a regression beyond the rounds' spread.
    assert_eq!(
        verdict(&base, &[900.0, 910.0, 920.0], true, 5.0),
        (Verdict::Regression, Why::BeyondSpread)
    );
    // New 990, 1005, 1010: medians +0.5%, within 5%.
    assert_eq!(
        verdict(&base, &[990.0, 1005.0, 1010.0], true, 5.0),
        (Verdict::WithinNoise, Why::WithinPct)
    );
    // Only the baseline has rounds: the new run's one value is its span.
    // p99 TTFT 100, 104, 120 ms; high edge 120 x 1.1 = 132 at 10%. New 130:
    // +25% on the median 104, but under 132: within noise. New 133: beyond.
    let ttft = [100.0, 104.0, 120.0];
    assert_eq!(
        verdict(&ttft, &[130.0], false, 10.0),
        (Verdict::WithinNoise, Why::WithinSpread)
    );
    assert_eq!(
        verdict(&ttft, &[133.0], false, 10.0),
        (Verdict::Regression, Why::BeyondSpread)
    );
    // Lower by the same rule: low edge 100 x 0.9 = 90; 89 is better beyond it.
    assert_eq!(
        verdict(&ttft, &[89.0], false, 10.0),
        (Verdict::Improvement, Why::BeyondSpread)
    );
}

/// A capacity of none (0 streams) against some.
#[test]
fn no_capacity_is_zero_streams() {
    // 8 -> 0: 0 < 8 x 0.95: a regression; its change is -100%.
    let j = judge(span(&[8.0]), span(&[0.0]), true, 5.0);
    assert_eq!(j.verdict, Verdict::Regression);
    assert_eq!(j.change_pct, Some(-100.0));
    // 0 -> 4: better, with no percentage of a 0 baseline.
    let j = judge(span(&[0.0]), span(&[4.0]), true, 5.0);
    assert_eq!((j.verdict, j.change_pct), (Verdict::Improvement, None));
    assert_eq!(
        verdict(&[0.0], &[0.0], true, 5.0),
        (Verdict::WithinNoise, Why::WithinPct)
    );
}

fn run(
    name: &str,
    levels: serde_json::Value,
    capacity: Option<u32>,
    cost: Option<f64>,
) -> SavedRun {
    SavedRun::from_value(
        json!({"run": {"model": "m", "input_len": 64, "output_len": 16},
               "levels": levels,
               "capacity": capacity.map(|c| json!({"concurrency": c})),
               "capacity_reason": if capacity.is_some() { "capacity: 4 streams" } else { "no capacity: no level meets the SLO" },
               "cost": cost.map(|c| json!({"cost_per_m_output": c}))}),
        Path::new(name),
    )
    .expect("summary")
}

fn level(c: u32, tok: f64, ttft99: f64, tpot99: f64, file: &str) -> serde_json::Value {
    json!({"max_concurrency": c, "output_throughput": tok, "p99_ttft_ms": ttft99,
           "p99_tpot_ms": tpot99, "mode": "planned", "partial": false, "file": file})
}

/// The figures gathered from two saved runs: rounds grouped by concurrency,
/// levels only one run has left out and counted, capacity and cost.
#[test]
fn figures_are_gathered_level_by_level() {
    let a = run(
        "a",
        json!([
            level(1, 100.0, 20.0, 5.0, "sweep-c1.json"),
            level(1, 102.0, 21.0, 5.0, "sweep-c1-r2.json"),
            level(4, 400.0, 40.0, 5.0, "sweep-c4.json"),
            level(8, 700.0, 80.0, 6.0, "sweep-c8.json")
        ]),
        Some(4),
        Some(2.0),
    );
    // B: 20% slower steps at 1 and 4 streams, no whole level at 8, one at 16;
    // no capacity. A partial level is never a round, nor a level.
    let partial = |c: u32, file: &str| {
        let mut l = level(c, 10.0, 900.0, 50.0, file);
        l["partial"] = json!(true);
        l
    };
    let b = run(
        "b",
        json!([
            level(1, 83.0, 24.0, 6.0, "sweep-c1.json"),
            level(1, 84.0, 24.0, 6.0, "sweep-c1-r2.json"),
            partial(1, "sweep-c1-r3.json"),
            partial(8, "sweep-c8.json"),
            level(4, 333.0, 48.0, 6.0, "sweep-c4.json"),
            level(16, 900.0, 160.0, 9.0, "sweep-c16.json")
        ]),
        None,
        Some(2.4),
    );
    let gate = Gate::of(&[a, b], 5.0);
    // 8 only in A, 16 only in B.
    assert_eq!(gate.unmatched, 2);
    let find = |f: Figure, c: Option<u32>| {
        gate.rows
            .iter()
            .find(|r| r.figure == f && r.concurrency == c)
            .unwrap_or_else(|| panic!("{f:?} at {c:?}: {:?}", gate.rows))
    };
    // 1 stream: A's rounds 100..102, B's 83..84: 84 < 100 x 0.95 = 95.
    let tok = find(Figure::OutputTokS, Some(1));
    assert_eq!(
        (tok.base.lo, tok.base.hi, tok.base.rounds),
        (100.0, 102.0, 2)
    );
    assert_eq!((tok.new.lo, tok.new.hi, tok.new.rounds), (83.0, 84.0, 2));
    assert_eq!(tok.judgement.verdict, Verdict::Regression);
    assert_eq!(tok.judgement.why, Why::BeyondSpread);
    // 4 streams, one round: TPOT 5 -> 6 is +20%, beyond 5%.
    let tpot = find(Figure::TpotP99Ms, Some(4));
    assert_eq!(tpot.judgement.why, Why::BeyondPct);
    assert!((tpot.judgement.change_pct.unwrap_or(0.0) - 20.0).abs() < 1e-9);
    // Capacity 4 -> none (0): worse; cost 2.0 -> 2.4: +20%, worse.
    assert_eq!(
        find(Figure::Capacity, None).judgement.verdict,
        Verdict::Regression
    );
    assert_eq!(
        find(Figure::CostPerMOutput, None).judgement.verdict,
        Verdict::Regression
    );
    // 3 figures at 2 levels, and capacity and cost.
    assert_eq!(gate.rows.len(), 8);
    assert_eq!(gate.regressions(), 8);
}

/// Runs of several series match level by level within the series of the
/// same label.
#[test]
fn series_match_by_label() {
    let l = |series: u64, label: &str, tok: f64| {
        let mut v = level(4, tok, 40.0, 5.0, "sweep-c4.json");
        v["series"] = json!(series);
        v["series_label"] = json!(label);
        v
    };
    let a = run(
        "a",
        json!([l(0, "np=1", 100.0), l(1, "np=4", 400.0)]),
        None,
        None,
    );
    // B ran np=4 first: its 400 must meet A's np=4, not A's np=1.
    let b = run(
        "b",
        json!([l(0, "np=4", 400.0), l(1, "np=1", 100.0)]),
        None,
        None,
    );
    let gate = Gate::of(&[a, b], 5.0);
    assert_eq!(gate.regressions(), 0, "{:?}", gate.rows);
    assert_eq!(gate.unmatched, 0);
    let labels: Vec<Option<&str>> = gate
        .rows
        .iter()
        .filter(|r| r.figure == Figure::OutputTokS)
        .map(|r| r.series.as_deref())
        .collect();
    assert_eq!(labels, [Some("np=4"), Some("np=1")]);
}
