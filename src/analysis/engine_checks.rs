//! Diagnoses that need what the server says about itself (its gauges and
//! per-request timings), in plain words with their evidence. Pure functions:
//! the caller passes per-level facts; each check returns a diagnosis only
//! when it fires.

use serde_json::json;

use super::diagnose::Diagnosis;
use crate::engine::{Engine, CONCURRENCY_CAP};

/// What one finished level saw of the server.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ServerView {
    pub concurrency: u32,
    pub output_throughput: f64,
    pub p99_ttft_ms: Option<f64>,
    /// Gauges over the level (min / max), when the probe read them.
    pub gpu_share_min: Option<f64>,
    pub waiting_max: Option<f64>,
    pub kv_cache_usage_max: Option<f64>,
    /// Preemptions during the level (sum of per-scrape deltas, or max-min of the total).
    pub preemptions: Option<f64>,
    pub prefix_cache_hit_rate_mean: Option<f64>,
    /// Largest Ollama `load_duration` of a measured request, ms.
    pub load_ms_max: Option<f64>,
    /// Median slot-wait estimate (Ollama), ms.
    pub slot_wait_ms_median: Option<f64>,
    /// Failures by class key (`http_503`, `http_429`, ...).
    pub http_503: usize,
    pub http_429: usize,
    /// Mean requests streaming over the level (first token had, not done).
    pub streaming_mean: Option<f64>,
    /// Mean requests in prefill over the level, from the server's own
    /// prefill times (llama.cpp, Ollama); None where it gave none.
    pub in_prefill_mean: Option<f64>,
    /// Requests the server says it runs at once, the most over the level
    /// (vLLM and SGLang running, TGI's batch size, llama.cpp's busy slots
    /// or requests processing).
    pub running_max: Option<f64>,
    /// llama.cpp's `/slots`: how many slots it has.
    pub slots_total: Option<f64>,
    /// The level's TTFT means, the client's and the server's own (its
    /// histogram between the level's edges), ms.
    pub ttft_mean_client_ms: Option<f64>,
    pub ttft_mean_server_ms: Option<f64>,
    /// The server finished more requests during the level than this
    /// client sent.
    pub other_traffic: bool,
    /// Mean requests the client had queued (in flight, neither streaming
    /// nor in prefill), where the level says.
    pub queued_mean: Option<f64>,
    /// Requests that failed, and all that ended (failed or completed).
    pub failed: usize,
    pub ended: usize,
}

/// A median slot wait (Ollama's own durations) at least this share of the
/// level's p99 TTFT, and this many ms, is requests queued for a slot.
const SLOT_WAIT_TTFT_SHARE: f64 = 0.2;
const SLOT_WAIT_MIN_MS: f64 = 5.0;
/// Failures above this share of a level's requests: its throughput fell to
/// failures, not to requests waiting for a slot.
const SLOT_FAILED_SHARE: f64 = 0.05;

impl ServerView {
    /// Whether requests queued at this level, by the server's own account
    /// where it gives one (its waiting gauge; else Ollama's slot waits),
    /// else the client's queued count; None where nothing says.
    fn queued(&self) -> Option<bool> {
        if let Some(w) = self.waiting_max {
            return Some(w >= 1.0);
        }
        if let Some(ms) = self.slot_wait_ms_median {
            let floor =
                SLOT_WAIT_MIN_MS.max(SLOT_WAIT_TTFT_SHARE * self.p99_ttft_ms.unwrap_or(0.0));
            return Some(ms >= floor);
        }
        self.queued_mean.map(|q| q >= 0.5)
    }

    /// Failures took more than a few of this level's requests.
    fn failing(&self) -> bool {
        self.ended > 0 && self.failed as f64 > SLOT_FAILED_SHARE * self.ended as f64
    }

    /// Requests the server runs at once by the client's count: streaming,
    /// and in prefill where the server's times tell.
    fn in_use(&self) -> Option<f64> {
        Some(self.streaming_mean? + self.in_prefill_mean.unwrap_or(0.0))
    }
}

