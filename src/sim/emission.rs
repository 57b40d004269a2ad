//! The emission log: when the simulator handed each frame of a streamed answer to its
//! connection (`tokbench sim --emission-log FILE`, [`super::SimConfig::emission_log`]).
//!
//! A client's timing error is its arrival time of a chunk minus the time the server
//! wrote it. The simulator takes that time in the response body's `poll_frame`, the
//! moment hyper takes the frame to write it to the socket, from `CLOCK_MONOTONIC`
//! (the clock behind `std::time::Instant` on Linux, so an in-process client can compare
//! its own instants). Frame `k` of an OpenAI stream carries output chunk `k` (the chat
//! API's role chunk rides with the first token; usage and `[DONE]` with the last).
//!
//! A request is keyed by its `X-Request-Id` header (tokbench sends one), else by the
//! simulator's own response id. Times are kept per stream and handed over once, when the
//! stream ends: one lock per request, none per chunk. With a file, each finished stream
//! is one JSONL line, `{"request":"..","arrived_ns":..,"t_ns":[..]}`, written and
//! flushed at once.
//!
//! `arrived_ns` is when the request reached its handler (head parsed, body not yet
//! read), so `t_ns[0] - arrived_ns` is the server's own TTFT: a client's TTFT minus it
//! is the client's error plus the loopback hop.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One streamed answer's frame times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEmissions {
    /// `X-Request-Id`, or the simulator's response id.
    pub request: String,
    /// `CLOCK_MONOTONIC` nanoseconds at which the request reached its handler.
    pub arrived_ns: u64,
    /// `CLOCK_MONOTONIC` nanoseconds at which the engine admitted it into its
    /// batch (a slot); None where the personality does not say, or never.
    pub admitted_ns: Option<u64>,
    /// `CLOCK_MONOTONIC` nanoseconds at which each frame was handed to the connection.
    pub t_ns: Vec<u64>,
}

/// Where finished streams' emission times go: kept in memory ([`EmissionLog::take`]) or
/// appended to a JSONL file. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct EmissionLog {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    kept: Mutex<Vec<StreamEmissions>>,
    file: Option<Mutex<BufWriter<File>>>,
}

impl std::fmt::Debug for EmissionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmissionLog")
            .field("to_file", &self.shared.file.is_some())
            .finish()
    }
}

