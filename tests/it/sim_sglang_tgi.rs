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

use crate::support::{read_json, scratch, start_sim, text, tokbench_async};

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
