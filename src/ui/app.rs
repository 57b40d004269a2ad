//! The live view's state and how it changes: driver events in, key presses
//! in, driver commands out. No I/O and no clock of its own (the caller says
//! what time it is), so every screen can be built from synthetic events in a
//! test.
//!
//! The view never measures: every figure here is folded from the records the
//! load tasks filled in, with the same definitions the result files use
//! (`stats::summary::level_stats`), so the table on screen and the files agree.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::load::driver::{Command, DriverEvent, FitEvent, Mode, MAX_CONCURRENCY};
use crate::record::{ErrorClass, Outcome};
use crate::report::recorder::FinishedLevel;
use crate::stats::live::{LiveWindow, DEFAULT_WINDOW_SECS};

use super::theme::Palette;
pub use crate::tune::view::TuneView;

// The state and its parts (docs/architecture.md section 3): the types here,
// how it changes in one file per kind of input.
mod events;
mod keys;
mod level;
mod live;
mod panels;
mod queue;
mod run_view;

pub(crate) use level::{Figures, LevelRow, LevelState};
pub(crate) use panels::{CostView, Counters, Latency, SparkPoint, OWN_COLUMN};
pub(crate) use run_view::{knob_text, one_line, RampView, RunView};

/// Seconds over which 503, 429 and timeout rates are averaged.
const RATE_WINDOW_S: u64 = 5;
/// The client's waiting count and the server's queue gauge may differ by
/// this much (requests in prefill count as waiting on the client's side,
/// and the scrape is up to a second old) ...
const QUEUE_DISAGREE_BY: f64 = 2.0;
/// ... for this long before the view says so.
const QUEUE_DISAGREE_FOR_S: u64 = 5;

/// How long a one-line status note stays in the footer.
const STATUS_FOR: Duration = Duration::from_secs(4);
/// The sparkline series and the running level's figures are recomputed at
/// most this often: cheap, but not worth doing for every frame.
const RECOMPUTE_EVERY: Duration = Duration::from_millis(500);

/// Where the run is.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// Nothing heard from the driver yet.
    Starting,
    /// Warmup requests (discarded) are running.
    Warmup { requests: u32, concurrency: u32 },
    /// Levels are running.
    Running,
    /// The driver is done; no event follows.
    Finished {
        stopped_by_user: bool,
        error: Option<String>,
    },
}

/// What a key press asks of the loop.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action {
    /// Send this to the driver.
    Send(Command),
    /// Start a new series with this label (the loop names it for the
    /// recorder, then tells the driver).
    NewSeries(String),
    /// The user asked for a new series: look at the server for a label.
    ProbeForLabel,
    /// Leave the view (the run is already over).
    Exit,
    /// `n` in a tune: stop this setting (saved as partial) and go on to
    /// the next one.
    SkipSetting,
}

/// A change of concurrency or rate waiting out the settle window, so that
/// several quick presses make one level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pending {
    Concurrency(u32),
    Rate(f64),
}

/// One concurrency key: `+`, `-`, `]`, `[`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Up,
    Down,
    Double,
    Halve,
}

impl Step {
    /// The concurrency after this key from `t` (unbounded; callers clamp).
    pub(crate) fn apply(self, t: u32) -> u32 {
        match self {
            Step::Up => t.saturating_add(1),
            Step::Down => t.saturating_sub(1),
            Step::Double => t.saturating_mul(2),
            Step::Halve => t / 2,
        }
    }
}

/// The one-line prompt of `s`: a label for the next series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelPrompt {
    pub text: String,
    /// The user typed: a default that arrives later does not overwrite it.
    pub edited: bool,
    /// Why the last Enter was refused.
    pub error: Option<String>,
}

pub(crate) use crate::probe::series::MAX_LABEL_CHARS;

pub(crate) use crate::analysis::series::{series_lines, SeriesResult};

