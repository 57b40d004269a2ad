//! The live terminal view: watch a sweep and steer it by keypress.
//!
//! Split the way the data flows (docs/architecture.md sections 1 and 2):
//! - [`app`]: the state, folded from driver events and key presses; pure;
//! - [`draw`]: the screen as a function of that state;
//! - [`widgets`], [`theme`]: the pieces it is drawn with;
//! - [`terminal`]: raw mode and the alternate screen, always given back;
//! - this file: the event loop that ties them to the driver and the recorder.
//!
//! The loop owns the state alone (no locks). It never measures: the load
//! tasks took every timestamp before a record reaches it, so a slow terminal
//! delays the picture, never the figures.

pub mod app;
pub mod draw;
pub(crate) mod follow;
pub(crate) mod terminal;
pub mod theme;
pub mod tune;
pub mod view;
pub(crate) mod widgets;

/// Synthetic runs for the snapshot tests, the screenshots and the render
/// benchmark (a bench can only reach the library's public items).
#[doc(hidden)]
pub mod scenes;

#[cfg(test)]
mod snapshot_tests;

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr};
use crossterm::event::{Event, EventStream};
use futures_util::StreamExt;
use tokio::time::MissedTickBehavior;

use crate::export::Exports;
use crate::load::driver::{Command, DriverEvent, DriverHandle};
use crate::probe::client::{cpu_percent, process_cpu_time};
use crate::report::recorder::Recorder;
use crate::run::{self, Prepared, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};

use app::{Action, App, CostView, Phase, RunView};
use terminal::{TerminalGuard, Tui};
use theme::{ColorMode, Palette};

/// Driver events folded per wake-up at most, so a flood of records cannot
/// hold off keys and frames; the rest wait for the next turn of the loop.
const MAX_BATCH: usize = 4096;
/// After `q`, how long to wait for the driver to say it stopped (cancelled
/// requests return at once; this only guards against a wedged socket).
const STOP_GRACE: Duration = Duration::from_secs(3);

/// How the loop ended.
enum Ending {
    /// q, Esc or Ctrl-C: exit 0 with what was saved.
    Quit,
    /// SIGINT or SIGTERM from outside: exit 130 after saving.
    Signal,
    /// The run could not go on.
    Failed(String),
    /// A tune: the plan ran out; the next setting follows at once.
    Done,
    /// A tune: `n` stopped this setting.
    Skipped,
    /// A tune: what its watch said stopped the run (the server died).
    StoppedBy(String),
}

/// The live view's state for a prepared run, before anything is sent.
fn live_app(prepared: &Prepared, palette: Palette) -> App {
    let mut app = App::new(RunView::from_prepared(prepared), palette);
    app.settle = prepared.plan.settle;
    app.steady_per_stream = prepared.plan.steady_completions;
    app.steady_rse = prepared.plan.steady_rse;
    for (index, label) in prepared.prior.iter().flat_map(|p| p.series_labels.iter()) {
        app.set_series_label(*index, label);
    }
    app.series = prepared.prior.as_ref().map_or(0, |p| p.last_series);
    app
}

/// A run on the screen, from its start to its books closed.
struct Session {
    recorder: Recorder,
    exports: Exports,
    ending: Result<Ending>,
    /// The recorder's finish: levels still open saved as partial.
    finished: Result<()>,
    /// A draw failed: the terminal is gone (the SSH session dropped).
    terminal_lost: bool,
}

