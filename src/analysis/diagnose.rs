//! Checks for the ways a benchmark measures the wrong thing (docs/architecture.md
//! section 1, issue 5 item 5). Each returns a diagnosis only when it fires;
//! `diagnose_run` runs them all over one `DiagnoseInput`.

use serde_json::{json, Value};

use super::decide::{is_flat, no_rise_message, Decision};
use super::rounds::{RoundsSpread, ROUNDS_SPREAD_LIMIT};
use super::words::{figure, median, num, opt_num, percent0, round_to, streams};
use crate::engine::LengthAsk;
use crate::record::RequestRecord;
use crate::stats::summary::LevelStats;

/// Prompt lengths further than this from the target make levels incomparable.
pub(crate) const INPUT_LEN_TOLERANCE: f64 = 0.05;
/// Mean output below this share of the requested length fires `short_outputs`.
pub(crate) const SHORT_OUTPUT_SHARE: f64 = 0.9;
/// Connect + first byte above this many ms fires `client_far` ...
pub(crate) const CLIENT_FAR_MS: f64 = 5.0;
/// ... and so does one above this share of the TTFT p50.
pub(crate) const CLIENT_FAR_TTFT_SHARE: f64 = 0.10;
/// Client CPU above this (percent of one core) fires `client_saturated` ...
pub(crate) const CLIENT_CPU_PERCENT_LIMIT: f64 = 80.0;
/// ... and so does an event-loop lag p99 above this many ms.
pub(crate) const CLIENT_LOOP_LAG_MS_LIMIT: f64 = 5.0;
/// A client receive lag p99 above this many ms fires `client_rx_lag`.
pub(crate) const CLIENT_RX_LAG_MS_LIMIT: f64 = 5.0;
/// Event-loop lag while the client's CPU stays under this share of a core is
/// taken as other work holding the core, not the client's own.
pub(crate) const CLIENT_LOW_CPU_PERCENT: f64 = 25.0;
/// A median of at most this many reads per answer looks buffered ...
pub(crate) const BUFFERED_MAX_READS: f64 = 2.0;
/// ... when the median TTFT is also within this share of the median E2EL.
pub(crate) const BUFFERED_TTFT_SHARE: f64 = 0.10;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Diagnosis {
    pub id: &'static str,
    pub message: String,
    pub evidence: Value,
}

impl Diagnosis {
    pub(crate) fn to_json(&self) -> Value {
        json!({"id": self.id, "message": self.message, "evidence": self.evidence})
    }
}

/// A finished level as the checks see it.
pub(crate) struct LevelView<'a> {
    pub concurrency: u32,
    pub stats: &'a LevelStats,
}

/// What the client itself cost during one level (the level file's `client`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ClientLevelLoad {
    pub concurrency: u32,
    /// tokbench's CPU time over the level's wall time, in percent of one core.
    pub cpu_percent: Option<f64>,
    pub loop_lag_ms_p99: Option<f64>,
}

/// How one answer arrived, for `buffered_stream`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StreamShape {
    /// Socket reads (or, lacking those, output-carrying chunks) that carried output.
    pub reads: u32,
    /// Output-carrying chunks (SSE events or NDJSON lines).
    pub chunks: u32,
    pub output_tokens: u32,
    pub ttft_ms: f64,
    pub e2el_ms: f64,
}

impl StreamShape {
    /// From a completed record and its socket reads that carried output; `None`
    /// for a request that failed or lacks TTFT or E2EL.
    pub(crate) fn from_record(r: &RequestRecord) -> Option<StreamShape> {
        if !r.is_ok() {
            return None;
        }
        Some(StreamShape {
            reads: r.output_reads,
            chunks: r.chunks,
            output_tokens: r.output_tokens,
            ttft_ms: r.ttft?.as_secs_f64() * 1000.0,
            e2el_ms: r.e2el?.as_secs_f64() * 1000.0,
        })
    }
}

