//! `report --format br`: the llm-d Benchmark Report, version 0.2.1 (the
//! format llm-d-benchmark's analysis and comparison tools read; schema in
//! its repository under `llmdbenchmark/analysis/benchmark_report/`, a copy
//! in `tests/schemas/`).
//!
//! A Benchmark Report describes one load point ("a benchmark report
//! currently describes a single point in any sweep"), so a run gives one
//! report per level, in run order, as a JSON array; the levels of one run
//! share `run.eid` and are told apart by `scenario.load.standardized.stage`
//! (the level index). What tokbench does not know (the accelerator's
//! parallelism, replicas, the user) is left out rather than guessed; the
//! fields the schema requires of an inference engine component are among
//! those, so the server is a `generic` component.
//!
//! A pure function of `summary.json`, like every report format.

use serde_json::{json, Map, Value};

use super::saved::SavedRun;
use crate::workload::profile::len_bounds;

/// The schema version written.
pub(crate) const BR_VERSION: &str = "0.2.1";

/// The reports of a run: a JSON array, one report per saved level.
pub(crate) fn render_br(run: &SavedRun) -> String {
    let reports: Vec<Value> = run
        .levels
        .iter()
        .enumerate()
        .map(|(i, level)| level_report(&run.raw, &level.raw, i))
        .collect();
    let mut text = serde_json::to_string_pretty(&Value::Array(reports)).unwrap_or_default();
    text.push('\n');
    text
}

/// One level as one report. `position` stands in for a missing `level_index`.
fn level_report(summary: &Value, level: &Map<String, Value>, position: usize) -> Value {
    let run = &summary["run"];
    let stage = level
        .get("level_index")
        .and_then(Value::as_u64)
        .unwrap_or(position as u64);
    let text = |v: &Value| v.as_str().map(str::to_string);
    let model = text(&run["model"])
        .or_else(|| level.get("model_id").and_then(text_of))
        .unwrap_or_default();
    let engine = text(&run["engine"]).unwrap_or_else(|| "unknown".into());
    let target = text(&run["target"]).unwrap_or_default();
    let started_at = text(&run["started_at"]).unwrap_or_default();
    // One experiment: the run (its start, target, model and seed).
    let eid = id_of(&[
        "tokbench-run",
        &started_at,
        &target,
        &model,
        &run["seed"].to_string(),
    ]);
    let uid = id_of(&["tokbench-level", &eid, &stage.to_string()]);
    let concurrency = level.get("max_concurrency").and_then(Value::as_u64);
    let rate = level.get("request_rate").and_then(Value::as_f64);
    let point = match (rate, concurrency) {
        (Some(r), _) => format!("rate {r}/s"),
        (None, Some(c)) => format!("concurrency {c}"),
        (None, None) => format!("level {stage}"),
    };
    let mut run_section = Map::new();
    run_section.insert("uid".into(), json!(uid));
    run_section.insert("eid".into(), json!(eid));
    // llm-d reads the description as the run's label: model, tool and point,
    // so the levels of a sweep do not collapse into one entry.
    run_section.insert(
        "description".into(),
        json!(format!(
            "{model} [tokbench {} {}, {point}]",
            text(&run["kind"]).unwrap_or_else(|| "sweep".into()),
            text(&summary["run"]["started_at"]).unwrap_or_default()
        )),
    );
    if let Some(time) = stage_time(&started_at, level) {
        run_section.insert("time".into(), time);
    }

    let component_label = engine.clone();
    json!({
        "version": BR_VERSION,
        "run": run_section,
        "scenario": {
            "stack": [stack_component(run, level, &component_label, &engine, &model, &target)],
            "load": load(summary, level, stage, rate, concurrency),
        },
        "results": results(level, &component_label),
    })
}

