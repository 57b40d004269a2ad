//! Fitting a sweep to the box it meets (docs/measure.md, "A run that fits
//! the box"): what a plan costs at the speed the warmup measured, how long
//! the answers may be for the first two levels to fit a budget, whether a
//! level can still fit what is left of it, and the words for each.
//!
//! The model is deliberately plain. Before any level is measured, the
//! server is assumed to serve one stream at a time at the warmup's speed
//! (the box the budget protects: one slot of a slow model). Once a level is
//! measured, a higher level is assumed to get no more than that level's
//! throughput ([`Gain::None`], the longest it can take) or all of its
//! streams' worth ([`Gain::Full`], the shortest). Every figure is
//! recomputed after each level, so the guess only has to hold until then.

use std::time::Duration;

use crate::record::RequestRecord;
use crate::stats::metrics::stream_decode_tok_s;
use crate::stats::percentile::median;
use crate::stats::steady::MIN_RATES;

/// The budget of a sweep that names no count, duration or budget: long
/// enough that a fast server runs its whole plan as before, short enough
/// that a 10 tok/s box answers in one sitting.
pub(crate) const DEFAULT_BUDGET: Duration = Duration::from_secs(20 * 60);
/// The shortest budget taken: a warmup and one level of short answers.
pub(crate) const MIN_BUDGET: Duration = Duration::from_secs(10);
/// The shortest answers a fitted run asks for: below this, decode speed is
/// measured on too few tokens to mean anything.
pub(crate) const MIN_OUTPUT_LEN: u32 = 32;
/// A fitted level ends no earlier than this many completions, whatever its
/// concurrency: never judged on a handful of requests.
pub(crate) const MIN_LEVEL_COMPLETIONS: u32 = 3;
/// Warmup answers of a fitted run are at most this long: the warmup
/// measures speed and calibrates prompts, and on a 10 tok/s box a full
/// 1,024-token answer would cost minutes for nothing.
pub(crate) const WARMUP_OUTPUT_LEN: u32 = 64;
/// A fixed plan expected to run longer than this gets a budget suggested.
pub(crate) const SUGGEST_BUDGET_OVER: Duration = Duration::from_secs(30 * 60);
/// Share of the budget left that the first two levels may plan on: the
/// rest is slack for their drain and for the levels after them.
const FIRST_TWO_SHARE: f64 = 0.7;

/// One stream's speed on this server, as the warmup measured it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speed {
    /// Median time to first token, seconds.
    pub ttft_s: f64,
    /// Output tokens a second once a stream streams (1000 / median TPOT).
    pub decode_tok_s: f64,
}

impl Speed {
    /// From the warmup's successful requests: None when none streamed more
    /// than one token (no decode speed to go on).
    pub(crate) fn of(records: &[RequestRecord]) -> Option<Speed> {
        let ok = || records.iter().filter(|r| r.is_ok());
        let ttft_s = median(ok().filter_map(|r| r.ttft).map(|t| t.as_secs_f64()))?;
        let tpot_ms = median(ok().filter_map(|r| r.tpot).map(|t| t.as_secs_f64() * 1e3));
        let decode_tok_s = stream_decode_tok_s(tpot_ms)?;
        Some(Speed {
            ttft_s,
            decode_tok_s,
        })
    }

    /// Seconds one request of `output_len` tokens takes alone.
    pub(crate) fn request_s(&self, output_len: u32) -> f64 {
        self.ttft_s + f64::from(output_len.saturating_sub(1)) / self.decode_tok_s
    }
}

/// A level that was measured: its streams and its output tok/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub concurrency: u32,
    pub tok_s: f64,
}

/// What a level above the last measured one is assumed to gain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gain {
    /// No more throughput than the last level (before any: one stream at a
    /// time). The longest the level can take on a server that does not
    /// slow down under load.
    None,
    /// Throughput in proportion to streams: the shortest it can take.
    Full,
}

/// Seconds a closed level of `requests` at `concurrency` streams takes.
pub(crate) fn level_seconds(
    concurrency: u32,
    requests: u32,
    output_len: u32,
    speed: Speed,
    last: Option<Measured>,
    gain: Gain,
) -> f64 {
    let n = f64::from(requests);
    match last.filter(|m| m.tok_s > 0.0 && m.concurrency > 0) {
        None => {
            let at_once = match gain {
                Gain::None => 1.0,
                Gain::Full => f64::from(concurrency.clamp(1, requests.max(1))),
            };
            (n / at_once).ceil() * speed.request_s(output_len)
        }
        Some(m) => {
            let scale = match gain {
                Gain::None => 1.0,
                Gain::Full => (f64::from(concurrency) / f64::from(m.concurrency)).max(1.0),
            };
            // The measured figure already holds the prefill of every
            // request but the first's wait.
            speed.ttft_s + n * f64::from(output_len) / (m.tok_s * scale)
        }
    }
}

