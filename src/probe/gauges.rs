//! Server-side gauges, read from what each engine exposes (docs/architecture.md
//! section 3; issue "Speak every engine", item 4):
//!
//! - vLLM `/metrics`: `VllmGauges` (requests running and waiting, KV-cache
//!   usage, and the counters behind preemptions, prefix-cache hit rate and
//!   generation tok/s).
//! - llama.cpp `/metrics` (`--metrics`): `LlamacppGauges`; `/slots`:
//!   `SlotsBusy`; `/props`: its slot count.
//! - Ollama `/api/ps`: `OllamaModel`s.
//!
//! Everything here is pure: bodies in, numbers out, no clock, no I/O. Rates
//! come from two snapshots of the counters and the time between them
//! (`counter_rate`, `hit_rate`, `VllmGauges::rates`), never from an engine's
//! own per-second gauges: llama.cpp resets those on every scrape. A figure
//! the server did not send is `None`, never 0.

use std::time::Duration;

use serde_json::Value;

use super::prometheus::Metrics;

// ---------------------------------------------------------------------------
// Counters to rates.

/// How much a counter grew between two scrapes. A counter that went down was
/// reset (the server restarted): its growth is its new value, as Prometheus
/// counts it. None when either reading is missing or not finite.
pub(crate) fn counter_delta(prev: Option<f64>, cur: Option<f64>) -> Option<f64> {
    let (p, c) = (prev?, cur?);
    if !(p.is_finite() && c.is_finite()) {
        return None;
    }
    Some(if c >= p { c - p } else { c.max(0.0) })
}

/// A counter's growth per second between two scrapes `dt` apart. None
/// without both readings or with `dt` zero.
pub(crate) fn counter_rate(prev: Option<f64>, cur: Option<f64>, dt: Duration) -> Option<f64> {
    let secs = dt.as_secs_f64();
    if secs <= 0.0 {
        return None;
    }
    Some(counter_delta(prev, cur)? / secs)
}

/// Hits over queries between two scrapes (vLLM's prefix cache counts both in
/// tokens), in 0..=1. None when there were no queries in between.
pub(crate) fn hit_rate(
    prev_hits: Option<f64>,
    cur_hits: Option<f64>,
    prev_queries: Option<f64>,
    cur_queries: Option<f64>,
) -> Option<f64> {
    let queries = counter_delta(prev_queries, cur_queries)?;
    if queries <= 0.0 {
        return None;
    }
    let hits = counter_delta(prev_hits, cur_hits)?;
    Some((hits / queries).clamp(0.0, 1.0))
}

// ---------------------------------------------------------------------------
// vLLM.

/// One scrape of vLLM's `/metrics`. Values are summed over label sets
/// (`model_name`, and `engine` under data parallelism), except KV-cache
/// usage, which is the fullest engine's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct VllmGauges {
    /// `vllm:num_requests_running`.
    pub running: Option<f64>,
    /// `vllm:num_requests_waiting`.
    pub waiting: Option<f64>,
    /// `vllm:kv_cache_usage_perc`, else the older `vllm:gpu_cache_usage_perc`.
    /// A fraction: 1.0 is full.
    pub kv_cache_usage: Option<f64>,
    /// `vllm:num_preemptions_total` (counter).
    pub preemptions_total: Option<f64>,
    /// `vllm:prefix_cache_queries_total` (counter, tokens), else the older
    /// `vllm:gpu_prefix_cache_queries_total`.
    pub prefix_cache_queries_total: Option<f64>,
    /// `vllm:prefix_cache_hits_total` (counter, tokens), else the older
    /// `vllm:gpu_prefix_cache_hits_total`.
    pub prefix_cache_hits_total: Option<f64>,
    /// `vllm:generation_tokens_total` (counter).
    pub generation_tokens_total: Option<f64>,
}

/// What two vLLM scrapes say together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct VllmRates {
    /// Output tokens per second, all requests together.
    pub generation_tok_s: Option<f64>,
    /// Prefix-cache hits over queries, 0..=1; None when nothing was queried.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Preemptions between the scrapes.
    pub preemptions: Option<f64>,
}

