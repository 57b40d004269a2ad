//! The load driver: closed-loop dispatch under a concurrency target that can
//! change at run time.
//!
//! One task owns all driver state; commands come in over a channel and
//! everything that happens goes out as `DriverEvent`s, so the view and the
//! recorder never share state with the load tasks. A request belongs to the
//! level it was dispatched in, even when that level closes before it returns.
//!
//! The driver never touches the network itself: requests and the server's
//! root go through an [`Executor`] (`super::executor`), so its tests run the
//! whole state machine against a scripted server on tokio's paused clock
//! (`super::driver_tests`). This file holds the public types, the actor's
//! state, its loop and the steering commands; the rest of `Driver`'s
//! methods are in `levels`, `warmup`, `schedule`, `prompts` and
//! `server_watch`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
// The driver's clock is tokio's, not std's: under `tokio::time::pause()`
// (the driver's unit tests) std time stands still while tokio's moves, and
// an open-loop schedule or the server watch on std time would never come
// due. Unpaused, the two are one clock (tokio's `Instant` wraps std's), so
// converting at the edges (`run_start` in, `PreparedRequest::scheduled`
// out) is exact.
use tokio::time::Instant;

use super::arrivals::Arrivals;
use super::executor::{Executor, HttpExecutor};
use super::replay::ReplayEntry;
use super::request::{PreparedRequest, Target};
use super::BodySpec;
use crate::analysis::decide::CapacitySlo;
use crate::analysis::search::CapacityPolicy;
use crate::record::{ErrorClass, Outcome, RequestRecord};
use crate::workload::dataset::flatten_messages;
use crate::workload::{Calibration, ChatMessage, PromptSpec, Workload};

mod between;
mod fit;
pub use fit::{FitConfig, FitEvent};
mod replay_plan;
pub use replay_plan::Replay;
mod levels;
mod marks;
mod prompts;
mod schedule;
mod server_watch;
mod warmup;

use between::between_result;
pub use between::{BetweenLevels, LevelEdges};
pub(crate) use marks::{MarksReader, ServerMarks};
use prompts::Conversation;
use schedule::{OpenLoop, Schedule};
use server_watch::{marks_result, poll_result, ServerState, IDLE_POLL_EVERY};

/// Highest concurrency a user can ask for by hand.
pub(crate) const MAX_CONCURRENCY: u32 = 4096;

/// How a level came to be; it lives with the records, where analysis and
/// the reports reach it without importing the driver.
pub use crate::record::Mode;

/// One planned step of the sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LevelPlan {
    /// Closed loop: streams kept busy. Open loop: the cap on requests in flight.
    pub concurrency: u32,
    pub num_prompts: u32,
    /// Open loop: requests per second (`--request-rate`).
    pub rate: Option<f64>,
}

impl LevelPlan {
    /// A closed-loop level.
    pub(crate) fn closed(concurrency: u32, num_prompts: u32) -> LevelPlan {
        LevelPlan {
            concurrency,
            num_prompts,
            rate: None,
        }
    }

    /// A closed level of `per_stream` requests a stream (`--prompts-per-stream`,
    /// at least 1): its count grows with its streams.
    pub(crate) fn per_stream(concurrency: u32, per_stream: u32) -> LevelPlan {
        LevelPlan::closed(concurrency, concurrency.saturating_mul(per_stream.max(1)))
    }
}

/// What a level is, as announced when it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelInfo {
    /// Index in run order; records carry it in `level`.
    pub index: usize,
    pub concurrency: u32,
    pub mode: Mode,
    /// Requests to send; None for a manual level, which runs until changed.
    pub num_prompts: Option<u32>,
    /// Position in the plan (0-based) for planned levels.
    pub plan_index: Option<usize>,
    /// Offset from the run's start.
    pub started_at: Duration,
    /// Open loop: requests per second.
    pub rate: Option<f64>,
    /// Replay: length of the log's timeline at the replay speed.
    pub timeline: Option<Duration>,
    /// The series it belongs to (0 first): a stretch of the run against
    /// one server configuration.
    pub series: usize,
}

