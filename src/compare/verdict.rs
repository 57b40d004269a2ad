//! The gate's verdict as one typed value: what `--format json` prints
//! (`assets/schema/compare.schema.json`), and what the text and Markdown
//! outputs are written from, so the three say the same.

use serde::{Deserialize, Serialize};

use super::gate::{pct_text, Figure, Gate, Row, Verdict, Why};
use super::run_name;
use crate::fmt::{group, round3};
use crate::report::saved::SavedRun;

/// `tokbench compare --format json`: every figure of each later run judged
/// against the first run's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareVerdict {
    /// The threshold in per cent (`--fail-on-regression`, 5 without it).
    pub threshold_pct: f64,
    /// Whether `--fail-on-regression` was given: only then does a
    /// regression set the exit code (99).
    pub gated: bool,
    /// No regression; `null` when not gated.
    pub passed: Option<bool>,
    /// Where `--force` compared runs of different shapes, the first
    /// difference in words; `null` when the runs share one shape.
    pub unlike_shapes: Option<String>,
    /// The runs, the baseline first.
    pub runs: Vec<RunRef>,
    pub regressions: usize,
    pub improvements: usize,
    pub within_noise: usize,
    /// Levels (concurrency, and series where a run has several) that only
    /// one of a pair of runs has: not judged.
    pub unmatched_levels: usize,
    pub figures: Vec<FigureVerdict>,
}

/// One run as the verdict names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRef {
    /// `A`, `B`, ...
    pub name: String,
    /// The summary file read.
    pub source: String,
}

/// One figure of one later run against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FigureVerdict {
    /// The later run's name (`B`).
    pub run: String,
    pub figure: Figure,
    /// The series' label where a run has several.
    pub series: Option<String>,
    /// The level's streams; `null` for the run's decision (capacity, cost).
    pub concurrency: Option<u32>,
    /// The baseline's figure: the median of its rounds.
    pub baseline: f64,
    /// The later run's figure: the median of its rounds.
    pub new: f64,
    /// The medians' change in per cent of the baseline's; `null` where the
    /// baseline's is 0.
    pub change_pct: Option<f64>,
    pub baseline_rounds: RoundsSpan,
    pub new_rounds: RoundsSpan,
    pub verdict: Verdict,
    pub why: Why,
    /// `why` in words, with each run's rounds where a run has several:
    /// `beyond the rounds' spread + 5% (A 980..1,020 over 3 rounds, B ...)`.
    pub reason: String,
    /// The verdict line the text output prints.
    pub line: String,
}

/// A run's rounds of one figure at one level.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundsSpan {
    pub rounds: usize,
    pub min: f64,
    pub max: f64,
}

impl CompareVerdict {
    pub(crate) fn of(
        runs: &[SavedRun],
        gate: &Gate,
        gated: bool,
        unlike_shapes: Option<String>,
    ) -> CompareVerdict {
        let several = runs.len() > 2;
        let figures = gate
            .rows
            .iter()
            .map(|r| {
                let mut reason = why_text(r, gate.pct);
                let slo = |i: usize| runs.get(i).and_then(SavedRun::slo_text);
                if r.figure == Figure::Capacity && slo(0) != slo(r.run) {
                    reason.push_str("; the runs' SLOs differ, so their capacities were judged by different rules");
                }
                FigureVerdict {
                run: run_name(r.run),
                figure: r.figure,
                series: r.series.clone(),
                concurrency: r.concurrency,
                baseline: round3(r.base.median),
                new: round3(r.new.median),
                change_pct: r.judgement.change_pct.map(round3),
                baseline_rounds: span(r.base),
                new_rounds: span(r.new),
                verdict: r.judgement.verdict,
                why: r.judgement.why,
                line: line(r, &reason, several),
                reason,
            }})
            .collect();
        let regressions = gate.regressions();
        CompareVerdict {
            threshold_pct: gate.pct,
            gated,
            passed: gated.then_some(regressions == 0),
            unlike_shapes,
            runs: runs
                .iter()
                .enumerate()
                .map(|(i, r)| RunRef {
                    name: run_name(i),
                    source: r.source.display().to_string(),
                })
                .collect(),
            regressions,
            improvements: gate.count(Verdict::Improvement),
            within_noise: gate.count(Verdict::WithinNoise),
            unmatched_levels: gate.unmatched,
            figures,
        }
    }

