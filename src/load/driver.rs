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
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::request::{execute, PreparedRequest, Target};
use super::BodySpec;
use crate::record::{Outcome, RequestRecord};
use crate::workload::{Calibration, PromptSpec, Workload};

/// Highest concurrency a user can ask for by hand.
pub const MAX_CONCURRENCY: u32 = 4096;

/// How a level came to be (saved as the level's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Planned,
    Manual,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Planned => "planned",
            Mode::Manual => "manual",
        }
    }
}

/// One planned step of the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelPlan {
    pub concurrency: u32,
    pub num_prompts: u32,
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
}

/// What the user (or the headless runner) can ask of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Take over by hand at this concurrency: a manual level starts.
    SetConcurrency(u32),
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
    /// The run is over; no event follows. `error` says why it could not go on.
    Finished {
        stopped_by_user: bool,
        error: Option<String>,
    },
}

pub struct DriverConfig {
    pub plan: Vec<LevelPlan>,
    pub warmup: u32,
    pub target: Arc<Target>,
    pub body: BodySpec,
    pub workload: Workload,
}

/// What the rest of the program holds of a running driver.
pub struct DriverHandle {
    pub commands: mpsc::UnboundedSender<Command>,
    pub events: mpsc::UnboundedReceiver<DriverEvent>,
    /// Requests in flight right now, all levels together.
    pub in_flight: Arc<AtomicU32>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Start the driver on the current runtime. `run_start` is time zero for
/// every offset in the run.
pub fn spawn(config: DriverConfig, run_start: Instant) -> DriverHandle {
    let (command_tx, command_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let in_flight = Arc::new(AtomicU32::new(0));
    let (cancel_tx, _) = watch::channel(false);
    let driver = Driver {
        target: config.target,
        body: config.body,
        workload: config.workload,
        plan: config.plan,
        warmup: config.warmup,
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
    };
    let task = tokio::spawn(driver.run(command_rx));
    DriverHandle {
        commands: command_tx,
        events: event_rx,
        in_flight,
        task,
    }
}

struct LevelState {
    info: LevelInfo,
    dispatched: u32,
    in_flight: u32,
    closed: bool,
    partial: bool,
    announced_finish: bool,
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
    target: Arc<Target>,
    body: BodySpec,
    workload: Workload,
    plan: Vec<LevelPlan>,
    warmup: u32,
    run_start: Instant,
    events: mpsc::UnboundedSender<DriverEvent>,
    cancel: watch::Sender<bool>,
    tasks: JoinSet<RequestRecord>,
    /// Level of each task in flight, so a task that dies without a record
    /// (a panic) still leaves its level's count right.
    task_levels: HashMap<tokio::task::Id, usize>,
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

        self.start_next_planned();
        for command in std::mem::take(&mut self.deferred) {
            self.handle(command);
        }
        loop {
            // Settle first: it may start the next level, which dispatch then fills.
            self.settle_levels();
            self.dispatch();
            if self.current.is_none() && self.tasks.is_empty() {
                break;
            }
            tokio::select! {
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
        self.emit(DriverEvent::Finished {
            stopped_by_user: self.stopping,
            error: None,
        });
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
                let id = self.spawn_request(WARMUP_LEVEL, &prompt);
                words_of.insert(id, words);
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

    fn spawn_request(&mut self, level: usize, prompt: &PromptSpec) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let request = PreparedRequest {
            id,
            level,
            body: self.body.build(prompt),
            input_tokens_target: prompt.input_tokens_target,
            max_tokens: prompt.max_tokens,
            scheduled: None,
            turn: None,
        };
        let target = self.target.clone();
        let cancel = self.cancel.subscribe();
        let run_start = self.run_start;
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let handle = self
            .tasks
            .spawn(async move { execute(&target, request, run_start, cancel).await });
        self.task_levels.insert(handle.id(), level);
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
    ) {
        let info = LevelInfo {
            index: self.levels.len(),
            concurrency,
            mode,
            num_prompts,
            plan_index,
            started_at: self.now(),
        };
        self.current = Some(info.index);
        self.emit(DriverEvent::LevelStarted(info.clone()));
        self.levels.push(LevelState {
            info,
            dispatched: 0,
            in_flight: 0,
            closed: false,
            partial: false,
            announced_finish: false,
        });
        self.set_target(concurrency);
    }

    /// Start the plan's next level, or end the run's dispatching when the plan is done.
    fn start_next_planned(&mut self) {
        match self.plan.get(self.next_plan).copied() {
            Some(step) => {
                let index = self.next_plan;
                self.next_plan += 1;
                self.start_level(
                    step.concurrency,
                    Mode::Planned,
                    Some(step.num_prompts),
                    Some(index),
                );
            }
            None => self.current = None,
        }
    }

    fn close_current(&mut self, partial: bool) {
        if let Some(index) = self.current.take() {
            let level = &mut self.levels[index];
            level.closed = true;
            level.partial = partial;
        }
    }

    fn dispatch(&mut self) {
        if self.paused || self.stopping {
            return;
        }
        let Some(index) = self.current else { return };
        while (self.tasks.len() as u32) < self.concurrency_target
            && self.levels[index].remaining() > 0
        {
            let prompt = self.workload.next_prompt();
            self.spawn_request(index, &prompt);
            let level = &mut self.levels[index];
            level.dispatched += 1;
            level.in_flight += 1;
        }
    }

    /// Close a planned level that has sent and received everything, announce
    /// every closed level whose requests are all back, and move the plan on.
    fn settle_levels(&mut self) {
        if let Some(index) = self.current {
            let level = &self.levels[index];
            if level.info.num_prompts.is_some() && level.remaining() == 0 && level.in_flight == 0 {
                self.close_current(false);
                self.announce_finished();
                if !self.stopping {
                    self.start_next_planned();
                }
                return;
            }
        }
        self.announce_finished();
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
            }
        }
        for event in finished {
            self.emit(event);
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
        if let Some(level) = self
            .task_levels
            .remove(&task)
            .and_then(|l| self.levels.get_mut(l))
        {
            level.in_flight = level.in_flight.saturating_sub(1);
        }
        if let Some(record) = record {
            self.emit(DriverEvent::Record(record));
        }
    }

    fn handle(&mut self, command: Command) {
        if self.stopping {
            return;
        }
        match command {
            Command::SetConcurrency(n) => {
                let n = n.clamp(1, MAX_CONCURRENCY);
                let current_mode = self.current.map(|i| self.levels[i].info.mode);
                if current_mode == Some(Mode::Manual) && n == self.concurrency_target {
                    return;
                }
                // A planned level cut short by the user is partial; a manual
                // stint ended by another change is complete.
                self.close_current(current_mode == Some(Mode::Planned));
                self.start_level(n, Mode::Manual, None, None);
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
                Some(Mode::Planned) => {
                    self.close_current(true);
                    self.start_next_planned();
                }
                None => {}
            },
            Command::TogglePause => {
                self.paused = !self.paused;
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
