//! What the simulator reads and writes on the wire, shaped like vLLM's OpenAI server:
//! request parsing, the word "tokenizer", SSE chunk bytes and the sinks that carry
//! them from the engine to the HTTP connection.
//!
//! The per-token path ([`StreamSink::emit`]) formats into one buffer from a header
//! prebuilt per request (id, object, created, model): no JSON value is built per token.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::engine::TokenSink;

/// Default output length when the request sets neither `max_tokens` nor
/// `max_completion_tokens`.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 16;

/// Output "tokens": a cycling word list. Plain ASCII letters, so no JSON escaping.
const WORDS: [&str; 16] = [
    " lorem",
    " ipsum",
    " dolor",
    " sit",
    " amet",
    " consectetur",
    " adipiscing",
    " elit",
    " sed",
    " do",
    " eiusmod",
    " tempor",
    " incididunt",
    " ut",
    " labore",
    " et",
];

/// The word emitted as output token `index`.
pub(crate) fn output_word(index: u64) -> &'static str {
    WORDS[(index % WORDS.len() as u64) as usize]
}

/// The simulator's tokenizer: whitespace-separated words.
pub(crate) fn count_tokens(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

/// Deterministic token ids for `/tokenize` (FNV-1a of the word, folded into a
/// 50k vocabulary).
pub(crate) fn token_ids(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .map(|w| {
            let mut h: u32 = 0x811c_9dc5;
            for b in w.bytes() {
                h ^= u32::from(b);
                h = h.wrapping_mul(0x0100_0193);
            }
            h % 50_000
        })
        .collect()
}

/// Chained hashes of the whole `block`-word blocks at the start of a request's prompt
/// (the chat messages' texts in order, or the completions prompt; token ids count as
/// words): block `i`'s hash covers blocks `0..=i`, as vLLM's block hashes do. Empty
/// when `block` is 0 or the body does not parse.
pub(crate) fn prefix_blocks(body: &[u8], api: Api, block: u64) -> Vec<u64> {
    if block == 0 {
        return Vec::new();
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let mut words: Vec<u64> = Vec::new();
    let push_text = |s: &str, words: &mut Vec<u64>| {
        words.extend(s.split_whitespace().map(|w| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in w.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            h
        }));
    };
    match api {
        Api::Chat => {
            for m in v
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match m.get("content") {
                    Some(Value::String(s)) => push_text(s, &mut words),
                    Some(Value::Array(parts)) => {
                        for s in parts.iter().filter_map(|p| p.get("text")?.as_str()) {
                            push_text(s, &mut words);
                        }
                    }
                    _ => {}
                }
            }
        }
        Api::Completions => match v.get("prompt") {
            Some(Value::String(s)) => push_text(s, &mut words),
            Some(Value::Array(items)) => {
                for item in items {
                    match item {
                        Value::String(s) => push_text(s, &mut words),
                        other => {
                            if let Some(id) = other.as_u64() {
                                words.push(id.wrapping_add(0x5bd1_e995));
                            }
                        }
                    }
                }
            }
            _ => {}
        },
    }
    let block = usize::try_from(block).unwrap_or(usize::MAX);
    let mut chain = 0u64;
    words
        .chunks_exact(block)
        .map(|c| {
            for &w in c {
                chain = super::noise::splitmix64(chain ^ w);
            }
            chain
        })
        .collect()
}

/// Which OpenAI endpoint a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
}

/// A client error, turned into a 400 with an OpenAI error body.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadRequest(pub String);

#[derive(Debug, Deserialize)]
struct RawRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<RawMessage>>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<RawStreamOptions>,
    // vLLM personality: accepted and moot (it has no EOS); llama.cpp's honours it.
    #[serde(default)]
    ignore_eos: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct RawStreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
    #[serde(default)]
    continuous_usage_stats: Option<bool>,
}

