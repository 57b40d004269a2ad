//! The `ollama` personality: Ollama's native API on the simulated engine.
//!
//! - `POST /api/generate` (`prompt`) and `POST /api/chat` (`messages`) stream NDJSON,
//!   one object per token (`response`, or `message.content`), then a `done: true`
//!   object with `done_reason` and the server's figures in nanoseconds. They add up:
//!   `total_duration = load_duration + slot wait + prompt_eval_duration + eval_duration`,
//!   where the slot wait is the time in the engine's queue, `prompt_eval_duration` the
//!   prefill share of the step that admitted the sequence and `eval_duration` the rest
//!   up to the last token. `load_duration` is omitted when zero, as Ollama does.
//!   `"stream": false` answers one object with the whole text.
//! - Output length: `options.num_predict` (default 128; 0 or negative: until the EOS or
//!   the context), cut short by a simulated EOS (`SimConfig::eos_mean_tokens`):
//!   Ollama has no `ignore_eos`.
//! - Slots: `SimConfig::parallel` (default 1) sequences run at once; the rest wait
//!   without limit. While the model loads (`SimConfig::load_ms`, on the first request
//!   and after `SimConfig::keep_alive_s` idle) at most `SimConfig::max_queue` requests
//!   wait for it and the excess gets Ollama's 503.
//! - `GET /api/ps` (`size_vram = size * vram_share`) lists the model only once a request
//!   has loaded it, even when the load takes no time, and no longer once the keep-alive
//!   has unloaded it: a new process lists nothing, as Ollama's does.
//! - `/api/version`, `/api/tags`, `/`,
//!   and `POST /v1/chat/completions` (OpenAI SSE, EOS applies, errors wrapped as
//!   `{"error":{"message","type":"api_error"}}`).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch};

use super::engine::TokenSink;
use super::http::{
    full, json_response, read_body, unix_now, with_status, AppState, Body, ChannelBody,
};
use super::wire::{self, Api, ChunkFormat, Sink, StreamSink};
use super::SimConfig;

/// Ollama's 503 body when too many requests wait (two spaces, as Ollama writes it).
pub(crate) const BUSY_MESSAGE: &str =
    "server busy, please try again.  maximum pending requests exceeded";

/// Output length when the request sets no `options.num_predict`.
pub(crate) const DEFAULT_NUM_PREDICT: u64 = 128;

/// Bytes the simulated model takes in memory (`/api/ps`, `/api/tags`).
const MODEL_SIZE: u64 = 1_000_000_000;

/// Whether the model is loaded, and who is using it or waiting for it.
pub(crate) struct ModelState {
    load: Arc<Mutex<Load>>,
}

struct Load {
    loaded: bool,
    /// Set while a load runs: turns true when it is done.
    loading: Option<watch::Receiver<bool>>,
    /// Requests waiting for the running load.
    pending: usize,
    /// Requests using the loaded model (waiting for a slot or generating).
    active: usize,
    /// When `active` last fell to 0 (or the load finished).
    idle_since: Instant,
}

fn lock(m: &Mutex<Load>) -> MutexGuard<'_, Load> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Load {
    /// Unload the model when it has been idle longer than the keep-alive.
    fn expire(&mut self, now: Instant, keep_alive_s: f64) {
        if self.loaded
            && self.active == 0
            && keep_alive_s >= 0.0
            && now.saturating_duration_since(self.idle_since).as_secs_f64() > keep_alive_s
        {
            self.loaded = false;
        }
    }
}

/// One request using the model; dropping it (when the answer ends or the client goes
/// away) may start the keep-alive countdown.
pub(crate) struct ActiveGuard {
    load: Arc<Mutex<Load>>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let mut l = lock(&self.load);
        l.active = l.active.saturating_sub(1);
        if l.active == 0 {
            l.idle_since = Instant::now();
        }
    }
}