/// What belongs to one run: its identity, levels and results. `App::shown`
/// is the run on screen (the live one, or the one the table shows in
/// `tokbench view`); in `tokbench view A B` the other waits in
/// `Saved::other`, overlaid on the chart, and `Tab` swaps the two whole.
#[derive(Clone, Debug)]
pub struct RunState {
    /// `A` for the first folder given to `tokbench view`, `B` for the
    /// second; `A` for a live run.
    pub label: char,
    pub run: RunView,
    /// Every level started, in run order (`LevelInfo::index` == position).
    pub levels: Vec<LevelRow>,
    pub counters: Counters,
    /// The sweep's capacity so far (concurrency), once the analysis finds one.
    pub capacity: Option<u32>,
    /// The knee so far: from and to concurrency.
    pub knee: Option<(u32, u32)>,
    /// Capacity, knee and notes in words, one line each.
    pub verdict: Vec<String>,
    /// Cost at capacity, when a GPU price was given and a capacity is known.
    pub cost: Option<CostView>,
    /// The SLOs it was judged against, in words (a saved run).
    pub slo: Option<String>,
    /// Series labels by index.
    pub series_labels: BTreeMap<usize, String>,
    /// Capacity and knee of each series so far (label, capacity, knee,
    /// peak tok/s), for the comparison line.
    pub series_results: Vec<SeriesResult>,
}

impl RunState {
    /// A run with nothing measured yet.
    pub(crate) fn new(run: RunView) -> RunState {
        RunState {
            label: 'A',
            run,
            levels: Vec::new(),
            counters: Counters::default(),
            capacity: None,
            knee: None,
            verdict: Vec::new(),
            cost: None,
            slo: None,
            series_labels: BTreeMap::new(),
            series_results: Vec::new(),
        }
    }
}

/// A finished run read back from its folder (`tokbench view`): nothing is
/// measured or sent, and the screen has no live parts.
#[derive(Clone, Debug)]
pub struct Saved {
    /// `view A B`: the other run.
    pub other: Option<Box<RunState>>,
    /// The two runs were measured at different shapes: said in the header.
    pub warning: Option<String>,
}

pub struct App {
    /// The run on screen: its identity, levels and results.
    pub shown: RunState,
    pub palette: Palette,
    pub phase: Phase,
    /// The driver's concurrency target (what the user set, before the driver confirms).
    pub target: u32,
    /// Requests in flight, read from the driver's gauge before each frame.
    pub in_flight: u32,
    /// Of those, the ones that had their first token; the rest wait.
    pub streaming: u32,
    /// Second of the run -> (sum, frames) of the waiting count sampled each
    /// frame, for the queue bars; the last two minutes only.
    waiting_seconds: BTreeMap<u64, (f64, u32)>,
    /// The most in flight in each recent second: a scrape of the server's
    /// running count is up to a probe interval old.
    in_flight_seconds: BTreeMap<u64, u32>,
    /// Second of the run -> (sum, frames) of the waiting's in-prefill part,
    /// where the server counts what it runs; the last two minutes only.
    prefill_seconds: BTreeMap<u64, (f64, u32)>,
    /// Second of the run -> failures of the classes shown as rates
    /// (503, 429, timeout), the last minute only.
    failure_seconds: BTreeMap<u64, [u32; 3]>,
    /// Seconds the client's and the server's queue counts have disagreed
    /// by more than `QUEUE_DISAGREE_BY`, in a row.
    queue_disagree_since: Option<u64>,
    pub paused: bool,
    /// `--find-capacity`: where the search stands.
    pub search: Option<crate::load::driver::SearchProgress>,
    /// The run's expected time left as the driver last said it: when (run
    /// clock) and how many seconds then.
    pub time_left: Option<(Duration, f64)>,
    /// Input and output tokens of the completed requests, and their count:
    /// the achieved lengths beside the asked ones in the header.
    pub achieved: (u64, u64, u64),
    /// The user asked to quit; waiting for the driver to stop.
    pub quitting: bool,
    pub show_help: bool,
    /// Since the run started.
    pub elapsed: Duration,
    /// Output tok/s over the last few complete seconds (all levels).
    pub recent_tok_s: f64,
    /// CPU use of this process, % of one core, over the last second.
    pub client_cpu: Option<f64>,
    /// The client's receive lag (user-space read minus kernel receive time,
    /// ms) of the latest kernel-timed reads, newest last, at most
    /// `RX_LAG_WINDOW` of them.
    rx_lag_ms: VecDeque<f32>,
    /// `--probe-rate`: the probe requests of the latest level that sent
    /// any, and that level.
    pub(crate) probes: Option<(usize, crate::stats::probes::ProbeTally)>,
    /// `--ramp`: its level, and its requests second by second.
    pub(crate) ramp_seconds: Option<(usize, crate::stats::rate_series::RateSeries)>,
    /// A saved ramp (`tokbench view`): its chart as its level file has it.
    pub(crate) saved_ramp: Option<super::draw::RampFigures>,
    /// The server's own gauges from the last scrape (running, waiting,
    /// kv_cache_usage, deferred, slots_busy, gpu_share, ...).
    pub server: Option<std::collections::BTreeMap<&'static str, f64>>,
    /// The probe ran and the server exposes none of its engine's gauges.
    pub server_missing: bool,
    /// Second of the run -> requests queued in the server (last scrape of
    /// that second), for the server bars; the last two minutes only.
    pub server_queue: std::collections::BTreeMap<u64, f64>,
    pub latency: Latency,
    /// `Some` for a run read back from disk (`tokbench view`).
    pub saved: Option<Saved>,
    /// A concurrency or rate change waiting out the settle window, and when
    /// it goes.
    pub pending: Option<(Pending, Duration)>,
    /// The key steps of a pending concurrency change, in order: when the
    /// target moves under it (a planned level starting at a boundary), the
    /// change is worked out again from the new target.
    pub pending_steps: Vec<Step>,
    /// How long after the last press a change goes (`--settle-s`).
    pub settle: Duration,
    /// Steady-state rule: completions per stream, largest relative error.
    pub steady_per_stream: u32,
    pub steady_rse: f64,
    /// What the last step did, once its level settled:
    /// `64 → 128 streams: +0.4% tok/s, p99 TTFT ×11.5, queue +64`.
    pub step_summary: Option<String>,
    /// The level the step summary was last written for.
    step_summary_for: Option<usize>,
    /// Open loop: the rate the running level sends at.
    pub rate: Option<f64>,
    /// The series running now.
    pub series: usize,
    /// The server went away at this offset; dispatch waits.
    pub server_gone_since: Option<Duration>,
    /// It answered again: the loop looks at it and starts a series.
    pub server_back: bool,
    /// The `s` prompt, while open.
    pub prompt: Option<LabelPrompt>,
    /// A tune: where it is and what it found so far.
    pub tune: Option<TuneView>,
    /// A tune: the levels of the settings before this one, drawn on the
    /// chart beside the current setting's (never in the level table).
    pub earlier: Vec<LevelRow>,
    /// Throughput the server's model predicts (settings or streams not
    /// measured): drawn dashed on the chart, never in the level table.
    pub(crate) predicted: Vec<crate::ui::widgets::PredictedCurve>,
    /// The chart panel shows the frontier (per-user speed against total
    /// throughput) instead of throughput against streams: `v` toggles.
    pub frontier: bool,
    /// Why the last new series was refused.
    pub series_refused: Option<String>,
    status: Option<(String, Duration)>,
    window: LiveWindow,
    /// Seconds at which the target changed, oldest first, pruned to the window.
    target_changes: VecDeque<u64>,
    /// Records or changes arrived since `latency` was computed.
    latency_stale: bool,
    /// When the driver said it finished (the last tick before it).
    stopped_at: Option<Duration>,
    last_recompute: Option<Duration>,
}