impl VllmGauges {
    /// The vLLM gauges of a scrape; None when it has no `vllm:` metric at
    /// all (not a vLLM server).
    pub(crate) fn from_metrics(m: &Metrics) -> Option<VllmGauges> {
        if !m.has_prefix("vllm:") {
            return None;
        }
        let first = |a: &str, b: &str| m.sum(a).or_else(|| m.sum(b));
        Some(VllmGauges {
            running: m.sum("vllm:num_requests_running"),
            waiting: m.sum("vllm:num_requests_waiting"),
            kv_cache_usage: m
                .max("vllm:kv_cache_usage_perc")
                .or_else(|| m.max("vllm:gpu_cache_usage_perc")),
            preemptions_total: m.sum("vllm:num_preemptions_total"),
            prefix_cache_queries_total: first(
                "vllm:prefix_cache_queries_total",
                "vllm:gpu_prefix_cache_queries_total",
            ),
            prefix_cache_hits_total: first(
                "vllm:prefix_cache_hits_total",
                "vllm:gpu_prefix_cache_hits_total",
            ),
            generation_tokens_total: m.sum("vllm:generation_tokens_total"),
        })
    }

    /// Rates from the scrape `dt` before this one (`prev`) to this one.
    pub(crate) fn rates(&self, prev: &VllmGauges, dt: Duration) -> VllmRates {
        VllmRates {
            generation_tok_s: counter_rate(
                prev.generation_tokens_total,
                self.generation_tokens_total,
                dt,
            ),
            prefix_cache_hit_rate: hit_rate(
                prev.prefix_cache_hits_total,
                self.prefix_cache_hits_total,
                prev.prefix_cache_queries_total,
                self.prefix_cache_queries_total,
            ),
            preemptions: counter_delta(prev.preemptions_total, self.preemptions_total),
        }
    }
}

// ---------------------------------------------------------------------------
// llama.cpp.

/// One scrape of `llama-server --metrics`. Its per-second gauges
/// (`predicted_tokens_seconds`, ...) reset on every scrape and are not read;
/// rates come from the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LlamacppGauges {
    /// `llamacpp:requests_processing`: requests holding a slot.
    pub requests_processing: Option<f64>,
    /// `llamacpp:requests_deferred`: requests waiting for a slot.
    pub requests_deferred: Option<f64>,
    /// `llamacpp:tokens_predicted_total` (counter).
    pub tokens_predicted_total: Option<f64>,
    /// `llamacpp:prompt_tokens_total` (counter; cached prompt tokens excluded).
    pub prompt_tokens_total: Option<f64>,
}

/// What two llama.cpp scrapes say together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct LlamacppRates {
    /// Output tokens per second, all slots together.
    pub generation_tok_s: Option<f64>,
    /// Prompt tokens processed per second (prefill).
    pub prompt_tok_s: Option<f64>,
}

impl LlamacppGauges {
    /// The llama.cpp gauges of a scrape; None when it has no `llamacpp:`
    /// metric at all.
    pub fn from_metrics(m: &Metrics) -> Option<LlamacppGauges> {
        if !m.has_prefix("llamacpp:") {
            return None;
        }
        Some(LlamacppGauges {
            requests_processing: m.sum("llamacpp:requests_processing"),
            requests_deferred: m.sum("llamacpp:requests_deferred"),
            tokens_predicted_total: m.sum("llamacpp:tokens_predicted_total"),
            prompt_tokens_total: m.sum("llamacpp:prompt_tokens_total"),
        })
    }

    /// Rates from the scrape `dt` before this one (`prev`) to this one.
    pub(crate) fn rates(&self, prev: &LlamacppGauges, dt: Duration) -> LlamacppRates {
        LlamacppRates {
            generation_tok_s: counter_rate(
                prev.tokens_predicted_total,
                self.tokens_predicted_total,
                dt,
            ),
            prompt_tok_s: counter_rate(prev.prompt_tokens_total, self.prompt_tokens_total, dt),
        }
    }
}

/// llama.cpp `/slots`: how many slots are busy, of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotsBusy {
    pub busy: u32,
    pub total: u32,
    /// The smallest slot's context, tokens (`n_ctx`), where the slots say.
    pub context: Option<u64>,
}

