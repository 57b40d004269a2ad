//! The driver's state machine against a scripted server, on tokio's paused
//! clock: no socket, no wall-clock time. Time only moves when every task
//! waits, and then straight to the next timer, so a request that "takes
//! 100 ms" takes exactly that, and every time asserted here is exact.
//!
//! A test that hangs is caught by `LIMIT`, a bound in *virtual* time.

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
    Replay, SearchPlan, SearchProgress,
};
use super::executor::{BoxFuture, Executor};
use super::replay::ReplayEntry;
use super::request::{PreparedRequest, Target};
use super::{BodySpec, Wire};
use crate::analysis::decide::CapacitySlo;
use crate::protocol::openai::Api;
use crate::record::{ErrorClass, FinishReason, Outcome, RequestRecord, TokenSource};
use crate::workload::{Calibration, Workload};

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

struct FakeServer {
    script: Script,
    /// Whether the root answers at a given time.
    answers: Answers,
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
            slots: None,
            sent: Mutex::new(Vec::new()),
            polls: Mutex::new(Vec::new()),
            in_flight: AtomicU32::new(0),
            max_in_flight: Mutex::new(HashMap::new()),
        }
    }

    fn answering(mut self, answers: impl Fn(Duration) -> bool + Send + Sync + 'static) -> Self {
        self.answers = Box::new(answers);
        self
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
        first_series: 0,
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

// ---------------------------------------------------------------------------
// Warmup.

#[tokio::test(start_paused = true)]
async fn warmup_calibrates_from_what_the_server_reports() {
    // The server counts 3 tokens a word plus a 10-token template.
    let server = FakeServer::new(|s| Reply::Ok {
        ttft: ms(10),
        total: ms(50),
        prompt_tokens: Some(3 * s.words as u32 + 10),
    });
    let mut cfg = config(vec![LevelPlan::closed(2, 2)]);
    cfg.warmup = 4;
    let run = Harness::start(cfg, server).finish().await;
    assert_eq!(
        run.events[0].1,
        DriverEvent::WarmupStarted {
            requests: 4,
            concurrency: 2
        }
    );
    let Some(DriverEvent::WarmupFinished {
        ok,
        failed,
        calibration,
        reported_prompt_tokens,
    }) = run
        .events
        .iter()
        .map(|(_, e)| e)
        .find(|e| matches!(e, DriverEvent::WarmupFinished { .. }))
    else {
        panic!("no WarmupFinished: {:?}", run.events);
    };
    assert_eq!((*ok, *failed), (4, 0));
    assert!(
        (calibration.tokens_per_word - 3.0).abs() < 1e-9,
        "{calibration:?}"
    );
    assert!(
        (calibration.overhead_tokens - 10.0).abs() < 1e-6,
        "{calibration:?}"
    );
    assert_eq!(reported_prompt_tokens.len(), 4);
    // Two prompt lengths (full and half), at the first level's concurrency.
    let warm: Vec<Sent> = run.server.sent().into_iter().take(4).collect();
    assert_ne!(warm[0].words, warm[1].words);
    assert_eq!(run.server.max_in_flight(usize::MAX), 2);
    // Warmup records are the driver's own: none goes out as a Record.
    assert_eq!(run.records().len(), 2);
    assert!(run.records().iter().all(|r| r.level == 0));
    // The level starts once warmup is over: 2 rounds of 50 ms.
    assert_eq!(run.levels()[0].started_at, ms(100));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn warmup_all_failed_ends_the_run_with_the_first_error() {
    let server = FakeServer::new(|_| fail(5, ErrorClass::Http(500)));
    let mut cfg = config(vec![LevelPlan::closed(2, 10)]);
    cfg.warmup = 3;
    let run = Harness::start(cfg, server).finish().await;
    let DriverEvent::Finished {
        stopped_by_user: false,
        error: Some(error),
    } = run.last()
    else {
        panic!("{:?}", run.last());
    };
    assert_eq!(
        error,
        "all 3 warmup requests failed; first error: http_500: scripted http_500"
    );
    assert!(run.levels().is_empty());
    assert!(run.records().is_empty());
}

#[tokio::test(start_paused = true)]
async fn warmup_partly_failed_goes_on() {
    let server = FakeServer::new(|s| {
        if s.id == 1 {
            fail(5, ErrorClass::Timeout)
        } else {
            ok(10, 50)
        }
    });
    let mut cfg = config(vec![LevelPlan::closed(1, 2)]);
    cfg.warmup = 3;
    let run = Harness::start(cfg, server).finish().await;
    assert!(
        run.count(|e| matches!(
            e,
            DriverEvent::WarmupFinished {
                ok: 2,
                failed: 1,
                ..
            }
        )) == 1
    );
    assert_eq!(run.level_records(0).len(), 2);
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn stop_during_warmup_ends_without_a_level() {
    let server = FakeServer::new(|_| ok(100, 1000));
    let mut cfg = config(vec![LevelPlan::closed(2, 10)]);
    cfg.warmup = 4;
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(300), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(*run.last(), finished(true));
    // The warmup requests in flight were cancelled at once.
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(300)));
    assert!(run.levels().is_empty());
}

#[tokio::test(start_paused = true)]
async fn steering_during_warmup_is_applied_after_it() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut cfg = config(vec![LevelPlan::closed(2, 10_000)]);
    cfg.warmup = 2;
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(50), Command::SetConcurrency(5)).await;
    h.run_until(ms(250)).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    let levels = run.levels();
    assert_eq!(levels.len(), 2, "{levels:?}");
    // The planned level starts after warmup and gives way to the key at once.
    assert_eq!(
        (levels[0].mode, levels[0].started_at),
        (Mode::Planned, ms(100))
    );
    assert_eq!(
        (levels[1].mode, levels[1].concurrency, levels[1].started_at),
        (Mode::Manual, 5, ms(100))
    );
    assert_eq!(run.server.max_in_flight(1), 5);
    assert!(run.level_records(0).is_empty());
}

