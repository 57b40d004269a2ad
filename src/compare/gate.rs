//! The regression gate of `tokbench compare --fail-on-regression [PCT]`:
//! each figure of a later run against the baseline's, judged worse, better
//! or the same beyond the noise (docs/decide.md, "A regression gate").
//!
//! The rule ([`judge`]), one for every figure: each run's measurements of a
//! figure at a level span `lo..hi` (the rounds of `--rounds N`; one round
//! spans its one value). The baseline's span is widened by PCT, to
//! `lo × (1 − PCT) .. hi × (1 + PCT)`. The figure got worse beyond the noise
//! when the new run's whole span lies past that on the worse side (a
//! higher-is-better figure: new `hi` < base `lo` × (1 − PCT)); better beyond
//! the noise when it lies past it on the better side; otherwise it is
//! within the noise. With one round in both runs this is "the change is
//! beyond PCT"; with rounds, every round of the new run is worse than every
//! round of the baseline, by PCT more: one stray round can neither fail nor
//! pass the gate. The change said is the medians'.

use serde::{Deserialize, Serialize};

use crate::analysis::series::default_label;
use crate::report::saved::{SavedLevel, SavedRun};
use crate::report::schema::number;
use crate::stats::percentile::median;

/// A figure the gate judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Total output tok/s at a level.
    OutputTokS,
    /// The streams the run's decision found within its SLOs (0: none).
    Capacity,
    /// p99 TTFT at a level, ms.
    TtftP99Ms,
    /// p99 TPOT at a level, ms.
    TpotP99Ms,
    /// Cost per million output tokens at capacity, in the run's currency.
    CostPerMOutput,
}

impl Figure {
    pub(crate) fn higher_is_better(self) -> bool {
        matches!(self, Figure::OutputTokS | Figure::Capacity)
    }

    /// `output tok/s`, as the verdict lines name it.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Figure::OutputTokS => "output tok/s",
            Figure::Capacity => "capacity (streams)",
            Figure::TtftP99Ms => "p99 TTFT ms",
            Figure::TpotP99Ms => "p99 TPOT ms",
            Figure::CostPerMOutput => "cost per M output tokens",
        }
    }
}

/// What the gate says of one figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse beyond the noise: fails the gate.
    Regression,
    /// Better beyond the noise.
    Improvement,
    WithinNoise,
}

impl Verdict {
    pub(crate) fn words(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// Why: which measure of the noise the change was held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// One round in each run: the change is beyond PCT.
    BeyondPct,
    /// Rounds: the new run's rounds all lie beyond the baseline's, widened by PCT.
    BeyondSpread,
    /// The medians differ by PCT or less.
    WithinPct,
    /// The medians differ by more than PCT, but the rounds overlap once the
    /// baseline's are widened by PCT.
    WithinSpread,
}

impl Why {
    /// `beyond 5%`, `within the rounds' spread + 5%`.
    pub(crate) fn words(self, pct: f64) -> String {
        let p = pct_text(pct);
        match self {
            Why::BeyondPct => format!("beyond {p}"),
            Why::BeyondSpread => format!("beyond the rounds' spread + {p}"),
            Why::WithinPct => format!("within {p}"),
            Why::WithinSpread => format!("within the rounds' spread + {p}"),
        }
    }
}

/// `5%`, `2.5%`.
pub(crate) fn pct_text(pct: f64) -> String {
    format!("{}%", crate::fmt::round4(pct))
}

/// The gate's judgement of one figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Judgement {
    pub verdict: Verdict,
    pub why: Why,
    /// The medians' change, in per cent of the baseline's; `None` when the
    /// baseline's is 0.
    pub change_pct: Option<f64>,
}

/// Lowest, median and highest of one run's rounds of a figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    pub lo: f64,
    pub median: f64,
    pub hi: f64,
    pub rounds: usize,
}

impl Span {
    /// Over the finite values; `None` when there is none.
    pub(crate) fn of(values: &[f64]) -> Option<Span> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let med = median(finite.iter().copied())?;
        Some(Span {
            lo: finite.iter().copied().fold(f64::INFINITY, f64::min),
            median: med,
            hi: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            rounds: finite.len(),
        })
    }
}

/// The rule of this module's head: `base` and `new` are each run's rounds
/// of one figure, `pct` the threshold in per cent.
pub(crate) fn judge(base: Span, new: Span, higher_is_better: bool, pct: f64) -> Judgement {
    let p = pct / 100.0;
    let (low_edge, high_edge) = (base.lo * (1.0 - p), base.hi * (1.0 + p));
    let (below, above) = (new.hi < low_edge, new.lo > high_edge);
    let (worse, better) = if higher_is_better {
        (below, above)
    } else {
        (above, below)
    };
    let change_pct = (base.median != 0.0).then(|| (new.median - base.median) / base.median * 100.0);
    let rounds = base.rounds > 1 || new.rounds > 1;
    let verdict = if worse {
        Verdict::Regression
    } else if better {
        Verdict::Improvement
    } else {
        Verdict::WithinNoise
    };
    let why = match (verdict, rounds) {
        (Verdict::WithinNoise, _) => {
            // 1e-9: a change of exactly PCT, worked in floating point.
            let beyond_pct = match change_pct {
                Some(c) => c.abs() > pct + 1e-9,
                None => new.median != 0.0,
            };
            if beyond_pct {
                Why::WithinSpread
            } else {
                Why::WithinPct
            }
        }
        (_, true) => Why::BeyondSpread,
        (_, false) => Why::BeyondPct,
    };
    Judgement {
        verdict,
        why,
        change_pct,
    }
}