/// A parsed generation request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GenRequest {
    /// The requested model name (echoed back), or None.
    pub model: Option<String>,
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    pub stream: bool,
    pub include_usage: bool,
    /// Usage on every chunk. As in vLLM, only together with `include_usage`.
    pub continuous_usage: bool,
    /// `ignore_eos: true`: a simulated EOS does not end the answer (llama.cpp).
    pub ignore_eos: bool,
}

/// Parse a `/v1/chat/completions` or `/v1/completions` body.
pub(crate) fn parse_gen_request(api: Api, body: &[u8]) -> Result<GenRequest, BadRequest> {
    let raw: RawRequest = serde_json::from_slice(body)
        .map_err(|e| BadRequest(format!("Invalid JSON request body: {e}")))?;
    let prompt_tokens = match api {
        Api::Chat => {
            let messages = raw
                .messages
                .ok_or_else(|| BadRequest("Field required: messages".into()))?;
            let mut n = 0u64;
            for m in &messages {
                n += content_tokens(m.content.as_ref())?;
            }
            n
        }
        Api::Completions => {
            let prompt = raw
                .prompt
                .ok_or_else(|| BadRequest("Field required: prompt".into()))?;
            prompt_value_tokens(&prompt)?
        }
    };
    let max_tokens = raw
        .max_completion_tokens
        .or(raw.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return Err(BadRequest("max_tokens must be at least 1, got 0.".into()));
    }
    let opts = raw.stream_options.unwrap_or_default();
    let include_usage = opts.include_usage.unwrap_or(false);
    Ok(GenRequest {
        model: raw.model,
        prompt_tokens,
        max_tokens,
        stream: raw.stream.unwrap_or(false),
        include_usage,
        continuous_usage: include_usage && opts.continuous_usage_stats.unwrap_or(false),
        ignore_eos: raw.ignore_eos.unwrap_or(false),
    })
}

/// Words in a chat message's `content`: a string, an array of parts (their `text`
/// fields), or null.
pub(crate) fn content_tokens(content: Option<&Value>) -> Result<u64, BadRequest> {
    match content {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(s)) => Ok(count_tokens(s)),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(count_tokens)
            .sum()),
        Some(_) => Err(BadRequest(
            "message content must be a string or an array of parts".into(),
        )),
    }
}

/// Tokens in a completions `prompt`: a string, a one-element array of strings, or an
/// array of token ids.
fn prompt_value_tokens(prompt: &Value) -> Result<u64, BadRequest> {
    match prompt {
        Value::String(s) => Ok(count_tokens(s)),
        Value::Array(items) if items.iter().all(Value::is_u64) => Ok(items.len() as u64),
        Value::Array(items) if items.len() == 1 => match &items[0] {
            Value::String(s) => Ok(count_tokens(s)),
            _ => Err(BadRequest("prompt must be a string".into())),
        },
        Value::Array(_) => Err(BadRequest(
            "batched prompts are not supported by the tokbench simulator".into(),
        )),
        _ => Err(BadRequest("prompt must be a string".into())),
    }
}

/// Text to tokenize from a `/tokenize` body: vLLM's `prompt` (or `messages`), or
/// llama.cpp's `content`. The flag says llama.cpp's shape.
pub(crate) fn parse_tokenize(body: &[u8]) -> Result<(String, bool), BadRequest> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| BadRequest(format!("Invalid JSON request body: {e}")))?;
    if let Some(s) = v.get("prompt").and_then(Value::as_str) {
        return Ok((s.to_owned(), false));
    }
    if let Some(s) = v.get("content").and_then(Value::as_str) {
        return Ok((s.to_owned(), true));
    }
    if let Some(msgs) = v.get("messages").and_then(Value::as_array) {
        let mut text = String::new();
        for m in msgs {
            match m.get("content") {
                Some(Value::String(s)) => {
                    text.push_str(s);
                    text.push(' ');
                }
                Some(Value::Array(parts)) => {
                    for s in parts.iter().filter_map(|p| p.get("text")?.as_str()) {
                        text.push_str(s);
                        text.push(' ');
                    }
                }
                _ => {}
            }
        }
        return Ok((text, false));
    }
    Err(BadRequest(
        "Field required: prompt (or messages, or llama.cpp's content)".into(),
    ))
}

