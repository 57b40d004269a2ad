//! The decoder's state: SSE events in, `StreamEvent`s out, one stream at a
//! time. Each chunk goes to the fast reader (`fast`) first and to serde (the
//! chunk shape in `openai`) when the fast reader gives up.

use serde::de::IgnoredAny;

use super::{fast, Chunk, Lenient, MalformedStream};
use crate::protocol::error_body::{one_line, snippet};
use crate::protocol::sse::{SseEvent, SseParser};
use crate::protocol::tgi::TGI_STREAM;
use crate::protocol::StreamEvent;
use crate::record::{FinishReason, ServerTimings};

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
pub(super) struct ChunkState {
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
        // TGI's native stream carries no choices and its output in `token`:
        // read as OpenAI's, it would end with no output and no hint why.
        if chunk.choices.0.is_none() && chunk.token.yes() {
            return Err(MalformedStream::OtherApi(TGI_STREAM));
        }
        self.on_chunk(chunk, out);
        Ok(())
    }

    pub(super) fn on_chunk(&mut self, c: Chunk<'_>, out: &mut Vec<StreamEvent>) {
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