impl EmissionLog {
    /// A log kept in memory; read it with [`EmissionLog::take`].
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A log written to `path` (created or truncated), one JSONL line per stream.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = File::create(path)?;
        Ok(EmissionLog {
            shared: Arc::new(Shared {
                kept: Mutex::new(Vec::new()),
                file: Some(Mutex::new(BufWriter::new(file))),
            }),
        })
    }

    /// The streams finished since the last call (in-memory logs; a file log keeps
    /// nothing).
    pub fn take(&self) -> Vec<StreamEmissions> {
        std::mem::take(&mut *self.shared.kept.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A stream ended: keep or write its times.
    pub(crate) fn record(&self, stream: StreamEmissions) {
        match &self.shared.file {
            Some(file) => {
                let line = serde_json::json!({
                    "request": stream.request,
                    "arrived_ns": stream.arrived_ns,
                    "admitted_ns": stream.admitted_ns,
                    "t_ns": stream.t_ns,
                });
                let mut w = file.lock().unwrap_or_else(|e| e.into_inner());
                // The simulator keeps serving when its log cannot be written.
                let _ = writeln!(w, "{line}").and_then(|()| w.flush());
            }
            None => self
                .shared
                .kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(stream),
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One stream's recorder, owned by its response body: its frame times go to
/// the emission log (with `--emission-log`) and into the server's own
/// account of the request (vLLM's histograms), when the stream ends.
pub(crate) struct StreamRecorder {
    log: Option<EmissionLog>,
    account: Option<Accounted>,
    /// Set by the stream's sink when the engine admits the request
    /// (`CLOCK_MONOTONIC` ns; 0 until then).
    admission: Option<Arc<AtomicU64>>,
    times: StreamEmissions,
    /// The body ended as planned; false when it is dropped before (the client went away).
    finished: bool,
}

/// Where the server's own account of a stream goes.
pub(crate) struct Accounted {
    pub metrics: Arc<super::metrics::Metrics>,
    /// The token budget: an answer that ends before it stopped at an EOS.
    pub max_tokens: u64,
}

/// A cell a sink sets when the engine admits its request ([`StreamRecorder::admission`]).
pub(crate) fn admission_cell() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

/// Note now in a sink's admission cell.
pub(crate) fn mark_admitted(cell: Option<&Arc<AtomicU64>>) {
    if let Some(cell) = cell {
        cell.store(monotonic_ns(), Ordering::Relaxed);
    }
}

impl StreamRecorder {
    pub(crate) fn new(
        log: Option<EmissionLog>,
        request: String,
        arrived_ns: u64,
        capacity: usize,
    ) -> Self {
        StreamRecorder {
            log,
            account: None,
            admission: None,
            times: StreamEmissions {
                request,
                arrived_ns,
                admitted_ns: None,
                t_ns: Vec::with_capacity(capacity.min(1 << 16)),
            },
            finished: false,
        }
    }

    /// Also keep the server's own account of the stream.
    pub(crate) fn accounting(mut self, account: Option<Accounted>) -> Self {
        self.account = account;
        self
    }

    /// The engine's admission time is read from `cell` when the stream ends.
    pub(crate) fn admission(mut self, cell: Option<Arc<AtomicU64>>) -> Self {
        self.admission = cell;
        self
    }

    /// A frame is being handed to the connection now.
    pub(crate) fn frame(&mut self) {
        self.times.t_ns.push(monotonic_ns());
    }

    /// The body has ended as planned.
    pub(crate) fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for StreamRecorder {
    fn drop(&mut self) {
        self.times.admitted_ns = self
            .admission
            .as_ref()
            .map(|cell| cell.load(Ordering::Relaxed))
            .filter(|ns| *ns > 0);
        if let Some(account) = &self.account {
            account
                .metrics
                .requests_account
                .observe(&super::metrics::RequestTimes {
                    arrived_ns: self.times.arrived_ns,
                    admitted_ns: self.times.admitted_ns,
                    frames_ns: &self.times.t_ns,
                    finished: self.finished,
                    stopped: (self.times.t_ns.len() as u64) < account.max_tokens,
                });
        }
        let Some(log) = &self.log else {
            return;
        };
        let times = std::mem::replace(
            &mut self.times,
            StreamEmissions {
                request: String::new(),
                arrived_ns: 0,
                admitted_ns: None,
                t_ns: Vec::new(),
            },
        );
        log.record(times);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_handed_over_when_they_end() {
        let log = EmissionLog::in_memory();
        let cell = admission_cell();
        let mut rec = StreamRecorder::new(Some(log.clone()), "tokbench-1-7".into(), 5, 4)
            .admission(Some(cell.clone()));
        mark_admitted(Some(&cell));
        rec.frame();
        rec.frame();
        assert!(log.take().is_empty(), "nothing until the stream ends");
        drop(rec);
        let streams = log.take();
        assert_eq!(streams.len(), 1);
        assert_eq!(streams[0].request, "tokbench-1-7");
        assert_eq!(streams[0].arrived_ns, 5);
        assert_eq!(streams[0].t_ns.len(), 2);
        assert!(streams[0].t_ns[0] <= streams[0].t_ns[1]);
        assert!(streams[0]
            .admitted_ns
            .is_some_and(|a| a <= streams[0].t_ns[0]));
        assert!(log.take().is_empty());
    }

    #[test]
    fn a_file_log_is_one_json_line_per_stream() {
        let path =
            std::env::temp_dir().join(format!("tokbench-emission-{}.jsonl", std::process::id()));
        let log = EmissionLog::create(&path).unwrap();
        for id in ["a", "b"] {
            let mut rec = StreamRecorder::new(Some(log.clone()), id.into(), 42, 1);
            rec.frame();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["request"], "b");
        assert_eq!(lines[1]["arrived_ns"], 42);
        assert!(lines[1]["t_ns"][0].as_u64().unwrap() > 0);
        let _ = std::fs::remove_file(&path);
    }
}