/// Everything the checks need, passed once. Fields left at their default
/// (empty, `None`, 0) skip the checks that need them.
#[derive(Default)]
pub(crate) struct DiagnoseInput<'a> {
    /// The levels to judge (the recorder passes the complete ones).
    pub levels: &'a [LevelView<'a>],
    /// Where the run's lengths came from: the length notes speak only of
    /// lengths the user asked for.
    pub lengths: AskedLengths,
    /// What the bodies asked of the answer's length, as the engine honours it.
    pub length_ask: Option<LengthAsk>,
    /// Warmup requests sent before the first level; `None`: unknown.
    pub warmup_requests: Option<u32>,
    /// Median connect + first byte of a tiny request before the run, ms.
    pub connect_probe_ms: Option<f64>,
    /// Per level: client CPU and event-loop lag.
    pub client_loads: &'a [ClientLevelLoad],
    /// Per request: how its answer arrived (see `StreamShape::from_record`).
    pub stream_shapes: &'a [StreamShape],
    /// `--rounds` (0: unknown).
    pub rounds: u32,
    /// `rounds::rounds_spread` over the run's levels.
    pub spreads: &'a [RoundsSpread],
    /// `decide::decide` over the run's levels.
    pub decision: Option<&'a Decision>,
}

/// Run every check over the levels of a run (the original three inputs;
/// the checks needing more stay quiet). See `diagnose_run`.
#[cfg(test)]
pub(crate) fn diagnose(
    levels: &[LevelView<'_>],
    input_target: u32,
    output_target: u32,
) -> Vec<Diagnosis> {
    diagnose_run(&DiagnoseInput {
        levels,
        lengths: AskedLengths::One {
            input: input_target,
            output: output_target,
        },
        ..DiagnoseInput::default()
    })
}

/// Run every check; only those that fire are returned, in a fixed order.
pub(crate) fn diagnose_run(input: &DiagnoseInput<'_>) -> Vec<Diagnosis> {
    let levels = input.levels;
    // The unloaded TTFT: the lowest concurrency that has TTFT samples.
    let base_ttft_p50 = levels
        .iter()
        .filter_map(|l| l.stats.ttft.as_ref().map(|d| (l.concurrency, d.median)))
        .min_by_key(|(c, _)| *c)
        .map(|(_, p50)| p50);
    [
        input
            .lengths
            .input()
            .and_then(|target| input_len_off_target(levels, target)),
        input.lengths.output().and_then(|target| {
            short_outputs(
                levels,
                target,
                input.length_ask.unwrap_or(LengthAsk::IgnoreEos),
            )
        }),
        failures(levels),
        client_limits(levels),
        single_level(levels),
        input.warmup_requests.and_then(no_warmup),
        input
            .connect_probe_ms
            .and_then(|ms| client_far(ms, base_ttft_p50)),
        client_saturated(input.client_loads),
        client_rx_lag(levels),
        buffered_stream(input.stream_shapes),
        multi_token_chunks(input.stream_shapes),
        rounds_spread(input.spreads),
        if levels.is_empty() {
            None
        } else {
            single_round(input.rounds)
        },
        input.decision.and_then(no_rise),
        input.decision.and_then(no_capacity),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Where a run's lengths came from: the one rule every note about an
/// asked-for length consults, so none is said of a run that asked for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum AskedLengths {
    /// The user asked for one prompt and one answer length (drawn around
    /// them with a range ratio): the notes compare the means with them.
    One { input: u32, output: u32 },
    /// Each request's lengths came from a dataset, a trace or earlier turns:
    /// no one length was asked for, and the notes say nothing.
    PerRequest,
    /// Not known (a made-up test input): the notes say nothing.
    #[default]
    Unknown,
}

impl AskedLengths {
    /// A run's lengths: one asked length unless a dataset, a replayed trace
    /// or `--turns` (prompts that carry earlier turns) set them per request.
    pub(crate) fn of_run(input: u32, output: u32, dataset: bool, replay: bool, turns: u32) -> Self {
        if dataset || replay || turns > 1 {
            AskedLengths::PerRequest
        } else {
            AskedLengths::One { input, output }
        }
    }

    /// The one prompt length asked for, if any (0: unknown).
    pub(crate) fn input(self) -> Option<u32> {
        match self {
            AskedLengths::One { input, .. } if input > 0 => Some(input),
            _ => None,
        }
    }

    /// The one answer length asked for, if any (0: unknown).
    pub(crate) fn output(self) -> Option<u32> {
        match self {
            AskedLengths::One { output, .. } if output > 0 => Some(output),
            _ => None,
        }
    }

    /// Prompts share earlier prompts' text by design (turns carry the
    /// conversation, a trace its own prefixes): a prefix cache answering
    /// them is what real traffic of this shape sees.
    pub(crate) fn prompts_repeat_by_design(self) -> bool {
        self == AskedLengths::PerRequest
    }
}

/// The server saw prompts of a different length than asked for.
pub(crate) fn input_len_off_target(levels: &[LevelView<'_>], target: u32) -> Option<Diagnosis> {
    if target == 0 {
        return None;
    }
    let (mut sum, mut n, mut min, mut max) = (0.0, 0usize, f64::INFINITY, 0.0f64);
    for level in levels {
        if let Some(len) = &level.stats.input_len {
            sum += len.mean * level.stats.completed as f64;
            n += level.stats.completed;
            min = min.min(len.min);
            max = max.max(len.max);
        }
    }
    if n == 0 {
        return None;
    }
    let mean = sum / n as f64;
    let off = (mean - target as f64) / target as f64;
    (off.abs() > INPUT_LEN_TOLERANCE).then(|| Diagnosis {
        id: "input_len_off_target",
        message: format!(
            "prompts reached the model at {mean:.0} tokens on average, {:+.0}% off the {target} asked for: \
             compare only with runs of the same measured length",
            off * 100.0
        ),
        evidence: json!({"target": target, "mean": mean, "min": min, "max": max}),
    })
}

/// Answers averaged under 90% of the requested length (EOS without
/// ignore_eos, an engine that cannot force lengths, or a server limit). The
/// evidence keeps the count of short ones.
pub(crate) fn short_outputs(
    levels: &[LevelView<'_>],
    target: u32,
    ask: LengthAsk,
) -> Option<Diagnosis> {
    if target == 0 {
        return None;
    }
    let short: usize = levels.iter().map(|l| l.stats.short_outputs).sum();
    let completed: usize = levels.iter().map(|l| l.stats.completed).sum();
    let (mut sum, mut n) = (0.0, 0usize);
    for level in levels {
        if let Some(len) = &level.stats.output_len {
            sum += len.mean * level.stats.completed as f64;
            n += level.stats.completed;
        }
    }
    if n == 0 {
        return None;
    }
    let mean = sum / n as f64;
    let why = match ask {
        LengthAsk::CapOnly(field) => format!(
            "this engine cannot force an answer's length ({field} is a cap): answers end at the model's own end, \
             so output tokens per request vary; per-token figures (ITL, TPOT, tok/s per stream) hold, \
             request throughput and E2E latency compare only with runs of the same answer lengths"
        ),
        LengthAsk::IgnoreEos => "ignore_eos was sent, yet the server ended answers early (it does not honour it, \
             or a limit of its own cut them): numbers at different output lengths are not comparable"
            .into(),
        LengthAsk::NoIgnoreEos => "numbers at different output lengths are not comparable; \
             send ignore_eos (drop --no-ignore-eos) where the server supports it"
            .into(),
    };
    (mean < SHORT_OUTPUT_SHARE * f64::from(target)).then(|| Diagnosis {
        id: "short_outputs",
        message: format!("{short} of {completed} answers ended before {target} tokens (mean {mean:.0}): {why}"),
        evidence: json!({"short": short, "completed": completed, "mean_output_len": mean, "target": target,
            "length_ask": ask.label()}),
    })
}

/// Some requests failed; say how, by class.
pub(crate) fn failures(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
    let mut by_class = std::collections::BTreeMap::<String, usize>::new();
    for level in levels {
        for (class, count) in &level.stats.errors {
            *by_class.entry(class.clone()).or_default() += count;
        }
    }
    let failed: usize = by_class.values().sum();
    if failed == 0 {
        return None;
    }
    let total: usize = levels
        .iter()
        .map(|l| l.stats.completed + l.stats.failed)
        .sum();
    let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} x{n}")).collect();
    Some(Diagnosis {
        id: "failures",
        message: format!(
            "{failed} of {total} requests failed ({})",
            classes.join(", ")
        ),
        evidence: json!({"failed": failed, "total": total, "by_class": by_class}),
    })
}

/// Requests that failed for the client's own limits, not the server's:
/// no file descriptor (`client_fd_limit`) or no local port
/// (`client_ports_exhausted`), by level.
pub(crate) fn client_limits(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
    let count =
        |level: &LevelView<'_>, key: &str| level.stats.errors.get(key).copied().unwrap_or(0);
    let mut said = Vec::new();
    let mut evidence = serde_json::Map::new();
    for (key, what, fix) in [
        (
            "client_fd_limit",
            "had no file descriptor for a connection",
            "the client's open-file limit, not the server: raise it (ulimit -n; the hard limit in /etc/security/limits.conf) or lower --concurrency",
        ),
        (
            "client_ports_exhausted",
            "had no local port to connect from",
            "the client's ephemeral ports, spent by connection churn, not the server: widen net.ipv4.ip_local_port_range, keep connections alive, or spread the load over more client addresses",
        ),
    ] {
        let by_level: Vec<(u32, usize)> = levels
            .iter()
            .map(|l| (l.concurrency, count(l, key)))
            .filter(|(_, n)| *n > 0)
            .collect();
        if by_level.is_empty() {
            continue;
        }
        let total: usize = by_level.iter().map(|(_, n)| n).sum();
        let at: Vec<String> = by_level
            .iter()
            .map(|(c, n)| format!("{n} at {}", streams(*c)))
            .collect();
        said.push(format!("{total} requests {what} ({}): {fix}", at.join(", ")));
        evidence.insert(key.into(), json!(total));
    }
    (!said.is_empty()).then(|| Diagnosis {
        id: "client_limits",
        message: said.join("; "),
        evidence: Value::Object(evidence),
    })
}

/// One concurrency says nothing about capacity.
pub(crate) fn single_level(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
    let mut distinct: Vec<u32> = levels.iter().map(|l| l.concurrency).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let [only] = distinct[..] else {
        return None;
    };
    let what = if only == 1 {
        "one stream"
    } else {
        "one concurrency"
    };
    Some(Diagnosis {
        id: "single_level",
        message: format!(
            "only concurrency {only} was measured: {what} says nothing about capacity; sweep several levels"
        ),
        evidence: json!({"concurrency": only}),
    })
}

/// No warmup: the first level pays for a cold model.
pub(crate) fn no_warmup(warmup_requests: u32) -> Option<Diagnosis> {
    (warmup_requests == 0).then(|| Diagnosis {
        id: "no_warmup",
        message: "no warmup requests were sent: the first level pays for a cold model \
                  (weights loading, graph capture, caches); keep --warmup above 0"
            .to_string(),
        evidence: json!({"warmup": 0}),
    })
}

/// The client is far from the server: the median connect + first byte of a
/// tiny request (`probe_ms`) is above 5 ms, or above 10% of the TTFT p50
/// (`ttft_p50_ms`, the lowest level's, when known).
pub(crate) fn client_far(probe_ms: f64, ttft_p50_ms: Option<f64>) -> Option<Diagnosis> {
    if !probe_ms.is_finite() || probe_ms < 0.0 {
        return None;
    }
    let share = ttft_p50_ms
        .filter(|p| p.is_finite() && *p > 0.0)
        .map(|p| probe_ms / p);
    let fires = probe_ms > CLIENT_FAR_MS || share.is_some_and(|s| s > CLIENT_FAR_TTFT_SHARE);
    if !fires {
        return None;
    }
    let of_ttft = match (share, ttft_p50_ms) {
        (Some(s), Some(p)) => format!(", {} of the TTFT p50 of {} ms", percent0(s), figure(p)),
        _ => String::new(),
    };
    Some(Diagnosis {
        id: "client_far",
        message: format!(
            "the client is {} ms from the server (connect + first byte of a tiny request){of_ttft}: \
             network time is inside every TTFT; run tokbench on the server or next to it",
            figure(probe_ms)
        ),
        evidence: json!({
            "connect_first_byte_ms": num(round_to(probe_ms, 3)),
            "ttft_p50_ms": opt_num(ttft_p50_ms.map(|v| round_to(v, 3))),
            "share_of_ttft": opt_num(share.map(|v| round_to(v, 4))),
            "limit_ms": CLIENT_FAR_MS,
            "limit_share_of_ttft": CLIENT_FAR_TTFT_SHARE,
        }),
    })
}

/// tokbench itself was busy: CPU above 80% of a core or event-loop lag p99
/// above 5 ms in any level.
pub(crate) fn client_saturated(loads: &[ClientLevelLoad]) -> Option<Diagnosis> {
    let busy: Vec<&ClientLevelLoad> = loads
        .iter()
        .filter(|l| {
            l.cpu_percent.is_some_and(|c| c > CLIENT_CPU_PERCENT_LIMIT)
                || l.loop_lag_ms_p99
                    .is_some_and(|g| g > CLIENT_LOOP_LAG_MS_LIMIT)
        })
        .collect();
    if busy.is_empty() {
        return None;
    }
    let mut cs: Vec<u32> = busy.iter().map(|l| l.concurrency).collect();
    cs.sort_unstable();
    cs.dedup();
    let at = match cs[..] {
        [one] => streams(one),
        _ => {
            let list: Vec<String> = cs.iter().map(u32::to_string).collect();
            format!("{} streams", list.join(", "))
        }
    };
    let max = |f: fn(&ClientLevelLoad) -> Option<f64>| {
        busy.iter()
            .filter_map(|l| f(l))
            .filter(|v| v.is_finite())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    let mut parts = Vec::new();
    if let Some(cpu) = max(|l| l.cpu_percent) {
        parts.push(format!("CPU up to {cpu:.0}% of a core"));
    }
    if let Some(lag) = max(|l| l.loop_lag_ms_p99) {
        parts.push(format!("event-loop lag p99 up to {} ms", figure(lag)));
    }
    let levels: Vec<Value> = busy
        .iter()
        .map(|l| {
            json!({"concurrency": l.concurrency, "cpu_percent": opt_num(l.cpu_percent),
                   "loop_lag_ms_p99": opt_num(l.loop_lag_ms_p99)})
        })
        .collect();
    // Over the CPU limit the client is its own bottleneck. Lag at little CPU is not
    // its own work: something else held the core. In between, it could be either.
    let message = match max(|l| l.cpu_percent) {
        Some(cpu) if cpu < CLIENT_LOW_CPU_PERCENT => format!(
            "the client was held up at {at} ({}) by other work on this machine, not its own: \
             those delays are inside these numbers; pin it apart from the server (taskset) or run it \
             on a quieter machine",
            parts.join(", ")
        ),
        Some(cpu) if cpu <= CLIENT_CPU_PERCENT_LIMIT => format!(
            "the client was busy or held up at {at} ({}): its delays are inside these numbers; \
             pin it apart from the server (taskset), run it on a quieter machine or with fewer streams",
            parts.join(", ")
        ),
        _ => format!(
            "the client itself was saturated at {at} ({}): its own delays are inside these numbers; \
             run it on a less busy machine or with fewer streams",
            parts.join(", ")
        ),
    };
    Some(Diagnosis {
        id: "client_saturated",
        message,
        evidence: json!({
            "cpu_percent_limit": CLIENT_CPU_PERCENT_LIMIT,
            "low_cpu_percent": CLIENT_LOW_CPU_PERCENT,
            "loop_lag_ms_limit": CLIENT_LOOP_LAG_MS_LIMIT,
            "levels": levels,
        }),
    })
}

/// The machine held tokbench's reads back: the p99 of user-space read time
/// minus the kernel's receive time is above 5 ms in a level. The latencies
/// of kernel-timed requests do not include that lag (src/load/rxtime/),
/// so this is a note on the machine, not a warning on the figures.
pub(crate) fn client_rx_lag(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
    let over: Vec<(u32, f64, f64)> = levels
        .iter()
        .filter_map(|l| {
            let lag = l.stats.client_rx_lag?;
            (lag.p99.is_finite() && lag.p99 > CLIENT_RX_LAG_MS_LIMIT).then_some((
                l.concurrency,
                lag.p99,
                lag.max,
            ))
        })
        .collect();
    let worst = over
        .iter()
        .map(|o| o.1)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))?;
    let evidence_levels: Vec<Value> = over
        .iter()
        .map(|&(c, p99, max)| {
            json!({"concurrency": c, "p99_ms": num(round_to(p99, 3)), "max_ms": num(round_to(max, 3))})
        })
        .collect();
    Some(Diagnosis {
        id: "client_rx_lag",
        message: format!(
            "this machine delayed tokbench's reads by p99 {} ms; latencies use the kernel's \
             receive time and are unaffected",
            figure(worst)
        ),
        evidence: json!({"limit_ms": CLIENT_RX_LAG_MS_LIMIT, "levels": evidence_levels}),
    })
}

/// Streaming that does not stream: answers of two or more tokens arrive in
/// a median of one or two reads and the median TTFT is within 10% of the
/// median E2EL.
pub(crate) fn buffered_stream(shapes: &[StreamShape]) -> Option<Diagnosis> {
    let multi: Vec<&StreamShape> = shapes
        .iter()
        .filter(|s| s.output_tokens >= 2 && s.ttft_ms.is_finite() && s.e2el_ms.is_finite())
        .collect();
    let reads = median(multi.iter().map(|s| f64::from(s.reads)))?;
    let ttft = median(multi.iter().map(|s| s.ttft_ms))?;
    let e2el = median(multi.iter().map(|s| s.e2el_ms))?;
    let fires = reads <= BUFFERED_MAX_READS
        && e2el > 0.0
        && (e2el - ttft).abs() <= BUFFERED_TTFT_SHARE * e2el;
    fires.then(|| Diagnosis {
        id: "buffered_stream",
        message: "the response is buffered between server and client; TTFT here is the total time \
                  (check proxies, e.g. nginx proxy_buffering, and that the server streams)"
            .to_string(),
        evidence: json!({
            "requests": multi.len(),
            "median_reads": reads,
            "ttft_p50_ms": num(round_to(ttft, 3)),
            "e2el_p50_ms": num(round_to(e2el, 3)),
        }),
    })
}

/// Chunks that carry several tokens each (speculative decoding, or a server
/// that sends its stream in batches): the inter-token gaps are then gaps
/// between chunks, not tokens. Fires at 1.1 tokens a chunk or more over
/// answers of two chunks or more; a buffered stream is its own check.
pub(crate) fn multi_token_chunks(shapes: &[StreamShape]) -> Option<Diagnosis> {
    let (tokens, chunks, several) =
        shapes
            .iter()
            .filter(|s| s.chunks >= 2)
            .fold((0u64, 0u64, 0usize), |(t, c, n), s| {
                (
                    t + u64::from(s.output_tokens),
                    c + u64::from(s.chunks),
                    n + usize::from(s.output_tokens > s.chunks),
                )
            });
    if chunks == 0 {
        return None;
    }
    let per_chunk = tokens as f64 / chunks as f64;
    (per_chunk >= MULTI_TOKEN_CHUNKS).then(|| Diagnosis {
        id: "multi_token_chunks",
        message: format!(
            "answers arrived {per_chunk:.2} tokens a chunk ({several} answers had chunks of several tokens): ITL here is the gap between chunks, not tokens; TPOT is the per-token figure (speculative decoding, or a server that batches its stream)"
        ),
        evidence: json!({
            "tokens_per_chunk": num(round_to(per_chunk, 3)),
            "answers_with_multi_token_chunks": several,
            "tokens": tokens, "chunks": chunks,
        }),
    })
}

/// Tokens a chunk from which chunks are said to carry several.
const MULTI_TOKEN_CHUNKS: f64 = 1.1;

/// Rounds of one level differ by more than 15% (output throughput or p50 TTFT).
pub(crate) fn rounds_spread(spreads: &[RoundsSpread]) -> Option<Diagnosis> {
    let noisy: Vec<&RoundsSpread> = spreads.iter().filter(|s| s.is_noisy()).collect();
    let worst = noisy
        .iter()
        .filter_map(|s| s.max_spread())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))?;
    Some(Diagnosis {
        id: "rounds_spread",
        message: format!(
            "results vary by {} between rounds: the machine is noisy or throttling; check before trusting them",
            percent0(worst)
        ),
        evidence: json!({
            "limit": ROUNDS_SPREAD_LIMIT,
            "max_spread": num(round_to(worst, 4)),
            "levels": noisy.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
        }),
    })
}