// ---------------------------------------------------------------------------
// Planned levels.

#[tokio::test(start_paused = true)]
async fn planned_levels_run_in_order_with_their_counts() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(1, 3),
        LevelPlan::closed(2, 4),
        LevelPlan::closed(4, 8),
    ];
    let run = Harness::start(config(plan), server).finish().await;
    let levels = run.levels();
    let shape: Vec<_> = levels
        .iter()
        .map(|l| {
            (
                l.index,
                l.concurrency,
                l.mode,
                l.num_prompts,
                l.plan_index,
                l.started_at,
                l.series,
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 1, Mode::Planned, Some(3), Some(0), ms(0), 0),
            (1, 2, Mode::Planned, Some(4), Some(1), ms(300), 0),
            (2, 4, Mode::Planned, Some(8), Some(2), ms(500), 0),
        ]
    );
    for (level, n, c) in [(0, 3, 1), (1, 4, 2), (2, 8, 4)] {
        let records = run.level_records(level);
        assert_eq!(records.len(), n, "level {level}");
        assert!(records.iter().all(|r| r.is_ok() && !r.transition));
        assert_eq!(run.server.max_in_flight(level), c, "level {level}");
        assert_eq!(run.level_finished(level).map(|f| f.1), Some(false));
    }
    // Closed loop keeps the target full: 2 rounds of 100 ms for the last level.
    assert_eq!(run.level_finished(2).map(|f| f.0), Some(ms(700)));
    let ids: Vec<u64> = run.server.sent().iter().map(|s| s.id).collect();
    assert_eq!(ids, (0..15).collect::<Vec<u64>>());
    run.assert_records_before_their_finish();
    // Headless: no watch, so no PlanDone; the run ends by itself.
    assert_eq!(run.count(|e| *e == DriverEvent::PlanDone), 0);
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_request_belongs_to_the_level_it_was_sent_in() {
    // A slow request of level 0 outlives the level change by 'n'.
    let server = FakeServer::new(|s| if s.id == 0 { ok(10, 1000) } else { ok(10, 100) });
    let plan = vec![LevelPlan::closed(2, 100), LevelPlan::closed(3, 3)];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(250), Command::NextLevel).await;
    let run = h.finish().await;
    let slow = run.records().into_iter().find(|r| r.id == 0).cloned();
    assert_eq!(slow.map(|r| (r.level, r.end)), Some((0, ms(1000))));
    // Level 0 finishes only when its last request is back.
    assert_eq!(run.level_finished(0), Some((ms(1000), true)));
    // Level 1 ran beside it, the target counting what level 0 still has
    // out: one sent at 250 ms (two of level 0 out), one at 300 ms, one at 350 ms.
    assert_eq!(run.levels()[1].started_at, ms(250));
    assert_eq!(run.server.sent_at(1), vec![ms(250), ms(300), ms(350)]);
    assert_eq!(run.level_finished(1), Some((ms(450), false)));
    run.assert_records_before_their_finish();
}

// ---------------------------------------------------------------------------
// Manual levels and steering.

