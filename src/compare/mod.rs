//! `tokbench compare A B [C ...] [--force] [--fail-on-regression [PCT]]
//! [--format text|markdown|json]`: finished runs side by side, each figure
//! with its change against the first run (the baseline), and the regression
//! gate's verdict (`gate`: the rule; `verdict`: the typed verdict;
//! `render`: its text and Markdown).
//!
//! Numbers measured at different input/output lengths or workload profiles
//! do not compare (a longer prompt alone moves TTFT), so such runs are
//! refused with exit code 2 and one line on stderr, unless `--force`.
//! With `--fail-on-regression` a figure worse beyond the noise exits 99.

use std::fmt::Write as _;

use color_eyre::eyre::{Result, WrapErr};

use crate::cli::{CompareArgs, CompareFormat, DEFAULT_REGRESSION_PCT};
use crate::exit::EXIT_CHECK_FAILED;
use crate::report::saved::{SavedLevel, SavedRun, ShapeDifference};
use crate::report::schema::number;
use crate::report::svg::group;
use crate::stats::percentile::median;

pub(crate) use crate::exit::EXIT_REFUSED;

pub mod gate;
mod render;
pub mod verdict;

pub fn run_compare_command(args: &CompareArgs) -> Result<i32> {
    let runs = args
        .runs
        .iter()
        .map(|p| SavedRun::load(p))
        .collect::<Result<Vec<_>>>()?;
    let unlike = shape_mismatch(&runs);
    if let Some(problem) = &unlike {
        if !args.force {
            crate::say!("tokbench compare: refused: {problem}; numbers at different shapes do not compare (--force to compare anyway)");
            return Ok(EXIT_REFUSED);
        }
        crate::say!("tokbench compare: warning: {problem}; comparing anyway (--force)");
    }
    let gated = args.fail_on_regression.is_some();
    let pct = args.fail_on_regression.unwrap_or(DEFAULT_REGRESSION_PCT);
    let gate = gate::Gate::of(&runs, pct);
    let v = verdict::CompareVerdict::of(&runs, &gate, gated, unlike);
    let text = match args.format {
        // Without the gate, the text is the tables alone, as it always was.
        CompareFormat::Text if gated => render_compare(&runs) + &render::verdict_text(&v),
        CompareFormat::Text => render_compare(&runs),
        CompareFormat::Markdown => render::verdict_markdown(&v),
        CompareFormat::Json => {
            serde_json::to_string_pretty(&v).wrap_err("cannot write the verdict as JSON")? + "\n"
        }
    };
    crate::console::print_output(&text).wrap_err("cannot write the comparison to stdout")?;
    Ok(if gated && v.regressions > 0 {
        EXIT_CHECK_FAILED
    } else {
        0
    })
}

/// `A`, `B`, ... `Z`, then `R27`, `R28`: short names for the table heads.
pub(crate) fn run_name(i: usize) -> String {
    match u8::try_from(i) {
        Ok(n) if n < 26 => char::from(b'A' + n).to_string(),
        _ => format!("R{}", i + 1),
    }
}

/// `in 128 / out 64 (achieved 127 / 64), profile chat` (a named profile
/// only), then the range ratio when set (a dataset run's shape names its file).
fn shape_of(run: &SavedRun) -> String {
    shape_text(run, run.shape())
}

/// `shape_of` without the achieved means.
fn asked_shape_of(run: &SavedRun) -> String {
    shape_text(run, run.asked_shape())
}

fn shape_text(run: &SavedRun, lengths: String) -> String {
    let mut shape = lengths;
    if let Some(p) = crate::workload::profile::profile_words(run.run.profile.as_deref()) {
        let _ = write!(shape, ", {p}");
    }
    if run.range_ratio() > 0.0 {
        let _ = write!(shape, ", range ratio {}", run.range_ratio());
    }
    shape
}

/// The first run whose workload differs from the baseline's
/// (`SavedRun::shape_differences`: lengths, profile, range ratio or
/// dataset), said in words; `None` when all runs share one shape.
pub(crate) fn shape_mismatch(runs: &[SavedRun]) -> Option<String> {
    let base = runs.first()?;
    runs.iter().enumerate().skip(1).find_map(|(i, run)| {
        let differences = run.shape_differences(base);
        // The EOS policy alone is no refusal: `view A B` warns of it.
        let refused = differences.iter().any(|d| *d != ShapeDifference::IgnoreEos);
        refused.then(|| {
            format!(
                "{} ({}) is {} but {} ({}) is {}",
                run_name(i),
                run.source.display(),
                shape_of(run),
                run_name(0),
                base.source.display(),
                shape_of(base)
            )
        })
    })
}

/// One run's figures at one concurrency.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    output_throughput: Option<f64>,
    per_stream_tok_s: Option<f64>,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    /// Only partial levels ran at this concurrency.
    partial: bool,
}