/// Why throughput stopped rising at a knee, from what the server said at
/// its two levels; None where its gauges do not tell (the guess stays).
/// In order: KV (usage near full, or preemptions), the batch cap (running
/// pinned where it was while requests wait: named with its flag and the
/// value it shows), compute (everything runs at once, nothing waits).
pub(crate) fn knee_cause(from: &ServerView, to: &ServerView, engine: &str) -> Option<String> {
    let kv = to.kv_cache_usage_max.filter(|k| *k >= KV_FULL);
    let preempted = to.preemptions.filter(|p| *p > 0.0);
    if kv.is_some() || preempted.is_some() {
        let mut seen = Vec::new();
        if let Some(k) = kv {
            seen.push(format!("usage up to {:.0}%", k * 100.0));
        }
        if let Some(p) = preempted {
            seen.push(format!("{p:.0} preemptions"));
        }
        return Some(format!(
            "the KV cache is full ({}); requests wait for KV space or are recomputed",
            seen.join(", ")
        ));
    }
    // No running gauge (Ollama): its own slot waits, with the client's
    // count of what ran, say the slot cap.
    if to.running_max.is_none()
        && to.slot_wait_ms_median.is_some()
        && to.queued() == Some(true)
        && !to.failing()
    {
        if let (Some(in_use), Some(slots)) = (to.in_use(), Engine::of(engine).advice().slots) {
            if in_use < f64::from(to.concurrency) - 0.5 {
                let n = in_use.round().max(1.0);
                let waiting = to
                    .queued_mean
                    .map_or_else(String::new, |q| format!(" while about {q:.0} wait"));
                return Some(format!(
                    "the server runs {n:.0} at a time{waiting} (the slot cap, {} {n:.0})",
                    slots.setting
                ));
            }
        }
    }
    let (run_from, run_to) = (from.running_max?, to.running_max?);
    let waiting = to.waiting_max.unwrap_or(0.0);
    let streams = f64::from(to.concurrency);
    if run_to <= run_from + 0.5 && waiting >= 1.0 && run_to < streams - 0.5 {
        let n = run_to.round();
        let flag = Engine::of(engine)
            .advice()
            .slots
            .map_or_else(String::new, |s| format!(", {} {n:.0}", s.setting));
        let kv = to
            .kv_cache_usage_max
            .map_or_else(String::new, |k| format!("; KV {:.0}%", k * 100.0));
        return Some(format!(
            "the server runs {n:.0} at a time while up to {waiting:.0} wait (the batch cap{flag}{kv})"
        ));
    }
    if run_to >= streams - 0.5 && waiting < 1.0 {
        return Some(format!(
            "the server runs all {streams:.0} at once and nothing waits, yet throughput does not rise (compute-bound)"
        ));
    }
    None
}

/// KV use from which a knee is the KV cache's.
const KV_FULL: f64 = 0.9;

/// Everything the engine checks need, passed once.
#[derive(Clone, Debug, Default)]
pub(crate) struct EngineInput<'a> {
    /// The saved engine name (`crate::engine::Engine::name`); one of the
    /// user's own behaves as `openai-compatible`.
    pub engine: &'a str,
    /// Finished planned levels, in run order.
    pub levels: &'a [ServerView],
    /// The chat template's share of the prompt (overhead tokens / input tokens),
    /// from the calibration; shared by design, so not a cache problem.
    pub template_share: Option<f64>,
    /// `--prefix-len`'s share of the prompt (prefix / (prefix + input)):
    /// the same text before every prompt, cached by design too.
    pub prefix_share: f64,
    /// `--shard I/N`: (I, N). The other shards share the server by design.
    pub shard: Option<(u32, u32)>,
}

