//! The knee of the sweep and the capacity under an SLO (docs/decide.md, "From numbers to a decision",
//! issue 5 item 1).
//!
//! Rules:
//! - only finished (not partial) planned and search levels count, ordered by
//!   concurrency; several levels at one concurrency (rounds) count as their
//!   median, metric by metric; manual, rate and replay levels are ignored;
//! - between consecutive levels C1 < C2 the throughput gain per doubling is
//!   `(T2/T1)^(1/log2(C2/C1)) - 1` and the p99 TTFT growth `p99(C2)/p99(C1)`;
//!   the knee is the first step with a gain under 10% while p99 TTFT at least
//!   doubles;
//! - capacity is the highest level meeting every SLO (p99 TTFT when given,
//!   decode speed per stream, p99 TPOT when given, error rate under 1%);
//!   without a TTFT SLO it is also capped at the knee's `from_concurrency`;
//! - when the user gave no SLO and no level reaches the default reading
//!   speed, the knee alone judges: the same choice without the decode term
//!   ([`CapacityRule::KneeFallback`]).

use serde_json::{json, Value};

use super::words::{figure, median, num, opt_num, percent0, percent1, round_to, streams};
use crate::record::Mode;
use crate::stats::summary::LevelStats;

/// A step whose gain per doubling is below this may be the knee.
pub(crate) const KNEE_MAX_GAIN: f64 = 0.10;
/// ... when p99 TTFT grows at least this much over the step.
pub(crate) const KNEE_MIN_TTFT_GROWTH: f64 = 2.0;
/// A sweep whose peak is less than this far above its lowest level does not rise.
pub(crate) const NO_RISE_MAX_GAIN: f64 = 0.10;
/// Default reading-speed SLO, output tok/s per stream once it streams.
pub(crate) const DEFAULT_MIN_STREAM_TOK_S: f64 = 20.0;
/// Levels with this error rate or more do not meet the SLO.
pub(crate) const DEFAULT_MAX_ERROR_RATE: f64 = 0.01;

/// The figures a level is judged by: one level's own, or (in a
/// [`SweepPoint`]) the median of a concurrency's rounds, figure by figure.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// Total output tok/s of the level.
    pub output_throughput: f64,
    /// output_throughput / concurrency.
    pub per_stream_tok_s: f64,
    /// 1000 / median TPOT.
    pub stream_decode_tok_s: Option<f64>,
    pub p50_ttft_ms: Option<f64>,
    pub p99_ttft_ms: Option<f64>,
    pub p99_tpot_ms: Option<f64>,
    /// failed / (completed + failed), 0 with no request: see [`error_rate`].
    pub error_rate: f64,
}

impl Figures {
    /// From a level's statistics. p50 TTFT is the median; p99 TTFT and TPOT
    /// are `None` unless 99 was among the saved percentiles.
    pub(crate) fn from_stats(stats: &LevelStats) -> Figures {
        Figures {
            output_throughput: stats.output_throughput,
            per_stream_tok_s: stats.per_stream_tok_s,
            stream_decode_tok_s: stats.stream_decode_tok_s,
            p50_ttft_ms: stats.ttft.as_ref().map(|d| d.median),
            p99_ttft_ms: stats.ttft.as_ref().and_then(|d| d.percentile(99.0)),
            p99_tpot_ms: stats.tpot.as_ref().and_then(|d| d.percentile(99.0)),
            error_rate: error_rate(stats.completed as u64, stats.failed as u64),
        }
    }

    /// Each figure's median over `rounds` (a missing figure is left out of
    /// its median; a figure no round has is `None`, or 0 where it cannot be).
    fn median_of(rounds: &[&LevelPoint]) -> Figures {
        let m =
            |f: fn(&Figures) -> Option<f64>| median(rounds.iter().filter_map(|l| f(&l.figures)));
        Figures {
            output_throughput: m(|f| Some(f.output_throughput)).unwrap_or(0.0),
            per_stream_tok_s: m(|f| Some(f.per_stream_tok_s)).unwrap_or(0.0),
            stream_decode_tok_s: m(|f| f.stream_decode_tok_s),
            p50_ttft_ms: m(|f| f.p50_ttft_ms),
            p99_ttft_ms: m(|f| f.p99_ttft_ms),
            p99_tpot_ms: m(|f| f.p99_tpot_ms),
            error_rate: m(|f| Some(f.error_rate)).unwrap_or(0.0),
        }
    }
}

