//! The driver's state machine against a scripted server, on tokio's paused
//! clock: no socket, no wall-clock time. Time only moves when every task
//! waits, and then straight to the next timer, so a request that "takes
//! 100 ms" takes exactly that, and every time asserted here is exact.
//!
//! A test that hangs is caught by `LIMIT`, a bound in *virtual* time.
//! This file holds the scripted server and the harness; the tests are in
//! the modules below, one per part of the state machine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::{sleep, sleep_until, Instant};

use super::arrivals::Arrivals;
use super::driver::{
    spawn_with, Command, DriverConfig, DriverEvent, DriverHandle, LevelInfo, LevelPlan, Mode,
    Replay, SearchPlan, SearchProgress, ServerMarks,
};
use super::executor::{BoxFuture, Executor};
use super::replay::ReplayEntry;
use super::request::{PreparedRequest, Target};
use super::{BodySpec, Wire};
use crate::analysis::decide::CapacitySlo;
use crate::protocol::openai::Api;
use crate::record::{ErrorClass, FinishReason, Outcome, RequestRecord, TokenSource};
use crate::workload::{Calibration, Workload};

mod failures;
mod fit;
mod levels;
mod open_loop;
mod search;
mod timed;
mod turns;
mod warmup;

/// A test still running after this much virtual time is stuck.
const LIMIT: Duration = Duration::from_secs(600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------
// The scripted server.

/// What the fake server saw of one request.
#[derive(Clone, Debug)]
struct Sent {
    id: u64,
    level: usize,
    /// When it went out, from the run's start.
    at: Duration,
    /// Open loop: when it was meant to go out.
    scheduled: Option<Duration>,
    turn: Option<u32>,
    input_tokens_target: u32,
    max_tokens: u32,
    /// Chat messages in the body.
    messages: usize,
    /// Words of the last message.
    words: usize,
    body: String,
}

/// How the scripted server answers one request.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// First token after `ttft`, last after `total` (from when it got a slot).
    Ok {
        ttft: Duration,
        total: Duration,
        prompt_tokens: Option<u32>,
    },
    Fail {
        after: Duration,
        class: ErrorClass,
    },
    /// The load task dies (a bug in it, not a server fault).
    Panic,
}

fn ok(ttft_ms: u64, total_ms: u64) -> Reply {
    Reply::Ok {
        ttft: ms(ttft_ms),
        total: ms(total_ms),
        prompt_tokens: None,
    }
}

fn fail(after_ms: u64, class: ErrorClass) -> Reply {
    Reply::Fail {
        after: ms(after_ms),
        class,
    }
}

type Script = Box<dyn Fn(&Sent) -> Reply + Send + Sync>;
type Answers = Box<dyn Fn(Duration) -> bool + Send + Sync>;
type Marks = Box<dyn Fn(Duration) -> Option<ServerMarks> + Send + Sync>;

struct FakeServer {
    script: Script,
    /// Whether the root answers at a given time.
    answers: Answers,
    /// The marks it shows at a given time (none by default).
    marks: Marks,
    /// When its marks were read.
    marks_reads: Mutex<Vec<Duration>>,
    /// A server with this many slots queues the rest (FIFO) before their
    /// first token.
    slots: Option<Semaphore>,
    sent: Mutex<Vec<Sent>>,
    polls: Mutex<Vec<Duration>>,
    in_flight: AtomicU32,
    /// Most requests in flight at once, by level.
    max_in_flight: Mutex<HashMap<usize, u32>>,
}

