//! The one record every finished request leaves behind.
//!
//! Load tasks fill these in where the bytes arrive; everything downstream
//! (stats, reports, the live view) reads them and never measures on its own.

use std::fmt;
use std::time::Duration;

/// Where a request's output token count came from (docs/architecture.md section 7), most
/// trusted first. Saved with every level so a reader knows how far to trust it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenSource {
    /// `usage.completion_tokens` sent by the server.
    Usage,
    /// Ollama's `eval_count`.
    OllamaEvalCount,
    /// llama.cpp's `timings.predicted_n`.
    LlamacppTimings,
    /// TGI's `details.generated_tokens` on its native stream's last event.
    TgiDetails,
    /// No count from the server: one token per output-carrying chunk.
    ChunkCount,
}

impl TokenSource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::OllamaEvalCount => "ollama_eval_count",
            TokenSource::LlamacppTimings => "llamacpp_timings",
            TokenSource::TgiDetails => "tgi_details",
            TokenSource::ChunkCount => "chunk_count",
        }
    }
}

/// Which clock a request's arrival times (TTFB, TTFT, ITL, E2EL) come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RxClock {
    /// The kernel's receive time of the segment each read consumed
    /// (`SO_TIMESTAMPNS`, the lean HTTP/1.1 reader on Linux): the client's
    /// own lateness in reading is not in the figures.
    Kernel,
    /// The user-space time each read returned: reqwest's paths (TLS,
    /// HTTP/2), other platforms, `--rx-clock user`.
    #[default]
    User,
}

impl RxClock {
    pub fn as_str(self) -> &'static str {
        match self {
            RxClock::Kernel => "kernel",
            RxClock::User => "user",
        }
    }
}

/// Which clock a request's t0 (the start of TTFB, TTFT and E2EL) comes
/// from, on closed-loop sends (open loop keeps the schedule's time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TxClock {
    /// The kernel's transmit time of the request's last byte
    /// (`SO_TIMESTAMPING`, `--tx-clock kernel`, the lean reader on Linux).
    Kernel,
    /// Taken in user space just before the request is written (and before
    /// a new connection is opened): the default.
    #[default]
    User,
}

impl TxClock {
    pub fn as_str(self) -> &'static str {
        match self {
            TxClock::Kernel => "kernel",
            TxClock::User => "user",
        }
    }
}

/// How a level came to be (saved as the level's `mode`). The driver sets
/// it; the decision math reads it (planned and search levels place the
/// knee and the capacity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Planned,
    Manual,
    /// A probe of `--find-capacity`.
    Search,
    /// Open loop at a request rate.
    Rate,
    /// Open loop on a recorded timeline (`--replay`).
    Replay,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Planned => "planned",
            Mode::Manual => "manual",
            Mode::Search => "search",
            Mode::Rate => "rate",
            Mode::Replay => "replay",
        }
    }

    /// From a level file's `mode`; None for anything else.
    pub(crate) fn parse(mode: &str) -> Option<Mode> {
        [
            Mode::Planned,
            Mode::Manual,
            Mode::Search,
            Mode::Rate,
            Mode::Replay,
        ]
        .into_iter()
        .find(|m| m.as_str() == mode)
    }

    /// Requests go out on a schedule, not when a slot frees.
    pub(crate) fn is_open_loop(self) -> bool {
        matches!(self, Mode::Rate | Mode::Replay)
    }

    /// Planned and search levels place the knee and the capacity.
    pub(crate) fn is_sweep(self) -> bool {
        matches!(self, Mode::Planned | Mode::Search)
    }
}

/// Why a request did not count as a success. The `key()` is what result files
/// use in their `errors` object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// Any HTTP status other than 2xx; 503 (queue full) and 429 (overloaded)
    /// are kept as their own keys by `key()`.
    Http(u16),
    /// No TCP connection: nothing listens there.
    ConnectRefused,
    /// Could not connect for another reason (DNS, unreachable, TLS).
    Connect,
    /// This process had no file descriptor left for the connection
    /// (`EMFILE`, `ENFILE`): the client's open-file limit, not the server.
    ClientFdLimit,
    /// No local port left to connect from (`EADDRNOTAVAIL`): the client's
    /// ephemeral port range, spent by connection churn.
    ClientPortsExhausted,
    /// The connection closed or was reset before the stream ended.
    ConnectionClosed,
    /// The whole request took longer than `--request-timeout`.
    Timeout,
    /// No bytes for longer than `--stall-timeout` in the middle of a stream.
    Stalled,
    /// Bytes that are not the protocol: bad JSON, bad UTF-8, oversized event.
    MalformedStream,
    /// The server sent an error object inside a 200 stream.
    StreamError,
    /// The stream ended with no finish reason, short of the requested length.
    Truncated,
    /// Lost while the server was gone (restarted): charged to no level.
    ServerRestart,
}

