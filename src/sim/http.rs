//! The HTTP front of the simulator: a hyper 1 HTTP/1.1 server (keep-alive) with
//! vLLM's OpenAI-compatible routes and its `/tokenize`, `/version`, `/health`,
//! `/metrics`; the other personalities' routes are in their own files.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, DATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::emission::{admission_cell, monotonic_ns, Accounted, StreamRecorder};
use super::engine::Submission;
use super::metrics::Metrics;
use super::wire::{self, Api, ChunkFormat, Sink, StreamSink};
use super::{SimConfig, SimEngine};

/// Response body type: a full buffer, or the SSE channel.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Request bodies larger than this are refused (413).
const MAX_BODY_BYTES: usize = 64 << 20;

/// What every connection shares.
pub(crate) struct AppState {
    pub cfg: SimConfig,
    pub engine: mpsc::UnboundedSender<Submission<Sink>>,
    pub metrics: Arc<Metrics>,
    next_id: AtomicU64,
    id_nonce: u64,
    /// Generation requests so far: the index of each one's EOS draw.
    eos_draws: AtomicU64,
    /// Ollama's model: loaded or not, and who waits for it.
    pub ollama: super::ollama::ModelState,
    /// Generation requests so far: the index of each one's fault draw.
    fault_draws: AtomicU64,
    /// TGI's `--max-concurrent-requests`: one permit per request in flight.
    pub tgi_permits: Arc<tokio::sync::Semaphore>,
}

/// A fault injected into one generation request ([`SimConfig::fail_rate`] and the
/// others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// HTTP 500 with a JSON error body, nothing served.
    Fail,
    /// The connection is closed mid-stream.
    Disconnect,
    /// The stream stops mid-way; the connection stays open.
    Stall,
    /// One event of broken JSON mid-stream.
    Malformed,
}

/// The fault (if any) of generation request number `n`: each mode is drawn on its own
/// from the seed, the mode and `n`; the first that hits wins.
pub(crate) fn draw_fault(cfg: &SimConfig, n: u64) -> Option<Fault> {
    let modes = [
        (Fault::Fail, cfg.fail_rate),
        (Fault::Disconnect, cfg.disconnect_rate),
        (Fault::Stall, cfg.stall_rate),
        (Fault::Malformed, cfg.malformed_rate),
    ];
    for (i, (fault, rate)) in modes.into_iter().enumerate() {
        if rate <= 0.0 {
            continue;
        }
        let key = super::noise::splitmix64(cfg.fault_seed ^ 0x0fa1_7000_0000_0000)
            ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let u = (super::noise::splitmix64(key ^ n) >> 11) as f64 / (1u64 << 53) as f64;
        if u < rate {
            return Some(fault);
        }
    }
    None
}

/// Whether a request is one of the personalities' generation requests (the ones faults
/// apply to).
fn is_generation(req: &Request<Incoming>) -> bool {
    let path = req.uri().path();
    req.method() == Method::POST
        && (path.ends_with("/completions")
            || path == "/completion"
            || path == "/api/generate"
            || path == "/api/chat"
            || path == "/generate_stream")
}

impl AppState {
    pub(crate) fn new(
        cfg: SimConfig,
        engine: mpsc::UnboundedSender<Submission<Sink>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let id_nonce = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let tgi_permits = Arc::new(tokio::sync::Semaphore::new(
            cfg.max_concurrent_requests
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        ));
        AppState {
            tgi_permits,
            cfg,
            engine,
            metrics,
            next_id: AtomicU64::new(0),
            id_nonce,
            eos_draws: AtomicU64::new(0),
            ollama: super::ollama::ModelState::new(),
            fault_draws: AtomicU64::new(0),
        }
    }

    /// Where a simulated EOS ends the next request (None: it never does).
    pub(crate) fn draw_eos(&self) -> Option<u64> {
        let n = self.eos_draws.fetch_add(1, Ordering::Relaxed);
        wire::eos_length(self.cfg.eos_mean_tokens, self.cfg.eos_seed, n)
    }