pub(crate) fn engine_diagnoses(input: &EngineInput<'_>) -> Vec<Diagnosis> {
    [
        slot_queueing(input),
        cpu_offload(input),
        cold_model(input),
        prefix_cache(input),
        kv_cache_full(input),
        overload_responses(input),
        outside_the_engine(input),
        shared_server(input),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Throughput does not grow from one level to the next while p99 TTFT
/// does, and the server's own account (its waiting gauge, else its slot
/// waits, else the client's queued count) says requests queued there:
/// requests wait for a slot. Levels that failed are not slots. Effective
/// slots from how far throughput rose at most over the lowest level's.
pub(crate) fn slot_queueing(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let mut levels: Vec<&ServerView> = input.levels.iter().collect();
    levels.sort_by_key(|l| l.concurrency);
    let first = *levels.first()?;
    if first.output_throughput <= 0.0 || levels.iter().any(|l| l.failing()) {
        return None;
    }
    let (from, second, gain, growth) = levels.windows(2).find_map(|pair| {
        let (a, b) = (pair[0], pair[1]);
        if a.output_throughput <= 0.0 {
            return None;
        }
        let gain = b.output_throughput / a.output_throughput - 1.0;
        let growth = match (a.p99_ttft_ms, b.p99_ttft_ms) {
            (Some(x), Some(y)) if x > 0.0 => y / x,
            _ => return None,
        };
        (gain < 0.20 && growth > 1.2 && b.queued() != Some(false)).then_some((a, b, gain, growth))
    })?;
    let peak = levels
        .iter()
        .map(|l| l.output_throughput)
        .fold(0.0, f64::max);
    // Throughput per stream at the lowest level is one slot's worth.
    let per_slot = first.output_throughput / f64::from(first.concurrency.max(1));
    let slots = (peak / per_slot).round().max(1.0);
    // What the client saw streaming at once, when the levels say, with
    // those in prefill where the server's prefill times tell them apart (a
    // request in prefill holds a slot but has no token yet).
    let prefill_known = levels.iter().all(|l| l.in_prefill_mean.is_some());
    let in_use = flat_streaming(
        &levels
            .iter()
            .filter_map(|l| {
                let prefill = if prefill_known {
                    l.in_prefill_mean?
                } else {
                    0.0
                };
                Some((l.concurrency, l.streaming_mean? + prefill))
            })
            .collect::<Vec<_>>(),
    );
    // What the server says it runs at once, where it says: the most over
    // the levels where requests waited (prefill included, unlike the
    // client's streaming count, which counts a request in prefill as waiting).
    let server_runs = levels
        .iter()
        .filter(|l| l.waiting_max.is_some_and(|w| w >= 1.0))
        .filter_map(|l| l.running_max)
        .reduce(f64::max)
        .or_else(|| levels.iter().filter_map(|l| l.running_max).reduce(f64::max));
    let slots = server_runs
        .or(in_use.filter(|_| prefill_known))
        .map_or(slots, f64::round);
    let seen = match (server_runs, in_use) {
        (Some(r), Some(s)) => format!(
            " (the server's own gauges: {r:.0} running{}; the client saw ~{s:.0} {})",
            levels
                .iter()
                .filter_map(|l| l.slots_total)
                .reduce(f64::max)
                .map_or_else(String::new, |t| format!(" of {t:.0} slots")),
            if prefill_known {
                "streaming or in prefill"
            } else {
                "streaming"
            }
        ),
        (Some(r), None) => format!(" (the server's own gauges: {r:.0} running)"),
        (None, Some(s)) if prefill_known => format!(
            " (slots in use ~{s:.0}: requests streaming or in prefill at once, mean over the levels, from the server's own prefill times)"
        ),
        (None, Some(s)) => format!(
            " (slots in use ~{s:.0}: requests streaming at once, mean over the levels; an estimate that counts a request in prefill as waiting)"
        ),
        (None, None) => String::new(),
    };
    let named = Engine::of(input.engine)
        .advice()
        .slots
        .filter(|s| s.named_when_queueing);
    let message = if let Some(named) = named {
        format!(
            "requests are waiting for a slot: {} is probably {}; effective parallel slots about {slots:.0}{seen}",
            named.setting,
            if slots <= 1.0 { "1".to_string() } else { format!("about {slots:.0}") }
        )
    } else {
        let knob = Engine::of(input.engine)
            .advice()
            .slots
            .map_or("parallel slots, max-num-seqs or -np", |s| s.setting);
        format!("requests are waiting for a slot: the server runs about {slots:.0} at a time ({knob}){seen}")
    };
    Some(Diagnosis {
        id: "slot_queueing",
        message,
        evidence: json!({
            "from_concurrency": from.concurrency, "to_concurrency": second.concurrency,
            "throughput_gain": gain, "p99_ttft_growth": growth, "effective_slots": slots,
            "slot_wait_ms_median": second.slot_wait_ms_median,
            "slots_in_use": in_use,
            "server_running": server_runs,
        }),
    })
}

/// The effective slot count when requests queue: the mean number streaming
/// stayed flat (within 25% and half a slot) over at least two levels while
/// concurrency grew past it. `levels`: (concurrency, mean streaming).
pub(crate) fn flat_streaming(levels: &[(u32, f64)]) -> Option<f64> {
    let mut levels = levels.to_vec();
    levels.sort_by_key(|l| l.0);
    levels.dedup_by_key(|l| l.0);
    let (last_c, last_s) = *levels.last()?;
    // The levels at or above the slot count: they are the flat stretch.
    let flat: Vec<f64> = levels
        .iter()
        .filter(|(c, _)| f64::from(*c) >= last_s.round())
        .map(|l| l.1)
        .collect();
    if flat.len() < 2 || f64::from(last_c) < last_s * 1.5 {
        return None;
    }
    let (lo, hi) = flat.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), s| {
        (lo.min(*s), hi.max(*s))
    });
    (hi - lo <= (0.25 * hi).max(0.5)).then_some(last_s)
}

/// Part of the model sits in system memory (Ollama `/api/ps` size_vram < size).
pub(crate) fn cpu_offload(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let share = input
        .levels
        .iter()
        .filter_map(|l| l.gpu_share_min)
        .fold(f64::INFINITY, f64::min);
    (share.is_finite() && share < 0.999).then(|| Diagnosis {
        id: "cpu_offload",
        message: format!(
            "{:.0}% of the model is in system memory; throughput will fall as concurrency rises",
            (1.0 - share) * 100.0
        ),
        evidence: json!({"gpu_share": share}),
    })
}

/// The model was loaded during measured requests.
pub(crate) fn cold_model(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let load = input
        .levels
        .iter()
        .filter_map(|l| l.load_ms_max)
        .fold(0.0, f64::max);
    (load > 0.0).then(|| Diagnosis {
        id: "cold_model",
        message: format!(
            "the model was loading during measured requests (load took up to {load:.0} ms): warm up longer, or raise the keep-alive"
        ),
        evidence: json!({"load_ms_max": load}),
    })
}