/// Read a `/slots` body: an array with one object per slot, busy when
/// `is_processing` is true (older builds: `state` other than 0). None when
/// the body is not such an array (slots endpoint disabled: an error object).
pub fn llamacpp_slots(body: &[u8]) -> Option<SlotsBusy> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let slots = v.as_array()?;
    let mut busy = 0u32;
    let mut total = 0u32;
    let mut context: Option<u64> = None;
    for slot in slots {
        let Some(slot) = slot.as_object() else {
            continue;
        };
        total = total.saturating_add(1);
        if let Some(n) = slot.get("n_ctx").and_then(Value::as_u64).filter(|n| *n > 0) {
            context = Some(context.map_or(n, |c| c.min(n)));
        }
        let processing = match slot.get("is_processing").and_then(Value::as_bool) {
            Some(p) => p,
            None => slot
                .get("state")
                .and_then(Value::as_f64)
                .is_some_and(|s| s != 0.0),
        };
        if processing {
            busy = busy.saturating_add(1);
        }
    }
    Some(SlotsBusy {
        busy,
        total,
        context,
    })
}

/// `/props`' `total_slots` (`-np`): how many requests llama.cpp decodes at
/// once. None when the body has no such whole number (not llama.cpp, or a
/// build that does not say).
pub fn llamacpp_total_slots(props: &Value) -> Option<u32> {
    props.get("total_slots").and_then(as_u32)
}

// ---------------------------------------------------------------------------
// SGLang.

/// One scrape of SGLang's `/metrics` (`sglang:` names), summed over label
/// sets (`model_name`, and a data-parallel rank where there is one) except
/// KV use, the fullest rank's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SglangGauges {
    /// `sglang:num_running_reqs`.
    pub running: Option<f64>,
    /// `sglang:num_queue_reqs`: waiting to be scheduled.
    pub waiting: Option<f64>,
    /// `sglang:token_usage`: the share of the KV pool in use, 0..=1.
    pub kv_cache_usage: Option<f64>,
    /// `sglang:cache_hit_rate`: SGLang's own (recent) prefix-cache hit rate.
    pub cache_hit_rate: Option<f64>,
    /// `sglang:gen_throughput`: SGLang's own decode tok/s of its last log
    /// interval; only used where the counter is missing.
    pub gen_throughput: Option<f64>,
    /// `sglang:prompt_tokens_total`, `sglang:cached_tokens_total` (counters,
    /// tokens): the prefix cache's hit rate between two scrapes.
    pub prompt_tokens_total: Option<f64>,
    pub cached_tokens_total: Option<f64>,
    /// `sglang:generation_tokens_total` (counter).
    pub generation_tokens_total: Option<f64>,
    /// Disaggregated serving: requests queued on the prefill side
    /// (`num_prefill_prealloc_queue_reqs` + `num_prefill_inflight_queue_reqs`)
    /// and on the decode side (`num_decode_prealloc_queue_reqs` +
    /// `num_decode_transfer_queue_reqs`). None on a unified server.
    pub prefill_queue: Option<f64>,
    pub decode_queue: Option<f64>,
    /// Speculative decoding: `sglang:spec_accept_length` (mean tokens per
    /// step) and `sglang:spec_accept_rate` (accepted over draft tokens).
    pub spec_accept_length: Option<f64>,
    pub spec_accept_rate: Option<f64>,
}

/// What two SGLang scrapes say together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SglangRates {
    pub generation_tok_s: Option<f64>,
    pub prefix_cache_hit_rate: Option<f64>,
}

impl SglangGauges {
    /// None when the scrape has no `sglang:` metric (not an SGLang server).
    pub(crate) fn from_metrics(m: &Metrics) -> Option<SglangGauges> {
        if !m.has_prefix("sglang:") {
            return None;
        }
        let both = |a: &str, b: &str| match (m.sum(a), m.sum(b)) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        };
        Some(SglangGauges {
            running: m.sum("sglang:num_running_reqs"),
            waiting: m.sum("sglang:num_queue_reqs"),
            kv_cache_usage: m.max("sglang:token_usage"),
            cache_hit_rate: m.max("sglang:cache_hit_rate"),
            gen_throughput: m.sum("sglang:gen_throughput"),
            prompt_tokens_total: m.sum("sglang:prompt_tokens_total"),
            cached_tokens_total: m.sum("sglang:cached_tokens_total"),
            generation_tokens_total: m.sum("sglang:generation_tokens_total"),
            prefill_queue: both(
                "sglang:num_prefill_prealloc_queue_reqs",
                "sglang:num_prefill_inflight_queue_reqs",
            ),
            decode_queue: both(
                "sglang:num_decode_prealloc_queue_reqs",
                "sglang:num_decode_transfer_queue_reqs",
            ),
            spec_accept_length: m.max("sglang:spec_accept_length"),
            spec_accept_rate: m.max("sglang:spec_accept_rate"),
        })
    }

    /// Rates from the scrape `dt` before (`prev`): from the counters where
    /// the server has them, else SGLang's own gauges.
    pub(crate) fn rates(&self, prev: &SglangGauges, dt: Duration) -> SglangRates {
        SglangRates {
            generation_tok_s: counter_rate(
                prev.generation_tokens_total,
                self.generation_tokens_total,
                dt,
            )
            .or(self.gen_throughput),
            prefix_cache_hit_rate: hit_rate(
                prev.cached_tokens_total,
                self.cached_tokens_total,
                prev.prompt_tokens_total,
                self.prompt_tokens_total,
            )
            .or(self.cache_hit_rate),
        }
    }
}

