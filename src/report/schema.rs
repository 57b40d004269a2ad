//! The result files' one definition (docs/architecture.md section 5): a
//! level file (`sweep-c{C}....json`, also each entry of `summary.json`'s
//! `levels`), `summary.json`, and one line of `requests.jsonl`.
//!
//! The recorder writes these structs and every reader (`report`, `compare`,
//! `view`, `--resume`, `--follow`) reads them, so a key is spelled once.
//! The JSON Schemas under `assets/schema/` describe the same files for
//! people who script against them.
//!
//! Keys and meanings are vLLM's where vLLM has them and never change:
//! scripts that run `jq` on older files keep working. Reading is tolerant:
//! every field is optional (`#[serde(default)]`), and keys this version does
//! not name (the latency keys, whose names follow `--percentiles`, and
//! anything a newer tokbench adds) are kept in a flattened map, so nothing
//! read is lost. Objects are written through `serde_json::Value`, whose map
//! is sorted, so key order is the alphabetical order files always had.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Number, Value};

use crate::analysis::decide::{error_rate, Figures, LevelPoint};
use crate::record::Mode;

/// The version written into `summary.json` and each level file. Files
/// without the key are version 0 (every tokbench before it was added); they
/// hold the same keys and load the same way.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The latency statistics named for each metric: `mean_`, `median_`, `std_`
/// and `p{P}_` + metric + `_ms` (one `p{P}` for each `--percentiles`).
pub(crate) const LATENCY_METRICS: [&str; 6] = ["ttft", "tpot", "itl", "e2el", "ttfb", "ttfc"];

/// One finished level: vLLM's keys with vLLM's meanings, tokbench's beside
/// them, and the run's identity, so a level file stands alone.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LevelFile {
    /// Absent in files from before it was written (version 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,

    // vLLM's keys.
    pub date: Option<String>,
    pub backend: Option<String>,
    pub model_id: Option<String>,
    pub num_prompts: Option<u64>,
    pub max_concurrency: Option<u32>,
    /// `"inf"` for a closed loop (as vLLM writes it), requests/s otherwise.
    pub request_rate: Option<Value>,
    /// Open loop only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    pub duration: Option<f64>,
    pub completed: Option<u64>,
    pub failed: Option<u64>,
    pub total_input_tokens: Option<u64>,
    pub total_output_tokens: Option<u64>,
    pub request_throughput: Option<f64>,
    pub output_throughput: Option<f64>,
    pub total_token_throughput: Option<f64>,
    /// With `--goodput` only: good requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_goodput: Option<f64>,

    // tokbench's keys.
    pub mode: Option<String>,
    #[serde(deserialize_with = "flag")]
    pub partial: bool,
    pub level_index: Option<u64>,
    pub started_at_s: Option<f64>,
    /// `--duration`: the level's dispatch window, seconds (timed levels only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_target: Option<f64>,
    /// The level's start on the wall clock, Unix seconds to the ms
    /// (`--shard` or `--start-at` runs only), to check shards started together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_unix_s: Option<f64>,
    /// `--start-at` with `--duration`: seconds this level's last answer
    /// came after the next level's scheduled start (0: drained in the gap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_overrun_s: Option<f64>,
    /// `--shard` runs only: which shard wrote the file (as `run.shard`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardSection>,
    pub series: Option<u64>,
    pub series_label: Option<String>,
    pub transition_requests: Option<u64>,
    pub throughput_rse: Option<f64>,
    /// Hand-set levels only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<bool>,
    /// Hand-set levels only: why (not) steady, a string or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady_reason: Option<Value>,
    /// Fitted runs only (`--budget`, or the default budget): why the level
    /// ended: `steady`, `count` or `budget` (partial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    pub cancelled: Option<u64>,
    pub short_outputs: Option<u64>,
    pub per_stream_tok_s: Option<f64>,
    pub stream_decode_tok_s: Option<f64>,
    /// Error class -> count.
    pub errors: Option<BTreeMap<String, u64>>,
    pub token_count_source: Option<String>,
    /// `{min, mean, max}` of the prompts' tokens.
    pub input_len: Option<Value>,
    /// `{min, mean, max}` of the answers' tokens.
    pub output_len: Option<Value>,
    /// `{p50, p99, max}`: how late the client read (null without kernel times).
    pub client_rx_lag_ms: Option<Value>,
    /// `{p50, p99, mean}` of the completed requests' connect times, ms
    /// (0 on a reused connection); absent when no request's is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<Value>,
    /// `{p50, p99, mean}` of TTFT less each request's connect time, ms;
    /// absent when no request's connect time is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_after_connect_ms: Option<Value>,
    /// `{kernel, user}`: requests timed by each receive clock.
    pub rx_clock: Option<Value>,
    pub client: Option<ClientLoad>,
    /// The probe's gauges, each `{min, mean, max}`; `{}` without a probe.
    pub server: Option<Value>,
    pub server_timings: Option<Value>,
    /// The server's own account of the level: its latency histograms and
    /// counters between the level's edges, beside the client's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_account: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_lateness: Option<Value>,
    /// `--probe-rate`: the level's probe requests, apart from its figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_timeline_s: Option<f64>,
    /// A replayed trace: its format, requests, block size, own prefix
    /// reuse, and the requests clipped to the server's context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Value>,
    /// A replayed or ramped level second by second: offered, sent,
    /// completed, failed and p99 TTFT, and `broke_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_series: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Value>,
    pub traffic: Option<Value>,

    // The run's identity.
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub profile: Option<String>,
    pub input_len_target: Option<u32>,
    pub output_len_target: Option<u32>,
    pub ignore_eos: Option<bool>,
    pub extra_body: Option<Value>,
    pub labels: Option<Map<String, Value>>,

    /// Level files only (summary.json's copies leave them out): each
    /// latency metric's HDR histogram, in microseconds at 3 significant
    /// digits, hdrhistogram's V2 format, DEFLATE, base64. Keys are the
    /// metric with its unit: `ttft_ms`, `tpot_ms`, `itl_ms`, `e2el_ms`,
    /// `ttfb_ms`, and `ttfc_ms` when some request reasoned first. What
    /// `tokbench merge` adds up (`stats::hdr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms: Option<BTreeMap<String, String>>,
    /// Level files only: every completed request's value of a per-request
    /// metric (`ttft_ms`, `tpot_ms`, `e2el_ms`, `ttfb_ms`, `ttfc_ms`), ms at
    /// microsecond resolution, for exact merges. A metric is absent when the
    /// level had more values than it keeps (`stats::hdr::EXACT_CAP`); its
    /// percentiles then came from its histogram. Inter-token gaps are never
    /// listed: their histogram is what merges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<BTreeMap<String, Vec<f64>>>,

    /// In `summary.json`'s `levels` only: the level file's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,

    /// The latency keys (`mean_ttft_ms`, `p99_tpot_ms`, ..., see
    /// [`LATENCY_METRICS`]) and any key this version does not name.
    #[serde(flatten)]
    pub stats: Map<String, Value>,
}

