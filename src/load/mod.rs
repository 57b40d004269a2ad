//! The load side: a driver that keeps a concurrency target filled, and the
//! load tasks that send one request each and time it.

pub(crate) mod arrivals;
pub mod driver;
#[cfg(test)]
mod driver_tests;
pub(crate) mod executor;
pub mod h1;
pub(crate) mod probes;
pub mod ramp;
pub(crate) mod replay;
pub mod request;
pub mod rxtime;
pub mod trace;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::protocol::ollama::{ollama_request_body, OllamaApi};
use crate::protocol::openai::{request_body, Api};
use crate::protocol::tgi::tgi_request_body;

/// The wire format of a run's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI-compatible SSE (`/v1/chat/completions`, `/v1/completions`).
    OpenAi(Api),
    /// Ollama's native NDJSON (`/api/generate`, `/api/chat`).
    Ollama(OllamaApi),
    /// TGI's native SSE token events (`/generate_stream`).
    Tgi,
}
use crate::workload::{ChatMessage, PromptSpec};

/// Everything of a request body that is the same for the whole run.
#[derive(Clone, Debug)]
pub(crate) struct BodySpec {
    pub wire: Wire,
    pub model: String,
    pub ignore_eos: bool,
    pub extra_body: Option<Map<String, Value>>,
}

impl BodySpec {
    /// The body of one request. A dataset record of chat messages goes out
    /// as those messages on a chat API (`openai-chat`, `ollama-chat`); a
    /// prompt API (`openai-completions`, `ollama-generate`, `tgi-generate`) gets them
    /// flattened to `role: content` lines (`prompt.text`).
    pub(crate) fn build(&self, prompt: &PromptSpec) -> Bytes {
        let chat = matches!(
            self.wire,
            Wire::OpenAi(Api::Chat) | Wire::Ollama(OllamaApi::Chat)
        );
        let body = self.build_text(prompt);
        match &prompt.messages {
            Some(messages) if chat => {
                Bytes::from(with_messages(body, messages, self.extra_body.as_ref()))
            }
            _ => Bytes::from(body),
        }
    }

    fn build_text(&self, prompt: &PromptSpec) -> Vec<u8> {
        match self.wire {
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
            // TGI has no ignore_eos either, and ignores a model name.
            Wire::Tgi => {
                tgi_request_body(&prompt.text, prompt.max_tokens, self.extra_body.as_ref())
            }
        }
    }
}

/// A chat body with its one user message replaced by a record's messages,
/// unless `--extra-body` set `messages` itself (it wins, as for any key).
fn with_messages(
    body: Vec<u8>,
    messages: &[ChatMessage],
    extra_body: Option<&Map<String, Value>>,
) -> Vec<u8> {
    if extra_body.is_some_and(|e| e.contains_key("messages")) {
        return body;
    }
    let Ok(mut map) = serde_json::from_slice::<Map<String, Value>>(&body) else {
        return body;
    };
    let list = messages
        .iter()
        .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
        .collect();
    map.insert("messages".into(), Value::Array(list));
    serde_json::to_vec(&Value::Object(map)).unwrap_or(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(wire: Wire) -> BodySpec {
        BodySpec {
            wire,
            model: "m".into(),
            ignore_eos: true,
            extra_body: None,
        }
    }

    fn record() -> PromptSpec {
        let messages = vec![
            ChatMessage {
                role: "system".into(),
                content: "Be brief.".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "Hello there".into(),
            },
        ];
        PromptSpec {
            text: crate::workload::dataset::flatten_messages(&messages),
            words: 5,
            input_tokens_target: 5,
            max_tokens: 9,
            messages: Some(messages),
        }
    }

    fn json(b: &Bytes) -> Value {
        serde_json::from_slice(b).expect("JSON body")
    }

    #[test]
    fn messages_go_out_as_messages_on_chat_apis() {
        for wire in [Wire::OpenAi(Api::Chat), Wire::Ollama(OllamaApi::Chat)] {
            let body = json(&spec(wire).build(&record()));
            assert_eq!(body["messages"][0]["role"], "system", "{wire:?}");
            assert_eq!(body["messages"][1]["content"], "Hello there");
            assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
            assert_eq!(body["model"], "m");
            assert_eq!(body["stream"], true);
        }
        let body = json(&spec(Wire::OpenAi(Api::Chat)).build(&record()));
        assert_eq!(body["max_tokens"], 9);
        assert_eq!(body["ignore_eos"], true);
    }

    #[test]
    fn messages_are_flattened_on_prompt_apis() {
        let body = json(&spec(Wire::OpenAi(Api::Completions)).build(&record()));
        assert_eq!(body["prompt"], "system: Be brief.\nuser: Hello there");
        assert!(body.get("messages").is_none());
        let body = json(&spec(Wire::Ollama(OllamaApi::Generate)).build(&record()));
        assert_eq!(body["prompt"], "system: Be brief.\nuser: Hello there");
        // TGI's native route takes `inputs`, and no model.
        let body = json(&spec(Wire::Tgi).build(&record()));
        assert_eq!(body["inputs"], "system: Be brief.\nuser: Hello there");
        assert_eq!(body["parameters"]["max_new_tokens"], 9);
        assert_eq!(body["parameters"]["details"], true);
        assert!(body.get("model").is_none() && body.get("messages").is_none());
    }

    #[test]
    fn extra_body_messages_win() {
        let mut s = spec(Wire::OpenAi(Api::Chat));
        let extra = serde_json::json!({"messages": [{"role": "user", "content": "x"}]});
        s.extra_body = extra.as_object().cloned();
        let body = json(&s.build(&record()));
        assert_eq!(body["messages"][0]["content"], "x");
    }
}