/// failed / (completed + failed): 0 for a level with no request, so that an
/// empty level is not judged a failing one.
pub(crate) fn error_rate(completed: u64, failed: u64) -> f64 {
    let total = completed + failed;
    if total > 0 {
        failed as f64 / total as f64
    } else {
        0.0
    }
}

/// One finished level, as the knee and capacity see it.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelPoint {
    pub concurrency: u32,
    pub kind: Mode,
    pub partial: bool,
    pub figures: Figures,
}

impl LevelPoint {
    /// From a level's statistics (see [`Figures::from_stats`]).
    pub(crate) fn from_stats(
        concurrency: u32,
        kind: Mode,
        partial: bool,
        stats: &LevelStats,
    ) -> LevelPoint {
        LevelPoint {
            concurrency,
            kind,
            partial,
            figures: Figures::from_stats(stats),
        }
    }
}

/// One concurrency of the sweep: the median of its rounds, metric by metric.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SweepPoint {
    pub concurrency: u32,
    /// How many finished levels were merged.
    pub rounds: usize,
    pub figures: Figures,
}

/// The levels a sweep counts: finished (not partial) planned and search
/// levels, by rising concurrency (run order kept within one), so that the
/// rounds of a concurrency stand together.
pub(crate) fn counted_levels(levels: &[LevelPoint]) -> Vec<&LevelPoint> {
    let mut counted: Vec<&LevelPoint> = levels
        .iter()
        .filter(|l| l.kind.is_sweep() && !l.partial)
        .collect();
    counted.sort_by_key(|l| l.concurrency);
    counted
}

/// The finished planned and search levels, one point per concurrency (the
/// median of its rounds, per metric), by rising concurrency.
pub(crate) fn sweep_points(levels: &[LevelPoint]) -> Vec<SweepPoint> {
    counted_levels(levels)
        .chunk_by(|a, b| a.concurrency == b.concurrency)
        .map(|rounds| SweepPoint {
            concurrency: rounds[0].concurrency,
            rounds: rounds.len(),
            figures: Figures::median_of(rounds),
        })
        .collect()
}

/// What one step between consecutive sweep points did.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    pub from_concurrency: u32,
    pub to_concurrency: u32,
    /// T2/T1 - 1 over the whole step.
    pub total_gain: Option<f64>,
    /// (T2/T1)^(1/log2(C2/C1)) - 1.
    pub gain_per_doubling: Option<f64>,
    /// p99(C2)/p99(C1).
    pub p99_ttft_growth: Option<f64>,
}

/// The steps between consecutive points (as `sweep_points` returns them).
/// A figure that cannot be computed (zero or missing denominators) is `None`.
pub(crate) fn steps(points: &[SweepPoint]) -> Vec<Step> {
    points
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let ratio = (a.figures.output_throughput > 0.0
                && a.figures.output_throughput.is_finite())
            .then(|| b.figures.output_throughput / a.figures.output_throughput)
            .filter(|r| r.is_finite());
            let doublings = (a.concurrency > 0 && b.concurrency > a.concurrency)
                .then(|| (f64::from(b.concurrency) / f64::from(a.concurrency)).log2());
            let gain_per_doubling = match (ratio, doublings) {
                (Some(r), Some(d)) => Some(r.powf(1.0 / d) - 1.0).filter(|g| g.is_finite()),
                _ => None,
            };
            let p99_ttft_growth = match (a.figures.p99_ttft_ms, b.figures.p99_ttft_ms) {
                (Some(x), Some(y)) if x > 0.0 => Some(y / x).filter(|g| g.is_finite()),
                _ => None,
            };
            Step {
                from_concurrency: a.concurrency,
                to_concurrency: b.concurrency,
                total_gain: ratio.map(|r| r - 1.0),
                gain_per_doubling,
                p99_ttft_growth,
            }
        })
        .collect()
}

