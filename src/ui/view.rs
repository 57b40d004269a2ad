//! `tokbench view DIR [DIR2]`: a finished run (or two, overlaid) on the live
//! view's screen, read back from its `summary.json`. Nothing is sent and no
//! driver runs: the header, the chart with its capacity and knee marks, the
//! level table and the result panel, and keys to quit, get help and (with
//! two runs) bring the other run's table forward.
//!
//! Without a terminal it prints what `tokbench report DIR --format md`
//! prints, so `tokbench view DIR > x.md` and pipes still get the figures.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::{Duration, Instant};

use color_eyre::eyre::{bail, Result, WrapErr};
use crossterm::event::{Event, EventStream};
use futures_util::StreamExt;
use serde_json::Value;

use super::app::{
    knob_text, Action, App, CostView, Counters, Figures, LevelRow, RunState, RunView,
};
use super::draw;
use super::follow::Following;
use super::terminal::{TerminalGuard, Tui};
use super::theme::{ColorMode, Palette};
use crate::cli::{ReportFormat, ViewArgs};
use crate::load::driver::LevelInfo;
use crate::report::formats;
use crate::report::saved::{SavedRun, ShapeDifference};
use crate::report::schema::number;
use crate::run::{self, EXIT_INTERRUPTED, EXIT_OK};

/// How often the screen is redrawn with no key pressed (a footer note
/// expires; nothing else moves).
const TICK: Duration = Duration::from_millis(500);

pub async fn run_view(args: &ViewArgs) -> Result<i32> {
    crate::run::checks::view_args(args)?;
    let mut follow = args.follow.then(|| Following::new(&args.runs));
    let runs = match &mut follow {
        // Several shard folders: one run, merged.
        Some(following) if args.runs.len() > 1 => following.load()?,
        _ => load_runs(&args.runs)?,
    };
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return match follow {
            Some(follower) => follow_headless(follower).await,
            None => print_reports(&runs),
        };
    }
    let palette = Palette::new(ColorMode::from_env());
    let mut app = app_of(&runs, palette);
    let mut guard = match TerminalGuard::enter() {
        Ok(guard) => guard,
        Err(e) => {
            crate::say!("tokbench: no screen ({e:#}); printing the report instead");
            return print_reports(&runs);
        }
    };
    let code = view_loop(&mut guard.terminal, &mut app, follow).await;
    drop(guard);
    code
}

/// `view --follow` without a screen: a line per finished level (stdout)
/// and a progress line when its counts move (stderr), until the run is
/// over (then a line that says so, and exit 0) or interrupted.
async fn follow_headless(mut follower: Following) -> Result<i32> {
    let mut interrupt = pin!(run::interrupted());
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    let mut lines = FollowLines::default();
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut interrupt => return Ok(EXIT_INTERRUPTED),
        }
        // The summary first: a level's request lines reach the disk before
        // the summary that says it is done, so the poll after it has them.
        let mut done = Vec::new();
        let mut over = None;
        if follower.summary_changed() {
            if let Some(run) = follower.load().ok().and_then(|mut r| r.pop()) {
                done = lines.new_levels(&run);
                over = follower.over_line(&run);
            }
        }
        follower.poll_requests();
        let status = follower.status_line(std::time::SystemTime::now());
        for line in lines.in_order(done, follower.level_under_way(), status) {
            match line {
                FollowLine::Done(text) => crate::console::print_output(format!("{text}\n"))
                    .wrap_err("cannot write to stdout")?,
                FollowLine::Status(text) => crate::say!("{text}"),
            }
        }
        if let Some(over) = over {
            crate::say!("{over}");
            return Ok(EXIT_OK);
        }
    }
}

/// A line of headless `view --follow`: a level done (stdout), or where the
/// level under way is (stderr).
#[derive(Debug, PartialEq)]
enum FollowLine {
    Done(String),
    Status(String),
}

/// What headless `view --follow` has printed: the levels done, and the
/// last progress line's counts.
#[derive(Debug, Default)]
struct FollowLines {
    levels_seen: usize,
    /// `level_index` of each level printed as done.
    done: std::collections::BTreeSet<u64>,
    last_status: String,
}

