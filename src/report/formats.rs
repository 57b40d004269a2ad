//! `tokbench report DIR [--format md|csv|json|svg|html|br|junit] [-o FILE]`
//! (docs/architecture.md section 5), and the reports a run leaves in its folder.
//!
//! Every format is a pure function of the run's `summary.json`
//! ([`SavedRun`]), so a report made today from last month's folder is the
//! same as the one the run wrote itself.

use std::path::{Path, PathBuf};

use color_eyre::eyre::{Result, WrapErr};
use serde_json::Value;

use super::atomic::{write_atomic, write_json_atomic};
use super::saved::{SavedLevel, SavedRun};
use crate::cli::{ReportArgs, ReportFormat};

/// The report a run folder gets beside its `summary.json`.
pub(crate) const REPORT_MD: &str = "report.md";
/// The chart a run folder gets beside its `summary.json`.
pub(crate) const CHART_SVG: &str = "chart.svg";

pub fn run_report_command(args: &ReportArgs) -> Result<i32> {
    let mut run = SavedRun::load(&args.dir)?;
    if args.gpus.is_some() {
        run.run.gpus = args.gpus;
    }
    let text = render(&run, args.format);
    match &args.output {
        Some(path) => write_atomic(path, text.as_bytes())
            .wrap_err_with(|| format!("cannot write {}", path.display()))?,
        None => {
            crate::console::print_output(&text).wrap_err("cannot write the report to stdout")?
        }
    }
    Ok(0)
}

/// One run in one format.
pub(crate) fn render(run: &SavedRun, format: ReportFormat) -> String {
    match format {
        ReportFormat::Md => super::markdown::render_markdown(run),
        ReportFormat::Csv => super::csv::render_csv(run),
        ReportFormat::Json => {
            let mut text = serde_json::to_string_pretty(&run.raw).unwrap_or_else(|_| "{}".into());
            text.push('\n');
            text
        }
        ReportFormat::Svg => super::svg::render_svg(run),
        ReportFormat::Html => super::html::render_html(run),
        ReportFormat::Br => super::br::render_br(run),
        ReportFormat::Junit => super::junit::render_junit(run),
    }
}

/// Write `report.md` and `chart.svg` into a result folder from its
/// `summary.json`, each atomically. Call after every `summary.json` rewrite
/// so the folder's reports are as current as its summary.
pub fn write_run_reports(dir: &Path) -> Result<()> {
    let run = SavedRun::load(dir)?;
    write_reports_of(dir, &run)
}

/// A run's `summary.json`, written atomically, and the `report.md` and
/// `chart.svg` that ride with every summary: the recorder's and the merge's
/// last step alike. A failure of either is as fatal as the other.
pub(crate) fn write_summary_and_reports(dir: &Path, summary: &Value) -> Result<()> {
    write_summary_json(dir, summary)?;
    write_run_reports_from(dir, summary)
        .wrap_err_with(|| format!("cannot write the reports in {}", dir.display()))
}

/// [`write_run_reports`] for a summary already in memory (no re-read).
pub(crate) fn write_run_reports_from(dir: &Path, summary: &Value) -> Result<()> {
    let run = SavedRun::from_value(summary.clone(), &dir.join("summary.json"))?;
    write_reports_of(dir, &run)
}

/// The summary alone: a result file, whose failure ends the run.
pub(crate) fn write_summary_json(dir: &Path, summary: &Value) -> Result<()> {
    let path = dir.join("summary.json");
    write_json_atomic(&path, summary).wrap_err_with(|| format!("cannot write {}", path.display()))
}

/// The reports beside a summary (`report.md`, `chart.svg`), each tried
/// whatever became of the other: the ones not written, with why. They are
/// drawn from the summary, so a failed one loses nothing the run measured.
pub(crate) fn try_run_reports(dir: &Path, summary: &Value) -> Vec<(PathBuf, String)> {
    let reports = [
        (REPORT_MD, ReportFormat::Md),
        (CHART_SVG, ReportFormat::Svg),
    ];
    let run = match SavedRun::from_value(summary.clone(), &dir.join("summary.json")) {
        Ok(run) => run,
        Err(e) => {
            return reports
                .iter()
                .map(|(name, _)| (dir.join(name), format!("{e}")))
                .collect()
        }
    };
    reports
        .into_iter()
        .filter_map(|(name, format)| {
            let path = dir.join(name);
            write_atomic(&path, render(&run, format).as_bytes())
                .err()
                .map(|e| (path, e.to_string()))
        })
        .collect()
}

fn write_reports_of(dir: &Path, run: &SavedRun) -> Result<()> {
    for (name, format) in [
        (REPORT_MD, ReportFormat::Md),
        (CHART_SVG, ReportFormat::Svg),
    ] {
        let path = dir.join(name);
        write_atomic(&path, render(run, format).as_bytes())
            .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// How a table row is marked.
pub(crate) struct Marks {
    /// The capacity row (a complete planned/search level at the capacity's concurrency).
    pub capacity: bool,
    /// `manual`, `partial`, `round 2`, `capacity`, `knee 64->128`.
    pub notes: Vec<String>,
}

/// The notes of a level's row: its kind, and whether it is the capacity
/// point or the far side of the knee.
pub(crate) fn level_marks(run: &SavedRun, level: &SavedLevel) -> Marks {
    let mut notes = level.notes();
    // A ramp is replayed on its own schedule: its level reads as the ramp.
    if run.run.kind.as_deref() == Some("ramp") {
        for note in notes.iter_mut().filter(|n| *n == "replay") {
            *note = "ramp".into();
        }
    }
    // A run of several series: every row names its series, and the run's
    // capacity and knee (the latest series') mark only that series' rows.
    let latest = run.levels.iter().map(|l| l.series).max().unwrap_or(0);
    let several = run.levels.iter().any(|l| l.series != latest);
    if several && level.series == 0 {
        notes.push(
            level
                .series_label
                .clone()
                .unwrap_or_else(|| crate::analysis::series::default_label(0)),
        );
    }
    let at = |c: Option<u32>| {
        c.is_some() && c == level.concurrency && level.is_sweep_point() && level.series == latest
    };
    let capacity = at(run.capacity.as_ref().and_then(|c| c.concurrency));
    if capacity {
        notes.push("capacity".into());
    }
    if let Some(knee) = &run.knee {
        if at(knee.to_concurrency) {
            let from = knee
                .from_concurrency
                .map_or_else(|| "?".into(), |c| c.to_string());
            notes.push(format!("knee {from}->{}", knee.to_concurrency.unwrap_or(0)));
        }
    }
    Marks { capacity, notes }
}

/// The streams cell: the concurrency, or for an open-loop level the mean
/// requests in flight it measured (`~0.4`), `-` where not saved.
pub(crate) fn streams_cell(level: &SavedLevel) -> String {
    if !level.mode().is_open_loop() {
        return level
            .concurrency
            .map_or_else(|| "-".into(), |c| c.to_string());
    }
    let mean = |k: &str| {
        level
            .raw
            .get(k)
            .and_then(|o| o.get("mean"))
            .and_then(Value::as_f64)
    };
    match (mean("waiting"), mean("streaming")) {
        (Some(w), Some(s)) if w + s > 0.0 && w + s < 0.995 => format!("~{:.2}", w + s),
        (Some(w), Some(s)) if w + s > 0.0 && w + s < 9.95 => format!("~{:.1}", w + s),
        (Some(w), Some(s)) if w + s > 0.0 => format!("~{:.0}", w + s),
        _ => "-".into(),
    }
}

/// One decimal, or `-` for a missing figure.
pub(crate) fn fixed1(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}
