//! Merge speed: `tokbench merge` of 100 shards x 10 levels, each level file
//! with realistic HDR histograms (six metrics, values spread from 1 ms to
//! seconds with a long tail) and 1,000 exact samples per per-request metric.
//!
//! Run: `cargo bench --bench merge` (prints the wall times; asserts
//! nothing). Two figures: the pure merge (`merge::merge`, parsed files in,
//! merged files out, histograms decoded, added and encoded again), and the
//! same with every level file parsed from its JSON text first (what
//! `tokbench merge` does after reading the files; disk reads left out).
//! Goal: under 1 s for the merge in a release build.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Map, Value};
use tokbench::merge::{merge, MergeOptions, ShardRun};
use tokbench::report::schema::{LevelFile, RunSection, ShardSection, SummaryFile};
use tokbench::stats::hdr::LatencyHistogram;
use tokbench::stats::summary::Distribution;

const SHARDS: u32 = 100;
const LEVELS: u64 = 10;
const SAMPLES: usize = 1_000;
/// Inter-token gaps per shard and level (1,000 answers of 50 tokens).
const GAPS: usize = 50_000;
const PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

/// A fixed uniform stream (Knuth's MMIX LCG): the same files every run.
struct Lcg(u64);

impl Lcg {
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `base` plus an exponential tail of mean `scale`, ms.
    fn latency(&mut self, base: f64, scale: f64) -> f64 {
        let ms = base + scale * -(1.0 - self.uniform()).ln();
        (ms * 1000.0).round() / 1000.0
    }
}

fn level_file(rng: &mut Lcg, shard: u32, key: u64) -> LevelFile {
    let load = 1.0 + key as f64;
    let mut stats = Map::new();
    let mut histograms = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let metrics: [(&str, f64, f64, usize); 6] = [
        ("ttft", 40.0 * load, 30.0 * load, SAMPLES),
        ("tpot", 15.0 + load, 3.0, SAMPLES),
        ("itl", 12.0 + load, 6.0, GAPS),
        ("e2el", 2_000.0 * load, 500.0, SAMPLES),
        ("ttfb", 35.0 * load, 30.0 * load, SAMPLES),
        ("ttfc", 80.0 * load, 40.0, SAMPLES),
    ];
    for (metric, base, scale, n) in metrics {
        let mut values: Vec<f64> = (0..n).map(|_| rng.latency(base, scale)).collect();
        let mut h = LatencyHistogram::default();
        for v in &values {
            h.record_units((v * 1000.0).round() as u64);
        }
        histograms.insert(format!("{metric}_ms"), h.to_base64().expect("encodes"));
        if metric != "itl" {
            samples.insert(format!("{metric}_ms"), values.clone());
        }
        if let Some(d) = Distribution::from_samples(&mut values, &PERCENTILES) {
            stats.insert(format!("mean_{metric}_ms"), json!(d.mean));
            stats.insert(format!("median_{metric}_ms"), json!(d.median));
            stats.insert(format!("std_{metric}_ms"), json!(d.std));
            for (p, v) in d.percentiles {
                stats.insert(format!("p{p}_{metric}_ms"), json!(v));
            }
        }
    }
    LevelFile {
        model_id: Some("sim".into()),
        num_prompts: Some(SAMPLES as u64),
        max_concurrency: Some(1 << key.min(6)),
        request_rate: Some(json!("inf")),
        duration: Some(30.0 + rng.uniform()),
        completed: Some(SAMPLES as u64),
        failed: Some(0),
        total_input_tokens: Some(SAMPLES as u64 * 1024),
        total_output_tokens: Some(SAMPLES as u64 * 50),
        mode: Some("planned".into()),
        level_index: Some(key),
        started_at_s: Some(5.0 + key as f64 * 35.0),
        errors: Some(BTreeMap::new()),
        input_len: Some(json!({"min": 1024, "mean": 1024.0, "max": 1024})),
        output_len: Some(json!({"min": 50, "mean": 50.0, "max": 50})),
        histograms: Some(histograms),
        samples: Some(samples),
        file: Some(format!("sweep-c{}.json", 1u32 << key.min(6))),
        shard: Some(section(shard)),
        started_unix_s: Some(1_796_130_000.0 + key as f64 * 35.0 + f64::from(shard) * 0.001),
        duration_target: Some(30.0),
        stats,
        ..LevelFile::default()
    }
}

fn section(shard: u32) -> ShardSection {
    ShardSection {
        index: Some(shard),
        count: Some(SHARDS),
        host: Some(format!("node{shard}")),
        clock_offset_ms: Some(-200.0),
        clock_offset_error_ms: Some(500.0),
    }
}

fn shard_run(rng: &mut Lcg, shard: u32) -> ShardRun {
    let mut run = RunSection {
        target: Some("http://gpu-box:8000".into()),
        model: Some("sim".into()),
        input_len: Some(1024),
        output_len: Some(50),
        profile: Some("custom".into()),
        seed: Some(7),
        kind: Some("sweep".into()),
        ..RunSection::default()
    };
    run.shard = Some(section(shard));
    let levels: Vec<LevelFile> = (0..LEVELS).map(|k| level_file(rng, shard, k)).collect();
    ShardRun {
        name: format!("shard{shard}"),
        summary: SummaryFile {
            run,
            ..SummaryFile::default()
        },
        levels,
    }
}

fn main() {
    let made = Instant::now();
    let mut rng = Lcg(13);
    let runs: Vec<ShardRun> = (0..SHARDS).map(|s| shard_run(&mut rng, s)).collect();
    let texts: Vec<Vec<String>> = runs
        .iter()
        .map(|r| r.levels.iter().map(|l| l.to_value().to_string()).collect())
        .collect();
    let bytes: usize = texts.iter().flatten().map(String::len).sum();
    eprintln!(
        "made {SHARDS} shards x {LEVELS} levels ({:.0} MB of level files) in {:.1} s",
        bytes as f64 / 1e6,
        made.elapsed().as_secs_f64()
    );

    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        let merged = merge(&runs, MergeOptions::default()).expect("merges");
        let s = t.elapsed().as_secs_f64();
        assert_eq!(merged.levels.len(), LEVELS as usize);
        best = best.min(s);
    }
    println!(
        "merge of {SHARDS} shards x {LEVELS} levels (6 histograms, {SAMPLES} samples per metric per shard level): {:.3} s (best of 3)",
        best
    );

    let t = Instant::now();
    let parsed: Vec<ShardRun> = runs
        .iter()
        .zip(&texts)
        .map(|(r, texts)| ShardRun {
            levels: texts
                .iter()
                .map(|t| serde_json::from_str::<LevelFile>(t).expect("parses"))
                .collect(),
            ..r.clone()
        })
        .collect();
    let parse_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let merged = merge(&parsed, MergeOptions::default()).expect("merges");
    let merge_s = t.elapsed().as_secs_f64();
    let out: usize = merged
        .levels
        .iter()
        .map(|(_, l)| l.to_value().to_string().len())
        .sum();
    let _: Value = merged.summary.to_value();
    println!(
        "with the level files parsed from JSON first: {:.3} s ({parse_s:.3} s parsing, {merge_s:.3} s merging; {:.1} MB out)",
        parse_s + merge_s,
        out as f64 / 1e6
    );
}
