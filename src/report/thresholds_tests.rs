use serde_json::json;

use super::*;
use crate::report::schema::{Capacity, Cost, FitSection, SeriesEntry, SkippedLevel};

/// A whole planned level at `c` streams: p99 TTFT `ttft99`, output tok/s
/// `tok_s`, `failed` of 100 requests failed.
fn level(c: u32, ttft99: f64, tok_s: f64, failed: u64) -> LevelFile {
    let mut l = LevelFile {
        max_concurrency: Some(c),
        mode: Some("planned".into()),
        completed: Some(100 - failed),
        failed: Some(failed),
        output_throughput: Some(tok_s),
        series: Some(0),
        ..LevelFile::default()
    };
    l.stats.insert("p99_ttft_ms".into(), json!(ttft99));
    l.stats.insert("median_ttft_ms".into(), json!(ttft99 / 2.0));
    l.stats.insert("mean_ttft_ms".into(), json!(ttft99 / 3.0));
    l
}

/// Levels 1, 4, 16: p99 TTFT 100, 200, 600 ms; 50, 180, 400 tok/s; 0, 0,
/// 2 of 100 failed. Capacity 4 at $2/h, $3.0864 per M.
fn run() -> SummaryFile {
    SummaryFile {
        levels: vec![
            level(1, 100.0, 50.0, 0),
            level(4, 200.0, 180.0, 0),
            level(16, 600.0, 400.0, 2),
        ],
        capacity: Some(Capacity {
            concurrency: Some(4),
            output_throughput: Some(180.into()),
            ..Capacity::default()
        }),
        cost: Some(Cost {
            gpu_price_per_hour: Some(2.into()),
            cost_per_m_output: serde_json::Number::from_f64(3.0864),
            ..Cost::default()
        }),
        ..SummaryFile::default()
    }
}

fn plan() -> Planned {
    Planned::Concurrency(vec![1, 4, 16])
}

fn judge(expr: &str, summary: &SummaryFile) -> ThresholdEntry {
    let t = parse(expr).expect("parses");
    evaluate(&t, summary, None, &plan())
}

#[test]
fn parses_figure_operator_value_and_place() {
    let t = parse("ttft_p99_ms <= 500 @16").expect("parses");
    assert_eq!(t.expr, "ttft_p99_ms<=500@16");
    assert_eq!(
        t.figure,
        Figure::Latency {
            metric: "ttft",
            stat: "99".into()
        }
    );
    assert_eq!((t.op, t.limit, t.at), (Op::Le, 500.0, Where::Level(16.0)));
    assert_eq!(parse("tok_s>10@all").expect("parses").at, Where::All);
    assert_eq!(
        parse("itl_p50_ms<9@capacity").expect("parses").at,
        Where::Capacity
    );
    assert_eq!(parse("capacity>=8").expect("parses").at, Where::Run);
    assert_eq!(parse("error_rate==0@2.5").expect("parses").op, Op::Eq);
}

#[test]
fn a_bad_threshold_says_what_is_wrong_and_what_is_known() {
    let err = |s: &str| parse(s).expect_err("refused").to_string();
    let unknown = err("ttft_p42_msx<5@1");
    assert!(
        unknown.contains("unknown figure \"ttft_p42_msx\""),
        "{unknown}"
    );
    assert!(
        unknown.contains("ttft_p99_ms") && unknown.contains("capacity"),
        "{unknown}"
    );
    let op = err("tok_s=>5@1");
    assert!(
        op.contains("unknown operator \"=>\"") && op.contains("<="),
        "{op}"
    );
    assert!(err("tok_s<<5@1").contains("unknown operator \"<<\""));
    assert!(err("tok_s").contains("no comparison"));
    assert!(err("tok_s<fast@1").contains("\"fast\" is not a number"));
    assert!(err("tok_s<5").contains("add @N"));
    assert!(err("capacity>5@4").contains("drop the @"));
    assert!(err("tok_s<5@zero").contains("@zero is not a level"));
    assert!(err("ttft_p100_ms<5@1").contains("unknown figure"));
}

#[test]
fn a_level_not_in_the_plan_is_refused() {
    let t = |s: &str| vec![parse(s).expect("parses")];
    assert!(check_plan(&t("tok_s>1@16"), &plan()).is_ok());
    assert!(check_plan(&t("tok_s>1@all"), &plan()).is_ok());
    let e = check_plan(&t("tok_s>1@8"), &plan()).expect_err("8 is not planned");
    assert!(
        e.to_string()
            .contains("concurrency 8 is not in the plan (concurrency 1,4,16)"),
        "{e}"
    );
    let rates = Planned::Rate(vec![2.0, 4.0]);
    assert!(check_plan(&t("tok_s>1@4"), &rates).is_ok());
    let e = check_plan(&t("tok_s>1@3"), &rates).expect_err("3 req/s is not planned");
    assert!(
        e.to_string()
            .contains("rate 3 req/s is not in the plan (--request-rate 2,4)"),
        "{e}"
    );
    let search = Planned::Unfixed("--find-capacity");
    assert!(check_plan(&t("tok_s>1@4"), &search).is_err());
    assert!(check_plan(&t("tok_s>1@capacity"), &search).is_ok());
}