    pub(crate) fn new_id(&self, api: Api) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Completions => "cmpl",
        };
        format!("{prefix}-{:016x}{n:016x}", self.id_nonce)
    }

    /// Hand a request to the engine; false when the engine is gone (shutting down).
    pub(crate) fn submit(&self, prompt_tokens: u64, max_tokens: u64, sink: Sink) -> bool {
        self.submit_with_blocks(prompt_tokens, max_tokens, Vec::new(), sink)
    }

    /// [`AppState::submit`] with the prompt's prefix-block hashes (vLLM's prefix cache).
    pub(crate) fn submit_with_blocks(
        &self,
        prompt_tokens: u64,
        max_tokens: u64,
        blocks: Vec<u64>,
        sink: Sink,
    ) -> bool {
        // Counted before sending, so the engine's decrement never runs first.
        self.metrics.waiting.fetch_add(1, Ordering::Relaxed);
        let sub = Submission {
            prompt_tokens,
            max_tokens,
            blocks,
            sink,
        };
        if self.engine.send(sub).is_err() {
            self.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// Accept connections until `shutdown` fires (or its sender is dropped). Each
/// connection runs in its own task and is dropped (closed) on shutdown.
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    mut shutdown: watch::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(10)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        // SSE events are small writes; without NODELAY, Nagle plus the client's delayed
        // ACK can hold a token back for tens of milliseconds.
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            // Fired by a response that should be this connection's last (llama.cpp's
            // streams): hyper then finishes the response in flight and closes.
            let close = Arc::new(Notify::new());
            // Fired by an injected disconnect: the connection is dropped at once.
            let abort = Arc::new(Notify::new());
            let svc = {
                let close = Arc::clone(&close);
                let abort = Arc::clone(&abort);
                service_fn(move |req| {
                    handle(
                        Arc::clone(&state),
                        req,
                        Arc::clone(&close),
                        Arc::clone(&abort),
                    )
                })
            };
            // HTTP/1.1, or HTTP/2 with prior knowledge (`tokbench sweep --http2`).
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    _ = close.notified() => conn.as_mut().graceful_shutdown(),
                    _ = abort.notified() => break,
                    _ = shutdown.changed() => break,
                }
            }
        });
    }
}

async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
    close: Arc<Notify>,
    abort: Arc<Notify>,
) -> Result<Response<Body>, Infallible> {
    let fault = if is_generation(&req) {
        let n = state.fault_draws.fetch_add(1, Ordering::Relaxed);
        draw_fault(&state.cfg, n)
    } else {
        None
    };
    if fault == Some(Fault::Fail) {
        return Ok(error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Simulated server failure (tokbench sim --fail-rate)",
            "InternalServerError",
        ));
    }
    let mut resp = match state.cfg.engine {
        SimEngine::Vllm => vllm_routes(Arc::clone(&state), req).await?,
        SimEngine::Ollama => super::ollama::route(&state, req).await,
        SimEngine::Llamacpp => super::llamacpp::route(&state, req, close).await,
        SimEngine::Sglang => super::sglang::route(&state, req).await,
        SimEngine::Tgi => super::tgi::route(&state, req).await,
    };
    // Stamped now, not hyper's cached header (refreshed about once a second,
    // so up to a second old): a shard reads its clock offset from it.
    if let Ok(date) = HeaderValue::from_str(&http_date(std::time::SystemTime::now())) {
        resp.headers_mut().insert(DATE, date);
    }
    match fault {
        Some(fault) if resp.status() == StatusCode::OK => {
            let ndjson = resp
                .headers()
                .get(CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/x-ndjson"));
            let (parts, body) = resp.into_parts();
            let body = FaultBody {
                inner: Some(body),
                fault,
                frames: 0,
                ndjson,
                abort,
                done: false,
            };
            Ok(Response::from_parts(parts, body.boxed_unsync()))
        }
        _ => Ok(resp),
    }
}

/// Frames passed through before an injected stream fault: mid-stream (the chat API's
/// role and first token, then the second token).
const FAULT_AFTER_FRAMES: u32 = 2;