fn text_of(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// The server as a `generic` component: engine, version and model are
/// known; accelerator parallelism and replicas are not, and the schema's
/// `inference_engine` requires them.
fn stack_component(
    run: &Value,
    level: &Map<String, Value>,
    label: &str,
    engine: &str,
    model: &str,
    target: &str,
) -> Value {
    let version = run["engine_version"]
        .as_str()
        .unwrap_or("unknown")
        .to_string();
    let mut standardized = Map::new();
    standardized.insert("kind".into(), json!("generic"));
    standardized.insert("tool".into(), json!(engine));
    standardized.insert("tool_version".into(), json!(version));
    standardized.insert("model".into(), json!({"name": model}));
    // The GPU, where known: a --label gpu=... and the GPU probe's count.
    let mut accelerator = Map::new();
    if let Some(gpu) = run["labels"]["gpu"].as_str() {
        accelerator.insert("model".into(), json!(gpu));
    }
    if let Some(count) =
        gauge(level, "gpu_count").and_then(|g| g.get("max").and_then(Value::as_f64))
    {
        accelerator.insert("count".into(), json!(count.round() as u64));
    }
    if !accelerator.is_empty() {
        standardized.insert("accelerator".into(), Value::Object(accelerator));
    }
    json!({
        "metadata": {
            "schema_version": "0.0.1",
            "label": label,
            "cfg_id": id_of(&["tokbench-stack", engine, &version, model, target]),
        },
        "standardized": standardized,
        "native": {"config": {"target": target, "engine": engine, "engine_version": run["engine_version"]}},
    })
}

fn load(
    summary: &Value,
    level: &Map<String, Value>,
    stage: u64,
    rate: Option<f64>,
    concurrency: Option<u64>,
) -> Value {
    let run = &summary["run"];
    let sampled =
        !summary["dataset"].is_null() || matches!(run["prompt_source"].as_str(), Some("corpus"));
    let mut standardized = Map::new();
    standardized.insert("tool".into(), json!("tokbench"));
    standardized.insert(
        "tool_version".into(),
        json!(summary["tokbench_version"].as_str().unwrap_or("unknown")),
    );
    standardized.insert("parallelism".into(), json!(1));
    // Generated words or prose are "random"; passages of a corpus or a
    // dataset's prompts are "sampled".
    standardized.insert(
        "source".into(),
        json!(if sampled { "sampled" } else { "random" }),
    );
    standardized.insert("stage".into(), json!(stage));
    let ratio = run["range_ratio"].as_f64().unwrap_or(0.0);
    let measured = |key: &str| level.get(key).filter(|v| v.is_object());
    let input = if sampled {
        measured("input_len").map(seq_len_measured)
    } else {
        run["input_len"].as_u64().map(|l| seq_len(l, ratio))
    };
    standardized.insert(
        "input_seq_len".into(),
        input.unwrap_or_else(|| json!({"distribution": "other", "value": 0})),
    );
    // An output length is enforced only with ignore_eos, on an engine that has it.
    let ask = crate::engine::LengthAsk::of(
        run["engine"].as_str().unwrap_or(""),
        run["backend"].as_str().unwrap_or(""),
        run["ignore_eos"].as_bool() == Some(true),
    );
    if ask.forced() {
        if let Some(l) = run["output_len"].as_u64() {
            standardized.insert("output_seq_len".into(), seq_len(l, ratio));
        }
    }
    if let Some(prefix) = run["prefix_len"].as_u64().filter(|p| *p > 0) {
        // One prefix shared by every request of the level.
        standardized.insert(
            "prefix".into(),
            json!({
                "prefix_len": {"distribution": "fixed", "value": prefix},
                "num_groups": 1,
                "num_prefixes": 1,
                "num_users_per_group": concurrency.unwrap_or(1).max(1),
            }),
        );
    }
    if let Some(turns) = run["turns"].as_u64().filter(|t| *t > 1) {
        standardized.insert(
            "multi_turn".into(),
            json!({"enabled": true, "max_turns": {"distribution": "fixed", "value": turns}}),
        );
    }
    match (rate, concurrency) {
        (Some(r), _) if r > 0.0 => {
            standardized.insert("rate_qps".into(), json!(r));
        }
        (None, Some(c)) if c >= 1 => {
            standardized.insert("concurrency".into(), json!(c));
        }
        _ => {}
    }
    json!({
        "metadata": {
            "schema_version": "0.0.1",
            "cfg_id": id_of(&["tokbench-load", &run.to_string(), &stage.to_string()]),
        },
        "standardized": standardized,
        // tokbench's own record of the run's settings, as summary.json has it.
        "native": {"config": run},
    })
}

/// A target length, fixed or drawn uniformly from the range the requests
/// drew from (`workload::profile::len_bounds`).
fn seq_len(len: u64, ratio: f64) -> Value {
    if ratio > 0.0 {
        let (min, max) = len_bounds(u32::try_from(len).unwrap_or(u32::MAX), ratio);
        json!({
            "distribution": "uniform",
            "value": len,
            "min": min,
            "max": max,
        })
    } else {
        json!({"distribution": "fixed", "value": len})
    }
}

/// Lengths a dataset gave: what the requests had.
fn seq_len_measured(m: &Value) -> Value {
    let mut v = Map::new();
    v.insert("distribution".into(), json!("other"));
    v.insert(
        "value".into(),
        json!(m["mean"].as_f64().unwrap_or(0.0).max(0.0)),
    );
    if let Some(min) = m["min"].as_f64() {
        v.insert("min".into(), json!(min.max(0.0).round() as u64));
    }
    if let Some(max) = m["max"].as_f64() {
        v.insert("max".into(), json!(max.max(1.0).round() as u64));
    }
    Value::Object(v)
}

fn results(level: &Map<String, Value>, component_label: &str) -> Value {
    let num = |k: &str| level.get(k).and_then(Value::as_f64);
    let count = |k: &str| level.get(k).and_then(Value::as_u64).unwrap_or(0);
    let completed = count("completed");
    let failed = count("failed");
    let cancelled = count("cancelled");
    let mut requests = Map::new();
    requests.insert("total".into(), json!(completed + failed + cancelled));
    requests.insert("failures".into(), json!(failed));
    // Cut off by the user: neither a success nor a failure.
    requests.insert("incomplete".into(), json!(cancelled));
    for (key, name) in [
        ("input_tokens", "input_length"),
        ("output_tokens", "output_length"),
    ] {
        let traffic = level.get("traffic").and_then(|t| t.get(key));
        let fallback = level.get(&name.replace("_length", "_len"));
        if let Some(stats) = traffic.or(fallback).and_then(length_stats) {
            requests.insert(name.into(), stats);
        }
    }
    let mut latency = Map::new();
    for (metric, name, units) in [
        ("ttft", "time_to_first_token", "s"),
        ("tpot", "time_per_output_token", "s/token"),
        ("itl", "inter_token_latency", "s/token"),
        ("e2el", "request_latency", "s"),
    ] {
        if let Some(stats) = latency_stats(level, metric, units) {
            latency.insert(name.into(), stats);
        }
    }
    let mut throughput = Map::new();
    let rate = |mean: Option<f64>, units: &str| {
        mean.filter(|m| m.is_finite())
            .map(|m| json!({"units": units, "mean": m}))
    };
    let input_rate = match (num("total_input_tokens"), num("duration")) {
        (Some(t), Some(d)) if d > 0.0 => Some(t / d),
        _ => None,
    };
    for (name, value) in [
        (
            "output_token_rate",
            rate(num("output_throughput"), "tokens/s"),
        ),
        (
            "total_token_rate",
            rate(num("total_token_throughput"), "tokens/s"),
        ),
        ("input_token_rate", rate(input_rate, "tokens/s")),
        ("request_rate", rate(num("request_throughput"), "queries/s")),
    ] {
        if let Some(v) = value {
            throughput.insert(name.into(), v);
        }
    }
    let mut results = Map::new();
    results.insert(
        "request_performance".into(),
        json!({"aggregate": {"requests": requests, "latency": latency, "throughput": throughput}}),
    );
    if let Some(observed) = observability(level, component_label) {
        results.insert("observability".into(), observed);
    }
    Value::Object(results)
}

/// The BR's percentile names for the percentiles a level file may hold.
const PERCENTILES: &[(&str, &str)] = &[
    ("0.1", "p0p1"),
    ("1", "p1"),
    ("5", "p5"),
    ("10", "p10"),
    ("25", "p25"),
    ("50", "p50"),
    ("75", "p75"),
    ("90", "p90"),
    ("95", "p95"),
    ("99", "p99"),
    ("99.9", "p99p9"),
];

/// A latency's statistics in seconds from the level's `_ms` keys; None
/// without a mean (no samples).
fn latency_stats(level: &Map<String, Value>, metric: &str, units: &str) -> Option<Value> {
    let s = |key: String| {
        level
            .get(&key)
            .and_then(Value::as_f64)
            .map(|ms| ms / 1000.0)
    };
    let mean = s(format!("mean_{metric}_ms"))?;
    let mut stats = Map::new();
    stats.insert("units".into(), json!(units));
    stats.insert("mean".into(), json!(mean));
    if let Some(std) = s(format!("std_{metric}_ms")).filter(|v| *v >= 0.0) {
        stats.insert("stddev".into(), json!(std));
    }
    for (label, name) in PERCENTILES {
        if let Some(v) = s(format!("p{label}_{metric}_ms")) {
            stats.insert((*name).into(), json!(v));
        }
    }
    if !stats.contains_key("p50") {
        if let Some(median) = s(format!("median_{metric}_ms")) {
            stats.insert("p50".into(), json!(median));
        }
    }
    Some(Value::Object(stats))
}

/// Token lengths: `{min, mean, max}` and whatever percentiles are there.
fn length_stats(m: &Value) -> Option<Value> {
    let mean = m["mean"].as_f64()?;
    let mut stats = Map::new();
    stats.insert("units".into(), json!("count"));
    stats.insert("mean".into(), json!(mean));
    for key in ["min", "max", "p50", "p99"] {
        if let Some(v) = m[key].as_f64() {
            stats.insert(key.into(), json!(v));
        }
    }
    Some(Value::Object(stats))
}

fn gauge<'a>(level: &'a Map<String, Value>, name: &str) -> Option<&'a Map<String, Value>> {
    level.get("server")?.get(name)?.as_object()
}

