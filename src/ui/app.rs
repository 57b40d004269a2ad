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

use crate::analysis::cost::Cost;
use crate::load::driver::{Command, DriverEvent, LevelInfo, Mode, MAX_CONCURRENCY};
use crate::record::{ErrorClass, Outcome, RequestRecord};
use crate::report::recorder::FinishedLevel;
use crate::run::Prepared;
use crate::stats::live::{LiveWindow, DEFAULT_WINDOW_SECS};
use crate::stats::percentile::percentile_sorted;
use crate::stats::steady::SteadyEstimator;

use super::theme::Palette;

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

/// What identifies the run on screen; fixed for the run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunView {
    /// Server root without credentials.
    pub target: String,
    pub engine: String,
    pub engine_version: Option<String>,
    pub model: String,
    /// 0 when unknown (a saved summary without it).
    pub input_len: u32,
    /// 0 when unknown.
    pub output_len: u32,
    /// `None` when a saved summary does not say.
    pub ignore_eos: Option<bool>,
    /// `--extra-body` knobs (and labels) as `k=v` pairs, when given.
    pub knobs: Option<String>,
    /// The target is the built-in simulator (demo).
    pub simulated: bool,
    /// Concurrency of each planned level, in plan order.
    pub plan: Vec<u32>,
    pub result_dir: String,
    /// When the run started (`run.started_at` of a saved summary); the live
    /// view shows its clock instead.
    pub started_at: Option<String>,
    /// The traffic shape's name (`--profile`, or `dataset FILE`), when known.
    pub profile: Option<String>,
    /// `--gpus`: the frontier gives its throughput per GPU.
    pub gpus: Option<u32>,
}

/// `k=v` pairs of a JSON object, one space apart; `None` when empty.
pub fn knob_text(map: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let pairs: Vec<String> = map
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    (!pairs.is_empty()).then(|| pairs.join(" "))
}

impl RunView {
    pub fn from_prepared(p: &Prepared) -> RunView {
        let knobs = p.plan.extra_body.as_ref().and_then(knob_text);
        RunView {
            target: p.plan.display_target.clone(),
            engine: p.identity.engine.clone(),
            engine_version: p.identity.engine_version.clone(),
            model: p.model.clone(),
            input_len: p.plan.input_len,
            output_len: p.plan.output_len,
            ignore_eos: Some(p.plan.ignore_eos),
            knobs,
            simulated: p.plan.simulated,
            plan: p.plan.levels.iter().map(|l| l.concurrency).collect(),
            result_dir: p.result_dir.display().to_string(),
            started_at: None,
            profile: Some(match &p.plan.traffic.dataset {
                Some(d) => format!("dataset {}", d.name),
                None => format!("profile {}", p.plan.traffic.profile),
            }),
            gpus: p.plan.decision.gpus,
        }
        .sanitized()
    }

    /// Server-supplied names (model, engine version) could carry terminal
    /// escape sequences; a cell holding ESC would reach the terminal raw.
    pub fn sanitized(mut self) -> RunView {
        for s in [
            &mut self.target,
            &mut self.engine,
            &mut self.model,
            &mut self.result_dir,
        ] {
            *s = one_line(s);
        }
        self.profile = self.profile.as_deref().map(one_line);
        self.engine_version = self.engine_version.as_deref().map(one_line);
        self.knobs = self.knobs.as_deref().map(one_line);
        self.started_at = self.started_at.as_deref().map(one_line);
        self
    }

    /// `in 1024 / out 1024`, `?` for a length not known.
    /// `(achieved 516 / 265)` once requests completed.
    pub fn achieved_text(achieved: (u64, u64, u64)) -> Option<String> {
        let (input, output, n) = achieved;
        (n > 0).then(|| format!("(achieved {} / {})", input / n, output / n))
    }

    pub fn shape(&self) -> String {
        let n = |x: u32| {
            if x == 0 {
                "?".to_string()
            } else {
                x.to_string()
            }
        };
        format!("in {} / out {}", n(self.input_len), n(self.output_len))
    }
}

/// Text safe for one terminal line: control characters become spaces.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

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
pub enum Action {
    /// Send this to the driver.
    Send(Command),
    /// Start a new series with this label (the loop names it for the
    /// recorder, then tells the driver).
    NewSeries(String),
    /// The user asked for a new series: look at the server for a label.
    ProbeForLabel,
    /// Leave the view (the run is already over).
    Exit,
}

/// A change of concurrency or rate waiting out the settle window, so that
/// several quick presses make one level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pending {
    Concurrency(u32),
    Rate(f64),
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

pub use crate::probe::series::MAX_LABEL_CHARS;

pub use crate::analysis::series::{series_lines, SeriesResult};

/// The figures of one row of the level table.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Output tokens over the level's duration (first dispatch to last end).
    pub output_tok_s: f64,
    /// `output_tok_s` / concurrency.
    pub per_stream_tok_s: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
}

/// Where a level is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelState {
    /// The level dispatching now.
    Running,
    /// Closed; its last requests are still out.
    Draining,
    /// Every request is back.
    Finished { partial: bool },
}