/// A response body with an injected stream fault after [`FAULT_AFTER_FRAMES`] frames.
/// A body that ends sooner is served whole.
struct FaultBody {
    inner: Option<Body>,
    fault: Fault,
    frames: u32,
    ndjson: bool,
    abort: Arc<Notify>,
    /// The malformed event has been sent.
    done: bool,
}

impl hyper::body::Body for FaultBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.frames >= FAULT_AFTER_FRAMES && !this.done {
            match this.fault {
                Fault::Malformed => {
                    this.done = true;
                    let broken: &'static [u8] = if this.ndjson {
                        b"{\"model\":\"sim\",\"response\":\"broken\n"
                    } else {
                        b"data: {\"id\":\"broken\",\"choices\":[{\"delta\n\n"
                    };
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(broken)))));
                }
                Fault::Stall => {
                    // Stop the sequence (the engine's next send fails) and send
                    // nothing more; the connection stays open until the client leaves.
                    this.inner = None;
                    return Poll::Pending;
                }
                Fault::Disconnect => {
                    this.inner = None;
                    this.done = true;
                    this.abort.notify_one();
                    return Poll::Pending;
                }
                Fault::Fail => {}
            }
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Pending;
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            this.frames += 1;
        }
        polled
    }
}

async fn vllm_routes(
    state: Arc<AppState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // vLLM's --api-key middleware guards every path under /v1 (unknown ones included,
    // before routing) and nothing else.
    if let Some(key) = &state.cfg.api_key {
        if path.starts_with("/v1") && !authorized(&req, key) {
            return Ok(error_response(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "invalid_request_error",
            ));
        }
    }
    let resp = match (method, path.as_str()) {
        (Method::POST, "/v1/chat/completions") => generate(&state, Api::Chat, req).await,
        (Method::POST, "/v1/completions") => generate(&state, Api::Completions, req).await,
        (Method::GET, "/v1/models") => models(&state),
        (Method::POST, "/tokenize") => tokenize(&state, req).await,
        (Method::GET, "/version") => {
            json_response(StatusCode::OK, &json!({"version": super::SIM_VERSION}))
        }
        (Method::GET, "/health") => with_status(StatusCode::OK, Empty::new().boxed_unsync()),
        // vLLM serves it only with VLLM_SERVER_DEV_MODE=1; an empty 200.
        (Method::POST, "/reset_prefix_cache") if state.cfg.dev_mode => {
            let n = state.metrics.cache_resets.fetch_add(1, Ordering::Relaxed) + 1;
            // Never a panic when stderr is gone (a server log closed).
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!(
                    "tokbench sim: reset_prefix_cache #{n}: the prefix cache is emptied\n"
                ),
            );
            with_status(StatusCode::OK, Empty::new().boxed_unsync())
        }
        (Method::GET, "/metrics") => {
            let text = state
                .metrics
                .render(&state.cfg.model_name, state.cfg.kv_tokens);
            let mut r = with_status(StatusCode::OK, full(text));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        (
            _,
            "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/models"
            | "/tokenize"
            | "/version"
            | "/health"
            | "/metrics",
        ) => error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
            "MethodNotAllowedError",
        ),
        (_, other) => error_response(
            StatusCode::NOT_FOUND,
            &format!("Not Found: {other}"),
            "NotFoundError",
        ),
    };
    Ok(resp)
}

/// Whether the request carries exactly `Authorization: Bearer <key>`. The comparison
/// takes the same time wherever the first difference is.
pub(crate) fn authorized(req: &Request<Incoming>, key: &str) -> bool {
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return false;
    };
    let Some(token) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return false;
    };
    let key = key.as_bytes();
    token.len() == key.len() && token.iter().zip(key).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// What the emission log and the server's own account need of a request,
/// read before its body.
pub(crate) struct Arrival {
    /// `CLOCK_MONOTONIC` ns at which it reached its handler.
    pub ns: u64,
    /// Its `X-Request-Id`, with the emission log on.
    pub request_id: Option<String>,
    pub at: std::time::Instant,
}

pub(crate) fn arrival(state: &AppState, req: &Request<Incoming>) -> Arrival {
    Arrival {
        ns: monotonic_ns(),
        request_id: state.cfg.emission_log.as_ref().and_then(|_| {
            req.headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        }),
        at: std::time::Instant::now(),
    }
}

