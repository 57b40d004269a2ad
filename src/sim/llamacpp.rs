//! The `llamacpp` personality: llama.cpp's `llama-server` on the simulated engine.
//!
//! Streams are byte-shaped like the captures in `tests/fixtures/captures/llama-server/`:
//! a chat stream opens with `{"role":"assistant","content":null}` sent together with
//! the first token (the two-event first token), carries one token per chunk, and ends
//! with a `"delta":{}` chunk holding `finish_reason` and `timings` (with
//! `include_usage`, the timings move to the usage-only chunk that follows), then
//! `[DONE]`. `/v1/completions` ends with a `"text":""` chunk carrying usage and
//! timings. `timings` are the sequence's own: `prompt_ms` the prefill share of the
//! step that admitted it, `predicted_ms` the rest up to its last token.
//!
//! `SimConfig::parallel` slots (default 4) run at once; requests beyond them are
//! deferred (FIFO, no limit). A simulated EOS (`SimConfig::eos_mean_tokens`) ends an
//! answer early (`finish_reason: "stop"`) unless the request sets `ignore_eos`.
//! Also `/health`, `/props`, `/slots`, `/tokenize` (`{"content"}` -> `{"tokens"}`),
//! `/metrics` with `llamacpp:` names, `/v1/models`.
//!
//! Like the real server (docs/checked-by-hand.md), it closes
//! the connection after every streamed answer although its HTTP/1.1 headers say
//! nothing of it: a client reusing that connection finds it dead.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use super::engine::TokenSink;
use super::http::{
    full, json_response, read_body, unix_now, with_status, AppState, Body, ChannelBody,
};
use super::wire::{self, Api, GenRequest, Sink};

/// What `/props` reports as `build_info` and the chunks as `system_fingerprint`.
pub(crate) const BUILD_INFO: &str = "b0-tokbench-sim";

fn error(status: StatusCode, message: &str, kind: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"code": status.as_u16(), "message": message, "type": kind}}),
    )
}

fn bad_request(message: &str) -> Response<Body> {
    error(StatusCode::BAD_REQUEST, message, "invalid_request_error")
}

/// All of the llama.cpp personality's routes.
pub(crate) async fn route(
    state: &AppState,
    req: Request<Incoming>,
    close: Arc<Notify>,
) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    match (method, path.as_str()) {
        (Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            generate(state, Api::Chat, req, close).await
        }
        (Method::POST, "/v1/completions" | "/completions") => {
            generate(state, Api::Completions, req, close).await
        }
        (Method::GET, "/health" | "/v1/health") => {
            json_response(StatusCode::OK, &json!({"status": "ok"}))
        }
        (Method::GET, "/props") => props(state),
        (Method::GET, "/slots") => slots(state),
        (Method::POST, "/tokenize") => tokenize(req).await,
        (Method::GET, "/metrics") => {
            let mut r = with_status(StatusCode::OK, full(state.metrics.render_llamacpp()));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (Method::GET, "/v1/models" | "/models") => super::http::models(state),
        _ => error(StatusCode::NOT_FOUND, "File Not Found", "not_found_error"),
    }
}

async fn generate(
    state: &AppState,
    api: Api,
    req: Request<Incoming>,
    close: Arc<Notify>,
) -> Response<Body> {
    let arrived = super::http::arrival(state, &req);
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(_) => return bad_request("could not read the request body"),
    };
    let gen = match wire::parse_gen_request(api, &body) {
        Ok(g) => g,
        Err(e) => return bad_request(&e.0),
    };
    if gen.prompt_tokens.saturating_add(gen.max_tokens) > state.cfg.kv_tokens {
        return bad_request(&format!(
            "the request exceeds the available context size ({} tokens)",
            state.cfg.kv_tokens
        ));
    }
    let eos = if gen.ignore_eos {
        None
    } else {
        state.draw_eos()
    };
    let (max_tokens, stopped) = match eos {
        Some(e) if e < gen.max_tokens => (e, true),
        _ => (gen.max_tokens, false),
    };
    if !gen.stream {
        return whole(state, api, &gen, max_tokens, stopped).await;
    }
    let model = gen
        .model
        .clone()
        .unwrap_or_else(|| state.cfg.model_name.clone());
    // llama-server names completions streams chatcmpl-* too.
    let id = state.new_id(Api::Chat);
    let (tx, rx) = mpsc::unbounded_channel();
    let admission = super::emission::admission_cell();
    let sink = LlamaSink {
        tx,
        fmt: LlamaFormat::new(api, &id, unix_now(), &model, &gen, stopped),
        admitted: None,
        admission: Some(Arc::clone(&admission)),
    };
    if !state.submit(gen.prompt_tokens, max_tokens, Sink::Llama(sink)) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down",
            "unavailable_error",
        );
    }
    let body = super::http::recorded(
        state,
        ChannelBody::new(rx).closing(close),
        arrived,
        || id,
        max_tokens,
        None,
        Some(admission),
    );
    let mut r = with_status(StatusCode::OK, body.boxed_unsync());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// A non-streaming answer (OpenAI shape, `finish_reason` after the EOS draw).
