//! The live view of a tune. One terminal for the whole tune: while a
//! server starts, the screen says so with its log's last line; each
//! setting then runs on the sweep's own screen (the same loop) with the
//! tune's line on top, the settings before it on the chart, and each
//! setting's result and the recommendation in the result panel. After the
//! last setting the final screen stays until `q`.
//!
//! The tune (`run::tune`) owns the servers and the words; this only draws
//! and reads keys.

use std::path::Path;
use std::pin::pin;
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr};
use crossterm::event::{Event, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use futures_util::StreamExt;

use super::app::{App, Phase};
use super::draw::SERIES_STYLES;
use super::terminal::{self, TerminalGuard};
use super::theme::{ColorMode, Palette};
use super::widgets::PredictedCurve;
use super::{draw, live_app, live_session, Ending, Session, DRAW_FAILED};
use crate::cli::TuneArgs;
use crate::config::Settings;
use crate::report::recorder::Recorder;
use crate::report::saved::SavedRun;
use crate::run::{self, Prepared, TuneFace, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::tune::view::{StartKey, TuneView, ViewEnd};

/// `tokbench tune`, in the live view where there is a terminal for it.
pub async fn run_tune(args: TuneArgs, settings: Settings) -> Result<i32> {
    run::run_tune(args, settings, |target: &str, dir: &Path| {
        TuneScreen::enter(target, dir)
    })
    .await
}

/// How often the starting screen is drawn (its clock counts seconds).
const START_FRAME: Duration = Duration::from_millis(250);

pub(crate) struct TuneScreen {
    // Dropped in this order: the terminal is given back before the lines
    // held while it was taken are written.
    guard: TerminalGuard,
    _held: HeldLines,
    app: App,
}

/// stderr's lines kept while the screen is up, written when it goes.
struct HeldLines;

impl HeldLines {
    fn hold() -> HeldLines {
        crate::console::hold_lines();
        HeldLines
    }
}

impl Drop for HeldLines {
    fn drop(&mut self) {
        crate::console::release_lines();
    }
}

impl TuneScreen {
    /// Take the terminal for the whole tune; an error when it will not
    /// take raw mode (the tune then runs headless).
    fn enter(target: &str, result_dir: &Path) -> Result<TuneScreen> {
        let guard = TerminalGuard::enter()?;
        let mut app = App::new(
            crate::ui::view::bare_run(target, result_dir),
            Palette::new(ColorMode::from_env()),
        );
        app.tune = Some(TuneView::default());
        Ok(TuneScreen {
            guard,
            _held: HeldLines::hold(),
            app,
        })
    }

    fn draw(&mut self) -> Result<()> {
        if terminal::panicked() {
            return Ok(());
        }
        let app = &self.app;
        self.guard
            .terminal
            .draw(|frame| draw::draw(frame, app))
            .wrap_err(DRAW_FAILED)?;
        Ok(())
    }
}

impl TuneFace for TuneScreen {
    /// The tune's words as they stand.
    fn set_tune(&mut self, view: TuneView) {
        self.app.tune = Some(view);
    }

    fn show_predicted(&mut self, curves: Vec<(String, Vec<(u32, f64)>)>) {
        self.app.predicted = predicted_curves(curves);
    }

    /// The settings measured so far, from the result folder, on the chart.
    fn show_earlier(&mut self, dir: &Path) {
        let Ok(saved) = SavedRun::load(dir) else {
            return;
        };
        let side = crate::ui::view::side_of(&saved, 'A');
        for (index, label) in &side.series_labels {
            self.app.set_series_label(*index, label);
        }
        self.app.earlier = side.levels;
        // The setting before is among them now: its own rows go, so that
        // the level table waits for the next setting's first level.
        let shown = &mut self.app.shown;
        shown.levels.clear();
        shown.capacity = None;
        shown.knee = None;
        shown.verdict.clear();
        shown.cost = None;
    }

    /// While a server starts: the screen redrawn with `view(elapsed)` until
    /// `ready` resolves, or a key asks to skip this setting or quit.
    async fn while_starting<T>(
        &mut self,
        ready: impl std::future::Future<Output = T>,
        view: impl Fn(Duration) -> TuneView,
    ) -> Result<std::result::Result<T, StartKey>> {
        let started = Instant::now();
        let mut ready = pin!(ready);
        let mut input = EventStream::new();
        let mut input_open = true;
        let mut frames = tokio::time::interval(START_FRAME);
        frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // The run before this one has finished; the new one has not begun.
        self.app.phase = Phase::Starting;
        self.app.quitting = false;
        loop {
            tokio::select! {
                out = &mut ready => return Ok(Ok(out)),
                _ = frames.tick() => {
                    self.app.tune = Some(view(started.elapsed()));
                    self.draw()?;
                }
                key = input.next(), if input_open => match key {
                    Some(Ok(Event::Key(key))) if key.kind == KeyEventKind::Press => {
                        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
                        match key.code {
                            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => {
                                return Ok(Err(StartKey::Quit))
                            }
                            KeyCode::Char('c') | KeyCode::Char('C') if ctrl => {
                                return Ok(Err(StartKey::Quit))
                            }
                            KeyCode::Char('n') | KeyCode::Char('N') => {
                                return Ok(Err(StartKey::Skip))
                            }
                            _ => {}
                        }
                    }
                    Some(Ok(_)) => self.draw()?,
                    Some(Err(_)) | None => input_open = false,
                },
            }
        }
    }

    /// One setting's run on the sweep's screen. The settings before it stay
    /// on the chart; the tune's words stay on top.
    async fn run_setting(
        &mut self,
        prepared: &Prepared,
        (series, label): (usize, &str),
        before_load: impl FnOnce(&mut Recorder),
        stop_when: impl std::future::Future<Output = String>,
    ) -> Result<ViewEnd> {
        let mut app = live_app(prepared, self.app.palette);
        // The first setting has no folder to continue: its label is given.
        app.series = series;
        app.set_series_label(series, label);
        app.tune = self.app.tune.take();
        app.earlier = std::mem::take(&mut self.app.earlier);
        app.predicted = std::mem::take(&mut self.app.predicted);
        for (index, label) in &self.app.shown.series_labels {
            app.shown
                .series_labels
                .entry(*index)
                .or_insert_with(|| label.clone());
        }
        self.app = app;
        let Session {
            recorder,
            mut exports,
            ending,
            finished,
            terminal_lost,
        } = live_session(
            &mut self.guard.terminal,
            prepared,
            &mut self.app,
            false,
            before_load,
            stop_when,
        )
        .await?;
        if let Err(e) = &finished {
            exports.failed(&run::one_line(e), EXIT_FAILED);
        }
        if terminal_lost {
            finished?;
            exports
                .finish(&recorder, EXIT_INTERRUPTED, None, true)
                .await?;
            return Ok(ViewEnd::Signal);
        }
        let ending = match ending {
            Ok(ending) => ending,
            Err(e) => {
                exports.failed(&run::one_line(&e), EXIT_FAILED);
                return Err(e);
            }
        };
        finished?;
        let (end, code, error) = match ending {
            Ending::Done => (ViewEnd::Finished, EXIT_OK, None),
            Ending::Skipped => (ViewEnd::Skipped, EXIT_OK, None),
            Ending::Quit => (ViewEnd::Quit, EXIT_OK, None),
            Ending::Signal => (ViewEnd::Signal, EXIT_INTERRUPTED, None),
            Ending::StoppedBy(why) => (ViewEnd::StoppedBy(why), EXIT_OK, None),
            Ending::Failed(e) => (ViewEnd::Failed(e.clone()), EXIT_FAILED, Some(e)),
        };
        exports
            .finish(&recorder, code, error.as_deref(), code == EXIT_INTERRUPTED)
            .await?;
        Ok(end)
    }

    /// The tune is over: its final words on the screen until a key that
    /// quits (or no more input, or a signal).
    async fn show_final(&mut self, view: TuneView) -> Result<()> {
        self.app.tune = Some(view);
        self.app.phase = Phase::Finished {
            stopped_by_user: false,
            error: None,
        };
        self.app.quitting = false;
        self.draw()?;
        let mut input = EventStream::new();
        let mut interrupt = pin!(run::interrupted());
        loop {
            tokio::select! {
                key = input.next() => match key {
                    Some(Ok(Event::Key(key))) if key.kind == KeyEventKind::Press => {
                        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
                        match key.code {
                            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => return Ok(()),
                            KeyCode::Char('c') | KeyCode::Char('C') if ctrl => return Ok(()),
                            KeyCode::Char('v') | KeyCode::Char('V') => {
                                self.app.frontier = !self.app.frontier;
                                self.draw()?;
                            }
                            _ => {}
                        }
                    }
                    Some(Ok(_)) => self.draw()?,
                    Some(Err(_)) | None => return Ok(()),
                },
                _ = &mut interrupt => return Ok(()),
            }
        }
    }

    fn leave(self) {}
}

/// A tune's predicted settings as the chart's dashed curves, each in a
/// colour of its own and named by its setting.
pub(super) fn predicted_curves(curves: Vec<(String, Vec<(u32, f64)>)>) -> Vec<PredictedCurve> {
    curves
        .into_iter()
        .enumerate()
        .map(|(i, (label, points))| PredictedCurve {
            points,
            series: (i % SERIES_STYLES) as u8,
            label: Some(label),
        })
        .collect()
}
