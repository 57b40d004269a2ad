//! The load side: a driver that keeps a concurrency target filled, and the
//! load tasks that send one request each and time it.

pub mod driver;
pub mod request;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::protocol::openai::{request_body, Api};
use crate::workload::PromptSpec;

/// Everything of a request body that is the same for the whole run.
#[derive(Clone, Debug)]
pub struct BodySpec {
    pub api: Api,
    pub model: String,
    pub ignore_eos: bool,
    pub extra_body: Option<Map<String, Value>>,
}

impl BodySpec {
    pub fn build(&self, prompt: &PromptSpec) -> Bytes {
        Bytes::from(request_body(
            self.api,
            &self.model,
            &prompt.text,
            prompt.max_tokens,
            self.ignore_eos,
            self.extra_body.as_ref(),
        ))
    }
}
