//! When a started server is ready, asked the way its engine answers.

use std::time::{Duration, Instant};

use color_eyre::eyre::{eyre, Result};
use serde_json::{json, Value};

use super::{secs_text, EngineHint, ServerProcess};

/// A server that answers: how long it took from the start, which engine
/// answered, and the model it serves.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ready {
    pub ready_s: f64,
    pub engine: EngineHint,
    pub model: Option<String>,
}

const POLL: Duration = Duration::from_millis(250);
/// One poll's request: a loading server answers at once or not at all.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What one round of polling found.
enum Probe {
    Ready(Option<String>),
    /// Not yet, with what was seen when it says more than "no answer"
    /// (the timeout's message quotes it).
    NotYet(Option<String>),
    /// An answer that waiting will not change.
    Fail(String),
}

impl ServerProcess {
    /// Poll (every 250 ms, each request with a short timeout) until ready, the way the engine says so:
    /// vLLM/SGLang/Unknown: GET /health 200 and GET /v1/models lists a model (and `model` when Some is among them);
    /// llama.cpp: /health 200 (it answers 503 while loading) and /v1/models;
    /// TGI: /health 200 (then /v1/models or /info if present);
    /// Ollama: GET /api/version 200, then the model loaded by a first warm request: POST /api/generate {"model": m, "prompt": "", "stream": false} answering 200 (m = `model`, or the first of GET /api/tags `models[].name`).
    /// When the hint is Unknown, detect: /api/version answering JSON with "version" means Ollama.
    /// Errors, one line each: the process exited before ready ("the server exited with status N before it was ready; its log's last line: `...`" — quote the log's last non-empty line, see log_tail), not ready within `timeout` ("the server was not ready within 600 s (see LOG_PATH); raise --ready-timeout"). Records ready_s from start.
    ///
    /// `timeout` counts from this call. An Unknown server with no /health
    /// route (404) is judged by /v1/models alone: a generic OpenAI-compatible
    /// server may have none.
    pub(crate) async fn wait_ready(
        &mut self,
        client: &reqwest::Client,
        model: Option<&str>,
        timeout: Duration,
    ) -> Result<Ready> {
        let deadline = Instant::now() + timeout;
        let base = format!("http://127.0.0.1:{}", self.port);
        let mut engine = self.hint;
        // Unknown: ask /api/version until something answers it.
        let mut detect = engine == EngineHint::Unknown;
        let mut seen = None;
        loop {
            if let Some(how) = self.exited() {
                return Err(self.exited_error(&how));
            }
            let now = Instant::now();
            if now >= deadline {
                let seen = seen.map(|s| format!("; {s}")).unwrap_or_default();
                return Err(eyre!(
                    "the server was not ready within {} s (see {}{seen}); raise --ready-timeout",
                    secs_text(timeout),
                    self.log_path.display()
                ));
            }
            let left = deadline - now;
            if detect {
                match is_ollama(client, &base, left).await {
                    Some(true) => {
                        engine = EngineHint::Ollama;
                        detect = false;
                    }
                    Some(false) => detect = false,
                    None => {}
                }
            }
            let probe = match engine {
                EngineHint::Ollama => ollama(client, &base, model, left).await,
                EngineHint::Tgi => tgi(client, &base, model, left).await,
                EngineHint::Unknown => openai(client, &base, model, left, true).await,
                EngineHint::Vllm | EngineHint::Sglang | EngineHint::Llamacpp => {
                    openai(client, &base, model, left, false).await
                }
            };
            match probe {
                Probe::Ready(model) => {
                    return Ok(Ready {
                        ready_s: self.started.elapsed().as_secs_f64(),
                        engine,
                        model,
                    })
                }
                Probe::NotYet(note) => seen = note.or(seen),
                Probe::Fail(message) => return Err(eyre!(message)),
            }
            let now = Instant::now();
            if now < deadline {
                tokio::time::sleep(POLL.min(deadline - now)).await;
            }
        }
    }
}

