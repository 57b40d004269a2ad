//! Server-side gauges and counters, shared between the engine (writer) and the
//! `/metrics` handler (reader), rendered with vLLM's, llama.cpp's, SGLang's or TGI's
//! Prometheus names.

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
    /// Tokens per second over the engine's last [`GEN_THROUGHPUT_STEPS`] decode
    /// steps, as SGLang's scheduler logs `gen_throughput` (f64 bits; it keeps its
    /// last value while idle, as SGLang's gauge does).
    pub gen_throughput_bits: AtomicU64,
    /// Share of the prompt tokens of the last step that admitted any found in the
    /// prefix cache (f64 bits): SGLang's `cache_hit_rate`, judged per prefill batch.
    pub cache_hit_rate_bits: AtomicU64,
    /// TGI's request counters: every generation request that parsed, those that
    /// finished, and the refusals by cause (`tgi_request_failure{err=..}`).
    pub requests: AtomicU64,
    pub request_success: AtomicU64,
    pub overloaded: AtomicU64,
    pub validation_failures: AtomicU64,
    /// Seconds from arrival to admission into the batch (`tgi_request_queue_duration`).
    pub queue_duration: DurationHistogram,
    /// vLLM's per-request histograms and finished counts.
    pub requests_account: RequestAccount,
}

/// Decode steps over which `gen_throughput` is measured: SGLang's
/// `decode_log_interval` (40).
pub(crate) const GEN_THROUGHPUT_STEPS: u32 = 40;

/// Buckets of TGI's duration histograms: 35 upper bounds, from 0.0001 s times
/// 1.5 onwards (its router's `duration_buckets`), computed the same way so the
/// `le` labels print as TGI's do.
fn tgi_duration_buckets() -> Vec<f64> {
    let mut value = 0.0001;
    (0..TGI_DURATION_BUCKETS)
        .map(|_| {
            value *= 1.5;
            value
        })
        .collect()
}

const TGI_DURATION_BUCKETS: usize = 35;