/// Open the books, start the load, run the loop and close the books: what
/// a sweep's view and each setting of a tune's do alike. `live`: the driver
/// stays after the plan (a sweep's series); `before_load` sees the
/// recorder before anything is sent; when `stop_when` resolves the run is
/// stopped and saved, its words kept.
async fn live_session(
    terminal: &mut Tui,
    prepared: &Prepared,
    app: &mut App,
    live: bool,
    before_load: impl FnOnce(&mut Recorder),
    stop_when: impl std::future::Future<Output = String>,
) -> Result<Session> {
    // Bound and created before any load, like the result folder.
    let mut exports = Exports::open(&prepared.export_plan())?;
    let first_series = app.series;
    let started = run::start_run(prepared, &mut exports, live, |recorder| {
        let watch = SeriesWatch::start(prepared, first_series, recorder, app);
        before_load(recorder);
        watch
    });
    let (
        run::Running {
            mut recorder,
            mut driver,
            server_samples,
            run_start,
        },
        series,
    ) = match started {
        Ok(started) => started,
        Err(e) => {
            exports.failed(&run::one_line(&e), EXIT_FAILED);
            return Err(e);
        }
    };
    let probing = prepared.plan.probe_interval.is_some();
    panic_on_purpose_if_asked();

    let ending = event_loop(
        terminal,
        app,
        &mut driver,
        server_samples,
        probing,
        &mut recorder,
        &mut exports,
        prepared.plan.fps,
        run_start,
        series,
        pin!(stop_when),
    )
    .await;
    // A draw that fails means the terminal is gone: the SSH session
    // dropped (its SIGHUP may still be on the way). Saved like a signal.
    let terminal_lost = matches!(&ending, Err(e) if e.to_string().starts_with(DRAW_FAILED));
    if ending.is_err() {
        // The view failed (terminal gone, disk full): stop the load too, and
        // take what the driver still sends so the open level keeps its records.
        let _ = driver.commands.send(Command::Stop);
        drain_driver(&mut driver, &mut recorder, &mut exports).await;
    }
    // Close the books before the terminal is given back: levels still open
    // are saved as partial.
    let finished = recorder.finish();
    Ok(Session {
        recorder,
        exports,
        ending,
        finished,
        terminal_lost,
    })
}

/// Run a prepared sweep with the live view. Returns the exit code.
pub async fn run_tui(prepared: Prepared) -> Result<i32> {
    let mut guard = match TerminalGuard::enter() {
        Ok(guard) => guard,
        Err(e) => {
            // A terminal that will not take raw mode can still get the run.
            crate::say!("tokbench: no live view ({e:#}); running headless");
            return run::run_headless(prepared).await;
        }
    };
    let mut app = live_app(&prepared, Palette::new(ColorMode::from_env()));
    // The result folder is opened after the terminal is taken, so that an
    // unwritable one is reported (by the guard's restore, then main)
    // before any load is sent.
    let Session {
        recorder,
        mut exports,
        ending,
        finished,
        terminal_lost,
    } = live_session(
        &mut guard.terminal,
        &prepared,
        &mut app,
        true,
        |_| {},
        std::future::pending(),
    )
    .await?;
    drop(guard);
    // After a panic on another thread its report (color-eyre's, with a
    // backtrace) can take longer than saving the run: wait for it, or the
    // process exits first and the message the user needs is lost.
    let waiting_since = Instant::now();
    while terminal::panicked()
        && !terminal::panic_reported()
        && waiting_since.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if let Err(e) = &finished {
        exports.failed(&run::one_line(e), EXIT_FAILED);
    }
    if terminal_lost {
        finished?;
        crate::say!(
            "tokbench: the terminal went away (SSH session dropped?); saved what was measured in {}",
            recorder.dir().display()
        );
        exports
            .finish(&recorder, EXIT_INTERRUPTED, None, true)
            .await?;
        return Ok(EXIT_INTERRUPTED);
    }
    let ending = match ending {
        Ok(ending) => ending,
        Err(e) => {
            exports.failed(&run::one_line(&e), EXIT_FAILED);
            return Err(e);
        }
    };
    finished?;

    if let Ending::Failed(error) = &ending {
        let error = &run::failure_line(error, recorder.run());
        crate::say!("tokbench: {error}");
        exports
            .finish(&recorder, EXIT_FAILED, Some(error), false)
            .await?;
        return Ok(EXIT_FAILED);
    }
    // The same closing lines as the headless face.
    run::print_results(&recorder, &mut std::io::stdout());
    let failed = run::print_thresholds(&recorder, &mut std::io::stdout());
    let (code, signalled) = match ending {
        Ending::Signal => (EXIT_INTERRUPTED, true),
        _ if failed => (run::EXIT_CHECK_FAILED, false),
        _ => (EXIT_OK, false),
    };
    exports.finish(&recorder, code, None, signalled).await?;
    Ok(code)
}