/// Reads the live view's receive-lag p99 is taken over.
const RX_LAG_WINDOW: usize = 4096;

impl App {
    pub fn new(run: RunView, palette: Palette) -> App {
        App {
            shown: RunState::new(run),
            palette,
            phase: Phase::Starting,
            target: 0,
            in_flight: 0,
            streaming: 0,
            waiting_seconds: BTreeMap::new(),
            in_flight_seconds: BTreeMap::new(),
            prefill_seconds: BTreeMap::new(),
            failure_seconds: BTreeMap::new(),
            queue_disagree_since: None,
            paused: false,
            search: None,
            time_left: None,
            achieved: (0, 0, 0),
            quitting: false,
            show_help: false,
            elapsed: Duration::ZERO,
            recent_tok_s: 0.0,
            client_cpu: None,
            rx_lag_ms: VecDeque::new(),
            probes: None,
            ramp_seconds: None,
            saved_ramp: None,
            server: None,
            server_missing: false,
            server_queue: std::collections::BTreeMap::new(),
            latency: Latency::default(),
            saved: None,
            pending: None,
            pending_steps: Vec::new(),
            settle: Duration::from_secs(1),
            steady_per_stream: crate::stats::steady::STEADY_COMPLETIONS_PER_STREAM,
            steady_rse: crate::stats::steady::STEADY_RSE,
            step_summary: None,
            step_summary_for: None,
            rate: None,
            series: 0,
            server_gone_since: None,
            server_back: false,
            prompt: None,
            tune: None,
            earlier: Vec::new(),
            predicted: Vec::new(),
            frontier: false,
            series_refused: None,
            status: None,
            window: LiveWindow::new(DEFAULT_WINDOW_SECS),
            target_changes: VecDeque::new(),
            latency_stale: true,
            stopped_at: None,
            last_recompute: None,
        }
    }