/// vLLM's bucket bounds (seconds), as its `/metrics` lists them (0.32.0).
const VLLM_TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const VLLM_ITL_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// The request-phase histograms' (e2e, queue, prefill, decode, inference).
const VLLM_REQUEST_BUCKETS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A histogram of seconds over fixed bucket bounds (cumulative on render).
#[derive(Debug)]
pub(crate) struct DurationHistogram {
    bounds: Vec<f64>,
    /// Per-bucket counts (not cumulative); the last slot is past every bound.
    counts: Vec<AtomicU64>,
    /// Sum of the observations, nanoseconds.
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Default for DurationHistogram {
    /// TGI's buckets.
    fn default() -> Self {
        DurationHistogram::over(tgi_duration_buckets())
    }
}

impl DurationHistogram {
    fn over(bounds: Vec<f64>) -> Self {
        DurationHistogram {
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            bounds,
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        let slot = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// `(bound, cumulative count)` per bucket, `+Inf` last, and the sum in seconds.
    fn cumulative(&self) -> (Vec<(f64, u64)>, f64) {
        let mut total = 0u64;
        let buckets = self
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(&self.counts)
            .map(|(bound, n)| {
                total += n.load(Ordering::Relaxed);
                (bound, total)
            })
            .collect();
        (buckets, self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9)
    }
}

/// What vLLM records of each request it finished, as it records it: the
/// latency histograms of its phases and the finished requests by reason.
/// Filled from the frame times the simulator hands its connections (those
/// of the emission log) and the engine's admission time.
#[derive(Debug)]
pub(crate) struct RequestAccount {
    ttft: DurationHistogram,
    itl: DurationHistogram,
    e2e: DurationHistogram,
    queue: DurationHistogram,
    prefill: DurationHistogram,
    decode: DurationHistogram,
    inference: DurationHistogram,
    /// `finished_reason="length"`: every simulated answer ends at its
    /// token budget or at a simulated EOS, which vLLM counts as `stop`.
    finished_length: AtomicU64,
    finished_stop: AtomicU64,
    /// The client went away before the end (`finished_reason="abort"`).
    aborted: AtomicU64,
}

impl Default for RequestAccount {
    fn default() -> Self {
        let request = || DurationHistogram::over(VLLM_REQUEST_BUCKETS.to_vec());
        RequestAccount {
            ttft: DurationHistogram::over(VLLM_TTFT_BUCKETS.to_vec()),
            itl: DurationHistogram::over(VLLM_ITL_BUCKETS.to_vec()),
            e2e: request(),
            queue: request(),
            prefill: request(),
            decode: request(),
            inference: request(),
            finished_length: AtomicU64::new(0),
            finished_stop: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
        }
    }
}

/// One request's times, `CLOCK_MONOTONIC` nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestTimes<'a> {
    /// When it reached its handler.
    pub arrived_ns: u64,
    /// When the engine admitted it into the batch (None: never).
    pub admitted_ns: Option<u64>,
    /// When each frame (one token each) was handed to the connection.
    pub frames_ns: &'a [u64],
    /// It ended as planned (false: the client went away).
    pub finished: bool,
    /// It ended at a simulated EOS rather than at its token budget.
    pub stopped: bool,
}

impl RequestAccount {
    pub(crate) fn observe(&self, r: &RequestTimes<'_>) {
        let span = |from: u64, to: u64| std::time::Duration::from_nanos(to.saturating_sub(from));
        let (Some(&first), Some(&last), true) =
            (r.frames_ns.first(), r.frames_ns.last(), r.finished)
        else {
            self.aborted.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // vLLM's definitions: TTFT and e2e from arrival; queue until scheduled;
        // prefill from scheduled to the first token; decode from there to the last.
        self.ttft.observe(span(r.arrived_ns, first));
        self.e2e.observe(span(r.arrived_ns, last));
        for pair in r.frames_ns.windows(2) {
            self.itl.observe(span(pair[0], pair[1]));
        }
        if let Some(admitted) = r.admitted_ns {
            self.queue.observe(span(r.arrived_ns, admitted));
            self.prefill.observe(span(admitted, first));
            self.inference.observe(span(admitted, last));
        }
        self.decode.observe(span(first, last));
        let reason = if r.stopped {
            &self.finished_stop
        } else {
            &self.finished_length
        };
        reason.fetch_add(1, Ordering::Relaxed);
    }

    /// vLLM's text for these families, with its `engine` and `model_name`
    /// labels and floats as Python writes them.
    fn render(&self, out: &mut String, model: &str) {
        let _ = writeln!(
            out,
            "# HELP vllm:request_success_total Count of successfully processed requests.\n\
             # TYPE vllm:request_success_total counter"
        );
        for (reason, n) in [
            ("stop", &self.finished_stop),
            ("length", &self.finished_length),
            ("abort", &self.aborted),
        ] {
            let _ = writeln!(
                out,
                "vllm:request_success_total{{engine=\"0\",finished_reason=\"{reason}\",model_name=\"{model}\"}} {:?}",
                n.load(Ordering::Relaxed) as f64
            );
        }
        for (name, help, h) in [
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &self.ttft,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &self.itl,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &self.e2e,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                &self.queue,
            ),
            (
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                &self.inference,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                &self.prefill,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                &self.decode,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            let (buckets, sum) = h.cumulative();
            for (bound, n) in buckets {
                let le = if bound.is_finite() {
                    format!("{bound:?}")
                } else {
                    "+Inf".to_string()
                };
                let _ = writeln!(
                    out,
                    "{name}_bucket{{engine=\"0\",le=\"{le}\",model_name=\"{model}\"}} {:?}",
                    n as f64
                );
            }
            let labels = format!("{{engine=\"0\",model_name=\"{model}\"}}");
            let _ = writeln!(out, "{name}_count{labels} {:?}", h.count() as f64);
            let _ = writeln!(out, "{name}_sum{labels} {sum:?}");
        }
    }
}

/// An f64 kept in an `AtomicU64`'s bits.
pub(crate) fn store_f64(cell: &AtomicU64, v: f64) {
    cell.store(v.to_bits(), Ordering::Relaxed);
}

fn load_f64(cell: &AtomicU64) -> f64 {
    f64::from_bits(cell.load(Ordering::Relaxed))
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
        let mut out = exposition(&families, &labels);
        self.requests_account
            .render(&mut out, &escape_label(model_name));
        out
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

    /// Prometheus text exposition, SGLang's names and help lines (0.4.x), floats
    /// as Python writes them and the `model_name` label, as vLLM's. Its latency
    /// histograms are left out.
    pub(crate) fn render_sglang(&self, model_name: &str, kv_tokens: u64) -> String {
        let kv_used = Self::count(&self.kv_used);
        // SGLang rounds it to two places (`round(num_used / max_total, 2)`).
        let token_usage = if kv_tokens == 0 {
            0.0
        } else {
            ((kv_used as f64 / kv_tokens as f64).clamp(0.0, 1.0) * 100.0).round() / 100.0
        };
        let float = |counter: &AtomicU64| Sample::Float(Self::count(counter) as f64);
        let families = [
            Family {
                name: "sglang:prompt_tokens_total",
                kind: "counter",
                help: "Number of prefill tokens processed.",
                value: float(&self.prompt_tokens),
            },
            Family {
                name: "sglang:generation_tokens_total",
                kind: "counter",
                help: "Number of generation tokens processed.",
                value: float(&self.generation_tokens),
            },
            Family {
                name: "sglang:num_running_reqs",
                kind: "gauge",
                help: "The number of running requests",
                value: float(&self.running),
            },
            Family {
                name: "sglang:num_used_tokens",
                kind: "gauge",
                help: "The number of used tokens",
                value: float(&self.kv_used),
            },
            Family {
                name: "sglang:gen_throughput",
                kind: "gauge",
                help: "The generate throughput (token/s)",
                value: Sample::Float(load_f64(&self.gen_throughput_bits)),
            },
            Family {
                name: "sglang:num_queue_reqs",
                kind: "gauge",
                help: "The number of requests in the waiting queue",
                value: float(&self.waiting),
            },
            Family {
                name: "sglang:token_usage",
                kind: "gauge",
                help: "The token usage",
                value: Sample::Float(token_usage),
            },
            Family {
                name: "sglang:cache_hit_rate",
                kind: "gauge",
                help: "The cache hit rate",
                value: Sample::Float(load_f64(&self.cache_hit_rate_bits)),
            },
        ];
        let labels = format!("{{model_name=\"{}\"}}", escape_label(model_name));
        exposition(&families, &labels)
    }

    /// Prometheus text exposition as TGI's router writes it
    /// (`metrics-exporter-prometheus`): its names and descriptions, no labels
    /// but `err` on failures, numbers in Rust's `Display` (`0`, `12`, `0.5`), a
    /// blank line after each family. As there, a counter or histogram appears
    /// once first recorded; gauges are always there.
    pub(crate) fn render_tgi(&self, kv_tokens: u64) -> String {
        let mut out = String::with_capacity(4096);
        let family = |out: &mut String, name: &str, kind: &str, help: &str, lines: &[String]| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for line in lines {
                out.push_str(line);
                out.push('\n');
            }
            out.push('\n');
        };
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            if v > 0 {
                family(out, name, "counter", help, &[format!("{name} {v}")]);
            }
        };
        counter(
            &mut out,
            "tgi_request_count",
            "Total number of requests",
            Self::count(&self.requests),
        );
        let failures: Vec<String> = [
            ("overloaded", Self::count(&self.overloaded)),
            ("validation", Self::count(&self.validation_failures)),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(err, n)| format!("tgi_request_failure{{err=\"{err}\"}} {n}"))
        .collect();
        if !failures.is_empty() {
            // TGI describes no help for it: metrics-exporter-prometheus then
            // writes the TYPE line alone.
            let _ = writeln!(out, "# TYPE tgi_request_failure counter");
            for line in &failures {
                out.push_str(line);
                out.push('\n');
            }
            out.push('\n');
        }
        counter(
            &mut out,
            "tgi_request_success",
            "Number of successful requests",
            Self::count(&self.request_success),
        );
        let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
            family(out, name, "gauge", help, &[format!("{name} {v}")]);
        };
        gauge(
            &mut out,
            "tgi_batch_current_max_tokens",
            "Maximum tokens for the current batch",
            Self::count(&self.kv_used) as f64,
        );
        gauge(
            &mut out,
            "tgi_batch_current_size",
            "Current batch size",
            Self::count(&self.running) as f64,
        );
        gauge(
            &mut out,
            "tgi_batch_total_tokens",
            "Maximum amount of tokens in total.",
            kv_tokens as f64,
        );
        gauge(
            &mut out,
            "tgi_queue_size",
            "Current queue size",
            Self::count(&self.waiting) as f64,
        );
        let h = &self.queue_duration;
        if h.count() > 0 {
            let name = "tgi_request_queue_duration";
            let (buckets, sum) = h.cumulative();
            let mut lines: Vec<String> = buckets
                .iter()
                .map(|(bound, n)| {
                    if bound.is_finite() {
                        format!("{name}_bucket{{le=\"{bound}\"}} {n}")
                    } else {
                        format!("{name}_bucket{{le=\"+Inf\"}} {n}")
                    }
                })
                .collect();
            lines.push(format!("{name}_sum {sum}"));
            lines.push(format!("{name}_count {}", h.count()));
            family(
                &mut out,
                name,
                "histogram",
                "Time spent in the queue per request",
                &lines,
            );
        }
        out
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