async fn whole(
    state: &AppState,
    api: Api,
    gen: &GenRequest,
    max_tokens: u64,
    stopped: bool,
) -> Response<Body> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if !state.submit(gen.prompt_tokens, max_tokens, Sink::Whole(Some(tx))) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down",
            "unavailable_error",
        );
    }
    let Ok(done) = rx.await else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down",
            "unavailable_error",
        );
    };
    let model = gen.model.as_deref().unwrap_or(&state.cfg.model_name);
    let mut v = wire::completion_body(
        api,
        &state.new_id(Api::Chat),
        unix_now(),
        model,
        gen.prompt_tokens,
        done.completion_tokens,
    );
    if stopped {
        v["choices"][0]["finish_reason"] = json!("stop");
    }
    json_response(StatusCode::OK, &v)
}

fn props(state: &AppState) -> Response<Body> {
    json_response(
        StatusCode::OK,
        &json!({
            "default_generation_settings": {
                "params": {"n_predict": -1, "ignore_eos": false, "stream": false},
                "n_ctx": state.cfg.kv_tokens
            },
            "total_slots": state.cfg.slots(),
            "model_alias": state.cfg.model_name,
            "model_path": format!("models/{}.gguf", state.cfg.model_name),
            "endpoint_slots": true,
            "endpoint_props": false,
            "endpoint_metrics": true,
            "build_info": BUILD_INFO,
            "is_sleeping": false
        }),
    )
}

fn slots(state: &AppState) -> Response<Body> {
    let busy = state.metrics.running.load(Ordering::Relaxed);
    let slots: Vec<Value> = (0..state.cfg.slots())
        .map(|id| {
            json!({
                "id": id,
                "n_ctx": state.cfg.kv_tokens,
                "speculative": false,
                "is_processing": (id as u64) < busy
            })
        })
        .collect();
    json_response(StatusCode::OK, &Value::Array(slots))
}

/// `{"content": text}` -> `{"tokens": [...]}`; anything else (vLLM's `prompt`, say)
/// gets `{"tokens":[]}`, as the real server answers.
async fn tokenize(req: Request<Incoming>) -> Response<Body> {
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(_) => return bad_request("could not read the request body"),
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&format!("invalid JSON: {e}")),
    };
    let text = v.get("content").and_then(Value::as_str).unwrap_or("");
    json_response(StatusCode::OK, &json!({"tokens": wire::token_ids(text)}))
}

/// Everything needed to write one llama.cpp stream.
pub(crate) struct LlamaFormat {
    api: Api,
    /// `,"created":..,"id":..,"model":..,"system_fingerprint":..,"object":..` for chat,
    /// `,"created":..,"model":..,"system_fingerprint":..,"object":..` for completions
    /// (whose `id` comes last).
    tail: String,
    /// `,"id":".."` (completions).
    id_field: String,
    prompt_tokens: u64,
    include_usage: bool,
    finish_reason: &'static str,
}

