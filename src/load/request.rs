//! One request, timed where its bytes arrive.
//!
//! Every timestamp of a request is taken here, in the load task, from one
//! monotonic clock, before any JSON is parsed (docs/architecture.md section 7). Nothing
//! downstream measures.

use std::error::Error as StdError;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use tokio::sync::watch;

use super::h1::{self, BodyError, Connections, Consumed, Polled};
use super::rxtime;
use super::Wire;
use crate::protocol::openai::error_message_from_body;
use crate::protocol::{OllamaDecoder, OpenAiDecoder, StreamEvent, TgiDecoder};
use crate::record::{
    ChunkArrival, ErrorClass, FinishReason, Outcome, RequestRecord, RxClock, ServerTimings,
    TokenSource, TxClock,
};
use crate::stats::metrics::request_timing;

// The request's parts: the two transports behind one answer, the stream's
// tallies, transport errors in words.
mod answer;
mod tally;
mod transport_error;

use answer::{http_error_message, send_h1, send_reqwest, with_backend_hint};
use tally::{Decoder, StreamTally};
pub(crate) use transport_error::say_once;
use transport_error::seconds;
pub(crate) use transport_error::{classify_transport_error, transport_message};

/// Retries of a request whose pooled connection was closed before any
/// response byte, by the lean client: it sends the retry on a fresh
/// connection, so one is enough.
const STALE_RETRIES_LEAN: u8 = 1;
/// The same for reqwest, which cannot be asked for a fresh connection: its
/// pool can hold several that the server has closed (llama-server closes
/// each after its answer; one that comes back to the pool late, after a new
/// connection was opened in its place, is handed out next), and each try
/// drops one. Seen on a loaded box: two dead connections in a row.
const STALE_RETRIES_REQWEST: u8 = 3;

/// Names each request, so a server's logs (vLLM with
/// `--enable-request-id-headers`, the simulator's `--emission-log`) can be
/// matched to `requests.jsonl`: `tokbench-<process nonce>-<record id>`.
const X_REQUEST_ID: &str = "x-request-id";

/// What a probe request's `X-Request-Id` opens with after `tokbench-`: a
/// server's log (or the simulator's emission log) tells probes from the
/// load by it, and [`record_id_of_request_id`] never takes one for a record.
const PROBE_MARK: &str = "probe-";

/// The `X-Request-Id` of record `id`: unique across processes too (a
/// server that uses it as its own request id must not see one twice, so a
/// resend on a fresh connection gets `.<attempt>` added). A probe request
/// (`probe`, numbered apart from the load's records) is
/// `tokbench-probe-<nonce>-<n>`.
pub(crate) fn request_id_header(id: u64, attempt: u8, probe: bool) -> HeaderValue {
    static NONCE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let nonce = *NONCE.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        t ^ std::process::id().rotate_left(16)
    });
    let mark = if probe { PROBE_MARK } else { "" };
    let text = if attempt == 0 {
        format!("tokbench-{mark}{nonce:08x}-{id}")
    } else {
        format!("tokbench-{mark}{nonce:08x}-{id}.{attempt}")
    };
    // Hex, digits, dots and dashes always make a header value; the fallback
    // only keeps this path free of a panic.
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static("tokbench"))
}

/// The record id in an `X-Request-Id` that tokbench sent for its load;
/// None for a probe request's (see [`probe_id_of_request_id`]).
pub fn record_id_of_request_id(request_id: &str) -> Option<u64> {
    let rest = request_id.strip_prefix("tokbench-")?;
    if rest.starts_with(PROBE_MARK) {
        return None;
    }
    number_of(rest)
}

/// The probe's number in an `X-Request-Id` of a probe request.
pub fn probe_id_of_request_id(request_id: &str) -> Option<u64> {
    number_of(
        request_id
            .strip_prefix("tokbench-")?
            .strip_prefix(PROBE_MARK)?,
    )
}

/// `<nonce>-<n>[.<attempt>]`: n.
fn number_of(rest: &str) -> Option<u64> {
    let (_, id) = rest.rsplit_once('-')?;
    id.split_once('.').map_or(id, |(id, _)| id).parse().ok()
}

