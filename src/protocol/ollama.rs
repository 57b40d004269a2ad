//! Ollama's native streaming API: the request body we send to `/api/generate`
//! and `/api/chat`, and the NDJSON stream that comes back (docs/architecture.md
//! section 3).
//!
//! One JSON object per line, no `[DONE]`:
//! - `/api/generate`: `{"model":..,"created_at":..,"response":"The","done":false}`;
//!   a thinking model also sends `"thinking":".."`.
//! - `/api/chat`: `{"model":..,"message":{"role":"assistant","content":"The"},"done":false}`;
//!   `message` may carry `thinking` and `tool_calls`.
//! - The last object has `"done":true`, `done_reason` (`stop`, `length`, ...)
//!   and the server's figures: `total_duration`, `load_duration`,
//!   `prompt_eval_count`, `prompt_eval_duration`, `eval_count`,
//!   `eval_duration` (durations in nanoseconds; Ollama omits a field that is
//!   zero).
//! - An error inside a 200 stream is a line `{"error":"..."}`.
//!
//! Decoding rules, in the same terms as the OpenAI decoder's:
//! - Output = non-empty `response`, `thinking`, `message.content`,
//!   `message.thinking` or `message.tool_calls`. Thinking counts as output
//!   for TTFT, as reasoning does for OpenAI streams.
//! - The `done:true` object yields `Finish` (`length` -> Length, `stop` ->
//!   Stop, anything else or nothing -> Other), then `Usage` and `Timings`.
//!   `Usage.prompt_tokens` is `prompt_eval_count` when it is above zero (a
//!   missing or zero count means a cached prompt, not an empty one: the
//!   workload then keeps its own figure); `Usage.completion_tokens` is
//!   `eval_count` when present.
//! - `Timings` carries the figures in milliseconds (`ServerTimings`: counts
//!   as sent, absent ones `None`; durations absent = 0, so `total_ms` is
//!   0 only when Ollama sent no total). From it the load
//!   task reads server decode tok/s, prefill tok/s, load time and the
//!   slot-wait estimate (`ServerTimings::decode_tok_s`, `prefill_tok_s`,
//!   `load_ms`, `slot_wait_ms`).
//! - Leaves never fail on valid JSON of an unexpected type; only bytes that
//!   are not NDJSON of JSON values are malformed.

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::ndjson::{NdjsonError, NdjsonSplitter};
use super::openai::{one_line, snippet, Carries, ErrorField, Finish, Flag, Lenient, Num};
use super::StreamEvent;
use crate::record::{FinishReason, ServerTimings};

/// Which Ollama endpoint a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OllamaApi {
    /// `/api/generate`: `prompt`, output in `response`.
    Generate,
    /// `/api/chat`: `messages`, output in `message.content`.
    Chat,
}

impl OllamaApi {
    /// The endpoint's path below the server root.
    #[cfg(test)]
    pub(crate) fn path(self) -> &'static str {
        match self {
            OllamaApi::Generate => "/api/generate",
            OllamaApi::Chat => "/api/chat",
        }
    }
}

/// The body is not an Ollama NDJSON stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedNdjson {
    /// The line framing failed: bad UTF-8 or an oversized line.
    #[error(transparent)]
    Framing(#[from] NdjsonError),
    /// A line that is not JSON. `line` counts lines from 1, blank ones too.
    #[error("line {line} is not valid JSON ({detail}): {snippet}")]
    Json {
        line: u64,
        detail: String,
        snippet: String,
    },
}

/// Turns the raw bytes of one streamed Ollama response into `StreamEvent`s.
///
/// Create one per request, or call `reset` (or `finish`, which resets) and
/// reuse it: its buffer is kept.
#[derive(Debug, Default)]
pub struct OllamaDecoder {
    lines: NdjsonSplitter,
}

impl OllamaDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget the current stream; keep the buffer.
    pub fn reset(&mut self) {
        self.lines.reset();
    }

    /// Feed raw body bytes as they arrive; decoded events are pushed onto
    /// `out` (which the caller clears and reuses). On error, events decoded
    /// before the bad line are already in `out`; the stream is then broken.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), MalformedNdjson> {
        self.lines.feed(bytes, |n, line| on_line(n, line, out))
    }

    /// End of the body: decodes a last line the server did not end with a
    /// newline, then resets the decoder for the next request.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), MalformedNdjson> {
        self.lines.finish(|n, line| on_line(n, line, out))
    }
}

