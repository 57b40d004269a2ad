//! `tokbench tune`: a face over the sweep. For each setting of the grid it
//! starts the server (`crate::server`), waits until it is ready, runs the
//! plan as one series of the same result folder (through the same start as
//! `sweep`), and stops the server; then it says which setting to keep
//! (`crate::tune`). The load driver never learns that a server process
//! exists.

use std::path::Path;
use std::time::Duration;

use color_eyre::eyre::{bail, eyre, Result, WrapErr};
use serde_json::{Map, Value};

use super::headless::run_headless_with;
use super::plan::SweepPlan;
use super::prepare::prepare_continuing;
use super::{interrupted, one_line, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::cli::{OnFail, TuneArgs};
use crate::config::Settings;
use crate::report::recorder::Recorder;
use crate::report::resume::PriorRun;
use crate::report::schema::{TuneSection, TuneSetting};
use crate::server::{self, ServerProcess, ServerSpec};
use crate::tune::grid::Setting;
use crate::tune::view::{StartKey, TuneView, ViewEnd};

use super::tune_plan::{check, fill_setting, mask_settings, print_config, Filled, TunePlan};
use super::tune_results::{judge, tried};
use super::Prepared;
use crate::tune::auto::{self, Next};

/// The live view of a tune, as the tune drives it: the view draws and
/// reports keys; the servers, the words and the files stay here. (`ui`
/// implements it: the view is above the tune, never below.)
pub(crate) trait TuneFace {
    /// The settings measured so far, from the result folder, on the chart.
    fn show_earlier(&mut self, dir: &Path);
    /// The tune's words as they stand.
    fn set_tune(&mut self, view: TuneView);
    /// The settings `--predict` predicted, each (label, its output tok/s by
    /// streams): dashed on the chart, never in the level table.
    fn show_predicted(&mut self, curves: Vec<(String, Vec<(u32, f64)>)>);
    /// While a server starts: drawn with `view(elapsed)` until `ready`
    /// resolves, or a key asks to skip this setting or quit.
    async fn while_starting<T>(
        &mut self,
        ready: impl std::future::Future<Output = T>,
        view: impl Fn(Duration) -> TuneView,
    ) -> Result<std::result::Result<T, StartKey>>;
    /// One setting's run (series `series`, labelled), the sweep's screen.
    async fn run_setting(
        &mut self,
        prepared: &Prepared,
        series: (usize, &str),
        before_load: impl FnOnce(&mut Recorder),
        stop_when: impl std::future::Future<Output = String>,
    ) -> Result<ViewEnd>;
    /// The tune is over: its last words until the user quits.
    async fn show_final(&mut self, view: TuneView) -> Result<()>;
    /// Give the terminal back.
    fn leave(self);
}

/// Why caches need no reset for tokbench's own prompts.
const PROMPTS_KEEP_CACHES_COLD: &str =
    "tokbench's prompts are unique, which keeps prefix caches cold";

/// What tune says of caches, for the whole tune.
fn caches_text(reset_cache: bool) -> String {
    if reset_cache {
        "reset before each level after the first, where the engine offers it (--reset-cache): each setting says what was done".into()
    } else {
        format!("not reset between levels: {PROMPTS_KEEP_CACHES_COLD}")
    }
}

/// The tune section a saved folder holds (for `--resume`).
fn saved_tune(dir: &Path) -> Option<TuneSection> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    serde_json::from_value(value.get("tune")?.clone()).ok()
}