/// One figure of one later run against the baseline.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    /// The later run's index among the runs (1 for the second).
    pub run: usize,
    pub figure: Figure,
    /// The series' label where either run has several.
    pub series: Option<String>,
    /// `None` for the run's decision (capacity, cost).
    pub concurrency: Option<u32>,
    pub base: Span,
    pub new: Span,
    pub judgement: Judgement,
}

/// Every figure both runs have, each later run against the first.
/// Levels only one run has are counted in `unmatched`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Gate {
    pub pct: f64,
    pub rows: Vec<Row>,
    /// Levels (series and concurrency) of a later run the baseline lacks,
    /// or the other way round, per later run.
    pub unmatched: usize,
}

impl Gate {
    pub(crate) fn regressions(&self) -> usize {
        self.count(Verdict::Regression)
    }

    pub(crate) fn count(&self, verdict: Verdict) -> usize {
        self.rows
            .iter()
            .filter(|r| r.judgement.verdict == verdict)
            .count()
    }

    pub(crate) fn of(runs: &[SavedRun], pct: f64) -> Gate {
        let mut rows = Vec::new();
        let mut unmatched = 0;
        let Some(base) = runs.first() else {
            return Gate {
                pct,
                rows,
                unmatched,
            };
        };
        let base_levels = levels_of(base);
        for (i, run) in runs.iter().enumerate().skip(1) {
            let levels = levels_of(run);
            unmatched += base_levels
                .iter()
                .filter(|b| !levels.iter().any(|l| l.key == b.key))
                .count();
            for level in &levels {
                let Some(b) = base_levels.iter().find(|b| b.key == level.key) else {
                    unmatched += 1;
                    continue;
                };
                for figure in [Figure::OutputTokS, Figure::TtftP99Ms, Figure::TpotP99Ms] {
                    let get: fn(&SavedLevel) -> Option<f64> = match figure {
                        Figure::OutputTokS => |l| l.output_throughput,
                        Figure::TtftP99Ms => |l| l.ttft_p99_ms,
                        _ => |l| l.tpot_p99_ms,
                    };
                    let values =
                        |ls: &[&SavedLevel]| ls.iter().filter_map(|l| get(l)).collect::<Vec<_>>();
                    if let (Some(bs), Some(ns)) = (
                        Span::of(&values(&b.rounds)),
                        Span::of(&values(&level.rounds)),
                    ) {
                        rows.push(row(i, figure, &level.key, bs, ns, pct));
                    }
                }
            }
            for (figure, get) in [
                (
                    Figure::Capacity,
                    capacity_of as fn(&SavedRun) -> Option<f64>,
                ),
                (Figure::CostPerMOutput, cost_of),
            ] {
                if let (Some(b), Some(n)) = (get(base), get(run)) {
                    let (Some(bs), Some(ns)) = (Span::of(&[b]), Span::of(&[n])) else {
                        continue;
                    };
                    rows.push(row(i, figure, &(None, None), bs, ns, pct));
                }
            }
        }
        Gate {
            pct,
            rows,
            unmatched,
        }
    }
}

fn row(run: usize, figure: Figure, key: &LevelKey, base: Span, new: Span, pct: f64) -> Row {
    Row {
        run,
        figure,
        series: key.0.clone(),
        concurrency: key.1,
        base,
        new,
        judgement: judge(base, new, figure.higher_is_better(), pct),
    }
}

/// The series' label (where the run has several) and the concurrency.
type LevelKey = (Option<String>, Option<u32>);

/// One level of a run: its key and its rounds.
struct GateLevel<'a> {
    key: LevelKey,
    rounds: Vec<&'a SavedLevel>,
}

/// A run's levels by series and concurrency, in run order, each with its
/// rounds: the finished planned or search levels there, else finished hand-set
/// ones; never partial or unsteady levels, nor open-loop ones (their
/// concurrency is a cap, not a level).
fn levels_of(run: &SavedRun) -> Vec<GateLevel<'_>> {
    let several_series = run.levels.iter().any(|l| l.series != 0);
    let mut out: Vec<GateLevel<'_>> = Vec::new();
    for level in &run.levels {
        let closed = !level.mode().is_open_loop();
        if level.partial || level.is_unsteady() || !closed || level.concurrency.is_none() {
            continue;
        }
        let series = several_series.then(|| {
            level
                .series_label
                .clone()
                .unwrap_or_else(|| default_label(level.series))
        });
        let key = (series, level.concurrency);
        match out.iter_mut().find(|g| g.key == key) {
            Some(g) => g.rounds.push(level),
            None => out.push(GateLevel {
                key,
                rounds: vec![level],
            }),
        }
    }
    for g in &mut out {
        // Sweep levels are the level's rounds; hand-set ones count only
        // where no sweep level ran at that concurrency.
        if g.rounds.iter().any(|l| l.is_sweep_point()) {
            g.rounds.retain(|l| l.is_sweep_point());
        }
    }
    out
}

/// The streams of the run's capacity; 0 where its decision found none.
/// `None` where the summary says nothing of it.
fn capacity_of(run: &SavedRun) -> Option<f64> {
    match run.capacity.as_ref().and_then(|c| c.concurrency) {
        Some(c) => Some(f64::from(c)),
        None => run
            .capacity_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("no capacity"))
            .then_some(0.0),
    }
}

fn cost_of(run: &SavedRun) -> Option<f64> {
    run.cost.as_ref().and_then(|c| number(&c.cost_per_m_output))
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
