//! OpenAI-compatible streaming: the request body we send and the chunks that
//! come back (`/v1/chat/completions` and `/v1/completions`), plus the one-line
//! message of an HTTP error body.
//!
//! The decoder also reads llama.cpp's native `/completion` stream, which uses
//! the same SSE framing but puts `content`, `stop`, `stop_type`,
//! `tokens_predicted` and `timings` at the top level and sends no `[DONE]`.
//!
//! Decoding rules (DESIGN.md sections 2 and 3):
//! - `choices` is iterated, never indexed: the usage-only chunk has `choices: []`.
//! - Output = non-empty `delta.content`, `delta.reasoning_content`,
//!   `delta.reasoning`, `delta.tool_calls` (or `function_call`), or non-empty
//!   completions `text`. A role-only delta (`"content":""` or `null`) is not.
//! - Payloads are parsed straight into small structs whose leaves never fail
//!   on valid JSON of an unexpected type (a string where a number was
//!   expected reads as "absent"): only bytes that are not JSON make a
//!   `MalformedStream`. Strings we only test for emptiness are never copied.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::sse::{SseError, SseEvent, SseParser};
use super::StreamEvent;
use crate::record::{FinishReason, ServerTimings};

/// Longest message kept from a server error, in characters.
const MAX_MESSAGE_CHARS: usize = 200;
/// How much of an undecodable chunk goes into the error message.
const SNIPPET_CHARS: usize = 60;

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
}

/// Turns the raw bytes of one streamed response into `StreamEvent`s.
///
/// Create one per request, or call `reset` (or `finish`, which resets) and
/// reuse it: its buffers are kept.
#[derive(Debug, Default)]
pub struct OpenAiDecoder {
    sse: SseParser,
    state: ChunkState,
}

/// Per-request decoding state, apart from the SSE framing so that the SSE
/// callback can borrow it while the parser is borrowed too.
#[derive(Debug)]
struct ChunkState {
    /// Data events seen so far (for error messages).
    chunks: u64,
    /// Last cumulative completion-token count seen (`usage.completion_tokens`
    /// or native `tokens_predicted`); the next chunk's count is the
    /// difference to it.
    last_cumulative: Option<u32>,
    /// Every output chunk so far carried a cumulative count. Once one did
    /// not, counts on later chunks (say, usage on a final chunk that also
    /// carries text) are totals, not per-chunk steps: `tokens` stays `None`.
    every_output_counted: bool,
    /// The fast reader's memory of the bytes every chunk of this stream
    /// starts with.
    prefix: fast::Prefix,
}

impl Default for ChunkState {
    fn default() -> Self {
        ChunkState {
            chunks: 0,
            last_cumulative: None,
            every_output_counted: true,
            prefix: fast::Prefix::default(),
        }
    }
}

impl OpenAiDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget the current stream; keep the buffers.
    pub fn reset(&mut self) {
        self.sse.reset();
        self.state = ChunkState::default();
    }

    /// Feed raw body bytes as they arrive; decoded events are pushed onto
    /// `out` (which the caller clears and reuses). On error, events decoded
    /// before the bad chunk are already in `out`; the stream is then broken.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), MalformedStream> {
        let state = &mut self.state;
        self.sse.feed(bytes, |ev| state.on_event(ev, out))
    }

    /// End of the body: decodes a last event the server did not terminate
    /// with a blank line, then resets the decoder for the next request.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), MalformedStream> {
        let state = &mut self.state;
        let r = self.sse.finish(|ev| state.on_event(ev, out));
        self.state = ChunkState::default();
        r
    }
}

impl ChunkState {
    fn on_event(
        &mut self,
        ev: SseEvent<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), MalformedStream> {
        match ev {
            SseEvent::Data(payload) => self.on_data(payload, out),
            SseEvent::Done => {
                out.push(StreamEvent::Done);
                Ok(())
            }
            SseEvent::Comment => Ok(()),
        }
    }