/// One round per level: suggest rounds.
pub(crate) fn single_round(rounds: u32) -> Option<Diagnosis> {
    (rounds == 1).then(|| Diagnosis {
        id: "single_round",
        message: "one round per level: run --rounds 3 to see how stable the numbers are"
            .to_string(),
        evidence: json!({"rounds": 1}),
    })
}

/// The sweep's throughput never rises 10% above its lowest level.
pub(crate) fn no_rise(decision: &Decision) -> Option<Diagnosis> {
    let points = &decision.points;
    if !is_flat(points) {
        return None;
    }
    let first = points.first()?;
    Some(Diagnosis {
        id: "no_rise",
        message: no_rise_message(first.concurrency),
        evidence: json!({
            "concurrency": points.iter().map(|p| p.concurrency).collect::<Vec<_>>(),
            "output_throughput": points.iter().map(|p| num(round_to(p.figures.output_throughput, 3))).collect::<Vec<_>>(),
            "p99_ttft_ms": points.iter().map(|p| opt_num(p.figures.p99_ttft_ms.map(|v| round_to(v, 3)))).collect::<Vec<_>>(),
        }),
    })
}

/// Levels were measured and none met the SLO.
pub(crate) fn no_capacity(decision: &Decision) -> Option<Diagnosis> {
    let none = decision.capacity.as_ref().err().filter(|n| n.slo_not_met)?;
    let lowest = decision.points.first()?;
    Some(Diagnosis {
        id: "no_capacity",
        message: none.reason.clone(),
        evidence: json!({
            "lowest_concurrency": lowest.concurrency,
            "p99_ttft_ms": opt_num(lowest.figures.p99_ttft_ms),
            "stream_decode_tok_s": opt_num(lowest.figures.stream_decode_tok_s),
            "p99_tpot_ms": opt_num(lowest.figures.p99_tpot_ms),
            "error_rate": num(lowest.figures.error_rate),
        }),
    })
}

#[cfg(test)]
#[path = "diagnose_tests.rs"]
mod tests;
