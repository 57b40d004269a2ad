//! Server-side gauges and counters, shared between the engine (writer) and the
//! `/metrics` handler (reader), rendered with vLLM's Prometheus names.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Relaxed atomics: each value is read on its own; a scrape never needs a consistent
/// snapshot across them (nor does vLLM's).
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Sequences in the batch.
    pub running: AtomicU64,
    /// Requests submitted and not yet admitted (incremented by the HTTP layer before it
    /// hands a request to the engine; decremented by the engine).
    pub waiting: AtomicU64,
    /// KV tokens reserved by running sequences.
    pub kv_used: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Sequences preempted (KV ran out, `KvPolicy::Grow`).
    pub preemptions: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found.
    pub prefix_cache_queries: AtomicU64,
    pub prefix_cache_hits: AtomicU64,
}

impl Metrics {
    /// Prometheus text exposition, vLLM's metric names and help lines.
    pub(crate) fn render(&self, model_name: &str, kv_tokens: u64) -> String {
        let label = escape_label(model_name);
        let running = self.running.load(Ordering::Relaxed);
        let waiting = self.waiting.load(Ordering::Relaxed);
        let kv_used = self.kv_used.load(Ordering::Relaxed);
        let kv_perc = if kv_tokens == 0 {
            0.0
        } else {
            (kv_used as f64 / kv_tokens as f64).clamp(0.0, 1.0)
        };
        let mut out = String::with_capacity(1500);
        let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name}{{model_name=\"{label}\"}} {value:?}");
        };
        metric(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            running as f64,
        );
        metric(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            waiting as f64,
        );
        metric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            kv_perc,
        );
        metric(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            self.preemptions.load(Ordering::Relaxed) as f64,
        );
        metric(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            self.prefix_cache_queries.load(Ordering::Relaxed) as f64,
        );
        metric(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            self.prefix_cache_hits.load(Ordering::Relaxed) as f64,
        );
        metric(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            self.prompt_tokens.load(Ordering::Relaxed) as f64,
        );
        metric(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            self.generation_tokens.load(Ordering::Relaxed) as f64,
        );
        out
    }
}

/// Escape a Prometheus label value (backslash, double quote, newline).
fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllm_names() {
        let m = Metrics::default();
        m.running.store(3, Ordering::Relaxed);
        m.waiting.store(2, Ordering::Relaxed);
        m.kv_used.store(50, Ordering::Relaxed);
        m.generation_tokens.store(1234, Ordering::Relaxed);
        let text = m.render("sim", 200);
        assert!(text.contains("vllm:num_requests_running{model_name=\"sim\"} 3.0\n"));
        assert!(text.contains("vllm:num_requests_waiting{model_name=\"sim\"} 2.0\n"));
        assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"sim\"} 0.25\n"));
        assert!(text.contains("vllm:generation_tokens_total{model_name=\"sim\"} 1234.0\n"));
        assert!(text.contains("vllm:num_preemptions_total{model_name=\"sim\"} 0.0\n"));
        assert!(text.contains("# TYPE vllm:prompt_tokens_total counter\n"));
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