/// Why a request did not get the model.
enum Refused {
    /// More than `max_queue` wait for a load.
    Busy,
    /// The load task went away (shutting down).
    Gone,
}

impl Refused {
    /// What the 503 says, on either API.
    fn message(&self) -> &'static str {
        match self {
            Refused::Busy => BUSY_MESSAGE,
            Refused::Gone => "the server is shutting down",
        }
    }
}

impl ModelState {
    pub(crate) fn new() -> Self {
        ModelState {
            load: Arc::new(Mutex::new(Load {
                loaded: false,
                loading: None,
                pending: 0,
                active: 0,
                idle_since: Instant::now(),
            })),
        }
    }

    fn guard(&self) -> ActiveGuard {
        ActiveGuard {
            load: Arc::clone(&self.load),
        }
    }

    /// Wait until the model is loaded (starting a load if it is not) and take a use of
    /// it. Returns how long this request waited for the load.
    async fn acquire(&self, cfg: &SimConfig) -> Result<(Duration, ActiveGuard), Refused> {
        let t0 = Instant::now();
        let mut rx = {
            let mut l = lock(&self.load);
            l.expire(t0, cfg.keep_alive_s);
            if l.loaded {
                l.active += 1;
                return Ok((Duration::ZERO, self.guard()));
            }
            if cfg.load_ms <= 0.0 {
                // A load that takes no time is still a load: from here on
                // `/api/ps` lists the model, as Ollama's does only once a
                // request has loaded it (the restart watch relies on a new
                // process listing none).
                l.loaded = true;
                l.active += 1;
                return Ok((Duration::ZERO, self.guard()));
            }
            if l.pending >= cfg.max_queue {
                return Err(Refused::Busy);
            }
            l.pending += 1;
            match &l.loading {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(false);
                    l.loading = Some(rx.clone());
                    let load = Arc::clone(&self.load);
                    let took = Duration::from_secs_f64(cfg.load_ms / 1000.0);
                    tokio::spawn(async move {
                        tokio::time::sleep(took).await;
                        {
                            let mut l = lock(&load);
                            l.loaded = true;
                            l.loading = None;
                            l.pending = 0;
                            l.idle_since = Instant::now();
                        }
                        let _ = tx.send(true);
                    });
                    rx
                }
            }
        };
        if rx.wait_for(|done| *done).await.is_err() {
            return Err(Refused::Gone);
        }
        lock(&self.load).active += 1;
        Ok((t0.elapsed(), self.guard()))
    }

    /// When the loaded model expires, for `/api/ps`; None when it is not loaded.
    fn snapshot(&self, cfg: &SimConfig) -> Option<SystemTime> {
        let now = Instant::now();
        let mut l = lock(&self.load);
        l.expire(now, cfg.keep_alive_s);
        if !l.loaded {
            return None;
        }
        let wall = SystemTime::now();
        if cfg.keep_alive_s < 0.0 || !cfg.keep_alive_s.is_finite() {
            // Ollama's "forever" is a date centuries ahead.
            return Some(wall + Duration::from_secs(292 * 365 * 86_400));
        }
        let keep = Duration::from_secs_f64(cfg.keep_alive_s.min(1e12));
        if l.active > 0 {
            return Some(wall + keep);
        }
        let left = (l.idle_since + keep).saturating_duration_since(now);
        Some(wall + left)
    }
}

/// RFC 3339 UTC with nanoseconds, as Ollama writes `created_at`.
fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = crate::time::utc_parts(t);
    let nanos = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{nanos:09}Z")
}

fn ollama_error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, &json!({ "error": message }))
}

fn openai_error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"message": message, "type": "api_error"}}),
    )
}