/// Where more streams stop paying: the first step adding under 10%
/// throughput per doubling while p99 TTFT at least doubles.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Knee {
    pub from_concurrency: u32,
    pub to_concurrency: u32,
    /// Gain per doubling, a fraction (0.059 = 5.9%).
    pub throughput_gain: f64,
    pub p99_ttft_growth: f64,
    /// The whole sweep stays flat from its lowest level (the knee is its
    /// first step): a server that runs one request at a time.
    pub no_rise: bool,
    pub reason: String,
}

/// The knee's cause when only the client's view is known: a guess, which
/// the server's own gauges replace where they tell ([`Knee::told_by_server`]).
pub(crate) const GUESSED_CAUSE: &str = "KV cache or batch full, requests queue";

impl Knee {
    /// The cause the server's gauges tell, in place of the guess; a knee
    /// of another kind (no rise, past saturation) keeps its words.
    pub(crate) fn told_by_server(&mut self, cause: &str) {
        if let Some(head) = self.reason.strip_suffix(GUESSED_CAUSE) {
            self.reason = format!("{head}{cause}");
        }
    }

    /// The `knee` object of summary.json (docs/architecture.md section 5).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "from_concurrency": self.from_concurrency,
            "to_concurrency": self.to_concurrency,
            "throughput_gain": num(round_to(self.throughput_gain, 4)),
            "p99_ttft_growth": num(round_to(self.p99_ttft_growth, 4)),
            "reason": self.reason,
        })
    }
}

/// True when the sweep has two or more points and its peak throughput is
/// less than 10% above its lowest level's.
pub(crate) fn is_flat(points: &[SweepPoint]) -> bool {
    let Some(first) = points.first() else {
        return false;
    };
    if points.len() < 2 || first.figures.output_throughput <= 0.0 {
        return false;
    }
    let peak = points
        .iter()
        .map(|p| p.figures.output_throughput)
        .fold(f64::NEG_INFINITY, f64::max);
    peak < first.figures.output_throughput * (1.0 + NO_RISE_MAX_GAIN)
}

/// The sentence for a sweep that does not rise, from its lowest concurrency.
pub(crate) fn no_rise_message(lowest_concurrency: u32) -> String {
    if lowest_concurrency <= 1 {
        format!(
            "throughput does not rise with concurrency: the server runs one request at a time \
             (one slot: {}?) or one stream already uses all its compute; more streams only queue",
            crate::engine::one_slot_settings()
        )
    } else {
        format!(
            "throughput does not rise above {}: the server is already saturated at the lowest level \
             measured; more streams only queue",
            streams(lowest_concurrency)
        )
    }
}

/// The knee of the sweep, if a step qualifies.
pub(crate) fn find_knee(points: &[SweepPoint]) -> Option<Knee> {
    let all = steps(points);
    let (index, step, gain, growth) = all.iter().enumerate().find_map(|(i, s)| {
        match (s.gain_per_doubling, s.p99_ttft_growth) {
            (Some(g), Some(t)) if g < KNEE_MAX_GAIN && t >= KNEE_MIN_TTFT_GROWTH => {
                Some((i, s, g, t))
            }
            _ => None,
        }
    })?;
    let no_rise = index == 0 && is_flat(points);
    let reason = if no_rise {
        no_rise_message(step.from_concurrency)
    } else {
        let total = step.total_gain.unwrap_or(gain);
        let doubling = step.to_concurrency == step.from_concurrency.saturating_mul(2);
        let change = if total >= 0.0 {
            format!("adds {} throughput", percent1(total))
        } else {
            format!("loses {} throughput", percent1(-total))
        };
        let per_doubling = if doubling {
            String::new()
        } else {
            format!(" ({} per doubling)", percent1(gain))
        };
        let cause = if total < -KNEE_MAX_GAIN {
            "past saturation: too many parallel slots, or part of the model on the CPU?"
        } else {
            GUESSED_CAUSE
        };
        format!(
            "{} -> {} streams {change}{per_doubling} while p99 TTFT grows {growth:.1}x: {cause}",
            step.from_concurrency, step.to_concurrency
        )
    };
    Some(Knee {
        from_concurrency: step.from_concurrency,
        to_concurrency: step.to_concurrency,
        throughput_gain: gain,
        p99_ttft_growth: growth,
        no_rise,
        reason,
    })
}

