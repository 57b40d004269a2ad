//! Hugging Face text-generation-inference's native streaming API: the body
//! we send to `/generate_stream` and the SSE token events that come back
//! (docs/architecture.md section 8; captures in `tests/fixtures/captures/tgi/`).
//!
//! One event a generated token, no `[DONE]`:
//! - `data:{"token":{"id":3,"text":" ","logprob":-2.0,"special":false},
//!   "generated_text":null,"details":null}` (newer builds add `index` and
//!   `top_tokens`, and write `data: ` with a space);
//! - the last token's event carries the whole `generated_text` and, when the
//!   request asked `parameters.details`, `details`: `finish_reason`
//!   (`length`, `eos_token`, `stop_sequence`), `generated_tokens` (the
//!   server's own count), `seed`, and since TGI 2 `input_length`;
//! - an error is an event of its own, `{"error":"..","error_type":".."}`.
//!
//! Decoding rules, in the terms of the OpenAI decoder's:
//! - Every token event is `Output` of one token (`tokens: Some(1)`), special
//!   tokens too (an end-of-sequence token with `special: true`): each event
//!   is one step of the server's decode, and `generated_tokens` counts them
//!   all, so TPOT's gaps and its count agree.
//! - The event with a `generated_text` string is the last: `Finish` (from
//!   `details.finish_reason`; `Other` when no details came), then `Usage`
//!   with `details.generated_tokens` as `completion_tokens` and
//!   `details.input_length` as `prompt_tokens`.
//! - An event with OpenAI's `choices` is a server answering the OpenAI API:
//!   the stream fails with a message naming `--backend openai-chat`.
//! - Leaves never fail on valid JSON of an unexpected type; only bytes that
//!   are not SSE of JSON values are malformed.

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::openai::{one_line, snippet, Carries, ErrorField, Finish, Lenient, Num, Text};
use super::sse::{SseError, SseEvent, SseParser};
use super::StreamEvent;
use crate::record::FinishReason;

/// What an OpenAI stream that is TGI's native one fails with.
pub(crate) const TGI_STREAM: &str = "the server answered TGI's native token events \
     (/generate_stream), not an OpenAI-compatible stream: use --backend tgi-generate";

/// What a TGI stream that is an OpenAI one fails with.
pub(crate) const OPENAI_STREAM: &str = "the server answered an OpenAI-compatible stream \
     (choices), not TGI's native token events: use --backend openai-chat";

/// The body is not a TGI token stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedTgi {
    /// The SSE framing failed: bad UTF-8 or an oversized event.
    #[error(transparent)]
    Sse(#[from] SseError),
    /// A `data:` payload that is not JSON. `event` counts data events from 1.
    #[error("event {event} is not valid JSON ({detail}): {snippet}")]
    Json {
        event: u64,
        detail: String,
        snippet: String,
    },
    /// Another API's stream: the message says which backend reads it.
    #[error("{0}")]
    OtherApi(&'static str),
}

/// Turns the raw bytes of one `/generate_stream` answer into `StreamEvent`s.
///
/// Create one per request, or call `finish` (which resets it) and reuse it:
/// its buffer is kept.
#[derive(Debug, Default)]
pub struct TgiDecoder {
    sse: SseParser,
    /// Data events seen so far (for error messages).
    events: u64,
}

impl TgiDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed raw body bytes as they arrive; decoded events are pushed onto
    /// `out` (which the caller clears and reuses). On error, events decoded
    /// before the bad event are already in `out`; the stream is then broken.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<StreamEvent>) -> Result<(), MalformedTgi> {
        let events = &mut self.events;
        self.sse.feed(bytes, |ev| on_event(events, ev, out))
    }

    /// End of the body: decodes a last event the server did not end with a
    /// blank line, then resets the decoder for the next request.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), MalformedTgi> {
        let events = &mut self.events;
        let r = self.sse.finish(|ev| on_event(events, ev, out));
        self.events = 0;
        r
    }
}