/// The server's own gauges over the level (tokbench's probe), as the BR's
/// resource metrics of the one component; None without a probe.
fn observability(level: &Map<String, Value>, component_label: &str) -> Option<Value> {
    let mut aggregate = Map::new();
    for (gauge_name, name, units, scale) in [
        // vLLM reports the KV cache as a fraction; the BR wants percent.
        ("kv_cache_usage", "kv_cache_usage", "percent", 100.0),
        ("running", "running_requests", "count", 1.0),
        ("waiting", "waiting_requests", "count", 1.0),
        ("gpu_util_pct", "gpu_utilization", "percent", 1.0),
        ("gpu_mem_used_mib", "gpu_memory_usage", "MiB", 1.0),
        ("gpu_power_w", "power_consumption", "Watts", 1.0),
    ] {
        let Some(g) = gauge(level, gauge_name) else {
            continue;
        };
        let Some(mean) = g.get("mean").and_then(Value::as_f64) else {
            continue;
        };
        let mut stats = Map::new();
        stats.insert("units".into(), json!(units));
        stats.insert("mean".into(), json!(mean * scale));
        for key in ["min", "max"] {
            if let Some(v) = g.get(key).and_then(Value::as_f64) {
                stats.insert(key.into(), json!(v * scale));
            }
        }
        aggregate.insert(name.into(), Value::Object(stats));
    }
    if aggregate.is_empty() {
        return None;
    }
    Some(json!({"components": [{"component_label": component_label, "aggregate": aggregate}]}))
}