impl FakeServer {
    fn new(script: impl Fn(&Sent) -> Reply + Send + Sync + 'static) -> FakeServer {
        FakeServer {
            script: Box::new(script),
            answers: Box::new(|_| true),
            marks: Box::new(|_| None),
            marks_reads: Mutex::new(Vec::new()),
            slots: None,
            sent: Mutex::new(Vec::new()),
            polls: Mutex::new(Vec::new()),
            in_flight: AtomicU32::new(0),
            max_in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// Answers request `id` with `odd`, every other with `rest`.
    fn one_off(id: u64, odd: Reply, rest: Reply) -> FakeServer {
        FakeServer::new(move |s| if s.id == id { odd } else { rest })
    }

    fn answering(mut self, answers: impl Fn(Duration) -> bool + Send + Sync + 'static) -> Self {
        self.answers = Box::new(answers);
        self
    }

    fn with_marks(
        mut self,
        marks: impl Fn(Duration) -> Option<ServerMarks> + Send + Sync + 'static,
    ) -> Self {
        self.marks = Box::new(marks);
        self
    }

    fn marks_reads(&self) -> Vec<Duration> {
        self.marks_reads.lock().expect("log").clone()
    }

    fn with_slots(mut self, slots: usize) -> Self {
        self.slots = Some(Semaphore::new(slots));
        self
    }

    fn sent(&self) -> Vec<Sent> {
        self.sent.lock().expect("log").clone()
    }

    fn sent_at(&self, level: usize) -> Vec<Duration> {
        self.sent()
            .iter()
            .filter(|s| s.level == level)
            .map(|s| s.at)
            .collect()
    }

    fn max_in_flight(&self, level: usize) -> u32 {
        self.max_in_flight
            .lock()
            .expect("log")
            .get(&level)
            .copied()
            .unwrap_or(0)
    }

    fn polls(&self) -> Vec<Duration> {
        self.polls.lock().expect("log").clone()
    }
}

/// Counts a request out of the server's gauges however it ends (a
/// cancelled request's future is dropped mid-sleep).
struct Leaving<'a> {
    in_flight: &'a AtomicU32,
    streaming: Option<&'a AtomicU32>,
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(s) = self.streaming {
            s.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

async fn serve(
    server: Arc<FakeServer>,
    request: PreparedRequest,
    run_start: Instant,
    mut cancel: watch::Receiver<bool>,
    streaming: Arc<AtomicU32>,
) -> RequestRecord {
    let now = Instant::now();
    let body = String::from_utf8_lossy(&request.body).into_owned();
    let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let messages = json["messages"].as_array().cloned().unwrap_or_default();
    let words = messages
        .last()
        .and_then(|m| m["content"].as_str())
        .map_or(0, |t| t.split_whitespace().count());
    let scheduled = request.scheduled.map(Instant::from_std);
    let sent = Sent {
        id: request.id,
        level: request.level,
        at: now - run_start,
        scheduled: scheduled.map(|s| s.saturating_duration_since(run_start)),
        turn: request.turn,
        input_tokens_target: request.input_tokens_target,
        max_tokens: request.max_tokens,
        messages: messages.len(),
        words,
        body,
    };
    let reply = (server.script)(&sent);
    server.sent.lock().expect("log").push(sent);
    let now_in_flight = server.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    {
        let mut max = server.max_in_flight.lock().expect("log");
        let entry = max.entry(request.level).or_insert(0);
        *entry = (*entry).max(now_in_flight);
    }
    let mut leaving = Leaving {
        in_flight: &server.in_flight,
        streaming: None,
    };

    let mut record = RequestRecord::empty(request.id, request.level);
    record.input_tokens_target = request.input_tokens_target;
    record.output_tokens_requested = request.max_tokens;
    record.turn = request.turn;
    // As the real executor: open loop counts from the intended time.
    let t0 = match scheduled {
        Some(s) if s <= now => {
            record.send_lag = Some(now - s);
            s
        }
        Some(_) => {
            record.send_lag = Some(Duration::ZERO);
            now
        }
        None => now,
    };
    record.start = t0 - run_start;

    let work = async {
        match reply {
            Reply::Panic => panic!("scripted panic in load task {}", request.id),
            Reply::Fail { after, class } => {
                sleep(after).await;
                Err(class)
            }
            Reply::Ok {
                ttft,
                total,
                prompt_tokens,
            } => {
                let _slot = match &server.slots {
                    Some(slots) => slots.acquire().await.ok(),
                    None => None,
                };
                sleep(ttft).await;
                let first = Instant::now();
                streaming.fetch_add(1, Ordering::Relaxed);
                leaving.streaming = Some(&streaming);
                sleep(total.saturating_sub(ttft)).await;
                Ok((first, prompt_tokens))
            }
        }
    };
    tokio::select! {
        _ = cancel.wait_for(|c| *c) => record.outcome = Outcome::Cancelled,
        result = work => match result {
            Ok((first, prompt_tokens)) => {
                let last = Instant::now();
                let tokens = request.max_tokens.max(1);
                record.ttft = Some(first - t0);
                record.ttfb = record.ttft;
                record.e2el = Some(last - t0);
                if tokens > 1 {
                    let tpot = (last - first) / (tokens - 1);
                    record.tpot = Some(tpot);
                    record.itl_ms = vec![tpot.as_secs_f64() * 1000.0; tokens as usize - 1];
                }
                record.output_tokens = tokens;
                record.chunks = tokens;
                record.output_reads = tokens;
                record.token_source = TokenSource::Usage;
                record.input_tokens_reported = prompt_tokens;
                record.finish_reason = Some(FinishReason::Length);
                record.outcome = Outcome::Ok;
            }
            Err(class) => {
                record.outcome = Outcome::Failed(class);
                record.error_message = Some(format!("scripted {class}"));
            }
        },
    }
    drop(leaving);
    record.end = Instant::now() - run_start;
    record
}

struct FakeExecutor {
    server: Arc<FakeServer>,
    run_start: Instant,
}

impl Executor for FakeExecutor {
    fn execute(
        &self,
        request: PreparedRequest,
        run_start: std::time::Instant,
        cancel: watch::Receiver<bool>,
        streaming: Arc<AtomicU32>,
    ) -> BoxFuture<RequestRecord> {
        Box::pin(serve(
            self.server.clone(),
            request,
            Instant::from_std(run_start),
            cancel,
            streaming,
        ))
    }

    fn server_answers(&self) -> BoxFuture<bool> {
        let at = Instant::now() - self.run_start;
        self.server.polls.lock().expect("log").push(at);
        let answered = (self.server.answers)(at);
        Box::pin(async move { answered })
    }

    fn server_marks(&self) -> BoxFuture<Option<ServerMarks>> {
        let at = Instant::now() - self.run_start;
        self.server.marks_reads.lock().expect("log").push(at);
        let marks = (self.server.marks)(at);
        Box::pin(async move { marks })
    }
}

// ---------------------------------------------------------------------------
// The harness: a driver, its events stamped with the virtual time they came.

fn target() -> Arc<Target> {
    // Never used to send (the fake executor does): `spawn_with` ignores it.
    static TARGET: OnceLock<Arc<Target>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            Arc::new(Target {
                client: reqwest::Client::new(),
                h1: None,
                wire: Wire::OpenAi(Api::Chat),
                url: reqwest::Url::parse("http://fake.invalid/v1/chat/completions").expect("url"),
                authorization: None,
                request_timeout: Duration::from_secs(30),
                stall_timeout: Duration::from_secs(10),
            })
        })
        .clone()
}

fn config(plan: Vec<LevelPlan>) -> DriverConfig {
    DriverConfig {
        plan,
        warmup: 0,
        target: target(),
        body: BodySpec {
            wire: Wire::OpenAi(Api::Chat),
            model: "m".into(),
            ignore_eos: true,
            extra_body: None,
        },
        workload: Workload::new(1, 16, 20),
        seed: 7,
        burstiness: 1.0,
        replay: None,
        search: None,
        turns: 1,
        watch_server: false,
        marks: None,
        first_series: 0,
        duration: None,
        start_at: None,
        level_gap: Duration::ZERO,
        between_levels: None,
        edges: None,
        probes: None,
        fit: None,
    }
}

fn rate(concurrency: u32, num_prompts: u32, rate: f64) -> LevelPlan {
    LevelPlan {
        concurrency,
        num_prompts,
        rate: Some(rate),
    }
}

struct Harness {
    handle: DriverHandle,
    run_start: Instant,
    server: Arc<FakeServer>,
    events: Vec<(Duration, DriverEvent)>,
}

impl Harness {
    fn start(config: DriverConfig, server: FakeServer) -> Harness {
        let server = Arc::new(server);
        let run_start = Instant::now();
        let executor = Arc::new(FakeExecutor {
            server: server.clone(),
            run_start,
        });
        let handle = spawn_with(config, run_start.into_std(), executor);
        Harness {
            handle,
            run_start,
            server,
            events: Vec::new(),
        }
    }