/// Run the tune; the exit code of docs/architecture.md section 5.
/// `open_face` gives the live view for the tune's target and folder, where
/// one is wanted (a terminal, no `--no-tui`); an error runs it headless.
pub(crate) async fn run_tune<F: TuneFace>(
    args: TuneArgs,
    mut settings: Settings,
    open_face: impl FnOnce(&str, &Path) -> Result<F>,
) -> Result<i32> {
    let mut plan = check(&args)?;
    let mut predicting = super::tune_predict::check(&args, &plan)?;
    if args.sweep.print_config {
        return print_config(&plan, &args, settings);
    }
    plan.slo_given = settings.gives_slo();
    server::install_panic_guard();
    super::prepare::probe_writable(&plan.dir)?;
    // One watcher for the whole tune, so a Ctrl-C between two settings
    // (while a server starts) is not lost.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        interrupted().await;
        let _ = stop_tx.send(true);
    });
    let prior_tune = args.sweep.resume.as_ref().and_then(|d| saved_tune(d));
    let mut section = TuneSection {
        serve_cmd: Some(args.serve_cmd.clone()),
        grid: args.grid.clone(),
        grid_link: args.grid_link.clone(),
        settings: Vec::new(),
        recommendation: None,
        caches: Some(caches_text(args.reset_cache)),
        other: Map::new(),
    };
    write_tune_config(&plan, &args, &mut settings)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .wrap_err("cannot build the HTTP client")?;
    let mut screen = open_screen(&args, &plan, open_face);
    let mut failure: Option<String> = None;
    let mut code = EXIT_OK;
    let mut quit = false;
    let mut i = 0;
    while let Some(setting) = plan.settings.get(i).cloned() {
        // A search's count is what it has asked for so far.
        let total = plan.settings.len();
        let label = setting.label();
        let kept = prior_tune.as_ref().and_then(|t| {
            t.settings.iter().find(|s| {
                s.label.as_deref() == Some(&label) && s.status.as_deref() == Some("finished")
            })
        });
        if let Some(done) = kept {
            crate::say!(
                "tokbench tune: setting {}/{total} {label} finished earlier; kept",
                i + 1
            );
            section.settings.push(done.clone());
            judge(&plan.dir, &mut section);
            search_step(&mut plan, &mut section);
            i += 1;
            continue;
        }
        if *stop_rx.borrow() {
            code = EXIT_INTERRUPTED;
            break;
        }
        let mut entry = TuneSetting {
            label: Some(label.clone()),
            values: setting
                .values
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
            status: Some("running".into()),
            ..TuneSetting::default()
        };
        if let Some(screen) = screen.as_mut() {
            screen.show_earlier(&plan.dir);
        }
        let outcome = run_setting(
            &args,
            &plan,
            &setting,
            (i, total),
            &http,
            &mut entry,
            &section,
            stop_rx.clone(),
            screen.as_mut(),
        )
        .await;
        let stop_all = match outcome {
            Ok(SettingEnd::Done) => false,
            Ok(SettingEnd::Quit) => {
                quit = true;
                true
            }
            Ok(SettingEnd::Interrupted) => {
                code = EXIT_INTERRUPTED;
                true
            }
            Err(e) => {
                let why = one_line(&e);
                crate::say!("tokbench tune: {label}: {why}");
                if entry.status.as_deref() == Some("running") {
                    entry.status = Some("failed".into());
                    entry.reason = Some(why.clone());
                }
                if args.on_fail == OnFail::Stop {
                    failure = Some(format!("{label}: {why}"));
                    code = EXIT_FAILED;
                    true
                } else {
                    false
                }
            }
        };
        section.settings.push(entry);
        // Saved after every setting: a stop later loses none of it.
        judge(&plan.dir, &mut section);
        if !stop_all {
            search_step(&mut plan, &mut section);
        }
        save_section(&plan.dir, &section, false)?;
        // model.json again, now that the setting's knob is saved with it.
        crate::model::files::fit_and_save(&plan.dir, &mut std::io::sink());
        if let (Some(p), false) = (predicting.as_mut(), stop_all) {
            super::tune_predict::after_setting(&mut plan, i + 1, &section, p);
            if let Some(screen) = screen.as_mut() {
                screen.show_predicted(p.curves());
            }
        }
        if stop_all {
            break;
        }
        i += 1;
    }
    judge(&plan.dir, &mut section);
    save_section(&plan.dir, &section, true)?;
    if let Some(mut screen) = screen.take() {
        // A tune that ran to its end keeps its last screen until q.
        if code == EXIT_OK && failure.is_none() && !quit {
            let done = section.settings.len();
            let line = format!(
                "finished: {done} setting{}",
                if done == 1 { "" } else { "s" }
            );
            screen
                .show_final(tune_view(&plan, &section, None, line, None))
                .await?;
        }
        screen.leave();
    }
    let mut out = std::io::stdout();
    let _ = std::io::Write::write_all(
        &mut out,
        crate::report::tune_text::tune_block(&section).as_bytes(),
    );
    let _ = std::io::Write::write_all(
        &mut out,
        format!("results: {}\n", plan.dir.display()).as_bytes(),
    );
    let code = match tune_thresholds(&plan.dir, &section, &mut out) {
        true if code == EXIT_OK => super::EXIT_CHECK_FAILED,
        _ => code,
    };
    if let Some(f) = failure {
        return Err(eyre!(
            "{f}; the settings measured so far are saved in {}",
            plan.dir.display()
        ));
    }
    Ok(code)
}