// ---------------------------------------------------------------------------
// TGI.

/// One scrape of text-generation-inference's `/metrics` (`tgi_` names).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TgiGauges {
    /// `tgi_batch_current_size`: requests in the running batch.
    pub running: Option<f64>,
    /// `tgi_queue_size`: requests waiting for the batch.
    pub waiting: Option<f64>,
    /// `tgi_batch_current_max_tokens`: the token budget the running batch
    /// holds (its KV), against `--max-batch-total-tokens`.
    pub batch_tokens: Option<f64>,
    /// `tgi_batch_total_tokens`: that budget, `--max-batch-total-tokens`.
    pub batch_total_tokens: Option<f64>,
    /// `tgi_request_count` (counter): requests received.
    pub requests_total: Option<f64>,
}

impl TgiGauges {
    /// The share of its token budget the running batch holds: TGI books
    /// each request's prompt and its whole `max_new_tokens` when it joins,
    /// so this is its KV in use as TGI counts it.
    pub(crate) fn kv_cache_usage(&self) -> Option<f64> {
        match (self.batch_tokens, self.batch_total_tokens) {
            (Some(used), Some(total)) if total > 0.0 => Some((used / total).clamp(0.0, 1.0)),
            _ => None,
        }
    }

    /// None when the scrape has no `tgi_` metric (not a TGI server).
    pub(crate) fn from_metrics(m: &Metrics) -> Option<TgiGauges> {
        if !m.has_prefix("tgi_") {
            return None;
        }
        Some(TgiGauges {
            running: m.sum("tgi_batch_current_size"),
            waiting: m.sum("tgi_queue_size"),
            batch_tokens: m.sum("tgi_batch_current_max_tokens"),
            batch_total_tokens: m.sum("tgi_batch_total_tokens"),
            requests_total: m
                .sum("tgi_request_count")
                .or_else(|| m.sum("tgi_request_count_total")),
        })
    }
}

// ---------------------------------------------------------------------------
// Ollama.

/// One model Ollama holds in memory (`/api/ps`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OllamaModel {
    /// `name` (else `model`), e.g. `llama3.1:8b`.
    pub name: String,
    /// Bytes the loaded model takes in all.
    pub size: u64,
    /// Of which in GPU memory.
    pub size_vram: u64,
    /// Context length it was loaded with (newer Ollama only).
    pub context_length: Option<u64>,
    /// When Ollama unloads it if idle, as Ollama wrote it (RFC 3339).
    pub expires_at: Option<String>,
}

impl OllamaModel {
    /// Share of the model in GPU memory, `size_vram / size`, in 0..=1. Below
    /// 1 means part of it runs from system memory on the CPU. None when
    /// `size` is 0.
    pub fn gpu_share(&self) -> Option<f64> {
        (self.size > 0).then(|| (self.size_vram as f64 / self.size as f64).clamp(0.0, 1.0))
    }
}

/// Read an `/api/ps` body: `{"models":[{name, size, size_vram, ...}]}`. An
/// entry without a name is left out. None when the body is not that shape.
pub fn ollama_ps(body: &[u8]) -> Option<Vec<OllamaModel>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let models = v.get("models")?.as_array()?;
    Some(
        models
            .iter()
            .filter_map(|m| {
                let name = m
                    .get("name")
                    .and_then(nonblank)
                    .or_else(|| m.get("model").and_then(nonblank))?;
                Some(OllamaModel {
                    name,
                    size: m.get("size").and_then(as_u64).unwrap_or(0),
                    size_vram: m.get("size_vram").and_then(as_u64).unwrap_or(0),
                    context_length: m.get("context_length").and_then(as_u64),
                    expires_at: m.get("expires_at").and_then(nonblank),
                })
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// JSON leaves.

/// A non-negative whole number (also written as a float, `4096.0`).
fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0)
            .map(|f| f.min(u64::MAX as f64) as u64)
    })
}