/// One level as the view knows it: running sums over its records.
#[derive(Clone, Debug)]
pub struct LevelRow {
    pub info: LevelInfo,
    pub state: LevelState,
    /// Records back, any outcome.
    pub done: u32,
    pub ok: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub figures: Figures,
    /// The recorder wrote its file (None until the recorder said).
    pub saved: Option<bool>,
    first_start: Option<Duration>,
    last_end: Option<Duration>,
    output_tokens: u64,
    /// TTFT of the completed requests, ms; freed when the level finishes.
    ttft_ms: Vec<f64>,
    /// Records arrived since `figures` was computed.
    stale: bool,
    /// In flight across a concurrency change: not in the figures.
    pub transition: u32,
    /// Per-second throughput since the level's steady stretch began.
    pub steady: SteadyEstimator,
    /// The live estimate: (tok/s, relative standard error).
    pub estimate: Option<(f64, f64)>,
    /// Hand-set levels: steady once enough completed and the estimate
    /// settled; from the recorder's verdict once finished.
    pub is_steady: bool,
    /// A hand-set level left before it settled: dimmed, never charted.
    pub unsteady: bool,
    /// Mean requests waiting for a first token over the level.
    pub waiting_mean: Option<f64>,
    /// Mean requests streaming over the level (effective slots in use).
    pub streaming_mean: Option<f64>,
    /// Open loop: sends later than `LATE_SEND` past their schedule, and the
    /// latest of all.
    pub late_sends: u32,
    pub max_send_lag: Duration,
}

/// A send this late past its schedule counts as late (as `stats::lateness`).
pub const LATE_SEND: Duration = Duration::from_millis(5);

impl LevelRow {
    /// A level read back from a result file: finished, its figures as saved.
    pub fn saved(
        info: LevelInfo,
        partial: bool,
        ok: u32,
        failed: u32,
        figures: Figures,
    ) -> LevelRow {
        LevelRow {
            state: LevelState::Finished { partial },
            done: ok.saturating_add(failed),
            ok,
            failed,
            figures,
            saved: Some(true),
            ..LevelRow::new(info)
        }
    }

    fn new(info: LevelInfo) -> LevelRow {
        LevelRow {
            info,
            state: LevelState::Running,
            done: 0,
            ok: 0,
            failed: 0,
            cancelled: 0,
            figures: Figures::default(),
            saved: None,
            first_start: None,
            last_end: None,
            output_tokens: 0,
            ttft_ms: Vec::new(),
            stale: false,
            transition: 0,
            steady: SteadyEstimator::default(),
            estimate: None,
            is_steady: false,
            unsteady: false,
            waiting_mean: None,
            streaming_mean: None,
            late_sends: 0,
            max_send_lag: Duration::ZERO,
        }
    }

    fn add(&mut self, r: &RequestRecord) {
        if let Some(lag) = r.send_lag {
            self.max_send_lag = self.max_send_lag.max(lag);
            if lag > LATE_SEND {
                self.late_sends += 1;
            }
        }
        if let Some(lag) = r.send_lag {
            self.max_send_lag = self.max_send_lag.max(lag);
            if lag > crate::stats::lateness::LATE_AFTER {
                self.late_sends += 1;
            }
        }
        if r.transition {
            self.transition += 1;
            return;
        }
        self.done += 1;
        self.stale = true;
        match r.outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.output_tokens += u64::from(r.output_tokens);
                if let Some(t) = r.ttft {
                    // At the microsecond the saved statistics keep
                    // (stats::hdr), so the row and the level file agree.
                    self.ttft_ms
                        .push((t.as_secs_f64() * 1_000_000.0).round() / 1000.0);
                }
            }
            Outcome::Failed(_) => self.failed += 1,
            // Cancelled requests count in no statistic (stats::summary).
            Outcome::Cancelled => {
                self.cancelled += 1;
                return;
            }
        }
        self.first_start = Some(self.first_start.map_or(r.start, |s| s.min(r.start)));
        self.last_end = Some(self.last_end.map_or(r.end, |e| e.max(r.end)));
    }

    /// The same figures `level_stats` saves: duration from the first
    /// dispatch to the last end over completed and failed requests, numpy
    /// percentiles over the raw TTFT samples.
    fn recompute(&mut self) {
        if !self.stale {
            return;
        }
        self.stale = false;
        let duration_s = match (self.first_start, self.last_end) {
            (Some(s), Some(e)) => e.saturating_sub(s).as_secs_f64(),
            _ => 0.0,
        };
        let output_tok_s = if duration_s > 0.0 {
            self.output_tokens as f64 / duration_s
        } else {
            0.0
        };
        // A stable sort finds the sorted prefix from the last pass and only
        // sorts and merges the new tail, so this stays cheap as a long
        // manual level grows.
        self.ttft_ms.sort_by(f64::total_cmp);
        let finite_start = self
            .ttft_ms
            .partition_point(|x| !x.is_finite() && x.is_sign_negative());
        let finite = &self.ttft_ms[finite_start..];
        let finite = &finite[..finite.partition_point(|x| x.is_finite())];
        self.figures = Figures {
            output_tok_s,
            per_stream_tok_s: if self.info.concurrency > 0 {
                output_tok_s / f64::from(self.info.concurrency)
            } else {
                0.0
            },
            ttft_p50_ms: percentile_sorted(finite, 50.0),
            ttft_p99_ms: percentile_sorted(finite, 99.0),
        };
    }

    /// Has anything to show in the table.
    pub fn has_results(&self) -> bool {
        self.ok + self.failed > 0
    }

    pub fn is_running(&self) -> bool {
        self.state == LevelState::Running
    }

    pub fn is_partial(&self) -> bool {
        matches!(self.state, LevelState::Finished { partial: true })
    }

    /// Completed requests a hand-set level needs before it can be steady.
    pub fn min_completions(&self, per_stream: u32) -> u32 {
        match self.info.rate {
            Some(rate) => (2.0 * rate).ceil().max(2.0) as u32,
            None => self.info.concurrency.saturating_mul(per_stream),
        }
    }
}