/// `run.time` of a level: the run's start plus the level's offset, and its duration.
fn stage_time(started_at: &str, level: &Map<String, Value>) -> Option<Value> {
    let run_start = super::time::parse_iso8601(started_at)?;
    let offset = level
        .get("started_at_s")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let duration = level.get("duration").and_then(Value::as_f64)?;
    if !(offset.is_finite() && offset >= 0.0 && duration.is_finite() && duration >= 0.0) {
        return None;
    }
    let start = run_start + std::time::Duration::from_secs_f64(offset);
    let end = start + std::time::Duration::from_secs_f64(duration);
    Some(json!({
        "start": super::time::iso8601(start),
        "end": super::time::iso8601(end),
        "duration": format!("PT{duration:.3}S"),
    }))
}

/// A 128-bit hex id of some strings (two FNV-1a passes): stable for the same
/// run, so a report made again from the same folder keeps its ids. Not a
/// secret and not meant to be one.
fn id_of(parts: &[&str]) -> String {
    let fnv = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for part in parts {
            for b in part.bytes().chain([0u8]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    };
    format!("{:016x}{:016x}", fnv(0), fnv(0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_are_seconds_with_the_br_percentile_names() {
        let level: Map<String, Value> = serde_json::from_value(json!({
            "mean_ttft_ms": 250.0, "std_ttft_ms": 10.0, "median_ttft_ms": 240.0,
            "p50_ttft_ms": 240.0, "p99_ttft_ms": 400.0, "p99.9_ttft_ms": 450.0, "p42_ttft_ms": 1.0,
            "mean_itl_ms": null,
        }))
        .expect("map");
        let ttft = latency_stats(&level, "ttft", "s").expect("ttft");
        assert_eq!(
            ttft,
            json!({"units": "s", "mean": 0.25, "stddev": 0.01, "p50": 0.24, "p99": 0.4, "p99p9": 0.45})
        );
        // No samples: no statistic, rather than a made-up zero.
        assert_eq!(latency_stats(&level, "itl", "s/token"), None);
    }

    #[test]
    fn lengths_follow_the_range_ratio() {
        assert_eq!(
            seq_len(100, 0.0),
            json!({"distribution": "fixed", "value": 100})
        );
        assert_eq!(
            seq_len(100, 0.5),
            json!({"distribution": "uniform", "value": 100, "min": 50, "max": 150})
        );
        // The range the requests drew from, not a wider one: both ends
        // floored, as vLLM does, floor(66.7) = 66 to floor(133.3) = 133.
        assert_eq!(
            seq_len(100, 0.333),
            json!({"distribution": "uniform", "value": 100, "min": 66, "max": 133})
        );
        // A length of 1 draws only 1 (floor(0.5) is raised to 1, floor(1.5)
        // is 1): the report once said 0 to 2.
        assert_eq!(
            seq_len(1, 0.5),
            json!({"distribution": "uniform", "value": 1, "min": 1, "max": 1})
        );
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(id_of(&["a", "b"]), id_of(&["a", "b"]));
        assert_ne!(id_of(&["a", "b"]), id_of(&["ab"]));
        assert_eq!(id_of(&["x"]).len(), 32);
    }
}
