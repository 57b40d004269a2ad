//! OpenAI-compatible streaming: the request body we send and the chunks that
//! come back (`/v1/chat/completions` and `/v1/completions`), plus the one-line
//! message of an HTTP error body.
//!
//! The decoder also reads llama.cpp's native `/completion` stream, which uses
//! the same SSE framing but puts `content`, `stop`, `stop_type`,
//! `tokens_predicted` and `timings` at the top level and sends no `[DONE]`.
//!
//! Decoding rules (docs/architecture.md, section 1: `protocol` is pure):
//! - `choices` is iterated, never indexed: the usage-only chunk has `choices: []`.
//! - Output = non-empty `delta.content`, `delta.reasoning_content`,
//!   `delta.reasoning`, `delta.tool_calls` (or `function_call`), or non-empty
//!   completions `text`. A role-only delta (`"content":""` or `null`) is not.
//! - Payloads are parsed straight into small structs whose leaves never fail
//!   on valid JSON of an unexpected type (a string where a number was
//!   expected reads as "absent"): only bytes that are not JSON make a
//!   `MalformedStream`. Strings we only test for emptiness are never copied.
//!
//! Files: `decoder` (the per-stream state), `fast` (the one-pass reader of
//! the common chunk), `leaves` (the lenient serde leaves), `request` (the
//! request body); this file holds the public types and the chunk's shape.
//! Error bodies are read in `protocol::error_body`.

use serde::de::SeqAccess;

use super::sse::SseError;
use crate::record::FinishReason;

#[macro_use]
mod leaves;
mod decoder;
mod fast;
mod request;

pub(crate) use super::error_body::error_message_from_body;
pub(super) use super::error_body::{one_line, snippet};
pub use decoder::OpenAiDecoder;
pub(super) use leaves::{Carries, ErrorField, Finish, Flag, Lenient, Num, Text};
pub use request::request_body;

// What the tests (`openai_tests.rs`, `use super::*`) reach besides the above.
#[cfg(test)]
use {
    super::StreamEvent, crate::record::ServerTimings, decoder::ChunkState, serde::de::IgnoredAny,
    serde_json::Value,
};

/// Which OpenAI-compatible endpoint a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// `/v1/chat/completions`: `messages`, output in `choices[].delta`.
    Chat,
    /// `/v1/completions`: `prompt`, output in `choices[].text`.
    Completions,
}

/// The body is not an OpenAI-compatible event stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedStream {
    /// The SSE framing failed: bad UTF-8 or an oversized event.
    #[error(transparent)]
    Sse(#[from] SseError),
    /// A `data:` payload that is not JSON. `chunk` counts data events from 1.
    #[error("chunk {chunk} is not valid JSON ({detail}): {snippet}")]
    Json {
        chunk: u64,
        detail: String,
        snippet: String,
    },
    /// Another API's stream (TGI's native token events): the message says
    /// which backend reads it.
    #[error("{0}")]
    OtherApi(&'static str),
}

// Chunk shape. Every field is optional and every leaf reads wrong-typed JSON
// as absent, so valid JSON never fails to decode on a type mismatch.

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Chunk<'a> {
    choices: Choices,
    usage: Lenient<Usage>,
    timings: Lenient<Timings>,
    error: ErrorField,
    #[serde(borrow)]
    object: Text<'a>,
    #[serde(borrow)]
    message: Text<'a>,
    // llama.cpp native `/completion`.
    content: Carries,
    stop: Flag,
    #[serde(borrow)]
    stop_type: Text<'a>,
    stopped_eos: Flag,
    stopped_limit: Flag,
    stopped_word: Flag,
    tokens_predicted: Num,
    tokens_evaluated: Num,
    tokens_cached: Num,
    /// TGI's native `/generate_stream` event (`{"token":{..}}`): the wrong API.
    token: Carries,
}

#[derive(serde::Deserialize, Clone, Copy, Default)]
#[serde(default)]
struct Usage {
    prompt_tokens: Num,
    completion_tokens: Num,
    completion_tokens_details: Lenient<CompletionDetails>,
    prompt_tokens_details: Lenient<PromptDetails>,
}

#[derive(serde::Deserialize, Clone, Copy, Default)]
#[serde(default)]
struct CompletionDetails {
    reasoning_tokens: Num,
}

#[derive(serde::Deserialize, Clone, Copy, Default)]
#[serde(default)]
struct PromptDetails {
    cached_tokens: Num,
}

#[derive(serde::Deserialize, Clone, Copy, Default)]
#[serde(default)]
struct Timings {
    cache_n: Num,
    prompt_n: Num,
    prompt_ms: Num,
    predicted_n: Num,
    predicted_ms: Num,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Choice {
    delta: Lenient<Delta>,
    /// Completions API.
    text: Carries,
    finish_reason: Finish,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Delta {
    content: Carries,
    reasoning_content: Carries,
    reasoning: Carries,
    tool_calls: Carries,
    function_call: Carries,
}

impl Choice {
    /// Whether it carried output at all, and whether that output included
    /// anything but reasoning (content, a tool call, completions text).
    fn output(&self) -> (bool, bool) {
        let (reasoning, content) = self.delta.0.as_ref().map_or((false, false), |d| {
            (
                d.reasoning_content.yes() || d.reasoning.yes(),
                d.content.yes() || d.tool_calls.yes() || d.function_call.yes(),
            )
        });
        let content = content || self.text.yes();
        (reasoning || content, content)
    }
}

/// `choices` folded as it is read, with no Vec: how many, whether any carried
/// output, the first finish reason. `None`: absent or not an array.
#[derive(Default)]
struct Choices(Option<ChoicesSummary>);

#[derive(Clone, Copy, Default)]
struct ChoicesSummary {
    count: usize,
    output: bool,
    /// Some choice carried content (not only reasoning).
    content: bool,
    finish: Option<FinishReason>,
}

leaf!(Choices, "an array of choices", {
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices, A::Error> {
        let mut s = ChoicesSummary::default();
        while let Some(Lenient(choice)) = seq.next_element::<Lenient<Choice>>()? {
            s.count += 1;
            if let Some(choice) = choice {
                let (output, content) = choice.output();
                s.output |= output;
                s.content |= content;
                s.finish = s.finish.or(choice.finish_reason.0);
            }
        }
        Ok(Choices(Some(s)))
    }
    others_as!(Choices(None); bool, i64, u64, f64, str, unit, none, map);
});

#[cfg(test)]
#[path = "../openai_tests.rs"]
mod tests;
