//! What the target says about itself before and during a run.

pub(crate) mod account;
pub mod client;
pub(crate) mod dcgm;
pub mod gauges;
pub mod gpu;
pub(crate) mod live;
pub(crate) mod marks;
pub(crate) mod memory;
pub mod prometheus;
pub(crate) mod series;

use std::collections::BTreeMap;
use std::time::Duration;

use color_eyre::eyre::{eyre, Result};
use serde_json::Value;

use crate::engine::Engine;
use crate::redact;

/// Pre-run look-ups are short: a server that cannot answer a model list in
/// this time will not serve a benchmark either.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(4);

/// What we learned of the server before the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerIdentity {
    pub engine: String,
    pub engine_version: Option<String>,
    /// Models listed by `/v1/models`, in the server's order.
    pub models: Vec<String>,
    /// The first model's context in tokens, where `/v1/models` says
    /// (vLLM's and SGLang's `max_model_len`).
    pub max_model_len: Option<u32>,
    /// Median connect + first byte of a tiny request on a fresh connection, ms.
    pub connect_probe_ms: Option<f64>,
}

impl ServerIdentity {
    /// How its engine behaves: the engine its saved name is, or
    /// OpenAI-compatible for a name of the user's own (`--engine`).
    pub(crate) fn engine_kind(&self) -> Engine {
        Engine::of(&self.engine)
    }
}

/// Check that the server answers and learn its models and version.
///
/// Connection failures are errors (the run cannot start); a server that lacks
/// `/v1/models` or `/version` is fine.
///
/// `fresh_connections` is a client that keeps no idle connection (with the run's TLS
/// trust), for [`connect_probe`].
pub(crate) async fn preflight(
    client: &reqwest::Client,
    fresh_connections: &reqwest::Client,
    base_url: &str,
) -> Result<ServerIdentity> {
    let models_url = format!("{base_url}/v1/models");
    let (models, max_model_len) = match get_json(client, &models_url).await {
        Ok(Some(body)) => (model_ids(&body), context_of(&body)),
        Ok(None) => (Vec::new(), None),
        Err(e) if e.contains("wants a key") => return Err(eyre!("{e}")),
        Err(e) => {
            let shown = redact::base_url(base_url);
            return Err(eyre!("cannot reach {shown}: {e}"));
        }
    };
    let (engine, version) = detect_engine(client, base_url).await;
    let models = if models.is_empty() {
        // Ollama lists its models at /api/tags too (older versions only there).
        match get_json(client, &format!("{base_url}/api/tags")).await {
            Ok(Some(body)) => model_ids(&body),
            _ => models,
        }
    } else {
        models
    };
    Ok(ServerIdentity {
        engine: engine.name().into(),
        engine_version: version,
        models,
        max_model_len,
        connect_probe_ms: connect_probe(fresh_connections, &format!("{base_url}/v1/models")).await,
    })
}

/// Which engine answers, from the endpoints only it has, in
/// `Engine::ALL`'s order (`engine/`: Ollama's `/api/version`, llama.cpp's
/// `/props`, SGLang's `/get_server_info`, TGI's `/info`, vLLM's `/version`);
/// anything else is `openai-compatible`.
pub(crate) async fn detect_engine(
    client: &reqwest::Client,
    base_url: &str,
) -> (Engine, Option<String>) {
    Engine::detect(|path| {
        let url = format!("{base_url}{path}");
        async move { get_json(client, &url).await.ok().flatten() }
    })
    .await
}

/// How far the server is: the median of five tiny requests, each on a new
/// connection, from connect to the first response byte. A client far from
/// the server puts this inside every TTFT it measures.
/// `client` must keep no idle connection (`pool_max_idle_per_host(0)`).
pub(crate) async fn connect_probe(client: &reqwest::Client, url: &str) -> Option<f64> {
    let mut samples = Vec::with_capacity(5);
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let sent = tokio::time::timeout(PREFLIGHT_TIMEOUT, client.get(url).send()).await;
        if let Ok(Ok(_response)) = sent {
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    samples.sort_by(f64::total_cmp);
    crate::stats::percentile::median_sorted(&samples)
}

/// Token count of `text` by the server's own tokenizer, without any chat
/// template: vLLM's `/tokenize` (`{"model","prompt"}` -> `{"count"}`), else
/// llama.cpp's (`{"content"}` -> `{"tokens"}`). None when neither answers.
pub(crate) async fn tokenize_count(
    client: &reqwest::Client,
    base_url: &str,
    model: &str,
    text: &str,
) -> Option<u32> {
    let url = format!("{base_url}/tokenize");
    for body in [
        serde_json::json!({"model": model, "prompt": text, "add_special_tokens": false}),
        serde_json::json!({"content": text}),
    ] {
        let sent =
            tokio::time::timeout(PREFLIGHT_TIMEOUT, client.post(&url).json(&body).send()).await;
        let Ok(Ok(response)) = sent else { return None };
        if !response.status().is_success() {
            continue;
        }
        let Ok(Ok(bytes)) = tokio::time::timeout(PREFLIGHT_TIMEOUT, response.bytes()).await else {
            return None;
        };
        // llama.cpp answers the vLLM shape with `{"tokens":[]}`: an empty
        // count means "not understood", so try the next shape.
        if let Some(n) = token_count_of(&bytes).filter(|n| *n > 0) {
            return Some(n);
        }
    }
    None
}

/// `{"count": N}` or `{"tokens": [...]}`.
pub(crate) fn token_count_of(body: &[u8]) -> Option<u32> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if let Some(n) = v.get("count").and_then(Value::as_u64) {
        return u32::try_from(n).ok();
    }
    v.get("tokens")
        .and_then(Value::as_array)
        .and_then(|t| u32::try_from(t.len()).ok())
}

