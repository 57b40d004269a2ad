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
use crate::record::{Outcome, RequestRecord};
use crate::report::recorder::FinishedLevel;
use crate::run::Prepared;
use crate::stats::live::{LiveWindow, DEFAULT_WINDOW_SECS};
use crate::stats::percentile::percentile_sorted;

use super::theme::Palette;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this to the driver.
    Send(Command),
    /// Leave the view (the run is already over).
    Exit,
}

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
}

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
        }
    }

    fn add(&mut self, r: &RequestRecord) {
        self.done += 1;
        self.stale = true;
        match r.outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.output_tokens += u64::from(r.output_tokens);
                if let Some(t) = r.ttft {
                    self.ttft_ms.push(t.as_secs_f64() * 1000.0);
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

/// What belongs to one run of `tokbench view A B`. The run shown (table,
/// marks, result panel) lives in `App`'s own fields; the other waits here,
/// overlaid on the chart, and `Tab` swaps them.
#[derive(Clone, Debug)]
pub struct Side {
    /// `A` for the first folder given, `B` for the second.
    pub label: char,
    pub run: RunView,
    pub levels: Vec<LevelRow>,
    pub counters: Counters,
    pub capacity: Option<u32>,
    pub knee: Option<(u32, u32)>,
    pub verdict: Vec<String>,
    pub cost: Option<CostView>,
    /// The SLOs it was judged against, in words.
    pub slo: Option<String>,
}

/// A finished run read back from its folder (`tokbench view`): nothing is
/// measured or sent, and the screen has no live parts.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The label of the run shown: `A`, or `B` after `Tab`.
    pub label: char,
    /// `view A B`: the other run.
    pub other: Option<Box<Side>>,
    /// The two runs were measured at different shapes: said in the header.
    pub warning: Option<String>,
    /// The SLOs of the run shown, in words.
    pub slo: Option<String>,
}

pub struct App {
    pub run: RunView,
    pub palette: Palette,
    pub phase: Phase,
    /// The driver's concurrency target (what the user set, before the driver confirms).
    pub target: u32,
    /// Requests in flight, read from the driver's gauge before each frame.
    pub in_flight: u32,
    pub paused: bool,
    /// `--find-capacity`: where the search stands.
    pub search: Option<crate::load::driver::SearchProgress>,
    /// Input and output tokens of the completed requests, and their count:
    /// the achieved lengths beside the asked ones in the header.
    pub achieved: (u64, u64, u64),
    /// The user asked to quit; waiting for the driver to stop.
    pub quitting: bool,
    pub show_help: bool,
    /// Every level started, in run order (`LevelInfo::index` == position).
    pub levels: Vec<LevelRow>,
    pub counters: Counters,
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
    /// The sweep's capacity so far (concurrency), once the analysis finds one.
    pub capacity: Option<u32>,
    /// The knee so far: from and to concurrency.
    pub knee: Option<(u32, u32)>,
    /// Capacity, knee and notes in words, one line each.
    pub verdict: Vec<String>,
    /// Cost at capacity, when a GPU price was given and a capacity is known.
    pub cost: Option<CostView>,
    /// `Some` for a run read back from disk (`tokbench view`).
    pub saved: Option<Saved>,
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
            run,
            palette,
            phase: Phase::Starting,
            target: 0,
            in_flight: 0,
            paused: false,
            search: None,
            achieved: (0, 0, 0),
            quitting: false,
            show_help: false,
            levels: Vec::new(),
            counters: Counters::default(),
            elapsed: Duration::ZERO,
            recent_tok_s: 0.0,
            client_cpu: None,
            rx_lag_ms: VecDeque::new(),
            server: None,
            server_missing: false,
            server_queue: std::collections::BTreeMap::new(),
            latency: Latency::default(),
            capacity: None,
            knee: None,
            verdict: Vec::new(),
            cost: None,
            saved: None,
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
        shown: Side,
        other: Option<Side>,
        warning: Option<String>,
        palette: Palette,
    ) -> App {
        let mut app = App::new(shown.run, palette);
        app.phase = Phase::Finished {
            stopped_by_user: false,
            error: None,
        };
        app.levels = shown.levels;
        app.counters = shown.counters;
        app.capacity = shown.capacity;
        app.knee = shown.knee;
        app.verdict = shown.verdict.iter().map(|l| one_line(l)).collect();
        app.cost = shown.cost;
        app.saved = Some(Saved {
            label: shown.label,
            other: other.map(Box::new),
            warning: warning.as_deref().map(one_line),
            slo: shown.slo,
        });
        app
    }

    pub fn is_saved(&self) -> bool {
        self.saved.is_some()
    }

    /// The run overlaid on the chart (`tokbench view A B`).
    pub fn other(&self) -> Option<&Side> {
        self.saved.as_ref().and_then(|s| s.other.as_deref())
    }

    /// `Tab` in `tokbench view A B`: the other run comes forward.
    pub fn swap_runs(&mut self) -> bool {
        let Some(saved) = self.saved.as_mut() else {
            return false;
        };
        let Some(other) = saved.other.as_deref_mut() else {
            return false;
        };
        std::mem::swap(&mut saved.label, &mut other.label);
        std::mem::swap(&mut saved.slo, &mut other.slo);
        std::mem::swap(&mut self.run, &mut other.run);
        std::mem::swap(&mut self.levels, &mut other.levels);
        std::mem::swap(&mut self.counters, &mut other.counters);
        std::mem::swap(&mut self.capacity, &mut other.capacity);
        std::mem::swap(&mut self.knee, &mut other.knee);
        std::mem::swap(&mut self.verdict, &mut other.verdict);
        std::mem::swap(&mut self.cost, &mut other.cost);
        true
    }

    /// The level dispatching now, if any.
    pub fn current(&self) -> Option<&LevelRow> {
        self.levels.last().filter(|l| l.is_running())
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
                if matches!(self.phase, Phase::Starting | Phase::Warmup { .. }) {
                    self.phase = Phase::Running;
                }
                // The driver closes the running level before it starts the
                // next one; it keeps draining until LevelFinished.
                for level in &mut self.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
                self.levels.push(LevelRow::new(info.clone()));
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
                if let Some(level) = self.levels.get_mut(r.level) {
                    level.add(r);
                }
                for &lag in &r.rx_lag_ms {
                    if self.rx_lag_ms.len() == RX_LAG_WINDOW {
                        self.rx_lag_ms.pop_front();
                    }
                    self.rx_lag_ms.push_back(lag);
                }
                match r.outcome {
                    Outcome::Ok => {
                        self.counters.ok += 1;
                        self.achieved.0 += u64::from(r.input_tokens());
                        self.achieved.1 += u64::from(r.output_tokens);
                        self.achieved.2 += 1;
                    }
                    Outcome::Failed(class) => {
                        self.counters.failed += 1;
                        *self.counters.by_class.entry(class.key()).or_insert(0) += 1;
                        let message = r.error_message.as_deref().unwrap_or("no message");
                        self.counters.last_error = Some(one_line(&format!("{class}: {message}")));
                    }
                    Outcome::Cancelled => self.counters.cancelled += 1,
                }
                self.window.record_request(r);
                self.latency_stale = true;
            }
            DriverEvent::LevelFinished { index, partial } => {
                if let Some(level) = self.levels.get_mut(*index) {
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
                for level in &mut self.levels {
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
        let Some(level) = self.levels.get_mut(finished.info.index) else {
            return;
        };
        let s = &finished.stats;
        level.saved = Some(finished.file.is_some());
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
        self.capacity = capacity;
        self.knee = knee;
        self.verdict = lines.iter().map(|l| one_line(l)).collect();
    }

    /// The cost at capacity over the levels so far (`None` without a GPU
    /// price or a capacity).
    pub fn set_cost(&mut self, cost: Option<CostView>) {
        self.cost = cost;
    }

    pub fn set_in_flight(&mut self, n: u32) {
        self.in_flight = n;
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
        for level in &mut self.levels {
            // Finished levels were computed once, when they finished.
            if !matches!(level.state, LevelState::Finished { .. }) {
                level.recompute();
            }
        }
        let before = self.window.now_sec();
        self.window.advance(now);
        if self.latency_stale || self.window.now_sec() != before {
            self.latency_stale = false;
            self.rebuild_latency();
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
            KeyCode::Char('+') | KeyCode::Char('=') => self.step(|t| t.saturating_add(1)),
            KeyCode::Char('-') | KeyCode::Char('_') => self.step(|t| t.saturating_sub(1)),
            KeyCode::Char(']') => self.step(|t| t.saturating_mul(2)),
            KeyCode::Char('[') => self.step(|t| t / 2),
            KeyCode::Char('n') | KeyCode::Char('N') => {
                if !self.can_steer() {
                    return None;
                }
                Some(Action::Send(Command::NextLevel))
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
            self.note("the sweep is over: q to quit");
            return false;
        }
        if self.current().is_none() {
            self.note("keys steer once the first level runs");
            return false;
        }
        true
    }

    fn step(&mut self, f: impl Fn(u32) -> u32) -> Option<Action> {
        if !self.can_steer() {
            return None;
        }
        let wanted = f(self.target).clamp(1, MAX_CONCURRENCY);
        if wanted == self.target {
            self.note(format!(
                "concurrency stays at {wanted} (range 1 to {MAX_CONCURRENCY})"
            ));
            return None;
        }
        // Shown at once, and the next key steps from here: two quick `+`
        // presses mean +2 even before the driver confirms the first.
        self.target = wanted;
        Some(Action::Send(Command::SetConcurrency(wanted)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::ErrorClass;
    use crate::stats::summary::level_stats;
    use crate::ui::theme::{ColorMode, Palette};

    pub(crate) fn run_view() -> RunView {
        RunView {
            target: "http://gpu-box:8000".into(),
            engine: "vLLM".into(),
            engine_version: Some("0.11.2".into()),
            model: "Qwen/Qwen3-8B".into(),
            input_len: 1024,
            output_len: 1024,
            ignore_eos: Some(true),
            knobs: None,
            simulated: false,
            plan: vec![1, 4, 16, 32, 64, 128],
            result_dir: "results/20261129-191400".into(),
            started_at: None,
            profile: None,
        }
    }

    pub(crate) fn app() -> App {
        App::new(run_view(), Palette::new(ColorMode::None))
    }

    pub(crate) fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    pub(crate) fn level(index: usize, concurrency: u32, mode: Mode, at_s: u64) -> DriverEvent {
        DriverEvent::LevelStarted(LevelInfo {
            rate: None,
            timeline: None,
            index,
            concurrency,
            mode,
            num_prompts: (mode == Mode::Planned).then_some(concurrency * 10),
            plan_index: (mode == Mode::Planned).then_some(index),
            started_at: Duration::from_secs(at_s),
        })
    }

    fn running_at(concurrency: u32) -> App {
        let mut app = app();
        app.on_driver_event(&level(0, concurrency, Mode::Planned, 0));
        app.on_driver_event(&DriverEvent::TargetChanged {
            at: Duration::ZERO,
            target: concurrency,
        });
        app
    }

    fn send(app: &mut App, c: char) -> Option<Action> {
        app.on_key(key(c))
    }

    #[test]
    fn concurrency_keys_send_the_new_target() {
        let mut app = running_at(4);
        assert_eq!(
            send(&mut app, '+'),
            Some(Action::Send(Command::SetConcurrency(5)))
        );
        // The next key steps from what was asked, before the driver confirms.
        assert_eq!(
            send(&mut app, '='),
            Some(Action::Send(Command::SetConcurrency(6)))
        );
        assert_eq!(
            send(&mut app, ']'),
            Some(Action::Send(Command::SetConcurrency(12)))
        );
        assert_eq!(
            send(&mut app, '['),
            Some(Action::Send(Command::SetConcurrency(6)))
        );
        assert_eq!(
            send(&mut app, '-'),
            Some(Action::Send(Command::SetConcurrency(5)))
        );
        assert_eq!(app.target, 5);
    }

    #[test]
    fn concurrency_is_bounded() {
        let mut app = running_at(1);
        // Already at 1: `-` and `[` send nothing and say why.
        assert_eq!(send(&mut app, '-'), None);
        assert_eq!(send(&mut app, '['), None);
        assert!(app.status().is_some_and(|s| s.contains("stays at 1")));
        let mut app = running_at(3000);
        assert_eq!(
            send(&mut app, ']'),
            Some(Action::Send(Command::SetConcurrency(MAX_CONCURRENCY)))
        );
        assert_eq!(send(&mut app, '+'), None);
    }

    #[test]
    fn level_pause_and_quit_keys() {
        let mut app = running_at(4);
        assert_eq!(send(&mut app, 'n'), Some(Action::Send(Command::NextLevel)));
        assert_eq!(
            send(&mut app, 'p'),
            Some(Action::Send(Command::TogglePause))
        );
        assert_eq!(send(&mut app, 'q'), Some(Action::Send(Command::Stop)));
        assert!(app.quitting);
        // Once quitting, nothing else is sent; a second q does not resend.
        assert_eq!(send(&mut app, '+'), None);
        assert_eq!(send(&mut app, 'q'), None);
        // When the driver is done, q leaves.
        app.on_driver_event(&DriverEvent::Finished {
            stopped_by_user: true,
            error: None,
        });
        assert_eq!(send(&mut app, 'q'), Some(Action::Exit));
    }

    #[test]
    fn esc_and_ctrl_c_quit_and_esc_closes_help_first() {
        let mut app = running_at(4);
        assert_eq!(send(&mut app, '?'), None);
        assert!(app.show_help);
        assert_eq!(
            app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
            None
        );
        assert!(!app.show_help);
        assert_eq!(
            app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
            Some(Action::Send(Command::Stop))
        );
        let mut app = running_at(4);
        assert_eq!(
            app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Send(Command::Stop))
        );
    }

    #[test]
    fn only_presses_count() {
        let mut app = running_at(4);
        let mut release = key('+');
        release.kind = KeyEventKind::Release;
        assert_eq!(app.on_key(release), None);
        let mut repeat = key('+');
        repeat.kind = KeyEventKind::Repeat;
        assert_eq!(app.on_key(repeat), None);
        assert_eq!(app.target, 4);
    }

    #[test]
    fn steering_waits_for_the_first_level() {
        let mut app = app();
        app.on_driver_event(&DriverEvent::WarmupStarted {
            requests: 4,
            concurrency: 1,
        });
        assert_eq!(send(&mut app, '+'), None);
        assert_eq!(send(&mut app, 'n'), None);
        assert!(app.status().is_some());
        // Quitting works at any time.
        assert_eq!(send(&mut app, 'q'), Some(Action::Send(Command::Stop)));
    }

    #[test]
    fn after_the_sweep_only_quit_and_help() {
        let mut app = running_at(4);
        app.on_driver_event(&DriverEvent::LevelFinished {
            index: 0,
            partial: false,
        });
        app.on_driver_event(&DriverEvent::Finished {
            stopped_by_user: false,
            error: None,
        });
        assert_eq!(send(&mut app, '+'), None);
        assert_eq!(send(&mut app, 'p'), None);
        assert_eq!(send(&mut app, '?'), None);
        assert!(app.show_help);
        assert_eq!(send(&mut app, 'q'), Some(Action::Exit));
    }

    /// The running sums give exactly what `level_stats` saves.
    #[test]
    fn row_figures_match_the_saved_statistics() {
        let mut app = running_at(4);
        let mut records = Vec::new();
        for i in 0..37u64 {
            let mut r = RequestRecord::empty(i, 0);
            r.start = Duration::from_millis(100 + 13 * i);
            r.end = r.start + Duration::from_millis(900 + (i * 7919) % 400);
            r.ttft = Some(Duration::from_micros(20_000 + (i * 104_729) % 90_000));
            r.output_tokens = 100 + (i as u32 % 3);
            r.outcome = match i % 10 {
                3 => Outcome::Failed(ErrorClass::Http(503)),
                7 => Outcome::Cancelled,
                _ => Outcome::Ok,
            };
            app.on_driver_event(&DriverEvent::Record(r.clone()));
            records.push(r);
        }
        app.on_driver_event(&DriverEvent::LevelFinished {
            index: 0,
            partial: false,
        });
        let want = level_stats(&records, 4, &[50.0, 99.0]);
        let got = app.levels[0].figures;
        assert!((got.output_tok_s - want.output_throughput).abs() < 1e-9);
        assert!((got.per_stream_tok_s - want.per_stream_tok_s).abs() < 1e-9);
        let ttft = want.ttft.expect("ttft");
        assert_eq!(got.ttft_p50_ms, ttft.percentile(50.0));
        assert_eq!(got.ttft_p99_ms, ttft.percentile(99.0));
        assert_eq!(app.counters.class("http_503"), 4);
        assert_eq!(app.counters.cancelled, 3);
        assert!(app.levels[0].ttft_ms.is_empty(), "freed once finished");
    }

    #[test]
    fn levels_move_through_their_states() {
        let mut app = running_at(4);
        app.on_driver_event(&level(1, 5, Mode::Manual, 3));
        assert_eq!(app.levels[0].state, LevelState::Draining);
        assert!(app.is_manual());
        app.on_driver_event(&DriverEvent::LevelFinished {
            index: 0,
            partial: true,
        });
        assert!(app.levels[0].is_partial());
        assert_eq!(app.current().map(|l| l.info.concurrency), Some(5));
    }

    #[test]
    fn the_clock_stops_with_the_run() {
        let mut app = running_at(4);
        app.on_tick(Duration::from_secs(90));
        app.on_driver_event(&DriverEvent::Finished {
            stopped_by_user: false,
            error: None,
        });
        app.on_tick(Duration::from_secs(300));
        assert_eq!(app.elapsed, Duration::from_secs(90));
    }

    #[test]
    fn server_text_cannot_reach_the_terminal_raw() {
        assert_eq!(one_line("a\x1b[2Jb\nc\t"), "a [2Jb c");
    }

    #[test]
    fn markers_fall_on_the_seconds_the_target_changed() {
        let mut app = running_at(4);
        app.on_driver_event(&DriverEvent::TargetChanged {
            at: Duration::from_millis(2500),
            target: 5,
        });
        app.recompute(Duration::from_secs(4));
        let marked: Vec<u64> = app
            .latency
            .points
            .iter()
            .filter(|p| p.marker)
            .map(|p| p.second)
            .collect();
        assert_eq!(marked, [0, 2]);
    }
}