/// `TOKBENCH_TEST_PANIC=S`: a task panics S seconds into the view, so a
/// test can check on a real binary (the `dist` build included: its panic
/// setting decides this) that the hook in terminal.rs gives the terminal
/// back and the run is stopped and saved. Unset, nothing happens.
fn panic_on_purpose_if_asked() {
    let after = std::env::var("TOKBENCH_TEST_PANIC")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && (0.0..=3600.0).contains(s));
    if let Some(after) = after {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(after)).await;
            panic!("TOKBENCH_TEST_PANIC: a panic in the live view's process, on purpose");
        });
    }
}

/// The context of every draw error.
const DRAW_FAILED: &str = "cannot draw on the terminal";

/// After the view failed: feed the recorder what the stopped driver still
/// sends, until its last word or the stop grace.
async fn drain_driver(driver: &mut DriverHandle, recorder: &mut Recorder, exports: &mut Exports) {
    // Well inside the 2 s a hung-up session has to save and leave.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, driver.events.recv()).await {
        let last = matches!(event, DriverEvent::Finished { .. });
        // A recorder error here is reported by finish() just after.
        let finished = recorder
            .on_event(&event)
            .ok()
            .flatten()
            .map(|l| l.info.index);
        let _ = exports.on_event(&event, finished, recorder);
        if last {
            break;
        }
    }
}

/// Each series' capacity, knee and peak so far.
fn series_results(recorder: &Recorder) -> Vec<app::SeriesResult> {
    recorder
        .tally()
        .series_indexes()
        .into_iter()
        .map(|index| {
            let decision = recorder.tally().decision_of(index);
            let peak = recorder
                .finished()
                .iter()
                .filter(|l| l.info.series == index && l.file.is_some())
                .filter(|l| !l.partial && !l.is_unsteady())
                .map(|l| l.stats.output_throughput)
                .reduce(f64::max);
            app::SeriesResult {
                index,
                label: recorder.tally().series_label(index),
                capacity: decision.capacity.as_ref().ok().map(|c| c.concurrency),
                knee: decision
                    .knee
                    .as_ref()
                    .map(|k| (k.from_concurrency, k.to_concurrency)),
                peak_tok_s: peak,
            }
        })
        .collect()
}

/// Why the server is being looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LookFor {
    /// The first series' baseline.
    Baseline,
    /// `s`: a default label for the prompt.
    Prompt,
    /// The server came back: start the next series.
    Restart,
}

/// The series of a live run: what the server looked like when the current
/// series began, and the look-ups under way.
struct SeriesWatch {
    client: reqwest::Client,
    base_url: String,
    baseline: crate::probe::series::SeriesLook,
    looks_tx: tokio::sync::mpsc::UnboundedSender<(LookFor, crate::probe::series::SeriesLook)>,
    looks: tokio::sync::mpsc::UnboundedReceiver<(LookFor, crate::probe::series::SeriesLook)>,
    /// The look behind the prompt's default label.
    prompt_look: Option<crate::probe::series::SeriesLook>,
    restart_look_out: bool,
}

impl SeriesWatch {
    fn start(
        prepared: &Prepared,
        first_series: usize,
        recorder: &mut Recorder,
        app: &mut App,
    ) -> SeriesWatch {
        let (looks_tx, looks) = tokio::sync::mpsc::unbounded_channel();
        let baseline = crate::probe::series::SeriesLook {
            engine: prepared.identity.engine.clone(),
            engine_version: prepared.identity.engine_version.clone(),
            model: Some(prepared.model.clone()),
            ..Default::default()
        };
        let label = app.series_label(first_series);
        app.set_series_label(first_series, &label);
        recorder.set_series(first_series, label, baseline.to_json());
        let mut watch = SeriesWatch {
            client: prepared.client.clone(),
            base_url: prepared.plan.base_url.clone(),
            baseline,
            looks_tx,
            looks,
            prompt_look: None,
            restart_look_out: false,
        };
        watch.look_for(LookFor::Baseline);
        watch
    }