/// The median over a run's levels at `c`: complete planned or search levels
/// when there are any, else complete levels of any kind, else partial ones.
fn cell_at(run: &SavedRun, c: u32) -> Option<Cell> {
    let latest = run.levels.iter().map(|l| l.series).max().unwrap_or(0);
    let at: Vec<&SavedLevel> = run
        .levels
        .iter()
        // A run of several series compares as its latest series.
        .filter(|l| l.series == latest)
        .filter(|l| l.concurrency == Some(c) && !l.is_unsteady())
        .collect();
    let sweep: Vec<&SavedLevel> = at.iter().copied().filter(|l| l.is_sweep_point()).collect();
    let complete: Vec<&SavedLevel> = at.iter().copied().filter(|l| !l.partial).collect();
    let (chosen, partial) = if !sweep.is_empty() {
        (sweep, false)
    } else if !complete.is_empty() {
        (complete, false)
    } else if !at.is_empty() {
        (at, true)
    } else {
        return None;
    };
    let med = |f: fn(&SavedLevel) -> Option<f64>| median(chosen.iter().filter_map(|l| f(l)));
    Some(Cell {
        output_throughput: med(|l| l.output_throughput),
        per_stream_tok_s: med(|l| l.per_stream_tok_s),
        ttft_p50_ms: med(|l| l.ttft_p50_ms),
        ttft_p99_ms: med(|l| l.ttft_p99_ms),
        partial,
    })
}

/// `  (+12.3% tok/s)`: run `i`'s figure against the first run's, with
/// `unit` after the change; nothing for the first run itself, a figure
/// either run lacks, or a first figure of 0.
fn against_first(i: usize, first: Option<f64>, value: Option<f64>, unit: &str) -> String {
    match (first, value) {
        (Some(b), Some(v)) if i > 0 => {
            let change = relative_change(v, b);
            if change.is_empty() {
                change
            } else {
                format!("  ({change}{unit})")
            }
        }
        _ => String::new(),
    }
}

/// `+12.3%` against the baseline; empty when there is nothing to compare to.
pub(crate) fn relative_change(value: f64, base: f64) -> String {
    if base.abs() < f64::EPSILON || !base.is_finite() || !value.is_finite() {
        return String::new();
    }
    let pct = (value - base) / base * 100.0;
    // -0.04 rounds to "-0.0%": say it flat.
    if pct.abs() < 0.05 {
        "+0.0%".into()
    } else {
        format!("{pct:+.1}%")
    }
}