impl LevelInfo {
    /// A level with no request count, plan position, rate or timeline, in
    /// the first series; a caller sets what its level has over it.
    pub(crate) fn new(
        index: usize,
        concurrency: u32,
        mode: Mode,
        started_at: Duration,
    ) -> LevelInfo {
        LevelInfo {
            index,
            concurrency,
            mode,
            num_prompts: None,
            plan_index: None,
            started_at,
            rate: None,
            timeline: None,
            series: 0,
        }
    }
}

/// What the user (or the headless runner) can ask of the driver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Command {
    /// Take over by hand at this concurrency: a manual level starts.
    SetConcurrency(u32),
    /// Open loop: take over by hand at this request rate (requests/s).
    SetRate(f64),
    /// A new series: the plan starts again from its first level, against
    /// what is now a differently configured server.
    NewSeries,
    /// Planned level: end it early (partial). Manual level: end it and resume the plan.
    NextLevel,
    /// Stop or resume dispatching; requests in flight finish either way.
    TogglePause,
    /// Stop dispatching, cancel what is in flight, end the run.
    Stop,
}

// Records are nearly every event sent, so boxing them would only add an
// allocation per request.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum DriverEvent {
    WarmupStarted {
        requests: u32,
        concurrency: u32,
    },
    WarmupFinished {
        ok: usize,
        failed: usize,
        calibration: Calibration,
        /// Prompt tokens the server reported for the warmup requests.
        reported_prompt_tokens: Vec<u32>,
    },
    LevelStarted(LevelInfo),
    TargetChanged {
        at: Duration,
        target: u32,
    },
    Record(RequestRecord),
    /// A probe request's record (`--probe-rate`): its `level` is the level
    /// it was due in. Folded apart from the level's own figures.
    Probe(RequestRecord),
    LevelFinished {
        index: usize,
        partial: bool,
    },
    Paused(bool),
    /// A manual level's requests in flight first reached its target: the
    /// level's steady-state measurement starts here.
    TargetReached {
        index: usize,
        at: Duration,
    },
    /// Every request failed to connect (or was cut) for a while: dispatch
    /// waits for the server to answer again.
    ServerGone {
        since: Duration,
    },
    /// The server answers again; nothing is sent until a new series starts.
    ServerBack {
        at: Duration,
    },
    /// Connection failures that looked like a restart (a refused connect,
    /// or every request in flight closed at once) and a server that
    /// answered again within `SERVER_GONE_AFTER`: `restart` says what of
    /// its marks showed a new process (then `ServerGone` and `ServerBack`
    /// follow, and the failures are `restart`), None when nothing did (they
    /// count as failures of their level).
    RestartSuspected {
        at: Duration,
        failures: usize,
        level: Option<usize>,
        restart: Option<String>,
    },
    /// The server's own account read at a level's edge
    /// (`DriverConfig::edges`): before the first level, and after each one
    /// that drained with nothing in flight (`closes`), before the next
    /// starts and before its `LevelFinished`.
    ServerAccount {
        closes: Option<usize>,
        snapshot: std::sync::Arc<crate::stats::server_account::Snapshot>,
    },
    /// The plan ran out; the driver stays, watching the server, for a new
    /// series (only when it watches the server).
    PlanDone,
    /// A new series began; the plan starts again.
    SeriesStarted {
        series: usize,
        at: Duration,
    },
    /// `--find-capacity` judged a probe: the bounds so far and what runs next.
    Search(SearchProgress),
    /// A fitted run's estimate, time left, level ends and skipped levels
    /// (`--budget`, or the default budget; see `fit`).
    Fit(FitEvent),
    /// The run is over; no event follows. `error` says why it could not go on.
    Finished {
        stopped_by_user: bool,
        error: Option<String>,
    },
}