/// A stream's body, its frame times recorded where the emission log is on
/// (keyed by its request id, else `id`) or the server keeps its own account
/// of it; `admission` is the cell its sink marks when the engine admits it.
pub(crate) fn recorded(
    state: &AppState,
    body: ChannelBody,
    arrived: Arrival,
    id: impl FnOnce() -> String,
    max_tokens: u64,
    account: Option<Accounted>,
    admission: Option<Arc<AtomicU64>>,
) -> ChannelBody {
    let log = state.cfg.emission_log.clone();
    if log.is_none() && account.is_none() {
        return body;
    }
    let key = arrived.request_id.unwrap_or_else(id);
    let capacity = usize::try_from(max_tokens).unwrap_or(usize::MAX);
    body.recording(
        StreamRecorder::new(log, key, arrived.ns, capacity)
            .accounting(account)
            .admission(admission),
    )
}

/// `/v1/chat/completions` and `/v1/completions` (vLLM's, and SGLang's alike).
pub(crate) async fn generate(state: &AppState, api: Api, req: Request<Incoming>) -> Response<Body> {
    let arrived = arrival(state, &req);
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let gen = match wire::parse_gen_request(api, &body) {
        Ok(g) => g,
        Err(e) => return bad_request(&e.0),
    };
    let requested = gen.prompt_tokens.saturating_add(gen.max_tokens);
    if requested > state.cfg.kv_tokens {
        // vLLM's wording for a request longer than the context.
        return bad_request(&format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens \
             ({} in the messages, {} in the completion). Please reduce the length of the \
             messages or completion.",
            state.cfg.kv_tokens, requested, gen.prompt_tokens, gen.max_tokens
        ));
    }
    let model = gen
        .model
        .clone()
        .unwrap_or_else(|| state.cfg.model_name.clone());
    let id = state.new_id(api);
    let created = unix_now();

    if gen.stream {
        let (tx, rx) = mpsc::unbounded_channel();
        let fmt = ChunkFormat::new(api, &id, created, &model, &gen)
            .with_reasoning(state.cfg.reasoning_tokens);
        // vLLM's own account of the request: its histograms and finished count.
        let account = (state.cfg.engine == SimEngine::Vllm).then(|| Accounted {
            metrics: Arc::clone(&state.metrics),
            max_tokens: gen.max_tokens,
        });
        let admission = admission_cell();
        let sink = StreamSink::new(tx, fmt).marking_admission(Arc::clone(&admission));
        let blocks = wire::prefix_blocks(&body, api, state.cfg.prefix_block_tokens);
        if !state.submit_with_blocks(
            gen.prompt_tokens,
            gen.max_tokens,
            blocks,
            Sink::Stream(sink),
        ) {
            return unavailable();
        }
        let body = recorded(
            state,
            ChannelBody::new(rx),
            arrived,
            || id,
            gen.max_tokens,
            account,
            Some(admission),
        );
        let mut r = with_status(StatusCode::OK, body.boxed_unsync());
        let h = r.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    } else {
        let (tx, rx) = oneshot::channel();
        let blocks = wire::prefix_blocks(&body, api, state.cfg.prefix_block_tokens);
        if !state.submit_with_blocks(
            gen.prompt_tokens,
            gen.max_tokens,
            blocks,
            Sink::Whole(Some(tx)),
        ) {
            return unavailable();
        }
        match rx.await {
            Ok(done) => json_response(
                StatusCode::OK,
                &wire::completion_body(
                    api,
                    &id,
                    created,
                    &model,
                    gen.prompt_tokens,
                    done.completion_tokens,
                ),
            ),
            Err(_) => unavailable(),
        }
    }
}

pub(crate) fn models(state: &AppState) -> Response<Body> {
    let name = &state.cfg.model_name;
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": [{
                "id": name,
                "object": "model",
                "created": unix_now(),
                "owned_by": "tokbench-sim",
                "root": name,
                "parent": null,
                "max_model_len": state.cfg.kv_tokens
            }]
        }),
    )
}