/// `run.merged` of a folder `tokbench merge` wrote (its `run.shard` is
/// absent): which of the run's shards it holds, so it can itself be merged
/// with the rest. Kept in `RunSection::other` (read by `merge::fields`).
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MergedFrom {
    /// How many shards it holds.
    pub merged_from: Option<u32>,
    /// The run's number of shards.
    pub count: Option<u32>,
    /// The indexes of the shards it holds.
    pub indexes: Option<Vec<u32>>,
    /// Made with `--allow-missing`: the shards it lacks.
    pub missing: Option<Vec<u32>>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One entry of a merged level's `shards`.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ShardEntry {
    pub index: u32,
    pub host: Option<String>,
    /// Completed requests of the shard's level.
    pub completed: Option<u64>,
    pub clock_offset_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_error_ms: Option<f64>,
    /// The shard's own client load (a machine's CPU does not add up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientLoad>,
}

/// A level's probe requests (`--probe-rate`): what a new user arriving
/// during the level waited for, on connections of their own.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbeSection {
    /// Probes sent in the level that came back, failed ones included.
    pub count: Option<u64>,
    pub failed: Option<u64>,
    /// How late the probes went out against their even schedule, p99.
    pub send_lateness_p99_ms: Option<f64>,
    /// From each probe's scheduled time, of the ones that succeeded.
    pub ttft: Option<ProbeLatency>,
    pub e2el: Option<ProbeLatency>,
}

/// One probe latency, ms.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbeLatency {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// TTFT only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
}

/// The client's own load over a level.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientLoad {
    pub cpu_percent: Option<f64>,
    pub loop_lag_ms_p99: Option<f64>,
}