/// The whole comparison as text.
pub(crate) fn render_compare(runs: &[SavedRun]) -> String {
    let mut out = String::new();
    let shapes: Vec<String> = runs.iter().map(shape_of).collect();
    // The asked shape: the achieved means differ a little from run to run.
    let one_shape = shape_mismatch(runs).is_none();
    if one_shape {
        let _ = writeln!(
            out,
            "tokbench compare: {}",
            runs.first().map_or_else(String::new, asked_shape_of)
        );
    } else {
        let _ = writeln!(out, "tokbench compare: runs of different shapes (--force)");
    }
    for (i, run) in runs.iter().enumerate() {
        let mut line = format!(
            "  {:<3} {}  {} on {}",
            run_name(i),
            run.source.display(),
            run.model_name(),
            run.engine_name()
        );
        if !one_shape {
            let _ = write!(line, ", {}", shapes[i]);
        } else if let Some((input, output)) = run.achieved_means() {
            let _ = write!(line, ", achieved in {input:.0} / out {output:.0}");
        }
        if let Some(s) = &run.run.started_at {
            let _ = write!(line, ", started {s}");
        }
        for (k, v) in &run.labels {
            let _ = write!(line, ", {k}={v}");
        }
        let _ = writeln!(out, "{line}");
    }
    let slos: Vec<Option<String>> = runs.iter().map(SavedRun::slo_text).collect();
    if slos.windows(2).any(|w| w[0] != w[1]) {
        let _ = writeln!(
            out,
            "  note: the runs' SLOs differ, so their capacities were judged by different rules"
        );
    }

    let mut concurrencies: Vec<u32> = runs
        .iter()
        .flat_map(|r| r.levels.iter().filter_map(|l| l.concurrency))
        .collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    let cells: Vec<Vec<Option<Cell>>> = concurrencies
        .iter()
        .map(|&c| runs.iter().map(|r| cell_at(r, c)).collect())
        .collect();
    let any_partial = cells.iter().flatten().flatten().any(|c| c.partial);

    type Metric = (&'static str, fn(&Cell) -> Option<f64>);
    let metrics: [Metric; 4] = [
        ("total output tok/s (higher is better)", |c| {
            c.output_throughput
        }),
        ("per-stream tok/s (higher is better)", |c| {
            c.per_stream_tok_s
        }),
        ("TTFT p50 ms (lower is better)", |c| c.ttft_p50_ms),
        ("TTFT p99 ms (lower is better)", |c| c.ttft_p99_ms),
    ];
    for (title, get) in metrics {
        let _ = writeln!(out);
        let _ = writeln!(out, "{title}");
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut head = vec!["streams".to_string()];
        for i in 0..runs.len() {
            head.push(run_name(i));
            if i > 0 {
                head.push(format!("vs {}", run_name(0)));
            }
        }
        rows.push(head);
        for (ci, &c) in concurrencies.iter().enumerate() {
            let base = cells[ci].first().copied().flatten().and_then(|x| get(&x));
            let mut row = vec![c.to_string()];
            for (ri, cell) in cells[ci].iter().enumerate() {
                let value = cell.and_then(|x| get(&x).map(|v| (v, x.partial)));
                row.push(match value {
                    None => "-".to_string(),
                    Some((v, partial)) => format!("{v:.1}{}", if partial { "*" } else { "" }),
                });
                if ri > 0 {
                    row.push(match (value, base) {
                        (Some((v, _)), Some(b)) => relative_change(v, b),
                        _ => String::new(),
                    });
                }
            }
            rows.push(row);
        }
        out.push_str(&align(&rows));
    }
    if any_partial {
        let _ = writeln!(out, "* only partial levels ran at this concurrency");
    }

    let _ = writeln!(out);
    let _ = writeln!(out, "capacity (the highest level meeting the run's SLO)");
    let base_cap = runs
        .first()
        .and_then(|r| r.capacity.as_ref())
        .and_then(|c| number(&c.output_throughput));
    for (i, run) in runs.iter().enumerate() {
        let text = match &run.capacity {
            Some(cap) => {
                let mut t = format!(
                    "{} streams, {} tok/s",
                    cap.concurrency
                        .map_or_else(|| "?".into(), |c| c.to_string()),
                    number(&cap.output_throughput).map_or_else(|| "?".into(), |t| group(t, 0))
                );
                if let Some(p) = number(&cap.per_stream_tok_s) {
                    let _ = write!(t, ", {p:.1} tok/s per stream");
                }
                if let Some(p) = number(&cap.p99_ttft_ms) {
                    let _ = write!(t, ", p99 TTFT {} ms", group(p, 0));
                }
                let throughput = number(&cap.output_throughput);
                t.push_str(&against_first(i, base_cap, throughput, " tok/s"));
                t
            }
            None => format!("none: {}", run.capacity_text()),
        };
        let _ = writeln!(out, "  {:<3} {text}", run_name(i));
    }

    if runs.iter().any(|r| r.cost.is_some()) {
        let _ = writeln!(out);
        let _ = writeln!(out, "cost per million output tokens at capacity");
        let base_cost = runs
            .first()
            .and_then(|r| r.cost.as_ref())
            .and_then(|c| number(&c.cost_per_m_output));
        for (i, run) in runs.iter().enumerate() {
            let text = match run.cost.as_ref() {
                Some(cost) => {
                    let per_m = number(&cost.cost_per_m_output);
                    let mut t = match per_m {
                        Some(m) => format!("${m:.3}/M"),
                        None => "-".into(),
                    };
                    if let Some(g) = number(&cost.gpu_price_per_hour) {
                        let _ = write!(t, " at ${g}/h");
                    }
                    if let Some(e) = number(&cost.effective_cost_per_m) {
                        let _ = write!(t, ", ${e:.3}/M at the given utilization");
                    }
                    if let Some(a) = number(&cost.api_price_per_m) {
                        let _ = write!(t, " (API ${a}/M)");
                    }
                    t.push_str(&against_first(i, base_cost, per_m, ""));
                    t
                }
                None => "- (no GPU price given)".into(),
            };
            let _ = writeln!(out, "  {:<3} {text}", run_name(i));
        }
    }
    out
}

/// Right-aligned columns, two spaces apart, indented by two.
fn align(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s:>w$}", w = widths[i]))
            .collect();
        let _ = writeln!(out, "  {}", cells.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn run(name: &str, out_len: u64, levels: &[(u32, f64, f64)], cap: Option<u32>) -> SavedRun {
        let levels: Vec<_> = levels
            .iter()
            .map(|&(c, t, p99)| {
                json!({"max_concurrency": c, "output_throughput": t,
                       "per_stream_tok_s": t / f64::from(c), "p50_ttft_ms": p99 / 2.0,
                       "p99_ttft_ms": p99, "mode": "planned", "partial": false})
            })
            .collect();
        let capacity = cap.map_or(
            serde_json::Value::Null,
            |c| json!({"concurrency": c, "output_throughput": 100.0 * f64::from(c)}),
        );
        SavedRun::from_value(
            json!({"run": {"model": "m", "input_len": 128, "output_len": out_len,
                           "profile": "custom"},
                   "levels": levels, "capacity": capacity,
                   "capacity_reason": "no capacity: no level meets the SLO"}),
            Path::new(name),
        )
        .expect("summary")
    }

    #[test]
    fn names_and_changes() {
        assert_eq!(run_name(0), "A");
        assert_eq!(run_name(25), "Z");
        assert_eq!(run_name(26), "R27");
        assert_eq!(relative_change(112.3, 100.0), "+12.3%");
        assert_eq!(relative_change(50.0, 100.0), "-50.0%");
        assert_eq!(relative_change(100.01, 100.0), "+0.0%");
        assert_eq!(relative_change(1.0, 0.0), "");
    }

    #[test]
    fn same_shape_compares_and_shows_changes() {
        let a = run("a", 64, &[(1, 90.0, 14.0), (16, 900.0, 70.0)], Some(16));
        let b = run("b", 64, &[(1, 99.0, 14.0), (64, 1800.0, 200.0)], None);
        assert_eq!(shape_mismatch(&[a.clone(), b.clone()]), None);
        let text = render_compare(&[a, b]);
        // No named profile: the title says the lengths and no "profile custom".
        assert!(
            text.contains("tokbench compare: in 128 / out 64\n"),
            "{text}"
        );
        assert!(!text.contains("profile"), "{text}");
        assert!(text.contains("+10.0%"), "{text}");
        // 16 only in A, 64 only in B: a dash where a run has no level.
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with("64 ") && l.contains(" - ")),
            "{text}"
        );
        assert!(text.contains("A   16 streams, 1,600 tok/s"), "{text}");
        assert!(text.contains("B   none: no level meets the SLO"), "{text}");
    }

    #[test]
    fn different_lengths_are_named_in_the_refusal() {
        let a = run("a.json", 64, &[(1, 90.0, 14.0)], None);
        let b = run("b.json", 256, &[(1, 90.0, 14.0)], None);
        let problem = shape_mismatch(&[a, b]).expect("mismatch");
        assert_eq!(
            problem,
            "B (b.json) is in 128 / out 256 but A (a.json) is in 128 / out 64"
        );
    }

    /// A run whose summary has the traffic keys (issue 7).
    fn shaped(
        name: &str,
        profile: &str,
        ratio: f64,
        dataset: Option<&str>,
        means: (f64, f64),
    ) -> SavedRun {
        SavedRun::from_value(
            json!({"run": {"model": "m", "input_len": 512, "output_len": 256,
                           "profile": profile, "range_ratio": ratio, "dataset": dataset},
                   "traffic": {"input_mean": means.0, "output_mean": means.1},
                   "levels": [{"max_concurrency": 1, "output_throughput": 90.0,
                               "mode": "planned", "partial": false}]}),
            Path::new(name),
        )
        .expect("summary")
    }

    #[test]
    fn profiles_range_ratios_and_datasets_must_match() {
        let a = shaped("a", "chat", 0.5, None, (509.6, 256.0));
        // Achieved means differ a little from run to run: still one shape,
        // titled by the asked lengths, each run with its own means.
        let same = shaped("b", "chat", 0.5, None, (515.2, 251.0));
        assert_eq!(shape_mismatch(&[a.clone(), same.clone()]), None);
        let text = render_compare(&[a.clone(), same]);
        assert!(
            text.contains("tokbench compare: in 512 / out 256, profile chat, range ratio 0.5\n"),
            "{text}"
        );
        assert!(text.contains("achieved in 515 / out 251"), "{text}");
        // Same lengths, another preset's name: refused.
        let custom = shaped("c", "custom", 0.5, None, (512.0, 256.0));
        let why = shape_mismatch(&[a.clone(), custom]).expect("refused");
        assert!(
            why.contains("profile chat") && !why.contains("profile custom"),
            "{why}"
        );
        // Another range ratio: refused.
        let flat = shaped("d", "chat", 0.0, None, (512.0, 256.0));
        let why = shape_mismatch(&[a.clone(), flat]).expect("refused");
        assert!(why.contains("range ratio 0.5"), "{why}");
        // Other datasets: refused, named.
        let x = shaped("x", "dataset", 0.0, Some("x.jsonl"), (40.0, 30.0));
        let y = shaped("y", "dataset", 0.0, Some("y.jsonl"), (40.0, 30.0));
        let why = shape_mismatch(&[x, y]).expect("refused");
        assert!(
            why.contains("dataset y.jsonl") && why.contains("dataset x.jsonl"),
            "{why}"
        );
    }
}