    fn on_data(
        &mut self,
        payload: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), MalformedStream> {
        self.chunks += 1;
        if payload.trim().is_empty() {
            // A bare `data:` carries nothing; not worth failing a request over.
            return Ok(());
        }
        if let Some(chunk) = fast::chunk(payload, &mut self.prefix) {
            self.on_chunk(chunk, out);
            return Ok(());
        }
        let chunk = match serde_json::from_str::<Lenient<Chunk<'_>>>(payload) {
            Ok(Lenient(Some(chunk))) => chunk,
            // JSON, but not an object: not a chunk.
            Ok(Lenient(None)) => {
                out.push(StreamEvent::NoOutput);
                return Ok(());
            }
            Err(e) => {
                // Valid JSON the structs cannot hold (duplicate keys, say) is
                // not a chunk either; only non-JSON is malformed.
                if serde_json::from_str::<IgnoredAny>(payload).is_ok() {
                    out.push(StreamEvent::NoOutput);
                    return Ok(());
                }
                return Err(MalformedStream::Json {
                    chunk: self.chunks,
                    detail: e.to_string(),
                    snippet: snippet(payload),
                });
            }
        };
        self.on_chunk(chunk, out);
        Ok(())
    }

    fn on_chunk(&mut self, c: Chunk<'_>, out: &mut Vec<StreamEvent>) {
        let mut recognized = false;

        if let Some(message) = c.error.0.as_deref() {
            out.push(StreamEvent::Error(one_line(message)));
            recognized = true;
        } else if c.object.0.as_deref() == Some("error") {
            let message = c.message.0.as_deref().unwrap_or("error");
            out.push(StreamEvent::Error(one_line(message)));
            recognized = true;
        }

        let native = c.choices.0.is_none() && (c.content.0.is_some() || c.stop.0.is_some());
        let cumulative = if native {
            c.tokens_predicted.as_u32()
        } else {
            c.usage.0.and_then(|u| u.completion_tokens.as_u32())
        };
        let step = cumulative.map(|n| n.saturating_sub(self.last_cumulative.unwrap_or(0)));
        if cumulative.is_some() {
            self.last_cumulative = cumulative;
        }

        if let Some(choices) = c.choices.0.filter(|ch| ch.count > 0) {
            recognized = true;
            let reasoning = choices.output && !choices.content;
            self.output_or_not(choices.output, reasoning, step, out);
            if let Some(reason) = choices.finish {
                out.push(StreamEvent::Finish(reason));
            }
        } else if native {
            recognized = true;
            self.output_or_not(c.content.yes(), false, step, out);
            if c.stop.0 == Some(true) {
                out.push(StreamEvent::Finish(native_finish(&c)));
                out.push(StreamEvent::Usage {
                    prompt_tokens: c.tokens_evaluated.as_u32(),
                    completion_tokens: c.tokens_predicted.as_u32(),
                    reasoning_tokens: None,
                    cached_tokens: llama_cached(&c),
                });
            }
        }

        if let Some(u) = c.usage.0 {
            recognized = true;
            out.push(StreamEvent::Usage {
                prompt_tokens: u.prompt_tokens.as_u32(),
                completion_tokens: u.completion_tokens.as_u32(),
                reasoning_tokens: u
                    .completion_tokens_details
                    .0
                    .and_then(|d| d.reasoning_tokens.as_u32()),
                cached_tokens: u
                    .prompt_tokens_details
                    .0
                    .and_then(|d| d.cached_tokens.as_u32())
                    .or_else(|| llama_cached(&c)),
            });
        } else if !native {
            // llama.cpp's OpenAI streams without `include_usage` still say
            // how much of the prompt came from its cache, in `timings`.
            if let Some(cached) = llama_cached(&c) {
                out.push(StreamEvent::Usage {
                    prompt_tokens: None,
                    completion_tokens: None,
                    reasoning_tokens: None,
                    cached_tokens: Some(cached),
                });
            }
        }
        if let Some(t) = c.timings.0 {
            recognized = true;
            out.push(StreamEvent::Timings(ServerTimings {
                prompt_n: t.prompt_n.as_u32(),
                prompt_ms: t.prompt_ms.0,
                predicted_n: t.predicted_n.as_u32(),
                predicted_ms: t.predicted_ms.0,
                ..ServerTimings::default()
            }));
        }
        if !recognized {
            out.push(StreamEvent::NoOutput);
        }
    }

    fn output_or_not(
        &mut self,
        output: bool,
        reasoning: bool,
        step: Option<u32>,
        out: &mut Vec<StreamEvent>,
    ) {
        if !output {
            out.push(StreamEvent::NoOutput);
            return;
        }
        let tokens = match step {
            Some(k) if self.every_output_counted => Some(k),
            _ => {
                self.every_output_counted = false;
                None
            }
        };
        out.push(StreamEvent::Output { tokens, reasoning });
    }
}

/// llama.cpp's prompt-cache figure: `timings.cache_n` (prompt tokens reused),
/// else native `/completion`'s `tokens_cached`.
fn llama_cached(c: &Chunk<'_>) -> Option<u32> {
    c.timings
        .0
        .and_then(|t| t.cache_n.as_u32())
        .or_else(|| c.tokens_cached.as_u32())
}