fn as_u32(v: &Value) -> Option<u32> {
    as_u64(v).and_then(|n| u32::try_from(n).ok())
}

fn nonblank(v: &Value) -> Option<String> {
    v.as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::prometheus::{parse, parse_bytes, MetricType};

    /// SGLang's documented `/metrics` sample (a public capture, see its
    /// `.source.txt`): every gauge the probe reads is found by its name.
    #[test]
    fn sglang_gauges_from_its_documented_sample() {
        let raw = include_bytes!(
            "../../tests/fixtures/captures/sglang/sglang_0.4.x_metrics_docs_sample.prom"
        );
        let g = SglangGauges::from_metrics(&parse_bytes(raw)).expect("sglang: names");
        assert_eq!(g.running, Some(0.0));
        assert_eq!(g.waiting, Some(0.0));
        assert_eq!(g.kv_cache_usage, Some(0.0));
        assert_eq!(g.cache_hit_rate, Some(0.0));
        assert_eq!(g.prompt_tokens_total, Some(7.0));
        assert_eq!(g.generation_tokens_total, Some(8.0));
        // 0.4.x has no cached-token counter and serves unified.
        assert_eq!(g.cached_tokens_total, None);
        assert_eq!((g.prefill_queue, g.decode_queue), (None, None));
        // Not vLLM's, not TGI's.
        assert_eq!(VllmGauges::from_metrics(&parse_bytes(raw)), None);
        assert_eq!(TgiGauges::from_metrics(&parse_bytes(raw)), None);
    }

    /// Two scrapes 2 s apart, worked by hand: 500 tokens generated = 250
    /// tok/s; 300 of 600 new prompt tokens cached = 50%; a disaggregated
    /// server's queues summed by side (2 + 1 prefill, 4 + 0 decode); KV use
    /// is the fuller rank's.
    #[test]
    fn sglang_rates_and_split_queues_worked_by_hand() {
        let first = parse(
            "sglang:generation_tokens_total{model_name=\"m\"} 8\n\
             sglang:prompt_tokens_total{model_name=\"m\"} 1000\n\
             sglang:cached_tokens_total{model_name=\"m\"} 200\n\
             sglang:gen_throughput{model_name=\"m\"} 999\n",
        );
        let second = parse(
            "sglang:generation_tokens_total{model_name=\"m\"} 508\n\
             sglang:prompt_tokens_total{model_name=\"m\"} 1600\n\
             sglang:cached_tokens_total{model_name=\"m\"} 500\n\
             sglang:token_usage{model_name=\"m\",dp_rank=\"0\"} 0.25\n\
             sglang:token_usage{model_name=\"m\",dp_rank=\"1\"} 0.75\n\
             sglang:num_prefill_prealloc_queue_reqs{model_name=\"m\"} 2\n\
             sglang:num_prefill_inflight_queue_reqs{model_name=\"m\"} 1\n\
             sglang:num_decode_prealloc_queue_reqs{model_name=\"m\"} 4\n",
        );
        let a = SglangGauges::from_metrics(&first).expect("a");
        let b = SglangGauges::from_metrics(&second).expect("b");
        let r = b.rates(&a, Duration::from_secs(2));
        assert_eq!(r.generation_tok_s, Some(250.0));
        assert_eq!(r.prefix_cache_hit_rate, Some(0.5));
        assert_eq!(b.kv_cache_usage, Some(0.75));
        assert_eq!(b.prefill_queue, Some(3.0));
        assert_eq!(b.decode_queue, Some(4.0));
        // Without the counters, SGLang's own gauge stands in.
        let own = SglangGauges {
            gen_throughput: Some(42.0),
            ..SglangGauges::default()
        };
        assert_eq!(
            own.rates(&SglangGauges::default(), Duration::from_secs(1))
                .generation_tok_s,
            Some(42.0)
        );
    }

    /// TGI's names as its router writes them (documented in TGI's
    /// "Metrics" reference): batch size is running, queue size waiting.
    #[test]
    fn tgi_gauges_by_their_names() {
        let m = parse(
            "# TYPE tgi_queue_size gauge\ntgi_queue_size 5\n\
             # TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 8\n\
             # TYPE tgi_batch_current_max_tokens gauge\ntgi_batch_current_max_tokens 2048\n\
             # TYPE tgi_batch_total_tokens gauge\ntgi_batch_total_tokens 16384\n\
             # TYPE tgi_request_count counter\ntgi_request_count 253\n",
        );
        let g = TgiGauges::from_metrics(&m).expect("tgi_ names");
        assert_eq!(
            g,
            TgiGauges {
                running: Some(8.0),
                waiting: Some(5.0),
                batch_tokens: Some(2048.0),
                batch_total_tokens: Some(16384.0),
                requests_total: Some(253.0),
            }
        );
        // 2048 of 16384 tokens booked: 12.5% of its budget.
        assert_eq!(g.kv_cache_usage(), Some(0.125));
        assert_eq!(SglangGauges::from_metrics(&m), None);
    }

    macro_rules! fixture {
        ($path:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/",
                $path
            ))
            .as_slice()
        };
    }

    const SECOND: Duration = Duration::from_secs(1);

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    // -----------------------------------------------------------------------
    // llama-server captures.

    #[test]
    fn llama_server_metrics_capture() {
        // 15 sample lines, each after its HELP and TYPE; no labels.
        let m = parse_bytes(fixture!("captures/llama-server/metrics.txt"));
        assert_eq!(m.samples.len(), 15);
        assert_eq!(m.skipped, 0);
        assert_eq!(
            m.metric_type("llamacpp:tokens_predicted_total"),
            Some(MetricType::Counter)
        );
        assert_eq!(
            m.metric_type("llamacpp:requests_deferred"),
            Some(MetricType::Gauge)
        );
        assert_eq!(m.value("llamacpp:prompt_seconds_total"), Some(0.382282));
        assert!(VllmGauges::from_metrics(&m).is_none());

        let g = LlamacppGauges::from_metrics(&m).unwrap();
        assert_eq!(
            g,
            LlamacppGauges {
                requests_processing: Some(0.0),
                requests_deferred: Some(0.0),
                tokens_predicted_total: Some(191.0),
                prompt_tokens_total: Some(68.0),
            }
        );

        // A later scrape, 2 s on: 100 more tokens predicted, 40 more prompt
        // tokens, two processing and one deferred.
        let later = parse(
            "llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n\
             llamacpp:tokens_predicted_total 291\nllamacpp:prompt_tokens_total 108\n",
        );
        let later = LlamacppGauges::from_metrics(&later).unwrap();
        assert_eq!(later.requests_deferred, Some(1.0));
        let r = later.rates(&g, 2 * SECOND);
        assert_eq!(r.generation_tok_s, Some(50.0));
        assert_eq!(r.prompt_tok_s, Some(20.0));
    }

    #[test]
    fn llama_server_slots_captures() {
        // Idle: 4 slots of 4096 tokens each, none processing. Busy: slot 3
        // processing.
        let slots = |busy, total, context| SlotsBusy {
            busy,
            total,
            context,
        };
        assert_eq!(
            llamacpp_slots(fixture!("captures/llama-server/slots.json")),
            Some(slots(0, 4, Some(4096)))
        );
        assert_eq!(
            llamacpp_slots(fixture!("captures/llama-server/slots_busy.json")),
            Some(slots(1, 4, Some(4096)))
        );
        // Older builds' `state`, without `n_ctx`; an error object when
        // slots are disabled.
        assert_eq!(
            llamacpp_slots(br#"[{"id":0,"state":1},{"id":1,"state":0},{"id":2},7]"#),
            Some(slots(1, 3, None))
        );
        // Slots of unequal context: the smallest is what a request must fit.
        assert_eq!(
            llamacpp_slots(br#"[{"id":0,"n_ctx":2048},{"id":1,"n_ctx":1024}]"#),
            Some(slots(0, 2, Some(1024)))
        );
        assert_eq!(
            llamacpp_slots(br#"{"error":{"code":501,"message":"This server does not support slots endpoint.","type":"not_supported_error"}}"#),
            None
        );
        assert_eq!(llamacpp_slots(b"not json"), None);
    }

    #[test]
    fn llama_server_props_capture() {
        let props: Value =
            serde_json::from_slice(fixture!("captures/llama-server/props.json")).unwrap();
        assert_eq!(llamacpp_total_slots(&props), Some(4));
        // Written as a float by some builds; not a count when negative or a word.
        assert_eq!(
            llamacpp_total_slots(&serde_json::json!({"total_slots": 4.0})),
            Some(4)
        );
        assert_eq!(
            llamacpp_total_slots(&serde_json::json!({"total_slots": -1})),
            None
        );
        assert_eq!(
            llamacpp_total_slots(&serde_json::json!({"total_slots": "four"})),
            None
        );
        assert_eq!(
            llamacpp_total_slots(&serde_json::json!({"version": "0.9.0"})),
            None
        );
    }

    // -----------------------------------------------------------------------
    // vLLM.

    #[test]
    fn vllm_metrics_fixture() {
        // Python and HTTP metrics around the vllm: ones; one engine, one
        // model_name; a histogram with a +Inf bucket.
        let m = parse_bytes(fixture!("vllm/metrics.txt"));
        assert_eq!(m.samples.len(), 27);
        assert_eq!(m.skipped, 0);
        assert!(LlamacppGauges::from_metrics(&m).is_none());
        assert_eq!(
            m.metric_type("vllm:time_to_first_token_seconds"),
            Some(MetricType::Histogram)
        );
        assert_eq!(
            m.value_where("vllm:time_to_first_token_seconds_bucket", &[("le", "+Inf")]),
            Some(996.0)
        );
        assert_eq!(m.sum("vllm:request_success_total"), Some(964.0));
        assert_eq!(
            m.value_where(
                "vllm:request_success_total",
                &[("finished_reason", "length")]
            ),
            Some(952.0)
        );
        let info = m.samples_named("vllm:cache_config_info").next().unwrap();
        assert_eq!(info.label("num_gpu_blocks"), Some("27893"));

        let g = VllmGauges::from_metrics(&m).unwrap();
        assert_eq!(
            g,
            VllmGauges {
                running: Some(32.0),
                waiting: Some(5.0),
                kv_cache_usage: Some(0.9312),
                preemptions_total: Some(3.0),
                prefix_cache_queries_total: Some(1_048_576.0),
                prefix_cache_hits_total: Some(131_072.0),
                generation_tokens_total: Some(987_654.0),
            }
        );

        // 2 s later: +1000 generated tokens, +4096 queried and +1024 hit
        // prefix tokens, +2 preemptions.
        let later =
            VllmGauges::from_metrics(&parse_bytes(fixture!("vllm/metrics_later.txt"))).unwrap();
        assert_eq!(later.running, Some(30.0));
        assert_eq!(later.waiting, Some(7.0));
        assert_eq!(later.kv_cache_usage, Some(0.9875));
        assert_eq!(
            later.rates(&g, 2 * SECOND),
            VllmRates {
                generation_tok_s: Some(500.0),
                prefix_cache_hit_rate: Some(0.25),
                preemptions: Some(2.0),
            }
        );
    }

    #[test]
    fn vllm_older_names_and_several_engines() {
        // Older vLLM: gpu_cache_usage_perc and gpu_prefix_cache_*; two
        // data-parallel engines: counts add up, KV usage is the fullest's.
        let m = parse(concat!(
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n",
            "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 4.0\n",
            "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n",
            "vllm:gpu_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.75\n",
            "vllm:gpu_prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 10.0\n",
            "vllm:gpu_prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 5.0\n",
        ));
        let g = VllmGauges::from_metrics(&m).unwrap();
        assert_eq!(g.running, Some(7.0));
        assert_eq!(g.waiting, None);
        assert_eq!(g.kv_cache_usage, Some(0.75));
        assert_eq!(g.prefix_cache_queries_total, Some(10.0));
        assert_eq!(g.prefix_cache_hits_total, Some(5.0));
        assert_eq!(g.preemptions_total, None);
        // The newer name wins when both are there.
        let m = parse(concat!(
            "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.2\n",
            "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n",
        ));
        assert_eq!(
            VllmGauges::from_metrics(&m).unwrap().kv_cache_usage,
            Some(0.2)
        );
        assert!(VllmGauges::from_metrics(&parse("")).is_none());
    }

    // -----------------------------------------------------------------------
    // Rates.

    #[test]
    fn counter_rates_deltas_and_resets() {
        assert_eq!(counter_delta(Some(10.0), Some(15.0)), Some(5.0));
        assert_eq!(counter_delta(Some(10.0), Some(10.0)), Some(0.0));
        // Reset (server restarted): the new value is the growth.
        assert_eq!(counter_delta(Some(100.0), Some(7.0)), Some(7.0));
        assert_eq!(counter_delta(None, Some(7.0)), None);
        assert_eq!(counter_delta(Some(1.0), None), None);
        assert_eq!(counter_delta(Some(f64::NAN), Some(1.0)), None);
        assert_eq!(counter_delta(Some(1.0), Some(f64::INFINITY)), None);

        assert_eq!(
            counter_rate(Some(0.0), Some(300.0), Duration::from_millis(1500)),
            Some(200.0)
        );
        assert_eq!(counter_rate(Some(0.0), Some(300.0), Duration::ZERO), None);

        assert_eq!(
            hit_rate(Some(0.0), Some(1.0), Some(0.0), Some(4.0)),
            Some(0.25)
        );
        // No queries in between: no rate (not 0, not NaN).
        assert_eq!(hit_rate(Some(3.0), Some(3.0), Some(9.0), Some(9.0)), None);
        // Hits can't exceed queries; a mismatched reset is clamped.
        assert_eq!(
            hit_rate(Some(0.0), Some(9.0), Some(0.0), Some(4.0)),
            Some(1.0)
        );
        assert_eq!(hit_rate(None, Some(1.0), Some(0.0), Some(4.0)), None);

        // Missing counters give no rates at all.
        let none = VllmGauges::default();
        assert_eq!(none.rates(&none, SECOND), VllmRates::default());
        let none = LlamacppGauges::default();
        assert_eq!(none.rates(&none, SECOND), LlamacppRates::default());
    }

    // -----------------------------------------------------------------------
    // Ollama.

    #[test]
    fn ollama_ps_fixture() {
        // llama3.1:8b: 4749765672 of 9895345150 bytes on the GPU = 12/25 =
        // 0.48 (the rest on the CPU); qwen2.5:0.5b wholly on the GPU, kept
        // loaded for ever (keep_alive -1: an expiry centuries away).
        let models = ollama_ps(fixture!("ollama/ps.json")).unwrap();
        assert_eq!(models.len(), 2);
        assert_eq!(
            models[0],
            OllamaModel {
                name: "llama3.1:8b".into(),
                size: 9_895_345_150,
                size_vram: 4_749_765_672,
                context_length: Some(8192),
                expires_at: Some("2025-06-12T09:39:03.259874902Z".into()),
            }
        );
        assert!(close(models[0].gpu_share(), 0.48));
        assert_eq!(models[1].name, "qwen2.5:0.5b");
        assert_eq!(models[1].gpu_share(), Some(1.0));
        assert_eq!(models[1].context_length, Some(4096));
        assert_eq!(
            models[1].expires_at.as_deref(),
            Some("2318-02-03T14:02:11.141963004+01:00")
        );
    }

    #[test]
    fn ollama_ps_odd_shapes() {
        // Nothing loaded.
        assert_eq!(ollama_ps(br#"{"models":[]}"#), Some(vec![]));
        // Older Ollama: no context_length; `model` only; sizes as floats;
        // entries without a name or not objects left out; size 0: no share.
        let models = ollama_ps(
            br#"{"models":[{"model":"a:1","size":100.0,"size_vram":25},{"size":1},3,{"name":"b","size":0,"size_vram":0,"context_length":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(models.len(), 2);
        assert_eq!(models[0].name, "a:1");
        assert_eq!(models[0].gpu_share(), Some(0.25));
        assert_eq!(models[0].context_length, None);
        assert_eq!(models[0].expires_at, None);
        assert_eq!(models[1].gpu_share(), None);
        // More in VRAM than in all (rounding on the server): capped at 1.
        let over = OllamaModel {
            size: 10,
            size_vram: 11,
            ..OllamaModel::default()
        };
        assert_eq!(over.gpu_share(), Some(1.0));
        assert_eq!(ollama_ps(br#"{"error":"nope"}"#), None);
        assert_eq!(ollama_ps(b"<html>"), None);
    }
}