/// Each setting's `--threshold`s as summary.json has them, a line each
/// with its setting's label; true when the setting to keep fails one (or,
/// with no setting to keep, when any failed).
fn tune_thresholds(dir: &Path, section: &TuneSection, out: &mut dyn std::io::Write) -> bool {
    let Ok((_, text)) = crate::report::saved::read_summary(dir) else {
        return false;
    };
    let Ok(summary) = serde_json::from_str::<crate::report::schema::SummaryFile>(&text) else {
        return false;
    };
    let label = |series: Option<u64>| {
        section
            .settings
            .iter()
            .find(|s| s.series.is_some() && s.series == series)
            .and_then(|s| s.label.clone())
    };
    for entry in &summary.thresholds {
        let line = crate::report::thresholds::line(entry, label(entry.series).as_deref());
        let _ = writeln!(out, "{line}");
    }
    let kept = section
        .recommendation
        .as_ref()
        .and_then(|r| r.label.clone());
    summary
        .thresholds
        .iter()
        .filter(|e| kept.is_none() || label(e.series) == kept)
        .any(|e| !e.ok)
}

/// A searched knob (`--grid np=auto`) after a setting: the next value
/// added to the plan, or the search's end said and saved (`tune.search`).
fn search_step(plan: &mut TunePlan, section: &mut TuneSection) {
    let Some(grid) = &plan.search else { return };
    // Only once every setting asked for so far has run.
    if section.settings.len() < plan.settings.len() {
        return;
    }
    let so_far = tried(&plan.dir, section, grid);
    let (next, stopped) = match auto::next(grid, &so_far) {
        Next::Try(value) => (Some(value), None),
        Next::Done(why) => (None, Some(why)),
    };
    let range = if grid.open {
        "auto".to_string()
    } else {
        format!("{}..{}", grid.low, grid.high)
    };
    let tried_values: Vec<Value> = so_far.iter().map(|t| Value::from(t.value)).collect();
    let mut entry = Map::new();
    entry.insert("knob".into(), Value::from(grid.name.as_str()));
    entry.insert("range".into(), Value::from(range));
    entry.insert("tried".into(), Value::Array(tried_values));
    entry.insert(
        "stopped".into(),
        stopped.as_deref().map_or(Value::Null, Value::from),
    );
    section.other.insert("search".into(), Value::Object(entry));
    match (next, stopped) {
        (Some(value), _) => {
            crate::say!(
                "tokbench tune: searching {}: {}={value} next",
                grid.name,
                grid.name
            );
            let name = grid.name.clone();
            plan.settings.push(Setting {
                values: vec![(name, value.to_string())],
            });
        }
        (None, Some(why)) => crate::say!("tokbench tune: search done: {why}"),
        (None, None) => {}
    }
}

