//! The live view's split of the waiting requests (in prefill, queued), read
//! from the server's running count at each scrape, against the split the
//! server's own per-request prefill times give at the level's end.

use serde_json::Value;
use tokbench::sim::{SimConfig, SimEngine, SimHandle};

use crate::support::*;

/// One level against `sim`, scraped every 50 ms: [streams, prompts, input
/// length, output length].
async fn sweep(sim: &SimHandle, dir: &std::path::Path, shape: &[&str; 4]) -> std::process::Output {
    let [streams, prompts, input, output] = shape;
    let args = [
        "sweep",
        "--base-url",
        &format!("http://{}", sim.addr),
        "--no-tui",
        "--result-dir",
        &dir.display().to_string(),
        "--seed",
        "7",
        "--concurrency",
        streams,
        "--num-prompts",
        prompts,
        "--random-input-len",
        input,
        "--random-output-len",
        output,
        "--probe-interval",
        "0.05",
    ];
    tokbench_async(args.map(String::from).to_vec()).await
}

fn mean_of(waiting: &Value, key: &str) -> f64 {
    waiting[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {waiting}"))
}

/// llama.cpp with 8 slots and a long prefill, 16 streams: half the
/// requests wait in its queue, and each admitted one spends a long step in
/// prefill. Its `/slots` count what runs and its `timings.prompt_ms` how
/// long each prefill took; the level's mean of the live split (the
/// scrapes' running count less the client's streaming) agrees with the
/// split the timings give within half a request, both parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_split_agrees_with_the_servers_prefill_times() {
    let sim = start_sim(SimConfig {
        engine: SimEngine::Llamacpp,
        parallel: Some(8),
        ..paced(10.0, 400.0)
    })
    .await;
    let dir = scratch("live_split", "llamacpp");
    let out = sweep(&sim, &dir, &["16", "96", "256", "32"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let level = read_json(&dir.join("sweep-c16.json"));
    let waiting = &level["waiting"];
    let live = &waiting["live"];
    let scrapes = live["scrapes"].as_u64().unwrap_or(0);
    eprintln!("waiting {waiting}");
    assert!(scrapes >= 20, "too few scrapes to judge: {live}");
    let (timed_prefill, timed_queued) = (
        mean_of(waiting, "in_prefill_mean"),
        mean_of(waiting, "queued_mean"),
    );
    let (live_prefill, live_queued) = (
        mean_of(live, "in_prefill_mean"),
        mean_of(live, "queued_mean"),
    );
    // Something to split: requests both queued and in prefill.
    assert!(timed_queued > 2.0 && timed_prefill > 0.3, "{waiting}");
    assert!(
        (live_prefill - timed_prefill).abs() <= 0.5,
        "in prefill: live {live_prefill} vs timings {timed_prefill}"
    );
    assert!(
        (live_queued - timed_queued).abs() <= 0.5,
        "queued: live {live_queued} vs timings {timed_queued}"
    );
    // The level block says it beside the timings' split.
    assert!(
        text(&out).contains("Split by its running count:"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
    sim.shutdown().await;
}

/// Ollama counts nothing it runs: no live split is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_saves_no_live_split() {
    let sim = start_sim(SimConfig {
        engine: SimEngine::Ollama,
        parallel: Some(1),
        ..paced(5.0, 100.0)
    })
    .await;
    let dir = scratch("live_split", "ollama");
    let out = sweep(&sim, &dir, &["2", "6", "64", "8"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let level = read_json(&dir.join("sweep-c2.json"));
    assert!(level["waiting"].is_object(), "{level}");
    assert!(
        level["waiting"].get("live").is_none(),
        "{}",
        level["waiting"]
    );
    let _ = std::fs::remove_dir_all(&dir);
    sim.shutdown().await;
}