/// All of the Ollama personality's routes.
pub(crate) async fn route(state: &AppState, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    match (method, path.as_str()) {
        (Method::POST, "/api/generate") => native(state, false, req).await,
        (Method::POST, "/api/chat") => native(state, true, req).await,
        (Method::POST, "/v1/chat/completions") => openai_chat(state, req).await,
        (Method::GET, "/api/ps") => ps(state),
        (Method::GET, "/api/tags") => tags(state),
        (Method::GET, "/api/version") => {
            json_response(StatusCode::OK, &json!({"version": super::SIM_VERSION}))
        }
        (Method::GET, "/v1/models") => super::http::models(state),
        (Method::GET | Method::HEAD, "/") => {
            let mut r = with_status(StatusCode::OK, full("Ollama is running"));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        (
            _,
            "/api/generate"
            | "/api/chat"
            | "/v1/chat/completions"
            | "/api/ps"
            | "/api/tags"
            | "/api/version"
            | "/v1/models",
        ) => with_status(
            StatusCode::METHOD_NOT_ALLOWED,
            full("405 method not allowed"),
        ),
        _ => with_status(StatusCode::NOT_FOUND, full("404 page not found")),
    }
}

#[derive(Deserialize)]
struct NativeRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    messages: Option<Vec<NativeMessage>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    options: Option<NativeOptions>,
}

#[derive(Deserialize)]
struct NativeMessage {
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Deserialize, Default)]
struct NativeOptions {
    #[serde(default)]
    num_predict: Option<i64>,
}

/// `/api/generate` (`chat` false) and `/api/chat`.
async fn native(state: &AppState, chat: bool, req: Request<Incoming>) -> Response<Body> {
    let arrival = super::http::arrival(state, &req);
    let arrived = arrival.at;
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(_) => return ollama_error(StatusCode::BAD_REQUEST, "could not read the body"),
    };
    let raw: NativeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return ollama_error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
    };
    let prompt_tokens = if chat {
        let mut n = 0u64;
        for m in raw.messages.as_deref().unwrap_or_default() {
            match wire::content_tokens(m.content.as_ref()) {
                Ok(t) => n = n.saturating_add(t),
                Err(e) => return ollama_error(StatusCode::BAD_REQUEST, &e.0),
            }
        }
        n
    } else {
        match &raw.prompt {
            None | Some(Value::Null) => 0,
            Some(Value::String(s)) => wire::count_tokens(s),
            Some(_) => return ollama_error(StatusCode::BAD_REQUEST, "prompt must be a string"),
        }
    };
    let room = state.cfg.kv_tokens.saturating_sub(prompt_tokens);
    if room == 0 {
        return ollama_error(
            StatusCode::BAD_REQUEST,
            "the prompt is longer than the model's context",
        );
    }
    let num_predict = match raw.options.unwrap_or_default().num_predict {
        None => DEFAULT_NUM_PREDICT,
        Some(n) if n > 0 => n as u64,
        // -1 (infinite), -2 (fill the context), 0: until the EOS or the context is full.
        Some(_) => room,
    }
    .min(room);
    let (max_tokens, stopped) = cut_at_eos(state, num_predict);
    let model = raw.model.unwrap_or_else(|| state.cfg.model_name.clone());

    let (load, guard) = match state.ollama.acquire(&state.cfg).await {
        Ok(g) => g,
        Err(refused) => return ollama_error(StatusCode::SERVICE_UNAVAILABLE, refused.message()),
    };
    let stream = raw.stream.unwrap_or(true);
    let admission = super::emission::admission_cell();
    let (out, response) = if stream {
        let (tx, rx) = mpsc::unbounded_channel();
        let body = super::http::recorded(
            state,
            ChannelBody::new(rx),
            arrival,
            || state.new_id(Api::Chat),
            max_tokens,
            None,
            Some(Arc::clone(&admission)),
        );
        let mut r = with_status(StatusCode::OK, body.boxed_unsync());
        r.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        (Out::Stream(tx), Some(r))
    } else {
        let (tx, rx) = oneshot::channel();
        (Out::Whole(Some(tx), Some(rx)), None)
    };
    let model_json = serde_json::to_string(&model).unwrap_or_else(|_| "\"\"".into());
    let mut sink = NdjsonSink {
        out,
        chat,
        model: model_json,
        prompt_tokens,
        done_reason: if stopped { "stop" } else { "length" },
        arrived,
        load,
        admitted: None,
        admission: Some(admission),
        _guard: guard,
    };
    let whole_rx = match &mut sink.out {
        Out::Whole(_, rx) => rx.take(),
        Out::Stream(_) => None,
    };
    if !state.submit(prompt_tokens, max_tokens, Sink::Ollama(sink)) {
        return ollama_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down",
        );
    }
    match (response, whole_rx) {
        (Some(r), _) => r,
        (None, Some(rx)) => match rx.await {
            Ok(bytes) => {
                let mut r = with_status(StatusCode::OK, full(bytes));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/json; charset=utf-8"),
                );
                r
            }
            Err(_) => ollama_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            ),
        },
        (None, None) => ollama_error(StatusCode::INTERNAL_SERVER_ERROR, "no response"),
    }
}