pub(crate) struct DriverConfig {
    pub plan: Vec<LevelPlan>,
    pub warmup: u32,
    /// Where [`spawn`] sends the requests; [`spawn_with`] leaves it unused
    /// (its executor knows where to send).
    pub target: Arc<Target>,
    pub body: BodySpec,
    pub workload: Workload,
    /// Seeds the open-loop arrival times.
    pub seed: u64,
    /// Open loop: gamma shape of the gaps between requests (1: Poisson).
    pub burstiness: f64,
    /// `--replay`: one open-loop level on the log's timeline, instead of the plan.
    pub replay: Option<Replay>,
    /// `--find-capacity`: levels chosen by the search, instead of the plan.
    pub search: Option<SearchPlan>,
    /// `--turns`: requests per multi-turn conversation (1: none).
    pub turns: u32,
    /// The live view: a server that goes away pauses the run until it
    /// answers again (a restart with a new setting), and the driver waits
    /// after the plan for a new series. Headless runs stop instead.
    pub watch_server: bool,
    /// With `watch_server`: reads the server's identity and start marks
    /// (the probe's, given by the face), so a short outage that is a
    /// restart is told from dropped connections. [`spawn_with`] leaves it
    /// unused (its executor reads them).
    pub marks: Option<MarksReader>,
    /// The series the first level belongs to (a resumed run goes on in
    /// the series it stopped in).
    pub first_series: usize,
    /// `--duration`: each planned (or rate) level dispatches for this long
    /// from its start, then drains; None: levels end by their count.
    pub duration: Option<Duration>,
    /// `--start-at`, as an offset from the run's start: the first level
    /// waits (after the warmup) until then. With `duration`, planned level
    /// k (0-based) starts at `start_at + k * (duration + level_gap)`, so
    /// shards started apart step together (see docs/architecture.md 4).
    pub start_at: Option<Duration>,
    /// `--level-gap`: time left after a scheduled level's dispatch for its
    /// requests to come back before the next level starts.
    pub level_gap: Duration,
    /// Run between two planned levels (a tune's `--reset-cache`).
    pub between_levels: Option<BetweenLevels>,
    /// Read the server's own account at each level's edge.
    pub edges: Option<LevelEdges>,
    /// `--probe-rate`: probe requests beside the load, on their own pool.
    pub probes: Option<super::probes::ProbeConfig>,
    /// `--budget` (or the default budget): planned levels end when steady,
    /// levels past the knee are skipped, the run ends with the budget.
    pub fit: Option<FitConfig>,
}

/// Where `--find-capacity` stands after a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchProgress {
    /// Highest concurrency that met the SLO and still bought throughput.
    pub passing: Option<u32>,
    /// Lowest concurrency that failed either.
    pub failing: Option<u32>,
    /// The next probe; None when the search is over.
    pub next: Option<u32>,
}

/// How `--find-capacity` sizes and judges its probes.
#[derive(Clone, Debug)]
pub struct SearchPlan {
    pub max_concurrency: u32,
    pub slo: CapacitySlo,
    /// Requests per probe; None: `prompts_per_stream` x its concurrency.
    pub num_prompts: Option<u32>,
    pub prompts_per_stream: u32,
}

impl SearchPlan {
    fn num_prompts(&self, concurrency: u32) -> u32 {
        self.num_prompts.unwrap_or_else(|| {
            LevelPlan::per_stream(concurrency, self.prompts_per_stream).num_prompts
        })
    }
}

/// What the rest of the program holds of a running driver.
pub struct DriverHandle {
    pub commands: mpsc::UnboundedSender<Command>,
    pub events: mpsc::UnboundedReceiver<DriverEvent>,
    /// Requests in flight right now, all levels together.
    pub in_flight: Arc<AtomicU32>,
    /// Of those, the ones whose first output token has arrived; the rest
    /// wait in the server's queue (or its prefill).
    pub streaming: Arc<AtomicU32>,
}

/// Start the driver on the current runtime, sending over HTTP to
/// `config.target`. `run_start` is time zero for every offset in the run.
pub(crate) fn spawn(config: DriverConfig, run_start: std::time::Instant) -> DriverHandle {
    let executor = Arc::new(HttpExecutor::new(
        config.target.clone(),
        config.marks.clone(),
    ));
    spawn_with(config, run_start, executor)
}

