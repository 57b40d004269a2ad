//! Server-side gauges and counters, shared between the engine (writer) and the
//! `/metrics` handler (reader), rendered with vLLM's or llama.cpp's Prometheus names.

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
    /// `POST /reset_prefix_cache` answered so far; the engine empties its
    /// prefix cache at its next step boundary when this moved (not exported).
    pub cache_resets: AtomicU64,
}

impl Metrics {
    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Prometheus text exposition, vLLM's metric names and help lines.
    pub(crate) fn render(&self, model_name: &str, kv_tokens: u64) -> String {
        let kv_used = Self::count(&self.kv_used);
        let kv_perc = if kv_tokens == 0 {
            0.0
        } else {
            (kv_used as f64 / kv_tokens as f64).clamp(0.0, 1.0)
        };
        // vLLM writes every sample as a float, counts too (`3.0`).
        let float = |counter: &AtomicU64| Sample::Float(Self::count(counter) as f64);
        let families = [
            Family {
                name: "vllm:num_requests_running",
                kind: "gauge",
                help: "Number of requests in model execution batches.",
                value: float(&self.running),
            },
            Family {
                name: "vllm:num_requests_waiting",
                kind: "gauge",
                help: "Number of requests waiting to be processed.",
                value: float(&self.waiting),
            },
            Family {
                name: "vllm:kv_cache_usage_perc",
                kind: "gauge",
                help: "KV-cache usage. 1 means 100 percent usage.",
                value: Sample::Float(kv_perc),
            },
            Family {
                name: "vllm:num_preemptions_total",
                kind: "counter",
                help: "Cumulative number of preemption from the engine.",
                value: float(&self.preemptions),
            },
            Family {
                name: "vllm:prefix_cache_queries_total",
                kind: "counter",
                help: "Prefix cache queries, in terms of number of queried tokens.",
                value: float(&self.prefix_cache_queries),
            },
            Family {
                name: "vllm:prefix_cache_hits_total",
                kind: "counter",
                help: "Prefix cache hits, in terms of number of cached tokens.",
                value: float(&self.prefix_cache_hits),
            },
            Family {
                name: "vllm:prompt_tokens_total",
                kind: "counter",
                help: "Number of prefill tokens processed.",
                value: float(&self.prompt_tokens),
            },
            Family {
                name: "vllm:generation_tokens_total",
                kind: "counter",
                help: "Number of generation tokens processed.",
                value: float(&self.generation_tokens),
            },
        ];
        let labels = format!("{{model_name=\"{}\"}}", escape_label(model_name));
        exposition(&families, &labels)
    }

    /// Prometheus text exposition, llama.cpp's names and help lines
    /// (integers, as it writes them, and no labels).
    pub(crate) fn render_llamacpp(&self) -> String {
        let whole = |counter: &AtomicU64| Sample::Whole(Self::count(counter));
        let families = [
            Family {
                name: "llamacpp:prompt_tokens_total",
                kind: "counter",
                help: "Number of prompt tokens processed, excluding cached tokens",
                value: whole(&self.prompt_tokens),
            },
            Family {
                name: "llamacpp:tokens_predicted_total",
                kind: "counter",
                help: "Number of generation tokens processed",
                value: whole(&self.generation_tokens),
            },
            Family {
                name: "llamacpp:requests_processing",
                kind: "gauge",
                help: "Number of requests processing",
                value: whole(&self.running),
            },
            Family {
                name: "llamacpp:requests_deferred",
                kind: "gauge",
                help: "Number of requests deferred",
                value: whole(&self.waiting),
            },
        ];
        exposition(&families, "")
    }
}

/// One metric family with one sample, as an engine's `/metrics` lists it.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: Sample,
}

/// A sample's value, in the engine's own notation.
enum Sample {
    /// Rust's `{:?}` of an f64: `3.0`, `0.25` (vLLM, through Python's float repr).
    Float(f64),
    /// `3` (llama.cpp).
    Whole(u64),
}

/// `# HELP`, `# TYPE` and the sample of each family; `labels` is the
/// label set with its braces, or empty.
fn exposition(families: &[Family], labels: &str) -> String {
    let mut out = String::with_capacity(160 * families.len());
    for f in families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        let _ = match f.value {
            Sample::Float(v) => writeln!(out, "{}{labels} {v:?}", f.name),
            Sample::Whole(v) => writeln!(out, "{}{labels} {v}", f.name),
        };
    }
    out
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
        assert!(text.contains(
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
             # TYPE vllm:prompt_tokens_total counter\n\
             vllm:prompt_tokens_total{model_name=\"sim\"} 0.0\n"
        ));
    }

    #[test]
    fn renders_llamacpp_names_as_whole_numbers_without_labels() {
        let m = Metrics::default();
        m.prompt_tokens.store(130, Ordering::Relaxed);
        m.generation_tokens.store(64, Ordering::Relaxed);
        m.running.store(4, Ordering::Relaxed);
        m.waiting.store(1, Ordering::Relaxed);
        assert_eq!(
            m.render_llamacpp(),
            "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens\n\
             # TYPE llamacpp:prompt_tokens_total counter\n\
             llamacpp:prompt_tokens_total 130\n\
             # HELP llamacpp:tokens_predicted_total Number of generation tokens processed\n\
             # TYPE llamacpp:tokens_predicted_total counter\n\
             llamacpp:tokens_predicted_total 64\n\
             # HELP llamacpp:requests_processing Number of requests processing\n\
             # TYPE llamacpp:requests_processing gauge\n\
             llamacpp:requests_processing 4\n\
             # HELP llamacpp:requests_deferred Number of requests deferred\n\
             # TYPE llamacpp:requests_deferred gauge\n\
             llamacpp:requests_deferred 1\n"
        );
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
