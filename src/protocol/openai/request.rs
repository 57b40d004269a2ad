//! The JSON body of an OpenAI-compatible streamed request.

use serde_json::{Map, Value};

use super::Api;

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
    let mut body = crate::protocol::prompt_body(model, prompt, api == Api::Chat);
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