/// The user's service level, for capacity (`--slo-*`).
#[derive(Clone, Debug, PartialEq)]
pub struct CapacitySlo {
    /// `--slo-ttft-p99-ms`.
    pub ttft_p99_ms: Option<f64>,
    /// `--slo-min-stream-tok-s` (default 20), against `stream_decode_tok_s`;
    /// `None` checks nothing.
    pub min_stream_tok_s: Option<f64>,
    /// `--slo-tpot-p99-ms`.
    pub tpot_p99_ms: Option<f64>,
    /// A level needs an error rate below this (default 1%).
    pub max_error_rate: f64,
}

impl Default for CapacitySlo {
    fn default() -> Self {
        CapacitySlo {
            ttft_p99_ms: None,
            min_stream_tok_s: Some(DEFAULT_MIN_STREAM_TOK_S),
            tpot_p99_ms: None,
            max_error_rate: DEFAULT_MAX_ERROR_RATE,
        }
    }
}

impl CapacitySlo {
    /// True when a term differs from the defaults (a TTFT or TPOT limit, a
    /// reading speed other than 20 or none): only a user sets that. A
    /// default typed again by hand is told only by where the flag came from.
    pub(crate) fn set_by_hand(&self) -> bool {
        self.ttft_p99_ms.is_some()
            || self.tpot_p99_ms.is_some()
            || self.min_stream_tok_s != Some(DEFAULT_MIN_STREAM_TOK_S)
    }
}

/// One SLO term as judged on one point.
struct Check {
    /// "p99 TTFT <= 500 ms"
    term: String,
    /// "612 ms", or "no TTFT sample"
    value: String,
    met: bool,
}

impl Check {
    /// A term on one figure: `value` is the level's figure (`missing` says
    /// there is none, which never meets the term), `met` the test on it.
    fn on(
        term: String,
        value: Option<f64>,
        unit: &str,
        missing: &str,
        met: impl Fn(f64) -> bool,
    ) -> Check {
        Check {
            term,
            value: value.map_or(missing.into(), |v| format!("{} {unit}", figure(v))),
            met: value.is_some_and(met),
        }
    }
}

/// Whether one level meets every term of the SLO on its own (the test of a
/// `--find-capacity` probe).
pub(crate) fn meets_slo(level: &LevelPoint, slo: &CapacitySlo) -> bool {
    checks(&level.figures, slo).iter().all(|c| c.met)
}

/// Each SLO term a level's figures miss, in words with the level's value:
/// `p99 TTFT <= 500 ms (612 ms)`; empty when it meets the SLO.
pub(crate) fn slo_misses(f: &Figures, slo: &CapacitySlo) -> Vec<String> {
    checks(f, slo)
        .into_iter()
        .filter(|c| !c.met)
        .map(|c| format!("{} ({})", c.term, c.value))
        .collect()
}

/// The words of each SLO term, as the decision's sentences and the reports'
/// SLO line both say them.
pub(crate) mod slo_terms {
    use crate::fmt::{threshold, threshold_percent};

    pub(crate) fn ttft(limit_ms: f64) -> String {
        format!("p99 TTFT <= {} ms", threshold(limit_ms))
    }

    pub(crate) fn decode(min_tok_s: f64) -> String {
        format!("decode >= {} tok/s per stream", threshold(min_tok_s))
    }

    pub(crate) fn tpot(limit_ms: f64) -> String {
        format!("p99 TPOT <= {} ms", threshold(limit_ms))
    }

    pub(crate) fn errors(max_rate: f64) -> String {
        format!("errors < {}", threshold_percent(max_rate))
    }
}