impl LlamaFormat {
    pub(crate) fn new(
        api: Api,
        id: &str,
        created: u64,
        model: &str,
        req: &GenRequest,
        stopped: bool,
    ) -> Self {
        let model = serde_json::to_string(model).unwrap_or_else(|_| "\"\"".into());
        let tail = match api {
            Api::Chat => format!(
                ",\"created\":{created},\"id\":\"{id}\",\"model\":{model},\"system_fingerprint\":\"{BUILD_INFO}\",\"object\":\"chat.completion.chunk\""
            ),
            Api::Completions => format!(
                ",\"created\":{created},\"model\":{model},\"system_fingerprint\":\"{BUILD_INFO}\",\"object\":\"text_completion\""
            ),
        };
        LlamaFormat {
            api,
            tail,
            id_field: format!(",\"id\":\"{id}\""),
            prompt_tokens: req.prompt_tokens,
            include_usage: req.include_usage,
            finish_reason: if stopped { "stop" } else { "length" },
        }
    }

    fn usage(&self, buf: &mut String, n: u64) {
        let p = self.prompt_tokens;
        let _ = write!(
            buf,
            ",\"usage\":{{\"completion_tokens\":{n},\"prompt_tokens\":{p},\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":0}}}}",
            p + n
        );
    }

    fn timings(&self, buf: &mut String, t: &Timings) {
        let per = |count: u64, ms: f64| {
            if count == 0 || ms <= 0.0 {
                (0.0, 0.0)
            } else {
                (ms / count as f64, count as f64 * 1000.0 / ms)
            }
        };
        let (ppt, pps) = per(self.prompt_tokens, t.prompt_ms);
        let (dpt, dps) = per(t.predicted_n, t.predicted_ms);
        let _ = write!(
            buf,
            ",\"timings\":{{\"cache_n\":0,\"prompt_n\":{},\"prompt_ms\":{:?},\"prompt_per_token_ms\":{ppt:?},\"prompt_per_second\":{pps:?},\"predicted_n\":{},\"predicted_ms\":{:?},\"predicted_per_token_ms\":{dpt:?},\"predicted_per_second\":{dps:?}}}",
            self.prompt_tokens, t.prompt_ms, t.predicted_n, t.predicted_ms
        );
    }

    /// Bytes for output token `index`; on the first, the role chunk before it (chat);
    /// on the last, the finish chunk, the usage chunk (when asked) and `[DONE]`.
    pub(crate) fn emit_into(&self, buf: &mut String, index: u64, last: Option<&Timings>) {
        let word = wire::output_word(index);
        match self.api {
            Api::Chat => {
                if index == 0 {
                    buf.push_str(
                        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]",
                    );
                    buf.push_str(&self.tail);
                    buf.push_str("}\n\n");
                }
                let _ = write!(
                    buf,
                    "data: {{\"choices\":[{{\"finish_reason\":null,\"index\":0,\"delta\":{{\"content\":\"{word}\"}}}}]{}}}\n\n",
                    self.tail
                );
                let Some(t) = last else { return };
                let _ = write!(
                    buf,
                    "data: {{\"choices\":[{{\"finish_reason\":\"{}\",\"index\":0,\"delta\":{{}}}}]{}",
                    self.finish_reason, self.tail
                );
                if self.include_usage {
                    buf.push_str("}\n\ndata: {\"choices\":[]");
                    buf.push_str(&self.tail);
                    self.usage(buf, t.predicted_n);
                }
                self.timings(buf, t);
                buf.push_str("}\n\ndata: [DONE]\n\n");
            }
            Api::Completions => {
                let _ = write!(
                    buf,
                    "data: {{\"choices\":[{{\"text\":\"{word}\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}}]{}{}}}\n\n",
                    self.tail, self.id_field
                );
                let Some(t) = last else { return };
                let _ = write!(
                    buf,
                    "data: {{\"choices\":[{{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"{}\"}}]{}",
                    self.finish_reason, self.tail
                );
                self.usage(buf, t.predicted_n);
                buf.push_str(&self.id_field);
                self.timings(buf, t);
                buf.push_str("}\n\ndata: [DONE]\n\n");
            }
        }
    }
}

/// A finished sequence's server-side figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Timings {
    pub prompt_ms: f64,
    pub predicted_n: u64,
    pub predicted_ms: f64,
}