/// Settings a search is expected to need yet, the one starting included:
/// it, a doubling, and the value halfway.
const SEARCH_SETTINGS_AHEAD: usize = 3;

/// A setting's share of the tune's `--budget`: what is left of it over the
/// settings left (this one included; a search's are not known ahead, so
/// [`SEARCH_SETTINGS_AHEAD`]), never under the shortest budget a sweep
/// takes. None without a budget: each setting has the default one.
fn setting_budget(
    args: &TuneArgs,
    elapsed: Duration,
    (index, total): (usize, usize),
    searching: bool,
) -> Option<Duration> {
    let raw = args.sweep.budget.as_deref()?;
    let budget = super::timing::parse_duration("--budget", raw).ok()?;
    let left = if searching {
        SEARCH_SETTINGS_AHEAD
    } else {
        total.saturating_sub(index)
    };
    let settings_left = u32::try_from(left.max(1)).unwrap_or(u32::MAX);
    Some((budget.saturating_sub(elapsed) / settings_left).max(crate::analysis::fit::MIN_BUDGET))
}

/// The tune's time left as said when a setting starts: the settings so
/// far took `elapsed` (server starts included); the ones left, this one
/// included, are guessed at their mean; a search's count is not known
/// ahead, so only the mean is said. Empty before any setting ran.
fn tune_time_left(elapsed: Duration, index: usize, total: usize, searching: bool) -> String {
    if index == 0 {
        return String::new();
    }
    let mean = elapsed.as_secs_f64() / index as f64;
    if searching {
        return format!(
            " · {} a setting so far; the search decides after each how many more",
            crate::analysis::fit::duration_words(mean)
        );
    }
    let left = mean * total.saturating_sub(index) as f64;
    format!(
        " · about {} left for the tune ({} a setting so far)",
        crate::analysis::fit::duration_words(left),
        crate::analysis::fit::duration_words(mean)
    )
}

enum SettingEnd {
    Done,
    Interrupted,
    /// `q` in the live view: saved, and no setting after it.
    Quit,
}

/// The live view for the whole tune, where there is a terminal for it.
fn open_screen<F>(
    args: &TuneArgs,
    plan: &TunePlan,
    open_face: impl FnOnce(&str, &Path) -> Result<F>,
) -> Option<F> {
    use std::io::IsTerminal;
    let wanted = !(args.sweep.no_tui || args.sweep.events.as_deref() == Some("-"))
        && std::io::stdout().is_terminal()
        && std::io::stdin().is_terminal();
    if !wanted {
        return None;
    }
    match open_face(&format!("127.0.0.1:{}", plan.port), &plan.dir) {
        Ok(screen) => Some(screen),
        Err(e) => {
            crate::say!("tokbench tune: no live view ({e:#}); running headless");
            None
        }
    }
}

/// The tune's words for the live view: `line` after `setting i/N label`,
/// a row per setting of the grid (the one running now says so).
fn tune_view(
    plan: &TunePlan,
    section: &TuneSection,
    now: Option<(usize, &str)>,
    line: String,
    log_line: Option<String>,
) -> TuneView {
    let total = plan.settings.len();
    let rows = plan
        .settings
        .iter()
        .map(|setting| {
            let label = setting.label();
            let done = section
                .settings
                .iter()
                .find(|s| s.label.as_deref() == Some(label.as_str()));
            match done {
                Some(s) => crate::report::tune_text::setting_line(s),
                None if now.is_some_and(|(_, l)| l == label) => {
                    let state = if log_line.is_some() || line.contains("starting server") {
                        "starting"
                    } else {
                        "running"
                    };
                    format!("{label}: {state}")
                }
                None => format!("{label}: waiting"),
            }
        })
        .collect();
    let line = match now {
        Some((i, label)) => format!("setting {}/{total} {label} · {line}", i + 1),
        None => line,
    };
    TuneView {
        line,
        log_line,
        rows,
        recommendation: section
            .recommendation
            .as_ref()
            .and_then(|r| r.reason.clone()),
    }
}

