//! The simulator's `sglang` and `tgi` personalities end to end: their identity
//! endpoints, their `/metrics` under a load the real binary drives, and what
//! tokbench makes of them (the engine it names, the counts it saves).
//!
//! Every check of a gauge waits for the state it looks for while the load
//! runs (a scrape every few ms), never for a fixed time.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokbench::probe::prometheus;
use tokbench::sim::{SimConfig, SimEngine, SimHandle};

use crate::support::{median, read_json, scratch, start_sim, text, tokbench_async};

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn url(sim: &SimHandle, path: &str) -> String {
    format!("http://{}{path}", sim.addr)
}

async fn get_json(sim: &SimHandle, path: &str) -> Value {
    let resp = client().get(url(sim, path)).send().await.unwrap();
    assert_eq!(resp.status(), 200, "GET {path}");
    resp.json().await.unwrap()
}

async fn scrape(sim: &SimHandle) -> prometheus::Metrics {
    let text = client()
        .get(url(sim, "/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    prometheus::parse(&text)
}

/// `tokbench sweep` against `sim`, the common flags first.
fn sweep_args(sim: &SimHandle, dir: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "sweep",
        "--base-url",
        &url(sim, ""),
        "--no-tui",
        "--seed",
        "7",
        "--result-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Scrape `/metrics` every few ms while `run` (the binary) works, until `seen`
/// says every state looked for has been met or the run ends; the largest value
/// of each name in `names` over the scrapes, and whether `seen` was met.
async fn watch_while<F>(
    sim: &SimHandle,
    run: tokio::task::JoinHandle<std::process::Output>,
    names: &[&str],
    mut seen: F,
) -> (std::process::Output, HashMap<String, f64>, bool)
where
    F: FnMut(&prometheus::Metrics) -> bool,
{
    let mut max: HashMap<String, f64> = HashMap::new();
    let mut met = false;
    while !run.is_finished() {
        let m = scrape(sim).await;
        for name in names {
            if let Some(v) = m.value(name) {
                let e = max.entry((*name).to_owned()).or_insert(v);
                *e = e.max(v);
            }
        }
        met |= seen(&m);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (run.await.expect("join"), max, met)
}

// --- SGLang ------------------------------------------------------------------------

const SGLANG_GAUGES: [&str; 8] = [
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:gen_throughput",
    "sglang:num_used_tokens",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
];

/// Four running requests at most (`--max-running-requests 4`) under eight
/// streams: the queue fills, the KV fills, a shared prefix hits the cache, and
/// tokbench names the engine SGLang from its `/get_server_info`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_identifies_itself_and_its_metrics_follow_the_engine() {
    let sim = start_sim(SimConfig {
        engine: SimEngine::Sglang,
        step_ms: 4.0,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k: 0.0,
        max_num_seqs: 4,
        kv_tokens: 4000,
        ..SimConfig::default()
    })
    .await;
    let info = get_json(&sim, "/get_server_info").await;
    let version = info["version"].as_str().expect("a version").to_owned();
    assert!(version.contains("tokbench-sim"), "{info}");
    assert_eq!(info["max_running_requests"], 4, "{info}");
    assert_eq!(info["model_path"], "sim", "{info}");
    assert_eq!(get_json(&sim, "/v1/models").await["data"][0]["id"], "sim");
    let health = client().get(url(&sim, "/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    // vLLM's own routes are not SGLang's.
    let vllm_only = client().get(url(&sim, "/version")).send().await.unwrap();
    assert_eq!(vllm_only.status(), 404);

    let idle = scrape(&sim).await;
    for name in SGLANG_GAUGES {
        assert_eq!(idle.value(name), Some(0.0), "{name} idle");
        assert_eq!(
            idle.value_where(name, &[("model_name", "sim")]),
            Some(0.0),
            "{name} carries SGLang's model_name label"
        );
    }

    let dir = scratch("sim-sglang-tgi", "sglang");
    let run = tokio::spawn(tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "8",
            "--num-prompts",
            "24",
            "--warmup",
            "2",
            "--random-input-len",
            "64",
            "--random-output-len",
            "48",
            // Every prompt opens with the same 32 words: two whole cache blocks.
            "--prefix-len",
            "32",
        ],
    )));
    let (out, max, met) = watch_while(&sim, run, &SGLANG_GAUGES, |m| {
        m.value("sglang:num_running_reqs") == Some(4.0)
            && m.value("sglang:num_queue_reqs").is_some_and(|q| q > 0.0)
            && m.value("sglang:token_usage").is_some_and(|u| u > 0.0)
    })
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(met, "never four running with a queue: largest seen {max:?}");
    // The slot setting holds: never more than four running.
    assert_eq!(max["sglang:num_running_reqs"], 4.0, "{max:?}");

    let after = scrape(&sim).await;
    let level = read_json(&dir.join("sweep-c8.json"));
    assert_eq!(level["completed"], 24, "{level}");
    let output = level["total_output_tokens"]
        .as_f64()
        .expect("output tokens");
    assert_eq!(output, 24.0 * 48.0);
    // The engine's counters count every token, the warmup's too.
    let generated = after.value("sglang:generation_tokens_total").unwrap();
    assert_eq!(generated, 26.0 * 48.0, "warmup and level");
    assert!(after.value("sglang:prompt_tokens_total").unwrap() >= 24.0 * 64.0);
    // Each prompt finds its first 32 words cached (after the first): a rate
    // of 32 of the ~64 + 32 words of the last prefill batch.
    let hit = after.value("sglang:cache_hit_rate").unwrap();
    assert!(hit > 0.2 && hit < 0.6, "cache_hit_rate {hit}");
    assert!(after.value("sglang:gen_throughput").unwrap() > 0.0);
    assert_eq!(after.value("sglang:num_running_reqs"), Some(0.0));
    assert_eq!(after.value("sglang:num_queue_reqs"), Some(0.0));
    assert_eq!(after.value("sglang:token_usage"), Some(0.0));

    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["engine"], "sglang");
    assert_eq!(summary["run"]["engine_version"], version.as_str());
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// --- TGI ---------------------------------------------------------------------------

const TGI_GAUGES: [&str; 3] = [
    "tgi_queue_size",
    "tgi_batch_current_size",
    "tgi_batch_current_max_tokens",
];

fn tgi(batch: usize, cap: usize) -> SimConfig {
    SimConfig {
        engine: SimEngine::Tgi,
        step_ms: 4.0,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k: 0.0,
        max_num_seqs: batch,
        max_concurrent_requests: cap,
        kv_tokens: 4000,
        ..SimConfig::default()
    }
}

/// The lines of `requests.jsonl`.
fn request_lines(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A batch of four under eight streams on TGI's OpenAI route (the default
/// backend): the queue and the batch fill, the counters count every request,
/// the queue-time histogram every admission, and tokbench names the engine TGI
/// from its `/info`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_identifies_itself_and_its_metrics_follow_the_engine() {
    let sim = start_sim(tgi(4, 128)).await;
    let info = get_json(&sim, "/info").await;
    assert_eq!(info["router"], "text-generation-router", "{info}");
    assert_eq!(info["max_concurrent_requests"], 128, "{info}");
    assert_eq!(info["model_id"], "sim", "{info}");
    assert_eq!(info["max_total_tokens"], 4000, "{info}");
    let version = info["version"].as_str().expect("a version").to_owned();
    assert_eq!(get_json(&sim, "/v1/models").await["data"][0]["id"], "sim");
    let health = client().get(url(&sim, "/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let idle = scrape(&sim).await;
    for name in TGI_GAUGES {
        assert_eq!(idle.value(name), Some(0.0), "{name} idle");
    }
    // As TGI's exporter: a counter appears once counted.
    assert_eq!(idle.value("tgi_request_count"), None);

    let dir = scratch("sim-sglang-tgi", "tgi-metrics");
    let run = tokio::spawn(tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "8",
            "--num-prompts",
            "24",
            "--warmup",
            "2",
            "--random-input-len",
            "32",
            "--random-output-len",
            "32",
        ],
    )));
    let (out, max, met) = watch_while(&sim, run, &TGI_GAUGES, |m| {
        m.value("tgi_batch_current_size") == Some(4.0)
            && m.value("tgi_queue_size").is_some_and(|q| q > 0.0)
            && m.value("tgi_batch_current_max_tokens")
                .is_some_and(|t| t > 0.0)
    })
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(met, "never a full batch with a queue: largest seen {max:?}");
    assert_eq!(max["tgi_batch_current_size"], 4.0, "{max:?}");
    // Queued: at most the eight streams (all of them between two steps).
    assert!(max["tgi_queue_size"] <= 8.0, "{max:?}");

    let after = scrape(&sim).await;
    // Two warmup requests and 24 measured, every one answered whole.
    assert_eq!(after.value("tgi_request_count"), Some(26.0));
    assert_eq!(after.value("tgi_request_success"), Some(26.0));
    assert_eq!(after.value("tgi_request_queue_duration_count"), Some(26.0));
    assert!(after.value("tgi_request_queue_duration_sum").unwrap() > 0.0);
    assert_eq!(
        after.value_where("tgi_request_queue_duration_bucket", &[("le", "+Inf")]),
        Some(26.0)
    );
    for name in TGI_GAUGES {
        assert_eq!(after.value(name), Some(0.0), "{name} after the run");
    }

    let level = read_json(&dir.join("sweep-c8.json"));
    assert_eq!(level["completed"], 24, "{level}");
    // TGI 1.4's chat stream carries no usage: one token a chunk, counted.
    assert_eq!(level["total_output_tokens"], 24 * 32, "{level}");
    assert_eq!(level["token_count_source"], "chunk_count");
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["engine"], "tgi");
    assert_eq!(summary["run"]["engine_version"], version.as_str());
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Past `--max-concurrent-requests 2`, four streams get TGI's 429 with its
/// overload body: tokbench counts each as `http_429`, as many as the server's
/// own `tgi_request_failure{err="overloaded"}`, and the rest complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_answers_429_past_its_concurrency_cap() {
    let sim = start_sim(tgi(8, 2)).await;
    let dir = scratch("sim-sglang-tgi", "tgi-429");
    let out = tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "4",
            "--num-prompts",
            "16",
            // Every request of the run is the level's, so the server's count
            // is the client's.
            "--warmup",
            "0",
            "--random-input-len",
            "16",
            "--random-output-len",
            "32",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let m = scrape(&sim).await;
    let refused = m
        .value_where("tgi_request_failure", &[("err", "overloaded")])
        .expect("overloads counted");
    let level = read_json(&dir.join("sweep-c4.json"));
    let http_429 = level["errors"]["http_429"].as_f64().expect("429s counted");
    assert_eq!(http_429, refused, "{level}");
    assert!(refused >= 1.0);
    let completed = level["completed"].as_f64().unwrap();
    eprintln!("cap 2 under 4 streams: {completed} completed, {http_429} refused with 429");
    assert!(completed >= 2.0, "{level}");
    assert_eq!(completed + http_429, 16.0, "{level}");
    assert_eq!(m.value("tgi_request_success"), Some(completed));
    let lines = request_lines(&dir);
    let refusal = lines
        .iter()
        .find(|l| l["error"] == "http_429")
        .expect("a refused request");
    assert_eq!(refusal["error_message"], "Model is overloaded", "{refusal}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// --- TGI's native stream, and tokbench's tgi-generate backend ----------------------

/// `/generate_stream` straight: the events TGI's decoder reads from it, with
/// and without `details`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_generate_stream_is_one_event_a_token_and_honours_its_parameters() {
    use tokbench::protocol::{StreamEvent, TgiDecoder};
    use tokbench::record::FinishReason;
    let sim = start_sim(tgi(4, 128)).await;
    for details in [true, false] {
        let resp = client()
            .post(url(&sim, "/generate_stream"))
            .json(&serde_json::json!({
                "inputs": "one two three four",
                "parameters": {"max_new_tokens": 7, "details": details}
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let body = resp.bytes().await.unwrap();
        let mut events = Vec::new();
        let mut d = TgiDecoder::new();
        d.feed(&body, &mut events).unwrap();
        d.finish(&mut events).unwrap();
        let tokens = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Output { .. }))
            .count();
        assert_eq!(tokens, 7);
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(text.matches("data:{\"token\":").count(), 7, "{text}");
        if details {
            assert_eq!(events[7], StreamEvent::Finish(FinishReason::Length));
            assert!(
                matches!(
                    events[8],
                    StreamEvent::Usage {
                        completion_tokens: Some(7),
                        ..
                    }
                ),
                "{events:?}"
            );
            assert!(text.ends_with(
                "\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":7,\"seed\":null}}\n\n"
            ));
        } else {
            assert_eq!(events.len(), 8, "{events:?}");
            assert!(text.ends_with("\"details\":null}\n\n"), "{text}");
        }
    }
    // An OpenAI body has no `inputs`: axum's 422, before TGI counts it.
    let resp = client()
        .post(url(&sim, "/generate_stream"))
        .json(&serde_json::json!({"model": "sim", "messages": [], "max_tokens": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    assert!(resp
        .text()
        .await
        .unwrap()
        .contains("missing field `inputs`"));
    // Too long for max_total_tokens: TGI's validation error.
    let resp = client()
        .post(url(&sim, "/generate_stream"))
        .json(&serde_json::json!({"inputs": "a b", "parameters": {"max_new_tokens": 4000}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error_type"], "validation");
    assert_eq!(
        body["error"],
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4000. \
         Given: 2 `inputs` tokens and 4000 `max_new_tokens`"
    );
    let m = scrape(&sim).await;
    assert_eq!(m.value("tgi_request_count"), Some(3.0));
    assert_eq!(m.value("tgi_request_success"), Some(2.0));
    assert_eq!(
        m.value_where("tgi_request_failure", &[("err", "validation")]),
        Some(1.0)
    );
    sim.shutdown().await;
}

/// `tokbench sweep --backend tgi-generate` against the TGI personality: every
/// request's token count is the server's `details.generated_tokens`, and it
/// is exactly the frames the simulator logged it wrote, one a token; TTFT
/// and TPOT agree with the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_generate_counts_exactly_what_the_server_emitted() {
    use tokbench::load::request::record_id_of_request_id;
    use tokbench::sim::EmissionLog;

    const OUT: u64 = 40;
    let log = EmissionLog::in_memory();
    let sim = start_sim(SimConfig {
        emission_log: Some(log.clone()),
        ..tgi(8, 128)
    })
    .await;
    let dir = scratch("sim-sglang-tgi", "tgi-generate");
    let out = tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--backend",
            "tgi-generate",
            "--concurrency",
            "1,4",
            "--num-prompts",
            "8",
            "--warmup",
            "2",
            "--random-input-len",
            "32",
            "--random-output-len",
            &OUT.to_string(),
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let streams = log.take();
    let frames: HashMap<u64, usize> = streams
        .iter()
        .filter_map(|s| Some((record_id_of_request_id(&s.request)?, s.t_ns.len())))
        .collect();
    let lines = request_lines(&dir);
    assert_eq!(lines.len(), 16);
    for line in &lines {
        assert!(line["error"].is_null(), "{line}");
        let id = line["id"].as_u64().expect("id");
        let written = frames.get(&id).expect("every request in the emission log");
        assert_eq!(line["output_tokens"], OUT, "{line}");
        assert_eq!(*written as u64, OUT, "frames written for {line}");
        assert_eq!(line["finish_reason"], "length", "{line}");
    }
    for c in [1, 4] {
        let level = read_json(&dir.join(format!("sweep-c{c}.json")));
        assert_eq!(level["completed"], 8, "{level}");
        assert_eq!(level["total_output_tokens"], 8 * OUT, "{level}");
        assert_eq!(level["token_count_source"], "tgi_details", "{level}");
    }
    // The client's clock against the server's log: TTFT never before the
    // first frame left, and TPOT within 5% of the log's mean gap (TPOT from a
    // count one off would be 1/39 away from it at every request).
    let measured = crate::support::against_server(&dir, &streams);
    assert_eq!(measured.len(), 16);
    let ttft_err: Vec<f64> = measured.iter().map(|m| m.ttft_err_ms()).collect();
    assert!(ttft_err.iter().all(|e| *e >= 0.0), "{ttft_err:?}");
    let server_tpot = median(
        &measured
            .iter()
            .map(|m| m.server_tpot_ms)
            .collect::<Vec<_>>(),
    );
    let tpot_err = median(
        &measured
            .iter()
            .map(|m| m.tpot_abs_err_ms)
            .collect::<Vec<_>>(),
    );
    assert!(
        tpot_err <= 0.05 * server_tpot,
        "|TPOT - server's| median {tpot_err:.4} ms against {server_tpot:.3} ms"
    );
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["backend"], "tgi-generate");
    assert_eq!(summary["run"]["engine"], "tgi");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backend pointed at the other API fails in one line naming the backend
/// that speaks it: tgi-generate at an OpenAI-only server (the vLLM
/// personality has no /generate_stream), and the OpenAI body at TGI's
/// native route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_backend_is_told_which_backend_to_use() {
    let vllm = start_sim(SimConfig {
        step_ms: 2.0,
        ..SimConfig::default()
    })
    .await;
    let tgi_sim = start_sim(tgi(4, 128)).await;
    for (sim, extra, want) in [
        (
            &vllm,
            ["--backend", "tgi-generate"],
            "--backend openai-chat",
        ),
        (
            &tgi_sim,
            ["--endpoint", "/generate_stream"],
            "--backend tgi-generate",
        ),
    ] {
        let dir = scratch("sim-sglang-tgi", "wrong-backend");
        let mut args = sweep_args(
            sim,
            &dir,
            &[
                "--concurrency",
                "1",
                "--num-prompts",
                "2",
                "--warmup",
                "1",
                "--random-output-len",
                "8",
            ],
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = tokbench_async(args).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = crate::support::stderr(&out);
        assert!(stderr.contains(want), "{want} not said: {}", text(&out));
        assert!(!stderr.contains("truncated"), "{}", text(&out));
        let _ = std::fs::remove_dir_all(&dir);
    }
    vllm.shutdown().await;
    tgi_sim.shutdown().await;
}

/// An Ollama backend at a server without Ollama's API (or an OpenAI route
/// the server lacks) gets no bare 404: the line names the server the
/// detection found, the route it lacks and the backend to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_names_the_server_and_the_backend_it_speaks() {
    let personality = |engine: SimEngine| SimConfig {
        engine,
        step_ms: 2.0,
        ..SimConfig::default()
    };
    let vllm = start_sim(personality(SimEngine::Vllm)).await;
    let llamacpp = start_sim(personality(SimEngine::Llamacpp)).await;
    let ollama = start_sim(personality(SimEngine::Ollama)).await;
    for (sim, backend, want) in [
        (
            &vllm,
            "ollama-generate",
            "and has no /api/generate: use --backend openai-chat (or openai-completions)",
        ),
        (
            &llamacpp,
            "ollama-chat",
            "is llama.cpp's llama-server and has no /api/chat: use --backend openai-chat",
        ),
        (
            &ollama,
            "openai-completions",
            "is Ollama and has no /v1/completions: use --backend ollama-chat",
        ),
    ] {
        let dir = scratch("sim-sglang-tgi", "404-backend");
        let mut args = sweep_args(
            sim,
            &dir,
            &[
                "--concurrency",
                "1",
                "--num-prompts",
                "2",
                "--warmup",
                "1",
                "--random-output-len",
                "8",
            ],
        );
        args.extend(["--backend".to_string(), backend.to_string()]);
        let out = tokbench_async(args).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = crate::support::stderr(&out);
        assert!(
            stderr.contains(want),
            "{backend}: {want} not said: {}",
            text(&out)
        );
        assert!(
            stderr.contains(&format!("the server at {}", url(sim, ""))),
            "{}",
            text(&out)
        );
        assert!(!stderr.contains("tgi-generate"), "{}", text(&out));
        let _ = std::fs::remove_dir_all(&dir);
    }
    vllm.shutdown().await;
    llamacpp.shutdown().await;
    ollama.shutdown().await;
}
