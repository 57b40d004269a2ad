//! Checks for the ways a benchmark measures the wrong thing (docs/architecture.md
//! section 1, issue 5 item 5). Each returns a diagnosis only when it fires;
//! `diagnose_run` runs them all over one `DiagnoseInput`.

use serde_json::{json, Value};

use super::decide::{is_flat, no_rise_message, Decision};
use super::rounds::{RoundsSpread, ROUNDS_SPREAD_LIMIT};
use super::words::{figure, median, num, opt_num, percent0, round_to, streams};
use crate::record::RequestRecord;
use crate::stats::summary::LevelStats;

/// Prompt lengths further than this from the target make levels incomparable.
pub const INPUT_LEN_TOLERANCE: f64 = 0.05;
/// Mean output below this share of the requested length fires `short_outputs`.
pub const SHORT_OUTPUT_SHARE: f64 = 0.9;
/// Connect + first byte above this many ms fires `client_far` ...
pub const CLIENT_FAR_MS: f64 = 5.0;
/// ... and so does one above this share of the TTFT p50.
pub const CLIENT_FAR_TTFT_SHARE: f64 = 0.10;
/// Client CPU above this (percent of one core) fires `client_saturated` ...
pub const CLIENT_CPU_PERCENT_LIMIT: f64 = 80.0;
/// ... and so does an event-loop lag p99 above this many ms.
pub const CLIENT_LOOP_LAG_MS_LIMIT: f64 = 5.0;
/// A client receive lag p99 above this many ms fires `client_rx_lag`.
pub const CLIENT_RX_LAG_MS_LIMIT: f64 = 5.0;
/// Event-loop lag while the client's CPU stays under this share of a core is
/// taken as other work holding the core, not the client's own.
pub const CLIENT_LOW_CPU_PERCENT: f64 = 25.0;
/// A median of at most this many reads per answer looks buffered ...
pub const BUFFERED_MAX_READS: f64 = 2.0;
/// ... when the median TTFT is also within this share of the median E2EL.
pub const BUFFERED_TTFT_SHARE: f64 = 0.10;

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    pub id: &'static str,
    pub message: String,
    pub evidence: Value,
}

impl Diagnosis {
    pub fn to_json(&self) -> Value {
        json!({"id": self.id, "message": self.message, "evidence": self.evidence})
    }
}

/// A finished level as the checks see it.
pub struct LevelView<'a> {
    pub concurrency: u32,
    pub stats: &'a LevelStats,
}

/// What the client itself cost during one level (the level file's `client`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientLevelLoad {
    pub concurrency: u32,
    /// tokbench's CPU time over the level's wall time, in percent of one core.
    pub cpu_percent: Option<f64>,
    pub loop_lag_ms_p99: Option<f64>,
}

/// How one answer arrived, for `buffered_stream`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamShape {
    /// Socket reads (or, lacking those, output-carrying chunks) that carried output.
    pub reads: u32,
    pub output_tokens: u32,
    pub ttft_ms: f64,
    pub e2el_ms: f64,
}

impl StreamShape {
    /// From a completed record and its socket reads that carried output; `None`
    /// for a request that failed or lacks TTFT or E2EL.
    pub fn from_record(r: &RequestRecord) -> Option<StreamShape> {
        if !r.is_ok() {
            return None;
        }
        Some(StreamShape {
            reads: r.output_reads,
            output_tokens: r.output_tokens,
            ttft_ms: r.ttft?.as_secs_f64() * 1000.0,
            e2el_ms: r.e2el?.as_secs_f64() * 1000.0,
        })
    }
}

