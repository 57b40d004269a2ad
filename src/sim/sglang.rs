//! The `sglang` personality: SGLang's server on the simulated engine.
//!
//! - `POST /v1/chat/completions` and `/v1/completions` stream as the `vllm`
//!   personality does (the OpenAI shapes SGLang shares), with its prefix cache
//!   (SGLang's RadixAttention is on by default) and its emission log.
//! - `GET /get_server_info`: the server's arguments and `version`, as SGLang's
//!   (`max_running_requests`, `model_path`, `max_total_num_tokens`, ...).
//! - `GET /get_model_info`, `GET /health` (an empty 200), `GET /v1/models`.
//! - `GET|POST /flush_cache`: empties the prefix cache at the next step boundary.
//! - `GET /metrics`: SGLang's `sglang:` names (`metrics::Metrics::render_sglang`).
//!
//! Its slot setting is `--max-running-requests`, the simulator's `max_num_seqs`.
//! With an API key, SGLang guards every route but `/health`, answering 401 with
//! `{"error": "Unauthorized"}`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::http::{authorized, full, generate, json_response, models, with_status, AppState, Body};
use super::wire::Api;

/// What `/flush_cache` answers (SGLang's words).
const FLUSHED: &str = "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n";

/// All of the SGLang personality's routes.
pub(crate) async fn route(state: &Arc<AppState>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    if let Some(key) = &state.cfg.api_key {
        if !path.starts_with("/health") && !authorized(&req, key) {
            return json_response(StatusCode::UNAUTHORIZED, &json!({"error": "Unauthorized"}));
        }
    }
    match (method, path.as_str()) {
        (Method::POST, "/v1/chat/completions") => generate(state, Api::Chat, req).await,
        (Method::POST, "/v1/completions") => generate(state, Api::Completions, req).await,
        (Method::GET, "/v1/models") => models(state),
        (Method::GET, "/health") => with_status(StatusCode::OK, full("")),
        (Method::GET, "/get_server_info") => json_response(StatusCode::OK, &server_info(state)),
        (Method::GET, "/get_model_info") => json_response(
            StatusCode::OK,
            &json!({
                "model_path": state.cfg.model_name,
                "tokenizer_path": state.cfg.model_name,
                "is_generation": true
            }),
        ),
        (Method::GET | Method::POST, "/flush_cache") => {
            state.metrics.cache_resets.fetch_add(1, Ordering::Relaxed);
            with_status(StatusCode::OK, full(FLUSHED))
        }
        (Method::GET, "/metrics") => {
            let text = state
                .metrics
                .render_sglang(&state.cfg.model_name, state.cfg.kv_tokens);
            let mut r = with_status(StatusCode::OK, full(text));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        (
            _,
            "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/models"
            | "/health"
            | "/get_server_info"
            | "/get_model_info"
            | "/metrics",
        ) => json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"detail": "Method Not Allowed"}),
        ),
        // FastAPI's 404.
        _ => json_response(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"})),
    }
}

/// `/get_server_info`: SGLang answers its server arguments flattened, its
/// scheduler's figures and its version; the ones a reader looks for here.
fn server_info(state: &AppState) -> serde_json::Value {
    let cfg = &state.cfg;
    json!({
        "model_path": cfg.model_name,
        "tokenizer_path": cfg.model_name,
        "served_model_name": cfg.model_name,
        "context_length": cfg.kv_tokens,
        "max_running_requests": cfg.max_num_seqs,
        "max_total_tokens": cfg.kv_tokens,
        "max_total_num_tokens": cfg.kv_tokens,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "schedule_policy": "fcfs",
        "disable_radix_cache": cfg.prefix_block_tokens == 0,
        "tp_size": 1,
        "dp_size": 1,
        "enable_metrics": true,
        "version": super::SIM_VERSION
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::metrics::Metrics;
    use crate::sim::SimConfig;

    #[test]
    fn server_info_names_the_slot_setting_and_the_version() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let cfg = SimConfig {
            max_num_seqs: 48,
            kv_tokens: 9000,
            ..SimConfig::default()
        };
        let state = AppState::new(cfg, tx, Arc::new(Metrics::default()));
        let v = server_info(&state);
        assert_eq!(v["max_running_requests"], 48);
        assert_eq!(v["max_total_num_tokens"], 9000);
        assert_eq!(v["model_path"], "sim");
        assert_eq!(v["version"], crate::sim::SIM_VERSION);
        assert_eq!(v["disable_radix_cache"], false);
    }
}