fn on_event(
    events: &mut u64,
    ev: SseEvent<'_>,
    out: &mut Vec<StreamEvent>,
) -> Result<(), MalformedTgi> {
    let payload = match ev {
        SseEvent::Data(payload) => payload,
        // TGI sends none; a proxy's `[DONE]` ends nothing more than the body does.
        SseEvent::Done => {
            out.push(StreamEvent::Done);
            return Ok(());
        }
        SseEvent::Comment => return Ok(()),
    };
    *events += 1;
    if payload.trim().is_empty() {
        return Ok(());
    }
    match serde_json::from_str::<Lenient<Event<'_>>>(payload) {
        Ok(Lenient(Some(event))) => on_object(&event, out),
        // JSON, but not an object: not a token event.
        Ok(Lenient(None)) => {
            out.push(StreamEvent::NoOutput);
            Ok(())
        }
        Err(e) => {
            // Valid JSON the struct cannot hold (duplicate keys, say) is not
            // a token event either; only non-JSON is malformed.
            if serde_json::from_str::<IgnoredAny>(payload).is_ok() {
                out.push(StreamEvent::NoOutput);
                return Ok(());
            }
            Err(MalformedTgi::Json {
                event: *events,
                detail: e.to_string(),
                snippet: snippet(payload),
            })
        }
    }
}

fn on_object(event: &Event<'_>, out: &mut Vec<StreamEvent>) -> Result<(), MalformedTgi> {
    if let Some(message) = event.error.0.as_deref() {
        out.push(StreamEvent::Error(one_line(message)));
    }
    let token = event.token.0.is_some();
    if !token && event.choices.0.is_some() {
        return Err(MalformedTgi::OtherApi(OPENAI_STREAM));
    }
    if token {
        out.push(StreamEvent::Output {
            tokens: Some(1),
            reasoning: false,
        });
    } else if event.error.0.is_none() {
        out.push(StreamEvent::NoOutput);
    }
    if event.generated_text.0.is_some() {
        let details = event.details.0;
        out.push(StreamEvent::Finish(
            details
                .and_then(|d| d.finish_reason.0)
                .unwrap_or(FinishReason::Other),
        ));
        if let Some(d) = details {
            out.push(StreamEvent::Usage {
                prompt_tokens: d.input_length.as_u32(),
                completion_tokens: d.generated_tokens.as_u32(),
                reasoning_tokens: None,
                cached_tokens: None,
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Event shape. Every field is optional and every leaf reads wrong-typed JSON
// as absent (the leaves are the OpenAI decoder's).

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Event<'a> {
    token: Lenient<Token>,
    /// A string only on the last event.
    #[serde(borrow)]
    generated_text: Text<'a>,
    details: Lenient<Details>,
    error: ErrorField,
    /// OpenAI's chunks have it; TGI's token events never do.
    choices: Carries,
}

/// Any object: the decoder counts every token, special or not (see the
/// module's rules), so none of its fields is read.
#[derive(serde::Deserialize, Default)]
struct Token {}

#[derive(serde::Deserialize, Clone, Copy, Default)]
#[serde(default)]
struct Details {
    finish_reason: Finish,
    generated_tokens: Num,
    input_length: Num,
}

// ---------------------------------------------------------------------------
// Request.

/// The JSON body of one `/generate_stream` request: `{"inputs": prompt,
/// "parameters": {"max_new_tokens": N, "details": true}}`. `details` makes
/// the last event carry the server's own token count. TGI decodes greedily
/// unless asked to sample, and has no `ignore_eos`: an answer can end early
/// at an end-of-sequence token, which the run counts and flags as short.
///
/// `extra_body`'s keys are merged last, at the top level, except
/// `parameters`: when both are objects, its keys are merged into ours one by
/// one (`{"parameters":{"seed":1}}` keeps `max_new_tokens`). A `parameters`
/// that is not an object replaces ours whole.
pub(crate) fn tgi_request_body(
    prompt: &str,
    max_new_tokens: u32,
    extra_body: Option<&Map<String, Value>>,
) -> Vec<u8> {
    let mut parameters = Map::new();
    parameters.insert("max_new_tokens".into(), Value::from(max_new_tokens));
    parameters.insert("details".into(), Value::Bool(true));
    let mut body = Map::new();
    body.insert("inputs".into(), Value::from(prompt));
    super::merge_extra_body(&mut body, "parameters", parameters, extra_body);
    Value::Object(body).to_string().into_bytes()
}

#[cfg(test)]
#[path = "tgi_tests.rs"]
mod tests;
