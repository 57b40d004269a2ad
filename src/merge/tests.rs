//! Every figure of a merge checked against values worked out by hand, and
//! every refusal's line.

use super::*;
use crate::report::saved::SavedRun;
use crate::stats::hdr::LatencyHistogram;
use crate::stats::summary::Distribution;

/// What one shard saw of one level.
#[derive(Clone)]
struct Shape {
    concurrency: u32,
    start_unix_s: f64,
    duration: f64,
    ttft: Vec<f64>,
    itl: Vec<f64>,
    output_tokens: u64,
    failed: u64,
    errors: Vec<(&'static str, u64)>,
    /// False: the level file keeps no ttft samples (past the cap).
    ttft_samples: bool,
}

fn shape(concurrency: u32, start: f64, duration: f64, ttft: &[f64], itl: &[f64]) -> Shape {
    Shape {
        concurrency,
        start_unix_s: start,
        duration,
        ttft: ttft.to_vec(),
        itl: itl.to_vec(),
        output_tokens: 100 * ttft.len() as u64,
        failed: 0,
        errors: Vec::new(),
        ttft_samples: true,
    }
}

fn histogram(values: &[f64]) -> String {
    let mut h = LatencyHistogram::default();
    for v in values {
        h.record_units((v * 1000.0).round() as u64);
    }
    h.to_base64().unwrap()
}

const PS: [f64; 2] = [50.0, 99.0];

/// A level file as the recorder writes it (its statistics from the same
/// values, numpy-linear), for shard `index` of `count`.
fn level_file(index: u32, count: u32, key: u64, s: &Shape) -> LevelFile {
    let completed = s.ttft.len() as u64;
    let mut stats = Map::new();
    for (metric, values) in [("ttft", &s.ttft), ("itl", &s.itl)] {
        let d = Distribution::from_samples(&mut values.clone(), &PS);
        MergedMetric {
            count: values.len() as u64,
            mean: d.as_ref().map(|d| d.mean),
            median: d.as_ref().map(|d| d.median),
            std: d.as_ref().map(|d| d.std),
            percentiles: PS
                .iter()
                .map(|&p| (p, d.as_ref().and_then(|d| d.percentile(p))))
                .collect(),
            exact: true,
            histogram: LatencyHistogram::default(),
            samples: None,
        }
        .insert_keys(metric, &mut stats);
    }
    let mut histograms = BTreeMap::new();
    histograms.insert("ttft_ms".to_string(), histogram(&s.ttft));
    histograms.insert("itl_ms".to_string(), histogram(&s.itl));
    let mut samples = BTreeMap::new();
    if s.ttft_samples {
        samples.insert("ttft_ms".to_string(), s.ttft.clone());
    }
    LevelFile {
        model_id: Some("sim".into()),
        num_prompts: Some(completed + s.failed),
        max_concurrency: Some(s.concurrency),
        request_rate: Some(json!("inf")),
        duration: Some(s.duration),
        completed: Some(completed),
        failed: Some(s.failed),
        total_input_tokens: Some(128 * completed),
        total_output_tokens: Some(s.output_tokens),
        mode: Some("planned".into()),
        level_index: Some(key),
        started_at_s: Some(1.0 + key as f64 * 20.0),
        errors: Some(s.errors.iter().map(|(k, v)| (k.to_string(), *v)).collect()),
        input_len: Some(json!({"min": 128, "mean": 128.0, "max": 128})),
        output_len: Some(json!({"min": 100, "mean": 100.0, "max": 100})),
        histograms: Some(histograms),
        samples: Some(samples),
        file: Some(format!("sweep-c{}.json", s.concurrency)),
        shard: Some(shard_section(index, count)),
        started_unix_s: Some(s.start_unix_s),
        duration_target: Some(3.0),
        stats,
        ..LevelFile::default()
    }
}

fn shard_section(index: u32, count: u32) -> ShardSection {
    ShardSection {
        index: Some(index),
        count: Some(count),
        host: Some(format!("host{index}")),
        ..ShardSection::default()
    }
}

fn shard_run(index: u32, count: u32, levels: &[Shape]) -> ShardRun {
    let mut run = schema::RunSection {
        target: Some("http://127.0.0.1:8000".into()),
        model: Some("sim".into()),
        input_len: Some(128),
        output_len: Some(100),
        profile: Some("custom".into()),
        seed: Some(7),
        kind: Some("sweep".into()),
        rounds: Some(1),
        started_at: Some(format!("2026-12-01T13:00:0{index}Z")),
        ..schema::RunSection::default()
    };
    run.shard = Some(shard_section(index, count));
    let levels: Vec<LevelFile> = levels
        .iter()
        .enumerate()
        .map(|(k, s)| level_file(index, count, k as u64, s))
        .collect();
    ShardRun {
        name: format!("shard{index}"),
        summary: SummaryFile {
            run,
            levels: levels.clone(),
            ..SummaryFile::default()
        },
        levels,
    }
}

fn merged(runs: &[ShardRun]) -> Merged {
    merge(runs, MergeOptions::default()).unwrap()
}

fn refusal(runs: &[ShardRun], options: MergeOptions) -> String {
    match merge(runs, options) {
        Err(MergeError::Refused(why)) => {
            assert!(!why.contains('\n'), "one line: {why}");
            why
        }
        Err(MergeError::Broken(e)) => panic!("broken, not refused: {e:#}"),
        Ok(_) => panic!("merged, not refused"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// Two shards of one level each: TTFT 10, 20, 30 ms and 40, 50 ms.
pub(crate) fn two_shards() -> Vec<ShardRun> {
    let mut a = shape(3, 1000.0, 10.0, &[10.0, 20.0, 30.0], &[5.0, 5.0, 6.0]);
    a.errors = vec![("http_503", 1)];
    a.failed = 1;
    let mut b = shape(2, 1000.1, 10.4, &[40.0, 50.0], &[7.0, 100.0]);
    b.errors = vec![("http_503", 2), ("timeout", 1)];
    b.failed = 3;
    vec![shard_run(0, 2, &[a]), shard_run(1, 2, &[b])]
}

/// Goodput: the good requests summed (2 + 3), their share of the 9
/// answered (3 + 1 and 2 + 3), 5 / 9 = 0.5556, and their rate over the
/// union's 10.5 s, 5 / 10.5 = 0.476190 (0.4762 in `goodput`, 0.476 in
/// vLLM's `request_goodput`). Shards whose durations are unknown give a
/// share and no rate.
#[test]
fn goodput_is_summed_and_its_rate_is_over_the_unions_duration() {
    let mut runs = two_shards();
    runs[0].levels[0].goodput = Some(json!({"good": 2, "share": 0.5, "rate_per_s": 0.2}));
    runs[1].levels[0].goodput = Some(json!({"good": 3, "share": 0.6, "rate_per_s": 0.2885}));
    let level = merged(&runs).levels[0].1.clone();
    assert_eq!(
        level.goodput,
        Some(json!({"good": 5, "share": 0.5556, "rate_per_s": 0.4762}))
    );
    assert_eq!(level.request_goodput, Some(0.476));
    for run in &mut runs {
        run.levels[0].duration = None;
    }
    let level = merged(&runs).levels[0].1.clone();
    assert_eq!(
        level.goodput,
        Some(json!({"good": 5, "share": 0.5556, "rate_per_s": null}))
    );
    assert_eq!(level.request_goodput, None);
    // A shard without goodput leaves the merge without it.
    runs[1].levels[0].goodput = None;
    assert_eq!(merged(&runs).levels[0].1.goodput, None);
}

#[test]
fn ttft_percentiles_are_numpy_linear_over_the_union_when_every_shard_kept_samples() {
    let m = merged(&two_shards());
    let (name, level) = &m.levels[0];
    assert_eq!(name, "sweep-c5.json", "named at the summed concurrency");
    // Union 10, 20, 30, 40, 50: median 30; p99 rank 0.99 x 4 = 3.96, so
    // 40 + 0.96 x 10 = 49.6; mean 30; population std sqrt(1000 / 5).
    assert_eq!(level.stat("median_ttft_ms"), Some(30.0));
    assert_eq!(level.percentile("ttft", "50"), Some(30.0));
    assert!(close(level.percentile("ttft", "99").unwrap(), 49.6));
    assert!(close(level.stat("mean_ttft_ms").unwrap(), 30.0));
    assert!(close(level.stat("std_ttft_ms").unwrap(), 200f64.sqrt()));
    assert_eq!(level.stats["percentiles_from"]["ttft"], "samples");
    // The union's samples ride along, for a merge of merges.
    assert_eq!(
        level.samples.as_ref().unwrap()["ttft_ms"],
        vec![10.0, 20.0, 30.0, 40.0, 50.0]
    );
}

#[test]
fn without_every_shards_samples_percentiles_come_from_the_merged_histogram_and_moments_stay_exact()
{
    let mut runs = two_shards();
    runs[1].levels[0].samples = Some(BTreeMap::new());
    let m = merged(&runs);
    let level = &m.levels[0].1;
    // p50 is the 3rd of 5 values, 30 ms = 30,000 us, whose bucket at 3
    // digits is 16 us wide (30,000..=30,015): its middle, 30.008 ms.
    assert!(close(level.stat("median_ttft_ms").unwrap(), 30.008));
    // p99 is the 5th value, 50,000 us: a 32 us bucket from 49,984, middle 50,000.
    assert!(close(level.percentile("ttft", "99").unwrap(), 50.0));
    // Pooled moments: means 20 and 45, M2 = 3 x 200/3 + 3 x 100 + 2 x 25 +
    // 2 x 225 = 1000 over 5: mean 30, std sqrt(200), as exact as above.
    assert!(close(level.stat("mean_ttft_ms").unwrap(), 30.0));
    assert!(close(level.stat("std_ttft_ms").unwrap(), 200f64.sqrt()));
    assert_eq!(level.stats["percentiles_from"]["ttft"], "histogram");
    assert!(!level.samples.as_ref().unwrap().contains_key("ttft_ms"));
}

#[test]
fn itl_comes_from_the_merged_histogram_with_an_exact_mean() {
    let m = merged(&two_shards());
    let level = &m.levels[0].1;
    // Union 5, 5, 6, 7, 100 ms. p50: the 3rd value, 6,000 us, in a 4 us
    // bucket (6,000..=6,003): 6.002 ms. p99: the 5th, 100,000 us, in a
    // 64 us bucket from 99,968: 100.000 ms. Mean 123 / 5 = 24.6.
    assert!(close(level.stat("median_itl_ms").unwrap(), 6.002));
    assert!(close(level.percentile("itl", "99").unwrap(), 100.0));
    assert!(close(level.stat("mean_itl_ms").unwrap(), 24.6));
    // Population std of the union: deviations -19.6, -19.6, -18.6, -17.6,
    // 75.4; squares 384.16, 384.16, 345.96, 309.76, 5685.16 sum to
    // 7109.2; / 5 = 1421.84.
    assert!(close(level.stat("std_itl_ms").unwrap(), 1421.84f64.sqrt()));
    assert_eq!(level.stats["percentiles_from"]["itl"], "histogram");
    let merged_hist =
        LatencyHistogram::from_base64(&level.histograms.as_ref().unwrap()["itl_ms"]).unwrap();
    assert_eq!(merged_hist.len(), 5);
}

#[test]
fn counts_are_sums_and_throughputs_are_over_the_unions_duration() {
    let m = merged(&two_shards());
    let level = &m.levels[0].1;
    assert_eq!(level.completed, Some(5));
    assert_eq!(level.failed, Some(4));
    assert_eq!(level.max_concurrency, Some(5));
    assert_eq!(level.total_output_tokens, Some(500));
    assert_eq!(level.total_input_tokens, Some(640));
    let errors = level.errors.as_ref().unwrap();
    assert_eq!((errors["http_503"], errors["timeout"]), (3, 1));
    // Shard 0 runs 1000.0..1010.0, shard 1 1000.1..1010.5: 10.5 s.
    assert!(close(level.duration.unwrap(), 10.5));
    assert!(close(level.output_throughput.unwrap(), 500.0 / 10.5));
    assert!(close(level.request_throughput.unwrap(), 5.0 / 10.5));
    assert!(close(level.total_token_throughput.unwrap(), 1140.0 / 10.5));
    assert!(close(level.per_stream_tok_s.unwrap(), 500.0 / 10.5 / 5.0));
    assert_eq!(fields::started_unix_s(level), Some(1000.0));
    let shards = fields::level_shards(level).unwrap();
    assert_eq!(shards.len(), 2);
    assert_eq!((shards[1].index, shards[1].completed), (1, Some(2)));
    assert_eq!(shards[1].host.as_deref(), Some("host1"));
    // Lengths: every request 128 in, 100 out.
    assert_eq!(level.input_len.as_ref().unwrap()["mean"], 128.0);
    assert!(m.warnings.is_empty(), "100 ms apart: {:?}", m.warnings);
}

#[test]
fn a_clock_offset_moves_a_shard_onto_the_common_clock() {
    let mut runs = two_shards();
    // Shard 1's clock is 100 ms ahead of the server's (server minus host
    // -100 ms, known to 50 ms): it started at 1000.0 on the server's
    // clock and ended at 1010.4, so 10.4 s in all.
    runs[1].levels[0].shard = Some(ShardSection {
        clock_offset_ms: Some(-100.0),
        clock_offset_error_ms: Some(50.0),
        ..shard_section(1, 2)
    });
    let level = &merged(&runs).levels[0].1;
    assert!(close(level.duration.unwrap(), 10.4));
    // Known only to +- 500 ms (a whole-second Date header), -100 ms says
    // nothing: the host clocks stand, 1000.0..1010.5 as before.
    runs[1].levels[0].shard = Some(ShardSection {
        clock_offset_ms: Some(-100.0),
        clock_offset_error_ms: Some(500.0),
        ..shard_section(1, 2)
    });
    assert!(close(merged(&runs).levels[0].1.duration.unwrap(), 10.5));
    assert_eq!(
        fields::level_shards(level).unwrap()[1].clock_offset_ms,
        Some(-100.0)
    );
}

#[test]
fn starts_more_than_250_ms_apart_warn_and_are_recorded() {
    let mut runs = two_shards();
    runs[1].levels[0].started_unix_s = Some(1000.3);
    let m = merged(&runs);
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    let w = &m.warnings[0];
    assert!(w.contains("differ by 300 ms"), "{w}");
    assert!(w.contains("shard 1/2 started last"), "{w}");
    assert_eq!(m.summary.other["merge"]["warnings"][0], json!(w));
    assert!(m
        .summary
        .diagnoses
        .iter()
        .any(|d| d.id == "shard_start_skew"));
    // 200 ms apart: no warning.
    let mut runs = two_shards();
    runs[1].levels[0].started_unix_s = Some(1000.2);
    assert!(merged(&runs).warnings.is_empty());
}

#[test]
fn the_summary_holds_the_run_as_merged_and_a_recomputed_decision() {
    let levels = |scale: f64| {
        vec![
            shape(1, 1000.0, 10.0, &[10.0, 11.0], &[5.0]),
            Shape {
                output_tokens: (400.0 * scale) as u64,
                ..shape(2, 1020.0, 10.0, &[12.0, 13.0], &[5.0])
            },
        ]
    };
    let runs = vec![shard_run(0, 2, &levels(1.0)), shard_run(1, 2, &levels(1.0))];
    let m = merged(&runs);
    let s = &m.summary;
    let from = fields::run_merged(&s.run).unwrap();
    assert_eq!(
        (from.merged_from, from.count, from.indexes.clone()),
        (Some(2), Some(2), Some(vec![0, 1]))
    );
    assert_eq!(s.run.shard, None, "no one shard's identity");
    assert_eq!(s.run.started_at.as_deref(), Some("2026-12-01T13:00:00Z"));
    let names: Vec<&str> = s.levels.iter().filter_map(|l| l.file.as_deref()).collect();
    assert_eq!(names, ["sweep-c2.json", "sweep-c4.json"]);
    assert!(s
        .levels
        .iter()
        .all(|l| l.histograms.is_none() && l.samples.is_none()));
    // Capacity over the merged levels: the highest meeting the default
    // SLO, at the merged concurrency 4 (800 tok/s over 10 s = 80).
    let capacity = s.capacity.as_ref().expect("a capacity");
    assert_eq!(capacity.concurrency, Some(4));
    assert_eq!(number(&capacity.output_throughput), Some(80.0));
    let run = SavedRun::from_value(s.to_value(), std::path::Path::new("merged")).unwrap();
    assert_eq!(run.levels.len(), 2);
    assert_eq!(run.levels[1].concurrency, Some(4));
    assert_eq!(run.levels[0].ttft_p50_ms, Some(10.5));
}

#[test]
fn a_merged_folder_merges_again_to_the_same_figures() {
    let runs: Vec<ShardRun> = (0..4)
        .map(|i| {
            let v = f64::from(i);
            shard_run(
                i,
                4,
                &[shape(
                    2,
                    1000.0 + v * 0.01,
                    10.0 + v * 0.1,
                    &[10.0 + v, 20.0 + v, 35.0 * v],
                    &[5.0 + v, 9.0],
                )],
            )
        })
        .collect();
    let all = merged(&runs);
    let as_run = |m: &Merged, name: &str| {
        let levels: Vec<LevelFile> = m
            .levels
            .iter()
            .map(|(f, l)| LevelFile {
                file: Some(f.clone()),
                ..l.clone()
            })
            .collect();
        ShardRun {
            name: name.into(),
            summary: m.summary.clone(),
            levels,
        }
    };
    let allow = MergeOptions {
        allow_missing: true,
    };
    let low = merge(&runs[..2], allow).unwrap();
    let high = merge(&runs[2..], allow).unwrap();
    let again = merged(&[as_run(&high, "high"), as_run(&low, "low")]);
    let (a, b) = (&all.levels[0].1, &again.levels[0].1);
    for key in [
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_ttft_ms",
        "std_ttft_ms",
        "p99_itl_ms",
        "mean_itl_ms",
    ] {
        let (x, y) = (a.stat(key).unwrap(), b.stat(key).unwrap());
        assert!(
            (x - y).abs() <= 1e-9 * x.abs().max(1.0),
            "{key}: {x} vs {y}"
        );
    }
    assert_eq!(a.duration, b.duration);
    assert_eq!(a.completed, b.completed);
    let hist = |l: &LevelFile| {
        LatencyHistogram::from_base64(&l.histograms.as_ref().unwrap()["itl_ms"]).unwrap()
    };
    let (ha, hb) = (hist(a), hist(b));
    assert_eq!(ha.len(), hb.len());
    for p in [1.0, 50.0, 90.0, 99.9, 100.0] {
        assert_eq!(ha.percentile_units(p), hb.percentile_units(p), "p{p}");
    }
    let indexes: Vec<u32> = fields::level_shards(b)
        .unwrap()
        .iter()
        .map(|s| s.index)
        .collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    assert_eq!(
        fields::run_merged(&again.summary.run).unwrap().missing,
        Some(vec![])
    );
    assert_eq!(again.order, [(1, None), (0, None)], "low shards first");
}

#[test]
fn shards_of_different_runs_are_refused_naming_the_difference() {
    type Edit = fn(&mut schema::RunSection);
    let cases: [(Edit, &str); 6] = [
        (
            |r| r.target = Some("http://other:8000".into()),
            "differ in target (\"http://127.0.0.1:8000\" vs \"http://other:8000\")",
        ),
        (
            |r| r.model = Some("other".into()),
            "differ in model (\"sim\" vs \"other\")",
        ),
        (
            |r| r.input_len = Some(256),
            "differ in input length (128 vs 256)",
        ),
        (
            |r| r.output_len = Some(50),
            "differ in output length (100 vs 50)",
        ),
        (
            |r| r.profile = Some("chat".into()),
            "differ in profile (\"custom\" vs \"chat\")",
        ),
        (|r| r.seed = Some(8), "differ in seed (7 vs 8)"),
    ];
    for (edit, want) in cases {
        let mut runs = two_shards();
        edit(&mut runs[1].summary.run);
        let why = refusal(&runs, MergeOptions::default());
        assert_eq!(
            why,
            format!("shard0 and shard1 {want}: they are not shards of one run")
        );
    }
}

#[test]
fn other_shard_counts_a_shard_twice_and_non_shards_are_refused() {
    let a = shape(1, 1000.0, 1.0, &[1.0], &[1.0]);
    let why = refusal(
        &[
            shard_run(0, 4, std::slice::from_ref(&a)),
            shard_run(1, 2, std::slice::from_ref(&a)),
        ],
        MergeOptions::default(),
    );
    assert_eq!(
        why,
        "shard counts differ: shard0 is shard 0/4, shard1 is shard 1/2"
    );
    let mut twin = shard_run(1, 2, std::slice::from_ref(&a));
    twin.name = "again".into();
    let why = refusal(
        &[
            shard_run(0, 2, std::slice::from_ref(&a)),
            shard_run(1, 2, std::slice::from_ref(&a)),
            twin,
        ],
        MergeOptions::default(),
    );
    assert_eq!(why, "shard 1/2 given twice: shard1 and again");
    let mut plain = shard_run(0, 2, &[a]);
    plain.summary.run.shard = None;
    let why = refusal(&[plain], MergeOptions::default());
    assert_eq!(why, "shard0 is not a shard: its summary.json has no run.shard (run each part with sweep --shard I/N)");
}

#[test]
fn a_missing_shard_is_named_and_allow_missing_merges_the_rest_and_says_so() {
    let a = shape(1, 1000.0, 1.0, &[1.0], &[1.0]);
    let runs = [
        shard_run(0, 3, std::slice::from_ref(&a)),
        shard_run(1, 3, &[a]),
    ];
    let why = refusal(&runs, MergeOptions::default());
    assert_eq!(
        why,
        "shard 2/3 missing: give every shard's folder, or --allow-missing to merge the 2 given"
    );
    let m = merge(
        &runs,
        MergeOptions {
            allow_missing: true,
        },
    )
    .unwrap();
    assert_eq!(m.warnings[0], "merging 2 of 3 shards: shard 2/3 missing (--allow-missing); counts and throughputs are of the shards given");
    assert_eq!(
        fields::run_merged(&m.summary.run).unwrap().missing,
        Some(vec![2])
    );
    assert_eq!(m.summary.other["merge"]["missing"], json!([2]));
    assert!(m.summary.diagnoses.iter().any(|d| d.id == "shards_missing"));
}

#[test]
fn a_level_in_some_shards_only_is_refused() {
    let a = shape(1, 1000.0, 1.0, &[1.0], &[1.0]);
    let b = shape(2, 1020.0, 1.0, &[1.0], &[1.0]);
    let runs = [shard_run(0, 2, &[a.clone(), b]), shard_run(1, 2, &[a])];
    let why = refusal(&runs, MergeOptions::default());
    assert_eq!(why, "level 2 (sweep-c2.json) is in shard 0/2 but not in shard 1/2: the shards ran different levels");
    // view --follow merges the levels every shard has so far.
    let mut live = runs.to_vec();
    keep_common_levels(&mut live);
    assert_eq!(merged(&live).levels.len(), 1);
}

#[test]
fn a_level_too_small_for_every_shard_merges_the_shards_that_ran_it() {
    // One stream over 3 shards: shard 0 runs it, shards 1 and 2 have no part
    // and write no file; then 6 streams, 2 each.
    let one = shape(1, 1000.0, 1.0, &[1.0], &[1.0]);
    let six = shape(2, 1020.0, 1.0, &[2.0, 3.0], &[1.0]);
    let mut runs: Vec<ShardRun> = (0..3)
        .map(|i| shard_run(i, 3, &[one.clone(), six.clone()]))
        .collect();
    for run in &mut runs[1..] {
        run.levels.remove(0);
    }
    let m = merged(&runs);
    assert_eq!(m.levels.len(), 2);
    assert_eq!(
        (m.levels[0].0.as_str(), m.levels[0].1.completed),
        ("sweep-c1.json", Some(1))
    );
    assert_eq!(fields::level_shards(&m.levels[0].1).unwrap().len(), 1);
    assert_eq!(m.levels[1].1.max_concurrency, Some(6));
    // Two streams over 3 shards: shard 1 must have run one of them.
    let mut runs: Vec<ShardRun> = (0..3)
        .map(|i| shard_run(i, 3, &[shape(1, 1000.0, 1.0, &[1.0], &[1.0])]))
        .collect();
    runs[1].levels.clear();
    runs[2].levels.clear();
    runs[0].levels[0].max_concurrency = Some(2);
    let why = refusal(&runs, MergeOptions::default());
    assert_eq!(why, "level 1 (sweep-c1.json) is in shard 0/3 but not in shards 1, 2/3: the shards ran different levels");
}

#[test]
fn a_level_file_without_histograms_is_refused_as_an_older_tokbenchs() {
    let mut runs = two_shards();
    runs[1].levels[0].histograms = None;
    let why = refusal(&runs, MergeOptions::default());
    assert_eq!(why, "shard1/sweep-c2.json has no histograms: an older tokbench wrote it, and it cannot be merged exactly");
}

#[test]
fn a_broken_histogram_is_an_error_naming_the_file() {
    let mut runs = two_shards();
    if let Some(h) = runs[0].levels[0].histograms.as_mut() {
        h.insert("ttft_ms".into(), "not base64!".into());
    }
    match merge(&runs, MergeOptions::default()) {
        Err(e @ MergeError::Broken(_)) => {
            let text = e.to_string();
            assert!(
                text.starts_with(
                    "shard0/sweep-c3.json: histograms.ttft_ms: a histogram is not valid base64"
                ),
                "{text}"
            );
        }
        _ => panic!("expected a broken-file error"),
    }
}

/// The two shards of [`two_shards`] as result folders under `dir`, as the
/// recorder writes them: summary.json without histograms, level files with,
/// requests.jsonl with a torn last line.
pub(crate) fn write_shard_folders(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut inputs = Vec::new();
    for run in two_shards() {
        let folder = dir.join(&run.name);
        std::fs::create_dir_all(&folder).unwrap();
        let mut summary = run.summary.clone();
        for l in &mut summary.levels {
            l.histograms = None;
            l.samples = None;
        }
        std::fs::write(folder.join("summary.json"), summary.to_value().to_string()).unwrap();
        for l in &run.levels {
            std::fs::write(
                folder.join(l.file.as_deref().unwrap()),
                l.to_value().to_string(),
            )
            .unwrap();
        }
        std::fs::write(
            folder.join("requests.jsonl"),
            "{\"level\":0,\"ttft_ms\":10.0}\n{\"level\":0,\"ttft_ms\":20.0}\n{\"level\":0,\"tt",
        )
        .unwrap();
        inputs.push(folder);
    }
    inputs
}

#[test]
fn the_merged_folder_is_written_and_reads_back_as_a_run() {
    let dir = std::env::temp_dir().join(format!("tokbench-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let inputs = write_shard_folders(&dir);
    let runs: Vec<ShardRun> = inputs
        .iter()
        .map(|p| files::load_shard(p).unwrap())
        .collect();
    assert!(
        runs[0].levels[0].histograms.is_some(),
        "read from the level file"
    );
    let m = merge(&runs, MergeOptions::default()).unwrap();
    let out = dir.join("merged");
    files::write_merged(&out, &m, &inputs).unwrap();
    let lines = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let shards: Vec<u64> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["shard"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(shards, [0, 0, 1, 1], "torn last lines left out");
    let run = SavedRun::load(&out).unwrap();
    assert_eq!(run.levels[0].completed, Some(5));
    assert!(out.join("sweep-c5.json").exists() && out.join("report.md").exists());
    // The merged folder is itself a merge input.
    let again = files::load_shard(&out).unwrap();
    assert!(again.levels[0].histograms.is_some());
    let err = files::write_merged(&out, &m, &inputs).unwrap_err();
    assert!(format!("{err:#}").contains("already holds a run"));
    std::fs::remove_dir_all(&dir).ok();
}

/// Each shard says once that the server served the other shards too
/// (`shards_share_server`), and each level's account holds their requests.
/// The merged run's requests are all the shards': neither the note nor a
/// shard's account is carried into it, and its report warns of no other
/// client.
#[test]
fn a_merge_does_not_carry_the_shards_server_notes() {
    let mut runs = two_shards();
    for run in &mut runs {
        run.summary
            .diagnoses
            .push(crate::report::schema::DiagnosisEntry {
                id: "shards_share_server".into(),
                message: "shard 0/2: the server also serves the other shard's".into(),
                evidence: Value::Null,
            });
        for level in run.levels.iter_mut().chain(run.summary.levels.iter_mut()) {
            level.server_account = Some(serde_json::json!({
                "other_traffic": true,
                "lines": ["requests: the server finished 10 during this level, this shard 5 (0 failed); the other shard's are in its count"],
            }));
        }
    }
    let m = merge(&runs, MergeOptions::default()).unwrap();
    assert!(m
        .summary
        .diagnoses
        .iter()
        .all(|d| d.id != "shards_share_server"));
    assert!(m.summary.levels.iter().all(|l| l.server_account.is_none()));
    let run = SavedRun::from_value(m.summary.to_value(), std::path::Path::new("merged")).unwrap();
    for format in [crate::cli::ReportFormat::Md, crate::cli::ReportFormat::Html] {
        let report = crate::report::formats::render(&run, format);
        assert!(!report.contains("shard"), "{report}");
        assert!(!report.contains("another client"), "{report}");
    }
}