/// Each term the SLO sets, judged on a level's (or a sweep point's) figures.
fn checks(f: &Figures, slo: &CapacitySlo) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(limit) = slo.ttft_p99_ms {
        let term = slo_terms::ttft(limit);
        out.push(Check::on(term, f.p99_ttft_ms, "ms", "no p99 TTFT", |v| {
            v <= limit
        }));
    }
    if let Some(min) = slo.min_stream_tok_s {
        let term = slo_terms::decode(min);
        out.push(Check::on(
            term,
            f.stream_decode_tok_s,
            "tok/s",
            "no TPOT sample",
            |v| v >= min,
        ));
    }
    if let Some(limit) = slo.tpot_p99_ms {
        let term = slo_terms::tpot(limit);
        out.push(Check::on(term, f.p99_tpot_ms, "ms", "no p99 TPOT", |v| {
            v <= limit
        }));
    }
    out.push(Check {
        term: slo_terms::errors(slo.max_error_rate),
        value: format!("{} errors", percent1(f.error_rate)),
        met: f.error_rate < slo.max_error_rate,
    });
    out
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Which rule judged a capacity (summary.json's `capacity.rule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CapacityRule {
    /// The highest level meeting the SLO (capped at the knee without a
    /// TTFT SLO).
    Slo,
    /// The user gave no SLO and no level reached the default reading
    /// speed: the highest level before the knee (errors still under the
    /// limit), or the top level when there is no knee.
    KneeFallback,
}

impl CapacityRule {
    /// The name saved in summary.json.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CapacityRule::Slo => "slo",
            CapacityRule::KneeFallback => "knee_fallback",
        }
    }
}

/// The load this server can take within the SLO.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Capacity {
    pub concurrency: u32,
    pub output_throughput: f64,
    pub per_stream_tok_s: f64,
    pub stream_decode_tok_s: Option<f64>,
    pub p99_ttft_ms: Option<f64>,
    /// output_throughput / the sweep's peak output throughput.
    pub share_of_peak: f64,
    pub reason: String,
    pub rule: CapacityRule,
}

impl Capacity {
    /// The `capacity` object of summary.json (docs/architecture.md section 5).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "concurrency": self.concurrency,
            "output_throughput": num(round_to(self.output_throughput, 3)),
            "per_stream_tok_s": num(round_to(self.per_stream_tok_s, 3)),
            "stream_decode_tok_s": opt_num(self.stream_decode_tok_s.map(|v| round_to(v, 3))),
            "p99_ttft_ms": opt_num(self.p99_ttft_ms.map(|v| round_to(v, 3))),
            "share_of_peak": num(round_to(self.share_of_peak, 4)),
            "reason": self.reason,
            "rule": self.rule.name(),
        })
    }
}

/// Why there is no capacity to report, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NoCapacity {
    pub reason: String,
    /// True when levels were measured and none met the SLO (a diagnosis);
    /// false when there was nothing to judge yet.
    pub slo_not_met: bool,
}