impl FollowLines {
    /// The levels of `run` not printed yet: their index, their line.
    fn new_levels(&mut self, run: &SavedRun) -> Vec<(Option<u64>, String)> {
        let new: Vec<(Option<u64>, String)> = run
            .levels
            .iter()
            .skip(self.levels_seen)
            .map(|l| {
                (
                    l.raw.get("level_index").and_then(Value::as_u64),
                    level_line(l),
                )
            })
            .collect();
        self.levels_seen = self.levels_seen.max(run.levels.len());
        new
    }

    /// A level's progress line before its "level done" line: the levels
    /// done before the one under way, then its progress (when its counts
    /// moved, and it was not already said done), then the rest.
    fn in_order(
        &mut self,
        done: Vec<(Option<u64>, String)>,
        under_way: Option<u64>,
        status: String,
    ) -> Vec<FollowLine> {
        let (before, after): (Vec<_>, Vec<_>) = done
            .into_iter()
            .partition(|(index, _)| index.zip(under_way).is_some_and(|(i, u)| i < u));
        let said_done = under_way.is_some_and(|u| self.done.contains(&u));
        let mut out: Vec<FollowLine> = Vec::new();
        let mut say_done = |out: &mut Vec<FollowLine>, list: Vec<(Option<u64>, String)>| {
            for (index, line) in list {
                self.done.extend(index);
                out.push(FollowLine::Done(line));
            }
        };
        say_done(&mut out, before);
        // The age in the line changes every second: print when counts move.
        let key = status.split(';').next().unwrap_or_default().to_string();
        let mut last_status = std::mem::take(&mut self.last_status);
        if key != last_status && !said_done {
            out.push(FollowLine::Status(status));
            last_status = key;
        }
        say_done(&mut out, after);
        self.last_status = last_status;
        out
    }
}

fn level_line(level: &crate::report::saved::SavedLevel) -> String {
    let num = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
    format!(
        "level done: concurrency {} {}: {} tok/s, TTFT p99 {} ms, {} failed{}",
        level
            .concurrency
            .map_or_else(|| "-".into(), |c| c.to_string()),
        level.mode,
        num(level.output_throughput),
        num(level.ttft_p99_ms),
        level.failed.unwrap_or(0),
        if level.partial { " (partial)" } else { "" }
    )
}

/// Every run named, or the first that cannot be read, in one line.
pub(crate) fn load_runs(paths: &[PathBuf]) -> Result<Vec<SavedRun>> {
    if paths.is_empty() {
        bail!("tokbench view needs a result folder (or its summary.json)");
    }
    paths
        .iter()
        .map(|path| {
            if !path.exists() {
                bail!(
                    "{}: no such result folder (give a tokbench result folder or its summary.json)",
                    path.display()
                );
            }
            SavedRun::load(path)
        })
        .collect()
}

/// Headless: the Markdown report of each run, as `tokbench report` prints it.
fn print_reports(runs: &[SavedRun]) -> Result<i32> {
    if let Some(warning) = shape_warning(runs) {
        crate::say!("tokbench view: warning: {warning}");
    }
    let text = runs
        .iter()
        .map(|run| formats::render(run, ReportFormat::Md))
        .collect::<Vec<_>>()
        .join("\n");
    crate::console::print_output(&text).wrap_err("cannot write the report to stdout")?;
    Ok(EXIT_OK)
}

/// Two runs measured at different lengths (or profiles, or EOS policy) do
/// not compare like for like: said, not refused.
pub(crate) fn shape_warning(runs: &[SavedRun]) -> Option<String> {
    let [a, b] = runs else {
        return None;
    };
    let named = |x: Option<String>| x.unwrap_or_else(|| "none".into());
    let differ: Vec<String> = a
        .shape_differences(b)
        .into_iter()
        .map(|d| match d {
            ShapeDifference::Lengths => format!("A is {}, B is {}", a.shape(), b.shape()),
            ShapeDifference::Profile => {
                let name = |r: &SavedRun| {
                    crate::workload::profile::profile_words(r.run.profile.as_deref())
                        .unwrap_or_else(|| "no profile".into())
                };
                format!("{} vs {}", name(a), name(b))
            }
            ShapeDifference::RangeRatio => {
                format!("range ratio {} vs {}", a.range_ratio(), b.range_ratio())
            }
            ShapeDifference::Dataset => {
                format!("dataset {} vs {}", named(a.dataset()), named(b.dataset()))
            }
            ShapeDifference::IgnoreEos => "ignore_eos differs".into(),
        })
        .collect();
    (!differ.is_empty()).then(|| format!("⚠ not like for like: {}", differ.join("; ")))
}