/// llama.cpp native `/completion`: `stop_type` is `limit`, `eos`, `word` or
/// `none`; older builds said `stopped_limit` / `stopped_eos` / `stopped_word`.
fn native_finish(c: &Chunk<'_>) -> FinishReason {
    match c.stop_type.0.as_deref() {
        Some("limit") => FinishReason::Length,
        Some("eos") | Some("word") => FinishReason::Stop,
        _ if c.stopped_limit.0 == Some(true) => FinishReason::Length,
        _ if c.stopped_eos.0 == Some(true) || c.stopped_word.0 == Some(true) => FinishReason::Stop,
        _ => FinishReason::Other,
    }
}

/// For the leaf visitors: every scalar JSON type (and null) yields `$none`.
macro_rules! scalars_as {
    ($none:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}

// ---------------------------------------------------------------------------
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

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Choices;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices")
            }
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
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Choices, A::Error> {
                drain_map(map).map(|_| Choices(None))
            }
            scalars_as!(Choices(None));
        }
        d.deserialize_any(V)
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<usize, A::Error> {
    let mut n = 0;
    while seq.next_element::<IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<usize, A::Error> {
    let mut n = 0;
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// An object decoded as `T`; anything else (null, a string, an array) reads as
/// `None` instead of failing.
#[derive(Clone, Copy)]
pub(super) struct Lenient<T>(pub(super) Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lenient<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Lenient(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Lenient<T>, A::Error> {
                drain_seq(seq).map(|_| Lenient(None))
            }
            scalars_as!(Lenient(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Whether a field carries anything: `None` absent; `Some(false)` null, `""`,
/// `[]`, `{}` or a number/bool; `Some(true)` a non-empty string, array or
/// object. Reads strings without copying them.
#[derive(Default)]
pub(super) struct Carries(pub(super) Option<bool>);

impl Carries {
    pub(super) fn yes(&self) -> bool {
        self.0 == Some(true)
    }
}

impl<'de> Deserialize<'de> for Carries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Carries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Carries, E> {
                Ok(Carries(Some(!s.is_empty())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Carries, A::Error> {
                drain_seq(seq).map(|n| Carries(Some(n > 0)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Carries, A::Error> {
                drain_map(map).map(|n| Carries(Some(n > 0)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Carries, E> {
                Ok(Carries(Some(false)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Carries, E> {
                Ok(Carries(Some(false)))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Carries, E> {
                Ok(Carries(Some(false)))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Carries, E> {
                Ok(Carries(Some(false)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Carries, E> {
                Ok(Carries(Some(false)))
            }
            fn visit_none<E: de::Error>(self) -> Result<Carries, E> {
                Ok(Carries(Some(false)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number, or `None` for anything else.
#[derive(Clone, Copy, Default)]
pub(super) struct Num(pub(super) Option<f64>);

impl Num {
    /// As a count: non-negative, whole part, capped at `u32::MAX`.
    pub(super) fn as_u32(self) -> Option<u32> {
        self.0
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.min(u32::MAX as f64) as u32)
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(Some(v as f64)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(Some(v as f64)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num(Some(v)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Num, A::Error> {
                drain_seq(seq).map(|_| Num(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Num, A::Error> {
                drain_map(map).map(|_| Num(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A boolean, or `None` for anything else.
#[derive(Clone, Copy, Default)]
pub(super) struct Flag(pub(super) Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Flag, A::Error> {
                drain_seq(seq).map(|_| Flag(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Flag, A::Error> {
                drain_map(map).map(|_| Flag(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string (borrowed when it has no escapes), or `None` for anything else.
#[derive(Default)]
pub(super) struct Text<'a>(pub(super) Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(s))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text<'a>, A::Error> {
                drain_seq(seq).map(|_| Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text<'a>, A::Error> {
                drain_map(map).map(|_| Text(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `finish_reason`, parsed without copying; `None` for null or a non-string.
#[derive(Clone, Copy, Default)]
pub(super) struct Finish(pub(super) Option<FinishReason>);

impl<'de> Deserialize<'de> for Finish {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Finish;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a finish reason")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Finish, E> {
                Ok(Finish(Some(FinishReason::parse(s))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Finish, E> {
                Ok(Finish(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Finish, E> {
                Ok(Finish(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Finish, E> {
                Ok(Finish(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Finish, E> {
                Ok(Finish(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Finish, E> {
                Ok(Finish(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Finish, E> {
                Ok(Finish(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Finish, A::Error> {
                drain_seq(seq).map(|_| Finish(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Finish, A::Error> {
                drain_map(map).map(|_| Finish(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The `error` field of a chunk: `"..."` (TGI) or `{"message": "..."}`
/// (OpenAI, SGLang, Ollama's `/v1`). `None` when absent, null, `false` or
/// an empty string. An object without a message falls back to its `type`.
#[derive(Default)]
pub(super) struct ErrorField(pub(super) Option<String>);

impl<'de> Deserialize<'de> for ErrorField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ErrorField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error message or object")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ErrorField, E> {
                Ok(ErrorField((!s.trim().is_empty()).then(|| s.to_owned())))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorField, A::Error> {
                let mut message = None;
                let mut kind = None;
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    let Text(value) = map.next_value::<Text<'de>>()?;
                    match key.as_deref() {
                        Some("message") if message.is_none() => message = value,
                        Some("type") if kind.is_none() => kind = value,
                        _ => {}
                    }
                }
                let text = message
                    .filter(|m| !m.trim().is_empty())
                    .or(kind)
                    .map(Cow::into_owned)
                    .unwrap_or_else(|| "error object without a message".to_owned());
                Ok(ErrorField(Some(text)))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ErrorField, E> {
                Ok(ErrorField(v.then(|| "error".to_owned())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ErrorField, E> {
                Ok(ErrorField(Some(format!("error {v}"))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ErrorField, E> {
                Ok(ErrorField(Some(format!("error {v}"))))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ErrorField, E> {
                Ok(ErrorField(Some(format!("error {v}"))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ErrorField, E> {
                Ok(ErrorField(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<ErrorField, E> {
                Ok(ErrorField(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ErrorField, A::Error> {
                drain_seq(seq).map(|n| ErrorField((n > 0).then(|| "error".to_owned())))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Fast path.

/// The common chunk read in one pass over its bytes, without serde.
///
/// Every token of a stream passes through the decoder, and the generic
/// deserializer above is most of a chunk's client cost. This reader takes
/// the shape nearly every chunk has (vLLM, SGLang, OpenAI, llama.cpp's
/// OpenAI streams): `choices` (deltas, `text`, `finish_reason`), `usage`
/// (with its details), `object`, and keys it skips. It gives up (`None`) on
/// anything else: a key only the full decoder reads (`error`, `message`,
/// `timings`, llama.cpp's native keys), an escaped key or an escaped string
/// whose value matters, a `\u` escape of a surrogate, a duplicate known key,
/// a number it would need that is not a plain integer (or one that might not
/// fit an f64), nesting deeper than 100, or bytes that are not JSON. The
/// full decoder then reads the chunk, so the result is always the one the
/// full decoder gives (`fast_path_agrees_with_serde` checks that).
mod fast {
    use std::borrow::Cow;

    use super::{
        Carries, Choices, ChoicesSummary, Chunk, CompletionDetails, Delta, Finish, Lenient, Num,
        PromptDetails, Text, Usage,
    };
    use crate::record::FinishReason;

    const MAX_DEPTH: usize = 100;

    /// A prefix shorter than this is not worth remembering.
    const MIN_PREFIX: usize = 16;

    /// The bytes before the first key that matters, as the last chunk read
    /// had them: in a vLLM stream every chunk starts with the same
    /// `{"id":..,"object":..,"created":..,"model":..,`. A chunk that starts
    /// with the same bytes is read from where they end: the reader's state
    /// there (inside the object, a key next, `object` read) depends on those
    /// bytes alone, and they were valid JSON up to there when first read.
    #[derive(Debug, Default)]
    pub(super) struct Prefix {
        bytes: Vec<u8>,
        /// Known keys among them (`Seen` bits).
        seen: u32,
        /// Where `object`'s string lies in them, when it is there.
        object: Option<(usize, usize)>,
    }

    impl Prefix {
        /// How many bytes are remembered.
        #[cfg(test)]
        pub(super) fn len(&self) -> usize {
            self.bytes.len()
        }
    }

    pub(super) fn chunk<'a>(payload: &'a str, prefix: &mut Prefix) -> Option<Chunk<'a>> {
        let mut r = Reader {
            b: payload.as_bytes(),
            i: 0,
        };
        let mut c = Chunk::default();
        let mut seen = Seen(0);
        let resumed = !prefix.bytes.is_empty() && r.b.starts_with(&prefix.bytes);
        // While only keys that can be remembered have been read: the object
        // string's place, then where the first other key starts.
        let mut plain = !resumed;
        let mut object_at = None;
        let mut boundary = None;
        if resumed {
            r.i = prefix.bytes.len();
            seen.0 = prefix.seen;
            if let Some((start, end)) = prefix.object {
                c.object = Text(Some(Cow::Borrowed(payload.get(start..end)?)));
            }
        } else {
            if !r.eat(b'{') {
                return None;
            }
            if r.eat(b'}') {
                r.ws();
                return (r.i == r.b.len()).then_some(c);
            }
        }
        loop {
            r.ws();
            let key_start = r.i;
            let (key, escaped) = r.string()?;
            if escaped || !r.eat(b':') {
                return None;
            }
            match key {
                b"choices" | b"usage" if plain => {
                    plain = false;
                    boundary = Some((key_start, seen.0));
                }
                _ => {}
            }
            match key {
                b"choices" => {
                    seen.once(0)?;
                    c.choices = r.choices()?;
                }
                b"usage" => {
                    seen.once(1)?;
                    c.usage = r.usage()?;
                }
                b"object" => {
                    seen.once(2)?;
                    c.object = r.text()?;
                    if let (true, Text(Some(Cow::Borrowed(text)))) = (plain, &c.object) {
                        let start = text.as_ptr() as usize - payload.as_ptr() as usize;
                        object_at = Some((start, start + text.len()));
                    }
                }
                b"error" | b"message" | b"timings" | b"content" | b"stop" | b"stop_type"
                | b"stopped_eos" | b"stopped_limit" | b"stopped_word" | b"tokens_predicted"
                | b"tokens_evaluated" | b"tokens_cached" => return None,
                _ => r.skip(0)?,
            }
            if r.eat(b',') {
                continue;
            }
            if r.eat(b'}') {
                break;
            }
            return None;
        }
        r.ws();
        if r.i != r.b.len() {
            return None;
        }
        if let Some((end, seen)) = boundary.filter(|&(end, _)| end >= MIN_PREFIX) {
            prefix.bytes.clear();
            prefix.bytes.extend_from_slice(&r.b[..end]);
            prefix.seen = seen;
            prefix.object = object_at;
        }
        Some(c)
    }

    /// Known keys of one object seen so far (serde fails on a duplicate).
    struct Seen(u32);

    impl Seen {
        fn once(&mut self, bit: u32) -> Option<()> {
            let mask = 1 << bit;
            if self.0 & mask != 0 {
                return None;
            }
            self.0 |= mask;
            Some(())
        }
    }

    /// A value where the full decoder calls `deserialize_any`: its kind,
    /// containers drained (their entries counted).
    enum Kind<'a> {
        Str(&'a [u8], bool),
        Num(&'a [u8]),
        Other,
        Container(usize),
    }

    struct Reader<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl<'a> Reader<'a> {
        fn ws(&mut self) {
            while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
                self.i += 1;
            }
        }

        fn peek(&mut self) -> Option<u8> {
            self.ws();
            self.b.get(self.i).copied()
        }

        fn eat(&mut self, c: u8) -> bool {
            if self.peek() == Some(c) {
                self.i += 1;
                true
            } else {
                false
            }
        }

        fn literal(&mut self, word: &[u8]) -> Option<()> {
            if self.b.get(self.i..self.i + word.len())? == word {
                self.i += word.len();
                Some(())
            } else {
                None
            }
        }

        /// `{ "key": value, ... }`, calling `entry` with the cursor on each value.
        fn object(
            &mut self,
            mut entry: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
        ) -> Option<()> {
            if !self.eat(b'{') {
                return None;
            }
            if self.eat(b'}') {
                return Some(());
            }
            loop {
                let (key, escaped) = self.string()?;
                if escaped || !self.eat(b':') {
                    return None;
                }
                entry(self, key)?;
                if self.eat(b',') {
                    continue;
                }
                return self.eat(b'}').then_some(());
            }
        }

        /// A string's raw bytes (between the quotes) and whether it has escapes.
        fn string(&mut self) -> Option<(&'a [u8], bool)> {
            if self.peek()? != b'"' {
                return None;
            }
            self.i += 1;
            let start = self.i;
            let mut escaped = false;
            loop {
                self.i += plain_run(&self.b[self.i..]);
                match *self.b.get(self.i)? {
                    b'"' => {
                        let s = &self.b[start..self.i];
                        self.i += 1;
                        return Some((s, escaped));
                    }
                    b'\\' => {
                        escaped = true;
                        match *self.b.get(self.i + 1)? {
                            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                            b'u' => {
                                let hex = self.b.get(self.i + 2..self.i + 6)?;
                                let hex = std::str::from_utf8(hex).ok()?;
                                let unit = u16::from_str_radix(hex, 16).ok()?;
                                if !hex.bytes().all(|h| h.is_ascii_hexdigit())
                                    || (0xD800..=0xDFFF).contains(&unit)
                                {
                                    return None;
                                }
                                self.i += 6;
                            }
                            _ => return None,
                        }
                    }
                    0x00..=0x1F => return None,
                    _ => self.i += 1,
                }
            }
        }

        /// A JSON number's bytes.
        fn number(&mut self) -> Option<&'a [u8]> {
            self.ws();
            let start = self.i;
            let digits = |r: &mut Self| {
                let from = r.i;
                while let Some(b'0'..=b'9') = r.b.get(r.i) {
                    r.i += 1;
                }
                r.i > from
            };
            if self.b.get(self.i) == Some(&b'-') {
                self.i += 1;
            }
            match self.b.get(self.i)? {
                b'0' => self.i += 1,
                b'1'..=b'9' => {
                    digits(self);
                }
                _ => return None,
            }
            if self.b.get(self.i) == Some(&b'.') {
                self.i += 1;
                if !digits(self) {
                    return None;
                }
            }
            if let Some(b'e' | b'E') = self.b.get(self.i) {
                self.i += 1;
                if let Some(b'+' | b'-') = self.b.get(self.i) {
                    self.i += 1;
                }
                if !digits(self) {
                    return None;
                }
            }
            Some(&self.b[start..self.i])
        }

        /// Any value, ignored (serde's `IgnoredAny`).
        fn skip(&mut self, depth: usize) -> Option<()> {
            if depth > MAX_DEPTH {
                return None;
            }
            match self.peek()? {
                b'"' => self.string().map(drop),
                b'{' => self.object(|r, _| r.skip(depth + 1)),
                b'[' => self.array(|r| r.skip(depth + 1)).map(drop),
                b't' => self.literal(b"true"),
                b'f' => self.literal(b"false"),
                b'n' => self.literal(b"null"),
                _ => self.number().map(drop),
            }
        }

        /// `[ value, ... ]`, calling `element` with the cursor on each; the count.
        fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<usize> {
            if !self.eat(b'[') {
                return None;
            }
            if self.eat(b']') {
                return Some(0);
            }
            let mut n = 0;
            loop {
                element(self)?;
                n += 1;
                if self.eat(b',') {
                    continue;
                }
                return self.eat(b']').then_some(n);
            }
        }

        /// A value the full decoder reads with `deserialize_any`. Numbers must
        /// be short and without an exponent, so they surely fit an f64 (serde
        /// fails on one that does not).
        fn any(&mut self) -> Option<Kind<'a>> {
            match self.peek()? {
                b'"' => self.string().map(|(s, e)| Kind::Str(s, e)),
                b'{' => {
                    let mut n = 0;
                    self.object(|r, _| {
                        n += 1;
                        r.skip(1)
                    })?;
                    Some(Kind::Container(n))
                }
                b'[' => self.array(|r| r.skip(1)).map(Kind::Container),
                b't' => self.literal(b"true").map(|()| Kind::Other),
                b'f' => self.literal(b"false").map(|()| Kind::Other),
                b'n' => self.literal(b"null").map(|()| Kind::Other),
                _ => {
                    let n = self.number()?;
                    (n.len() <= 20 && !n.iter().any(|&c| c == b'e' || c == b'E'))
                        .then_some(Kind::Num(n))
                }
            }
        }

        fn carries(&mut self) -> Option<Carries> {
            Some(Carries(Some(match self.any()? {
                Kind::Str(s, _) => !s.is_empty(),
                Kind::Container(n) => n > 0,
                Kind::Num(_) | Kind::Other => false,
            })))
        }

        fn finish(&mut self) -> Option<Finish> {
            match self.any()? {
                Kind::Str(_, true) => None,
                Kind::Str(s, false) => Some(Finish(Some(FinishReason::parse(
                    std::str::from_utf8(s).ok()?,
                )))),
                _ => Some(Finish(None)),
            }
        }

        fn text(&mut self) -> Option<Text<'a>> {
            match self.any()? {
                Kind::Str(_, true) => None,
                Kind::Str(s, false) => {
                    Some(Text(Some(Cow::Borrowed(std::str::from_utf8(s).ok()?))))
                }
                _ => Some(Text(None)),
            }
        }

        /// A count: plain digits only (anything else goes to the full decoder,
        /// whose float parsing then decides), at most 15 so the f64 is exact.
        fn num(&mut self) -> Option<Num> {
            match self.any()? {
                Kind::Num(n) if n.len() <= 15 && n.iter().all(u8::is_ascii_digit) => {
                    let v = n
                        .iter()
                        .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
                    Some(Num(Some(v as f64)))
                }
                Kind::Num(_) => None,
                _ => Some(Num(None)),
            }
        }

        /// `Lenient<T>`: an object read by `fields`, anything else `None`.
        fn lenient<T: Default>(
            &mut self,
            mut fields: impl FnMut(&mut Self, &'a [u8], &mut T, &mut Seen) -> Option<()>,
        ) -> Option<Lenient<T>> {
            if self.peek()? != b'{' {
                return self.any().map(|_| Lenient(None));
            }
            let mut t = T::default();
            let mut seen = Seen(0);
            self.object(|r, key| fields(r, key, &mut t, &mut seen))?;
            Some(Lenient(Some(t)))
        }

        fn choices(&mut self) -> Option<Choices> {
            if self.peek()? != b'[' {
                return self.any().map(|_| Choices(None));
            }
            let mut s = ChoicesSummary::default();
            self.array(|r| {
                let choice = r.lenient(|r, key, ch: &mut Choice, seen| {
                    match key {
                        b"delta" => {
                            seen.once(0)?;
                            ch.delta = r.delta()?;
                        }
                        b"text" => {
                            seen.once(1)?;
                            ch.text = r.carries()?;
                        }
                        b"finish_reason" => {
                            seen.once(2)?;
                            ch.finish = r.finish()?;
                        }
                        _ => r.skip(1)?,
                    }
                    Some(())
                })?;
                s.count += 1;
                if let Some(ch) = choice.0 {
                    let (output, content) = super::Choice {
                        delta: ch.delta,
                        text: ch.text,
                        finish_reason: ch.finish,
                    }
                    .output();
                    s.output |= output;
                    s.content |= content;
                    s.finish = s.finish.or(ch.finish.0);
                }
                Some(())
            })?;
            Some(Choices(Some(s)))
        }

        fn delta(&mut self) -> Option<Lenient<Delta>> {
            self.lenient(|r, key, d: &mut Delta, seen| {
                let (bit, field) = match key {
                    b"content" => (0, &mut d.content),
                    b"reasoning_content" => (1, &mut d.reasoning_content),
                    b"reasoning" => (2, &mut d.reasoning),
                    b"tool_calls" => (3, &mut d.tool_calls),
                    b"function_call" => (4, &mut d.function_call),
                    _ => return r.skip(2),
                };
                seen.once(bit)?;
                *field = r.carries()?;
                Some(())
            })
        }

        fn usage(&mut self) -> Option<Lenient<Usage>> {
            self.lenient(|r, key, u: &mut Usage, seen| {
                match key {
                    b"prompt_tokens" => {
                        seen.once(0)?;
                        u.prompt_tokens = r.num()?;
                    }
                    b"completion_tokens" => {
                        seen.once(1)?;
                        u.completion_tokens = r.num()?;
                    }
                    b"completion_tokens_details" => {
                        seen.once(2)?;
                        u.completion_tokens_details =
                            r.lenient(|r, key, d: &mut CompletionDetails, seen| {
                                if key == b"reasoning_tokens" {
                                    seen.once(0)?;
                                    d.reasoning_tokens = r.num()?;
                                    Some(())
                                } else {
                                    r.skip(2)
                                }
                            })?;
                    }
                    b"prompt_tokens_details" => {
                        seen.once(3)?;
                        u.prompt_tokens_details =
                            r.lenient(|r, key, d: &mut PromptDetails, seen| {
                                if key == b"cached_tokens" {
                                    seen.once(0)?;
                                    d.cached_tokens = r.num()?;
                                    Some(())
                                } else {
                                    r.skip(2)
                                }
                            })?;
                    }
                    _ => r.skip(1)?,
                }
                Some(())
            })
        }
    }

    /// How many bytes at the start of `b` need no attention inside a string
    /// (not `"`, `\\` or a control character): eight at a time (SWAR).
    #[inline]
    pub(super) fn plain_run(b: &[u8]) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        // High bit set for each byte below `n` (exact for the lowest such
        // byte; bytes of 0x80 and up never count).
        let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGHS;
        let mut i = 0;
        while i + 8 <= b.len() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&b[i..i + 8]);
            let w = u64::from_le_bytes(word);
            let hits = below(w ^ (ONES * u64::from(b'"')), 1)
                | below(w ^ (ONES * u64::from(b'\\')), 1)
                | below(w, 0x20);
            if hits != 0 {
                return i + (hits.trailing_zeros() / 8) as usize;
            }
            i += 8;
        }
        i
    }

    /// One choice's fields, gathered before they become a `super::Choice`.
    #[derive(Default)]
    struct Choice {
        delta: Lenient<Delta>,
        text: Carries,
        finish: Finish,
    }
}

// ---------------------------------------------------------------------------
// Messages.

/// One line, trimmed, control characters as spaces, at most
/// `MAX_MESSAGE_CHARS` characters (then `...`).
pub(super) fn one_line(s: &str) -> String {
    cap_chars(s.trim(), MAX_MESSAGE_CHARS)
}

fn cap_chars(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 3));
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.truncate(out.trim_end().len());
            out.push_str("...");
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

pub(super) fn snippet(payload: &str) -> String {
    format!("{:?}", cap_chars(payload.trim(), SNIPPET_CHARS))
}

/// A one-line message from an HTTP error body: `{"error":{"message":..}}`,
/// `{"error":".."}`, `{"object":"error","message":..}`, `{"detail":..}`
/// (FastAPI, including its list of validation errors), an HTML page's
/// `<title>`, else the body's first non-blank line; `HTTP <status>` for an
/// empty body. Trimmed, at most ~200 characters; bad UTF-8 is replaced, never
/// a panic.
pub fn error_message_from_body(status: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = message_from_json(&v) {
            let m = one_line(&m);
            if !m.is_empty() {
                return m;
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    if let Some(title) = html_title(&text) {
        return one_line(title);
    }
    match text.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => one_line(line),
        None => format!("HTTP {status}"),
    }
}

fn message_from_json(v: &Value) -> Option<String> {
    let obj = v.as_object()?;
    let nonblank = |v: Option<&Value>| -> Option<String> {
        v.and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned)
    };
    match obj.get("error") {
        Some(Value::String(s)) if !s.trim().is_empty() => return Some(s.clone()),
        Some(Value::Object(e)) => {
            if let Some(m) = nonblank(e.get("message")).or_else(|| nonblank(e.get("type"))) {
                return Some(m);
            }
        }
        _ => {}
    }
    if let Some(m) = nonblank(obj.get("message")) {
        return Some(m);
    }
    match obj.get("detail") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(Value::Array(items)) => {
            let parts: Vec<String> = items.iter().filter_map(detail_item).collect();
            (!parts.is_empty()).then(|| parts.join("; "))
        }
        Some(Value::Object(o)) => nonblank(o.get("message")).or_else(|| nonblank(o.get("msg"))),
        _ => None,
    }
}

/// One FastAPI validation error: `{"loc":["body","max_tokens"],"msg":"..."}`
/// -> `body.max_tokens: ...`.
fn detail_item(item: &Value) -> Option<String> {
    if let Some(s) = item.as_str() {
        return Some(s.to_owned());
    }
    let msg = item.get("msg").and_then(Value::as_str)?;
    let loc: Vec<String> = item
        .get("loc")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .map(|p| match p {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(if loc.is_empty() {
        msg.to_owned()
    } else {
        format!("{}: {msg}", loc.join("."))
    })
}

fn html_title(text: &str) -> Option<&str> {
    let mut head = text.len().min(4096);
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    // ASCII lowercasing keeps byte offsets, so they index `text` too.
    let lower = text[..head].to_ascii_lowercase();
    let start = lower.find("<title>")? + "<title>".len();
    let end = start + lower[start..].find("</title>")?;
    let title = text.get(start..end)?.trim();
    (!title.is_empty()).then_some(title)
}

// ---------------------------------------------------------------------------
// Request.

/// The JSON body of one streamed request.
///
/// Always: `model`, `stream: true`, `stream_options: {"include_usage": true,
/// "continuous_usage_stats": true}`, `max_tokens`, `temperature: 0`, and
/// `ignore_eos: true` unless `ignore_eos` is false (then the key is absent).
/// Chat sends `messages: [{"role":"user","content":prompt}]`, completions
/// sends `prompt`. `extra_body`'s keys are merged last, at the top level:
/// they replace (whole values, no deep merge) or add keys.
pub fn request_body(
    api: Api,
    model: &str,
    prompt: &str,
    max_tokens: u32,
    ignore_eos: bool,
    extra_body: Option<&Map<String, Value>>,
) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model));
    match api {
        Api::Chat => {
            let mut message = Map::new();
            message.insert("role".into(), Value::from("user"));
            message.insert("content".into(), Value::from(prompt));
            body.insert(
                "messages".into(),
                Value::Array(vec![Value::Object(message)]),
            );
        }
        Api::Completions => {
            body.insert("prompt".into(), Value::from(prompt));
        }
    }
    body.insert("max_tokens".into(), Value::from(max_tokens));
    body.insert("temperature".into(), Value::from(0.0));
    body.insert("stream".into(), Value::Bool(true));
    let mut stream_options = Map::new();
    stream_options.insert("include_usage".into(), Value::Bool(true));
    stream_options.insert("continuous_usage_stats".into(), Value::Bool(true));
    body.insert("stream_options".into(), Value::Object(stream_options));
    if ignore_eos {
        body.insert("ignore_eos".into(), Value::Bool(true));
    }
    if let Some(extra) = extra_body {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body).to_string().into_bytes()
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