    /// `# HELP` and `# TYPE` of every family in a Prometheus text, by name.
    fn heads(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| {
                let rest = l
                    .strip_prefix("# HELP ")
                    .or_else(|| l.strip_prefix("# TYPE "))?;
                let (name, what) = rest.split_once(' ')?;
                Some((name.to_owned(), format!("{}{what}", &l[..7])))
            })
            .collect()
    }

    #[test]
    fn renders_sglang_names_as_its_capture_has_them() {
        let m = Metrics::default();
        m.running.store(3, Ordering::Relaxed);
        m.waiting.store(2, Ordering::Relaxed);
        m.kv_used.store(51, Ordering::Relaxed);
        m.prompt_tokens.store(7, Ordering::Relaxed);
        m.generation_tokens.store(8, Ordering::Relaxed);
        store_f64(&m.gen_throughput_bits, 412.5);
        store_f64(&m.cache_hit_rate_bits, 0.75);
        let text = m.render_sglang("m", 200);
        for line in [
            "sglang:num_running_reqs{model_name=\"m\"} 3.0\n",
            "sglang:num_queue_reqs{model_name=\"m\"} 2.0\n",
            "sglang:num_used_tokens{model_name=\"m\"} 51.0\n",
            // 51 / 200 = 0.255, rounded to two places as SGLang does.
            "sglang:token_usage{model_name=\"m\"} 0.26\n",
            "sglang:gen_throughput{model_name=\"m\"} 412.5\n",
            "sglang:cache_hit_rate{model_name=\"m\"} 0.75\n",
            "sglang:prompt_tokens_total{model_name=\"m\"} 7.0\n",
            "sglang:generation_tokens_total{model_name=\"m\"} 8.0\n",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // Every family we write is in SGLang's own sample, with its help and type.
        let capture = std::fs::read_to_string(format!(
            "{}/tests/fixtures/captures/sglang/sglang_0.4.x_metrics_docs_sample.prom",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let theirs = heads(&capture);
        let ours = heads(&text);
        assert_eq!(ours.len(), 16, "{ours:?}");
        for head in &ours {
            assert!(theirs.contains(head), "{head:?} is not SGLang's");
        }
    }

    #[test]
    fn renders_tgi_names_as_its_router_writes_them() {
        let m = Metrics::default();
        // Before any request: the gauges only.
        assert_eq!(
            m.render_tgi(4096),
            "# HELP tgi_batch_current_max_tokens Maximum tokens for the current batch\n\
             # TYPE tgi_batch_current_max_tokens gauge\n\
             tgi_batch_current_max_tokens 0\n\n\
             # HELP tgi_batch_current_size Current batch size\n\
             # TYPE tgi_batch_current_size gauge\n\
             tgi_batch_current_size 0\n\n\
             # HELP tgi_batch_total_tokens Maximum amount of tokens in total.\n\
             # TYPE tgi_batch_total_tokens gauge\n\
             tgi_batch_total_tokens 4096\n\n\
             # HELP tgi_queue_size Current queue size\n\
             # TYPE tgi_queue_size gauge\n\
             tgi_queue_size 0\n\n"
        );
        m.requests.store(5, Ordering::Relaxed);
        m.request_success.store(2, Ordering::Relaxed);
        m.overloaded.store(3, Ordering::Relaxed);
        m.running.store(2, Ordering::Relaxed);
        m.waiting.store(1, Ordering::Relaxed);
        m.kv_used.store(300, Ordering::Relaxed);
        // Bucket k's bound is 1e-4 * 1.5^(k+1): 0.2 ms falls in bucket 1
        // (0.00015 < 0.0002 <= 0.000225), 1 s in bucket 22 (1.5^22 * 1e-4 =
        // 0.7482 < 1 <= 1.5^23 * 1e-4 = 1.1223).
        m.queue_duration
            .observe(std::time::Duration::from_micros(200));
        m.queue_duration.observe(std::time::Duration::from_secs(1));
        let text = m.render_tgi(4096);
        for line in [
            "# HELP tgi_request_count Total number of requests\n# TYPE tgi_request_count counter\ntgi_request_count 5\n\n",
            "# TYPE tgi_request_failure counter\ntgi_request_failure{err=\"overloaded\"} 3\n\n",
            "tgi_request_success 2\n",
            "tgi_batch_current_size 2\n",
            "tgi_batch_current_max_tokens 300\n",
            "tgi_queue_size 1\n",
            "# TYPE tgi_request_queue_duration histogram\n",
            "tgi_request_queue_duration_sum 1.0002\n",
            "tgi_request_queue_duration_count 2\n",
            "tgi_request_queue_duration_bucket{le=\"+Inf\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(!text.contains("validation"), "{text}");
        let buckets: Vec<(f64, u64)> = text
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("tgi_request_queue_duration_bucket{le=\"")?;
                let (le, n) = rest.split_once("\"} ")?;
                // Rust would read `+Inf` as a float too.
                (le != "+Inf").then_some(())?;
                Some((le.parse().ok()?, n.parse().ok()?))
            })
            .collect();
        assert_eq!(buckets.len(), 35);
        assert!((buckets[0].0 - 0.00015).abs() < 1e-12);
        let counts: Vec<u64> = buckets.iter().map(|b| b.1).collect();
        assert_eq!(counts[0], 0);
        assert_eq!(&counts[1..22], &[1; 21][..]);
        assert_eq!(&counts[22..], &[2; 13][..]);
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