#[tokio::test(start_paused = true)]
async fn manual_takeover_then_resume_the_plan() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![
        LevelPlan::closed(2, 10_000),
        LevelPlan::closed(4, 10_000),
        LevelPlan::closed(8, 16),
    ];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(250), Command::SetConcurrency(5)).await;
    h.run_until(ms(260)).await;
    // Dispatch follows the new target at once: 2 of level 0 plus 3 new.
    assert_eq!(h.handle.in_flight.load(Ordering::Relaxed), 5);
    // Off the 50 ms grid requests end on: no tie between a command and a join.
    h.send_at(ms(1075), Command::NextLevel).await;
    let run = h.finish().await;
    let levels = run.levels();
    assert_eq!(
        (
            levels[1].index,
            levels[1].concurrency,
            levels[1].mode,
            levels[1].num_prompts
        ),
        (1, 5, Mode::Manual, None)
    );
    assert_eq!(levels[1].started_at, ms(250));
    assert!(
        run.count(|e| matches!(e, DriverEvent::TargetChanged { target: 5, at } if *at == ms(250)))
            == 1
    );
    // The planned level was cut short: partial, once its last two are back.
    assert_eq!(run.level_finished(0), Some((ms(300), true)));
    // 'n' ends the manual level complete and resumes the plan above 5: at 8.
    assert_eq!(
        (
            levels[2].concurrency,
            levels[2].mode,
            levels[2].plan_index,
            levels[2].started_at
        ),
        (8, Mode::Planned, Some(2), ms(1075))
    );
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(false));
    assert_eq!(run.level_records(2).len(), 16);
    assert_eq!(run.level_finished(2).map(|f| f.1), Some(false));
    run.assert_records_before_their_finish();
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn requests_across_a_change_are_transition() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 10_000)]), server);
    h.send_at(ms(250), Command::SetConcurrency(6)).await;
    h.send_at(ms(1020), Command::SetConcurrency(3)).await;
    h.send_at(ms(1500), Command::Stop).await;
    let run = h.finish().await;
    // Going from 2 to 6, the four sent to fill the level are transition;
    // what it sent once full is steady, and so are not the six still out
    // when it was left at 1020 ms.
    let level1 = run.level_records(1);
    assert!(level1.len() > 30, "{}", level1.len());
    for r in &level1 {
        let filling = r.start == ms(250);
        let left_in_flight = r.end > ms(1020);
        assert_eq!(r.transition, filling || left_in_flight, "{r:?}");
    }
    assert_eq!(level1.iter().filter(|r| r.start == ms(250)).count(), 4);
    assert_eq!(level1.iter().filter(|r| r.end > ms(1020)).count(), 6);
    // The planned level before it is not hand-set: nothing of it is transition.
    assert!(run.level_records(0).iter().all(|r| !r.transition));
    // Each manual level reached its target once: at once here, since the
    // first dispatch filled it (and going down, it is full already).
    let reached: Vec<(usize, Duration)> = run
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            DriverEvent::TargetReached { index, at } => Some((*index, *at)),
            _ => None,
        })
        .collect();
    assert_eq!(reached, vec![(1, ms(250)), (2, ms(1020))]);
}

#[tokio::test(start_paused = true)]
async fn target_reached_waits_for_the_level_to_fill() {
    // Paused, a new manual level cannot fill: its steady state starts on resume.
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 10_000)]), server);
    h.send_at(ms(150), Command::TogglePause).await;
    h.send_at(ms(200), Command::SetConcurrency(4)).await;
    h.send_at(ms(400), Command::TogglePause).await;
    h.send_at(ms(650), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::TargetReached { index: 1, .. }))
            .map(|w| w.0),
        Some(ms(400))
    );
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::TargetReached { .. })),
        1
    );
    let sent = run.server.sent_at(1);
    assert_eq!(sent.iter().filter(|at| **at == ms(400)).count(), 4);
    let level1 = run.level_records(1);
    assert!(level1
        .iter()
        .filter(|r| r.start == ms(400))
        .all(|r| r.transition));
    // Sent once full, and back before the level was left (the Stop, which
    // makes what is still out transition and cancelled): steady state.
    let steady: Vec<_> = level1.iter().filter(|r| r.start > ms(400)).collect();
    assert!(!steady.is_empty());
    assert!(steady
        .iter()
        .all(|r| r.transition == (r.outcome == Outcome::Cancelled)));
}

#[tokio::test(start_paused = true)]
async fn the_same_concurrency_again_changes_nothing() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 10_000)]), server);
    h.send_at(ms(150), Command::SetConcurrency(3)).await;
    h.send_at(ms(250), Command::SetConcurrency(3)).await;
    // 0 streams is not a level: it clamps to one.
    h.send_at(ms(350), Command::SetConcurrency(0)).await;
    h.send_at(ms(450), Command::Stop).await;
    let run = h.finish().await;
    let shape: Vec<(u32, Mode)> = run
        .levels()
        .iter()
        .map(|l| (l.concurrency, l.mode))
        .collect();
    assert_eq!(
        shape,
        vec![(2, Mode::Planned), (3, Mode::Manual), (1, Mode::Manual)]
    );
}