/// GET a JSON document. Ok(None): the server answered but not with JSON 2xx.
pub(crate) async fn get_json(
    client: &reqwest::Client,
    url: &str,
) -> std::result::Result<Option<Value>, String> {
    let response = tokio::time::timeout(PREFLIGHT_TIMEOUT, client.get(url).send())
        .await
        .map_err(|_| format!("no answer within {} s", PREFLIGHT_TIMEOUT.as_secs()))?
        .map_err(|e| describe_connect_error(&e))?;
    let status = response.status().as_u16();
    if status == 401 || status == 403 {
        // `url` still has any user:password@ of --base-url: never echo it.
        let shown = redact::base_url(url);
        return Err(format!(
            "{shown} answered HTTP {status}: the server wants a key; give it with --api-key or OPENAI_API_KEY"
        ));
    }
    if !response.status().is_success() {
        return Ok(None);
    }
    let body = tokio::time::timeout(PREFLIGHT_TIMEOUT, response.bytes())
        .await
        .map_err(|_| format!("no answer within {} s", PREFLIGHT_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    Ok(serde_json::from_slice(&body).ok())
}

fn describe_connect_error(e: &reqwest::Error) -> String {
    use crate::load::request::{classify_transport_error, transport_message};
    let class = classify_transport_error(e);
    let what = transport_message(e, class);
    format!("{what}; is the server running, and is --base-url its root (no /v1)?")
}

/// `{"data":[{"id":..}, ..]}` (OpenAI) or `{"models":[{"name":..}]}` (Ollama).
pub(crate) fn model_ids(body: &Value) -> Vec<String> {
    let from = |list: Option<&Value>, key: &str| -> Vec<String> {
        list.and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|m| m.get(key).and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let openai = from(body.get("data"), "id");
    if openai.is_empty() {
        from(body.get("models"), "name")
    } else {
        openai
    }
}

/// The first listed model's `max_model_len`, when the list has one.
pub(crate) fn context_of(body: &Value) -> Option<u32> {
    body.get("data")?
        .as_array()?
        .first()?
        .get("max_model_len")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// A gauge into a sample, when it has a finite value: one the server did
/// not report (or a NaN) is left out rather than written as 0.
fn put_gauge(out: &mut BTreeMap<&'static str, f64>, k: &'static str, v: Option<f64>) {
    if let Some(v) = v.filter(|v| v.is_finite()) {
        out.insert(k, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_from_both_shapes_and_garbage() {
        let openai = serde_json::json!({"object":"list","data":[{"id":"a"},{"id":"b"},{"x":1}]});
        assert_eq!(model_ids(&openai), vec!["a", "b"]);
        let ollama = serde_json::json!({"models":[{"name":"llama3:8b"}]});
        assert_eq!(model_ids(&ollama), vec!["llama3:8b"]);
        assert!(model_ids(&serde_json::json!({"data":"nope"})).is_empty());
        assert!(model_ids(&serde_json::json!(null)).is_empty());
        assert_eq!(context_of(&openai), None);
        let vllm = serde_json::json!({"data":[{"id":"m","max_model_len":8192},{"id":"n","max_model_len":4}]});
        assert_eq!(context_of(&vllm), Some(8192));
        assert_eq!(
            context_of(&serde_json::json!({"data":[{"max_model_len":"x"}]})),
            None
        );
    }

    #[test]
    fn identity_behaves_as_its_engine() {
        let id = |engine: &str| ServerIdentity {
            engine: engine.into(),
            ..ServerIdentity::default()
        };
        assert_eq!(id("llamacpp").engine_kind(), Engine::Llamacpp);
        assert_eq!(id("tokbench-sim").engine_kind(), Engine::TokbenchSim);
        // `--engine trtllm`: saved as given, scraped as any OpenAI server.
        assert_eq!(id("trtllm").engine_kind(), Engine::OpenaiCompatible);
    }

    #[test]
    fn token_counts_from_vllm_and_llamacpp_shapes() {
        assert_eq!(
            token_count_of(br#"{"count":5,"max_model_len":8192,"tokens":[1,2,3,4,5]}"#),
            Some(5)
        );
        let raw = include_bytes!("../../tests/fixtures/captures/llama-server/tokenize.json");
        let expected = serde_json::from_slice::<Value>(raw)
            .ok()
            .and_then(|v| v["tokens"].as_array().map(Vec::len))
            .expect("capture has tokens");
        assert_eq!(token_count_of(raw), Some(expected as u32));
        assert_eq!(token_count_of(b"not json"), None);
        assert_eq!(token_count_of(br#"{"count":-1}"#), None);
    }

    #[test]
    fn llama_server_capture_lists_its_model() {
        let raw = include_str!("../../tests/fixtures/captures/llama-server/models.json");
        let body: Value = serde_json::from_str(raw).expect("capture is JSON");
        assert_eq!(model_ids(&body).len(), 1);
    }
}