/// One GET with the poll's timeout (never past the deadline): its status
/// and body, or None when nothing answered.
async fn get(client: &reqwest::Client, url: &str, left: Duration) -> Option<(u16, Vec<u8>)> {
    let resp = client
        .get(url)
        .timeout(REQUEST_TIMEOUT.min(left))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    let body = resp.bytes().await.ok()?;
    Some((status, body.to_vec()))
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// `/api/version` answering `{"version": ...}`: Ollama. None: no answer yet.
async fn is_ollama(client: &reqwest::Client, base: &str, left: Duration) -> Option<bool> {
    let (status, body) = get(client, &format!("{base}/api/version"), left).await?;
    Some(status == 200 && json_of(&body)["version"].is_string())
}

/// The ids `/v1/models` lists; None when it does not answer 200.
async fn model_ids(client: &reqwest::Client, base: &str, left: Duration) -> Option<Vec<String>> {
    let (status, body) = get(client, &format!("{base}/v1/models"), left).await?;
    if status != 200 {
        return None;
    }
    let ids = json_of(&body)["data"]
        .as_array()
        .map(|data| {
            data.iter()
                .filter_map(|m| m["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Some(ids)
}

/// `model` among `ids` (then it is the one served), or the first id when
/// none was asked for.
fn pick(ids: &[String], model: Option<&str>) -> Result<String, String> {
    match model {
        Some(m) if ids.iter().any(|id| id == m) => Ok(m.to_owned()),
        Some(m) if !ids.is_empty() => Err(format!(
            "/v1/models lists `{}`, not `{m}`",
            ids.join("`, `")
        )),
        None if !ids.is_empty() => Ok(ids[0].clone()),
        _ => Err("/v1/models lists no model yet".to_owned()),
    }
}

/// vLLM, SGLang, llama.cpp (503 on /health while it loads) and the
/// unknown: /health 200, then /v1/models listing the model.
async fn openai(
    client: &reqwest::Client,
    base: &str,
    model: Option<&str>,
    left: Duration,
    no_health_ok: bool,
) -> Probe {
    match get(client, &format!("{base}/health"), left).await {
        Some((200, _)) => {}
        Some((404, _)) if no_health_ok => {}
        Some((status, _)) => return Probe::NotYet(Some(format!("/health answered {status}"))),
        None => return Probe::NotYet(None),
    }
    match model_ids(client, base, left).await {
        Some(ids) => match pick(&ids, model) {
            Ok(m) => Probe::Ready(Some(m)),
            Err(note) => Probe::NotYet(Some(note)),
        },
        None => Probe::NotYet(Some("/v1/models does not answer 200 yet".to_owned())),
    }
}

/// TGI: /health 200 is ready; the model's name from /info (`model_id`) or
/// /v1/models when either answers.
async fn tgi(client: &reqwest::Client, base: &str, model: Option<&str>, left: Duration) -> Probe {
    match get(client, &format!("{base}/health"), left).await {
        Some((200, _)) => {}
        Some((status, _)) => return Probe::NotYet(Some(format!("/health answered {status}"))),
        None => return Probe::NotYet(None),
    }
    let info = match get(client, &format!("{base}/info"), left).await {
        Some((200, body)) => json_of(&body)["model_id"].as_str().map(str::to_owned),
        _ => None,
    };
    let served = match info {
        Some(id) => Some(id),
        None => model_ids(client, base, left)
            .await
            .and_then(|ids| pick(&ids, model).ok()),
    };
    Probe::Ready(served.or_else(|| model.map(str::to_owned)))
}

/// Ollama: /api/version 200, then the model loaded by a warm request.
/// The warm request may take as long as a load does (minutes for a large
/// model), so it has the rest of the deadline rather than the poll's timeout.
async fn ollama(
    client: &reqwest::Client,
    base: &str,
    model: Option<&str>,
    left: Duration,
) -> Probe {
    match get(client, &format!("{base}/api/version"), left).await {
        Some((200, _)) => {}
        Some((status, _)) => return Probe::NotYet(Some(format!("/api/version answered {status}"))),
        None => return Probe::NotYet(None),
    }
    let name = match model {
        Some(m) => m.to_owned(),
        None => {
            let first = match get(client, &format!("{base}/api/tags"), left).await {
                Some((200, body)) => json_of(&body)["models"][0]["name"]
                    .as_str()
                    .map(str::to_owned),
                _ => None,
            };
            match first {
                Some(m) => m,
                None => {
                    return Probe::NotYet(Some(
                        "/api/tags lists no model: pull one or name the model".to_owned(),
                    ))
                }
            }
        }
    };
    // An empty prompt only loads the model (Ollama answers done_reason
    // "load"); num_predict 1 keeps a server that generates anyway (the
    // simulator) to one token.
    let warm = client
        .post(format!("{base}/api/generate"))
        .timeout(left)
        .json(&json!({"model": name, "prompt": "", "stream": false, "options": {"num_predict": 1}}))
        .send()
        .await;
    let resp = match warm {
        Ok(resp) => resp,
        Err(_) => return Probe::NotYet(Some(format!("loading `{name}` got no answer"))),
    };
    let status = resp.status().as_u16();
    if status == 200 {
        return Probe::Ready(Some(name));
    }
    let body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    let said = json_of(&body)["error"]
        .as_str()
        .map(super::clean)
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "no reason given".to_owned());
    // 400 and 404: a model that is not there, which no wait brings.
    if status == 400 || status == 404 {
        return Probe::Fail(format!(
            "the server answered {status} to loading `{name}`: {said}"
        ));
    }
    Probe::NotYet(Some(format!("loading `{name}` answered {status}: {said}")))
}