#[test]
fn at_a_level_the_level_s_figure_is_judged() {
    // Concurrency 16's p99 TTFT is 600: < 500 fails, < 700 passes.
    let fail = judge("ttft_p99_ms<500@16", &run());
    assert_eq!((fail.value, fail.ok), (Some(600.0), false));
    assert_eq!(fail.level, Some(json!(16)));
    assert_eq!(
        fail.reason.as_deref(),
        Some("measured 600.0 ms, limit < 500")
    );
    let pass = judge("ttft_p99_ms<700@16", &run());
    assert_eq!(
        (pass.value, pass.ok, pass.reason),
        (Some(600.0), true, None)
    );
    // p50 reads the median key: 600 / 2 = 300; the mean 600 / 3 = 200.
    assert_eq!(judge("ttft_p50_ms<301@16", &run()).value, Some(300.0));
    assert_eq!(judge("ttft_mean_ms<=200@16", &run()).value, Some(200.0));
    // 2 failed of 100: error rate 0.02.
    let errors = judge("error_rate<0.01@16", &run());
    assert_eq!((errors.value, errors.ok), (Some(0.02), false));
}

#[test]
fn at_all_the_worst_level_is_judged() {
    // Worst p99 TTFT over 100, 200, 600 is 600 (at 16); worst tok/s for a
    // lower bound is 50 (at 1).
    let ttft = judge("ttft_p99_ms<=600@all", &run());
    assert_eq!(
        (ttft.value, ttft.ok, ttft.level),
        (Some(600.0), true, Some(json!(16)))
    );
    let tok = judge("tok_s>=60@all", &run());
    assert_eq!(
        (tok.value, tok.ok, tok.level),
        (Some(50.0), false, Some(json!(1)))
    );
    assert!(judge("tok_s>=50@all", &run()).ok);
}

#[test]
fn at_capacity_the_capacity_level_is_judged() {
    // Capacity is 4: its p99 TTFT is 200.
    let e = judge("ttft_p99_ms<250@capacity", &run());
    assert_eq!(
        (e.value, e.ok, e.level),
        (Some(200.0), true, Some(json!(4)))
    );
    assert!(!judge("ttft_p99_ms<150@capacity", &run()).ok);
    let mut none = run();
    none.capacity = None;
    none.capacity_reason = Some("no level met p99 TTFT <= 1 ms".into());
    let e = judge("ttft_p99_ms<250@capacity", &none);
    assert!(!e.ok && e.value.is_none());
    assert_eq!(
        e.reason.as_deref(),
        Some("no capacity: no level met p99 TTFT <= 1 ms")
    );
}

#[test]
fn run_level_figures_read_the_decision() {
    // Capacity 4; the peak is 400 tok/s (at 16); cost $3.0864 per M.
    assert!(judge("capacity>=4", &run()).ok);
    assert!(!judge("capacity>4", &run()).ok);
    assert_eq!(judge("peak_tok_s>=400", &run()).value, Some(400.0));
    assert!(!judge("peak_tok_s>400", &run()).ok);
    let cost = judge("cost_per_m<3", &run());
    assert_eq!((cost.value, cost.ok), (Some(3.0864), false));
    let mut unpriced = run();
    unpriced.cost = None;
    let e = judge("cost_per_m<3", &unpriced);
    assert!(!e.ok);
    assert!(e
        .reason
        .as_deref()
        .is_some_and(|r| r.contains("--gpu-price-per-hour")));
}

#[test]
fn a_level_that_never_ran_fails_with_its_reason() {
    let mut stopped = run();
    stopped.levels.truncate(2);
    let e = judge("tok_s>1@16", &stopped);
    assert!(!e.ok && e.value.is_none());
    assert_eq!(
        e.reason.as_deref(),
        Some("concurrency 16 did not run: the run ended before it")
    );
    // @all fails on it too, naming it.
    let all = judge("tok_s>1@all", &stopped);
    assert!(!all.ok);
    assert!(all
        .reason
        .as_deref()
        .is_some_and(|r| r.contains("concurrency 16")));
    // Skipped by the fit: its reason.
    stopped.fit = Some(FitSection {
        skipped: vec![SkippedLevel {
            concurrency: Some(16),
            series: Some(0),
            reason: Some("past knee".into()),
            line: None,
        }],
        ..FitSection::default()
    });
    assert_eq!(
        judge("tok_s>1@16", &stopped).reason.as_deref(),
        Some("concurrency 16 did not run: skipped (past knee)")
    );
    // Cut short: partial.
    let mut cut = run();
    cut.levels[2].partial = true;
    assert_eq!(
        judge("tok_s>1@16", &cut).reason.as_deref(),
        Some("concurrency 16 did not finish: the run was stopped during it (partial)")
    );
}