/// The output length after the simulated EOS, and whether the EOS ended it.
fn cut_at_eos(state: &AppState, limit: u64) -> (u64, bool) {
    match state.draw_eos() {
        Some(eos) if eos < limit => (eos, true),
        _ => (limit, false),
    }
}

/// `/v1/chat/completions`: the OpenAI stream of the vLLM personality, with EOS.
async fn openai_chat(state: &AppState, req: Request<Incoming>) -> Response<Body> {
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(_) => return openai_error(StatusCode::BAD_REQUEST, "could not read the body"),
    };
    let gen = match wire::parse_gen_request(Api::Chat, &body) {
        Ok(g) => g,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, &e.0),
    };
    let room = state.cfg.kv_tokens.saturating_sub(gen.prompt_tokens);
    if room == 0 {
        return openai_error(
            StatusCode::BAD_REQUEST,
            "the prompt is longer than the model's context",
        );
    }
    let (max_tokens, stopped) = cut_at_eos(state, gen.max_tokens.min(room));
    let (_, guard) = match state.ollama.acquire(&state.cfg).await {
        Ok(g) => g,
        Err(refused) => return openai_error(StatusCode::SERVICE_UNAVAILABLE, refused.message()),
    };
    let model = gen
        .model
        .clone()
        .unwrap_or_else(|| state.cfg.model_name.clone());
    let id = state.new_id(Api::Chat);
    let created = unix_now();
    if gen.stream {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut fmt = ChunkFormat::new(Api::Chat, &id, created, &model, &gen);
        if stopped {
            fmt = fmt.stopped_at_eos();
        }
        let sink = Sink::Stream(StreamSink::new(tx, fmt).holding(guard));
        if !state.submit(gen.prompt_tokens, max_tokens, sink) {
            return openai_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            );
        }
        let mut r = with_status(StatusCode::OK, ChannelBody::new(rx).boxed_unsync());
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    } else {
        let (tx, rx) = oneshot::channel();
        if !state.submit(gen.prompt_tokens, max_tokens, Sink::Whole(Some(tx))) {
            return openai_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            );
        }
        let done = rx.await;
        drop(guard);
        match done {
            Ok(done) => {
                let mut v = wire::completion_body(
                    Api::Chat,
                    &id,
                    created,
                    &model,
                    gen.prompt_tokens,
                    done.completion_tokens,
                );
                if stopped {
                    v["choices"][0]["finish_reason"] = json!("stop");
                }
                json_response(StatusCode::OK, &v)
            }
            Err(_) => openai_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            ),
        }
    }
}

fn model_entry(name: &str) -> Value {
    json!({
        "name": name,
        "model": name,
        "size": MODEL_SIZE,
        "digest": "0000000000000000000000000000000000000000000000000000000000000000",
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "tokbench-sim",
            "families": ["tokbench-sim"],
            "parameter_size": "1B",
            "quantization_level": "Q4_K_M"
        }
    })
}