impl ErrorClass {
    pub(crate) fn key(self) -> String {
        match self {
            ErrorClass::Http(code) => format!("http_{code}"),
            ErrorClass::ConnectRefused => "connect_refused".into(),
            ErrorClass::Connect => "connect_error".into(),
            ErrorClass::ClientFdLimit => "client_fd_limit".into(),
            ErrorClass::ClientPortsExhausted => "client_ports_exhausted".into(),
            ErrorClass::ConnectionClosed => "connection_closed".into(),
            ErrorClass::Timeout => "timeout".into(),
            ErrorClass::Stalled => "stalled".into(),
            ErrorClass::MalformedStream => "malformed_stream".into(),
            ErrorClass::StreamError => "stream_error".into(),
            ErrorClass::Truncated => "truncated".into(),
            ErrorClass::ServerRestart => "restart".into(),
        }
    }
}

/// The client's own limits in an I/O error: out of file descriptors
/// (`EMFILE`, `ENFILE`) or of local ports (`EADDRNOTAVAIL`).
pub fn client_limit_class(error: &std::io::Error) -> Option<ErrorClass> {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    const EADDRNOTAVAIL: i32 = 99;
    match error.raw_os_error() {
        Some(EMFILE | ENFILE) => Some(ErrorClass::ClientFdLimit),
        Some(EADDRNOTAVAIL) => Some(ErrorClass::ClientPortsExhausted),
        _ if error.kind() == std::io::ErrorKind::AddrNotAvailable => {
            Some(ErrorClass::ClientPortsExhausted)
        }
        _ => None,
    }
}

/// The line for a request that hit the client's own limit: what ran out,
/// and where to raise it.
pub fn client_limit_message(class: ErrorClass, detail: &str) -> String {
    match class {
        ErrorClass::ClientFdLimit => format!(
            "this client has no file descriptor left for a connection ({detail}): raise the open-file limit (ulimit -n) or lower --concurrency"
        ),
        _ => format!(
            "this client has no local port left to connect from ({detail}): widen net.ipv4.ip_local_port_range or keep connections alive"
        ),
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed(ErrorClass),
    /// Cut off by the user (quit, stop). Neither a success nor a failure: it
    /// is left out of every statistic and only counted.
    Cancelled,
}

/// Why the server said the answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// Hit `max_tokens`.
    Length,
    /// End of sequence or a stop string.
    Stop,
    /// Anything else the server said (`tool_calls`, `abort`, ...).
    Other,
}

impl FinishReason {
    pub(crate) fn parse(s: &str) -> FinishReason {
        match s {
            "length" => FinishReason::Length,
            "stop" | "eos" | "eos_token" | "stop_sequence" => FinishReason::Stop,
            _ => FinishReason::Other,
        }
    }
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Stop => "stop",
            FinishReason::Other => "other",
        }
    }
}

/// One output-carrying chunk as it arrived: its time since the request's t0 and,
/// when the server reported cumulative usage on every chunk, how many tokens it
/// carried.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ChunkArrival {
    pub at: Duration,
    pub tokens: Option<u32>,
}

/// Server-side timings of one request, when the server reports them.
/// Milliseconds.
///
/// llama.cpp `timings`: `prompt_n`, `prompt_ms`, `predicted_n`,
/// `predicted_ms`. Ollama's final object maps onto the same fields
/// (`prompt_eval_count`, `prompt_eval_duration`, `eval_count`,
/// `eval_duration`, nanoseconds turned into milliseconds) and also fills
/// `load_ms` (`load_duration`) and `total_ms` (`total_duration`), which
/// llama.cpp leaves at 0: `total_ms > 0` means the figures are Ollama's.
///
/// The two Ollama fields are plain `f32` (0 = not reported) rather than
/// `Option<f64>`: they keep `RequestRecord`, which travels by value in the
/// driver's events, within clippy's enum size budget.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerTimings {
    pub prompt_n: Option<u32>,
    pub prompt_ms: Option<f64>,
    pub predicted_n: Option<u32>,
    pub predicted_ms: Option<f64>,
    /// Ollama `load_duration`: loading the model for this request. Well
    /// above zero means the model was cold. 0 when warm or not reported.
    pub load_ms: f32,
    /// Ollama `total_duration`: the whole request as the server saw it,
    /// waiting for a slot included. 0 when not reported.
    pub total_ms: f32,
}