    fn look_for(&mut self, purpose: LookFor) {
        if purpose == LookFor::Restart {
            self.restart_look_out = true;
        }
        let (client, base, tx) = (
            self.client.clone(),
            self.base_url.clone(),
            self.looks_tx.clone(),
        );
        tokio::spawn(async move {
            let look = crate::probe::series::look(&client, &base).await;
            let _ = tx.send((purpose, look));
        });
    }

    fn on_look(
        &mut self,
        app: &mut App,
        recorder: &mut Recorder,
        driver: &DriverHandle,
        purpose: LookFor,
        look: crate::probe::series::SeriesLook,
    ) {
        match purpose {
            LookFor::Baseline => {
                // The slots and blocks the first series ran with.
                self.baseline.slots = look.slots;
                self.baseline.gpu_blocks = look.gpu_blocks;
                recorder.set_series(
                    app.series,
                    app.series_label(app.series),
                    self.baseline.to_json(),
                );
            }
            LookFor::Prompt => {
                let fallback = crate::analysis::series::default_label(app.series + 1);
                app.offer_label(crate::probe::series::default_label(
                    &self.baseline,
                    &look,
                    &fallback,
                ));
                self.prompt_look = Some(look);
            }
            LookFor::Restart => {
                self.restart_look_out = false;
                if !app.server_back {
                    return;
                }
                if let Some(refused) = crate::probe::series::refusal(&self.baseline, &look) {
                    app.server_back = false;
                    app.refuse_series(&refused);
                    return;
                }
                let fallback = crate::analysis::series::default_label(app.series + 1);
                let label = crate::probe::series::default_label(&self.baseline, &look, &fallback);
                self.begin(app, recorder, driver, label, Some(look));
            }
        }
    }

    /// Name the next series, then have the driver start it.
    fn begin(
        &mut self,
        app: &mut App,
        recorder: &mut Recorder,
        driver: &DriverHandle,
        label: String,
        look: Option<crate::probe::series::SeriesLook>,
    ) {
        let look = look.unwrap_or_else(|| self.baseline.clone());
        if let Some(refused) = crate::probe::series::refusal(&self.baseline, &look) {
            app.refuse_series(&refused);
            return;
        }
        let next = app.series + 1;
        app.set_series_label(next, &label);
        recorder.set_series(next, label, look.to_json());
        self.baseline = look;
        app.server_back = false;
        let _ = driver.commands.send(Command::NewSeries);
    }
}

/// CPU share of this process (load tasks included) over the last second.
struct CpuMeter {
    cpu: Duration,
    wall: Instant,
}

impl CpuMeter {
    fn new() -> CpuMeter {
        CpuMeter {
            cpu: process_cpu_time(),
            wall: Instant::now(),
        }
    }

    /// A fresh figure once a second, `None` in between.
    fn sample(&mut self) -> Option<Option<f64>> {
        let wall = self.wall.elapsed();
        if wall < Duration::from_secs(1) {
            return None;
        }
        let cpu = process_cpu_time();
        let percent = cpu_percent(self.cpu, cpu, wall);
        self.cpu = cpu;
        self.wall = Instant::now();
        Some(percent)
    }
}