/// [`spawn`] with the requests sent (and the server's root asked) by
/// `executor`: a scripted server in the driver's tests.
pub(crate) fn spawn_with(
    mut config: DriverConfig,
    run_start: std::time::Instant,
    executor: Arc<dyn Executor>,
) -> DriverHandle {
    let (command_tx, command_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let in_flight = Arc::new(AtomicU32::new(0));
    let streaming = Arc::new(AtomicU32::new(0));
    let (cancel_tx, _) = watch::channel(false);
    config.turns = config.turns.max(1);
    let search = config.search.take().map(|plan| SearchState {
        policy: CapacityPolicy::new(plan.max_concurrency, plan.slo.clone()),
        pending: None,
        records: Vec::new(),
        plan,
        probes: 0,
    });
    let run_start = Instant::from_std(run_start);
    let driver = Driver {
        fit: config.fit.map(|cfg| fit::FitState::new(cfg, run_start)),
        pace: fit::Pace::default(),
        executor,
        search,
        open_loop: None,
        paused_at: None,
        run_ok: 0,
        last_level_all_failed: false,
        fatal: None,
        conversations: HashMap::new(),
        ready_turns: std::collections::VecDeque::new(),
        run_start,
        events: event_tx,
        cancel: cancel_tx,
        tasks: JoinSet::new(),
        task_levels: HashMap::new(),
        deferred: Vec::new(),
        next_id: 0,
        levels: Vec::new(),
        current: None,
        next_plan: 0,
        concurrency_target: 0,
        paused: false,
        stopping: false,
        in_flight: in_flight.clone(),
        streaming: streaming.clone(),
        server: ServerState::Up,
        next_poll: None,
        poll: None,
        marks: None,
        marks_baseline: None,
        marks_check: None,
        plan_done_sent: false,
        series: config.first_series,
        pending_start: None,
        between: None,
        probes: None,
        cfg: config,
    };
    // Detached: the faces learn that the driver is done from its last
    // event, `Finished`, which a panic of the driver itself also sends.
    let events = driver.events.clone();
    tokio::spawn(finish_on_panic(driver.run(command_rx), events));
    DriverHandle {
        commands: command_tx,
        events: event_rx,
        in_flight,
        streaming,
    }
}

/// Run the driver; should it panic (a bug), say so as the run's last
/// event, so that a face ends the run as failed, with what it saved, and
/// does not take a closed channel for a clean end.
pub(in crate::load) async fn finish_on_panic(
    run: impl std::future::Future<Output = ()>,
    events: mpsc::UnboundedSender<DriverEvent>,
) {
    use futures_util::FutureExt;
    if let Err(panic) = std::panic::AssertUnwindSafe(run).catch_unwind().await {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        let _ = events.send(DriverEvent::Finished {
            stopped_by_user: false,
            error: Some(format!(
                "the load driver stopped on an internal error ({}); the levels finished so far are saved",
                crate::protocol::error_body::one_line(&why)
            )),
        });
    }
}

struct LevelState {
    info: LevelInfo,
    /// Manual levels: in flight first reached the target, so requests
    /// sent from now on measure the steady state.
    reached_target: bool,
    dispatched: u32,
    in_flight: u32,
    closed: bool,
    partial: bool,
    announced_finish: bool,
    ok: u32,
    failed: u32,
    first_error: Option<String>,
    /// Timed levels: dispatch stops here; what is in flight then finishes
    /// and still counts for this level.
    dispatch_until: Option<Instant>,
    /// A fitted level that is steady: it sends no more.
    sent_enough: bool,
}

/// `--find-capacity` as it runs.
struct SearchState {
    /// What passes, and what to probe next: analysis's call, not the driver's.
    policy: CapacityPolicy,
    plan: SearchPlan,
    /// The concurrency to probe next, once the current probe is judged.
    pending: Option<u32>,
    /// The current probe's records (probes run one at a time).
    records: Vec<RequestRecord>,
    probes: usize,
}

impl LevelState {
    /// A timed level whose dispatch window is over at `now`.
    fn window_over(&self, now: Instant) -> bool {
        self.dispatch_until.is_some_and(|until| until <= now)
    }

    fn remaining(&self) -> u32 {
        if self.sent_enough {
            return 0;
        }
        match self.info.num_prompts {
            Some(n) => n.saturating_sub(self.dispatched),
            None => u32::MAX,
        }
    }
}

struct Driver {
    executor: Arc<dyn Executor>,
    /// The run's settings, `turns` raised to at least 1. Its `search` is
    /// moved into [`Driver::search`], which runs it; `first_series` is only
    /// where [`Driver::series`] starts; and the warmup measures the
    /// workload's calibration into `workload`, whose prompt draws advance.
    cfg: DriverConfig,
    run_start: Instant,
    events: mpsc::UnboundedSender<DriverEvent>,
    cancel: watch::Sender<bool>,
    tasks: JoinSet<RequestRecord>,
    /// Level of each task in flight, so a task that dies without a record
    /// (a panic) still leaves its level's count right, and whether it is
    /// in flight across a concurrency change.
    task_levels: HashMap<tokio::task::Id, TaskMeta>,
    /// Steering asked for during warmup, applied when the first level starts.
    deferred: Vec<Command>,
    next_id: u64,
    levels: Vec<LevelState>,
    current: Option<usize>,
    /// Plan index of the next planned level to start.
    next_plan: usize,
    concurrency_target: u32,
    paused: bool,
    stopping: bool,
    in_flight: Arc<AtomicU32>,
    streaming: Arc<AtomicU32>,
    search: Option<SearchState>,
    open_loop: Option<OpenLoop>,
    paused_at: Option<Instant>,
    /// Requests of the run that succeeded.
    run_ok: u64,
    /// The last finished level had requests and every one failed.
    last_level_all_failed: bool,
    /// Why the run stops on its own (every request failing).
    fatal: Option<String>,
    /// Conversations with a turn in flight, by request id.
    conversations: HashMap<u64, Conversation>,
    /// Conversations whose answer is back, waiting for a free stream.
    ready_turns: std::collections::VecDeque<Conversation>,
    server: ServerState,
    /// When to ask the server's root next, if at all.
    next_poll: Option<Instant>,
    /// The question asked, while it is out.
    poll: Option<tokio::task::JoinHandle<bool>>,
    /// The server's marks as last read while it was up: what a suspected
    /// restart is compared with.
    marks: Option<ServerMarks>,
    /// A read of the marks for `marks`, while it is out.
    marks_baseline: Option<tokio::task::JoinHandle<Option<ServerMarks>>>,
    /// The read after a suspected restart, while it is out.
    marks_check: Option<tokio::task::JoinHandle<Option<ServerMarks>>>,
    plan_done_sent: bool,
    /// The series running (0 first).
    series: usize,
    /// A scheduled level not yet due: the plan waits until then.
    pending_start: Option<Instant>,
    /// The work at a level's edge, while it runs (the next level and the
    /// closed level's `LevelFinished` wait for it).
    between: Option<between::Edge>,
    /// The probe sender, once the warmup is over (`--probe-rate`).
    probes: Option<super::probes::ProbeGate>,
    /// `--budget` (or the default budget), when the run is fitted.
    fit: Option<fit::FitState>,
    /// The server's pace as the warmup and the planned levels showed it.
    pace: fit::Pace,
}

/// What the driver knows of a request in flight.
#[derive(Clone, Copy)]
struct TaskMeta {
    level: usize,
    transition: bool,
}

/// Warmup records carry this level index; they never reach the recorder.
const WARMUP_LEVEL: usize = usize::MAX;

impl Driver {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut commands_open = true;
        match self.warmup_phase(&mut commands, &mut commands_open).await {
            Ok(true) => {}
            Ok(false) => {
                self.emit(DriverEvent::Finished {
                    stopped_by_user: true,
                    error: None,
                });
                return;
            }
            Err(error) => {
                self.emit(DriverEvent::Finished {
                    stopped_by_user: false,
                    error: Some(error),
                });
                return;
            }
        }

        self.start_probes();
        // The first edge: the server's account before any level.
        if !self.spawn_edge(None, true) {
            self.start_next_planned();
        }
        for command in std::mem::take(&mut self.deferred) {
            self.handle(command);
        }
        loop {
            self.check_outage();
            if self
                .fit
                .as_ref()
                .and_then(fit::FitState::deadline)
                .is_some_and(|at| at <= Instant::now())
            {
                self.budget_spent();
            }
            // A scheduled level came due: start it (this waits no longer).
            if !self.stopping && self.pending_start.is_some_and(|at| at <= Instant::now()) {
                self.pending_start = None;
                self.start_next_planned();
            }
            // Settle first: it may start the next level, which dispatch then fills.
            if !self.server.holds() {
                self.settle_levels();
            }
            self.dispatch();
            if self.current.is_none()
                && self.tasks.is_empty()
                && self.between.is_none()
                && (self.pending_start.is_none() || self.stopping)
            {
                if !self.cfg.watch_server || self.stopping || !commands_open {
                    break;
                }
                if !self.plan_done_sent && matches!(self.server, ServerState::Up) {
                    self.plan_done_sent = true;
                    self.emit(DriverEvent::PlanDone);
                    self.next_poll = Some(Instant::now() + IDLE_POLL_EVERY);
                }
            }
            if self.poll.is_none() && self.next_poll.is_some_and(|at| at <= Instant::now()) {
                self.start_poll();
            }
            let wake = [
                self.next_send_time(),
                self.next_watch_time(),
                self.next_level_time(),
                self.fit.as_ref().and_then(fit::FitState::deadline),
            ]
            .into_iter()
            .flatten()
            .min();
            tokio::select! {
                _ = sleep_until_opt(wake), if wake.is_some() => {}
                answered = poll_result(&mut self.poll), if self.poll.is_some() => {
                    self.on_poll(answered);
                }
                marks = marks_result(&mut self.marks_baseline), if self.marks_baseline.is_some() => {
                    self.on_baseline_marks(marks);
                }
                marks = marks_result(&mut self.marks_check), if self.marks_check.is_some() => {
                    self.on_check_marks(marks);
                }
                (closes, snapshot) = between_result(&mut self.between), if self.between.is_some() => {
                    self.edge_done(closes, snapshot);
                }
                command = commands.recv(), if commands_open => match command {
                    Some(command) => self.handle(command),
                    // Nobody can steer any more: let the plan run out.
                    None => commands_open = false,
                },
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.on_joined(joined);
                }
                // Nothing in flight and nobody left to steer (a paused
                // level, say): the run cannot move on, so end it.
                else => {
                    self.stopping = true;
                    self.close_current(true);
                }
            }
        }
        // Failures still held when the run stops were never judged: saved
        // as they are rather than lost.
        self.flush_held();
        let error = self.fatal.take();
        let spent = self.fit.as_ref().is_some_and(|f| f.spent);
        self.emit(DriverEvent::Finished {
            stopped_by_user: self.stopping && error.is_none() && !spent,
            error,
        });
    }

    /// Start the probe sender (`--probe-rate`), with the prompt length the
    /// warmup calibrated; it sends only while a level runs.
    fn start_probes(&mut self) {
        if let Some(config) = self.cfg.probes.clone() {
            self.probes = Some(super::probes::spawn(
                config,
                self.cfg.body.clone(),
                self.cfg.workload.calibration,
                self.cfg.seed,
                self.run_start.into_std(),
                self.cancel.subscribe(),
                self.events.clone(),
            ));
        }
    }

    fn emit(&self, event: DriverEvent) {
        // The receiver is gone only when the program is shutting down.
        let _ = self.events.send(event);
    }

    fn now(&self) -> Duration {
        self.run_start.elapsed()
    }

    fn spawn_request(
        &mut self,
        level: usize,
        prompt: &PromptSpec,
        scheduled: Option<Instant>,
        turn: Option<u32>,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let request = PreparedRequest {
            id,
            level,
            body: self.cfg.body.build(prompt),
            input_tokens_target: prompt.input_tokens_target,
            max_tokens: prompt.max_tokens,
            // std time at the edge: the executor compares it with the time
            // the request really went out (see the `Instant` import).
            scheduled: scheduled.map(Instant::into_std),
            turn,
            probe: false,
        };
        // Subscribed here, before the task exists: a Stop sent after this
        // reaches it even if the task has not started yet.
        let cancel = self.cancel.subscribe();
        let work = self.executor.execute(
            request,
            self.run_start.into_std(),
            cancel,
            self.streaming.clone(),
        );
        // --save-prompts only (never by default: prompts can be private data).
        let saved_prompt = self
            .cfg
            .workload
            .save_prompts()
            .then(|| prompt.text.clone());
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let handle = self.tasks.spawn(async move {
            let mut record = work.await;
            record.prompt = saved_prompt;
            record
        });
        // Sent before a manual level filled up: it shares the server with
        // the last level's requests, so it is transition, not steady state.
        let transition = self.levels.get(level).is_some_and(|l| !l.reached_target);
        self.task_levels
            .insert(handle.id(), TaskMeta { level, transition });
        id
    }

    /// A change by hand pauses the plan: a planned level it cuts short
    /// (saved partial) is the plan's next again, so it runs whole when the
    /// plan resumes (`n`) unless the hand-set level was above it.
    fn pause_the_plan(&mut self) {
        let interrupted = self
            .current
            .map(|i| &self.levels[i].info)
            .filter(|l| l.mode == Mode::Planned)
            .and_then(|l| l.plan_index);
        if let Some(plan_index) = interrupted {
            self.next_plan = self.next_plan.min(plan_index);
        }
    }

    fn set_target(&mut self, target: u32) {
        if target != self.concurrency_target {
            self.concurrency_target = target;
            self.emit(DriverEvent::TargetChanged {
                at: self.now(),
                target,
            });
        }
    }

    fn handle(&mut self, command: Command) {
        if self.stopping {
            return;
        }
        // A scheduled run keeps its schedule: shards elsewhere step on the
        // same clock, so a level changed by hand here would no longer line
        // up with theirs. Pause and stop still work.
        if self.cfg.start_at.is_some()
            && matches!(
                command,
                Command::SetConcurrency(_)
                    | Command::SetRate(_)
                    | Command::NextLevel
                    | Command::NewSeries
            )
        {
            return;
        }
        match command {
            Command::NewSeries => self.new_series(),
            Command::SetRate(rate) => {
                let rate = if rate.is_finite() {
                    rate.clamp(0.01, 100_000.0)
                } else {
                    return;
                };
                let current = self.current.map(|i| &self.levels[i].info);
                if current.is_some_and(|l| l.mode == Mode::Manual && l.rate == Some(rate)) {
                    return;
                }
                let cap = current.map_or(self.concurrency_target, |l| l.concurrency);
                let index = self.current;
                let manual = current.is_some_and(|l| l.mode == Mode::Manual);
                self.pause_the_plan();
                self.close_current(!manual);
                if let Some(index) = index {
                    self.judge_probe(index);
                }
                self.start_level(cap.max(1), Mode::Manual, None, None, Some(rate));
            }
            Command::SetConcurrency(n) => {
                let n = n.clamp(1, MAX_CONCURRENCY);
                let current_mode = self.current.map(|i| self.levels[i].info.mode);
                if current_mode == Some(Mode::Manual) && n == self.concurrency_target {
                    return;
                }
                // A planned level cut short by the user is partial; a manual
                // stint ended by another change is complete.
                let index = self.current;
                self.pause_the_plan();
                self.close_current(current_mode.is_some_and(|m| m != Mode::Manual));
                if let Some(index) = index {
                    self.judge_probe(index);
                }
                self.start_level(n, Mode::Manual, None, None, None);
            }
            Command::NextLevel => match self.current.map(|i| self.levels[i].info.mode) {
                Some(Mode::Manual) => {
                    let at = self.concurrency_target;
                    self.close_current(false);
                    // Resume the plan at its next level above where the user was.
                    while self
                        .cfg
                        .plan
                        .get(self.next_plan)
                        .is_some_and(|p| p.concurrency <= at)
                    {
                        self.next_plan += 1;
                    }
                    self.start_next_planned();
                }
                Some(_) => {
                    let index = self.current;
                    self.close_current(true);
                    if let Some(index) = index {
                        self.judge_probe(index);
                    }
                    self.start_next_planned();
                }
                None => {}
            },
            Command::TogglePause => {
                self.paused = !self.paused;
                if self.paused {
                    self.paused_at = Some(Instant::now());
                } else if let Some(at) = self.paused_at.take() {
                    // The schedule waits with the user: no backlog of "late" sends.
                    if let Some(open) = &mut self.open_loop {
                        open.shift(at.elapsed());
                    }
                }
                self.emit(DriverEvent::Paused(self.paused));
            }
            Command::Stop => {
                self.stopping = true;
                self.pending_start = None;
                self.abandon_work();
                self.close_current(true);
                // In-flight requests see this and come back as Cancelled.
                // send_replace: kept even when no request listens right now.
                self.cancel.send_replace(true);
            }
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}