#[tokio::test(start_paused = true)]
async fn next_level_cuts_a_planned_level_short() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![LevelPlan::closed(2, 100), LevelPlan::closed(3, 3)];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(250), Command::NextLevel).await;
    let run = h.finish().await;
    assert_eq!(run.level_finished(0), Some((ms(300), true)));
    assert_eq!(run.level_records(0).len(), 6);
    assert_eq!(run.levels()[1].started_at, ms(250));
    assert_eq!(run.level_records(1).len(), 3);
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(false));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn next_level_from_manual_above_the_plan_ends_it() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![LevelPlan::closed(2, 100), LevelPlan::closed(4, 100)];
    let mut h = Harness::start(config(plan), server);
    h.send_at(ms(150), Command::SetConcurrency(10)).await;
    h.send_at(ms(375), Command::NextLevel).await;
    let run = h.finish().await;
    // Nothing in the plan above 10: no level starts after the manual one.
    assert_eq!(run.levels().len(), 2);
    assert_eq!(run.level_finished(1), Some((ms(450), false)));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn pause_holds_dispatch_and_stop_cancels_in_flight() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(3, 100)]), server);
    h.send_at(ms(150), Command::TogglePause).await;
    h.run_until(ms(900)).await;
    // Paused: the three out at 150 ms finished, nothing new went out.
    assert_eq!(h.handle.in_flight.load(Ordering::Relaxed), 0);
    h.send(Command::TogglePause);
    h.send_at(ms(1050), Command::Stop).await;
    let run = h.finish().await;
    let sent = run.server.sent_at(0);
    assert!(
        sent.iter().all(|at| *at <= ms(100) || *at >= ms(900)),
        "{sent:?}"
    );
    assert_eq!(sent.iter().filter(|at| **at == ms(900)).count(), 3);
    assert_eq!(run.count(|e| *e == DriverEvent::Paused(true)), 1);
    assert_eq!(run.count(|e| *e == DriverEvent::Paused(false)), 1);
    // Stop takes no time: the three out come back cancelled at once.
    let cancelled: Vec<Duration> = run
        .records()
        .iter()
        .filter(|r| r.outcome == Outcome::Cancelled)
        .map(|r| r.end)
        .collect();
    assert_eq!(cancelled, vec![ms(1050); 3]);
    assert_eq!(run.level_finished(0), Some((ms(1050), true)));
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(1050)));
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn hanging_up_while_paused_ends_the_run() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 100)]), server);
    h.send_at(ms(50), Command::TogglePause).await;
    h.run_until(ms(60)).await;
    h.hang_up();
    let run = h.finish().await;
    // Nobody can resume it: once the two out are back, the run ends.
    assert_eq!(run.events.last().map(|e| e.0), Some(ms(100)));
    assert_eq!(run.level_finished(0), Some((ms(100), true)));
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn hanging_up_lets_the_plan_run_out() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut h = Harness::start(config(vec![LevelPlan::closed(2, 4)]), server);
    h.run_until(ms(50)).await;
    h.hang_up();
    let run = h.finish().await;
    assert_eq!(run.level_finished(0), Some((ms(200), false)));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_load_task_still_lets_its_level_finish() {
    let server = FakeServer::new(|s| if s.id == 1 { Reply::Panic } else { ok(10, 100) });
    let run = Harness::start(config(vec![LevelPlan::closed(1, 3)]), server)
        .finish()
        .await;
    let ids: Vec<u64> = run.records().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![0, 2]);
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
    assert_eq!(*run.last(), finished(false));
}

// ---------------------------------------------------------------------------
// Open loop: rate and replay.

/// tokio's timers fire on whole milliseconds: a request due at 94.2 ms goes
/// out at 95 ms, with that 0.8 ms counted in its `send_lag`.
fn on_time(sent: Duration, due: Duration) -> bool {
    sent >= due && sent - due < ms(1)
}