    fn now(&self) -> Duration {
        Instant::now() - self.run_start
    }

    fn push(&mut self, event: DriverEvent) {
        let at = self.now();
        self.events.push((at, event));
    }

    /// The next event; None once the driver has ended.
    async fn recv(&mut self) -> Option<DriverEvent> {
        let deadline = self.run_start + LIMIT;
        match tokio::time::timeout_at(deadline, self.handle.events.recv()).await {
            Ok(Some(event)) => {
                self.push(event.clone());
                Some(event)
            }
            Ok(None) => None,
            Err(_) => panic!(
                "no event for {LIMIT:?} of virtual time; last events: {:?}",
                &self.events[self.events.len().saturating_sub(5)..]
            ),
        }
    }

    /// Read events up to the first (new) one that matches.
    async fn wait_for(&mut self, want: impl Fn(&DriverEvent) -> bool) -> DriverEvent {
        loop {
            match self.recv().await {
                Some(event) if want(&event) => return event,
                Some(_) => {}
                None => panic!(
                    "the driver ended first; last events: {:?}",
                    &self.events[self.events.len().saturating_sub(5)..]
                ),
            }
        }
    }

    /// Let the driver run until `at` (from the run's start), keeping its events.
    async fn run_until(&mut self, at: Duration) {
        let deadline = self.run_start + at;
        loop {
            tokio::select! {
                biased;
                _ = sleep_until(deadline) => return,
                event = self.handle.events.recv() => match event {
                    Some(event) => self.push(event),
                    None => {
                        sleep_until(deadline).await;
                        return;
                    }
                },
            }
        }
    }