/// Request outcomes over the whole run (warmup excluded).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub ok: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// `ErrorClass::key()` -> count.
    pub by_class: BTreeMap<String, u64>,
    /// `class: message` of the latest failure, one line.
    pub last_error: Option<String>,
}

impl Counters {
    pub fn class(&self, key: &str) -> u64 {
        self.by_class.get(key).copied().unwrap_or(0)
    }

    /// Failures in classes that have no column of their own.
    pub fn other(&self) -> u64 {
        self.by_class
            .iter()
            .filter(|(k, _)| !OWN_COLUMN.contains(&k.as_str()))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Failure classes the counters show by name; the rest are summed as "other".
pub const OWN_COLUMN: [&str; 5] = [
    "http_503",
    "http_429",
    "timeout",
    "stalled",
    "connection_closed",
];

/// One second of the sparklines: p99 of TTFT and ITL among the requests
/// that finished in that second, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SparkPoint {
    pub second: u64,
    pub ttft_p99_us: Option<u64>,
    pub itl_p99_us: Option<u64>,
    /// The concurrency target changed during this second.
    pub marker: bool,
    /// Requests queued inside the server this second (vLLM waiting,
    /// llama.cpp deferred), from the probe.
    pub server_queue: Option<u64>,
    /// Requests sent that had no first token yet (the client's view of the
    /// queue), mean over the frames of this second.
    pub waiting: Option<u64>,
}

/// The latency panels: the per-second series and the window-wide quantiles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latency {
    pub points: Vec<SparkPoint>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
}

/// The cost at capacity in figures (issue 5 item 3): what the result panel
/// shows at a glance. Any figure may be missing (no API price, no
/// throughput); the verdict sentence is then what is left to say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostView {
    pub gpu_price_per_hour: Option<f64>,
    pub api_price_per_m: Option<f64>,
    /// Dollars per million output tokens at capacity, at full use.
    pub cost_per_m: Option<f64>,
    /// At the utilization given (`--utilization`): (dollars per million, utilization).
    pub effective: Option<(f64, f64)>,
    /// Output tok/s at which the GPU costs what the API does.
    pub break_even_tok_s: Option<f64>,
    /// `break_even_tok_s` / capacity throughput (over 1: not reachable).
    pub break_even_utilization: Option<f64>,
    /// The analysis's sentence.
    pub verdict: String,
}