/// The highest sweep point meeting the SLO (capped at the knee's
/// `from_concurrency` without a TTFT SLO), or why there is none. Where the
/// user gave no SLO (`slo_given` false) and no level reaches the default
/// reading speed, the knee judges alone ([`CapacityRule::KneeFallback`]).
pub(crate) fn find_capacity(
    points: &[SweepPoint],
    knee: Option<&Knee>,
    slo: &CapacitySlo,
    slo_given: bool,
) -> Result<Capacity, NoCapacity> {
    let Some(lowest) = points.first() else {
        return Err(NoCapacity {
            reason: "no finished planned or search level to judge capacity on".into(),
            slo_not_met: false,
        });
    };
    let cap = if slo.ttft_p99_ms.is_none() {
        knee.map(|k| k.from_concurrency)
    } else {
        None
    };
    let highest_meeting = |slo: &CapacitySlo| {
        points
            .iter()
            .filter(|p| cap.is_none_or(|c| p.concurrency <= c))
            .filter(|p| checks(&p.figures, slo).iter().all(|c| c.met))
            .max_by_key(|p| p.concurrency)
    };
    if let Some(min) = fallback_speed(points, slo, slo_given) {
        // The same choice with the reading speed left out: what is left is
        // the knee's cap and the error limit.
        let without_speed = CapacitySlo {
            min_stream_tok_s: None,
            ..slo.clone()
        };
        if let Some(chosen) = highest_meeting(&without_speed) {
            let reason = fallback_reason(points, knee, chosen, min, slo.max_error_rate);
            return Ok(capacity_at(
                points,
                chosen,
                reason,
                CapacityRule::KneeFallback,
            ));
        }
    }
    let Some(chosen) = highest_meeting(slo) else {
        // The lowest point is never above the cap, so it failed some term.
        let failed: Vec<Check> = checks(&lowest.figures, slo)
            .into_iter()
            .filter(|c| !c.met)
            .collect();
        let terms: Vec<String> = failed.iter().map(|c| c.term.clone()).collect();
        let values: Vec<String> = failed.iter().map(|c| c.value.clone()).collect();
        let closest = if slo_given {
            closest_text(points, slo)
                .map(|c| format!("; closest: {c}"))
                .unwrap_or_default()
        } else {
            String::new()
        };
        return Err(NoCapacity {
            reason: format!(
                "no level meets {} ({}): the lowest level, {}, has {}{closest}",
                if slo_given { "your SLO" } else { "the SLO" },
                terms.join("; "),
                streams(lowest.concurrency),
                and_list(&values)
            ),
            slo_not_met: true,
        });
    };
    let met: Vec<String> = checks(&chosen.figures, slo)
        .into_iter()
        .filter(|c| !c.term.starts_with("errors") || chosen.figures.error_rate > 0.0)
        .map(|c| format!("{}: {}", c.term, c.value))
        .collect();
    let why = match (cap, knee) {
        (Some(c), Some(k)) if c == chosen.concurrency => format!(
            "the level before the knee ({} -> {} streams; no TTFT SLO given), meeting {}",
            k.from_concurrency,
            k.to_concurrency,
            met.join(", ")
        ),
        _ => format!("the highest level meeting the SLO ({})", met.join(", ")),
    };
    let (peak, share) = peak_and_share(points, chosen);
    let reason = format!(
        "{}: {why}; {} of the peak {} tok/s at {}",
        streams(chosen.concurrency),
        percent0(share),
        figure(peak.figures.output_throughput),
        streams(peak.concurrency)
    );
    Ok(capacity_at(points, chosen, reason, CapacityRule::Slo))
}

/// The sweep's peak point, and `chosen`'s throughput as a share of it.
fn peak_and_share<'a>(points: &'a [SweepPoint], chosen: &'a SweepPoint) -> (&'a SweepPoint, f64) {
    let peak = points
        .iter()
        .max_by(|a, b| {
            a.figures
                .output_throughput
                .total_cmp(&b.figures.output_throughput)
        })
        .unwrap_or(chosen);
    let share = if peak.figures.output_throughput > 0.0 {
        chosen.figures.output_throughput / peak.figures.output_throughput
    } else {
        0.0
    };
    (peak, share)
}

fn capacity_at(
    points: &[SweepPoint],
    chosen: &SweepPoint,
    reason: String,
    rule: CapacityRule,
) -> Capacity {
    let (_, share_of_peak) = peak_and_share(points, chosen);
    Capacity {
        concurrency: chosen.concurrency,
        output_throughput: chosen.figures.output_throughput,
        per_stream_tok_s: chosen.figures.per_stream_tok_s,
        stream_decode_tok_s: chosen.figures.stream_decode_tok_s,
        p99_ttft_ms: chosen.figures.p99_ttft_ms,
        share_of_peak,
        reason,
        rule,
    }
}

/// The default reading speed, when the knee must judge instead of it: the
/// user gave no SLO (no TTFT or TPOT limit, the reading speed not theirs)
/// and no level reaches it. `None` when the SLO judges as usual.
fn fallback_speed(points: &[SweepPoint], slo: &CapacitySlo, slo_given: bool) -> Option<f64> {
    if slo_given || slo.ttft_p99_ms.is_some() || slo.tpot_p99_ms.is_some() {
        return None;
    }
    let min = slo.min_stream_tok_s?;
    let reached = points
        .iter()
        .any(|p| p.figures.stream_decode_tok_s.is_some_and(|v| v >= min));
    (!reached).then_some(min)
}