/// Most bytes of an HTTP error body we read to find its message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Where requests go and how long they may take.
#[derive(Clone, Debug)]
pub struct Target {
    pub client: reqwest::Client,
    /// The lean HTTP/1.1 client that measured requests take on plain
    /// `http://` targets ([`h1`]); None: `client` carries them.
    pub h1: Option<Arc<Connections>>,
    /// How the answer is framed (SSE or NDJSON).
    pub wire: Wire,
    /// Full request URL (base + endpoint).
    pub url: reqwest::Url,
    /// `Bearer <key>`, marked sensitive so it never shows in Debug output.
    pub authorization: Option<HeaderValue>,
    pub request_timeout: Duration,
    pub stall_timeout: Duration,
}

impl Target {
    pub(crate) fn authorization_from_key(key: &str) -> Option<HeaderValue> {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).ok()?;
        value.set_sensitive(true);
        Some(value)
    }

    /// The key inside `authorization`, to keep it out of error messages.
    fn api_key(&self) -> Option<&str> {
        let value = self.authorization.as_ref()?.to_str().ok()?;
        value.strip_prefix("Bearer ").filter(|k| !k.is_empty())
    }
}

/// What the driver hands a load task.
#[derive(Clone, Debug)]
pub struct PreparedRequest {
    pub id: u64,
    pub level: usize,
    /// Serialized JSON body.
    pub body: Bytes,
    pub input_tokens_target: u32,
    pub max_tokens: u32,
    /// Open-loop: when the request was meant to go out. Its timings count
    /// from here (coordinated omission), and the lateness is recorded.
    pub scheduled: Option<Instant>,
    /// Multi-turn runs: 1-based turn of its conversation.
    pub turn: Option<u32>,
    /// A probe request (`--probe-rate`): its `X-Request-Id` says so.
    pub probe: bool,
}

/// What goes on the wire: the body, and whether its id names a probe.
struct Outgoing {
    body: Bytes,
    probe: bool,
}

/// How a stream stopped before its natural end.
enum Stop {
    Failed(ErrorClass, String),
    Cancelled,
}

/// Send one request and time it. Never fails: every way a request can go
/// wrong ends in the record's `outcome`.
pub async fn execute(
    target: &Target,
    request: PreparedRequest,
    run_start: Instant,
    cancel: watch::Receiver<bool>,
) -> RequestRecord {
    execute_counted(target, request, run_start, cancel, None).await
}

/// Counts one request in `streaming` from its first output chunk until it
/// ends, however it ends (the task may be dropped mid-stream).
struct StreamingMark<'a> {
    gauge: Option<&'a AtomicU32>,
    counted: bool,
}

impl StreamingMark<'_> {
    fn first_output(&mut self) {
        if let (Some(gauge), false) = (self.gauge, self.counted) {
            gauge.fetch_add(1, Ordering::Relaxed);
            self.counted = true;
        }
    }
}

