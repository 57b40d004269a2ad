//! The load driver: closed-loop dispatch under a concurrency target that can
//! change at run time.
//!
//! One task owns all driver state; commands come in over a channel and
//! everything that happens goes out as `DriverEvent`s, so the view and the
//! recorder never share state with the load tasks. A request belongs to the
//! level it was dispatched in, even when that level closes before it returns.

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

/// Highest concurrency a user can ask for by hand.
pub const MAX_CONCURRENCY: u32 = 4096;

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
    pub fn closed(concurrency: u32, num_prompts: u32) -> LevelPlan {
        LevelPlan {
            concurrency,
            num_prompts,
            rate: None,
        }
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
    /// The run is over; no event follows. `error` says why it could not go on.
    Finished {
        stopped_by_user: bool,
        error: Option<String>,
    },
}

pub struct DriverConfig {
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
    /// The series the first level belongs to (a resumed run goes on in
    /// the series it stopped in).
    pub first_series: usize,
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

/// A request log to send on its own timeline.
#[derive(Clone, Debug)]
pub struct Replay {
    pub entries: Arc<Vec<ReplayEntry>>,
    /// 2.0 sends twice as fast as recorded.
    pub speed: f64,
    /// Most requests in flight.
    pub max_in_flight: u32,
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
        self.num_prompts
            .unwrap_or(concurrency.saturating_mul(self.prompts_per_stream.max(1)))
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
    pub task: tokio::task::JoinHandle<()>,
}

/// Start the driver on the current runtime, sending over HTTP to
/// `config.target`. `run_start` is time zero for every offset in the run.
pub fn spawn(config: DriverConfig, run_start: std::time::Instant) -> DriverHandle {
    let executor = Arc::new(HttpExecutor::new(config.target.clone()));
    spawn_with(config, run_start, executor)
}

/// [`spawn`] with the requests sent (and the server's root asked) by
/// `executor`: a scripted server in the driver's tests.
pub fn spawn_with(
    config: DriverConfig,
    run_start: std::time::Instant,
    executor: Arc<dyn Executor>,
) -> DriverHandle {
    let (command_tx, command_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let in_flight = Arc::new(AtomicU32::new(0));
    let streaming = Arc::new(AtomicU32::new(0));
    let (cancel_tx, _) = watch::channel(false);
    let search = config.search.map(|plan| SearchState {
        policy: CapacityPolicy::new(plan.max_concurrency, plan.slo.clone()),
        pending: None,
        records: Vec::new(),
        plan,
        probes: 0,
    });
    let driver = Driver {
        executor,
        body: config.body,
        workload: config.workload,
        plan: config.plan,
        warmup: config.warmup,
        seed: config.seed,
        burstiness: config.burstiness,
        replay: config.replay,
        search,
        open_loop: None,
        paused_at: None,
        run_ok: 0,
        last_level_all_failed: false,
        fatal: None,
        turns: config.turns.max(1),
        conversations: HashMap::new(),
        ready_turns: std::collections::VecDeque::new(),
        run_start: Instant::from_std(run_start),
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
        watch_server: config.watch_server,
        server: ServerState::Up,
        next_poll: None,
        poll: None,
        plan_done_sent: false,
        series: config.first_series,
    };
    let task = tokio::spawn(driver.run(command_rx));
    DriverHandle {
        commands: command_tx,
        events: event_rx,
        in_flight,
        streaming,
        task,
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
}

/// The schedule of the open-loop level running now.
struct OpenLoop {
    level: usize,
    /// Intended send time of the next request; it may be past when the cap
    /// held it back, and then it goes out late with that time recorded.
    next_at: Instant,
    source: Schedule,
}

enum Schedule {
    Rate(Arrivals),
    Replay {
        origin: Instant,
        next: usize,
        speed: f64,
        entries: Arc<Vec<ReplayEntry>>,
    },
}

impl OpenLoop {
    /// Move to the next request's intended time.
    fn advance(&mut self) {
        match &mut self.source {
            Schedule::Rate(arrivals) => {
                self.next_at += Duration::from_secs_f64(arrivals.next_gap_s().min(1e6));
            }
            Schedule::Replay {
                origin,
                next,
                speed,
                entries,
            } => {
                *next += 1;
                if let Some(entry) = entries.get(*next) {
                    self.next_at = *origin + Duration::from_secs_f64((entry.t / *speed).min(1e9));
                }
            }
        }
    }

    /// A pause moves the whole schedule on by its length.
    fn shift(&mut self, by: Duration) {
        self.next_at += by;
        if let Schedule::Replay { origin, .. } = &mut self.source {
            *origin += by;
        }
    }
}

/// A `--turns` conversation between its turns.
#[derive(Default)]
struct Conversation {
    /// Turns sent so far.
    turn: u32,
    messages: Vec<ChatMessage>,
    /// Estimated prompt tokens of the history plus the new message.
    input_tokens: u32,
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
    fn remaining(&self) -> u32 {
        match self.info.num_prompts {
            Some(n) => n.saturating_sub(self.dispatched),
            None => u32::MAX,
        }
    }
}

struct Driver {
    executor: Arc<dyn Executor>,
    body: BodySpec,
    workload: Workload,
    plan: Vec<LevelPlan>,
    warmup: u32,
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
    seed: u64,
    burstiness: f64,
    replay: Option<Replay>,
    search: Option<SearchState>,
    open_loop: Option<OpenLoop>,
    paused_at: Option<Instant>,
    /// Requests of the run that succeeded.
    run_ok: u64,
    /// The last finished level had requests and every one failed.
    last_level_all_failed: bool,
    /// Why the run stops on its own (every request failing).
    fatal: Option<String>,
    /// `--turns`: requests per conversation (1: single requests).
    turns: u32,
    /// Conversations with a turn in flight, by request id.
    conversations: HashMap<u64, Conversation>,
    /// Conversations whose answer is back, waiting for a free stream.
    ready_turns: std::collections::VecDeque<Conversation>,
    watch_server: bool,
    server: ServerState,
    /// When to ask the server's root next, if at all.
    next_poll: Option<Instant>,
    /// The question asked, while it is out.
    poll: Option<tokio::task::JoinHandle<bool>>,
    plan_done_sent: bool,
    /// The series running (0 first).
    series: usize,
}

/// What the driver knows of a request in flight.
#[derive(Clone, Copy)]
struct TaskMeta {
    level: usize,
    transition: bool,
}

/// Whether the server is there, as the requests' outcomes tell.
enum ServerState {
    Up,
    /// Every request back since `since` failed to connect or was cut: the
    /// records wait here, not yet charged to a level, until the outage
    /// proves real (then they are restart failures) or a request gets
    /// through (then they count as they are).
    Suspect {
        since: Instant,
        held: Vec<RequestRecord>,
    },
    /// Nothing is sent; the server's root is polled until it answers.
    Gone,
    /// It answered; the next series may start.
    Back,
}

/// How long every request must fail to connect before the server counts as gone.
pub const SERVER_GONE_AFTER: Duration = Duration::from_secs(2);
/// How often a gone server is asked whether it is back.
const SERVER_POLL_EVERY: Duration = Duration::from_millis(500);
/// How often an idle driver (the plan done) checks the server is still there.
const IDLE_POLL_EVERY: Duration = Duration::from_millis(500);

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

        self.start_next_planned();
        for command in std::mem::take(&mut self.deferred) {
            self.handle(command);
        }
        loop {
            self.check_outage();
            // Settle first: it may start the next level, which dispatch then fills.
            if !matches!(self.server, ServerState::Suspect { .. }) {
                self.settle_levels();
            }
            self.dispatch();
            if self.current.is_none() && self.tasks.is_empty() {
                if !self.watch_server || self.stopping || !commands_open {
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
            let wake = [self.next_send_time(), self.next_watch_time()]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                _ = sleep_until_opt(wake), if wake.is_some() => {}
                answered = poll_result(&mut self.poll), if self.poll.is_some() => {
                    self.on_poll(answered);
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
        let error = self.fatal.take();
        self.emit(DriverEvent::Finished {
            stopped_by_user: self.stopping && error.is_none(),
            error,
        });
    }

    /// When the open-loop level next has a request due, if it could send one.
    fn next_send_time(&self) -> Option<Instant> {
        let open = self.open_loop.as_ref()?;
        let level = self.levels.get(open.level)?;
        let can_send = !self.paused
            && !self.stopping
            && self.current == Some(open.level)
            && level.remaining() > 0
            && (self.tasks.len() as u32) < self.concurrency_target;
        can_send.then_some(open.next_at)
    }

    fn emit(&self, event: DriverEvent) {
        // The receiver is gone only when the program is shutting down.
        let _ = self.events.send(event);
    }

    fn now(&self) -> Duration {
        self.run_start.elapsed()
    }

    /// Warmup requests at the first level's concurrency, discarded but used
    /// to calibrate prompt length. Ok(false): the user stopped; Err: every
    /// warmup request failed, so the run cannot measure anything.
    async fn warmup_phase(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        commands_open: &mut bool,
    ) -> Result<bool, String> {
        let total = self.warmup;
        if total == 0 {
            return Ok(true);
        }
        let concurrency = self.plan.first().map_or(1, |p| p.concurrency).max(1);
        self.emit(DriverEvent::WarmupStarted {
            requests: total,
            concurrency,
        });
        let mut words_of: HashMap<u64, usize> = HashMap::new();
        let mut records: Vec<RequestRecord> = Vec::new();
        let mut sent = 0u32;
        loop {
            while sent < total && (self.tasks.len() as u32) < concurrency && !self.stopping {
                let words = self.workload.warmup_words(sent as usize);
                let prompt = self.workload.prompt_of_words(words);
                let id = self.spawn_request(WARMUP_LEVEL, &prompt, None, None);
                // All the words sent, the shared prefix's too: fitted on the
                // unique part alone, the prefix would pass for template
                // overhead and every prompt would come out short by it.
                words_of.insert(id, prompt.words);
                sent += 1;
            }
            if self.tasks.is_empty() {
                break;
            }
            tokio::select! {
                command = commands.recv(), if *commands_open => match command {
                    Some(Command::Stop) => {
                        self.stopping = true;
                        self.cancel.send_replace(true);
                    }
                    // Kept for when the first level starts: a key pressed
                    // during warmup is not lost.
                    Some(other) => self.deferred.push(other),
                    None => *commands_open = false,
                },
                Some(joined) = self.tasks.join_next_with_id() => {
                    self.in_flight.fetch_sub(1, Ordering::Relaxed);
                    if let Ok((id, record)) = joined {
                        self.task_levels.remove(&id);
                        records.push(record);
                    }
                }
            }
        }
        if self.stopping {
            return Ok(false);
        }
        let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_ok()).collect();
        if ok.is_empty() {
            let first_error = records
                .iter()
                .find_map(|r| match r.outcome {
                    Outcome::Failed(class) => Some(format!(
                        "{class}: {}",
                        r.error_message.as_deref().unwrap_or("no message")
                    )),
                    _ => None,
                })
                .unwrap_or_else(|| "no answer".into());
            return Err(format!(
                "all {} warmup requests failed; first error: {first_error}",
                records.len()
            ));
        }
        let samples: Vec<(usize, u32)> = ok
            .iter()
            .filter_map(|r| Some((*words_of.get(&r.id)?, r.input_tokens_reported?)))
            .collect();
        if let Some(fitted) = Calibration::fit(&samples, self.workload.calibration) {
            self.workload.calibration = fitted;
        }
        self.emit(DriverEvent::WarmupFinished {
            ok: ok.len(),
            failed: records.len() - ok.len(),
            calibration: self.workload.calibration,
            reported_prompt_tokens: samples.iter().map(|s| s.1).collect(),
        });
        Ok(true)
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
            body: self.body.build(prompt),
            input_tokens_target: prompt.input_tokens_target,
            max_tokens: prompt.max_tokens,
            // std time at the edge: the executor compares it with the time
            // the request really went out (see the `Instant` import).
            scheduled: scheduled.map(Instant::into_std),
            turn,
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
        let saved_prompt = self.workload.save_prompts().then(|| prompt.text.clone());
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

    fn set_target(&mut self, target: u32) {
        if target != self.concurrency_target {
            self.concurrency_target = target;
            self.emit(DriverEvent::TargetChanged {
                at: self.now(),
                target,
            });
        }
    }

    fn start_level(
        &mut self,
        concurrency: u32,
        mode: Mode,
        num_prompts: Option<u32>,
        plan_index: Option<usize>,
        rate: Option<f64>,
    ) {
        let index = self.levels.len();
        let now = Instant::now();
        self.open_loop = match (mode, rate, &self.replay) {
            (Mode::Rate | Mode::Manual, Some(rate), _) => Some(OpenLoop {
                level: index,
                next_at: now,
                source: Schedule::Rate(Arrivals::new(
                    self.seed ^ (index as u64).wrapping_mul(0x9E37_79B9),
                    rate,
                    self.burstiness,
                )),
            }),
            (Mode::Replay, _, Some(replay)) => Some(OpenLoop {
                level: index,
                next_at: now
                    + Duration::from_secs_f64(
                        (replay.entries.first().map_or(0.0, |e| e.t) / replay.speed).min(1e9),
                    ),
                source: Schedule::Replay {
                    origin: now,
                    next: 0,
                    speed: replay.speed,
                    entries: replay.entries.clone(),
                },
            }),
            _ => None,
        };
        let timeline = match (mode, &self.replay) {
            (Mode::Replay, Some(replay)) => replay
                .entries
                .last()
                .map(|e| Duration::from_secs_f64((e.t / replay.speed).clamp(0.0, 1e9))),
            _ => None,
        };
        let info = LevelInfo {
            index,
            concurrency,
            mode,
            num_prompts,
            plan_index,
            started_at: self.now(),
            rate,
            timeline,
            series: self.series,
        };
        self.current = Some(info.index);
        self.emit(DriverEvent::LevelStarted(info.clone()));
        self.levels.push(LevelState {
            info,
            reached_target: mode != Mode::Manual,
            dispatched: 0,
            in_flight: 0,
            closed: false,
            partial: false,
            announced_finish: false,
            ok: 0,
            failed: 0,
            first_error: None,
        });
        self.set_target(concurrency);
    }

    /// Start the plan's next level (or the search's next probe, or the
    /// replay), or end the run's dispatching when there is none.
    fn start_next_planned(&mut self) {
        if let Some(search) = &mut self.search {
            let next = if search.probes == 0 {
                Some(search.policy.first())
            } else {
                search.pending.take()
            };
            match next {
                Some(c) => {
                    let n = search.plan.num_prompts(c);
                    let index = search.probes;
                    search.probes += 1;
                    self.start_level(c, Mode::Search, Some(n), Some(index), None);
                }
                None => self.current = None,
            }
            return;
        }
        if let Some(replay) = &self.replay {
            if self.next_plan == 0 && !replay.entries.is_empty() {
                self.next_plan = 1;
                let (cap, n) = (replay.max_in_flight, replay.entries.len() as u32);
                self.start_level(cap, Mode::Replay, Some(n), Some(0), None);
            } else {
                self.current = None;
            }
            return;
        }
        match self.plan.get(self.next_plan).copied() {
            Some(step) => {
                let index = self.next_plan;
                self.next_plan += 1;
                let mode = if step.rate.is_some() {
                    Mode::Rate
                } else {
                    Mode::Planned
                };
                self.start_level(
                    step.concurrency,
                    mode,
                    Some(step.num_prompts),
                    Some(index),
                    step.rate,
                );
            }
            None => self.current = None,
        }
    }

    fn close_current(&mut self, partial: bool) {
        self.open_loop = None;
        if let Some(index) = self.current.take() {
            let level = &mut self.levels[index];
            level.closed = true;
            level.partial = partial;
            // A hand-set level's requests still out finish under the next
            // level's load: transition, left out of this level's figures.
            if level.info.mode == Mode::Manual {
                for meta in self.task_levels.values_mut() {
                    if meta.level == index {
                        meta.transition = true;
                    }
                }
            }
        }
    }

    fn dispatch(&mut self) {
        if self.paused || self.stopping || !matches!(self.server, ServerState::Up) {
            return;
        }
        let Some(index) = self.current else { return };
        self.note_target_reached(index);
        let open_loop = self.open_loop.as_ref().is_some_and(|o| o.level == index);
        let now = Instant::now();
        while (self.tasks.len() as u32) < self.concurrency_target
            && self.levels[index].remaining() > 0
        {
            let scheduled = if open_loop {
                match &self.open_loop {
                    Some(open) if open.next_at <= now => Some(open.next_at),
                    _ => break,
                }
            } else {
                None
            };
            let (prompt, conversation) = if self.turns > 1 {
                let (prompt, conversation) = self.next_turn();
                (prompt, Some(conversation))
            } else {
                (self.prompt_for(index), None)
            };
            let id = self.spawn_request(
                index,
                &prompt,
                scheduled,
                conversation.as_ref().map(|c| c.turn),
            );
            if let Some(conversation) = conversation {
                self.conversations.insert(id, conversation);
            }
            if let Some(open) = self.open_loop.as_mut().filter(|_| open_loop) {
                open.advance();
            }
            let level = &mut self.levels[index];
            level.dispatched += 1;
            level.in_flight += 1;
        }
        self.note_target_reached(index);
    }

    /// A manual level's steady state starts once in flight first reaches
    /// its target (closed loop), or once nothing of the levels before it
    /// is still out (open loop, where the rate sets what is in flight).
    fn note_target_reached(&mut self, index: usize) {
        let level = &self.levels[index];
        if level.reached_target {
            return;
        }
        let reached = if level.info.rate.is_some() {
            self.task_levels.values().all(|m| m.level == index)
        } else {
            self.tasks.len() as u32 >= self.concurrency_target
        };
        if reached {
            self.levels[index].reached_target = true;
            self.emit(DriverEvent::TargetReached {
                index,
                at: self.now(),
            });
        }
    }

    /// `--turns`: the next turn of a conversation whose answer is back, or
    /// the first of a new one. Each turn re-sends the history and adds a new
    /// user message of the input length.
    fn next_turn(&mut self) -> (PromptSpec, Conversation) {
        let mut conversation = self.ready_turns.pop_front().unwrap_or_default();
        let user = self.workload.next_prompt();
        conversation.turn += 1;
        conversation.input_tokens += user.input_tokens_target;
        conversation.messages.push(ChatMessage {
            role: "user".into(),
            content: user.text,
        });
        let prompt = PromptSpec {
            text: flatten_messages(&conversation.messages),
            words: user.words,
            input_tokens_target: conversation.input_tokens,
            max_tokens: user.max_tokens,
            messages: Some(conversation.messages.clone()),
        };
        (prompt, conversation)
    }

    /// A turn came back: its conversation goes on with the answer in its
    /// history, unless it failed or was the last turn.
    fn continue_conversation(&mut self, record: &RequestRecord) {
        let Some(mut conversation) = self.conversations.remove(&record.id) else {
            return;
        };
        if !record.is_ok() || conversation.turn >= self.turns {
            return;
        }
        // The reply's text is not kept (the hot path keeps no content); a
        // stand-in of the same length takes its place. A prefix cache then
        // hits through the previous user message, not through the reply.
        let words = self
            .workload
            .calibration
            .words_for(record.output_tokens.max(1));
        let reply = self.workload.prompt_of_words(words);
        conversation.input_tokens += record.output_tokens;
        conversation.messages.push(ChatMessage {
            role: "assistant".into(),
            content: reply.text,
        });
        self.ready_turns.push_back(conversation);
    }

    /// The next measured prompt: a replay entry's lengths (or text), else
    /// the workload's.
    fn prompt_for(&mut self, level: usize) -> PromptSpec {
        let entry = match (&self.open_loop, &self.replay) {
            (Some(open), Some(_)) if open.level == level => match &open.source {
                Schedule::Replay { next, entries, .. } => entries.get(*next).cloned(),
                Schedule::Rate(_) => None,
            },
            _ => None,
        };
        let Some(entry) = entry else {
            return self.workload.next_prompt();
        };
        let output = entry.output_len.unwrap_or(self.workload.output_len).max(1);
        match entry.prompt {
            Some(text) => {
                let words = text.split_whitespace().count();
                PromptSpec {
                    input_tokens_target: entry.input_len.unwrap_or_else(|| {
                        (words as f64 * self.workload.calibration.tokens_per_word).round() as u32
                    }),
                    text,
                    words,
                    max_tokens: output,
                    ..self.workload.next_prompt()
                }
            }
            None => {
                let input = entry.input_len.unwrap_or(self.workload.input_len);
                let words = self.workload.calibration.words_for(input);
                let mut prompt = self.workload.prompt_of_words(words);
                prompt.input_tokens_target = input + self.workload.prefix_len;
                prompt.max_tokens = output;
                prompt
            }
        }
    }

    /// Close a planned level that has sent and received everything, announce
    /// every closed level whose requests are all back, and move the plan on.
    fn settle_levels(&mut self) {
        if let Some(index) = self.current {
            let level = &self.levels[index];
            if level.info.num_prompts.is_some() && level.remaining() == 0 && level.in_flight == 0 {
                self.close_current(false);
                self.judge_probe(index);
                self.announce_finished();
                if !self.stopping {
                    self.start_next_planned();
                }
                return;
            }
        }
        self.announce_finished();
    }

    /// A search probe is over: tell the search how it went, so it can
    /// choose the next concurrency.
    fn judge_probe(&mut self, index: usize) {
        let Some(search) = &mut self.search else {
            return;
        };
        let level = &self.levels[index];
        if level.info.mode != Mode::Search {
            return;
        }
        let records = std::mem::take(&mut search.records);
        search.pending = search
            .policy
            .judge(level.info.concurrency, level.partial, &records);
        let (passing, failing) = search.policy.bounds();
        let next = search.pending;
        self.emit(DriverEvent::Search(SearchProgress {
            passing,
            failing,
            next,
        }));
    }

    fn announce_finished(&mut self) {
        let mut finished = Vec::new();
        for level in &mut self.levels {
            if level.closed && level.in_flight == 0 && !level.announced_finish {
                level.announced_finish = true;
                finished.push(DriverEvent::LevelFinished {
                    index: level.info.index,
                    partial: level.partial,
                });
                if !level.partial && level.failed > 0 && self.fatal.is_none() {
                    let all_failed = level.ok == 0;
                    // One level lost to a restart is survivable; a run that
                    // never got an answer, or two dead levels in a row, is not.
                    if all_failed && (self.run_ok == 0 || self.last_level_all_failed) {
                        self.fatal = Some(format!(
                            "every request failed at concurrency {} ({} of {}; first: {}): stopping early. \
                             Is the server up and the model right? Levels so far are saved",
                            level.info.concurrency,
                            level.failed,
                            level.dispatched,
                            level.first_error.as_deref().unwrap_or("no message"),
                        ));
                    }
                    self.last_level_all_failed = all_failed;
                } else if !level.partial && level.ok > 0 {
                    self.last_level_all_failed = false;
                }
            }
        }
        for event in finished {
            self.emit(event);
        }
        if self.fatal.is_some() && !self.stopping {
            self.stopping = true;
            self.close_current(true);
            self.cancel.send_replace(true);
        }
    }

    fn on_joined(
        &mut self,
        joined: Result<(tokio::task::Id, RequestRecord), tokio::task::JoinError>,
    ) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let (task, record) = match joined {
            Ok((task, record)) => (task, Some(record)),
            Err(error) => {
                // A load task panicked: a bug, not a server fault. Its level
                // still drains (below), so the run goes on; the message goes
                // to stderr.
                eprintln!("tokbench: a load task failed: {error}");
                (error.id(), None)
            }
        };
        let meta = self.task_levels.remove(&task);
        if let Some(level) = meta.and_then(|m| self.levels.get_mut(m.level)) {
            level.in_flight = level.in_flight.saturating_sub(1);
            if let Some(record) = &record {
                match record.outcome {
                    Outcome::Ok => {
                        level.ok += 1;
                        self.run_ok += 1;
                    }
                    Outcome::Failed(class) => {
                        level.failed += 1;
                        if level.first_error.is_none() {
                            level.first_error = Some(format!(
                                "{class}: {}",
                                record.error_message.as_deref().unwrap_or("no message")
                            ));
                        }
                    }
                    Outcome::Cancelled => {}
                }
                if level.info.mode == Mode::Search {
                    if let Some(search) = &mut self.search {
                        search.records.push(record.clone());
                    }
                }
            }
        }
        if let Some(mut record) = record {
            if self.turns > 1 {
                self.continue_conversation(&record);
            }
            record.transition = meta.is_some_and(|m| m.transition);
            self.pass_on(record);
        }
    }

    /// A record on its way out, through the watch on the server: failures
    /// to connect are held while an outage may be starting.
    fn pass_on(&mut self, mut record: RequestRecord) {
        if !self.watch_server {
            self.emit(DriverEvent::Record(record));
            return;
        }
        let lost = matches!(
            record.outcome,
            Outcome::Failed(ErrorClass::ConnectRefused | ErrorClass::ConnectionClosed)
        );
        match (&mut self.server, lost) {
            (ServerState::Up, true) => {
                self.server = ServerState::Suspect {
                    since: Instant::now(),
                    held: vec![record],
                };
            }
            (ServerState::Suspect { held, .. }, true) => held.push(record),
            (ServerState::Suspect { .. }, false) => {
                // Something got through: the failures count as they are.
                if let ServerState::Suspect { held, .. } =
                    std::mem::replace(&mut self.server, ServerState::Up)
                {
                    for held in held {
                        self.emit(DriverEvent::Record(held));
                    }
                }
                self.emit(DriverEvent::Record(record));
            }
            (ServerState::Gone | ServerState::Back, true) => {
                Self::as_restart(&mut record);
                self.emit(DriverEvent::Record(record));
            }
            _ => self.emit(DriverEvent::Record(record)),
        }
    }

    /// A failure of the restart window: saved as such, charged to no level.
    fn as_restart(record: &mut RequestRecord) {
        record.outcome = Outcome::Failed(ErrorClass::ServerRestart);
        record.transition = true;
    }

    /// An outage held for `SERVER_GONE_AFTER` with nothing in flight is the
    /// server gone: its failures become restart failures, the level running
    /// is cut short, and dispatch waits.
    fn check_outage(&mut self) {
        let ServerState::Suspect { since, .. } = &self.server else {
            return;
        };
        if since.elapsed() < SERVER_GONE_AFTER {
            return;
        }
        let since = self.run_start.elapsed().saturating_sub(since.elapsed());
        let state = std::mem::replace(&mut self.server, ServerState::Gone);
        if !self.tasks.is_empty() {
            // Requests still streaming: the server is there after all.
            self.server = ServerState::Up;
            if let ServerState::Suspect { held, .. } = state {
                for held in held {
                    self.emit(DriverEvent::Record(held));
                }
            }
            return;
        }
        if let ServerState::Suspect { held, .. } = state {
            for mut held in held {
                Self::as_restart(&mut held);
                self.emit(DriverEvent::Record(held));
            }
        }
        let manual = self
            .current
            .is_some_and(|i| self.levels[i].info.mode == Mode::Manual);
        self.close_current(!manual);
        self.next_poll = Some(Instant::now());
        self.emit(DriverEvent::ServerGone { since });
    }

    /// When the driver next wakes for the server watch: the end of an
    /// outage's grace, or the next poll.
    fn next_watch_time(&self) -> Option<Instant> {
        match &self.server {
            ServerState::Suspect { since, .. } => Some(*since + SERVER_GONE_AFTER),
            _ => self.next_poll.filter(|_| self.poll.is_none()),
        }
    }

    /// Ask the server's root whether anyone answers.
    fn start_poll(&mut self) {
        self.poll = Some(tokio::spawn(self.executor.server_answers()));
    }

    fn on_poll(&mut self, answered: bool) {
        self.poll = None;
        let idle = self.current.is_none() && self.tasks.is_empty();
        match (&self.server, answered) {
            (ServerState::Gone, true) => {
                self.server = ServerState::Back;
                self.next_poll = None;
                self.emit(DriverEvent::ServerBack { at: self.now() });
            }
            (ServerState::Gone, false) => {
                self.next_poll = Some(Instant::now() + SERVER_POLL_EVERY);
            }
            // The plan is done and the server went away: the same wait.
            (ServerState::Up, false) if idle => {
                self.server = ServerState::Gone;
                self.next_poll = Some(Instant::now() + SERVER_POLL_EVERY);
                self.emit(DriverEvent::ServerGone { since: self.now() });
            }
            (ServerState::Up, true) if idle => {
                self.next_poll = Some(Instant::now() + IDLE_POLL_EVERY);
            }
            _ => self.next_poll = None,
        }
    }

    /// Start the plan again from its first level, as a new series.
    fn new_series(&mut self) {
        let index = self.current;
        let partial = index.is_some_and(|i| self.levels[i].info.mode != Mode::Manual);
        self.close_current(partial);
        if let Some(index) = index {
            self.judge_probe(index);
        }
        self.series += 1;
        self.next_plan = 0;
        self.plan_done_sent = false;
        self.next_poll = None;
        if let Some(search) = &mut self.search {
            search.policy.restart();
            search.pending = None;
            search.records.clear();
            search.probes = 0;
        }
        self.server = ServerState::Up;
        self.emit(DriverEvent::SeriesStarted {
            series: self.series,
            at: self.now(),
        });
        self.start_next_planned();
    }

    fn handle(&mut self, command: Command) {
        if self.stopping {
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
                self.close_current(true);
                // In-flight requests see this and come back as Cancelled.
                // send_replace: kept even when no request listens right now.
                self.cancel.send_replace(true);
            }
        }
    }
}

/// The poll's answer; a poll task that died counts as no answer.
async fn poll_result(poll: &mut Option<tokio::task::JoinHandle<bool>>) -> bool {
    match poll {
        Some(handle) => handle.await.unwrap_or(false),
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}