    /// `FAIL, 2 figures worse beyond the noise` or `pass, ...`: the
    /// headline of the text and Markdown outputs.
    pub(crate) fn headline(&self) -> String {
        let counts = format!(
            "{} worse beyond the noise, {} better, {} within noise",
            self.regressions, self.improvements, self.within_noise
        );
        match self.passed {
            Some(true) if self.figures.is_empty() => {
                "pass, with nothing judged: no figure is in both runs".to_string()
            }
            None if self.figures.is_empty() => {
                "not gated, and nothing to judge: no figure is in both runs".to_string()
            }
            Some(false) => format!("FAIL: {counts}"),
            Some(true) => format!("pass: {counts}"),
            None => format!("not gated (no --fail-on-regression): {counts}"),
        }
    }

    /// `A against B at 5%`, what was judged against what.
    pub(crate) fn against(&self) -> String {
        let later: Vec<&str> = self.runs.iter().skip(1).map(|r| r.name.as_str()).collect();
        format!(
            "{} against {} (the baseline), threshold {}",
            later.join(", "),
            self.runs.first().map_or("A", |r| r.name.as_str()),
            pct_text(self.threshold_pct)
        )
    }
}

fn span(s: super::gate::Span) -> RoundsSpan {
    RoundsSpan {
        rounds: s.rounds,
        min: round3(s.lo),
        max: round3(s.hi),
    }
}

/// A figure's value in the verdict: tok/s and ms with one decimal (two
/// under 10), streams whole, cost in dollars with three.
pub(crate) fn value_text(figure: Figure, v: f64) -> String {
    match figure {
        Figure::Capacity => format!("{v:.0}"),
        Figure::CostPerMOutput => format!("${v:.3}"),
        _ if v.abs() < 10.0 => format!("{v:.2}"),
        _ => group(v, 1),
    }
}

/// `2 streams`, `1 stream, series np=4`; empty for the run's decision.
pub(crate) fn level_text(series: Option<&str>, concurrency: Option<u32>) -> String {
    let mut out = match concurrency {
        Some(1) => "1 stream".to_string(),
        Some(c) => format!("{c} streams"),
        None => String::new(),
    };
    if let Some(s) = series {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str("series ");
        out.push_str(s);
    }
    out
}

/// `+12.3%`; `-` where the baseline is 0.
pub(crate) fn change_text(change_pct: Option<f64>) -> String {
    match change_pct {
        Some(c) if c.abs() < 0.05 => "+0.0%".into(),
        Some(c) => format!("{c:+.1}%"),
        None => "-".into(),
    }
}

/// `beyond the rounds' spread + 5% (A 980..1,020 over 3 rounds, B 900..920
/// over 3)`: why, with the spans where a run has rounds.
pub(crate) fn why_text(r: &Row, pct: f64) -> String {
    let mut why = r.judgement.why.words(pct);
    if r.base.rounds > 1 || r.new.rounds > 1 {
        let one = |name: String, s: super::gate::Span| {
            if s.rounds > 1 {
                format!(
                    "{name} {}..{} over {} rounds",
                    value_text(r.figure, s.lo),
                    value_text(r.figure, s.hi),
                    s.rounds
                )
            } else {
                format!("{name} one round")
            }
        };
        why = format!(
            "{why} ({}, {})",
            one(run_name(0), r.base),
            one(run_name(r.run), r.new)
        );
    }
    why
}

/// `regression: output tok/s at 2 streams: 180.1 -> 150.0 (-16.7%), beyond 5%`.
fn line(r: &Row, reason: &str, several_runs: bool) -> String {
    let level = level_text(r.series.as_deref(), r.concurrency);
    let at = if level.is_empty() {
        String::new()
    } else {
        format!(" at {level}")
    };
    let who = if several_runs {
        format!("{} ", run_name(r.run))
    } else {
        String::new()
    };
    format!(
        "{}: {who}{}{at}: {} -> {} ({}), {}",
        r.judgement.verdict.words(),
        r.figure.words(),
        value_text(r.figure, r.base.median),
        value_text(r.figure, r.new.median),
        change_text(r.judgement.change_pct),
        reason
    )
}