/// Everything needed to write one request's SSE chunks.
#[derive(Clone, Debug)]
pub(crate) struct ChunkFormat {
    api: Api,
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":` (no closing).
    head: String,
    prompt_tokens: u64,
    include_usage: bool,
    continuous_usage: bool,
    /// `finish_reason` of the last token: `length`, or `stop` for a simulated EOS.
    finish_reason: &'static str,
    /// Chat API: the first this many output tokens are reasoning
    /// (`delta.reasoning_content`), and usage reports them in
    /// `completion_tokens_details.reasoning_tokens` ([`super::SimConfig::reasoning_tokens`]).
    reasoning: u64,
    /// Prompt tokens the prefix cache answered, once admitted with a cache on.
    pub cached_tokens: Option<u64>,
}

impl ChunkFormat {
    pub(crate) fn new(api: Api, id: &str, created: u64, model: &str, req: &GenRequest) -> Self {
        let object = match api {
            Api::Chat => "chat.completion.chunk",
            Api::Completions => "text_completion",
        };
        // serde_json escapes a model name that holds quotes or control characters.
        let model = serde_json::to_string(model).unwrap_or_else(|_| "\"\"".into());
        let head = format!(
            "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":{created},\"model\":{model},\"choices\":"
        );
        ChunkFormat {
            api,
            head,
            prompt_tokens: req.prompt_tokens,
            include_usage: req.include_usage,
            continuous_usage: req.continuous_usage,
            finish_reason: "length",
            reasoning: 0,
            cached_tokens: None,
        }
    }

    /// Chat API: the answer's first `n` tokens are reasoning (as a reasoning model's
    /// `reasoning_content`), then content. The completions API has no reasoning field:
    /// there it changes nothing.
    pub(crate) fn with_reasoning(mut self, n: u64) -> Self {
        if self.api == Api::Chat {
            self.reasoning = n;
        }
        self
    }

    /// End the stream with `finish_reason: "stop"` (a simulated EOS) instead of
    /// `length`.
    pub(crate) fn stopped_at_eos(mut self) -> Self {
        self.finish_reason = "stop";
        self
    }

    fn usage(&self, buf: &mut BytesMut, completion_tokens: u64) {
        let p = self.prompt_tokens;
        let _ = write!(
            buf,
            ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{completion_tokens}",
            p + completion_tokens
        );
        if self.reasoning > 0 {
            let _ = write!(
                buf,
                ",\"completion_tokens_details\":{{\"reasoning_tokens\":{}}}",
                self.reasoning.min(completion_tokens)
            );
        }
        if let Some(cached) = self.cached_tokens {
            let _ = write!(
                buf,
                ",\"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}"
            );
        }
        buf.put_slice(b"}");
    }

    fn end_event(&self, buf: &mut BytesMut, completion_tokens: u64) {
        if self.continuous_usage {
            self.usage(buf, completion_tokens);
        }
        buf.put_slice(b"}\n\n");
    }

    /// The chat API's role-only first chunk.
    pub(crate) fn role_chunk(&self, buf: &mut BytesMut) {
        buf.put_slice(self.head.as_bytes());
        buf.put_slice(
            br#"[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]"#,
        );
        self.end_event(buf, 0);
    }