#[test]
fn a_figure_not_measured_fails_and_says_why() {
    let e = judge("goodput_req_s>1@4", &run());
    assert!(!e.ok);
    assert_eq!(
        e.reason.as_deref(),
        Some("concurrency 4: not measured: the run was not given --goodput")
    );
    let p95 = judge("ttft_p95_ms<1@4", &run());
    assert!(!p95.ok);
    assert!(
        p95.reason
            .as_deref()
            .is_some_and(|r| r.contains("add 95 to --percentiles")),
        "{p95:?}"
    );
}

#[test]
fn a_tune_is_judged_per_series() {
    // Series 1 has its own levels (tok/s 30 and 90) and capacity 1.
    let mut s = run();
    let mut a = level(1, 100.0, 30.0, 0);
    a.series = Some(1);
    let mut b = level(4, 900.0, 90.0, 0);
    b.series = Some(1);
    s.levels.extend([a, b]);
    s.series = vec![
        SeriesEntry {
            index: Some(0),
            capacity: s.capacity.clone(),
            ..SeriesEntry::default()
        },
        SeriesEntry {
            index: Some(1),
            capacity: Some(Capacity {
                concurrency: Some(1),
                output_throughput: Some(30.into()),
                ..Capacity::default()
            }),
            ..SeriesEntry::default()
        },
    ];
    let t = parse("peak_tok_s>=100").expect("parses");
    let planned = Planned::Concurrency(vec![1, 4]);
    assert!(evaluate(&t, &s, Some(0), &planned).ok);
    let one = evaluate(&t, &s, Some(1), &planned);
    assert_eq!(
        (one.value, one.ok, one.series),
        (Some(90.0), false, Some(1))
    );
    // Series 1's cost at its own capacity: $2/h over 30 tok/s =
    // 2 / (30 * 3600 / 1e6) = 18.5185 per M.
    let cost = evaluate(
        &parse("cost_per_m<20").expect("parses"),
        &s,
        Some(1),
        &planned,
    );
    assert_eq!((cost.value, cost.ok), (Some(18.5185), true));
}

#[test]
fn the_printed_line_says_value_and_verdict() {
    let pass = judge("ttft_p99_ms<700@16", &run());
    assert_eq!(
        line(&pass, None),
        "threshold ttft_p99_ms<700@16: 600.0 ms  pass"
    );
    let all = judge("tok_s>=60@all", &run());
    assert_eq!(
        line(&all, None),
        "threshold tok_s>=60@all: 50.0 tok/s at @1  FAIL"
    );
    let missing = judge("goodput_req_s>1@4", &run());
    assert_eq!(
        line(&missing, Some("np=2")),
        "threshold goodput_req_s>1@4 [np=2]: not measured  FAIL (concurrency 4: not measured: the run was not given --goodput)"
    );
}

#[test]
fn rounds_and_rate_levels_are_found_by_their_place_in_the_plan() {
    // Two rounds of 1 and 4 (plan 1, 4, 1, 4): @all covers both levels
    // once each and every round counts; the second round of 4 (tok/s 150)
    // is the worst for a lower bound.
    let mut rounds = run();
    rounds.levels.truncate(2);
    rounds.levels.push(level(1, 100.0, 55.0, 0));
    rounds.levels.push(level(4, 200.0, 150.0, 0));
    let planned = Planned::Concurrency(vec![1, 4, 1, 4]);
    assert_eq!(planned.keys(), [1.0, 4.0]);
    let t = parse("tok_s>=100@4").expect("parses");
    let e = evaluate(&t, &rounds, None, &planned);
    assert_eq!((e.value, e.ok), (Some(150.0), true));
    let t = parse("tok_s>=160@4").expect("parses");
    assert!(!evaluate(&t, &rounds, None, &planned).ok);
    // A rate run: @4 is the level at 4 req/s (its concurrency is the cap).
    let mut rate = level(256, 80.0, 300.0, 0);
    rate.mode = Some("rate".into());
    rate.request_rate = Some(json!(4.0));
    let mut slow = level(256, 40.0, 100.0, 0);
    slow.mode = Some("rate".into());
    slow.request_rate = Some(json!(2.0));
    let summary = SummaryFile {
        levels: vec![slow, rate],
        ..SummaryFile::default()
    };
    let planned = Planned::Rate(vec![2.0, 4.0]);
    let e = evaluate(
        &parse("ttft_p99_ms<100@4").expect("parses"),
        &summary,
        None,
        &planned,
    );
    assert_eq!((e.value, e.ok, e.level), (Some(80.0), true, Some(json!(4))));
    let missing = evaluate(
        &parse("tok_s>1@8").expect("parses"),
        &summary,
        None,
        &planned,
    );
    assert_eq!(
        missing.reason.as_deref(),
        Some("rate 8 req/s did not run: the run ended before it")
    );
}