    /// The screen of a finished run read back from disk: `shown` in the
    /// table, `other` (when given) overlaid on the chart.
    pub(crate) fn from_saved(
        mut shown: RunState,
        other: Option<RunState>,
        warning: Option<String>,
        palette: Palette,
    ) -> App {
        shown.verdict = shown.verdict.iter().map(|l| one_line(l)).collect();
        let mut app = App::new(shown.run.clone(), palette);
        app.shown = shown;
        app.phase = Phase::Finished {
            stopped_by_user: false,
            error: None,
        };
        app.saved = Some(Saved {
            other: other.map(Box::new),
            warning: warning.as_deref().map(one_line),
        });
        app
    }

    pub(crate) fn is_saved(&self) -> bool {
        self.saved.is_some()
    }

    /// The run overlaid on the chart (`tokbench view A B`).
    pub(crate) fn other(&self) -> Option<&RunState> {
        self.saved.as_ref().and_then(|s| s.other.as_deref())
    }

    /// `Tab` in `tokbench view A B`: the other run comes forward.
    pub(crate) fn swap_runs(&mut self) -> bool {
        let Some(other) = self.saved.as_mut().and_then(|s| s.other.as_deref_mut()) else {
            return false;
        };
        std::mem::swap(&mut self.shown, other);
        true
    }

    /// The level dispatching now, if any.
    pub(crate) fn current(&self) -> Option<&LevelRow> {
        self.shown.levels.last().filter(|l| l.is_running())
    }

    /// Seconds the run is expected to take yet: the driver's last figure,
    /// less the time since it said it; None once the run is over.
    pub(crate) fn seconds_left(&self) -> Option<f64> {
        if self.is_finished() {
            return None;
        }
        let (at, seconds) = self.time_left?;
        Some((seconds - self.elapsed.saturating_sub(at).as_secs_f64()).max(0.0))
    }

    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished { .. })
    }

    /// The run has left the plan for a hand-set level.
    pub(crate) fn is_manual(&self) -> bool {
        self.current().is_some_and(|l| l.info.mode == Mode::Manual)
    }

    /// The footer's transient note, if one is showing.
    pub(crate) fn status(&self) -> Option<&str> {
        self.status.as_ref().map(|(s, _)| s.as_str())
    }

    fn note(&mut self, text: impl Into<String>) {
        self.status = Some((text.into(), self.elapsed + STATUS_FOR));
    }

    /// The analysis of the levels finished so far: where capacity and the
    /// knee are, and what it says in words (the loop asks the recorder
    /// after every saved level).
    pub(crate) fn set_verdict(
        &mut self,
        capacity: Option<u32>,
        knee: Option<(u32, u32)>,
        lines: Vec<String>,
    ) {
        self.shown.capacity = capacity;
        self.shown.knee = knee;
        self.shown.verdict = lines.iter().map(|l| one_line(l)).collect();
    }

    /// The cost at capacity over the levels so far (`None` without a GPU
    /// price or a capacity).
    pub(crate) fn set_cost(&mut self, cost: Option<CostView>) {
        self.shown.cost = cost;
    }

    pub fn set_in_flight(&mut self, n: u32) {
        self.in_flight = n;
    }

    /// The `s` prompt's default label, when the loop has looked at the
    /// server; a label the user already typed stays.
    pub(crate) fn offer_label(&mut self, label: String) {
        if let Some(prompt) = self.prompt.as_mut().filter(|p| !p.edited) {
            prompt.text = one_line(&label);
        }
    }

    /// A new series was refused (another engine answers): said in the
    /// footer; the run stays where it is.
    pub(crate) fn refuse_series(&mut self, why: &str) {
        self.note(one_line(why));
        self.series_refused = Some(one_line(why));
    }

    /// Name a series (before its first level starts).
    pub(crate) fn set_series_label(&mut self, index: usize, label: &str) {
        self.shown.series_labels.insert(index, one_line(label));
    }

    pub(crate) fn series_label(&self, index: usize) -> String {
        self.shown
            .series_labels
            .get(&index)
            .cloned()
            .unwrap_or_else(|| crate::analysis::series::default_label(index))
    }
}

#[cfg(test)]
#[path = "app_tests.rs"]
pub(crate) mod tests;