impl Drop for StreamingMark<'_> {
    fn drop(&mut self) {
        if let (Some(gauge), true) = (self.gauge, self.counted) {
            gauge.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// [`execute`], also counting the request in `streaming` while it streams:
/// in flight minus streaming is what waits for a first token, the client's
/// view of the server's queue (the only one Ollama gives).
pub(crate) async fn execute_counted(
    target: &Target,
    request: PreparedRequest,
    run_start: Instant,
    mut cancel: watch::Receiver<bool>,
    streaming: Option<&AtomicU32>,
) -> RequestRecord {
    let mut mark = StreamingMark {
        gauge: streaming,
        counted: false,
    };
    let mut record = RequestRecord::empty(request.id, request.level);
    record.input_tokens_target = request.input_tokens_target;
    record.output_tokens_requested = request.max_tokens;

    record.turn = request.turn;
    let sent = Instant::now();
    // Open loop: time from the intended send, so waiting to send counts.
    let t0 = match request.scheduled {
        Some(scheduled) if scheduled <= sent => {
            record.send_lag = Some(sent - scheduled);
            scheduled
        }
        Some(_) => {
            record.send_lag = Some(Duration::ZERO);
            sent
        }
        None => sent,
    };
    record.start = t0.saturating_duration_since(run_start);
    let deadline = tokio::time::Instant::from_std(sent + target.request_timeout);

    let mut tally = StreamTally {
        // Room for a typical answer; a huge --random-output-len must not
        // reserve gigabytes up front (the Vec grows if the answer does).
        arrivals: Vec::with_capacity(request.max_tokens.min(4096) as usize + 2),
        ..StreamTally::default()
    };
    // A t0 that is the send's own time (not a schedule's) may move to the
    // kernel's transmit time of the request (`--tx-clock kernel`).
    let mut departed = t0;
    let departure = (t0 == sent).then_some(&mut departed);
    let outgoing = Outgoing {
        body: request.body,
        probe: request.probe,
    };
    let work = stream_request(
        target,
        outgoing,
        t0,
        departure,
        &mut record,
        &mut tally,
        &mut mark,
    );
    let stop = unless_cancelled_or_late(&mut cancel, deadline, target.request_timeout, work).await;
    record.end = run_start.elapsed();
    record.start = departed.saturating_duration_since(run_start);

    let (output_tokens, source) = tally.output_tokens();
    record.output_tokens = output_tokens;
    record.token_source = match (target.wire, source) {
        // TGI's count comes from its details, decoded as usage.
        (Wire::Tgi, TokenSource::Usage) => TokenSource::TgiDetails,
        (_, source) => source,
    };
    record.chunks = tally.arrivals.len() as u32;
    record.output_reads = tally.output_reads;
    record.coalesced_reads = tally.coalesced_reads;
    // Kernel only when every body read had the kernel's time.
    record.rx_clock = if tally.kernel_reads > 0 && tally.user_reads == 0 {
        RxClock::Kernel
    } else {
        RxClock::User
    };
    record.rx_lag_ms = std::mem::take(&mut tally.rx_lag_ms);
    record.finish_reason = tally.finish;
    record.input_tokens_reported = tally.prompt_tokens;
    record.server_timings = tally.timings;
    record.ttfc = tally.ttfc();
    record.reasoning_tokens = tally.reasoning_tokens();
    record.cached_tokens = tally.cached_tokens;
    let timing = request_timing(&tally.arrivals, output_tokens);
    record.ttft = timing.ttft;
    record.e2el = timing.e2el;
    record.tpot = timing.tpot;
    record.itl_ms = timing.itl_ms;

    record.outcome = match stop {
        Some(Stop::Cancelled) => Outcome::Cancelled,
        Some(Stop::Failed(class, message)) => {
            record.error_message = Some(message);
            Outcome::Failed(class)
        }
        None => judge_complete_stream(&tally, output_tokens, request.max_tokens, &mut record),
    };
    if let (Some(message), Some(key)) = (&record.error_message, target.api_key()) {
        record.error_message = Some(crate::redact::key_in(message, key));
    }
    record
}

/// A stream that ended on its own: success, an error frame, or a truncation.
fn judge_complete_stream(
    tally: &StreamTally,
    output_tokens: u32,
    requested: u32,
    record: &mut RequestRecord,
) -> Outcome {
    if let Some(message) = &tally.stream_error {
        record.error_message = Some(message.clone());
        return Outcome::Failed(ErrorClass::StreamError);
    }
    if tally.finish.is_none() && output_tokens < requested {
        record.error_message = Some(format!(
            "stream ended without a finish reason after {output_tokens} of {requested} tokens"
        ));
        return Outcome::Failed(ErrorClass::Truncated);
    }
    if output_tokens == 0 {
        record.error_message = Some("the answer carried no output tokens".into());
        return Outcome::Failed(ErrorClass::Truncated);
    }
    Outcome::Ok
}

async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    // A closed channel means the driver is gone: treat it as a cancel too.
    let _ = cancel.wait_for(|stop| *stop).await;
}

/// `work`'s result, unless the run is cancelled or `deadline` passes first
/// (checked in that order, as a biased `select!` would). Unlike `select!`,
/// which polls every branch on every wakeup (a lock in the watch's notifier
/// and a timer-waker registration per chunk), the cancel signal and the
/// deadline are polled once to register their wakers, and again only when
/// they can have fired: an atomic load each per wakeup.
async fn unless_cancelled_or_late(
    cancel: &mut watch::Receiver<bool>,
    deadline: tokio::time::Instant,
    limit: Duration,
    work: impl Future<Output = Option<Stop>>,
) -> Option<Stop> {
    let signal = cancel.clone();
    let mut cancelled = pin!(cancelled(cancel));
    let mut late = pin!(tokio::time::sleep_until(deadline));
    let mut work = pin!(work);
    let mut first = true;
    poll_fn(|cx| {
        // `has_changed` is Ok(false) until a value is sent, Err once the
        // driver is gone: either way the cancel future then decides.
        if (first || !matches!(signal.has_changed(), Ok(false)))
            && cancelled.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Stop::Cancelled));
        }
        if (first || late.is_elapsed()) && late.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Stop::Failed(
                ErrorClass::Timeout,
                format!(
                    "no complete answer within {} (--request-timeout)",
                    seconds(limit)
                ),
            )));
        }
        first = false;
        work.as_mut().poll(cx)
    })
    .await
}