impl LevelFile {
    /// A latency statistic by its key (`p99_ttft_ms`, `median_tpot_ms`).
    pub(crate) fn stat(&self, key: &str) -> Option<f64> {
        self.stats
            .get(key)
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite())
    }

    /// `p{P}_{metric}_ms`, e.g. `percentile("ttft", "99")`.
    pub(crate) fn percentile(&self, metric: &str, p: &str) -> Option<f64> {
        self.stat(&format!("p{p}_{metric}_ms"))
    }

    /// The figures the decision math judges the level by; a figure the file
    /// lacks is `None` (0 for the throughputs).
    pub(crate) fn figures(&self) -> Figures {
        Figures {
            output_throughput: self.output_throughput.unwrap_or(0.0),
            per_stream_tok_s: self.per_stream_tok_s.unwrap_or(0.0),
            stream_decode_tok_s: self.stream_decode_tok_s,
            p50_ttft_ms: self.stat("median_ttft_ms"),
            p99_ttft_ms: self.percentile("ttft", "99"),
            p99_tpot_ms: self.percentile("tpot", "99"),
            error_rate: error_rate(self.completed.unwrap_or(0), self.failed.unwrap_or(0)),
        }
    }

    /// The level as the decision math sees it, for `--resume` and `merge`.
    /// A level that never said its throughput or its streams is no point
    /// (not a zero one), nor is one of a mode this version does not know.
    pub(crate) fn point(&self) -> Option<LevelPoint> {
        self.output_throughput?;
        Some(LevelPoint {
            concurrency: self.max_concurrency?,
            kind: Mode::parse(self.mode_or_planned())?,
            partial: self.partial,
            figures: self.figures(),
        })
    }

    /// `"planned"` when the file does not say (files from before modes).
    pub(crate) fn mode_or_planned(&self) -> &str {
        self.mode.as_deref().unwrap_or("planned")
    }

    /// The object as written (keys sorted, as files always had them).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// `summary.json`: the run, its levels in run order, and what follows from
/// them. Rewritten atomically after every level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SummaryFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    pub tokbench_version: Option<String>,
    pub run: RunSection,
    pub traffic: Value,
    pub dataset: Value,
    pub levels: Vec<LevelFile>,
    /// Where more streams stopped paying; `null` when not found.
    pub knee: Option<Knee>,
    /// The highest level meeting the SLO; `null` when none does.
    pub capacity: Option<Capacity>,
    /// Each series, judged on its own levels.
    #[serde(deserialize_with = "entries")]
    pub series: Vec<SeriesEntry>,
    pub capacity_reason: Option<String>,
    /// The cost at capacity (`--gpu-price-per-hour`); `null` without.
    pub cost: Option<Cost>,
    /// Only the checks that fired.
    pub diagnoses: Vec<DiagnosisEntry>,
    pub rounds: Vec<Value>,
    pub warmup: Value,
    pub search: Option<SearchState>,
    pub resumed: Option<Resumed>,
    pub target_changes: Vec<TargetChange>,
    /// `tokbench tune`: the grid, each setting's server and result, and
    /// the setting to keep; absent in other runs.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub tune: Option<TuneSection>,
    /// A closed-loop plan's estimate after the warmup, and what fitting it
    /// to its budget changed; absent when no estimate was made.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub fit: Option<FitSection>,
    /// `--threshold`: each check and its verdict, judged at the run's end
    /// (a tune: one per setting); absent without thresholds.
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "entries")]
    pub thresholds: Vec<ThresholdEntry>,
    /// Keys this version does not name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// summary.json's `run`: the run's settings and identity.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSection {
    /// The server root, without credentials.
    pub target: Option<String>,
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub model: Option<String>,
    pub backend: Option<String>,
    pub profile: Option<String>,
    pub input_len: Option<u32>,
    pub output_len: Option<u32>,
    pub ignore_eos: Option<bool>,
    pub extra_body: Option<Value>,
    pub labels: Option<Map<String, Value>>,
    pub seed: Option<u64>,
    /// UTC, RFC 3339.
    pub started_at: Option<String>,
    /// UTC, RFC 3339: when the run closed its books and wrote its last
    /// summary (ran to its end, stopped or interrupted). Absent while it
    /// runs: what `view --follow` waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    pub warmup_requests: Option<u32>,
    pub prefix_len: Option<u32>,
    pub rounds: Option<u32>,
    /// `--gpus`; null when not given.
    pub gpus: Option<u32>,
    pub connect_probe_ms: Option<f64>,
    pub http_client: Option<String>,
    /// `sweep`, `rate`, `replay`, ...
    pub kind: Option<String>,
    pub turns: Option<u32>,
    pub burstiness: Option<f64>,
    /// The capacity SLOs.
    pub slo: Option<RunSlo>,
    /// `--goodput`'s SLOs; null without.
    pub goodput_slo: Option<Value>,
    /// `--shard` runs only: this process's part of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardSection>,
    /// `--duration`, seconds; absent when levels end by count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_target: Option<f64>,
    /// `--start-at`, UTC RFC 3339 with ms; absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// `--level-gap`, seconds (with `--start-at` and `--duration` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_gap_s: Option<f64>,
    /// A fitted run's budget, seconds (`--budget`, or the default one);
    /// absent for a run of fixed counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<f64>,
    /// With `budget_s`: true when the user gave no budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_default: Option<bool>,
    /// The traffic shape's keys (`range_ratio`, `prompt_source`, `corpus`,
    /// `dataset`, `save_prompts`) and any key this version does not name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `run.shard` and each level file's `shard`: which shard of how many, on