/// One setting: start its server, wait for it, sweep it as a series of
/// its own, stop it. `entry` is filled as it goes; the server is stopped
/// on every path (`ServerProcess`'s drop kills it where stop was not
/// reached).
#[allow(clippy::too_many_arguments)]
async fn run_setting<F: TuneFace>(
    args: &TuneArgs,
    plan: &TunePlan,
    setting: &Setting,
    (i, total): (usize, usize),
    http: &reqwest::Client,
    entry: &mut TuneSetting,
    section: &TuneSection,
    mut stop_rx: tokio::sync::watch::Receiver<bool>,
    mut screen: Option<&mut F>,
) -> Result<SettingEnd> {
    let label = setting.label();
    let log_name = format!("server-{}.log", setting.file_part());
    entry.log = Some(log_name.clone());
    let Filled { words, env, .. } = fill_setting(plan, setting, args.reset_cache);
    let spec = ServerSpec {
        words,
        shell: args.serve_shell,
        env,
        log_path: plan.dir.join(&log_name),
        port: plan.port,
    };
    crate::say!(
        "tokbench tune: setting {}/{total} {label} · starting server on 127.0.0.1:{} (log {}){}",
        i + 1,
        plan.port,
        spec.log_path.display(),
        tune_time_left(plan.started.elapsed(), i, total, plan.search.is_some())
    );
    let mut process = ServerProcess::start(&spec)?;
    let timeout = Duration::from_secs_f64(args.ready_timeout.max(0.1));
    let log = process.log_reader();
    let ready = {
        let waiting = process.wait_ready(http, args.sweep.model.as_deref(), timeout);
        let shown = async {
            match screen.as_deref_mut() {
                Some(screen) => {
                    let view = |elapsed: Duration| {
                        tune_view(
                            plan,
                            section,
                            Some((i, &label)),
                            format!("starting server {} s", elapsed.as_secs()),
                            log.line(),
                        )
                    };
                    screen.while_starting(waiting, view).await
                }
                None => Ok(Ok(waiting.await)),
            }
        };
        tokio::select! {
            r = shown => r,
            _ = stop_rx.wait_for(|s| *s) => Err(eyre!("interrupted while its server started")),
        }
    };
    let ready = match ready {
        Ok(Ok(Ok(r))) => r,
        Ok(Ok(Err(e))) | Err(e) => {
            stop(process, args).await;
            if *stop_rx.borrow() {
                entry.status = Some("partial".into());
                entry.reason = Some("interrupted while its server started".into());
                return Ok(SettingEnd::Interrupted);
            }
            return Err(e);
        }
        Ok(Err(key)) => {
            stop(process, args).await;
            entry.status = Some("partial".into());
            return Ok(match key {
                StartKey::Skip => {
                    entry.reason = Some("skipped (n) while its server started".into());
                    SettingEnd::Done
                }
                StartKey::Quit => {
                    entry.reason = Some("stopped (q) while its server started".into());
                    SettingEnd::Quit
                }
            });
        }
    };
    entry.ready_s = serde_json::Number::from_f64(crate::fmt::round3(ready.ready_s));
    crate::say!("tokbench tune: {label} ready in {:.1} s", ready.ready_s);
    if let Some(screen) = screen.as_deref_mut() {
        screen.set_tune(tune_view(
            plan,
            section,
            Some((i, &label)),
            format!("ready in {:.1} s", ready.ready_s),
            None,
        ));
    }
    let base_url = format!("http://127.0.0.1:{}", plan.port);
    let memory = crate::probe::memory::of_setting(http, &base_url, ready.engine, &label).await;
    entry.memory = memory.memory;
    entry.memory_warning = memory.warning.clone();
    if let Some(w) = &memory.warning {
        crate::say!("tokbench tune: WARNING {w}");
    }
    let resets = if args.reset_cache {
        let resets = super::cache_reset::between_levels(ready.engine, http, &base_url);
        if resets.is_none() {
            entry.caches = Some(format!(
                "not reset: this engine ({:?}) offers no way to empty its prefix cache; {}",
                ready.engine, PROMPTS_KEEP_CACHES_COLD
            ));
        }
        resets
    } else {
        None
    };
    let result = sweep_setting(
        args,
        plan,
        (&label, &base_url),
        setting_budget(
            args,
            plan.started.elapsed(),
            (i, total),
            plan.search.is_some(),
        ),
        entry,
        section,
        &mut process,
        &stop_rx,
        memory.slot_context,
        resets.as_ref().map(|(work, _)| work.clone()),
        screen,
    )
    .await;
    if let Some((_, resets)) = &resets {
        entry.caches = Some(resets.text());
    }
    stop(process, args).await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn sweep_setting<F: TuneFace>(
    args: &TuneArgs,
    plan: &TunePlan,
    (label, base_url): (&str, &str),
    budget: Option<Duration>,
    entry: &mut TuneSetting,
    section: &TuneSection,
    process: &mut ServerProcess,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
    slot_context: Option<u64>,
    between_levels: Option<crate::load::driver::BetweenLevels>,
    screen: Option<&mut F>,
) -> Result<SettingEnd> {
    let mut sweep = args.sweep.clone();
    sweep.base_url = Some(base_url.to_string());
    sweep.result_dir = Some(plan.dir.clone());
    sweep.resume = None;
    let mut sweep_plan = SweepPlan::from_args(&sweep)?;
    sweep_plan.between_levels = between_levels;
    if let (Some(fit), Some(budget)) = (sweep_plan.fit.as_mut(), budget) {
        fit.budget = budget;
        fit.tune_share = true;
    }
    if let Some(ctx) = slot_context {
        let need = u64::from(sweep_plan.input_len) + u64::from(sweep_plan.output_len);
        if need > ctx {
            bail!(
                "each slot holds {ctx} tokens, and a prompt of {} plus {} output tokens does not fit: scale the context (-c) with the slots (-np), or shorten the lengths",
                sweep_plan.input_len,
                sweep_plan.output_len
            );
        }
    }
    let prior = if plan.dir.join("summary.json").exists() {
        Some(PriorRun::load(&plan.dir)?.into_new_series(label.to_string()))
    } else {
        None
    };
    let series = prior.as_ref().map_or(0, |p| p.last_series);
    entry.series = Some(series as u64);
    let mut prepared = prepare_continuing(sweep_plan, None, prior).await?;
    prepared.run.slo_given |= plan.slo_given;
    let mut so_far = section.clone();
    so_far.settings.push(entry.clone());
    let series_label = label.to_string();
    let mut stop_rx = stop_rx.clone();
    let watched = &mut *process;
    let stop_when = async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Some(how) = watched.exited() {
                        return format!("the server {how} mid-level");
                    }
                }
                _ = stop_rx.wait_for(|s| *s) => return "interrupted".to_string(),
            }
        }
    };
    let (code, stopped_by) = match screen {
        None => {
            let end = run_headless_with(
                prepared,
                |recorder| {
                    recorder.set_series(series, series_label, Value::Null);
                    recorder.set_tune(so_far);
                },
                stop_when,
            )
            .await?;
            (end.code, end.stopped_by)
        }
        Some(screen) => {
            let end = screen
                .run_setting(
                    &prepared,
                    (series, &series_label),
                    |recorder| recorder.set_tune(so_far),
                    stop_when,
                )
                .await?;
            match end {
                ViewEnd::Finished => (EXIT_OK, None),
                ViewEnd::StoppedBy(why) => (EXIT_OK, Some(why)),
                ViewEnd::Signal => (EXIT_INTERRUPTED, None),
                ViewEnd::Failed(e) => {
                    entry.status = Some("partial".into());
                    entry.reason = Some(format!("the sweep failed: {e}"));
                    return Ok(SettingEnd::Done);
                }
                ViewEnd::Skipped | ViewEnd::Quit => {
                    entry.status = Some("partial".into());
                    let (why, then) = if end == ViewEnd::Skipped {
                        ("skipped (n)", SettingEnd::Done)
                    } else {
                        ("stopped (q)", SettingEnd::Quit)
                    };
                    entry.reason = Some(why.into());
                    return Ok(then);
                }
            }
        }
    };
    // A server that died between two ticks of the watch, its requests
    // failing fast, may let the plan run out: still not a whole setting.
    let stopped_by = stopped_by.or_else(|| {
        process
            .exited()
            .map(|how| format!("the server {how} during the sweep"))
    });
    match (code, stopped_by) {
        (EXIT_INTERRUPTED, _) => {
            entry.status = Some("partial".into());
            entry.reason = Some("interrupted".into());
            Ok(SettingEnd::Interrupted)
        }
        (_, Some(why)) if why == "interrupted" => {
            entry.status = Some("partial".into());
            entry.reason = Some(why);
            Ok(SettingEnd::Interrupted)
        }
        (_, Some(why)) => {
            entry.status = Some("partial".into());
            entry.reason = Some(why);
            Ok(SettingEnd::Done)
        }
        (EXIT_FAILED, None) => {
            entry.status = Some("partial".into());
            entry.reason = Some("the sweep failed".into());
            Ok(SettingEnd::Done)
        }
        _ => {
            entry.status = Some("finished".into());
            Ok(SettingEnd::Done)
        }
    }
}