/// Completions a fitted level waits for before it may end steady: the
/// steady rule's per stream, and never fewer than [`MIN_LEVEL_COMPLETIONS`].
pub(crate) fn floor_completions(concurrency: u32, per_stream: u32) -> u32 {
    concurrency
        .saturating_mul(per_stream.max(1))
        .max(MIN_LEVEL_COMPLETIONS)
}

/// Requests a fitted level is expected to complete: its floor, or its
/// first wave and three requests past it (what its requests' own rates
/// are judged on, `stats::steady::RequestRates`) where that is more; then
/// the other streams' requests still in flight, which finish and count (a
/// closed loop always has its streams out); never more than its `cap`
/// (`--prompts-per-stream`).
pub(crate) fn fitted_requests(concurrency: u32, per_stream: u32, cap: u32) -> u32 {
    floor_completions(concurrency, per_stream)
        .max(concurrency.saturating_add(MIN_RATES))
        .saturating_add(concurrency.saturating_sub(1))
        .min(cap.max(1))
}

/// What a plan (or what is left of it) costs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PlanCost {
    pub levels: usize,
    pub requests: u64,
    pub output_tokens: u64,
    pub seconds: f64,
}

/// The cost of `levels` (concurrency, requests), run one after another.
pub(crate) fn plan_cost(
    levels: &[(u32, u32)],
    output_len: u32,
    speed: Speed,
    last: Option<Measured>,
) -> PlanCost {
    levels.iter().fold(PlanCost::default(), |cost, &(c, n)| {
        // Each level is guessed from the last measured one: a fixed plan's
        // later levels are not measured before it starts.
        PlanCost {
            levels: cost.levels + 1,
            requests: cost.requests + u64::from(n),
            output_tokens: cost.output_tokens + u64::from(n) * u64::from(output_len),
            seconds: cost.seconds + level_seconds(c, n, output_len, speed, last, Gain::None),
        }
    })
}

/// The answer length that lets the first two levels of a fitted plan
/// (`first_two`: concurrency and [`fitted_requests`]) fit `left_s` seconds
/// when served one stream at a time; None when `output_len` already fits.
/// Rounded down to a multiple of 16, and never under [`MIN_OUTPUT_LEN`].
pub(crate) fn fitted_output_len(
    first_two: &[(u32, u32)],
    output_len: u32,
    speed: Speed,
    left_s: f64,
) -> Option<u32> {
    let need = plan_cost(first_two, output_len, speed, None).seconds;
    let room = FIRST_TWO_SHARE * left_s;
    if need <= room || output_len <= MIN_OUTPUT_LEN {
        return None;
    }
    let requests: f64 = first_two.iter().map(|&(_, n)| f64::from(n)).sum();
    // room = requests x (ttft + (len - 1) / decode), solved for len.
    let per_request = room / requests.max(1.0) - speed.ttft_s;
    let len = 1.0 + per_request * speed.decode_tok_s;
    // A hair over, so that a whole number computed as 383.9999 is 384.
    let len = if len.is_finite() {
        (len + 1e-6).max(0.0)
    } else {
        0.0
    };
    let len = ((len as u32) / 16 * 16).max(MIN_OUTPUT_LEN);
    (len < output_len).then_some(len)
}

/// The budget that would fit a plan whose first two levels cost `seconds`
/// one stream at a time: with the drain's slack, rounded up to 5 minutes.
pub(crate) fn budget_that_fits(seconds: f64) -> Duration {
    let with_slack = (seconds / FIRST_TWO_SHARE).max(1.0);
    let five = 300.0;
    Duration::from_secs(((with_slack / five).ceil() * five) as u64)
}

/// A stretch of time in words: `45 s`, `17 min`, `2.5 h`, `70 h`.
pub(crate) fn duration_words(seconds: f64) -> String {
    let s = if seconds.is_finite() {
        seconds.max(0.0)
    } else {
        0.0
    };
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 90.0 * 60.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 10.0 * 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} h", s / 3600.0)
    }
}

/// A duration as the flags take it: `90s`, `15m`, `9m59s`, `1h`, `1h30m`
/// (seconds alone under two minutes).
pub(crate) fn flag_words(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        return format!("{s}s");
    }
    let parts = [(s / 3600, "h"), ((s % 3600) / 60, "m"), (s % 60, "s")];
    parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect()
}

/// Where a fitted run's budget came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetFrom {
    /// The user gave none: the default.
    Default,
    /// `--budget`.
    Given,
    /// A tune setting's share of the tune's `--budget`.
    TuneShare,
}

