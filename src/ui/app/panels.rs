//! What the counters, latency and cost panels show, as plain values.

use std::collections::BTreeMap;

use crate::analysis::cost::Cost;

use super::one_line;

/// Request outcomes over the whole run (warmup excluded).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub ok: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// `ErrorClass::key()` -> count.
    pub by_class: BTreeMap<String, u64>,
    /// `class: message` of the latest failure, one line.
    pub last_error: Option<String>,
}

impl Counters {
    pub(crate) fn class(&self, key: &str) -> u64 {
        self.by_class.get(key).copied().unwrap_or(0)
    }

    /// Failures in classes that have no column of their own.
    pub(crate) fn other(&self) -> u64 {
        self.by_class
            .iter()
            .filter(|(k, _)| !OWN_COLUMN.contains(&k.as_str()))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Failure classes the counters show by name; the rest are summed as "other".
pub(crate) const OWN_COLUMN: [&str; 5] = [
    "http_503",
    "http_429",
    "timeout",
    "stalled",
    "connection_closed",
];

/// One second of the sparklines: p99 of TTFT and ITL among the requests
/// that finished in that second, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SparkPoint {
    pub second: u64,
    pub ttft_p99_us: Option<u64>,
    pub itl_p99_us: Option<u64>,
    /// The concurrency target changed during this second.
    pub marker: bool,
    /// Requests queued inside the server this second (vLLM waiting,
    /// llama.cpp deferred), from the probe.
    pub server_queue: Option<u64>,
    /// Requests sent that had no first token yet (the client's view of the
    /// queue), mean over the frames of this second.
    pub waiting: Option<u64>,
    /// Of the waiting, those the server runs (in prefill), mean over the
    /// frames of this second, where the server counts what it runs.
    pub in_prefill: Option<u64>,
}

/// The latency panels: the per-second series and the window-wide quantiles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latency {
    pub points: Vec<SparkPoint>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
}

/// The cost at capacity in figures (issue 5 item 3): what the result panel
/// shows at a glance. Any figure may be missing (no API price, no
/// throughput); the verdict sentence is then what is left to say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostView {
    pub gpu_price_per_hour: Option<f64>,
    pub api_price_per_m: Option<f64>,
    /// Dollars per million output tokens at capacity, at full use.
    pub cost_per_m: Option<f64>,
    /// At the utilization given (`--utilization`): (dollars per million, utilization).
    pub effective: Option<(f64, f64)>,
    /// Output tok/s at which the GPU costs what the API does.
    pub break_even_tok_s: Option<f64>,
    /// `break_even_tok_s` / capacity throughput (over 1: not reachable).
    pub break_even_utilization: Option<f64>,
    /// The analysis's sentence.
    pub verdict: String,
}

impl CostView {
    pub(crate) fn from_cost(c: &Cost) -> CostView {
        CostView {
            gpu_price_per_hour: Some(c.gpu_price_per_hour).filter(|p| p.is_finite() && *p > 0.0),
            api_price_per_m: c.api_price_per_m.filter(|p| p.is_finite() && *p > 0.0),
            cost_per_m: c.cost_per_m_output,
            effective: c.effective_cost_per_m.zip(c.utilization),
            break_even_tok_s: c.break_even_output_tok_s,
            break_even_utilization: c.break_even_utilization,
            verdict: one_line(&c.verdict),
        }
    }
}