/// Send the request and read its stream into `tally`. Returns None when the
/// stream ended by itself (judged by the caller), or how it broke.
async fn stream_request(
    target: &Target,
    Outgoing { body, probe }: Outgoing,
    mut t0: Instant,
    departure: Option<&mut Instant>,
    record: &mut RequestRecord,
    tally: &mut StreamTally,
    mark: &mut StreamingMark<'_>,
) -> Option<Stop> {
    // Some servers (llama.cpp's llama-server among them) close a connection
    // after a streamed answer while advertising keep-alive; a pooled
    // connection can then die under the next request before a single byte
    // comes back. Like curl, send once more on a fresh connection (reqwest:
    // on the next its pool gives, up to `STALE_RETRIES_REQWEST` times); t0
    // stays the first attempt's. (A server that read the request and then
    // died gets it again: the record's `retries` says how often.)
    let mut attempt = 0;
    let stale_retries = match target.h1 {
        Some(_) => STALE_RETRIES_LEAN,
        None => STALE_RETRIES_REQWEST,
    };
    let (status, mut answer) = loop {
        let sent = match &target.h1 {
            Some(h1) => send_h1(h1, &body, record.id, attempt, probe).await,
            None => send_reqwest(target, &body, record.id, attempt, probe).await,
        };
        match sent {
            Ok(answer) => break answer,
            Err((class, _)) if class == ErrorClass::ConnectionClosed && attempt < stale_retries => {
                attempt += 1;
                record.retries += 1;
            }
            Err((class, message)) => return Some(Stop::Failed(class, message)),
        }
    };
    record.connect = answer.connect_time();
    // The request's departure by the kernel's clock, where there is one and
    // t0 is the send's: every latency starts there (never after the head's
    // read). Not after a retry: t0 stays the first attempt's.
    if let (Some(out), Some(left), 0) = (departure, answer.departed(), attempt) {
        let head_at = arrival(answer.read_times(), t0).0;
        let user_t0 = t0;
        t0 = left.min(head_at).max(t0);
        *out = t0;
        record.tx_clock = TxClock::Kernel;
        record.tx_shift = Some(t0 - user_t0);
    }
    // The head's read: on the kernel's clock too where it has one.
    record.ttfb = Some(
        arrival(answer.read_times(), t0)
            .0
            .saturating_duration_since(t0),
    );

    if !(200..300).contains(&status) {
        let message = http_error_message(status, &mut answer, target.stall_timeout).await;
        let message = with_backend_hint(target.wire, status, message);
        return Some(Stop::Failed(ErrorClass::Http(status), message));
    }

    let mut decoder = Decoder::new(target.wire);
    let mut events = Vec::with_capacity(4);
    // The stall timer: one per stream, armed for the last bytes' time plus
    // the limit and re-armed only when it fires (a timer per read would cost
    // a wheel insert and removal per chunk). Only once the body has begun:
    // before its first bytes the request waits for a slot or its prefill
    // (a server that sends its head at once, as vLLM and Ollama may, then
    // queues), which on a slow box takes minutes and is the TTFT being
    // measured; --request-timeout bounds that wait, as it bounds the head's.
    let mut body_started = false;
    let mut last_bytes = Instant::now();
    let mut stall = pin!(tokio::time::sleep_until(
        (last_bytes + target.stall_timeout).into()
    ));
    let mut stall_armed = false;
    // The last read's arrival: events the decoder only releases at the end
    // (a last line without its terminator) came with that read.
    let mut last_at = None;
    loop {
        let next = poll_fn(|cx| {
            if let Poll::Ready(next) = answer.poll_body(cx) {
                return Poll::Ready(Some(next));
            }
            if body_started && (!stall_armed || stall.is_elapsed()) {
                let due = last_bytes + target.stall_timeout;
                if Instant::now() >= due {
                    return Poll::Ready(None);
                }
                stall.as_mut().reset(due.into());
                stall_armed = true;
                if stall.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
            }
            Poll::Pending
        })
        .await;
        let Some(next) = next else {
            return Some(Stop::Failed(
                ErrorClass::Stalled,
                format!(
                    "stream sent nothing for {} (--stall-timeout)",
                    seconds(target.stall_timeout)
                ),
            ));
        };
        let ended = match next {
            Ok(Polled::Bytes) => {
                // The arrival time is the read's, taken before the bytes
                // are parsed: the kernel's receive time where there is one,
                // else when the read returned.
                let (arrived, read_at, kernel) = arrival(answer.read_times(), t0);
                let at = arrived.saturating_duration_since(t0);
                last_at = Some(at);
                last_bytes = read_at;
                body_started = true;
                if kernel {
                    tally.kernel_reads += 1;
                    let lag = read_at.saturating_duration_since(arrived);
                    tally.rx_lag_ms.push((lag.as_secs_f64() * 1000.0) as f32);
                } else {
                    tally.user_reads += 1;
                }
                let outputs_before = tally.arrivals.len();
                let consumed = answer.consume(|bytes| {
                    let fed = decoder.feed(bytes, &mut events);
                    for event in events.drain(..) {
                        tally.apply(event, at);
                    }
                    fed
                });
                let outputs = tally.arrivals.len() - outputs_before;
                if outputs > 0 {
                    tally.output_reads += 1;
                    mark.first_output();
                }
                // Several events in one read all got its one time.
                if outputs > 1 {
                    tally.coalesced_reads += 1;
                }
                match consumed {
                    Ok(Consumed::More) => false,
                    Ok(Consumed::End) => true,
                    Err(BodyError::Sink(e)) => {
                        return Some(Stop::Failed(ErrorClass::MalformedStream, e))
                    }
                    Err(BodyError::Transport(e)) => return Some(Stop::Failed(e.class, e.message)),
                }
            }
            Ok(Polled::End) => true,
            Err((class, message)) => return Some(Stop::Failed(class, message)),
        };
        if ended {
            let at = last_at.unwrap_or_else(|| t0.elapsed());
            if let Err(e) = decoder.finish(&mut events) {
                return Some(Stop::Failed(ErrorClass::MalformedStream, e));
            }
            for event in events.drain(..) {
                tally.apply(event, at);
            }
            return None;
        }
    }
}

