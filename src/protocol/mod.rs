//! Wire formats: bytes off the socket in, `StreamEvent`s out.
//!
//! One file per format (docs/architecture.md sections 1 and 2): `sse` is the event-stream
//! framing, `openai` the OpenAI-compatible chunk JSON (chat and completions,
//! plus llama.cpp's native `/completion` stream, which shares the framing),
//! `ndjson` the newline-delimited framing, `ollama` Ollama's native
//! `/api/generate` and `/api/chat` objects and `tgi` text-generation-inference's
//! native `/generate_stream` token events.
//! Decoders never look at the clock: the load task timestamps the bytes
//! before it feeds them here, so parsing cost never enters a measurement.

/// The decoders' tests drive each decoder the same way: `decode_pieces`
/// (feed the pieces, then `finish`), `decode` (one piece),
/// `decode_every_split` (whole, cut in two at every byte and byte by byte,
/// the same events each time) and `outputs(n)` (n plain output events).
#[cfg(test)]
macro_rules! decoder_test_helpers {
    ($decoder:ty, $error:ty) => {
        /// Decode `bytes` in the given pieces, then `finish`.
        fn decode_pieces(pieces: &[&[u8]]) -> Result<Vec<StreamEvent>, $error> {
            let mut d = <$decoder>::new();
            let mut out = Vec::new();
            for p in pieces {
                d.feed(p, &mut out)?;
            }
            d.finish(&mut out)?;
            Ok(out)
        }

        fn decode(bytes: &[u8]) -> Result<Vec<StreamEvent>, $error> {
            decode_pieces(&[bytes])
        }

        /// Decode whole, split in two at every byte boundary, and one byte
        /// at a time: the events must be identical every time. Returns them.
        fn decode_every_split(bytes: &[u8]) -> Vec<StreamEvent> {
            let whole = decode(bytes).unwrap();
            for cut in 0..=bytes.len() {
                let split = decode_pieces(&[&bytes[..cut], &bytes[cut..]]).unwrap();
                assert_eq!(split, whole, "split at byte {cut}");
            }
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(decode_pieces(&bytewise).unwrap(), whole, "byte by byte");
            whole
        }

        fn outputs(n: usize) -> Vec<StreamEvent> {
            vec![
                StreamEvent::Output {
                    tokens: None,
                    reasoning: false
                };
                n
            ]
        }
    };
}

pub(crate) mod error_body;
pub mod ndjson;
pub(crate) mod ollama;
pub mod openai;
pub mod sse;
pub(crate) mod tgi;

pub use ndjson::{NdjsonError, NdjsonSplitter};
pub use ollama::OllamaApi;
pub use ollama::{MalformedNdjson, OllamaDecoder};
pub use openai::{request_body, Api, MalformedStream, OpenAiDecoder};
pub use sse::{SseError, SseEvent, SseParser};
pub use tgi::{MalformedTgi, TgiDecoder};

use serde_json::{Map, Value};

use crate::record::{FinishReason, ServerTimings};

/// A request body's start, the same for OpenAI's and Ollama's APIs: the
/// model, and the prompt as one user message (`chat`) or bare (`prompt`).
/// Put `nested` (Ollama's `options`, TGI's `parameters`) into `body` under
/// `key`, then `extra_body`'s keys at the top level: they replace or add,
/// except `key` itself when both are objects, whose keys are merged into
/// `nested` one by one. A `key` that is not an object replaces it whole.
fn merge_extra_body(
    body: &mut Map<String, Value>,
    key: &str,
    mut nested: Map<String, Value>,
    extra_body: Option<&Map<String, Value>>,
) {
    if let Some(Value::Object(extra)) = extra_body.and_then(|e| e.get(key)) {
        for (k, v) in extra {
            nested.insert(k.clone(), v.clone());
        }
    }
    body.insert(key.into(), Value::Object(nested));
    for (k, v) in extra_body.into_iter().flatten() {
        if k == key && v.is_object() {
            continue; // merged above
        }
        body.insert(k.clone(), v.clone());
    }
}

fn prompt_body(model: &str, prompt: &str, chat: bool) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model));
    if chat {
        let mut message = Map::new();
        message.insert("role".into(), Value::from("user"));
        message.insert("content".into(), Value::from(prompt));
        body.insert(
            "messages".into(),
            Value::Array(vec![Value::Object(message)]),
        );
    } else {
        body.insert("prompt".into(), Value::from(prompt));
    }
    body
}

/// What one response chunk told us. A chunk may yield several events, always
/// in this order: `Error`, then `Output` or `NoOutput`, `Finish`, `Usage`,
/// `Timings`.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// A chunk that carries generated output: non-empty `delta.content`,
    /// `delta.reasoning_content` / `delta.reasoning`, `delta.tool_calls`, or
    /// (completions API) non-empty `choices[i].text`. One per chunk, however
    /// many choices carried output.
    ///
    /// `tokens`: how many tokens it carried, known only when the server sends
    /// cumulative `usage.completion_tokens` on every chunk (vLLM
    /// `continuous_usage_stats`): the difference to the previous cumulative
    /// value. `None` otherwise. It can be `Some(0)` when a server emits text
    /// without advancing its count; spread nothing over such a chunk.
    ///
    /// `reasoning`: the chunk carried reasoning (`reasoning_content`,
    /// `reasoning`, Ollama's `thinking`) and nothing else: no content, no
    /// tool call, no completions text. It counts for TTFT like any output;
    /// the first chunk with `reasoning: false` is the first *content* token
    /// (TTFC).
    Output {
        tokens: Option<u32>,
        reasoning: bool,
    },
    /// A chunk with choices but no output: the role-only first delta
    /// (`{"role":"assistant","content":""}` or `"content":null`), an empty
    /// delta, a finish-only chunk. Also any JSON object that is neither a chunk
    /// nor an error.
    NoOutput,
    /// The server's `finish_reason`.
    Finish(FinishReason),
    /// A `usage` object (on any chunk, including the usage-only `choices: []`
    /// one). The last one seen is the final count.
    ///
    /// `reasoning_tokens`: `usage.completion_tokens_details.reasoning_tokens`.
    /// `cached_tokens`: prompt tokens served from the server's prefix cache:
    /// `usage.prompt_tokens_details.cached_tokens` (vLLM, OpenAI), else
    /// llama.cpp's `timings.cache_n`, else its native `tokens_cached`. A
    /// chunk with only llama.cpp's cache figure (no `usage`) yields a `Usage`
    /// whose other fields are `None`.
    Usage {
        prompt_tokens: Option<u32>,
        completion_tokens: Option<u32>,
        reasoning_tokens: Option<u32>,
        cached_tokens: Option<u32>,
    },
    /// llama.cpp's `timings` (`prompt_n`, `prompt_ms`, `predicted_n`,
    /// `predicted_ms`), or Ollama's final figures (the same four plus
    /// `load_ms` and `total_ms`; see `ServerTimings`).
    Timings(ServerTimings),
    /// An error object inside a 200 stream: `{"error":{"message":..}}`,
    /// `{"error":"..."}` (TGI), `{"object":"error","message":..}` (older
    /// vLLM). One line, trimmed, at most ~200 characters.
    Error(String),
    /// `data: [DONE]`.
    Done,
}