impl ServerTimings {
    /// Server-side decode speed: `predicted_n / predicted_ms`, tok/s (Ollama
    /// `eval_count / eval_duration * 1e9`). None without both, or with no
    /// decode time.
    pub fn decode_tok_s(&self) -> Option<f64> {
        rate_per_s(self.predicted_n?, self.predicted_ms?)
    }

    /// Server-side prefill speed: `prompt_n / prompt_ms`, tok/s.
    pub(crate) fn prefill_tok_s(&self) -> Option<f64> {
        rate_per_s(self.prompt_n?, self.prompt_ms?)
    }

    /// How long before the first token the server spent on this request:
    /// its prefill (`prompt_ms`) and its model load (Ollama `load_duration`).
    /// None without a prefill time.
    pub(crate) fn in_prefill_ms(&self) -> Option<f64> {
        let prompt = self.prompt_ms.filter(|v| v.is_finite() && *v >= 0.0)?;
        let load = f64::from(self.load_ms);
        Some(
            prompt
                + if load.is_finite() && load > 0.0 {
                    load
                } else {
                    0.0
                },
        )
    }

    /// Ollama's slot-wait estimate: `total - load - prompt - decode`, ms,
    /// never below zero (Ollama exposes no queue metric; this is the time
    /// the request spent neither loading nor computing). None unless the
    /// server sent a total (llama.cpp does not). Missing parts count as zero.
    pub(crate) fn slot_wait_ms(&self) -> Option<f64> {
        let total = f64::from(self.total_ms);
        if !(total.is_finite() && total > 0.0) {
            return None;
        }
        let part = |v: Option<f64>| v.filter(|v| v.is_finite()).unwrap_or(0.0);
        let load = f64::from(self.load_ms);
        let load = if load.is_finite() { load } else { 0.0 };
        let wait = total - load - part(self.prompt_ms) - part(self.predicted_ms);
        Some(wait.max(0.0))
    }
}

fn rate_per_s(tokens: u32, ms: f64) -> Option<f64> {
    (ms.is_finite() && ms > 0.0).then(|| f64::from(tokens) * 1000.0 / ms)
}

/// Everything one finished request left behind. Times are from one monotonic
/// clock: `start` and `end` are offsets from the run's start, the others are
/// relative to the request's own `t0` (`start`).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// Unique within the run, in dispatch order.
    pub id: u64,
    /// Index of the level the request was dispatched in.
    pub level: usize,
    /// t0: just before the request was written.
    pub start: Duration,
    /// When the request was over (last byte, error or cancel).
    pub end: Duration,
    /// First response byte (headers), relative to t0.
    pub ttfb: Option<Duration>,
    /// Opening the request's connection (TCP connect), inside the time
    /// from t0 to the first byte; zero on a reused keep-alive connection.
    /// `None` where the client cannot tell (reqwest: TLS, HTTP/2).
    pub connect: Option<Duration>,
    /// First output-carrying chunk, relative to t0.
    pub ttft: Option<Duration>,
    /// Last output-carrying chunk, relative to t0.
    pub e2el: Option<Duration>,
    /// Time per output token after the first, when output_tokens > 1.
    pub tpot: Option<Duration>,
    /// Inter-token gaps in milliseconds (see `stats::metrics::request_timing`).
    pub itl_ms: Vec<f64>,
    /// Prompt length the workload aimed for, in server tokens.
    pub input_tokens_target: u32,
    /// Prompt length the server reported (`usage.prompt_tokens`), if any.
    pub input_tokens_reported: Option<u32>,
    /// Output length asked for (`max_tokens`).
    pub output_tokens_requested: u32,
    pub output_tokens: u32,
    pub token_source: TokenSource,
    /// Output-carrying chunks received.
    pub chunks: u32,
    /// Socket reads that carried output: one or two for a long answer means
    /// something between server and client buffered the stream.
    pub output_reads: u32,
    /// Output-carrying reads that delivered more than one output event:
    /// all of a read's events get its one arrival time, so the gaps inside
    /// it are 0 (the earlier events arrived at or before that time).
    pub coalesced_reads: u32,
    /// The clock the arrival times are from (see [`RxClock`]).
    pub rx_clock: RxClock,
    /// The clock the request's t0 is from (see [`TxClock`]).
    pub tx_clock: TxClock,
    /// Kernel send clock only: how much later the request's last byte left
    /// (the kernel's transmit time) than the user-space t0 it replaced;
    /// what the send clock took off TTFB, TTFT and E2EL.
    pub tx_shift: Option<Duration>,
    /// Kernel clock only: per body read, how late the client read it
    /// (user-space read time minus kernel receive time), ms.
    pub rx_lag_ms: Vec<f32>,
    /// Times the request was sent again because its pooled connection had
    /// been closed by the server before any response byte.
    pub retries: u8,
    pub finish_reason: Option<FinishReason>,
    pub outcome: Outcome,
    /// One line from the server or the transport, for the failed ones.
    pub error_message: Option<String>,
    pub server_timings: Option<ServerTimings>,
    /// Open-loop runs: how late the request went out after its intended send
    /// time. Its timings (`start`, `ttft`, ...) count from the intended time,
    /// so a stalled server cannot hide behind a client that waited.
    pub send_lag: Option<Duration>,
    /// Multi-turn runs (`--turns`): 1-based turn of its conversation.
    pub turn: Option<u32>,
    /// Reasoning models: first *content* token, relative to t0, when reasoning came first.
    pub ttfc: Option<Duration>,
    /// Reasoning tokens the server reported (or reasoning chunks counted).
    pub reasoning_tokens: Option<u32>,
    /// Prompt tokens the server answered from its prefix cache, when it says.
    pub cached_tokens: Option<u32>,
    /// `--save-prompts`: the prompt text sent (never kept otherwise).
    pub prompt: Option<String>,
    /// In flight across a concurrency change (sent before a manual level
    /// reached its target, or still out when its level was left): saved in
    /// `requests.jsonl` with its level, left out of the level's statistics.
    pub transition: bool,
}