/// `/tokenize`: vLLM's shape (`prompt` or `messages` -> count, max_model_len, tokens) or
/// llama.cpp's (`content` -> tokens).
pub(crate) async fn tokenize(state: &AppState, req: Request<Incoming>) -> Response<Body> {
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let (text, llama_cpp) = match wire::parse_tokenize(&body) {
        Ok(t) => t,
        Err(e) => return bad_request(&e.0),
    };
    let tokens = wire::token_ids(&text);
    let v = if llama_cpp {
        json!({ "tokens": tokens })
    } else {
        json!({
            "count": tokens.len(),
            "max_model_len": state.cfg.kv_tokens,
            "tokens": tokens
        })
    };
    json_response(StatusCode::OK, &v)
}

/// Collect a request body (at most [`MAX_BODY_BYTES`]).
pub(crate) async fn read_body(req: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Request body too large",
                    "BadRequestError",
                ))
            } else {
                Err(bad_request(&format!(
                    "Could not read the request body: {e}"
                )))
            }
        }
    }
}

/// The SSE response body: whatever the engine sends, until it drops the sender.
/// When hyper drops this (the client went away), the engine's next send fails and it
/// drops the sequence.
pub(crate) struct ChannelBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    /// Notified when the body ends: the connection closes after this response.
    on_end: Option<Arc<Notify>>,
    /// `--emission-log`: when each frame was handed to the connection.
    recorder: Option<StreamRecorder>,
}

impl ChannelBody {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Bytes>) -> Self {
        ChannelBody {
            rx,
            on_end: None,
            recorder: None,
        }
    }

    /// Log the time each frame is handed to the connection ([`SimConfig::emission_log`]).
    pub(crate) fn recording(mut self, recorder: StreamRecorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Close the connection once this body has ended (as llama-server does after a
    /// streamed answer, while its headers still say keep-alive).
    pub(crate) fn closing(mut self, close: Arc<Notify>) -> Self {
        self.on_end = Some(close);
        self
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = self.rx.poll_recv(cx);
        match &polled {
            Poll::Ready(Some(_)) => {
                if let Some(recorder) = self.recorder.as_mut() {
                    recorder.frame();
                }
            }
            Poll::Ready(None) => {
                // Hands the stream's times to the log and the account.
                if let Some(mut recorder) = self.recorder.take() {
                    recorder.finish();
                }
                if let Some(close) = self.on_end.take() {
                    close.notify_one();
                }
            }
            Poll::Pending => {}
        }
        polled.map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

/// RFC 9110's IMF-fixdate, `Tue, 01 Dec 2026 13:00:00 GMT`: the `Date`
/// header's one form.
pub(crate) fn http_date(t: std::time::SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // 1970-01-01 was a Thursday.
    let weekday = DAYS[(secs / 86_400 % 7) as usize];
    let (y, mo, d, h, mi, s) = crate::time::utc_parts(t);
    let month = MONTHS[(mo.clamp(1, 12) - 1) as usize];
    format!("{weekday}, {d:02} {month} {y:04} {h:02}:{mi:02}:{s:02} GMT")
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed_unsync()
}

pub(crate) fn with_status(status: StatusCode, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r
}

pub(crate) fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = with_status(status, full(v.to_string()));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(crate) fn error_response(status: StatusCode, message: &str, kind: &str) -> Response<Body> {
    json_response(status, &wire::error_body(message, kind, status.as_u16()))
}

pub(crate) fn bad_request(message: &str) -> Response<Body> {
    error_response(StatusCode::BAD_REQUEST, message, "BadRequestError")
}

pub(crate) fn unavailable() -> Response<Body> {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "The simulator is shutting down",
        "ServiceUnavailableError",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_headers_in_imf_fixdate() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(http_date(at(784_111_777)), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            http_date(at(1_796_130_000)),
            "Tue, 01 Dec 2026 13:00:00 GMT"
        );
        // The second is whole: 999 ms later reads the same.
        assert_eq!(
            http_date(at(1_796_130_000) + Duration::from_millis(999)),
            "Tue, 01 Dec 2026 13:00:00 GMT"
        );
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