/// which host, and how far the server's clock is from this one.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardSection {
    /// 0-based.
    pub index: Option<u32>,
    pub count: Option<u32>,
    /// The load machine's host name; null when unknown.
    pub host: Option<String>,
    /// The server's wall clock minus this machine's, ms, from its HTTP
    /// `Date` header; null when unknown.
    pub clock_offset_ms: Option<f64>,
    /// Half the width of the interval `clock_offset_ms` is known to lie in
    /// (the header has whole seconds: ±500 ms unless a tick was caught).
    pub clock_offset_error_ms: Option<f64>,
}

/// `run.slo`.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSlo {
    pub ttft_p99_ms: Option<f64>,
    pub min_stream_tok_s: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    pub max_error_rate: Option<f64>,
    /// Whether the user gave the SLO (a `--slo-*` flag); false when the
    /// reading speed is the default alone. Files from before it lack it,
    /// and read as given: they were judged without the knee fallback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub given: Option<bool>,
}

impl RunSlo {
    /// The SLO a saved run was judged by (an error limit not saved is the
    /// default one).
    pub(crate) fn capacity_slo(&self) -> crate::analysis::decide::CapacitySlo {
        crate::analysis::decide::CapacitySlo {
            ttft_p99_ms: self.ttft_p99_ms,
            min_stream_tok_s: self.min_stream_tok_s,
            tpot_p99_ms: self.tpot_p99_ms,
            max_error_rate: self
                .max_error_rate
                .unwrap_or(crate::analysis::decide::DEFAULT_MAX_ERROR_RATE),
        }
    }

    /// `given`, with a file that does not say read as given (see above).
    pub(crate) fn is_given(&self) -> bool {
        self.given.unwrap_or(true)
    }
}

// Knee, capacity and cost keep their numbers as `serde_json::Number`: the
// analysis rounds them, and a whole value has always been written as an
// integer (`"share_of_peak": 1`), which an `f64` would turn into `1.0`.

/// summary.json's `knee`.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Knee {
    pub from_concurrency: Option<u32>,
    pub to_concurrency: Option<u32>,
    pub throughput_gain: Option<Number>,
    pub p99_ttft_growth: Option<Number>,
    pub reason: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// summary.json's `capacity` (and each series').
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capacity {
    pub concurrency: Option<u32>,
    pub output_throughput: Option<Number>,
    pub per_stream_tok_s: Option<Number>,
    pub stream_decode_tok_s: Option<Number>,
    pub p99_ttft_ms: Option<Number>,
    pub share_of_peak: Option<Number>,
    pub reason: Option<String>,
    /// Which rule judged it: `slo`, or `knee_fallback` where the user gave
    /// no SLO and no level reached the default reading speed. Absent in
    /// files from before it (judged by the SLO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Capacity {
    /// Whether the knee judged it alone (`rule` is `knee_fallback`).
    pub(crate) fn by_knee(&self) -> bool {
        self.rule.as_deref() == Some("knee_fallback")
    }
}

/// summary.json's `cost`.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cost {
    pub gpu_price_per_hour: Option<Number>,
    pub api_price_per_m: Option<Number>,
    pub cost_per_m_output: Option<Number>,
    pub break_even_output_tok_s: Option<Number>,
    pub break_even_utilization: Option<Number>,
    pub effective_cost_per_m: Option<Number>,
    pub verdict: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One entry of summary.json's `series`: a stretch of the run against one