    fn send(&self, command: Command) {
        self.handle
            .commands
            .send(command)
            .expect("driver listening");
    }

    /// `command` at `at`.
    async fn send_at(&mut self, at: Duration, command: Command) {
        self.run_until(at).await;
        self.send(command);
    }

    /// Hang up the command channel, as a face that went away.
    fn hang_up(&mut self) {
        self.handle.commands = mpsc::unbounded_channel().0;
    }

    /// Run to `Finished`; nothing may follow it.
    async fn finish(mut self) -> Run {
        self.wait_for(|e| matches!(e, DriverEvent::Finished { .. }))
            .await;
        assert!(self.recv().await.is_none(), "an event after Finished");
        assert_eq!(self.handle.in_flight.load(Ordering::Relaxed), 0);
        Run {
            events: self.events,
            server: self.server,
        }
    }
}

struct Run {
    events: Vec<(Duration, DriverEvent)>,
    server: Arc<FakeServer>,
}

impl Run {
    fn records(&self) -> Vec<&RequestRecord> {
        self.events
            .iter()
            .filter_map(|(_, e)| match e {
                DriverEvent::Record(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn level_records(&self, level: usize) -> Vec<&RequestRecord> {
        self.records()
            .into_iter()
            .filter(|r| r.level == level)
            .collect()
    }

    fn levels(&self) -> Vec<&LevelInfo> {
        self.events
            .iter()
            .filter_map(|(_, e)| match e {
                DriverEvent::LevelStarted(info) => Some(info),
                _ => None,
            })
            .collect()
    }

    /// When the first event that matches came, and its position.
    fn when(&self, want: impl Fn(&DriverEvent) -> bool) -> Option<(Duration, usize)> {
        self.events
            .iter()
            .enumerate()
            .find(|(_, (_, e))| want(e))
            .map(|(i, (at, _))| (*at, i))
    }

    fn count(&self, want: impl Fn(&DriverEvent) -> bool) -> usize {
        self.events.iter().filter(|(_, e)| want(e)).count()
    }

    fn last(&self) -> &DriverEvent {
        &self.events.last().expect("events").1
    }

    /// The error the run stopped on by itself (not by the user).
    fn fatal_error(&self) -> &str {
        match self.last() {
            DriverEvent::Finished {
                stopped_by_user: false,
                error: Some(error),
            } => error,
            last => panic!("{last:?}"),
        }
    }

    fn level_finished(&self, index: usize) -> Option<(Duration, bool)> {
        self.events.iter().find_map(|(at, e)| match e {
            DriverEvent::LevelFinished { index: i, partial } if *i == index => {
                Some((*at, *partial))
            }
            _ => None,
        })
    }

    /// Every record of a level came before that level's LevelFinished.
    fn assert_records_before_their_finish(&self) {
        for (i, (_, e)) in self.events.iter().enumerate() {
            if let DriverEvent::Record(r) = e {
                let finish = self.when(
                    |f| matches!(f, DriverEvent::LevelFinished { index, .. } if *index == r.level),
                );
                assert!(
                    finish.is_none_or(|(_, f)| f > i),
                    "record {} of level {} after its finish",
                    r.id,
                    r.level
                );
            }
        }
    }
}

fn finished(stopped_by_user: bool) -> DriverEvent {
    DriverEvent::Finished {
        stopped_by_user,
        error: None,
    }
}