/// The prefix cache answered more than the chat template explains: prompts
/// were not unique, and TTFT is flattered.
pub(crate) fn prefix_cache(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let template = input.template_share.unwrap_or(0.0).clamp(0.0, 1.0);
    let prefix = input.prefix_share.clamp(0.0, 1.0);
    let rate = input
        .levels
        .iter()
        .filter_map(|l| l.prefix_cache_hit_rate_mean)
        .fold(0.0, f64::max);
    let by_design = if prefix > 0.0 {
        format!(
            "the chat template's {:.0}% and the shared prefix's {:.0}% (--prefix-len)",
            template * 100.0,
            prefix * 100.0
        )
    } else {
        format!("the chat template's {:.0}%", template * 100.0)
    };
    (rate > template + prefix + 0.05).then(|| Diagnosis {
        id: "prefix_cache",
        message: format!(
            "the prefix cache answered {:.0}% of prompt tokens, more than {by_design}: prompts repeat, and TTFT reads lower than real traffic would see",
            rate * 100.0,
        ),
        evidence: json!({"hit_rate": rate, "template_share": template, "prefix_share": prefix}),
    })
}

/// A run with a seed the user gave, whose prompts the server's prefix cache
/// answered more than their design explains (`expected`: the chat
/// template's share, and a `--prefix-len` prefix's): an earlier run with the
/// same seed sent them, and TTFT reads lower than a first run's. Quiet
/// where the server does not report its cache, or it answered no more than
/// for new prompts.
pub(crate) fn seed_repeat(
    seed: u64,
    levels: &[ServerView],
    expected: Option<f64>,
) -> Option<Diagnosis> {
    let template = expected.unwrap_or(0.0).clamp(0.0, 1.0);
    let rate = levels
        .iter()
        .filter_map(|l| l.prefix_cache_hit_rate_mean)
        .reduce(f64::max)?;
    (rate > template + 0.05).then(|| Diagnosis {
        id: "seed_repeat",
        message: format!(
            "--seed {seed} repeats earlier prompts: the server's prefix cache answered {:.0}% of prompt tokens, \
             so TTFT reads lower than a first run's; leave --seed out for prompts new to the server",
            rate * 100.0
        ),
        evidence: json!({"seed": seed, "hit_rate": rate, "template_share": template}),
    })
}

/// Requests queue for KV cache: the knee, from the server's side.
pub(crate) fn kv_cache_full(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let level = input.levels.iter().find(|l| {
        let queued_full =
            l.waiting_max.is_some_and(|w| w > 0.0) && l.kv_cache_usage_max.is_some_and(|k| k > 0.9);
        queued_full || l.preemptions.is_some_and(|p| p > 0.0)
    })?;
    Some(Diagnosis {
        id: "kv_cache_full",
        message: format!(
            "the knee: requests queue for KV cache from {} streams (KV usage up to {:.0}%, {} waiting, {} preempted)",
            level.concurrency,
            level.kv_cache_usage_max.unwrap_or(0.0) * 100.0,
            level.waiting_max.unwrap_or(0.0),
            level.preemptions.unwrap_or(0.0)
        ),
        evidence: json!({
            "concurrency": level.concurrency, "kv_cache_usage_max": level.kv_cache_usage_max,
            "waiting_max": level.waiting_max, "preemptions": level.preemptions,
        }),
    })
}

/// TTFT outside the engine (the client's mean less the server's own) that
/// grows with concurrency while the server's own TTFT grows less: a router,
/// a gateway or the client itself holds requests up. Fires when the gap at
/// the highest level is at least 20 ms and twice the lowest level's, and
/// grew by more than the server's TTFT did.
pub(crate) fn outside_the_engine(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let mut seen: Vec<(u32, f64, f64)> = input
        .levels
        .iter()
        .filter_map(|l| {
            let (c, s) = (l.ttft_mean_client_ms?, l.ttft_mean_server_ms?);
            Some((l.concurrency, c - s, s))
        })
        .collect();
    seen.sort_by_key(|l| l.0);
    let (&(lo_c, lo_gap, lo_server), &(hi_c, hi_gap, hi_server)) = (seen.first()?, seen.last()?);
    if hi_c <= lo_c || hi_gap < 20.0 || hi_gap < 2.0 * lo_gap.max(0.0) {
        return None;
    }
    if hi_gap - lo_gap <= hi_server - lo_server {
        return None;
    }
    Some(Diagnosis {
        id: "outside_the_engine",
        message: format!(
            "TTFT outside the engine grows from {lo_gap:.0} ms at {lo_c} streams to {hi_gap:.0} ms at {hi_c} while the server's own TTFT goes from {lo_server:.0} to {hi_server:.0} ms: a router, a gateway or this client holds requests up, not the engine (see the client's CPU and receive lag)"
        ),
        evidence: json!({
            "from_concurrency": lo_c, "to_concurrency": hi_c,
            "gap_ms": [lo_gap, hi_gap], "server_ttft_ms": [lo_server, hi_server],
        }),
    })
}