fn on_line(number: u64, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), MalformedNdjson> {
    match serde_json::from_str::<Lenient<Line>>(payload) {
        Ok(Lenient(Some(line))) => {
            on_object(line, out);
            Ok(())
        }
        // JSON, but not an object: not a stream object.
        Ok(Lenient(None)) => {
            out.push(StreamEvent::NoOutput);
            Ok(())
        }
        Err(e) => {
            // Valid JSON the struct cannot hold (duplicate keys, say) is not
            // a stream object either; only non-JSON is malformed.
            if serde_json::from_str::<IgnoredAny>(payload).is_ok() {
                out.push(StreamEvent::NoOutput);
                return Ok(());
            }
            Err(MalformedNdjson::Json {
                line: number,
                detail: e.to_string(),
                snippet: snippet(payload),
            })
        }
    }
}

fn on_object(line: Line, out: &mut Vec<StreamEvent>) {
    let error = line.error.0.as_deref();
    if let Some(message) = error {
        out.push(StreamEvent::Error(one_line(message)));
    }

    let message = line.message.0.as_ref();
    let has_output_field = line.response.0.is_some()
        || line.thinking.0.is_some()
        || message.is_some()
        || line.done.0.is_some();
    let content =
        line.response.yes() || message.is_some_and(|m| m.content.yes() || m.tool_calls.yes());
    let thinking = line.thinking.yes() || message.is_some_and(|m| m.thinking.yes());
    if content || thinking {
        out.push(StreamEvent::Output {
            tokens: None,
            reasoning: !content,
        });
    } else if has_output_field || error.is_none() {
        out.push(StreamEvent::NoOutput);
    }

    if line.done.0 == Some(true) {
        out.push(StreamEvent::Finish(
            line.done_reason.0.unwrap_or(FinishReason::Other),
        ));
        let prompt_n = line.prompt_eval_count.as_u32();
        let predicted_n = line.eval_count.as_u32();
        out.push(StreamEvent::Usage {
            prompt_tokens: prompt_n.filter(|&n| n > 0),
            completion_tokens: predicted_n,
            reasoning_tokens: None,
            cached_tokens: None,
        });
        out.push(StreamEvent::Timings(ServerTimings {
            prompt_n,
            prompt_ms: Some(ns_to_ms(line.prompt_eval_duration)),
            predicted_n,
            predicted_ms: Some(ns_to_ms(line.eval_duration)),
            load_ms: ns_to_ms(line.load_duration) as f32,
            total_ms: ns_to_ms(line.total_duration) as f32,
        }));
    }
}

/// Nanoseconds to milliseconds; absent, negative or not a number = 0.
fn ns_to_ms(ns: Num) -> f64 {
    ns.0.filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(0.0, |v| v / 1e6)
}

// ---------------------------------------------------------------------------
// Line shape. Every field is optional and every leaf reads wrong-typed JSON
// as absent (the leaves are the OpenAI decoder's).

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Line {
    /// `/api/generate`.
    response: Carries,
    /// `/api/generate` with `think`.
    thinking: Carries,
    /// `/api/chat`.
    message: Lenient<Message>,
    done: Flag,
    done_reason: Finish,
    error: ErrorField,
    total_duration: Num,
    load_duration: Num,
    prompt_eval_count: Num,
    prompt_eval_duration: Num,
    eval_count: Num,
    eval_duration: Num,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Message {
    content: Carries,
    thinking: Carries,
    tool_calls: Carries,
}

// ---------------------------------------------------------------------------
// Request.

/// The JSON body of one streamed Ollama request.
///
/// Always: `model`, `stream: true`, `options: {"num_predict": N,
/// "temperature": 0}`. Generate sends `prompt`, chat sends `messages:
/// [{"role":"user","content":prompt}]`. No `num_ctx` (a per-request context
/// size that differs from the loaded one makes Ollama reload the model) and
/// no `keep_alive` (left as the server has it), unless `extra_body` has them.
///
/// `extra_body`'s keys are merged last, at the top level: they replace
/// (whole values) or add keys, except `options`: when both are objects, its
/// keys are merged into ours one by one (`{"options":{"num_ctx":8192}}` keeps
/// `num_predict`). An `options` that is not an object replaces ours whole.
pub(crate) fn ollama_request_body(
    api: OllamaApi,
    model: &str,
    prompt: &str,
    num_predict: u32,
    extra_body: Option<&Map<String, Value>>,
) -> Vec<u8> {
    let mut body = super::prompt_body(model, prompt, api == OllamaApi::Chat);
    body.insert("stream".into(), Value::Bool(true));
    let mut options = Map::new();
    options.insert("num_predict".into(), Value::from(num_predict));
    options.insert("temperature".into(), Value::from(0.0));
    super::merge_extra_body(&mut body, "options", options, extra_body);
    Value::Object(body).to_string().into_bytes()
}

#[cfg(test)]
#[path = "ollama_tests.rs"]
mod tests;