    /// The chunk carrying output token `index`; `last` sets `finish_reason`.
    pub(crate) fn token_chunk(&self, buf: &mut BytesMut, index: u64, last: bool) {
        let word = output_word(index);
        buf.put_slice(self.head.as_bytes());
        match self.api {
            Api::Chat if index < self.reasoning => {
                buf.put_slice(br#"[{"index":0,"delta":{"reasoning_content":""#);
                buf.put_slice(word.as_bytes());
                buf.put_slice(br#""},"logprobs":null,"finish_reason":"#);
            }
            Api::Chat => {
                buf.put_slice(br#"[{"index":0,"delta":{"content":""#);
                buf.put_slice(word.as_bytes());
                buf.put_slice(br#""},"logprobs":null,"finish_reason":"#);
            }
            Api::Completions => {
                buf.put_slice(br#"[{"index":0,"text":""#);
                buf.put_slice(word.as_bytes());
                buf.put_slice(br#"","logprobs":null,"finish_reason":"#);
            }
        }
        if last {
            buf.put_slice(b"\"");
            buf.put_slice(self.finish_reason.as_bytes());
            buf.put_slice(br#"","stop_reason":null}]"#);
        } else if self.api == Api::Completions {
            buf.put_slice(br#"null,"stop_reason":null}]"#);
        } else {
            buf.put_slice(b"null}]");
        }
        self.end_event(buf, index + 1);
    }

    /// The usage-only chunk (`choices: []`) sent after the last token.
    pub(crate) fn usage_chunk(&self, buf: &mut BytesMut, completion_tokens: u64) {
        buf.put_slice(self.head.as_bytes());
        buf.put_slice(b"[]");
        self.usage(buf, completion_tokens);
        buf.put_slice(b"}\n\n");
    }

    /// Bytes for output token `index`: preceded by the role chunk on the chat API's first
    /// token; followed by the usage chunk (when asked) and `[DONE]` on the last.
    pub(crate) fn emit_into(&self, buf: &mut BytesMut, index: u64, last: bool) {
        if index == 0 && self.api == Api::Chat {
            self.role_chunk(buf);
        }
        self.token_chunk(buf, index, last);
        if last {
            if self.include_usage {
                self.usage_chunk(buf, index + 1);
            }
            buf.put_slice(b"data: [DONE]\n\n");
        }
    }

    /// A typical event's size, to size buffers once.
    fn event_capacity(&self) -> usize {
        self.head.len() + 200
    }
}

/// Streams SSE bytes to the HTTP response body. The channel is unbounded because the
/// engine must never wait on one slow client (vLLM buffers too); a stream holds at most
/// `max_tokens` events.
pub(crate) struct StreamSink {
    tx: mpsc::UnboundedSender<Bytes>,
    fmt: ChunkFormat,
    /// Ollama's `/v1`: the model stays loaded while the stream lives.
    hold: Option<super::ollama::ActiveGuard>,
    /// Where the engine's admission time goes (vLLM's account), `CLOCK_MONOTONIC` ns.
    admitted_ns: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl StreamSink {
    pub(crate) fn new(tx: mpsc::UnboundedSender<Bytes>, fmt: ChunkFormat) -> Self {
        StreamSink {
            tx,
            fmt,
            hold: None,
            admitted_ns: None,
        }
    }

    /// Note the time the engine admits this request into `cell`.
    pub(crate) fn marking_admission(
        mut self,
        cell: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        self.admitted_ns = Some(cell);
        self
    }

    /// Keep `guard` (Ollama's model in use) until the stream ends.
    pub(crate) fn holding(mut self, guard: super::ollama::ActiveGuard) -> Self {
        self.hold = Some(guard);
        self
    }
}

/// Result of a non-streaming request: how many tokens were generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Finished {
    pub completion_tokens: u64,
}

/// Either a stream, or a one-shot answer for a non-streaming request.
pub(crate) enum Sink {
    Stream(StreamSink),
    Whole(Option<oneshot::Sender<Finished>>),
    /// Ollama's `/api/generate` and `/api/chat`.
    Ollama(super::ollama::NdjsonSink),
    /// llama.cpp's OpenAI streams, with `timings`.
    Llama(super::llamacpp::LlamaSink),
    /// TGI's `/generate_stream` and its OpenAI chat stream.
    Tgi(super::tgi::TgiSink),
}

/// The output length at which a simulated EOS ends request number `n`: geometric with
/// mean `mean` (each token is the EOS with probability `1 / mean`; at least 1 token), a
/// pure function of `(seed, n)`. None when `mean` is 0 (never).
pub(crate) fn eos_length(mean: f64, seed: u64, n: u64) -> Option<u64> {
    if !(mean.is_finite() && mean > 0.0) {
        return None;
    }
    if mean <= 1.0 {
        return Some(1);
    }
    let key = super::noise::splitmix64(seed ^ 0x5EED_E0E0_0000_0000);
    // 53 random bits -> u in (0, 1].
    let u = ((super::noise::splitmix64(key ^ n) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let len = (u.ln() / (1.0 - 1.0 / mean).ln()).ceil();
    Some(if len >= 1.0 { len.min(1e18) as u64 } else { 1 })
}

impl TokenSink for Sink {
    fn prompt_cached(&mut self, tokens: u64) {
        if let Sink::Stream(s) = self {
            s.fmt.cached_tokens = Some(tokens);
        }
    }

    fn admitted(&mut self, at: std::time::Instant, prefill_ms: f64) {
        match self {
            Sink::Ollama(s) => s.admitted(at, prefill_ms),
            Sink::Llama(s) => s.admitted(at, prefill_ms),
            Sink::Tgi(s) => s.admitted(at, prefill_ms),
            Sink::Stream(s) => super::emission::mark_admitted(s.admitted_ns.as_ref()),
            Sink::Whole(_) => {}
        }
    }

    fn emit(&mut self, index: u64, last: bool) -> bool {
        match self {
            Sink::Ollama(s) => s.emit(index, last),
            Sink::Llama(s) => s.emit(index, last),
            Sink::Tgi(s) => s.emit(index, last),
            Sink::Stream(s) => {
                let events = if index == 0 || last { 3 } else { 1 };
                let mut buf = BytesMut::with_capacity(s.fmt.event_capacity() * events);
                s.fmt.emit_into(&mut buf, index, last);
                if last {
                    s.hold.take();
                }
                // Dropping the sender after the last event ends the response body.
                s.tx.send(buf.freeze()).is_ok()
            }
            Sink::Whole(tx) => {
                if !last {
                    return tx.as_ref().is_some_and(|t| !t.is_closed());
                }
                match tx.take() {
                    Some(t) => t
                        .send(Finished {
                            completion_tokens: index + 1,
                        })
                        .is_ok(),
                    None => false,
                }
            }
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Sink::Stream(s) => s.tx.is_closed(),
            Sink::Whole(tx) => tx.as_ref().is_none_or(|t| t.is_closed()),
            Sink::Ollama(s) => s.is_closed(),
            Sink::Llama(s) => s.is_closed(),
            Sink::Tgi(s) => s.is_closed(),
        }
    }
}

/// The generated text of a non-streaming answer.
pub(crate) fn output_text(tokens: u64) -> String {
    let mut s = String::new();
    for i in 0..tokens {
        s.push_str(output_word(i));
    }
    s
}

/// The non-streaming response object.
pub(crate) fn completion_body(
    api: Api,
    id: &str,
    created: u64,
    model: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> Value {
    let text = output_text(completion_tokens);
    let choice = match api {
        Api::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": null,
            "finish_reason": "length",
            "stop_reason": null
        }),
        Api::Completions => json!({
            "index": 0,
            "text": text,
            "logprobs": null,
            "finish_reason": "length",
            "stop_reason": null
        }),
    };
    let object = match api {
        Api::Chat => "chat.completion",
        Api::Completions => "text_completion",
    };
    json!({
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens
        }
    })
}

/// An OpenAI-style error body.
pub(crate) fn error_body(message: &str, kind: &str, code: u16) -> Value {
    json!({"error": {"message": message, "type": kind, "code": code}})
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