/// Levels during which the server finished more requests than this
/// client sent: another client shares the server. A shard of a sharded run
/// expects that of the other shards, and says it once, as a fact; whether
/// a client beyond the shards used the server too cannot be told apart
/// (`stats::server_account::other_shards` says why).
pub(crate) fn shared_server(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let shared: Vec<u32> = input
        .levels
        .iter()
        .filter(|l| l.other_traffic)
        .map(|l| l.concurrency)
        .collect();
    if shared.is_empty() {
        return None;
    }
    if let Some((index, count)) = input.shard.filter(|(_, count)| *count > 1) {
        let others = match count - 1 {
            1 => "the other shard".to_string(),
            n => format!("the other {n} shards"),
        };
        return Some(Diagnosis {
            id: "shards_share_server",
            message: format!(
                "shard {index}/{count}: the server also serves {others}, so its own figures (its request counts and latencies, its gauges) include their load; this shard's own figures are its requests'"
            ),
            evidence: json!({"concurrency": shared, "shard": index, "count": count}),
        });
    }
    let list: Vec<String> = shared.iter().map(u32::to_string).collect();
    Some(Diagnosis {
        id: "shared_server",
        message: format!(
            "another client used the server during the levels at {} streams (the server finished more requests than this client sent): their figures include its load; measure on a server of your own",
            list.join(", ")
        ),
        evidence: json!({"concurrency": shared}),
    })
}