/// The send times a rate level's arrivals give, from `from`.
fn schedule(seed: u64, index: u64, rate: f64, n: usize, from: Duration) -> Vec<Duration> {
    let mut arrivals = Arrivals::new(seed ^ index.wrapping_mul(0x9E37_79B9), rate, 1.0);
    let mut at = from;
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(at);
        at += Duration::from_secs_f64(arrivals.next_gap_s().min(1e6));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_rate_level_goes_out_on_its_arrival_schedule() {
    let server = FakeServer::new(|_| ok(10, 50));
    let run = Harness::start(config(vec![rate(100, 20, 10.0)]), server)
        .finish()
        .await;
    let info = run.levels()[0].clone();
    assert_eq!(
        (info.mode, info.rate, info.concurrency),
        (Mode::Rate, Some(10.0), 100)
    );
    let expected = schedule(7, 0, 10.0, 20, Duration::ZERO);
    let sent = run.server.sent();
    assert_eq!(sent.len(), 20);
    for (s, due) in sent.iter().zip(&expected) {
        assert_eq!(s.scheduled, Some(*due));
        assert!(on_time(s.at, *due), "{s:?} due {due:?}");
    }
    // Not one went out late, past the timer's millisecond.
    assert!(run.records().iter().all(|r| r.send_lag < Some(ms(1))));
    assert_eq!(*run.last(), finished(false));
}

#[tokio::test(start_paused = true)]
async fn a_full_cap_sends_late_and_counts_from_the_intended_time() {
    // 100 requests/s against 2 slots of 100 ms: each goes out when one frees.
    let server = FakeServer::new(|_| ok(10, 100));
    let run = Harness::start(config(vec![rate(2, 20, 100.0)]), server)
        .finish()
        .await;
    assert_eq!(run.server.max_in_flight(0), 2);
    let expected = schedule(7, 0, 100.0, 20, Duration::ZERO);
    let mut sent = run.server.sent();
    sent.sort_by_key(|s| s.id);
    // Each goes out when it is due or, when both are busy, the moment the
    // earlier of the two frees (100 ms after it went out).
    let mut free = [Duration::ZERO; 2];
    let mut sends = Vec::new();
    for (s, due) in sent.iter().zip(&expected) {
        assert_eq!(s.scheduled, Some(*due));
        let slot = if free[0] <= free[1] { 0 } else { 1 };
        if free[slot] > *due {
            assert_eq!(s.at, free[slot], "{s:?}");
        } else {
            assert!(on_time(s.at, *due), "{s:?}");
        }
        free[slot] = s.at + ms(100);
        sends.push(s.at);
    }
    for r in run.records() {
        let due = expected[r.id as usize];
        assert_eq!(r.start, due, "timings count from the intended send");
        assert_eq!(r.send_lag, Some(sends[r.id as usize] - due));
    }
    let last = run.records().into_iter().max_by_key(|r| r.id).cloned();
    // The backlog grows: the last went out more than half a second late.
    assert!(last.and_then(|r| r.send_lag) > Some(ms(500)));
}

#[tokio::test(start_paused = true)]
async fn pause_moves_the_open_loop_schedule_on() {
    let server = FakeServer::new(|_| ok(5, 10));
    let mut h = Harness::start(config(vec![rate(100, 40, 10.0)]), server);
    h.send_at(ms(1000), Command::TogglePause).await;
    h.send_at(ms(3000), Command::TogglePause).await;
    let run = h.finish().await;
    let expected = schedule(7, 0, 10.0, 40, Duration::ZERO);
    let sent = run.server.sent();
    let before = sent.iter().filter(|s| s.at < ms(1000)).count();
    assert!(before > 0 && before < 40, "{before}");
    for (s, due) in sent.iter().zip(&expected) {
        // The schedule waited with the user: no backlog of late sends.
        let due = if s.id as usize >= before {
            *due + ms(2000)
        } else {
            *due
        };
        assert_eq!(s.scheduled, Some(due), "{s:?}");
        assert!(on_time(s.at, due), "{s:?}");
    }
    assert!(sent.iter().all(|s| s.at < ms(1000) || s.at >= ms(3000)));
}

#[tokio::test(start_paused = true)]
async fn set_rate_starts_a_manual_rate_level() {
    let server = FakeServer::new(|_| ok(10, 150));
    let mut h = Harness::start(config(vec![rate(8, 10_000, 10.0)]), server);
    h.send_at(ms(1000), Command::SetRate(20.0)).await;
    h.send_at(ms(1100), Command::SetRate(20.0)).await;
    h.send_at(ms(1200), Command::SetRate(f64::NAN)).await;
    h.send_at(ms(2000), Command::Stop).await;
    let run = h.finish().await;
    let levels = run.levels();
    assert_eq!(levels.len(), 2, "the same rate, or no rate, starts nothing");
    assert_eq!(
        (
            levels[1].mode,
            levels[1].rate,
            levels[1].concurrency,
            levels[1].num_prompts
        ),
        (Mode::Manual, Some(20.0), 8, None)
    );
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(true));
    // Its own schedule, from when it started.
    let expected = schedule(7, 1, 20.0, 40, ms(1000));
    let sent = run.server.sent_at(1);
    assert!(sent.len() > 5);
    for (at, due) in sent.iter().zip(&expected) {
        assert!(on_time(*at, *due), "{at:?} due {due:?}");
    }
    // Open loop: steady once nothing of the level before is out.
    let last_of_0 = run.level_records(0).iter().map(|r| r.end).max();
    let reached = run
        .when(|e| matches!(e, DriverEvent::TargetReached { index: 1, .. }))
        .map(|w| w.0);
    assert_eq!(reached, last_of_0.filter(|end| *end > ms(1000)));
    for r in run.level_records(1) {
        if r.outcome == Outcome::Ok {
            assert_eq!(r.transition, Some(r.start) < reached, "{r:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_is_sent_on_its_timeline_at_its_speed() {
    let server = FakeServer::new(|_| ok(10, 100));
    let entry =
        |t: f64, input: Option<u32>, output: Option<u32>, prompt: Option<&str>| ReplayEntry {
            t,
            input_len: input,
            output_len: output,
            prompt: prompt.map(str::to_string),
        };
    let entries = vec![
        entry(0.0, Some(40), Some(5), None),
        entry(0.5, Some(80), Some(6), None),
        entry(1.0, None, None, Some("one two three")),
        entry(2.0, Some(10), Some(7), None),
    ];
    let mut cfg = config(vec![LevelPlan::closed(1, 99)]);
    cfg.replay = Some(Replay {
        entries: Arc::new(entries),
        speed: 2.0,
        max_in_flight: 4,
    });
    let run = Harness::start(cfg, server).finish().await;
    let levels = run.levels();
    assert_eq!(levels.len(), 1, "the replay replaces the plan");
    assert_eq!(
        (
            levels[0].mode,
            levels[0].concurrency,
            levels[0].num_prompts,
            levels[0].timeline
        ),
        (Mode::Replay, 4, Some(4), Some(ms(1000)))
    );
    let sent = run.server.sent();
    let at: Vec<Duration> = sent.iter().map(|s| s.at).collect();
    assert_eq!(at, vec![ms(0), ms(250), ms(500), ms(1000)]);
    let lengths: Vec<(u32, u32)> = sent
        .iter()
        .map(|s| (s.input_tokens_target, s.max_tokens))
        .collect();
    let tpw = Calibration::default().tokens_per_word;
    assert_eq!(
        lengths,
        vec![(40, 5), (80, 6), ((3.0 * tpw).round() as u32, 20), (10, 7)]
    );
    assert!(sent[2].body.contains("one two three"));
    assert_eq!(*run.last(), finished(false));
}

// ---------------------------------------------------------------------------
// Turns.

#[tokio::test(start_paused = true)]
async fn turns_carry_the_conversation_on_with_its_history() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut cfg = config(vec![LevelPlan::closed(1, 6)]);
    cfg.turns = 3;
    let run = Harness::start(cfg, server).finish().await;
    let sent = run.server.sent();
    let shape: Vec<(Option<u32>, usize)> = sent.iter().map(|s| (s.turn, s.messages)).collect();
    assert_eq!(
        shape,
        vec![
            (Some(1), 1),
            (Some(2), 3),
            (Some(3), 5),
            (Some(1), 1),
            (Some(2), 3),
            (Some(3), 5)
        ]
    );
    // Each turn's prompt is the history (20 output tokens an answer) plus
    // a new user message.
    let user = sent[0].input_tokens_target;
    assert_eq!(sent[1].input_tokens_target, 2 * user + 20);
    assert_eq!(sent[2].input_tokens_target, 3 * user + 40);
    let turns: Vec<Option<u32>> = run.records().iter().map(|r| r.turn).collect();
    assert_eq!(turns, shape.iter().map(|s| s.0).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_failed_turn_ends_its_conversation() {
    let server = FakeServer::new(|s| {
        if s.id == 1 {
            fail(5, ErrorClass::Http(500))
        } else {
            ok(10, 100)
        }
    });
    let mut cfg = config(vec![LevelPlan::closed(1, 4)]);
    cfg.turns = 3;
    let run = Harness::start(cfg, server).finish().await;
    let turns: Vec<Option<u32>> = run.server.sent().iter().map(|s| s.turn).collect();
    assert_eq!(turns, vec![Some(1), Some(2), Some(1), Some(2)]);
}

// ---------------------------------------------------------------------------
// The capacity search.

#[tokio::test(start_paused = true)]
async fn the_capacity_search_doubles_then_bisects() {
    // 8 slots: from 9 streams on, someone waits a whole request for a slot,
    // and p99 TTFT (10 ms with a free slot) breaks the 50 ms SLO.
    let server = FakeServer::new(|_| ok(10, 100)).with_slots(8);
    let mut cfg = config(vec![LevelPlan::closed(1, 1)]);
    cfg.search = Some(SearchPlan {
        max_concurrency: 64,
        slo: CapacitySlo {
            ttft_p99_ms: Some(50.0),
            min_stream_tok_s: None,
            tpot_p99_ms: None,
            max_error_rate: 0.01,
        },
        num_prompts: None,
        prompts_per_stream: 4,
    });
    let run = Harness::start(cfg, server).finish().await;
    let probes: Vec<u32> = run.levels().iter().map(|l| l.concurrency).collect();
    assert_eq!(probes, vec![1, 2, 4, 8, 16, 12, 10, 9]);
    for (i, level) in run.levels().iter().enumerate() {
        assert_eq!(level.mode, Mode::Search);
        assert_eq!(level.plan_index, Some(i));
        assert_eq!(level.num_prompts, Some(4 * level.concurrency));
    }
    let progress: Vec<SearchProgress> = run
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            DriverEvent::Search(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(progress.len(), 8);
    assert_eq!(
        progress[4],
        SearchProgress {
            passing: Some(8),
            failing: Some(16),
            next: Some(12)
        }
    );
    assert_eq!(
        progress[7],
        SearchProgress {
            passing: Some(8),
            failing: Some(9),
            next: None
        }
    );
    assert_eq!(*run.last(), finished(false));
}

// ---------------------------------------------------------------------------
// Failing servers, headless.

#[tokio::test(start_paused = true)]
async fn every_request_failing_stops_a_headless_run() {
    let server = FakeServer::new(|_| fail(5, ErrorClass::Http(503)));
    let plan = vec![LevelPlan::closed(2, 4), LevelPlan::closed(4, 4)];
    let run = Harness::start(config(plan), server).finish().await;
    let DriverEvent::Finished {
        stopped_by_user: false,
        error: Some(error),
    } = run.last()
    else {
        panic!("{:?}", run.last());
    };
    assert!(
        error.starts_with(
            "every request failed at concurrency 2 (4 of 4; first: http_503: scripted http_503)"
        ),
        "{error}"
    );
    assert_eq!(run.levels().len(), 1);
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
    // Headless: failures are not held, they count as they come.
    assert_eq!(run.records().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn one_dead_level_is_survivable_two_in_a_row_are_not() {
    let server = FakeServer::new(|s| {
        if [1, 3, 4].contains(&s.level) {
            fail(5, ErrorClass::Http(500))
        } else {
            ok(10, 100)
        }
    });
    let plan = (1..=6).map(|c| LevelPlan::closed(c, 2)).collect();
    let run = Harness::start(config(plan), server).finish().await;
    assert_eq!(run.levels().len(), 5);
    let DriverEvent::Finished {
        error: Some(error), ..
    } = run.last()
    else {
        panic!("{:?}", run.last());
    };
    assert!(
        error.starts_with("every request failed at concurrency 5"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------
// The server watch (the live view).

#[tokio::test(start_paused = true)]
async fn connection_failures_are_held_until_a_success_flushes_them() {
    let server = FakeServer::new(|s| {
        if s.id == 4 {
            fail(10, ErrorClass::ConnectionClosed)
        } else {
            ok(10, 100)
        }
    });
    let mut cfg = config(vec![LevelPlan::closed(4, 12)]);
    cfg.watch_server = true;
    let mut h = Harness::start(cfg, server);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    let (at, i) = run
        .when(|e| matches!(e, DriverEvent::Record(r) if r.id == 4))
        .expect("record 4");
    // Back at 110 ms, held until the next answer got through at 200 ms, and
    // then counted as it is: a failure of its level, not a restart.
    assert_eq!(at, ms(200));
    let DriverEvent::Record(failed) = &run.events[i].1 else {
        unreachable!()
    };
    assert_eq!(
        failed.outcome,
        Outcome::Failed(ErrorClass::ConnectionClosed)
    );
    assert!(!failed.transition);
    assert!(
        matches!(&run.events[i + 1].1, DriverEvent::Record(r) if r.is_ok() && r.end == ms(200))
    );
    // While it was held, nothing new went out.
    let sent = run.server.sent_at(0);
    assert!(
        sent.iter().all(|at| !(ms(110)..ms(200)).contains(at)),
        "{sent:?}"
    );
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::ServerGone { .. })),
        0
    );
    assert_eq!(run.level_finished(0).map(|f| f.1), Some(false));
}

#[tokio::test(start_paused = true)]
async fn a_gone_server_pauses_the_run_until_it_answers() {
    // Down from 1 s to 5 s: requests are refused at once, the root is silent.
    let down = |at: Duration| (ms(1000)..ms(5000)).contains(&at);
    let server = FakeServer::new(move |s| {
        if down(s.at) {
            fail(1, ErrorClass::ConnectRefused)
        } else {
            ok(10, 100)
        }
    })
    .answering(move |at| !down(at));
    let mut cfg = config(vec![LevelPlan::closed(2, 10_000), LevelPlan::closed(4, 10)]);
    cfg.watch_server = true;
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(6000), Command::NewSeries).await;
    h.send_at(ms(6250), Command::Stop).await;
    let run = h.finish().await;
    // Two seconds of nothing but failures, with nothing in flight: gone,
    // since the first failure.
    let gone = run.when(|e| matches!(e, DriverEvent::ServerGone { since } if *since == ms(1001)));
    assert_eq!(gone.map(|g| g.0), Some(ms(3001)));
    let restart: Vec<&RequestRecord> = run
        .records()
        .into_iter()
        .filter(|r| r.outcome == Outcome::Failed(ErrorClass::ServerRestart))
        .collect();
    assert_eq!(restart.len(), 2);
    assert!(restart.iter().all(|r| r.transition && r.level == 0));
    assert!(run
        .records()
        .iter()
        .all(|r| r.outcome != Outcome::Failed(ErrorClass::ConnectRefused)));
    // The planned level was cut short by it.
    assert_eq!(run.level_finished(0), Some((ms(3001), true)));
    // Polled every 500 ms until it answered.
    assert_eq!(
        run.server.polls(),
        vec![ms(3001), ms(3501), ms(4001), ms(4501), ms(5001)]
    );
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::ServerBack { at } if *at == ms(5001)))
            .map(|w| w.0),
        Some(ms(5001))
    );
    // Nothing is sent until the new series, which starts the plan again.
    let sent: Vec<Duration> = run.server.sent().iter().map(|s| s.at).collect();
    assert!(
        sent.iter().all(|at| *at <= ms(1000) || *at >= ms(6000)),
        "{sent:?}"
    );
    assert_eq!(
        run.when(|e| *e
            == DriverEvent::SeriesStarted {
                series: 1,
                at: ms(6000)
            })
        .map(|w| w.0),
        Some(ms(6000))
    );
    let levels = run.levels();
    assert_eq!(levels.len(), 2);
    assert_eq!(
        (
            levels[1].plan_index,
            levels[1].series,
            levels[1].concurrency,
            levels[1].started_at
        ),
        (Some(0), 1, 2, ms(6000))
    );
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn an_outage_with_a_request_still_streaming_is_no_outage() {
    // One long request keeps streaming while every other is refused.
    let server = FakeServer::new(|s| {
        if s.id == 0 {
            ok(10, 10_000)
        } else {
            fail(1, ErrorClass::ConnectRefused)
        }
    })
    .answering(|_| false);
    let mut cfg = config(vec![LevelPlan::closed(2, 10_000)]);
    cfg.watch_server = true;
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(5000), Command::Stop).await;
    let run = h.finish().await;
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::ServerGone { .. })),
        0
    );
    assert!(run.server.polls().is_empty());
    // Held for the grace, then counted as they are.
    let refused = run.records().into_iter().find(|r| r.id == 1).cloned();
    let at = run.when(|e| matches!(e, DriverEvent::Record(r) if r.id == 1));
    assert_eq!(at.map(|a| a.0), Some(ms(2001)));
    assert_eq!(
        refused.map(|r| (r.outcome, r.transition)),
        Some((Outcome::Failed(ErrorClass::ConnectRefused), false))
    );
    assert!(run
        .records()
        .iter()
        .all(|r| r.outcome != Outcome::Failed(ErrorClass::ServerRestart)));
}