/// Streams one llama.cpp answer.
pub(crate) struct LlamaSink {
    tx: mpsc::UnboundedSender<Bytes>,
    fmt: LlamaFormat,
    admitted: Option<(Instant, f64)>,
    /// Marked when the engine gives the request its slot (the emission log's).
    admission: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl LlamaSink {
    pub(crate) fn admitted(&mut self, at: Instant, prefill_ms: f64) {
        self.admitted = Some((at, prefill_ms));
        super::emission::mark_admitted(self.admission.as_ref());
    }
}

impl TokenSink for LlamaSink {
    fn emit(&mut self, index: u64, last: bool) -> bool {
        let timings = last.then(|| {
            let gen_ms = self.admitted.map_or(0.0, |(at, _)| {
                Instant::now().saturating_duration_since(at).as_secs_f64() * 1000.0
            });
            let prompt_ms = self.admitted.map_or(0.0, |(_, p)| p.max(0.0)).min(gen_ms);
            Timings {
                prompt_ms,
                predicted_n: index + 1,
                predicted_ms: gen_ms - prompt_ms,
            }
        });
        let mut buf = String::with_capacity(if last { 1200 } else { 300 });
        self.fmt.emit_into(&mut buf, index, timings.as_ref());
        self.tx.send(Bytes::from(buf)).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(include_usage: bool) -> GenRequest {
        GenRequest {
            model: None,
            prompt_tokens: 38,
            max_tokens: 2,
            stream: true,
            include_usage,
            continuous_usage: false,
            ignore_eos: true,
        }
    }

    fn events(s: &str) -> Vec<Value> {
        s.split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    const T: Timings = Timings {
        prompt_ms: 10.0,
        predicted_n: 2,
        predicted_ms: 25.0,
    };

    #[test]
    fn chat_stream_is_capture_shaped() {
        let f = LlamaFormat::new(Api::Chat, "chatcmpl-x", 7, "m", &req(false), false);
        let mut s = String::new();
        f.emit_into(&mut s, 0, None);
        assert!(s.starts_with(
            "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"created\":7,\"id\":\"chatcmpl-x\",\"model\":\"m\",\"system_fingerprint\":\"b0-tokbench-sim\",\"object\":\"chat.completion.chunk\"}\n\n"
        ));
        f.emit_into(&mut s, 1, Some(&T));
        assert!(s.ends_with("data: [DONE]\n\n"));
        let ev = events(&s);
        assert_eq!(ev.len(), 4);
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], " lorem");
        assert_eq!(ev[3]["choices"][0]["delta"], json!({}));
        assert_eq!(ev[3]["choices"][0]["finish_reason"], "length");
        assert_eq!(ev[3]["timings"]["predicted_n"], 2);
        assert_eq!(ev[3]["timings"]["predicted_per_second"], 80.0);
        assert_eq!(ev[3]["timings"]["prompt_n"], 38);
    }

    #[test]
    fn include_usage_moves_timings_to_the_usage_chunk() {
        let f = LlamaFormat::new(Api::Chat, "chatcmpl-x", 7, "m", &req(true), true);
        let mut s = String::new();
        f.emit_into(&mut s, 0, Some(&T));
        let ev = events(&s);
        assert_eq!(ev.len(), 4);
        assert_eq!(ev[2]["choices"][0]["finish_reason"], "stop");
        assert!(ev[2].get("timings").is_none());
        assert_eq!(ev[3]["choices"], json!([]));
        assert_eq!(ev[3]["usage"]["completion_tokens"], 2);
        assert_eq!(ev[3]["timings"]["predicted_ms"], 25.0);
    }

    #[test]
    fn completions_stream_is_capture_shaped() {
        let f = LlamaFormat::new(Api::Completions, "chatcmpl-x", 7, "m", &req(false), false);
        let mut s = String::new();
        f.emit_into(&mut s, 0, None);
        f.emit_into(&mut s, 1, Some(&T));
        let ev = events(&s);
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[0]["choices"][0]["text"], " lorem");
        assert_eq!(ev[0]["id"], "chatcmpl-x");
        assert_eq!(ev[2]["choices"][0]["text"], "");
        assert_eq!(ev[2]["usage"]["total_tokens"], 40);
        assert_eq!(ev[2]["timings"]["predicted_n"], 2);
    }
}