/// The fallback's one line: the speed no level reached, the best seen,
/// and how the knee (or its absence) set the capacity.
fn fallback_reason(
    points: &[SweepPoint],
    knee: Option<&Knee>,
    chosen: &SweepPoint,
    min: f64,
    max_error_rate: f64,
) -> String {
    // The fastest decode per stream, at the lowest level that had it.
    let best = points
        .iter()
        .filter_map(|p| p.figures.stream_decode_tok_s.map(|v| (v, p.concurrency)))
        .fold(None, |best: Option<(f64, u32)>, (v, c)| match best {
            Some((b, _)) if b >= v => best,
            _ => Some((v, c)),
        });
    let seen = match best {
        Some((v, c)) => format!("{} at {}", figure(v), streams(c)),
        None => "no level has a TPOT sample".into(),
    };
    let head = format!(
        "no level reaches decode >= {} tok/s per stream ({seen})",
        crate::fmt::threshold(min)
    );
    let at = streams(chosen.concurrency);
    let errors = slo_terms::errors(max_error_rate);
    let top = points.last().map_or(0, |p| p.concurrency);
    match knee {
        Some(k) if k.from_concurrency == chosen.concurrency => {
            format!("{head}; capacity judged by the knee alone: {at}")
        }
        Some(k) => format!(
            "{head}; capacity judged by the knee ({} -> {} streams) and {errors}: {at}",
            k.from_concurrency, k.to_concurrency
        ),
        None if points.len() == 1 => {
            format!("{head}; one level shows no knee: capacity is the only level measured, {at}")
        }
        None if chosen.concurrency == top => {
            format!("{head}; the knee was not reached: capacity is the top level measured, {at}")
        }
        None => format!(
            "{head}; the knee was not reached: capacity is the highest level with {errors}, {at}"
        ),
    }
}

/// How far one SLO term misses on a level, relative to its limit: the
/// figure over the limit minus one (a ceiling), or one minus the figure
/// over the limit (a floor); zero or below where it is met. A missing
/// figure misses without end.
struct Miss {
    /// How far it misses, for ranking: positive where the term fails.
    excess: f64,
    /// The figure against its limit, signed: `p99 TTFT 1,240 ms over
    /// your 1,000 ms (+24%)`.
    text: String,
}

/// Each term of `slo` on one level, as a [`Miss`].
fn misses(f: &Figures, slo: &CapacitySlo) -> Vec<Miss> {
    // A ceiling is only ever the user's own (`--slo-ttft-p99-ms`, `--slo-tpot-p99-ms`).
    let ceiling = |name: &str, value: Option<f64>, limit: f64, unit: &str| {
        let (by, excess) = match value {
            Some(v) if limit > 0.0 => (v / limit - 1.0, v / limit - 1.0),
            _ => (f64::INFINITY, f64::INFINITY),
        };
        let text = match value {
            Some(v) => format!(
                "{name} {} {unit} over your {} {unit} ({})",
                figure(v),
                figure(limit),
                signed_percent(by)
            ),
            None => format!("no {name}"),
        };
        Miss { excess, text }
    };
    let mut out = Vec::new();
    if let Some(limit) = slo.ttft_p99_ms {
        out.push(ceiling("p99 TTFT", f.p99_ttft_ms, limit, "ms"));
    }
    if let Some(min) = slo.min_stream_tok_s {
        let (by, excess) = match f.stream_decode_tok_s {
            Some(v) if min > 0.0 => (v / min - 1.0, 1.0 - v / min),
            _ => (f64::NEG_INFINITY, f64::INFINITY),
        };
        let text = match f.stream_decode_tok_s {
            Some(v) => format!(
                "decode {} tok/s under {} tok/s per stream ({})",
                figure(v),
                crate::fmt::threshold(min),
                signed_percent(by)
            ),
            None => "no TPOT sample".into(),
        };
        out.push(Miss { excess, text });
    }
    if let Some(limit) = slo.tpot_p99_ms {
        out.push(ceiling("p99 TPOT", f.p99_tpot_ms, limit, "ms"));
    }
    let (by, excess) = if slo.max_error_rate > 0.0 {
        let r = f.error_rate / slo.max_error_rate - 1.0;
        (r, r)
    } else {
        (f64::INFINITY, f64::INFINITY)
    };
    out.push(Miss {
        excess,
        text: format!(
            "{} errors over the {} limit ({})",
            percent1(f.error_rate),
            crate::fmt::threshold_percent(slo.max_error_rate),
            signed_percent(by)
        ),
    });
    out
}