#[tokio::test(start_paused = true)]
async fn after_the_plan_the_driver_watches_the_idle_server() {
    let down = |at: Duration| (ms(1000)..ms(3000)).contains(&at);
    let server = FakeServer::new(|_| ok(10, 100)).answering(move |at| !down(at));
    let mut cfg = config(vec![LevelPlan::closed(1, 2)]);
    cfg.watch_server = true;
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(4000), Command::NewSeries).await;
    h.send_at(ms(4500), Command::Stop).await;
    let run = h.finish().await;
    let plan_done: Vec<Duration> = run
        .events
        .iter()
        .filter(|(_, e)| *e == DriverEvent::PlanDone)
        .map(|(at, _)| *at)
        .collect();
    // The plan ran out and the run went on: once, and again in the new series.
    assert_eq!(plan_done, vec![ms(200), ms(4200)]);
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::ServerGone { since } if *since == ms(1200)))
            .map(|g| g.0),
        Some(ms(1200))
    );
    assert_eq!(
        run.when(|e| matches!(e, DriverEvent::ServerBack { .. }))
            .map(|g| g.0),
        Some(ms(3200))
    );
    assert_eq!(
        &run.server.polls()[..6],
        &[ms(700), ms(1200), ms(1700), ms(2200), ms(2700), ms(3200)]
    );
    let levels = run.levels();
    assert_eq!((levels[1].series, levels[1].plan_index), (1, Some(0)));
    assert_eq!(run.count(|e| matches!(e, DriverEvent::Finished { .. })), 1);
    assert_eq!(*run.last(), finished(true));
}