/// A fitted run's budget in words: `the default budget of 20m`, `the given
/// budget of 4m`, `this setting's share of the tune's budget, 9m59s`.
pub(crate) fn budget_words(budget: Duration, from: BudgetFrom) -> String {
    let d = flag_words(budget);
    match from {
        BudgetFrom::Default => format!("the default budget of {d}"),
        BudgetFrom::Given => format!("the given budget of {d}"),
        BudgetFrom::TuneShare => format!("this setting's share of the tune's budget, {d}"),
    }
}

/// Output tokens in words: `14,336`, `2.5 M`.
pub(crate) fn tokens_words(tokens: u64) -> String {
    if tokens >= 1_000_000 {
        format!("{:.1} M", tokens as f64 / 1e6)
    } else {
        crate::fmt::grouped(tokens)
    }
}

/// Why a planned level ended, saved as its `end_reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelEnd {
    /// Enough completions and a settled throughput.
    Steady,
    /// It sent its count (a cap, for a fitted level that never settled).
    Count,
    /// The budget ran out in it: partial.
    Budget,
}

impl LevelEnd {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LevelEnd::Steady => "steady",
            LevelEnd::Count => "count",
            LevelEnd::Budget => "budget",
        }
    }
}

/// Why planned levels were not run.
#[derive(Clone, Debug, PartialEq)]
pub enum SkipReason {
    /// A step from `from` to `to` streams gained under the knee threshold
    /// while p99 TTFT grew at least the knee's factor.
    PastKnee { from: u32, to: u32 },
    /// What is left of the budget cannot hold the next level, even if it
    /// gained with every stream.
    Budget { left_s: f64, needs_s: f64 },
    /// The budget ran out; `cut`: the level it cut, saved partial.
    Spent { budget: Duration, cut: Option<u32> },
}

impl SkipReason {
    /// Saved as each skipped level's `reason`.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            SkipReason::PastKnee { .. } => "past knee",
            SkipReason::Budget { .. } | SkipReason::Spent { .. } => "budget",
        }
    }

    /// The line said when levels are skipped:
    /// `skipped 64, 128: past the knee at 8 -> 16`.
    pub(crate) fn line(&self, skipped: &[u32]) -> String {
        let list = skipped
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            SkipReason::PastKnee { from, to } => {
                format!("skipped {list}: past the knee at {from} -> {to}")
            }
            SkipReason::Budget { left_s, needs_s } => format!(
                "skipped {list}: the budget has {} left and level {} needs at least {}",
                duration_words(*left_s),
                skipped.first().copied().unwrap_or(0),
                duration_words(*needs_s)
            ),
            SkipReason::Spent { budget, cut } => {
                let cut =
                    cut.map_or_else(String::new, |c| format!(": level {c} is saved as partial"));
                let skipped = if skipped.is_empty() {
                    String::new()
                } else {
                    format!("; skipped {list}")
                };
                format!(
                    "the budget of {} is spent{cut}{skipped}",
                    flag_words(*budget)
                )
            }
        }
    }
}

/// The line said after the warmup, what the plan will cost, and its
/// expected seconds.
/// `fitted`: levels end when steady within that budget, in words
/// ([`budget_words`]), so only the first two levels are counted, the knee
/// being expected there on a server that serves one stream at a time.
pub(crate) fn estimate_line(
    levels: &[(u32, u32)],
    output_len: u32,
    speed: Speed,
    fitted: Option<&str>,
) -> (String, f64) {
    let at = format!("{:.1} tok/s per stream", speed.decode_tok_s);
    match fitted {
        None => {
            let cost = plan_cost(levels, output_len, speed, None);
            let line = format!(
                "this plan: {} {}, {} {}, {} output tokens: about {} at {at} if the server serves one stream at a time",
                cost.levels,
                if cost.levels == 1 { "level" } else { "levels" },
                crate::fmt::grouped(cost.requests),
                if cost.requests == 1 { "request" } else { "requests" },
                tokens_words(cost.output_tokens),
                duration_words(cost.seconds)
            );
            (line, cost.seconds)
        }
        Some(budget) => {
            let first_two = &levels[..levels.len().min(2)];
            let cost = plan_cost(first_two, output_len, speed, None);
            let names = first_two
                .iter()
                .map(|(c, _)| c.to_string())
                .collect::<Vec<_>>()
                .join(" and ");
            let rest = levels
                .get(2..)
                .filter(|r| !r.is_empty())
                .map(|r| {
                    let list = r
                        .iter()
                        .map(|(c, _)| c.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!(", then {list} only while throughput still gains")
                })
                .unwrap_or_default();
            let line = format!(
                "this plan: about {} for level{} {names} ({} requests, {} output tokens) at {at} if the server serves one stream at a time{rest}; each level ends once steady, within {budget}",
                duration_words(cost.seconds),
                if first_two.len() == 1 { "" } else { "s" },
                crate::fmt::grouped(cost.requests),
                tokens_words(cost.output_tokens),
            );
            (line, cost.seconds)
        }
    }
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