impl CostView {
    pub fn from_cost(c: &Cost) -> CostView {
        CostView {
            gpu_price_per_hour: Some(c.gpu_price_per_hour).filter(|p| p.is_finite() && *p > 0.0),
            api_price_per_m: c.api_price_per_m.filter(|p| p.is_finite() && *p > 0.0),
            cost_per_m: c.cost_per_m_output,
            effective: c.effective_cost_per_m.zip(c.utilization),
            break_even_tok_s: c.break_even_output_tok_s,
            break_even_utilization: c.break_even_utilization,
            verdict: one_line(&c.verdict),
        }
    }
}

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
    pub fn new(run: RunView) -> RunState {
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
    /// Second of the run -> failures of the classes shown as rates
    /// (503, 429, timeout), the last minute only.
    failure_seconds: BTreeMap<u64, [u32; 3]>,
    /// Seconds the client's and the server's queue counts have disagreed
    /// by more than `QUEUE_DISAGREE_BY`, in a row.
    queue_disagree_since: Option<u64>,
    pub paused: bool,
    /// `--find-capacity`: where the search stands.
    pub search: Option<crate::load::driver::SearchProgress>,
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
            failure_seconds: BTreeMap::new(),
            queue_disagree_since: None,
            paused: false,
            search: None,
            achieved: (0, 0, 0),
            quitting: false,
            show_help: false,
            elapsed: Duration::ZERO,
            recent_tok_s: 0.0,
            client_cpu: None,
            rx_lag_ms: VecDeque::new(),
            server: None,
            server_missing: false,
            server_queue: std::collections::BTreeMap::new(),
            latency: Latency::default(),
            saved: None,
            pending: None,
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
    pub fn from_saved(
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

    pub fn is_saved(&self) -> bool {
        self.saved.is_some()
    }

    /// The run overlaid on the chart (`tokbench view A B`).
    pub fn other(&self) -> Option<&RunState> {
        self.saved.as_ref().and_then(|s| s.other.as_deref())
    }

    /// `Tab` in `tokbench view A B`: the other run comes forward.
    pub fn swap_runs(&mut self) -> bool {
        let Some(other) = self.saved.as_mut().and_then(|s| s.other.as_deref_mut()) else {
            return false;
        };
        std::mem::swap(&mut self.shown, other);
        true
    }

    /// The level dispatching now, if any.
    pub fn current(&self) -> Option<&LevelRow> {
        self.shown.levels.last().filter(|l| l.is_running())
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished { .. })
    }

    /// The run has left the plan for a hand-set level.
    pub fn is_manual(&self) -> bool {
        self.current().is_some_and(|l| l.info.mode == Mode::Manual)
    }

    /// The footer's transient note, if one is showing.
    pub fn status(&self) -> Option<&str> {
        self.status.as_ref().map(|(s, _)| s.as_str())
    }

    fn note(&mut self, text: impl Into<String>) {
        self.status = Some((text.into(), self.elapsed + STATUS_FOR));
    }

    /// Fold one driver event into the state.
    pub fn on_driver_event(&mut self, event: &DriverEvent) {
        match event {
            DriverEvent::WarmupStarted {
                requests,
                concurrency,
            } => {
                self.phase = Phase::Warmup {
                    requests: *requests,
                    concurrency: *concurrency,
                };
            }
            DriverEvent::WarmupFinished { .. } => self.phase = Phase::Running,
            DriverEvent::LevelStarted(info) => {
                if matches!(
                    self.phase,
                    Phase::Starting | Phase::Warmup { .. } | Phase::Finished { error: None, .. }
                ) {
                    self.phase = Phase::Running;
                }
                self.rate = info.rate;
                self.series = info.series;
                // The driver closes the running level before it starts the
                // next one; it keeps draining until LevelFinished.
                for level in &mut self.shown.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
                let mut row = LevelRow::new(info.clone());
                if info.mode != Mode::Manual {
                    row.steady.start(info.started_at);
                }
                self.shown.levels.push(row);
            }
            DriverEvent::TargetReached { index, at } => {
                if let Some(level) = self.shown.levels.get_mut(*index) {
                    level.steady.start(*at);
                }
            }
            DriverEvent::ServerGone { since } => {
                self.server_gone_since = Some(*since);
                // The clock runs again while the view waits for the server.
                self.stopped_at = None;
                self.server_back = false;
                if self.is_finished() {
                    self.phase = Phase::Running;
                }
                for level in &mut self.shown.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
            }
            DriverEvent::ServerBack { .. } => self.server_back = true,
            DriverEvent::PlanDone => {
                self.stopped_at = Some(self.elapsed);
                self.phase = Phase::Finished {
                    stopped_by_user: false,
                    error: None,
                };
            }
            DriverEvent::SeriesStarted { series, .. } => {
                self.series = *series;
                self.server_gone_since = None;
                self.server_back = false;
                self.stopped_at = None;
                self.shown
                    .series_labels
                    .entry(*series)
                    .or_insert_with(|| format!("series {}", series + 1));
                self.phase = Phase::Running;
                self.note(format!(
                    "new series: {}",
                    self.shown
                        .series_labels
                        .get(series)
                        .cloned()
                        .unwrap_or_default()
                ));
            }
            DriverEvent::TargetChanged { at, target } => {
                self.target = *target;
                let second = at.as_secs();
                if self.target_changes.back() != Some(&second) {
                    self.target_changes.push_back(second);
                }
                self.latency_stale = true;
            }
            DriverEvent::Record(r) => {
                if let Some(level) = self.shown.levels.get_mut(r.level) {
                    level.add(r);
                }
                if let (true, Some(ttft)) = (r.is_ok(), r.ttft) {
                    // Every level still measuring shares the server with it.
                    for level in self
                        .shown
                        .levels
                        .iter_mut()
                        .filter(|l| !matches!(l.state, LevelState::Finished { .. }))
                    {
                        let counted = level.info.index == r.level && !r.transition;
                        level
                            .steady
                            .add(r.start, r.start + ttft, r.end, r.output_tokens, counted);
                    }
                }
                for &lag in &r.rx_lag_ms {
                    if self.rx_lag_ms.len() == RX_LAG_WINDOW {
                        self.rx_lag_ms.pop_front();
                    }
                    self.rx_lag_ms.push_back(lag);
                }
                match r.outcome {
                    Outcome::Ok => {
                        self.shown.counters.ok += 1;
                        self.achieved.0 += u64::from(r.input_tokens());
                        self.achieved.1 += u64::from(r.output_tokens);
                        self.achieved.2 += 1;
                    }
                    Outcome::Failed(class) => {
                        self.shown.counters.failed += 1;
                        *self.shown.counters.by_class.entry(class.key()).or_insert(0) += 1;
                        let column = match class {
                            ErrorClass::Http(503) => Some(0),
                            ErrorClass::Http(429) => Some(1),
                            ErrorClass::Timeout => Some(2),
                            _ => None,
                        };
                        if let Some(column) = column {
                            let second = r.end.as_secs();
                            self.failure_seconds.entry(second).or_insert([0; 3])[column] += 1;
                            let keep_from = second.saturating_sub(60);
                            if self
                                .failure_seconds
                                .first_key_value()
                                .is_some_and(|(s, _)| *s < keep_from)
                            {
                                self.failure_seconds = self.failure_seconds.split_off(&keep_from);
                            }
                        }
                        let message = r.error_message.as_deref().unwrap_or("no message");
                        self.shown.counters.last_error =
                            Some(one_line(&format!("{class}: {message}")));
                    }
                    Outcome::Cancelled => self.shown.counters.cancelled += 1,
                }
                self.window.record_request(r);
                self.latency_stale = true;
            }
            DriverEvent::LevelFinished { index, partial } => {
                if let Some(level) = self.shown.levels.get_mut(*index) {
                    level.state = LevelState::Finished { partial: *partial };
                    level.stale = true;
                    level.recompute();
                    level.ttft_ms = Vec::new();
                }
            }
            DriverEvent::Paused(paused) => self.paused = *paused,
            DriverEvent::Search(progress) => self.search = Some(*progress),
            DriverEvent::Finished {
                stopped_by_user,
                error,
            } => {
                for level in &mut self.shown.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
                self.stopped_at = Some(self.elapsed);
                self.phase = Phase::Finished {
                    stopped_by_user: *stopped_by_user,
                    error: error.as_deref().map(one_line),
                };
            }
        }
    }

    /// The recorder's own summary of a finished level: the figures the file
    /// holds. Identical to the view's by construction; taking them makes the
    /// screen show exactly what was saved.
    pub fn on_level_saved(&mut self, finished: &FinishedLevel) {
        let Some(level) = self.shown.levels.get_mut(finished.info.index) else {
            return;
        };
        let s = &finished.stats;
        level.saved = Some(finished.file.is_some());
        level.unsteady = finished.is_unsteady();
        level.is_steady = finished.steadiness.as_ref().is_some_and(|s| s.steady);
        if let Some(rse) = finished.throughput_rse {
            level.estimate = Some((finished.stats.output_throughput, rse));
        }
        level.waiting_mean = finished.occupancy.map(|o| o.waiting_mean);
        level.streaming_mean = finished.occupancy.map(|o| o.streaming_mean);
        level.figures = Figures {
            output_tok_s: s.output_throughput,
            per_stream_tok_s: s.per_stream_tok_s,
            ttft_p50_ms: s.ttft.as_ref().and_then(|d| d.percentile(50.0)),
            ttft_p99_ms: s.ttft.as_ref().and_then(|d| d.percentile(99.0)),
        };
        level.stale = false;
    }

    /// The analysis of the levels finished so far: where capacity and the
    /// knee are, and what it says in words (the loop asks the recorder
    /// after every saved level).
    pub fn set_verdict(
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
    pub fn set_cost(&mut self, cost: Option<CostView>) {
        self.shown.cost = cost;
    }

    pub fn set_in_flight(&mut self, n: u32) {
        self.in_flight = n;
    }

    /// The driver's gauges before a frame: in flight, and of those the ones
    /// streaming. Samples the waiting count for this second's bar.
    pub fn set_queue(&mut self, in_flight: u32, streaming: u32) {
        self.in_flight = in_flight;
        self.streaming = streaming.min(in_flight);
        let second = self.elapsed.as_secs();
        let waiting = f64::from(self.waiting());
        let slot = self.waiting_seconds.entry(second).or_insert((0.0, 0));
        slot.0 += waiting;
        slot.1 += 1;
        if self.waiting_seconds.len() > 120 {
            let keep_from = second.saturating_sub(120);
            self.waiting_seconds = self.waiting_seconds.split_off(&keep_from);
        }
    }

    /// Requests sent that have not had their first token.
    pub fn waiting(&self) -> u32 {
        self.in_flight.saturating_sub(self.streaming)
    }

    /// Failures per second of 503, 429 and timeouts over the last
    /// `RATE_WINDOW_S` complete seconds; None for a class with none.
    pub fn failure_rates(&self) -> [Option<f64>; 3] {
        let now = self.elapsed.as_secs();
        let from = now.saturating_sub(RATE_WINDOW_S);
        let span = (now - from).max(1) as f64;
        let mut sums = [0u32; 3];
        for (_, counts) in self.failure_seconds.range(from..now) {
            for (sum, n) in sums.iter_mut().zip(counts) {
                *sum += n;
            }
        }
        sums.map(|n| (n > 0).then(|| f64::from(n) / span))
    }

    /// The client's and the server's queue counts have disagreed by more
    /// than `QUEUE_DISAGREE_BY` for `QUEUE_DISAGREE_FOR_S` seconds or more.
    pub fn queue_disagrees(&self) -> bool {
        self.queue_disagree_since.is_some_and(|since| {
            self.elapsed.as_secs().saturating_sub(since) >= QUEUE_DISAGREE_FOR_S
        })
    }

    fn track_queue_disagreement(&mut self, second: u64) {
        let client = self
            .waiting_seconds
            .get(&second)
            .map(|(sum, n)| sum / f64::from((*n).max(1)));
        let server = self.server_queue.get(&second).copied();
        match (client, server) {
            (Some(c), Some(s)) if (c - s).abs() > QUEUE_DISAGREE_BY => {
                self.queue_disagree_since.get_or_insert(second);
            }
            (Some(_), Some(_)) => self.queue_disagree_since = None,
            _ => {}
        }
    }

    pub fn set_client_cpu(&mut self, percent: Option<f64>) {
        self.client_cpu = percent;
    }

    /// p99 of the client's receive lag over the latest reads, ms; None
    /// before any kernel-timed read (`--rx-clock user`, reqwest).
    pub fn client_rx_lag_p99(&self) -> Option<f64> {
        let mut lags: Vec<f64> = self.rx_lag_ms.iter().map(|&v| f64::from(v)).collect();
        lags.sort_by(f64::total_cmp);
        crate::stats::percentile::percentile_sorted(&lags, 99.0)
    }

    /// A scrape of the server's (or the GPU's) gauges: each gauge keeps its
    /// latest value, so the two probes never blank each other.
    pub fn on_server_sample(&mut self, sample: &crate::probe::live::ServerSample) {
        self.server
            .get_or_insert_with(Default::default)
            .extend(sample.gauges.iter().map(|(k, v)| (*k, *v)));
        self.server_missing = false;
        let queued = sample
            .gauges
            .get("waiting")
            .or_else(|| sample.gauges.get("deferred"));
        if let Some(&queued) = queued {
            let second = sample.at.as_secs();
            self.server_queue.insert(second, queued);
            let keep_from = second.saturating_sub(120);
            self.server_queue = self.server_queue.split_off(&keep_from);
        }
    }

    /// Time passes: `now` is the offset from the run's start. Recomputes
    /// what is derived from the records, at most every `RECOMPUTE_EVERY`.
    pub fn on_tick(&mut self, now: Duration) {
        // The clock and the bars stop with the run: the final screen shows
        // the run's last minute, not a minute of nothing after it.
        let now = match self.stopped_at {
            Some(at) => now.min(at),
            None => now,
        };
        let new_second = now.as_secs() != self.elapsed.as_secs();
        if new_second {
            // The second just ended has all its samples.
            self.track_queue_disagreement(self.elapsed.as_secs());
        }
        self.elapsed = self.elapsed.max(now);
        if self
            .status
            .as_ref()
            .is_some_and(|(_, until)| *until <= self.elapsed)
        {
            self.status = None;
        }
        let due = self
            .last_recompute
            .is_none_or(|at| self.elapsed.saturating_sub(at) >= RECOMPUTE_EVERY);
        if due || new_second {
            self.recompute(now);
        }
    }

    /// Bring every derived figure up to date now.
    pub fn recompute(&mut self, now: Duration) {
        self.last_recompute = Some(now);
        let (per_stream, max_rse) = (self.steady_per_stream, self.steady_rse);
        for level in &mut self.shown.levels {
            // Finished levels were computed once, when they finished.
            if !matches!(level.state, LevelState::Finished { .. }) {
                level.recompute();
                level.estimate = level.steady.estimate(now, false).map(|e| (e.tok_s, e.rse));
                if level.info.mode == Mode::Manual && !level.is_steady {
                    level.is_steady = level.steady.completions >= level.min_completions(per_stream)
                        && level.estimate.is_some_and(|(_, rse)| rse < max_rse);
                }
            }
        }
        self.update_step_summary();
        let before = self.window.now_sec();
        self.window.advance(now);
        if self.latency_stale || self.window.now_sec() != before {
            self.latency_stale = false;
            self.rebuild_latency();
        }
    }

    /// Once a hand-set level settles, say in one line what the step from
    /// the level before did.
    fn update_step_summary(&mut self) {
        let Some(new) = self.shown.levels.last() else {
            return;
        };
        if new.info.mode != Mode::Manual
            || !new.is_steady
            || self.step_summary_for == Some(new.info.index)
        {
            return;
        }
        let Some(old) = self
            .shown
            .levels
            .iter()
            .rev()
            .skip(1)
            .find(|l| l.has_results())
        else {
            return;
        };
        let from_to = match (old.info.rate, new.info.rate) {
            (Some(a), Some(b)) => format!(
                "{}/s → {}/s",
                crate::report::recorder::rate_label(a),
                crate::report::recorder::rate_label(b)
            ),
            _ => format!(
                "{} → {} streams",
                old.info.concurrency, new.info.concurrency
            ),
        };
        let mut parts = vec![from_to];
        // The steady estimate where there is one: a young level's own
        // figure still lags behind what the server emits.
        let rate = |l: &LevelRow| l.estimate.map_or(l.figures.output_tok_s, |(t, _)| t);
        let (a, b) = (rate(old), rate(new));
        if a > 0.0 {
            parts.push(format!("{:+.1}% tok/s", (b / a - 1.0) * 100.0));
        }
        if let (Some(a), Some(b)) = (old.figures.ttft_p99_ms, new.figures.ttft_p99_ms) {
            if a > 0.0 {
                parts.push(format!("p99 TTFT ×{:.1}", b / a));
            }
        }
        let new_waiting =
            self.mean_waiting_since(new.steady.started().unwrap_or(new.info.started_at));
        if let (Some(a), Some(b)) = (old.waiting_mean, new_waiting) {
            parts.push(format!("queue {:+.0}", b - a));
        }
        let line = format!("{}: {}", parts[0], parts[1..].join(", "));
        self.step_summary_for = Some(new.info.index);
        self.step_summary = Some(line);
    }

    /// Mean of the waiting counts sampled since `from`.
    fn mean_waiting_since(&self, from: Duration) -> Option<f64> {
        let (sum, n) = self
            .waiting_seconds
            .range(from.as_secs()..)
            .fold((0.0, 0u32), |(s, n), (_, (sum, k))| (s + sum, n + k));
        (n > 0).then(|| sum / f64::from(n))
    }

    /// The settle window is over: the change waiting in it goes.
    pub fn due_command(&mut self) -> Option<Command> {
        let (pending, at) = self.pending?;
        if self.elapsed < at {
            return None;
        }
        self.pending = None;
        Some(match pending {
            Pending::Concurrency(n) => Command::SetConcurrency(n),
            Pending::Rate(r) => Command::SetRate(r),
        })
    }

    /// The `s` prompt's default label, when the loop has looked at the
    /// server; a label the user already typed stays.
    pub fn offer_label(&mut self, label: String) {
        if let Some(prompt) = self.prompt.as_mut().filter(|p| !p.edited) {
            prompt.text = one_line(&label);
        }
    }

    /// A new series was refused (another engine answers): said in the
    /// footer; the run stays where it is.
    pub fn refuse_series(&mut self, why: &str) {
        self.note(one_line(why));
        self.series_refused = Some(one_line(why));
    }

    /// Name a series (before its first level starts).
    pub fn set_series_label(&mut self, index: usize, label: &str) {
        self.shown.series_labels.insert(index, one_line(label));
    }

    pub fn series_label(&self, index: usize) -> String {
        self.shown
            .series_labels
            .get(&index)
            .cloned()
            .unwrap_or_else(|| format!("series {}", index + 1))
    }

    /// A key while the label prompt is open.
    fn prompt_key(&mut self, key: KeyEvent) -> Option<Action> {
        let prompt = self.prompt.as_mut()?;
        match key.code {
            KeyCode::Esc => {
                self.prompt = None;
                self.note("new series cancelled");
                None
            }
            KeyCode::Enter => {
                let label = one_line(&prompt.text);
                if label.is_empty() {
                    prompt.error = Some("a label cannot be empty".into());
                    return None;
                }
                if label.chars().count() > MAX_LABEL_CHARS {
                    prompt.error = Some(format!("at most {MAX_LABEL_CHARS} characters"));
                    return None;
                }
                self.prompt = None;
                Some(Action::NewSeries(label))
            }
            KeyCode::Backspace => {
                prompt.text.pop();
                prompt.edited = true;
                prompt.error = None;
                None
            }
            KeyCode::Char(c) if !c.is_control() => {
                if !prompt.edited {
                    // The first key replaces the offered default.
                    prompt.text.clear();
                    prompt.edited = true;
                }
                prompt.text.push(c);
                prompt.error = None;
                None
            }
            _ => None,
        }
    }

    fn rebuild_latency(&mut self) {
        let seconds = self.window.seconds();
        let first = seconds.first().map_or(0, |s| s.second);
        while self.target_changes.front().is_some_and(|&s| s < first) {
            self.target_changes.pop_front();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let ttft = self.window.ttft();
        let itl = self.window.itl();
        self.recent_tok_s = self.window.output_tok_s(5);
        self.latency = Latency {
            points: seconds
                .iter()
                .map(|s| SparkPoint {
                    second: s.second,
                    ttft_p99_us: s.ttft.map(|q| q.p99_us),
                    itl_p99_us: s.itl.map(|q| q.p99_us),
                    marker: self.target_changes.contains(&s.second),
                    server_queue: self
                        .server_queue
                        .get(&s.second)
                        .map(|v| v.max(0.0).round() as u64),
                    waiting: self
                        .waiting_seconds
                        .get(&s.second)
                        .map(|(sum, n)| (sum / f64::from((*n).max(1))).round() as u64),
                })
                .collect(),
            ttft_p50_ms: ttft.map(|q| ms(q.p50_us)),
            ttft_p99_ms: ttft.map(|q| ms(q.p99_us)),
            itl_p50_ms: itl.map(|q| ms(q.p50_us)),
            itl_p99_ms: itl.map(|q| ms(q.p99_us)),
        };
    }

    /// A key press. Releases and repeats are not presses: terminals that
    /// report them (kitty protocol, Windows) would otherwise step twice.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind != KeyEventKind::Press {
            return None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if self.prompt.is_some() && !(ctrl && key.code == KeyCode::Char('c')) {
            return self.prompt_key(key);
        }
        match key.code {
            // Raw mode turns Ctrl-C into a key, not a signal.
            KeyCode::Char('c') | KeyCode::Char('C') if ctrl => self.quit(),
            KeyCode::Char('q') | KeyCode::Char('Q') => self.quit(),
            KeyCode::Esc if self.show_help => {
                self.show_help = false;
                None
            }
            KeyCode::Esc => self.quit(),
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => {
                self.show_help = !self.show_help;
                None
            }
            KeyCode::Tab | KeyCode::BackTab if self.is_saved() => {
                if !self.swap_runs() {
                    self.note("one run: Tab switches between two (tokbench view A B)");
                }
                None
            }
            KeyCode::Char('+') | KeyCode::Char('=') => self.step(|t| t.saturating_add(1), 1.1),
            KeyCode::Char('-') | KeyCode::Char('_') => {
                self.step(|t| t.saturating_sub(1), 1.0 / 1.1)
            }
            KeyCode::Char(']') => self.step(|t| t.saturating_mul(2), 2.0),
            KeyCode::Char('[') => self.step(|t| t / 2, 0.5),
            KeyCode::Char('n') | KeyCode::Char('N') => {
                if !self.can_steer() {
                    return None;
                }
                self.pending = None;
                Some(Action::Send(Command::NextLevel))
            }
            KeyCode::Char('s') | KeyCode::Char('S') => {
                if self.quitting || self.is_saved() {
                    return None;
                }
                if self.server_gone_since.is_some() && !self.server_back {
                    self.note("the server is gone: the next series starts when it answers");
                    return None;
                }
                self.pending = None;
                self.prompt = Some(LabelPrompt {
                    text: format!("series {}", self.series + 2),
                    ..LabelPrompt::default()
                });
                Some(Action::ProbeForLabel)
            }
            // A view, not a steer: it touches no pending change and works
            // in a saved run too (inside the label prompt it is a letter).
            KeyCode::Char('v') | KeyCode::Char('V') => {
                self.frontier = !self.frontier;
                None
            }
            KeyCode::Char('p') | KeyCode::Char('P') => {
                if !self.can_steer() {
                    return None;
                }
                Some(Action::Send(Command::TogglePause))
            }
            _ => None,
        }
    }

    fn quit(&mut self) -> Option<Action> {
        if self.is_finished() {
            return Some(Action::Exit);
        }
        if self.quitting {
            return None;
        }
        self.quitting = true;
        self.show_help = false;
        Some(Action::Send(Command::Stop))
    }

    /// Whether steering keys mean anything now; says why not in the footer.
    fn can_steer(&mut self) -> bool {
        if self.quitting {
            return false;
        }
        if self.is_saved() {
            self.note("a saved run: nothing to steer (q quits)");
            return false;
        }
        if self.is_finished() {
            self.note("the sweep is over: s starts a new series, q quits");
            return false;
        }
        if self.server_gone_since.is_some() {
            self.note("the server is gone: waiting for it to answer");
            return false;
        }
        if self.current().is_none() {
            self.note("keys steer once the first level runs");
            return false;
        }
        true
    }

    fn step(&mut self, f: impl Fn(u32) -> u32, rate_factor: f64) -> Option<Action> {
        if !self.can_steer() {
            return None;
        }
        let deadline = self.elapsed + self.settle;
        // Open loop: the keys step the rate, by the factor.
        if let Some(rate) = self.pending_rate().or(self.rate) {
            let wanted = (rate * rate_factor).clamp(0.01, 100_000.0);
            let wanted = (wanted * 1000.0).round() / 1000.0;
            if (wanted - rate).abs() < 1e-9 {
                self.note("rate stays where it is (0.01 to 100000/s)");
                return None;
            }
            self.pending = Some((Pending::Rate(wanted), deadline));
            return self.flush_if_instant();
        }
        let from = match self.pending {
            Some((Pending::Concurrency(n), _)) => n,
            _ => self.target,
        };
        let wanted = f(from).clamp(1, MAX_CONCURRENCY);
        if wanted == from {
            self.note(format!(
                "concurrency stays at {wanted} (range 1 to {MAX_CONCURRENCY})"
            ));
            return None;
        }
        // The next key steps from here: presses within the settle window
        // add up to one change, sent when the window closes.
        self.pending = Some((Pending::Concurrency(wanted), deadline));
        self.flush_if_instant()
    }

    fn pending_rate(&self) -> Option<f64> {
        match self.pending {
            Some((Pending::Rate(r), _)) => Some(r),
            _ => None,
        }
    }

    /// With no settle window (`--settle-s 0`) a press goes at once.
    fn flush_if_instant(&mut self) -> Option<Action> {
        if !self.settle.is_zero() {
            return None;
        }
        let command = self.due_command()?;
        if let Command::SetConcurrency(n) = command {
            self.target = n;
        }
        Some(Action::Send(command))
    }
}

#[cfg(test)]
#[path = "app_tests.rs"]
pub(crate) mod tests;