/// 503/429 answers: which limit it is, by engine.
pub(crate) fn overload_responses(input: &EngineInput<'_>) -> Option<Diagnosis> {
    let n503: usize = input.levels.iter().map(|l| l.http_503).sum();
    let n429: usize = input.levels.iter().map(|l| l.http_429).sum();
    if n503 + n429 == 0 {
        return None;
    }
    // A 429 is a cap on concurrent requests from any server; a 503 says
    // what it means of the engine that sent it.
    let limit = if n503 > 0 {
        Engine::of(input.engine)
            .advice()
            .on_503
            .unwrap_or("the server or a proxy in front of it is refusing work")
    } else {
        CONCURRENCY_CAP
    };
    Some(Diagnosis {
        id: "overload_responses",
        message: format!("{n503} answers were 503 and {n429} were 429: {limit}"),
        evidence: json!({"http_503": n503, "http_429": n429, "engine": input.engine}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(c: u32, t: f64, p99: f64) -> ServerView {
        ServerView {
            concurrency: c,
            output_throughput: t,
            p99_ttft_ms: Some(p99),
            ..ServerView::default()
        }
    }

    /// A level with what the server said of it: running and waiting at
    /// most, KV use at most.
    fn gauged(c: u32, running: f64, waiting: f64, kv: f64) -> ServerView {
        ServerView {
            running_max: Some(running),
            waiting_max: Some(waiting),
            kv_cache_usage_max: Some(kv),
            ..level(c, 100.0, 100.0)
        }
    }

    /// The real vLLM with --max-num-seqs 2 at 2 -> 4 streams: running 2
    /// both times, 2 waiting, KV 1%: the batch cap, named with its flag
    /// and the value the server shows; not "KV cache or batch full".
    #[test]
    fn a_knee_at_the_batch_cap_names_the_flag() {
        let cause = knee_cause(
            &gauged(2, 2.0, 0.0, 0.01),
            &gauged(4, 2.0, 2.0, 0.01),
            "vllm",
        );
        assert_eq!(
            cause.as_deref(),
            Some("the server runs 2 at a time while up to 2 wait (the batch cap, --max-num-seqs 2; KV 1%)")
        );
        // llama.cpp's busy slots, no KV gauge.
        let slots = |c, busy, waiting| ServerView {
            kv_cache_usage_max: None,
            ..gauged(c, busy, waiting, 0.0)
        };
        assert_eq!(
            knee_cause(&slots(2, 2.0, 0.0), &slots(4, 2.0, 2.0), "llamacpp").as_deref(),
            Some("the server runs 2 at a time while up to 2 wait (the batch cap, -np 2)")
        );
    }

    /// KV near full, or any preemption, is the KV cache's knee, whatever
    /// runs; everything running and nothing waiting is compute; a server
    /// without running gauges tells nothing (the guess stays).
    #[test]
    fn kv_compute_and_nothing_to_tell() {
        assert_eq!(
            knee_cause(&gauged(32, 32.0, 0.0, 0.6), &gauged(64, 40.0, 24.0, 0.97), "vllm").as_deref(),
            Some("the KV cache is full (usage up to 97%); requests wait for KV space or are recomputed")
        );
        let preempting = ServerView {
            preemptions: Some(12.0),
            ..gauged(64, 40.0, 24.0, 0.5)
        };
        assert_eq!(
            knee_cause(&gauged(32, 32.0, 0.0, 0.4), &preempting, "vllm").as_deref(),
            Some("the KV cache is full (12 preemptions); requests wait for KV space or are recomputed")
        );
        assert_eq!(
            knee_cause(&gauged(8, 8.0, 0.0, 0.2), &gauged(16, 16.0, 0.0, 0.3), "sglang").as_deref(),
            Some("the server runs all 16 at once and nothing waits, yet throughput does not rise (compute-bound)")
        );
        assert_eq!(
            knee_cause(&level(8, 1.0, 1.0), &level(16, 1.0, 1.0), "vllm"),
            None
        );
        // Running grew but not to all streams while some wait: not said.
        assert_eq!(
            knee_cause(
                &gauged(8, 6.0, 0.0, 0.2),
                &gauged(16, 12.0, 4.0, 0.3),
                "vllm"
            ),
            None
        );
    }

    /// Client TTFT 12 / 30 / 95 ms, the server's own 10 / 14 / 20 at 1, 4
    /// and 16 streams: the gap goes 2 -> 75 ms (>= 20, >= 2 x 2, and it
    /// grew 73 ms against the server's 10): outside the engine. With the
    /// server's TTFT growing as much, it does not fire.
    #[test]
    fn a_gap_outside_the_engine_that_grows_is_said() {
        let with = |c, client, server| ServerView {
            ttft_mean_client_ms: Some(client),
            ttft_mean_server_ms: Some(server),
            ..level(c, 100.0, 100.0)
        };
        let levels = [
            with(1, 12.0, 10.0),
            with(4, 30.0, 14.0),
            with(16, 95.0, 20.0),
        ];
        let input = EngineInput {
            engine: "vllm",
            levels: &levels,
            ..EngineInput::default()
        };
        let d = outside_the_engine(&input).expect("fires");
        assert_eq!(
            d.message,
            "TTFT outside the engine grows from 2 ms at 1 streams to 75 ms at 16 while the server's own TTFT goes from 10 to 20 ms: a router, a gateway or this client holds requests up, not the engine (see the client's CPU and receive lag)"
        );
        let queueing = [with(1, 12.0, 10.0), with(16, 395.0, 300.0)];
        let input = EngineInput {
            levels: &queueing,
            ..input
        };
        assert_eq!(outside_the_engine(&input), None);
        let shared = [
            ServerView {
                other_traffic: true,
                ..level(8, 1.0, 1.0)
            },
            level(16, 1.0, 1.0),
        ];
        let input = EngineInput {
            levels: &shared,
            ..input
        };
        assert!(shared_server(&input).is_some_and(|d| d
            .message
            .starts_with("another client used the server during the levels at 8 streams")));
        // A shard expects the other shards there: said once, no warning.
        let shard = EngineInput {
            shard: Some((1, 3)),
            ..input
        };
        let d = shared_server(&shard).expect("said once");
        assert_eq!(d.id, "shards_share_server");
        assert_eq!(
            d.message,
            "shard 1/3: the server also serves the other 2 shards, so its own figures (its request counts and latencies, its gauges) include their load; this shard's own figures are its requests'"
        );
        let single = EngineInput {
            shard: Some((0, 1)),
            ..shard
        };
        assert_eq!(shared_server(&single).map(|d| d.id), Some("shared_server"));
    }

    /// The server says it runs 2 at once while the client saw ~1 streaming
    /// (a long prefill holds a slot with no token yet): the diagnosis takes
    /// the server's 2 and shows both.
    #[test]
    fn slot_queueing_takes_the_servers_count() {
        let mut levels = vec![
            level(1, 30.0, 1100.0),
            level(2, 31.0, 2300.0),
            level(4, 31.0, 4600.0),
        ];
        for (l, (running, waiting, streaming)) in
            levels
                .iter_mut()
                .zip([(1.0, 0.0, 0.6), (2.0, 0.0, 1.0), (2.0, 2.0, 1.0)])
        {
            l.running_max = Some(running);
            l.waiting_max = Some(waiting);
            l.streaming_mean = Some(streaming);
            l.slots_total = Some(2.0);
        }
        let input = EngineInput {
            engine: "llamacpp",
            levels: &levels,
            ..EngineInput::default()
        };
        let d = slot_queueing(&input).expect("fires");
        assert_eq!(
            d.message,
            "requests are waiting for a slot: the server runs about 2 at a time (-np) \
             (the server's own gauges: 2 running of 2 slots; the client saw ~1 streaming)"
        );
        assert_eq!(d.evidence["server_running"], 2.0);
    }

    /// Ollama's levels, no calibration.
    fn ollama(levels: &[ServerView]) -> EngineInput<'_> {
        EngineInput {
            engine: "ollama",
            levels,
            template_share: None,
            prefix_share: 0.0,
            shard: None,
        }
    }

    #[test]
    fn ollama_with_one_slot_is_named() {
        // 1 -> 2 -> 4 streams at 40, 41, 40.5 tok/s while p99 TTFT goes 200 -> 410:
        // gain 2.5% < 20%, growth 2.05x; slots = round(41 / 40) = 1.
        let levels = [
            level(1, 40.0, 200.0),
            level(2, 41.0, 410.0),
            level(4, 40.5, 820.0),
        ];
        let input = ollama(&levels);
        let d = slot_queueing(&input).expect("fires");
        assert_eq!(
            d.message,
            "requests are waiting for a slot: OLLAMA_NUM_PARALLEL is probably 1; effective parallel slots about 1"
        );
        // Four slots: throughput 40 -> 150 at 4 streams: gain 275%, quiet.
        let levels = [level(1, 40.0, 200.0), level(4, 150.0, 230.0)];
        assert!(slot_queueing(&ollama(&levels)).is_none());
    }

    /// The level files of Ollama with 2 slots swept at 1, 2, 4, 8: throughput
    /// doubles from 1 to 2, then stays at ~176 tok/s while p99 TTFT grows
    /// 14x; Ollama's own slot waits (median 360 ms at 4, 1,082 ms at 8) and
    /// the client's queued count (1.8, 4.6) say requests queue, ~1.93 run.
    /// The slot check names OLLAMA_NUM_PARALLEL at about 2, and the knee's
    /// cause is the slot cap, not the KV cache.
    #[test]
    fn ollama_with_two_slots_queued_is_the_slot_cap() {
        let rows = [
            (1, 91.3, 13.9, 0.225, 0.962, 0.004, 0.033),
            (2, 172.0, 27.3, 10.378, 1.871, 0.007, 0.117),
            (4, 176.5, 383.8, 359.984, 1.921, 0.008, 1.811),
            (8, 176.6, 1106.8, 1081.75, 1.921, 0.008, 4.557),
        ];
        let levels: Vec<ServerView> = rows
            .iter()
            .map(
                |&(c, t, p99, wait, streaming, prefill, queued)| ServerView {
                    slot_wait_ms_median: Some(wait),
                    streaming_mean: Some(streaming),
                    in_prefill_mean: Some(prefill),
                    queued_mean: Some(queued),
                    ended: 16,
                    ..level(c, t, p99)
                },
            )
            .collect();
        let d = slot_queueing(&ollama(&levels)).expect("fires");
        assert!(
            d.message.starts_with(
                "requests are waiting for a slot: OLLAMA_NUM_PARALLEL is probably about 2; effective parallel slots about 2"
            ),
            "{}",
            d.message
        );
        assert_eq!(d.evidence["from_concurrency"], 2);
        assert_eq!(
            knee_cause(&levels[1], &levels[2], "ollama").as_deref(),
            Some("the server runs 2 at a time while about 2 wait (the slot cap, OLLAMA_NUM_PARALLEL 2)")
        );
    }

    /// A vLLM-like server of 256 slots whose requests fail: throughput
    /// stalls and TTFT grows, but the server says nothing waits and the
    /// levels failed: no slot diagnosis.
    #[test]
    fn failures_are_not_slots() {
        let rows = [
            (1, 90.9, 13.3, 9),
            (2, 92.7, 23.6, 12),
            (4, 124.6, 26.1, 9),
            (8, 152.9, 31.0, 11),
        ];
        let mut levels: Vec<ServerView> = rows
            .iter()
            .map(|&(c, t, p99, failed)| ServerView {
                running_max: Some(f64::from(c)),
                waiting_max: Some(0.0),
                failed,
                ended: 16,
                ..level(c, t, p99)
            })
            .collect();
        let input = EngineInput {
            engine: "tokbench-sim",
            levels: &levels,
            ..EngineInput::default()
        };
        assert!(slot_queueing(&input).is_none());
        // The failures alone keep it quiet, whatever the gauges say.
        for l in &mut levels {
            l.waiting_max = None;
        }
        let input = EngineInput {
            engine: "tokbench-sim",
            levels: &levels,
            ..EngineInput::default()
        };
        assert!(slot_queueing(&input).is_none());
    }

    /// Worked by hand. One slot: mean streaming 0.98, 0.99, 0.94, 0.97 at
    /// 1, 2, 4, 8 streams; every level is at or above round(0.97) = 1
    /// stream, spread 0.05 <= max(25% of 0.99, 0.5): flat, ~0.97 (the last
    /// level's). Four slots: 1, 2, 3.9, 3.95, 3.97 at 1..16 streams; levels
    /// from 4 streams on are flat (spread 0.07): ~3.97. A server that
    /// scales (7.8 streaming at 8) has one level at or above 8: not flat.
    #[test]
    fn slots_in_use_is_the_flat_streaming_mean() {
        let one = [(1, 0.98), (2, 0.99), (4, 0.94), (8, 0.97)];
        assert_eq!(flat_streaming(&one), Some(0.97));
        let four = [(1, 1.0), (2, 2.0), (4, 3.9), (8, 3.95), (16, 3.97)];
        assert_eq!(flat_streaming(&four), Some(3.97));
        let scales = [(1, 1.0), (2, 2.0), (4, 3.9), (8, 7.8)];
        assert_eq!(flat_streaming(&scales), None);
        // Concurrency not yet past 1.5 x the slots: too early to say.
        assert_eq!(flat_streaming(&[(4, 3.9), (5, 3.9)]), None);
        // The slot check quotes it.
        let mut levels = [
            level(1, 40.0, 200.0),
            level(2, 41.0, 410.0),
            level(4, 40.5, 820.0),
        ];
        for (l, s) in levels.iter_mut().zip([0.98, 0.99, 0.97]) {
            l.streaming_mean = Some(s);
        }
        let d = slot_queueing(&ollama(&levels)).expect("fires");
        assert!(
            d.message
                .ends_with("(slots in use ~1: requests streaming at once, mean over the levels; an estimate that counts a request in prefill as waiting)"),
            "{}",
            d.message
        );
        // Two slots whose long prefill the client counts as waiting: ~1.1
        // streaming, and 0.9 in prefill by the server's own times, at each
        // level: 2 in use, and the slot count says 2 (1.1 + 0.9 = 2.0).
        for (l, (s, p)) in levels.iter_mut().zip([(1.0, 0.9), (1.1, 0.9), (1.1, 0.9)]) {
            l.streaming_mean = Some(s);
            l.in_prefill_mean = Some(p);
        }
        let d = slot_queueing(&ollama(&levels)).expect("fires");
        assert_eq!(
            d.message,
            "requests are waiting for a slot: OLLAMA_NUM_PARALLEL is probably about 2; effective parallel slots about 2 (slots in use ~2: requests streaming or in prefill at once, mean over the levels, from the server's own prefill times)"
        );
    }

    /// A seed the user gave: a cache that answered most prompt tokens says
    /// the run repeated earlier prompts; one that answered only the
    /// template, or a server that does not say, gets no line.
    #[test]
    fn seed_repeat_says_what_the_prefix_cache_did() {
        let mut a = level(1, 40.0, 200.0);
        a.prefix_cache_hit_rate_mean = Some(0.98);
        let d = seed_repeat(42, &[a.clone()], Some(0.1)).expect("fires");
        assert_eq!(
            d.message,
            "--seed 42 repeats earlier prompts: the server's prefix cache answered 98% of prompt tokens, \
             so TTFT reads lower than a first run's; leave --seed out for prompts new to the server"
        );
        a.prefix_cache_hit_rate_mean = Some(0.12);
        assert!(seed_repeat(42, &[a.clone()], Some(0.1)).is_none());
        a.prefix_cache_hit_rate_mean = None;
        assert!(seed_repeat(42, &[a], Some(0.1)).is_none());
    }

    #[test]
    fn offload_cold_cache_and_kv() {
        let mut a = level(1, 40.0, 200.0);
        a.gpu_share_min = Some(0.48);
        a.load_ms_max = Some(2900.0);
        a.prefix_cache_hit_rate_mean = Some(0.40);
        let mut b = level(64, 900.0, 900.0);
        b.waiting_max = Some(3.0);
        b.kv_cache_usage_max = Some(0.97);
        let levels = [a, b];
        // Template is 30 of 158 tokens = 19%: 40% > 19% + 5% fires.
        let input = EngineInput {
            engine: "vllm",
            levels: &levels,
            template_share: Some(30.0 / 158.0),
            prefix_share: 0.0,
            shard: None,
        };
        let ids: Vec<&str> = engine_diagnoses(&input).iter().map(|d| d.id).collect();
        assert_eq!(
            ids,
            ["cpu_offload", "cold_model", "prefix_cache", "kv_cache_full"]
        );
        assert_eq!(
            cpu_offload(&input).map(|d| d.message),
            Some(
                "52% of the model is in system memory; throughput will fall as concurrency rises"
                    .into()
            )
        );
        // A hit rate within the template's share plus 5% is by design.
        let mut c = level(1, 40.0, 200.0);
        c.prefix_cache_hit_rate_mean = Some(0.22);
        let quiet = [c];
        assert!(prefix_cache(&EngineInput {
            engine: "vllm",
            levels: &quiet,
            template_share: Some(0.19),
            prefix_share: 0.0,
            shard: None,
        })
        .is_none());
        // --prefix-len 16 before 32 tokens: a third of each prompt is the
        // same text, so a third cached is the workload; half is not.
        let mut d = level(1, 40.0, 200.0);
        d.prefix_cache_hit_rate_mean = Some(1.0 / 3.0);
        fn with_prefix(levels: &[ServerView]) -> EngineInput<'_> {
            EngineInput {
                engine: "vllm",
                levels,
                template_share: Some(0.0),
                prefix_share: 16.0 / 48.0,
                shard: None,
            }
        }
        let third = [d.clone()];
        assert!(prefix_cache(&with_prefix(&third)).is_none());
        d.prefix_cache_hit_rate_mean = Some(0.5);
        let half = [d];
        assert_eq!(
            prefix_cache(&with_prefix(&half)).map(|d| d.message),
            Some(
                "the prefix cache answered 50% of prompt tokens, more than the chat template's 0% \
                 and the shared prefix's 33% (--prefix-len): prompts repeat, and TTFT reads lower \
                 than real traffic would see"
                    .into()
            )
        );
    }

    #[test]
    fn overload_names_the_limit() {
        let mut a = level(8, 10.0, 10.0);
        a.http_503 = 3;
        let levels = [a];
        let d = overload_responses(&ollama(&levels)).expect("fires");
        assert!(
            d.message
                .starts_with("3 answers were 503 and 0 were 429: Ollama's queue is full"),
            "{}",
            d.message
        );
    }
}