fn ps(state: &AppState) -> Response<Body> {
    let models = match state.ollama.snapshot(&state.cfg) {
        None => vec![],
        Some(expires) => {
            let mut m = model_entry(&state.cfg.model_name);
            let vram = (MODEL_SIZE as f64 * state.cfg.vram_share).round() as u64;
            m["expires_at"] = json!(rfc3339(expires));
            m["size_vram"] = json!(vram.min(MODEL_SIZE));
            m["context_length"] = json!(state.cfg.kv_tokens);
            vec![m]
        }
    };
    json_response(StatusCode::OK, &json!({ "models": models }))
}

fn tags(state: &AppState) -> Response<Body> {
    let mut m = model_entry(&state.cfg.model_name);
    m["modified_at"] = json!(rfc3339(SystemTime::now()));
    json_response(StatusCode::OK, &json!({ "models": [m] }))
}

/// Where an NDJSON answer goes.
enum Out {
    Stream(mpsc::UnboundedSender<Bytes>),
    /// `"stream": false`: one object at the end (the receiver is taken by the handler).
    Whole(
        Option<oneshot::Sender<Bytes>>,
        Option<oneshot::Receiver<Bytes>>,
    ),
}

/// Writes one `/api/generate` or `/api/chat` answer.
pub(crate) struct NdjsonSink {
    out: Out,
    chat: bool,
    /// The model name, as a JSON string.
    model: String,
    prompt_tokens: u64,
    done_reason: &'static str,
    arrived: Instant,
    /// Time spent waiting for the model to load.
    load: Duration,
    /// When the engine admitted the sequence, and the prefill's share of that step.
    admitted: Option<(Instant, f64)>,
    /// Marked at admission too, for the emission log.
    admission: Option<Arc<std::sync::atomic::AtomicU64>>,
    _guard: ActiveGuard,
}

impl NdjsonSink {
    pub(crate) fn admitted(&mut self, at: Instant, prefill_ms: f64) {
        self.admitted = Some((at, prefill_ms));
        super::emission::mark_admitted(self.admission.as_ref());
    }

    fn head(&self, buf: &mut String) {
        let _ = write!(
            buf,
            "{{\"model\":{},\"created_at\":\"{}\",",
            self.model,
            rfc3339(SystemTime::now())
        );
    }

    fn content(&self, buf: &mut String, text: &str) {
        // The words are plain ASCII letters; a whole answer is built from them too.
        if self.chat {
            let _ = write!(
                buf,
                "\"message\":{{\"role\":\"assistant\",\"content\":\"{text}\"}},"
            );
        } else {
            let _ = write!(buf, "\"response\":\"{text}\",");
        }
    }

    /// The `done: true` object's figures, from the sequence's instants.
    fn stats(&self, buf: &mut String, tokens: u64) {
        let now = Instant::now();
        let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        let loaded = self.arrived + self.load;
        let (admit, prefill_ms) = self.admitted.unwrap_or((loaded, 0.0));
        let load_ns = ns(self.load);
        let wait_ns = ns(admit.saturating_duration_since(loaded));
        let gen_ns = ns(now.saturating_duration_since(admit));
        let prompt_ns = ((prefill_ms.max(0.0) * 1e6) as u64).min(gen_ns);
        let eval_ns = gen_ns - prompt_ns;
        let total_ns = load_ns + wait_ns + gen_ns;
        let _ = write!(buf, "\"done_reason\":\"{}\",", self.done_reason);
        let _ = write!(buf, "\"done\":true,\"total_duration\":{total_ns},");
        if load_ns > 0 {
            let _ = write!(buf, "\"load_duration\":{load_ns},");
        }
        let _ = writeln!(
            buf,
            "\"prompt_eval_count\":{},\"prompt_eval_duration\":{prompt_ns},\"eval_count\":{tokens},\"eval_duration\":{eval_ns}}}",
            self.prompt_tokens
        );
    }
}