/// The screen's state for one run, or two (the first shown, the second overlaid).
pub(crate) fn app_of(runs: &[SavedRun], palette: Palette) -> App {
    let mut sides = runs
        .iter()
        .zip(['A', 'B'])
        .map(|(run, label)| side_of(run, label));
    let Some(first) = sides.next() else {
        return App::new(bare_run("", Path::new("")), palette);
    };
    let second = sides.next();
    let mut app = App::from_saved(first, second, shape_warning(runs), palette);
    // One run with a model fitted to it: the model's line, dashed, beside
    // the measured one (as chart.svg draws it).
    if let [run] = runs {
        app.predicted = predicted_curve(run).into_iter().collect();
    }
    // One saved ramp: its own chart, from its level's seconds.
    if runs.len() == 1 {
        let ramped = runs[0].levels.iter().find_map(|level| {
            let trace = level.raw.get("trace")?;
            (trace["format"] == "ramp").then_some(())?;
            let ramp = crate::load::ramp::Ramp::from_json(&trace["ramp"])?;
            Some((ramp, level.raw.get("rate_series")?))
        });
        if let Some((ramp, seconds)) = ramped {
            app.shown.run.ramp = Some(crate::ui::app::RampView {
                ramp,
                slo_ttft_p99_ms: None,
            });
            app.saved_ramp = Some(super::draw::saved_ramp_figures(&ramp, seconds));
        }
    }
    app
}

/// The model's throughput at the latest series' measured levels, from the
/// run folder's `model.json`, in that series' colour.
pub(super) fn predicted_curve(run: &SavedRun) -> Option<crate::ui::widgets::PredictedCurve> {
    let latest = run.levels.iter().map(|l| l.series).max().unwrap_or(0);
    let mut at: Vec<u32> = run
        .levels
        .iter()
        .filter(|l| l.series == latest && l.is_sweep_point())
        .filter_map(|l| l.concurrency)
        .collect();
    at.sort_unstable();
    at.dedup();
    let points =
        crate::report::model_file::predicted_line(run.source.parent()?, latest as u64, &at);
    (points.len() >= 2).then_some(crate::ui::widgets::PredictedCurve {
        points,
        series: (latest % super::draw::SERIES_STYLES) as u8,
        label: None,
    })
}