#[tokio::test(start_paused = true)]
async fn a_new_series_cuts_the_level_short_and_restarts_the_plan() {
    let server = FakeServer::new(|_| ok(10, 100));
    let plan = vec![LevelPlan::closed(1, 100), LevelPlan::closed(2, 100)];
    let mut cfg = config(plan);
    cfg.watch_server = true;
    let mut h = Harness::start(cfg, server);
    h.send_at(ms(250), Command::NextLevel).await;
    h.send_at(ms(450), Command::NewSeries).await;
    h.send_at(ms(650), Command::SetConcurrency(3)).await;
    h.send_at(ms(850), Command::NewSeries).await;
    h.send_at(ms(1000), Command::Stop).await;
    let run = h.finish().await;
    let shape: Vec<(usize, Mode, Option<usize>, Duration)> = run
        .levels()
        .iter()
        .map(|l| (l.series, l.mode, l.plan_index, l.started_at))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, Mode::Planned, Some(0), ms(0)),
            (0, Mode::Planned, Some(1), ms(250)),
            (1, Mode::Planned, Some(0), ms(450)),
            (1, Mode::Manual, None, ms(650)),
            (2, Mode::Planned, Some(0), ms(850)),
        ]
    );
    // A planned level cut by it is partial; a manual one is complete.
    assert_eq!(run.level_finished(1).map(|f| f.1), Some(true));
    assert_eq!(run.level_finished(3).map(|f| f.1), Some(false));
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::SeriesStarted { .. })),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_goes_on_in_its_series() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut cfg = config(vec![LevelPlan::closed(1, 1), LevelPlan::closed(2, 2)]);
    cfg.watch_server = true;
    cfg.first_series = 2;
    let mut h = Harness::start(cfg, server);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::NewSeries);
    h.wait_for(|e| *e == DriverEvent::PlanDone).await;
    h.send(Command::Stop);
    let run = h.finish().await;
    let series: Vec<usize> = run.levels().iter().map(|l| l.series).collect();
    assert_eq!(series, vec![2, 2, 3, 3]);
    assert_eq!(
        run.count(|e| matches!(e, DriverEvent::SeriesStarted { series: 3, .. })),
        1
    );
}