/// server configuration, with the knee and capacity of its own levels.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeriesEntry {
    /// 0 first; the levels of the series carry it in `series`.
    pub index: Option<u64>,
    pub label: Option<String>,
    /// What the server said of its settings when the series began (llama.cpp's
    /// `/props`, ...); null when it said nothing.
    pub server: Value,
    pub knee: Option<Knee>,
    pub capacity: Option<Capacity>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl SeriesEntry {
    /// The `series` list of a summary read as JSON, entry by entry.
    pub(crate) fn all_of(summary: &Value) -> Vec<SeriesEntry> {
        entries(summary.get("series").cloned().unwrap_or(Value::Null)).unwrap_or_default()
    }
}

/// A finite number's value.
pub(crate) fn number(n: &Option<Number>) -> Option<f64> {
    n.as_ref()
        .and_then(Number::as_f64)
        .filter(|x| x.is_finite())
}

/// An object the analysis built, read as one of the structs above (`None`
/// for `null` or an object of other types).
pub(crate) fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Option<T> {
    if value.is_null() {
        return None;
    }
    serde_json::from_value(value).ok()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiagnosisEntry {
    pub id: String,
    pub message: String,
    pub evidence: Value,
}

/// summary.json's `fit`: the plan's estimate after the warmup, the answer
/// length when it was shortened to fit, and the planned levels skipped.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FitSection {
    /// The line said after the warmup.
    pub estimate: Option<String>,
    /// Its expected seconds for the run after the warmup.
    pub estimate_s: Option<f64>,
    /// The warmup's speed the estimate rests on.
    pub decode_tok_s: Option<f64>,
    pub ttft_ms: Option<f64>,
    /// Set only when answers were shortened to fit: asked for, then used.
    pub output_len_asked: Option<u32>,
    pub output_len: Option<u32>,
    /// Planned levels that did not run.
    #[serde(deserialize_with = "entries")]
    pub skipped: Vec<SkippedLevel>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One planned level that did not run, and why.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SkippedLevel {
    pub concurrency: Option<u32>,
    pub series: Option<u64>,
    /// `past knee` or `budget`.
    pub reason: Option<String>,
    /// The line said.
    pub line: Option<String>,
}

/// One entry of summary.json's `thresholds`: a `--threshold` and its
/// verdict (`report::thresholds`).
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThresholdEntry {
    /// As given, without spaces: `ttft_p99_ms<500@16`.
    pub expr: String,
    /// The comparison and its limit, as in `expr`.
    pub op: Option<String>,
    pub limit: Option<f64>,
    /// The figure's unit (`ms`, `tok/s`, ...; empty for a ratio).
    pub unit: Option<String>,
    /// The measured value (the worst level's for `@all`); null when none.
    pub value: Option<f64>,
    #[serde(deserialize_with = "flag")]
    pub ok: bool,
    /// The level judged (its concurrency, or its rate in a rate run);
    /// null for a run-level figure.
    pub level: Option<Value>,
    /// The series (a tune's setting) it was judged on; null for a sweep.
    pub series: Option<u64>,
    /// Why it failed; null when it passed.
    pub reason: Option<String>,
}

/// The capacity search's bounds so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchState {
    pub passing: Option<u32>,
    pub failing: Option<u32>,
    pub next: Option<u32>,
    pub done: bool,
}