/// Where the bytes of the last read are taken to have arrived, when that
/// read returned, and whether the arrival is the kernel's. The kernel's time
/// is kept within `[t0, read time]` (the reader already keeps it at or
/// after the connection's previous read): bytes of this request cannot
/// arrive before it was sent. Without read times (reqwest): now.
fn arrival(times: Option<h1::ReadTimes>, t0: Instant) -> (Instant, Instant, bool) {
    match times {
        Some(t) => {
            let (at, _) = rxtime::place(t.kernel, t0, t.read_at);
            (at, t.read_at, t.kernel.is_some())
        }
        None => {
            let now = Instant::now();
            (now, now, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_things_once_and_seconds_plainly() {
        assert_eq!(
            say_once("connection refused", "Connection refused (os error 111)"),
            "connection refused (os error 111)"
        );
        assert_eq!(
            say_once("connection refused", "tcp connect error"),
            "connection refused (tcp connect error)"
        );
        assert_eq!(
            say_once("connection refused", "é"),
            "connection refused (é)"
        );
        assert_eq!(seconds(Duration::from_millis(300)), "0.3 s");
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5 s");
        assert_eq!(seconds(Duration::from_secs(60)), "60 s");
        assert_eq!(seconds(Duration::from_secs_f64(12.7)), "13 s");
    }

    /// The wrong backend's HTTP errors say which backend to use; others are
    /// left as they are.
    #[test]
    fn a_wrong_backend_is_named_in_its_http_error() {
        use crate::protocol::openai::Api;
        let chat = Wire::OpenAi(Api::Chat);
        // tgi-generate at an OpenAI server (vLLM's FastAPI 404).
        let m = with_backend_hint(Wire::Tgi, 404, "Not Found".into());
        assert!(
            m.starts_with("Not Found; no TGI /generate_stream here"),
            "{m}"
        );
        assert!(m.contains("--backend openai-chat"), "{m}");
        // The default backend at a server with TGI's native API only (axum's
        // empty 404), or its body at TGI's native route.
        let m = with_backend_hint(chat, 404, "HTTP 404".into());
        assert!(m.contains("--backend tgi-generate"), "{m}");
        let m = with_backend_hint(
            chat,
            422,
            "Failed to deserialize the JSON body into the target type: missing field `inputs` at line 1 column 9".into(),
        );
        assert!(m.contains("use --backend tgi-generate"), "{m}");
        // A 404 about the model, and other errors, are not the route's.
        let model = "The model `x` does not exist.";
        assert_eq!(with_backend_hint(chat, 404, model.into()), model);
        assert_eq!(with_backend_hint(Wire::Tgi, 404, model.into()), model);
        assert_eq!(
            with_backend_hint(Wire::Tgi, 429, "Model is overloaded".into()),
            "Model is overloaded"
        );
        assert_eq!(
            with_backend_hint(chat, 422, "bad max_tokens".into()),
            "bad max_tokens"
        );
    }

    #[test]
    fn request_ids_name_the_record() {
        let v = request_id_header(42, 0, false);
        let text = v.to_str().unwrap();
        assert!(text.starts_with("tokbench-"), "{text}");
        assert_eq!(record_id_of_request_id(text), Some(42));
        // The same process, the same nonce: ids differ only by the record.
        assert_eq!(
            request_id_header(7, 0, false).to_str().unwrap(),
            text.replace("-42", "-7")
        );
        // A resend is another id for the server, the same record for us.
        let resent = request_id_header(42, 1, false);
        assert_eq!(resent.to_str().unwrap(), format!("{text}.1"));
        assert_eq!(record_id_of_request_id(resent.to_str().unwrap()), Some(42));
        assert_eq!(record_id_of_request_id("chatcmpl-abc"), None);
        assert_eq!(record_id_of_request_id("tokbench-x-y"), None);
        // A probe's id says so, and is never taken for a record's.
        let probe = request_id_header(42, 0, true);
        let probe = probe.to_str().unwrap();
        assert!(probe.starts_with("tokbench-probe-"), "{probe}");
        assert_eq!(record_id_of_request_id(probe), None);
        assert_eq!(probe_id_of_request_id(probe), Some(42));
        assert_eq!(probe_id_of_request_id(text), None);
    }

    /// The rule for several events in one read: they all get its one
    /// arrival time (a 0 ms gap between them) and the record counts the
    /// read in `coalesced_reads`; the clock used is recorded. The server
    /// writes one content chunk, waits, then two in one write (one segment
    /// on loopback, so one read), then the end.
    #[tokio::test]
    async fn events_of_one_read_share_its_time_and_the_read_is_counted() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let chunk = |text: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
            )
        };
        let (one, two) = (chunk("a"), format!("{}{}", chunk("b"), chunk("c")));
        let end = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: reqwest::Url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        )
        .parse()
        .unwrap();
        // Every connection gets the same answer, then closed.
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (one, two) = (one.clone(), two.clone());
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = socket.read(&mut buf).await.unwrap();
                        seen.extend_from_slice(&buf[..n]);
                    }
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                    socket
                        .write_all(format!("{head}{one}").as_bytes())
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    socket.write_all(two.as_bytes()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    socket.write_all(end.as_bytes()).await.unwrap();
                });
            }
        });
        let run = |clock: RxClock| {
            let h1 = Connections::for_url(&url, None, 1).map(|c| Arc::new(c.with_rx_clock(clock)));
            if clock == RxClock::Kernel {
                // Stamping is turned on by a deferred kernel work item:
                // wait for it, as a run's warmup does.
                let on = h1.as_ref().is_some_and(|c| c.wait_for_stamping());
                assert!(on, "the kernel never stamped a packet");
            }
            let target = Target {
                client: reqwest::Client::new(),
                h1,
                wire: Wire::OpenAi(crate::protocol::openai::Api::Chat),
                url: url.clone(),
                authorization: None,
                request_timeout: Duration::from_secs(10),
                stall_timeout: Duration::from_secs(10),
            };
            async move {
                let (_tx, rx) = watch::channel(false);
                let request = PreparedRequest {
                    id: 1,
                    level: 0,
                    body: Bytes::from_static(b"{}"),
                    input_tokens_target: 1,
                    max_tokens: 3,
                    scheduled: None,
                    turn: None,
                    probe: false,
                };
                let r = execute(&target, request, Instant::now(), rx).await;
                assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error_message);
                assert_eq!(r.chunks, 3);
                assert_eq!(r.itl_ms.len(), 2);
                // b and c came in one read: a gap of exactly 0 and one read
                // counted, whether or not a late client merged a with them.
                assert!(r.itl_ms.contains(&0.0), "{:?}", r.itl_ms);
                assert_eq!(r.coalesced_reads, 1);
                r
            }
        };
        let r = run(RxClock::Kernel).await;
        assert_eq!(r.rx_clock, RxClock::Kernel, "lags {:?}", r.rx_lag_ms);
        // One lag per body read (head + a, b + c, the end), none negative.
        assert_eq!(r.rx_lag_ms.len(), 3, "{:?}", r.rx_lag_ms);
        assert!(r.rx_lag_ms.iter().all(|l| *l >= 0.0));
        let r = run(RxClock::User).await;
        assert_eq!(r.rx_clock, RxClock::User);
        assert!(r.rx_lag_ms.is_empty());
    }

    fn output(reasoning: bool, tokens: Option<u32>) -> StreamEvent {
        StreamEvent::Output { tokens, reasoning }
    }

    fn usage(reasoning: Option<u32>, cached: Option<u32>) -> StreamEvent {
        StreamEvent::Usage {
            prompt_tokens: Some(10),
            completion_tokens: Some(5),
            reasoning_tokens: reasoning,
            cached_tokens: cached,
        }
    }

    #[test]
    fn ttfc_and_reasoning_tokens_from_the_events() {
        let ms = Duration::from_millis;
        // Reasoning first: TTFC is the first content chunk; the server's
        // reasoning count wins over the chunks counted.
        let mut t = StreamTally::default();
        t.apply(output(true, None), ms(10));
        t.apply(output(true, None), ms(20));
        t.apply(output(false, None), ms(30));
        t.apply(output(true, None), ms(40));
        assert_eq!(t.ttfc(), Some(ms(30)));
        assert_eq!(t.reasoning_tokens(), Some(3));
        t.apply(usage(Some(7), Some(4)), ms(50));
        assert_eq!(t.reasoning_tokens(), Some(7));
        assert_eq!(t.cached_tokens, Some(4));
        // A later usage without the figures keeps them.
        t.apply(usage(None, None), ms(60));
        assert_eq!((t.reasoning_tokens(), t.cached_tokens), (Some(7), Some(4)));

        // Content first: no TTFC (it is the TTFT), reasoning still counted,
        // by tokens when the chunk's count is known.
        let mut t = StreamTally::default();
        t.apply(output(false, Some(1)), ms(10));
        t.apply(output(true, Some(2)), ms(20));
        assert_eq!(t.ttfc(), None);
        assert_eq!(t.reasoning_tokens(), Some(2));

        // Only reasoning: no TTFC; no reasoning at all: no count.
        let mut t = StreamTally::default();
        t.apply(output(true, None), ms(10));
        assert_eq!(t.ttfc(), None);
        let mut t = StreamTally::default();
        t.apply(output(false, None), ms(10));
        assert_eq!(t.reasoning_tokens(), None);
    }
}