/// A share as a signed whole percent: `0.24` -> `+24%`, `-0.35` -> `-35%`.
fn signed_percent(share: f64) -> String {
    // `+ 0.0` turns a rounded -0 into 0, which prints without a sign.
    let p = (share * 100.0).round() + 0.0;
    if p > 0.0 {
        format!("+{p:.0}%")
    } else {
        format!("{p:.0}%")
    }
}

/// The level closest to meeting the SLO, where none meets it: the one
/// whose worst term misses least relative to its limit, with that term's
/// figure against its limit (`4 streams, p99 TTFT 1,240 ms over your 1,000
/// ms (+24%)`). Equal misses keep the lower level. `None` when every level
/// misses a term without a figure.
fn closest_text(points: &[SweepPoint], slo: &CapacitySlo) -> Option<String> {
    let worst = |p: &SweepPoint| {
        misses(&p.figures, slo)
            .into_iter()
            .max_by(|a, b| a.excess.total_cmp(&b.excess))
    };
    let (point, miss) = points
        .iter()
        .filter_map(|p| Some((p, worst(p)?)))
        .filter(|(_, m)| m.excess.is_finite())
        .fold(
            None,
            |best: Option<(&SweepPoint, Miss)>, (p, m)| match best {
                Some((_, ref b)) if b.excess <= m.excess => best,
                _ => Some((p, m)),
            },
        )?;
    Some(format!("{}, {}", streams(point.concurrency), miss.text))
}

/// Knee and capacity of a run, from all its finished levels.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decision {
    /// One point per concurrency, by rising concurrency (see `sweep_points`).
    pub points: Vec<SweepPoint>,
    pub knee: Option<Knee>,
    pub capacity: Result<Capacity, NoCapacity>,
}

impl Decision {
    /// summary.json's `knee`: the object, or null.
    pub(crate) fn knee_json(&self) -> Value {
        self.knee.as_ref().map_or(Value::Null, Knee::to_json)
    }
    /// summary.json's `capacity`: the object, or null (the reason is in
    /// `capacity_line` and in the `no_capacity` diagnosis).
    pub(crate) fn capacity_json(&self) -> Value {
        self.capacity
            .as_ref()
            .map_or(Value::Null, Capacity::to_json)
    }
    /// One line for the headless output: "capacity: ..." or "no capacity: ...".
    pub(crate) fn capacity_line(&self) -> String {
        match &self.capacity {
            Ok(c) => format!("capacity: {}", c.reason),
            Err(n) => format!("no capacity: {}", n.reason),
        }
    }
}

/// Knee and capacity from every finished level of a run (any kind, partial
/// or not: the rules above pick what counts), judged by the SLO as the
/// user's own: no knee fallback (see [`decide_judged`]). The tests' short
/// form; every face says whether the SLO was given.
#[cfg(test)]
pub(crate) fn decide(levels: &[LevelPoint], slo: &CapacitySlo) -> Decision {
    decide_judged(levels, slo, true)
}

/// [`decide`], saying whether the user gave the SLO (`RunInfo::slo_given`):
/// where they gave none and no level reaches the default reading speed,
/// the knee judges the capacity alone.
pub(crate) fn decide_judged(levels: &[LevelPoint], slo: &CapacitySlo, slo_given: bool) -> Decision {
    let points = sweep_points(levels);
    let knee = find_knee(&points);
    let capacity = find_capacity(&points, knee.as_ref(), slo, slo_given);
    Decision {
        points,
        knee,
        capacity,
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