/// summary.json's `tune`.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TuneSection {
    /// The server command template as given (`{name}` unfilled).
    pub serve_cmd: Option<String>,
    /// `--grid` as given (`np=1,2,4`), and `--grid-link`.
    pub grid: Vec<String>,
    pub grid_link: Vec<String>,
    /// In grid order.
    #[serde(deserialize_with = "entries")]
    pub settings: Vec<TuneSetting>,
    pub recommendation: Option<TuneRecommendation>,
    /// Whether the server's caches were reset between levels, in words.
    pub caches: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One setting of a tune: its server's life and its series' result.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TuneSetting {
    /// `np=4`: the series' label too.
    pub label: Option<String>,
    /// Each grid name's value (text, as filled into the command).
    pub values: Map<String, Value>,
    /// Its series' index (levels carry it in `series`).
    pub series: Option<u64>,
    /// `running`, `finished`, `partial` (cut short: never recommended) or `failed` (never ran).
    pub status: Option<String>,
    /// Why it is partial or failed.
    pub reason: Option<String>,
    /// Seconds from the server's start until it was ready.
    pub ready_s: Option<Number>,
    /// What the server said of its memory at this setting (Ollama's
    /// `/api/ps`, llama.cpp's `/props`, vLLM's `cache_config_info`).
    pub memory: Value,
    /// A warning about that memory, when it matters.
    pub memory_warning: Option<String>,
    /// With `--reset-cache`: what was reset between its levels, or why
    /// nothing was.
    pub caches: Option<String>,
    /// The server's log, in the run folder.
    pub log: Option<String>,
    pub capacity: Option<Capacity>,
    /// The highest output tok/s of its whole levels.
    pub peak: Option<Number>,
    pub knee: Option<Knee>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The setting to keep and why.
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TuneRecommendation {
    pub label: Option<String>,
    pub reason: Option<String>,
    /// Settings within noise of it.
    pub tie_with: Vec<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A `--resume`d run: when it first started and how many levels it kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resumed {
    pub first_started_at: Value,
    pub levels_kept: usize,
}

/// The live view's changes of concurrency, seconds into the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TargetChange {
    pub at_s: f64,
    pub concurrency: u32,
}

impl SummaryFile {
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One line of `requests.jsonl`: one finished request. Never prompt text
/// (unless `--save-prompts`), never keys. Its schema version is the run's
/// (`summary.json`'s `schema_version`).
#[serde_with::apply(Option => #[serde(deserialize_with = "lenient")])]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RequestLine {
    pub cached_tokens: Option<u64>,
    pub chunks: Option<u64>,
    pub coalesced_reads: Option<u64>,
    pub concurrency: Option<u32>,
    /// Opening the connection (TCP connect), ms: 0 on a reused keep-alive
    /// connection; absent where the client cannot tell (reqwest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
    pub end_s: Option<f64>,
    /// The error class (`http_503`, `timeout`, `cancelled`, ...), null when ok.
    pub error: Option<String>,
    pub error_message: Option<String>,
    pub finish_reason: Option<String>,
    pub id: Option<u64>,
    pub input_tokens: Option<u64>,
    pub input_tokens_reported: Option<u64>,
    pub level: Option<u64>,
    pub output_reads: Option<u64>,
    pub output_tokens: Option<u64>,
    pub output_tokens_requested: Option<u64>,
    /// `--save-prompts` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub reasoning_tokens: Option<u64>,
    pub retries: Option<u64>,
    pub rx_clock: Option<String>,
    pub rx_lag_ms_max: Option<f64>,
    pub send_lag_ms: Option<f64>,
    pub server_timings: Option<Value>,
    pub start_s: Option<f64>,
    pub token_source: Option<String>,
    pub tpot_ms: Option<f64>,
    #[serde(deserialize_with = "flag")]
    pub transition: bool,
    pub ttfb_ms: Option<f64>,
    pub ttfc_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    /// `kernel` when t0 is the kernel's send time of the request's last
    /// byte (`--tx-clock kernel`, and a stamp came back); absent otherwise,
    /// when t0 is the user-space time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_clock: Option<String>,
    /// With `tx_clock`: how far the kernel's send time moved t0 later than
    /// the user-space time, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_shift_ms: Option<f64>,
    pub turn: Option<u64>,
    /// Keys this version does not name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Reads a field the tolerant way every reader always did: a value of
/// another type is absent (`None`) rather than an error for the whole file,
/// and a count written as a whole float (`4.0`) is the count. Each struct
/// that reads so puts it on all its `Option` fields at once with
/// `#[serde_with::apply(Option => ...)]`, so a field added later reads so too.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let v = Value::deserialize(d)?;
    if let Ok(t) = serde_json::from_value::<Option<T>>(v.clone()) {
        return Ok(t);
    }
    let whole = v
        .as_f64()
        .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0 && *f < 9.0e15);
    Ok(whole.and_then(|f| serde_json::from_value::<Option<T>>(Value::from(f as u64)).ok()?))
}

/// A list read entry by entry: an entry of the wrong type (a string where an
/// object belongs) is left out instead of failing the whole file, and a
/// value that is not a list reads as none.
fn entries<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// A flag: `true` only when the file says `true`.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Value::deserialize(d)?.as_bool().unwrap_or(false))
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