impl TokenSink for NdjsonSink {
    fn emit(&mut self, index: u64, last: bool) -> bool {
        let mut buf = String::with_capacity(if last { 400 } else { 160 });
        if let Out::Whole(tx, _) = &mut self.out {
            if !last {
                return tx.as_ref().is_some_and(|t| !t.is_closed());
            }
            let Some(tx) = tx.take() else {
                return false;
            };
            self.head(&mut buf);
            self.content(&mut buf, &wire::output_text(index + 1));
            self.stats(&mut buf, index + 1);
            // One object, no trailing newline.
            let text = buf.trim_end().to_owned();
            return tx.send(Bytes::from(text)).is_ok();
        }
        self.head(&mut buf);
        self.content(&mut buf, wire::output_word(index));
        buf.push_str("\"done\":false}\n");
        if last {
            self.head(&mut buf);
            self.content(&mut buf, "");
            self.stats(&mut buf, index + 1);
        }
        match &self.out {
            Out::Stream(tx) => tx.send(Bytes::from(buf)).is_ok(),
            Out::Whole(..) => false,
        }
    }

    fn is_closed(&self) -> bool {
        match &self.out {
            Out::Stream(tx) => tx.is_closed(),
            Out::Whole(tx, _) => tx.as_ref().is_none_or(|t| t.is_closed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_has_nanoseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_749_719_643, 259_874_902);
        assert_eq!(rfc3339(t), "2025-06-12T09:14:03.259874902Z");
    }

    /// Ollama lists no model after a start until a request loads one, and
    /// the restart watch tells a new process by that: so a load that takes
    /// no time (the default) must still wait for a request before the model
    /// is listed, and unload after the keep-alive like any other.
    #[tokio::test]
    async fn ps_lists_the_model_only_once_a_request_loaded_it() {
        let state = ModelState::new();
        let cfg = SimConfig {
            keep_alive_s: 0.05,
            ..SimConfig::default()
        };
        assert_eq!(cfg.load_ms, 0.0, "the default takes no time to load");
        assert!(state.snapshot(&cfg).is_none(), "listed before any request");
        let first = state.acquire(&cfg).await.ok().unwrap();
        assert_eq!(first.0, Duration::ZERO);
        assert!(state.snapshot(&cfg).is_some(), "not listed once loaded");
        drop(first);
        // The keep-alive is 50 ms: wait until it has unloaded the model (a
        // state), bounded so a bug fails rather than hangs.
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.snapshot(&cfg).is_some() {
            assert!(Instant::now() < deadline, "never unloaded");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let again = state.acquire(&cfg).await.ok().unwrap();
        assert_eq!(again.0, Duration::ZERO);
        assert!(state.snapshot(&cfg).is_some(), "not listed once reloaded");
    }

    #[tokio::test]
    async fn load_queue_refuses_the_excess_and_keeps_alive() {
        let state = ModelState::new();
        let cfg = SimConfig {
            load_ms: 50.0,
            max_queue: 2,
            keep_alive_s: 0.05,
            ..SimConfig::default()
        };
        let (a, b, c) = tokio::join!(
            state.acquire(&cfg),
            state.acquire(&cfg),
            state.acquire(&cfg)
        );
        assert!(matches!(c, Err(Refused::Busy)));
        let (a, b) = (a.ok().unwrap(), b.ok().unwrap());
        assert!(a.0 >= Duration::from_millis(50) && b.0 >= Duration::from_millis(40));
        // Loaded: the next one does not wait.
        let d = state.acquire(&cfg).await.ok().unwrap();
        assert_eq!(d.0, Duration::ZERO);
        drop((a, b, d));
        assert!(state.snapshot(&cfg).is_some());
        tokio::time::sleep(Duration::from_millis(80)).await;
        // Idle past the keep-alive: unloaded, and the next request loads again.
        assert!(state.snapshot(&cfg).is_none());
        let e = state.acquire(&cfg).await.ok().unwrap();
        assert!(e.0 >= Duration::from_millis(50));
    }
}