/// One driver event into the state and the recorder, which gets every
/// event exactly as the headless runner feeds it.
fn absorb(
    app: &mut App,
    recorder: &mut Recorder,
    exports: &mut Exports,
    event: &DriverEvent,
) -> Result<()> {
    app.on_driver_event(event);
    let finished = recorder.on_event(event)?.map(|l| l.info.index);
    exports.on_event(event, finished, recorder)?;
    // The plan is done (the screen stays up for keys) or the run is over:
    // the model fitted to its summary, and its line drawn dashed.
    let plan_over = matches!(event, DriverEvent::PlanDone | DriverEvent::Finished { .. });
    if plan_over && app.tune.is_none() {
        crate::model::files::fit_and_save(recorder.dir(), &mut std::io::sink());
        if let Ok(run) = crate::report::saved::SavedRun::load(recorder.dir()) {
            app.predicted = view::predicted_curve(&run).into_iter().collect();
        }
    }
    if let Some(level) =
        finished.and_then(|i| recorder.finished().iter().rev().find(|l| l.info.index == i))
    {
        app.on_level_saved(level);
        // A handful of levels: cheap, and only when one finishes.
        let decision = recorder.tally().decision();
        let mut lines = recorder.tally().verdict_lines(&decision, false);
        // Several series: each one's result, and the last against the first.
        let results = series_results(recorder);
        // (A tune says each setting's result in its own rows.)
        if results.len() > 1 && app.tune.is_none() {
            lines.splice(0..0, app::series_lines(&results));
        }
        app.shown.series_results = results;
        app.set_verdict(
            decision.capacity.as_ref().ok().map(|c| c.concurrency),
            decision
                .knee
                .as_ref()
                .map(|k| (k.from_concurrency, k.to_concurrency)),
            lines,
        );
        // The result panel shows the cost in figures (and the verdict
        // when there are none).
        app.set_cost(
            recorder
                .tally()
                .cost(&decision)
                .as_ref()
                .map(CostView::from_cost),
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn event_loop(
    terminal: &mut Tui,
    app: &mut App,
    driver: &mut DriverHandle,
    mut server_samples: tokio::sync::mpsc::UnboundedReceiver<crate::probe::live::ServerSample>,
    probing: bool,
    recorder: &mut Recorder,
    exports: &mut Exports,
    fps: u32,
    run_start: Instant,
    mut series: SeriesWatch,
    mut stop_when: std::pin::Pin<&mut impl std::future::Future<Output = String>>,
) -> Result<Ending> {
    let tune = app.tune.is_some();
    let mut skipping = false;
    let mut stopped_by: Option<String> = None;
    let mut input = EventStream::new();
    let mut frames = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(fps.max(1))));
    frames.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut interrupt = pin!(run::interrupted());
    let mut cpu = CpuMeter::new();
    let mut signalled = false;
    let mut driver_open = true;
    let mut input_open = true;
    let mut input_errors = terminal::InputErrors::default();
    let mut stop_sent_at: Option<Instant> = None;

    let mut redraw = |terminal: &mut Tui, app: &mut App, driver: &DriverHandle| -> Result<()> {
        // After a panic the hook gave the terminal back: never paint over it.
        if terminal::panicked() {
            return Ok(());
        }
        app.set_queue(
            driver.in_flight.load(Ordering::Relaxed),
            driver.streaming.load(Ordering::Relaxed),
        );
        // Three seconds without a scrape: say so once, not an error a second.
        if probing && app.server.is_none() && run_start.elapsed() > Duration::from_secs(3) {
            app.server_missing = true;
        }
        app.on_tick(run_start.elapsed());
        // A change whose settle window closed goes to the driver now.
        if let Some(command) = app.due_command() {
            if let Command::SetConcurrency(n) = command {
                app.target = n;
            }
            let _ = driver.commands.send(command);
        }
        if let Some(percent) = cpu.sample() {
            app.set_client_cpu(percent);
        }
        terminal
            .draw(|frame| draw::draw(frame, app))
            .wrap_err(DRAW_FAILED)?;
        Ok(())
    };
    redraw(terminal, app, driver)?;

    loop {
        tokio::select! {
            event = driver.events.recv(), if driver_open => match event {
                Some(event) => {
                    absorb(app, recorder, exports, &event)?;
                    // Take everything already queued: at 1000 records a
                    // second this is one state update per frame, not 1000.
                    for _ in 0..MAX_BATCH {
                        match driver.events.try_recv() {
                            Ok(event) => absorb(app, recorder, exports, &event)?,
                            Err(_) => break,
                        }
                    }
                }
                None => {
                    driver_open = false;
                    if !app.is_finished() {
                        // The driver task ended without its last word: a bug.
                        app.on_driver_event(&DriverEvent::Finished {
                            stopped_by_user: false,
                            error: Some("the load driver stopped unexpectedly".into()),
                        });
                    }
                }
            },
            Some(sample) = server_samples.recv() => {
                recorder.on_server_sample(&sample);
                app.on_server_sample(&sample);
            }
            key = input.next(), if input_open => match key {
                Some(Ok(Event::Key(key))) => {
                    input_errors.ok();
                    match app.on_key(key) {
                        Some(Action::Send(command)) => {
                            if command == Command::Stop {
                                stop_sent_at = Some(Instant::now());
                            }
                            // A driver that already ended has dropped its
                            // receiver; nothing is left to steer then.
                            let _ = driver.commands.send(command);
                        }
                        Some(Action::Exit) => return Ok(Ending::Quit),
                        Some(Action::SkipSetting) => {
                            skipping = true;
                            stop_sent_at = Some(Instant::now());
                            let _ = driver.commands.send(Command::Stop);
                        }
                        Some(Action::ProbeForLabel) => series.look_for(LookFor::Prompt),
                        Some(Action::NewSeries(label)) => {
                            let look = series.prompt_look.take();
                            series.begin(app, recorder, driver, label, look);
                        }
                        None => {}
                    }
                    // Show the key's effect now, not at the next frame.
                    redraw(terminal, app, driver)?;
                }
                Some(Ok(Event::Resize(..))) => {
                    input_errors.ok();
                    redraw(terminal, app, driver)?;
                }
                Some(Ok(_)) => input_errors.ok(),
                // No more input (stdin closed): nobody can press q, so the
                // run ends when the driver does.
                Some(Err(_)) => {
                    if input_errors.gone_after_error() {
                        input_open = false;
                    }
                }
                None => input_open = false,
            },
            Some((purpose, look)) = series.looks.recv() => {
                series.on_look(app, recorder, driver, purpose, look);
            }
            _ = frames.tick() => {
                recorder.flush_if_due()?;
                if app.server_back && !series.restart_look_out {
                    series.look_for(LookFor::Restart);
                }
                if terminal::panicked() && stop_sent_at.is_none() {
                    // The hook gave the terminal back; save and leave.
                    stop_sent_at = Some(Instant::now());
                    app.quitting = true;
                    let _ = driver.commands.send(Command::Stop);
                }
                if !terminal::panicked() {
                    redraw(terminal, app, driver)?;
                }
            }
            why = &mut stop_when, if stopped_by.is_none() => {
                app.quitting = true;
                stop_sent_at = Some(Instant::now());
                stopped_by = Some(why);
                let _ = driver.commands.send(Command::Stop);
            }
            _ = &mut interrupt, if !signalled => {
                signalled = true;
                app.quitting = true;
                stop_sent_at = Some(Instant::now());
                let _ = driver.commands.send(Command::Stop);
            }
        }

        if let Phase::Finished { error, .. } = &app.phase {
            if let Some(error) = error {
                return Ok(Ending::Failed(error.clone()));
            }
            if terminal::panicked() {
                return Ok(Ending::Failed(
                    "the live view hit a bug (panic above); results so far are saved".into(),
                ));
            }
            if signalled {
                return Ok(Ending::Signal);
            }
            if let Some(why) = stopped_by {
                return Ok(Ending::StoppedBy(why));
            }
            if skipping {
                return Ok(Ending::Skipped);
            }
            if app.quitting || !input_open {
                return Ok(Ending::Quit);
            }
            if tune {
                return Ok(Ending::Done);
            }
            // Finished by itself: the final screen stays until q.
        } else if stop_sent_at.is_some_and(|at| at.elapsed() >= STOP_GRACE) {
            // The driver did not confirm the stop in time; what is open is
            // saved as partial by the recorder's finish.
            return Ok(if signalled {
                Ending::Signal
            } else if let Some(why) = stopped_by {
                Ending::StoppedBy(why)
            } else if skipping {
                Ending::Skipped
            } else {
                Ending::Quit
            });
        }
    }
}