async fn stop(process: ServerProcess, args: &TuneArgs) {
    let grace = Duration::from_secs_f64(args.stop_grace.max(0.0));
    match process.stop(grace).await {
        Ok(how) => crate::say!("tokbench tune: server {how}"),
        Err(e) => crate::say!("tokbench tune: {}", one_line(&e)),
    }
}

/// Put the tune section into the folder's summary (and its reports); once
/// the tune is over, `run.ended_at` too, which each setting's sweep leaves
/// out (the tune goes on), and which tells `view --follow` it is over.
fn save_section(dir: &Path, section: &TuneSection, ended: bool) -> Result<()> {
    let path = dir.join("summary.json");
    let mut summary: Value = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .wrap_err_with(|| format!("{} is not valid JSON", path.display()))?,
        // No setting reached its sweep: a summary of the tune alone.
        Err(_) => serde_json::json!({"run": {}, "levels": [], "series": []}),
    };
    if let Value::Object(map) = &mut summary {
        map.insert(
            "tune".into(),
            serde_json::to_value(section).wrap_err("cannot write the tune section")?,
        );
    }
    if let Some(run) = summary.get_mut("run").and_then(Value::as_object_mut) {
        let now = crate::time::iso8601(std::time::SystemTime::now());
        run.extend(ended.then(|| ("ended_at".to_string(), Value::String(now))));
    }
    crate::report::formats::write_summary_and_reports(dir, &summary)
}

/// `config.toml`: the whole tune again, secrets by name only.
fn write_tune_config(plan: &TunePlan, args: &TuneArgs, settings: &mut Settings) -> Result<()> {
    mask_settings(plan, args, settings);
    settings.set("result-dir", None);
    let text = settings.to_toml(&[
        &format!(
            "tokbench {}: the effective settings of the tune in this folder.",
            env!("CARGO_PKG_VERSION")
        ),
        "Repeat it with: tokbench tune --config <this folder>/config.toml (flags given as well override it).",
        "Never here: the API key, secret --serve-env values (their names only: set them in the environment), result-dir.",
    ]);
    let path = plan.dir.join("config.toml");
    crate::report::atomic::write_atomic(&path, text.as_bytes())
        .wrap_err_with(|| format!("cannot write {}", path.display()))
}
