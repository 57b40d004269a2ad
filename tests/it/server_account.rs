//! What the server says of itself, read into the verdict: the knee's cause
//! from its own running and waiting gauges, and its slot count from its
//! own busy slots where the client's streaming count undercounts.

use tokbench::sim::{SimConfig, SimEngine};

use crate::support::{paced, read_json, scratch, stderr, tokbench, Sim};

fn sweep(sim: &Sim, name: &str, extra: &[&str]) -> serde_json::Value {
    let dir = scratch("server_account", name);
    let d = dir.display().to_string();
    let url = sim.url();
    let mut args = vec![
        "sweep",
        "--base-url",
        &url,
        "--probe-interval",
        "0.1",
        "--warmup",
        "1",
        "--seed",
        "3",
        "--no-tui",
        "--result-dir",
        &d,
    ];
    args.extend(extra);
    let out = tokbench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    read_json(&dir.join("summary.json"))
}

/// vLLM at `--max-num-seqs 2` from 2 to 4 streams: the server's gauges
/// say running 2 both times while 2 wait, so the knee names the batch cap,
/// not the client's guess "KV cache or batch full".
#[test]
fn the_knee_at_the_batch_cap_is_told_by_the_servers_gauges() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 2,
        ..paced(5.0, 0.0)
    });
    let summary = sweep(
        &sim,
        "batch-cap",
        &[
            "--concurrency",
            "1,2,4",
            "--num-prompts",
            "24",
            "--random-input-len",
            "32",
            "--random-output-len",
            "48",
        ],
    );
    let knee = &summary["knee"];
    assert_eq!(
        (
            knee["from_concurrency"].as_u64(),
            knee["to_concurrency"].as_u64()
        ),
        (Some(2), Some(4)),
        "{summary}"
    );
    let reason = knee["reason"].as_str().unwrap_or_default();
    // 2 wait while both run; 3 in the instant a new request arrives
    // before the next step admits the one that waited.
    let waiting = reason
        .split_once("the server runs 2 at a time while up to ")
        .and_then(|(_, rest)| rest.strip_suffix(" wait (the batch cap; KV 0%)"))
        .and_then(|n| n.parse::<u32>().ok());
    assert!(matches!(waiting, Some(2 | 3)), "{reason}");
    assert!(!reason.contains("KV cache or batch full"), "{reason}");
}

/// llama.cpp with 2 slots and a prefill four times its decode: a request
/// in prefill holds a slot with no token yet, so the client sees about one
/// streaming; the server's busy slots say 2, and the diagnosis says 2.
#[test]
fn a_long_prefill_still_gives_the_true_slot_count() {
    let sim = Sim::with(SimConfig {
        engine: SimEngine::Llamacpp,
        parallel: Some(2),
        ..paced(4.0, 400.0)
    });
    let summary = sweep(
        &sim,
        "prefill",
        &[
            "--concurrency",
            "2,4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "1024",
            "--random-output-len",
            "16",
        ],
    );
    let diagnoses = summary["diagnoses"].as_array().cloned().unwrap_or_default();
    let slot = diagnoses
        .iter()
        .find(|d| d["id"] == "slot_queueing")
        .unwrap_or_else(|| panic!("no slot diagnosis: {summary}"));
    let message = slot["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the server runs about 2 at a time")
            && message.contains("the server's own gauges: 2 running of 2 slots"),
        "{message}"
    );
    assert_eq!(slot["evidence"]["server_running"], 2.0, "{slot}");
    // Its knee is the batch cap too, with llama.cpp's flag. At 8 streams
    // 6 wait while both slots run, 7 in the instant between one leaving
    // and the next entering: the most over the scrapes is one of them.
    let reason = summary["knee"]["reason"].as_str().unwrap_or_default();
    let waiting = reason
        .split_once("the server runs 2 at a time while up to ")
        .and_then(|(_, rest)| rest.strip_suffix(" wait (the batch cap, -np 2)"))
        .and_then(|n| n.parse::<u32>().ok());
    assert!(matches!(waiting, Some(6 | 7)), "{reason}");
}
