//! Probe requests (`--probe-rate`): short requests at a steady rate beside
//! the load, measuring what a new user arriving now would wait for.
//!
//! They go out on a connection pool of their own (a second [`Target`]), in
//! a task of their own, on an evenly spaced schedule: never behind the
//! load's concurrency cap, its in-flight limit or its idle connections, so
//! their TTFT is the server's queue and prefill and not a wait inside the
//! client. Each opens with a fresh random number (`Workload::prompt_of_words`)
//! so no prefix cache answers it, and its `X-Request-Id` is
//! `tokbench-probe-...`.
//!
//! A probe belongs to the level running when it was due; none is sent while
//! no level runs (the warmup, a level's edge). Its record goes out as
//! `DriverEvent::Probe`, which the tally folds apart from the level's own
//! figures. The driver owns the [`ProbeGate`]: it opens the gate on a
//! level, closes it at the level's end, and before the server's account is
//! read at an edge waits for the probes still out ([`ProbeGate::idle`]), so
//! every probe of a level is back before its `LevelFinished` and none is in
//! flight while the server's counters are read.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::driver::DriverEvent;
use super::request::{execute_counted, PreparedRequest, Target};
use super::BodySpec;
use crate::workload::{Calibration, Workload};

/// Highest `--probe-rate`: more than this is load, not a probe.
pub(crate) const MAX_PROBE_RATE: f64 = 1000.0;

/// Seeds the probes' prompts apart from the load's.
const PROBE_SEED: u64 = 0x7072_6f62_6573_0001;

/// What `--probe-rate`, `--probe-input-len` and `--probe-output-len` ask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbePlan {
    /// Probes per second, evenly spaced.
    pub rate: f64,
    pub input_len: u32,
    pub output_len: u32,
}

impl ProbePlan {
    /// The gap between two probes.
    pub(crate) fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.rate)
    }
}

/// The probes of a run: the plan, and the pool they go out on.
#[derive(Clone, Debug)]
pub(crate) struct ProbeConfig {
    pub plan: ProbePlan,
    /// A target of the probes' own: its own reqwest client and lean pool.
    pub target: Arc<Target>,
}

/// The driver's hold on the probe sender.
pub(crate) struct ProbeGate {
    /// The level probes belong to now; None: send none.
    level: watch::Sender<Option<usize>>,
    /// Probes in flight.
    in_flight: Arc<watch::Sender<u32>>,
}

impl ProbeGate {
    /// Probes due from now on belong to `level` (None: none is sent).
    pub(crate) fn set_level(&self, level: Option<usize>) {
        self.level.send_if_modified(|now| {
            let changed = *now != level;
            *now = level;
            changed
        });
    }

    /// Resolves once no probe is in flight (each one's record is out by then).
    pub(crate) fn idle(&self) -> BoxFuture<'static, ()> {
        let mut in_flight = self.in_flight.subscribe();
        Box::pin(async move {
            // Err: the sender is gone, and with it every probe.
            let _ = in_flight.wait_for(|n| *n == 0).await;
        })
    }
}

/// Start the probe sender. It sends while the gate names a level, stops
/// on `cancel` (a Stop: probes in flight come back cancelled) and ends when
/// the gate is dropped (the driver is done).
pub(crate) fn spawn(
    config: ProbeConfig,
    body: BodySpec,
    calibration: Calibration,
    seed: u64,
    run_start: Instant,
    cancel: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<DriverEvent>,
) -> ProbeGate {
    let (level_tx, level_rx) = watch::channel(None);
    let (in_flight_tx, _) = watch::channel(0u32);
    let in_flight = Arc::new(in_flight_tx);
    let mut workload = Workload::new(
        seed ^ PROBE_SEED,
        config.plan.input_len,
        config.plan.output_len,
    );
    workload.calibration = calibration;
    let sender = Sender {
        config,
        body,
        workload,
        run_start,
        cancel,
        events,
        in_flight: in_flight.clone(),
        next_id: 0,
    };
    tokio::spawn(sender.run(level_rx));
    ProbeGate {
        level: level_tx,
        in_flight,
    }
}

struct Sender {
    config: ProbeConfig,
    body: BodySpec,
    workload: Workload,
    run_start: Instant,
    cancel: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<DriverEvent>,
    in_flight: Arc<watch::Sender<u32>>,
    next_id: u64,
}

impl Sender {
    async fn run(mut self, mut level: watch::Receiver<Option<usize>>) {
        let period = self.config.plan.period();
        loop {
            // Closed: wait for a level (or the driver's end).
            if level.wait_for(Option::is_some).await.is_err() {
                return;
            }
            // The schedule starts with the level: its first probe at once,
            // then one every period, on absolute times so that a late send
            // does not push the later ones back.
            let mut due = tokio::time::Instant::now();
            loop {
                if *self.cancel.borrow() {
                    return;
                }
                let Some(index) = *level.borrow_and_update() else {
                    break;
                };
                self.send(index, due.into_std());
                due += period;
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    changed = level.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        // Another level (or none) from now: the next
                        // probe is still due at its time, for the new one.
                        if level.borrow().is_some() {
                            tokio::time::sleep_until(due).await;
                        }
                    }
                }
            }
        }
    }

    /// Send one probe due at `due`, for level `index`, in a task of its own.
    fn send(&mut self, index: usize, due: Instant) {
        let words = self
            .workload
            .calibration
            .words_for(self.config.plan.input_len);
        let mut prompt = self.workload.prompt_of_words(words);
        prompt.input_tokens_target = self.config.plan.input_len;
        prompt.max_tokens = self.config.plan.output_len;
        let request = PreparedRequest {
            id: self.next_id,
            level: index,
            body: self.body.build(&prompt),
            input_tokens_target: prompt.input_tokens_target,
            max_tokens: prompt.max_tokens,
            // A schedule, as the open loop's: t0 is the time it was due, so
            // a late send shows in its TTFT and in its recorded lateness.
            scheduled: Some(due),
            turn: None,
            probe: true,
        };
        self.next_id += 1;
        let target = self.config.target.clone();
        let cancel = self.cancel.clone();
        let events = self.events.clone();
        let in_flight = self.in_flight.clone();
        let run_start = self.run_start;
        in_flight.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            // Not the load's streaming gauge: probes are not the load.
            let streaming = AtomicU32::new(0);
            let record =
                execute_counted(&target, request, run_start, cancel, Some(&streaming)).await;
            // The record first, then the count: whoever waits for the
            // probes to be idle finds every record already sent.
            let _ = events.send(DriverEvent::Probe(record));
            in_flight.send_modify(|n| *n = n.saturating_sub(1));
        });
    }
}
