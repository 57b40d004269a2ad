//! The load side: a driver that keeps a concurrency target filled, and the
//! load tasks that send one request each and time it.

pub mod driver;
pub mod request;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::protocol::ollama::{ollama_request_body, OllamaApi};
use crate::protocol::openai::{request_body, Api};

/// The wire format of a run's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI-compatible SSE (`/v1/chat/completions`, `/v1/completions`).
    OpenAi(Api),
    /// Ollama's native NDJSON (`/api/generate`, `/api/chat`).
    Ollama(OllamaApi),
}
use crate::workload::PromptSpec;

/// Everything of a request body that is the same for the whole run.
#[derive(Clone, Debug)]
pub struct BodySpec {
    pub wire: Wire,
    pub model: String,
    pub ignore_eos: bool,
    pub extra_body: Option<Map<String, Value>>,
}

impl BodySpec {
    pub fn build(&self, prompt: &PromptSpec) -> Bytes {
        Bytes::from(match self.wire {
            Wire::OpenAi(api) => request_body(
                api,
                &self.model,
                &prompt.text,
                prompt.max_tokens,
                self.ignore_eos,
                self.extra_body.as_ref(),
            ),
            // Ollama has no ignore_eos: short answers are counted and flagged.
            Wire::Ollama(api) => ollama_request_body(
                api,
                &self.model,
                &prompt.text,
                prompt.max_tokens,
                self.extra_body.as_ref(),
            ),
        })
    }
}