/// Everything the checks need, passed once. Fields left at their default
/// (empty, `None`, 0) skip the checks that need them.
#[derive(Default)]
pub struct DiagnoseInput<'a> {
    /// The levels to judge (the recorder passes the complete ones).
    pub levels: &'a [LevelView<'a>],
    /// Requested prompt and output lengths, in server tokens (0: unknown).
    pub input_target: u32,
    pub output_target: u32,
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
pub fn diagnose(levels: &[LevelView<'_>], input_target: u32, output_target: u32) -> Vec<Diagnosis> {
    diagnose_run(&DiagnoseInput {
        levels,
        input_target,
        output_target,
        ..DiagnoseInput::default()
    })
}

/// Run every check; only those that fire are returned, in a fixed order.
pub fn diagnose_run(input: &DiagnoseInput<'_>) -> Vec<Diagnosis> {
    let levels = input.levels;
    // The unloaded TTFT: the lowest concurrency that has TTFT samples.
    let base_ttft_p50 = levels
        .iter()
        .filter_map(|l| l.stats.ttft.as_ref().map(|d| (l.concurrency, d.median)))
        .min_by_key(|(c, _)| *c)
        .map(|(_, p50)| p50);
    [
        input_len_off_target(levels, input.input_target),
        short_outputs(levels, input.output_target),
        failures(levels),
        single_level(levels),
        input.warmup_requests.and_then(no_warmup),
        input
            .connect_probe_ms
            .and_then(|ms| client_far(ms, base_ttft_p50)),
        client_saturated(input.client_loads),
        client_rx_lag(levels),
        buffered_stream(input.stream_shapes),
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

/// The server saw prompts of a different length than asked for.
pub fn input_len_off_target(levels: &[LevelView<'_>], target: u32) -> Option<Diagnosis> {
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
/// ignore_eos, or a server limit). The evidence keeps the count of short ones.
pub fn short_outputs(levels: &[LevelView<'_>], target: u32) -> Option<Diagnosis> {
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
    (mean < SHORT_OUTPUT_SHARE * f64::from(target)).then(|| Diagnosis {
        id: "short_outputs",
        message: format!(
            "{short} of {completed} answers ended before {target} tokens (mean {mean:.0}): \
             numbers at different output lengths are not comparable; use ignore_eos where the server supports it"
        ),
        evidence: json!({"short": short, "completed": completed, "mean_output_len": mean, "target": target}),
    })
}

/// Some requests failed; say how, by class.
pub fn failures(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
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

/// One concurrency says nothing about capacity.
pub fn single_level(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
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
pub fn no_warmup(warmup_requests: u32) -> Option<Diagnosis> {
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
pub fn client_far(probe_ms: f64, ttft_p50_ms: Option<f64>) -> Option<Diagnosis> {
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
pub fn client_saturated(loads: &[ClientLevelLoad]) -> Option<Diagnosis> {
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
/// of kernel-timed requests do not include that lag (src/load/rxtime.rs),
/// so this is a note on the machine, not a warning on the figures.
pub fn client_rx_lag(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
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
pub fn buffered_stream(shapes: &[StreamShape]) -> Option<Diagnosis> {
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

/// Rounds of one level differ by more than 15% (output throughput or p50 TTFT).
pub fn rounds_spread(spreads: &[RoundsSpread]) -> Option<Diagnosis> {
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
pub fn single_round(rounds: u32) -> Option<Diagnosis> {
    (rounds == 1).then(|| Diagnosis {
        id: "single_round",
        message: "one round per level: run --rounds 3 to see how stable the numbers are"
            .to_string(),
        evidence: json!({"rounds": 1}),
    })
}

/// The sweep's throughput never rises 10% above its lowest level.
pub fn no_rise(decision: &Decision) -> Option<Diagnosis> {
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
            "output_throughput": points.iter().map(|p| num(round_to(p.output_throughput, 3))).collect::<Vec<_>>(),
            "p99_ttft_ms": points.iter().map(|p| opt_num(p.p99_ttft_ms.map(|v| round_to(v, 3)))).collect::<Vec<_>>(),
        }),
    })
}

/// Levels were measured and none met the SLO.
pub fn no_capacity(decision: &Decision) -> Option<Diagnosis> {
    let none = decision.capacity.as_ref().err().filter(|n| n.slo_not_met)?;
    let lowest = decision.points.first()?;
    Some(Diagnosis {
        id: "no_capacity",
        message: none.reason.clone(),
        evidence: json!({
            "lowest_concurrency": lowest.concurrency,
            "p99_ttft_ms": opt_num(lowest.p99_ttft_ms),
            "stream_decode_tok_s": opt_num(lowest.stream_decode_tok_s),
            "p99_tpot_ms": opt_num(lowest.p99_tpot_ms),
            "error_rate": num(lowest.error_rate),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{level_stats, MinMeanMax};

    fn stats_with(completed: usize, input_mean: f64, short: usize) -> LevelStats {
        let mut s = level_stats(&[], 1, &[50.0]);
        s.completed = completed;
        s.input_len = Some(MinMeanMax {
            min: input_mean - 1.0,
            mean: input_mean,
            max: input_mean + 1.0,
        });
        s.output_len = Some(MinMeanMax {
            min: 10.0,
            mean: 50.0,
            max: 64.0,
        });
        s.short_outputs = short;
        s
    }

    #[test]
    fn input_length_fires_only_past_five_percent() {
        // 10 requests at mean 1060 and 10 at 1090: pooled mean 1075, 4.98% over 1024 -> quiet.
        let a = stats_with(10, 1060.0, 0);
        let b = stats_with(10, 1090.0, 0);
        let levels = [
            LevelView {
                concurrency: 1,
                stats: &a,
            },
            LevelView {
                concurrency: 4,
                stats: &b,
            },
        ];
        assert!(input_len_off_target(&levels, 1024).is_none());
        // 1076 is 5.08% over 1024 -> fires, and says +5%.
        let c = stats_with(10, 1076.0, 0);
        let d = input_len_off_target(
            &[LevelView {
                concurrency: 1,
                stats: &c,
            }],
            1024,
        )
        .expect("fires");
        assert_eq!(d.id, "input_len_off_target");
        assert!(d.message.contains("+5%"), "{}", d.message);
    }

    #[test]
    fn short_outputs_and_single_level() {
        let a = stats_with(20, 128.0, 3);
        let levels = [LevelView {
            concurrency: 4,
            stats: &a,
        }];
        let d = short_outputs(&levels, 64).expect("fires");
        assert!(
            d.message
                .starts_with("3 of 20 answers ended before 64 tokens (mean 50)"),
            "{}",
            d.message
        );
        assert_eq!(single_level(&levels).map(|d| d.id), Some("single_level"));
        // Full-length answers (mean 64 of 64): quiet.
        let mut b = stats_with(20, 128.0, 0);
        b.output_len = Some(MinMeanMax {
            min: 64.0,
            mean: 64.0,
            max: 64.0,
        });
        let two = [
            LevelView {
                concurrency: 4,
                stats: &b,
            },
            LevelView {
                concurrency: 8,
                stats: &b,
            },
        ];
        assert!(short_outputs(&two, 64).is_none());
        assert!(single_level(&two).is_none());
    }

    #[test]
    fn failures_sum_classes_over_levels() {
        let mut a = stats_with(8, 10.0, 0);
        a.failed = 2;
        a.errors.insert("http_503".into(), 2);
        let mut b = stats_with(9, 10.0, 0);
        b.failed = 1;
        b.errors.insert("http_503".into(), 1);
        let levels = [
            LevelView {
                concurrency: 1,
                stats: &a,
            },
            LevelView {
                concurrency: 2,
                stats: &b,
            },
        ];
        let d = failures(&levels).expect("fires");
        assert_eq!(d.message, "3 of 20 requests failed (http_503 x3)");
    }

    #[test]
    fn short_outputs_fire_below_ninety_percent_of_requested() {
        // Mean 60 of 64 asked = 93.75%: a few short answers, but quiet.
        let mut a = stats_with(20, 128.0, 3);
        a.output_len = Some(MinMeanMax {
            min: 30.0,
            mean: 60.0,
            max: 64.0,
        });
        let levels = [LevelView {
            concurrency: 4,
            stats: &a,
        }];
        assert!(short_outputs(&levels, 64).is_none());
        // Mean 57 of 64 = 89.1% < 90%: fires, still counting the short ones.
        a.output_len = Some(MinMeanMax {
            min: 30.0,
            mean: 57.0,
            max: 64.0,
        });
        let levels = [LevelView {
            concurrency: 4,
            stats: &a,
        }];
        let d = short_outputs(&levels, 64).expect("fires");
        assert_eq!(d.evidence["short"], json!(3));
        assert_eq!(d.evidence["mean_output_len"], json!(57.0));
    }

    #[test]
    fn single_level_at_one_stream_says_so() {
        let a = stats_with(20, 128.0, 0);
        let d = single_level(&[LevelView {
            concurrency: 1,
            stats: &a,
        }])
        .expect("fires");
        assert_eq!(
            d.message,
            "only concurrency 1 was measured: one stream says nothing about capacity; sweep several levels"
        );
        assert!(single_level(&[]).is_none());
    }

    #[test]
    fn warmup_and_rounds_suggestions() {
        assert_eq!(no_warmup(0).map(|d| d.id), Some("no_warmup"));
        assert!(no_warmup(4).is_none());
        let d = single_round(1).expect("fires");
        assert_eq!(
            d.message,
            "one round per level: run --rounds 3 to see how stable the numbers are"
        );
        assert!(single_round(3).is_none());
        assert!(single_round(0).is_none());
    }

    #[test]
    fn client_far_by_hand() {
        // 1.2 ms with TTFT p50 48 ms: 2.5% -> quiet.
        assert!(client_far(1.2, Some(48.0)).is_none());
        // 4 ms with TTFT p50 30 ms: 13% > 10% -> fires although under 5 ms.
        let d = client_far(4.0, Some(30.0)).expect("fires");
        assert_eq!(d.id, "client_far");
        assert!(
            d.message
                .starts_with("the client is 4.0 ms from the server (connect + first byte of a tiny request), 13% of the TTFT p50 of 30 ms"),
            "{}",
            d.message
        );
        // 6 ms with TTFT p50 2000 ms (0.3%): over 5 ms -> fires.
        assert!(client_far(6.0, Some(2000.0)).is_some());
        // No TTFT known: only the 5 ms rule.
        assert!(client_far(4.9, None).is_none());
        assert!(client_far(f64::NAN, Some(10.0)).is_none());
    }

    #[test]
    fn client_rx_lag_fires_over_five_ms_p99_with_the_issue_words() {
        use crate::stats::summary::RxLag;
        let with_lag = |p99: Option<f64>| {
            let mut s = stats_with(10, 100.0, 0);
            s.client_rx_lag = p99.map(|p99| RxLag {
                p50: 0.2,
                p99,
                max: p99 + 1.0,
                reads: 100,
            });
            s
        };
        let (quiet, edge, late, none) = (
            with_lag(Some(1.2)),
            with_lag(Some(5.0)),
            with_lag(Some(23.4)),
            with_lag(None),
        );
        let views = |s: &[&LevelStats]| -> Vec<(u32, LevelStats)> {
            s.iter()
                .enumerate()
                .map(|(i, s)| (1 << i, (*s).clone()))
                .collect()
        };
        let check = |stats: Vec<(u32, LevelStats)>| {
            let v: Vec<LevelView<'_>> = stats
                .iter()
                .map(|(c, s)| LevelView {
                    concurrency: *c,
                    stats: s,
                })
                .collect();
            client_rx_lag(&v)
        };
        assert!(check(views(&[&quiet, &edge, &none])).is_none());
        let d = check(views(&[&quiet, &late])).expect("fires");
        assert_eq!(d.id, "client_rx_lag");
        assert_eq!(
            d.message,
            "this machine delayed tokbench's reads by p99 23 ms; latencies use the kernel's \
             receive time and are unaffected"
        );
        assert_eq!(d.evidence["levels"][0]["concurrency"], 2);
        assert_eq!(d.evidence["levels"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn client_saturated_by_level() {
        let load = |concurrency, cpu, lag| ClientLevelLoad {
            concurrency,
            cpu_percent: Some(cpu),
            loop_lag_ms_p99: Some(lag),
        };
        let quiet = load(4, 35.0, 0.8);
        assert!(client_saturated(&[quiet]).is_none());
        let cpu = load(64, 93.0, 2.0);
        let lag = load(128, 70.0, 12.0);
        let d = client_saturated(&[quiet, cpu]).expect("fires");
        assert!(
            d.message.starts_with(
                "the client itself was saturated at 64 streams (CPU up to 93% of a core, event-loop lag p99 up to 2.0 ms)"
            ),
            "{}",
            d.message
        );
        let d = client_saturated(&[quiet, cpu, lag]).expect("fires");
        assert!(d.message.contains(
            "at 64, 128 streams (CPU up to 93% of a core, event-loop lag p99 up to 12 ms)"
        ));
        assert_eq!(d.evidence["levels"].as_array().map(Vec::len), Some(2));
        // Lag while the client's CPU stays low: something else held the core.
        let held_up = load(1, 2.0, 8.5);
        let d = client_saturated(&[quiet, held_up]).expect("fires");
        assert!(
            d.message.starts_with(
                "the client was held up at 1 stream (CPU up to 2% of a core, event-loop lag p99 up to 8.5 ms) by other work on this machine, not its own"
            ),
            "{}",
            d.message
        );
        // Between low and the limit: it could be either, and the message says so.
        let d = client_saturated(&[load(256, 79.0, 40.0)]).expect("fires");
        assert!(
            d.message.starts_with(
                "the client was busy or held up at 256 streams (CPU up to 79% of a core"
            ),
            "{}",
            d.message
        );
        let d = client_saturated(&[load(1, 25.0, 8.0)]).expect("fires");
        assert!(
            d.message.starts_with("the client was busy or held up"),
            "{}",
            d.message
        );
        // With one level over the CPU limit, it is the client's own load.
        let d = client_saturated(&[held_up, cpu]).expect("fires");
        assert!(d
            .message
            .starts_with("the client itself was saturated at 1, 64 streams"));
        // Exactly at the limits is not over them.
        let edge = load(8, 80.0, 5.0);
        assert!(client_saturated(&[edge]).is_none());
    }

    #[test]
    fn buffered_stream_by_hand() {
        let shape = |reads, ttft_ms, e2el_ms| StreamShape {
            reads,
            output_tokens: 64,
            ttft_ms,
            e2el_ms,
        };
        // Buffered: reads 1, 1, 2 (median 1); TTFT 950, 980, 1000 (median 980)
        // vs E2EL 1000, 1000, 1010 (median 1000): 20 <= 10% of 1000.
        let buffered = [
            shape(1, 950.0, 1000.0),
            shape(1, 980.0, 1000.0),
            shape(2, 1000.0, 1010.0),
        ];
        let d = buffered_stream(&buffered).expect("fires");
        assert!(d.message.starts_with(
            "the response is buffered between server and client; TTFT here is the total time"
        ));
        assert_eq!(d.evidence["median_reads"], json!(1.0));
        // Streaming: 64 reads, TTFT 50 of E2EL 1000.
        assert!(buffered_stream(&[shape(64, 50.0, 1000.0)]).is_none());
        // Two reads but TTFT 800 of 1000 (20% apart): not buffered by this rule.
        assert!(buffered_stream(&[shape(2, 800.0, 1000.0)]).is_none());
        // One-token answers say nothing.
        let one = StreamShape {
            reads: 1,
            output_tokens: 1,
            ttft_ms: 100.0,
            e2el_ms: 100.0,
        };
        assert!(buffered_stream(&[one]).is_none());
        assert!(buffered_stream(&[]).is_none());
    }

    #[test]
    fn rounds_spread_message() {
        use crate::analysis::decide::LevelPoint;
        use crate::analysis::rounds::rounds_spread as spreads_of;
        use crate::record::Mode;
        let round = |tput: f64| LevelPoint {
            concurrency: 16,
            kind: Mode::Planned,
            partial: false,
            output_throughput: tput,
            per_stream_tok_s: tput / 16.0,
            stream_decode_tok_s: None,
            p50_ttft_ms: Some(100.0),
            p99_ttft_ms: None,
            p99_tpot_ms: None,
            error_rate: 0.0,
        };
        // 1000, 1100, 1253: median 1100, (1253 - 1000) / 1100 = 23%.
        let noisy = spreads_of(&[round(1000.0), round(1100.0), round(1253.0)]);
        let d = rounds_spread(&noisy).expect("fires");
        assert_eq!(
            d.message,
            "results vary by 23% between rounds: the machine is noisy or throttling; check before trusting them"
        );
        // 1000, 1050, 1100: 100 / 1050 = 9.5% -> quiet.
        let quiet = spreads_of(&[round(1000.0), round(1050.0), round(1100.0)]);
        assert!(rounds_spread(&quiet).is_none());
    }

    #[test]
    fn diagnose_run_composes_everything() {
        use crate::analysis::decide::{decide, CapacitySlo, LevelPoint};
        use crate::record::Mode;
        let a = stats_with(20, 128.0, 0);
        let views = [LevelView {
            concurrency: 1,
            stats: &a,
        }];
        // Lowest level's p99 TTFT 61 ms against a 50 ms SLO: no capacity.
        let point = LevelPoint {
            concurrency: 1,
            kind: Mode::Planned,
            partial: false,
            output_throughput: 92.0,
            per_stream_tok_s: 92.0,
            stream_decode_tok_s: Some(92.0),
            p50_ttft_ms: Some(48.0),
            p99_ttft_ms: Some(61.0),
            p99_tpot_ms: None,
            error_rate: 0.0,
        };
        let slo = CapacitySlo {
            ttft_p99_ms: Some(50.0),
            ..CapacitySlo::default()
        };
        let decision = decide(&[point], &slo);
        let loads = [ClientLevelLoad {
            concurrency: 1,
            cpu_percent: Some(120.0),
            loop_lag_ms_p99: None,
        }];
        let input = DiagnoseInput {
            levels: &views,
            input_target: 128,
            output_target: 64,
            warmup_requests: Some(0),
            connect_probe_ms: Some(20.0),
            client_loads: &loads,
            rounds: 1,
            decision: Some(&decision),
            ..DiagnoseInput::default()
        };
        let ids: Vec<&str> = diagnose_run(&input).iter().map(|d| d.id).collect();
        // Output mean 50 of 64 = 78% -> short_outputs, even with no short count.
        assert_eq!(
            ids,
            [
                "short_outputs",
                "single_level",
                "no_warmup",
                "client_far",
                "client_saturated",
                "single_round",
                "no_capacity"
            ]
        );
        // The old three-argument entry point runs only the level checks.
        let ids: Vec<&str> = diagnose(&views, 128, 64).iter().map(|d| d.id).collect();
        assert_eq!(ids, ["short_outputs", "single_level"]);
    }
}