/// A run known by its target and folder alone (nothing measured yet).
pub(crate) fn bare_run(target: &str, result_dir: &Path) -> RunView {
    RunView {
        target: target.to_string(),
        engine: String::new(),
        engine_version: None,
        model: String::new(),
        input_len: 0,
        output_len: 0,
        length_ask: None,
        knobs: None,
        simulated: false,
        plan: Vec::new(),
        result_dir: result_dir.display().to_string(),
        started_at: None,
        profile: None,
        gpus: None,
        ramp: None,
    }
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// One run of the files as the screen shows it. Whatever the summary lacks
/// shows as `-` or is left out; nothing in it can make this fail.
pub(crate) fn side_of(run: &SavedRun, label: char) -> RunState {
    let mut counters = Counters::default();
    let mut levels = Vec::new();
    // Levels without a concurrency (an open-loop rate level) have no place
    // on a chart of streams.
    let mut series_labels = std::collections::BTreeMap::new();
    for saved in &run.levels {
        let Some(concurrency) = saved.concurrency else {
            continue;
        };
        let raw = &saved.raw;
        let completed = saved.completed.unwrap_or(0);
        let failed = saved.failed.unwrap_or(0);
        counters.ok += completed;
        counters.failed += failed;
        counters.cancelled += raw.get("cancelled").and_then(Value::as_u64).unwrap_or(0);
        if let Some(errors) = raw.get("errors").and_then(Value::as_object) {
            for (class, n) in errors {
                *counters.by_class.entry(class.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
            }
        }
        let info = LevelInfo {
            rate: raw.get("request_rate").and_then(Value::as_f64),
            timeline: None,
            index: levels.len(),
            concurrency,
            mode: saved.mode(),
            num_prompts: raw.get("num_prompts").and_then(Value::as_u64).map(to_u32),
            plan_index: None,
            started_at: raw
                .get("started_at_s")
                .and_then(Value::as_f64)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .unwrap_or(Duration::ZERO),
            series: saved.series,
        };
        // A summary without request counts still has figures to show.
        let ok = if completed == 0 && failed == 0 && saved.output_throughput.is_some() {
            1
        } else {
            to_u32(completed)
        };
        let figures = Figures {
            output_tok_s: saved.output_throughput.unwrap_or(0.0),
            per_stream_tok_s: saved.per_stream_tok_s.unwrap_or(0.0),
            ttft_p50_ms: saved.ttft_p50_ms,
            ttft_p99_ms: saved.ttft_p99_ms,
        };
        let mut row = LevelRow::saved(info, saved.partial, ok, to_u32(failed), figures);
        row.unsteady = saved.is_unsteady();
        row.is_steady = saved.steady == Some(true);
        if let Some(label) = &saved.series_label {
            series_labels.insert(saved.series, label.clone());
        }
        levels.push(row);
    }

    let mut verdict = Vec::new();
    if run.capacity.is_some() {
        verdict.push(format!("capacity: {}", run.capacity_text()));
    } else {
        verdict.push(format!("no capacity: {}", run.capacity_text()));
    }
    verdict.push(format!("knee: {}", run.knee_text()));
    for d in &run.diagnoses {
        verdict.push(format!("note: {}", d.message));
    }
    let series_results = run.series_results();
    if series_results.len() > 1 {
        verdict.splice(0..0, crate::analysis::series::series_lines(&series_results));
    }

    let run_obj = run.raw.get("run");
    let mut knobs: Vec<String> = Vec::new();
    if let Some(text) = run_obj
        .and_then(|r| r.get("extra_body"))
        .and_then(Value::as_object)
        .and_then(knob_text)
    {
        knobs.push(text);
    }
    knobs.extend(run.labels.iter().map(|(k, v)| format!("{k}={v}")));
    let mut plan: Vec<u32> = levels.iter().map(|l| l.info.concurrency).collect();
    plan.sort_unstable();
    plan.dedup();
    let folder = if run.source.file_name().is_some_and(|n| n == "summary.json") {
        run.source.parent().unwrap_or(&run.source).to_path_buf()
    } else {
        run.source.clone()
    };
    let view = RunView {
        target: run
            .run
            .target
            .clone()
            .unwrap_or_else(|| "unknown target".into()),
        engine: if run.run.engine.is_some() {
            run.engine_name()
        } else {
            String::new()
        },
        engine_version: None,
        model: run.model_name().to_string(),
        input_len: run.run.input_len.unwrap_or(0),
        output_len: run.run.output_len.unwrap_or(0),
        length_ask: run.length_ask(),
        knobs: (!knobs.is_empty()).then(|| knobs.join(" ")),
        simulated: run.run.engine.as_deref() == Some(crate::engine::Engine::TokbenchSim.name()),
        plan,
        result_dir: folder.display().to_string(),
        started_at: run.run.started_at.clone(),
        profile: run
            .dataset()
            .map(|d| format!("dataset {d}"))
            .or_else(|| crate::workload::profile::profile_words(run.run.profile.as_deref()))
            .map(|shape| match run.achieved_means() {
                Some((input, output)) => format!("{shape} (achieved {input:.0} / {output:.0})"),
                None => shape,
            }),
        gpus: run.run.gpus,
        // A saved ramp's seconds are in its level file and report.
        ramp: None,
    }
    .sanitized();

    RunState {
        label,
        run: view,
        series_labels,
        series_results,
        levels,
        counters,
        capacity: run.capacity.as_ref().and_then(|c| c.concurrency),
        knee: run
            .knee
            .as_ref()
            .and_then(|k| k.from_concurrency.zip(k.to_concurrency)),
        verdict,
        cost: cost_of(run),
        slo: run.slo_text(),
    }
}

/// summary.json's `cost`, every figure the panel shows.
fn cost_of(run: &SavedRun) -> Option<CostView> {
    let saved = run.cost.as_ref()?;
    let cost_per_m = number(&saved.cost_per_m_output);
    let effective_per_m = number(&saved.effective_cost_per_m);
    let effective = effective_per_m.zip(crate::analysis::cost::utilization_of(
        cost_per_m,
        effective_per_m,
    ));
    let verdict = saved.verdict.clone().unwrap_or_else(|| match cost_per_m {
        Some(_) => "cost recorded without a verdict".into(),
        None => "no cost: none recorded in this summary".into(),
    });
    Some(CostView {
        gpu_price_per_hour: number(&saved.gpu_price_per_hour),
        api_price_per_m: number(&saved.api_price_per_m),
        cost_per_m,
        effective,
        break_even_tok_s: number(&saved.break_even_output_tok_s),
        break_even_utilization: number(&saved.break_even_utilization),
        verdict: super::app::one_line(&verdict),
    })
}

async fn view_loop(
    terminal: &mut Tui,
    app: &mut App,
    mut follow: Option<Following>,
) -> Result<i32> {
    let mut input = EventStream::new();
    let mut input_errors = super::terminal::InputErrors::default();
    let mut interrupt = pin!(run::interrupted());
    let mut ticks = tokio::time::interval(TICK);
    let start = Instant::now();
    loop {
        if let Some(follower) = &mut follow {
            // A summary caught between writes keeps the screen as it was.
            let mut over = None;
            if follower.summary_changed() {
                if let Ok(runs) = follower.load() {
                    over = runs.first().and_then(|run| follower.over_line(run));
                    *app = app_of(&runs, app.palette);
                }
            }
            follower.poll_requests();
            let status = match &over {
                // The screen stays, to be read: q leaves, as after a run.
                Some(line) => format!("{line}; q to leave"),
                None => follower.status_line(std::time::SystemTime::now()),
            };
            app.shown.verdict.retain(|l| !l.starts_with("following"));
            app.shown.verdict.insert(0, status);
            if over.is_some() {
                follow = None;
            }
        }
        app.on_tick(start.elapsed());
        terminal
            .draw(|frame| draw::draw(frame, app))
            .wrap_err("cannot draw on the terminal")?;
        tokio::select! {
            event = input.next() => match event {
                Some(Ok(Event::Key(key))) => {
                    input_errors.ok();
                    if app.on_key(key) == Some(Action::Exit) {
                        return Ok(EXIT_OK);
                    }
                }
                // A resize, focus or mouse event: drawn again at the top.
                Some(Ok(_)) => input_errors.ok(),
                Some(Err(e)) => {
                    if input_errors.gone_after_error() {
                        return Err(e).wrap_err("cannot read keys from the terminal");
                    }
                }
                // No more input: nobody can press q.
                None => return Ok(EXIT_OK),
            },
            _ = ticks.tick() => {}
            _ = &mut interrupt => return Ok(EXIT_INTERRUPTED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::decide::{self, decide, CapacitySlo, LevelPoint};
    use std::path::Path;

    pub(crate) fn fixture(name: &str) -> SavedRun {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/view")
            .join(name);
        SavedRun::load(&path).expect("the fixture reads")
    }

    #[tokio::test]
    async fn a_missing_folder_is_one_clear_error() {
        let missing = std::env::temp_dir().join(format!(
            "tokbench-view-missing-{}/nothing",
            std::process::id()
        ));
        let err = run_view(&ViewArgs {
            runs: vec![missing.clone()],
            follow: false,
        })
        .await
        .expect_err("a missing folder cannot be viewed");
        let text = format!("{err:#}");
        assert!(text.contains(&missing.display().to_string()), "{text}");
        assert!(text.contains("no such result folder"), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
    }

    #[tokio::test]
    async fn three_folders_without_follow_are_refused_in_one_line() {
        let err = run_view(&ViewArgs {
            runs: vec!["a".into(), "b".into(), "c".into()],
            follow: false,
        })
        .await
        .expect_err("view overlays two runs at most");
        assert_eq!(
            format!("{err:#}"),
            "view shows one run, or two overlaid; --follow follows several shard folders of one run, merged"
        );
    }

    #[tokio::test]
    async fn a_folder_without_a_summary_errors() {
        let dir = std::env::temp_dir().join(format!("tokbench-view-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let err = run_view(&ViewArgs {
            runs: vec![dir.clone()],
            follow: false,
        })
        .await
        .expect_err("no summary.json");
        assert!(
            format!("{err:#}").contains("no readable summary.json"),
            "{err:#}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The fixtures agree with the analysis: what they say of knee and
    /// capacity is what `decide` finds in their levels.
    #[test]
    fn fixtures_are_what_the_analysis_says() {
        for (name, capacity) in [("a", 32), ("b", 64)] {
            let run = fixture(name);
            let points: Vec<LevelPoint> = run
                .levels
                .iter()
                .map(|l| LevelPoint {
                    concurrency: l.concurrency.unwrap_or(0),
                    kind: l.mode(),
                    partial: l.partial,
                    figures: decide::Figures {
                        output_throughput: l.output_throughput.unwrap_or(0.0),
                        per_stream_tok_s: l.per_stream_tok_s.unwrap_or(0.0),
                        stream_decode_tok_s: l.stream_decode_tok_s,
                        p50_ttft_ms: l.ttft_p50_ms,
                        p99_ttft_ms: l.ttft_p99_ms,
                        p99_tpot_ms: None,
                        error_rate: decide::error_rate(
                            l.completed.unwrap_or(0),
                            l.failed.unwrap_or(0),
                        ),
                    },
                })
                .collect();
            let slo = CapacitySlo {
                ttft_p99_ms: run.slo.ttft_p99_ms,
                ..CapacitySlo::default()
            };
            let d = decide(&points, &slo);
            let c = d.capacity.expect("a capacity");
            assert_eq!(c.concurrency, capacity);
            assert_eq!(
                Some(c.reason.as_str()),
                run.capacity.as_ref().and_then(|c| c.reason.as_deref())
            );
            let knee = d.knee.expect("a knee");
            assert_eq!((knee.from_concurrency, knee.to_concurrency), (64, 128));
            assert_eq!(Some(knee.reason), run.knee.and_then(|k| k.reason));
            let cost = crate::analysis::cost::cost(c.output_throughput, 2.0, Some(0.65), None);
            assert_eq!(
                Some(cost.verdict),
                run.cost.and_then(|c| c.verdict),
                "{name}"
            );
        }
    }

    /// A level's progress line comes before its "level done" line, and
    /// none comes after it.
    #[test]
    fn follow_lines_keep_a_levels_progress_before_its_end() {
        let done = |i: u64| (Some(i), format!("level done: {i}"));
        let status = |i: u64, n: u32| format!("following: level {} {n} back; 0 s ago", i + 1);
        let mut lines = FollowLines::default();
        // Level 0 is done in the same poll that saw its last requests.
        assert_eq!(
            lines.in_order(vec![done(0)], Some(0), status(0, 12)),
            [
                FollowLine::Status(status(0, 12)),
                FollowLine::Done("level done: 0".into())
            ]
        );
        // Its progress is not said again after its end, even if it moved.
        assert_eq!(lines.in_order(vec![], Some(0), status(0, 13)), []);
        // Level 1 done and level 2 begun: the end, then the new progress.
        assert_eq!(
            lines.in_order(vec![done(1)], Some(2), status(2, 1)),
            [
                FollowLine::Done("level done: 1".into()),
                FollowLine::Status(status(2, 1))
            ]
        );
        // Only the age moved: nothing new to say.
        let older = status(2, 1).replace("0 s ago", "3 s ago");
        assert_eq!(lines.in_order(vec![], Some(2), older), []);
    }

    #[test]
    fn a_saved_run_becomes_the_screen_state() {
        let app = app_of(&[fixture("a")], Palette::new(ColorMode::None));
        assert!(app.is_saved() && app.is_finished());
        assert_eq!(app.shown.levels.len(), 6);
        assert_eq!(app.shown.capacity, Some(32));
        assert_eq!(app.shown.knee, Some((64, 128)));
        assert_eq!(app.shown.counters.failed, 3);
        assert_eq!(app.shown.counters.class("http_503"), 3);
        let cost = app.shown.cost.as_ref().expect("cost");
        assert_eq!(cost.break_even_tok_s, Some(854.701));
        assert_eq!(cost.break_even_utilization, Some(0.4946));
        assert!(app.shown.verdict[0].starts_with("capacity: 32 streams"));
        assert_eq!(app.shown.run.shape(), "in 1024 / out 1024");
        assert_eq!(app.shown.run.knobs.as_deref(), Some("gpu=h100"));
        assert!(app.shown.run.result_dir.ends_with("tests/fixtures/view/a"));
    }

    /// A run folder with a model fitted to it: the view carries the
    /// model's throughput at the measured levels as a dashed line, and
    /// draws it labelled; a model file of another version is not read.
    #[test]
    fn a_fitted_run_shows_the_models_line_dashed() {
        use crate::report::model_file::*;
        let dir = std::env::temp_dir().join(format!("tokbench-view-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/view/a");
        std::fs::copy(source.join("summary.json"), dir.join("summary.json")).expect("copy");
        let run = SavedRun::load(&dir).expect("reads");
        let measured: Vec<u32> = run.levels.iter().filter_map(|l| l.concurrency).collect();
        let check = |c: u32, t: f64| LevelCheck {
            concurrency: c,
            measured: Figures3::default(),
            predicted: Figures3 {
                output_tok_s: t,
                ..Figures3::default()
            },
            error_pct: Errors::default(),
        };
        let mut file = ModelFile {
            version: MODEL_VERSION,
            tokbench_version: "0.1.0".into(),
            models: vec![SeriesModel {
                series: 0,
                series_label: None,
                engine: None,
                params: Params {
                    step_ms: 10.0,
                    step_ms_per_seq: 0.0,
                    prefill_ms_per_token: 0.0,
                    overhead_ms: 0.0,
                    cap: None,
                    knob: None,
                    knob_value: None,
                    kv_tokens: None,
                    slot_context_tokens: None,
                },
                range: FitRange {
                    concurrency_min: 1,
                    concurrency_max: 1,
                    batch_min: 1.0,
                    batch_max: 1.0,
                    input_len: 1.0,
                    output_len: 1.0,
                },
                sources: Vec::new(),
                warnings: Vec::new(),
                // Two measured levels, and one the run never measured:
                // the line keeps only the measured ones.
                levels: vec![
                    check(measured[0], 100.0),
                    check(measured[1], 200.0),
                    check(9999, 300.0),
                ],
                error_pct: Errors::default(),
            }],
        };
        let write = |f: &ModelFile| {
            std::fs::write(dir.join(FILE_NAME), serde_json::to_string(f).expect("json"))
                .expect("write")
        };
        write(&file);
        let app = app_of(std::slice::from_ref(&run), Palette::new(ColorMode::None));
        let mut want = vec![(measured[0], 100.0), (measured[1], 200.0)];
        want.sort_by_key(|p| p.0);
        assert_eq!(
            app.predicted
                .iter()
                .map(|c| c.points.clone())
                .collect::<Vec<_>>(),
            vec![want]
        );
        let screen = crate::ui::snapshot_tests::render_text(&app, 160, 48);
        assert!(screen.contains("predicted"), "{screen}");
        file.version = MODEL_VERSION + 1;
        write(&file);
        assert!(app_of(&[run], Palette::new(ColorMode::None))
            .predicted
            .is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tab_swaps_the_runs_and_back() {
        let mut app = app_of(&[fixture("a"), fixture("b")], Palette::new(ColorMode::None));
        assert_eq!(app.shown.capacity, Some(32));
        assert_eq!(app.other().map(|o| o.label), Some('B'));
        let tab = crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Tab,
            crossterm::event::KeyModifiers::NONE,
        );
        assert_eq!(app.on_key(tab), None);
        assert_eq!(app.shown.capacity, Some(64));
        assert_eq!(app.shown.levels.len(), 7);
        assert_eq!(app.saved.as_ref().map(|_| app.shown.label), Some('B'));
        assert_eq!(app.other().map(|o| o.capacity), Some(Some(32)));
        app.on_key(tab);
        assert_eq!(app.shown.capacity, Some(32));
        assert_eq!(app.saved.as_ref().map(|_| app.shown.label), Some('A'));
        // q leaves at once: nothing to stop or save.
        assert_eq!(
            app.on_key(crate::ui::app::tests::key('q')),
            Some(Action::Exit)
        );
    }

    #[test]
    fn different_shapes_are_a_warning_not_a_refusal() {
        let a = fixture("a");
        let mut raw = fixture("b").raw;
        raw["run"]["output_len"] = serde_json::json!(256);
        let b = SavedRun::from_value(raw, Path::new("b.json")).expect("reads");
        assert_eq!(shape_warning(&[a.clone(), fixture("b")]), None);
        let warning = shape_warning(&[a.clone(), b.clone()]).expect("a warning");
        assert!(
            warning.contains("A is in 1024 / out 1024, B is in 1024 / out 256"),
            "{warning}"
        );
        let app = app_of(&[a, b], Palette::new(ColorMode::None));
        assert!(app.saved.as_ref().is_some_and(|s| s.warning.is_some()));
    }

    /// `view A B` warns of every difference `compare` refuses on, and of
    /// the EOS policy besides.
    #[test]
    fn a_different_dataset_or_range_ratio_is_warned_of_too() {
        let a = fixture("a");
        let mut raw = fixture("a").raw;
        raw["run"]["dataset"] = serde_json::json!("chats.jsonl");
        raw["run"]["range_ratio"] = serde_json::json!(0.25);
        let b = SavedRun::from_value(raw, Path::new("b.json")).expect("reads");
        let warning = shape_warning(&[a.clone(), b.clone()]).expect("a warning");
        assert_eq!(
            warning,
            "⚠ not like for like: range ratio 0 vs 0.25; dataset none vs chats.jsonl"
        );
        assert!(crate::compare::shape_mismatch(&[a, b]).is_some());
    }

    #[test]
    fn a_saved_open_loop_level_keeps_its_mode_and_rate() {
        use crate::record::Mode;
        let run = SavedRun::from_value(
            serde_json::json!({"levels": [
                {"max_concurrency": 4, "output_throughput": 400.0},
                {"max_concurrency": 4, "output_throughput": 300.0, "mode": "rate",
                 "request_rate": 2.5},
                {"max_concurrency": 2, "output_throughput": 150.0, "mode": "manual"}]}),
            Path::new("r/summary.json"),
        )
        .expect("reads");
        let state = side_of(&run, 'A');
        let modes: Vec<(Mode, Option<f64>)> = state
            .levels
            .iter()
            .map(|l| (l.info.mode, l.info.rate))
            .collect();
        assert_eq!(
            modes,
            [
                (Mode::Planned, None),
                (Mode::Rate, Some(2.5)),
                (Mode::Manual, None)
            ]
        );
    }

    #[test]
    fn a_bare_summary_still_shows() {
        let run = SavedRun::from_value(
            serde_json::json!({"levels": [{"max_concurrency": 4, "output_throughput": 100.0},
                                          {"output_throughput": 5.0}]}),
            Path::new("old/summary.json"),
        )
        .expect("reads");
        let app = app_of(&[run], Palette::new(ColorMode::None));
        assert_eq!(
            app.shown.levels.len(),
            1,
            "the level without streams is left out"
        );
        assert!(app.shown.levels[0].has_results());
        assert_eq!(app.shown.run.shape(), "in ? / out ?");
        assert_eq!(app.shown.cost, None);
        assert!(
            app.shown.verdict[0].starts_with("no capacity: "),
            "{:?}",
            app.shown.verdict
        );
        assert_eq!(app.shown.run.result_dir, "old");
    }
}