impl RequestRecord {
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }
    pub(crate) fn is_failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }
    /// Input tokens to count: what the server said, else what we aimed for.
    pub(crate) fn input_tokens(&self) -> u32 {
        self.input_tokens_reported
            .unwrap_or(self.input_tokens_target)
    }
    /// TTFT less the connect time: what the server took once the request
    /// could be sent. With the kernel's send clock t0 is already past the
    /// connect (the request's departure), so TTFT is returned as it is.
    /// `None` without a TTFT or a known connect time.
    pub(crate) fn ttft_after_connect(&self) -> Option<Duration> {
        let ttft = self.ttft?;
        let connect = self.connect?;
        Some(match self.tx_clock {
            TxClock::Kernel => ttft,
            _ => ttft.saturating_sub(connect),
        })
    }
    /// A record with every field empty, for tests and builders.
    pub fn empty(id: u64, level: usize) -> RequestRecord {
        RequestRecord {
            id,
            level,
            start: Duration::ZERO,
            end: Duration::ZERO,
            ttfb: None,
            connect: None,
            ttft: None,
            e2el: None,
            tpot: None,
            itl_ms: Vec::new(),
            input_tokens_target: 0,
            input_tokens_reported: None,
            output_tokens_requested: 0,
            output_tokens: 0,
            token_source: TokenSource::ChunkCount,
            chunks: 0,
            output_reads: 0,
            coalesced_reads: 0,
            rx_clock: RxClock::User,
            tx_clock: TxClock::User,
            tx_shift: None,
            rx_lag_ms: Vec::new(),
            retries: 0,
            finish_reason: None,
            outcome: Outcome::Ok,
            error_message: None,
            server_timings: None,
            send_lag: None,
            turn: None,
            ttfc: None,
            reasoning_tokens: None,
            cached_tokens: None,
            prompt: None,
            transition: false,
        }
    }
}

#[cfg(test)]
mod connect_tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn ttft_after_connect_takes_the_connect_off_a_user_clock_t0() {
        let mut r = RequestRecord::empty(0, 0);
        r.ttft = Some(ms(63));
        assert_eq!(r.ttft_after_connect(), None, "connect unknown (reqwest)");
        r.connect = Some(ms(13));
        assert_eq!(r.ttft_after_connect(), Some(ms(50)));
        r.connect = Some(Duration::ZERO);
        assert_eq!(r.ttft_after_connect(), Some(ms(63)), "a reused connection");
        // The kernel's send clock starts t0 at the departure: already past it.
        r.connect = Some(ms(13));
        r.tx_clock = TxClock::Kernel;
        assert_eq!(r.ttft_after_connect(), Some(ms(63)));
        r.ttft = None;
        assert_eq!(r.ttft_after_connect(), None);
    }
}
