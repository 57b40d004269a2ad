//! The notes and labels a run prints must be true for that run: no note of
//! an asked-for length where none was asked for, no `ignore_eos` where the
//! engine cannot honour it, and a repeat of a run's config that keeps the
//! server's prefix cache as cold as the first run's.

use std::path::Path;

use tokbench::sim::{SimConfig, SimEngine};

use crate::support::{read_json, scratch, start_sim, text, tokbench_async};

fn sweep(url: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "sweep",
        "--base-url",
        url,
        "--no-tui",
        "--result-dir",
        &dir.display().to_string(),
        "--warmup",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `--turns 4`: each prompt carries the earlier turns, so the prompts are
/// longer than `--random-input-len` and the prefix cache answers the
/// conversation. No note compares them with one asked length, and none
/// says prompts repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_get_no_note_of_an_asked_length() {
    let sim = start_sim(SimConfig::default()).await;
    let dir = scratch("notes", "turns");
    let url = format!("http://{}", sim.addr);
    let out = tokbench_async(sweep(
        &url,
        &dir,
        &[
            "--concurrency",
            "1,2",
            "--num-prompts",
            "8",
            "--turns",
            "4",
            "--random-input-len",
            "64",
            "--random-output-len",
            "8",
            "--seed",
            "3",
            "--probe-interval",
            "0.2",
        ],
    ))
    .await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!all.contains("asked for"), "{all}");
    assert!(!all.contains("ended before"), "{all}");
    assert!(!all.contains("prompts repeat"), "{all}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Ollama personality ending answers at its own end-of-sequence, sent
/// through Ollama's native API: the label is the cap it honours, and the
/// note says the engine cannot force lengths, not to use ignore_eos.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_is_labelled_with_the_cap_it_honours() {
    let sim = start_sim(SimConfig {
        engine: SimEngine::Ollama,
        eos_mean_tokens: 5.0,
        parallel: Some(2),
        ..SimConfig::default()
    })
    .await;
    let dir = scratch("notes", "ollama-eos");
    let url = format!("http://{}", sim.addr);
    let out = tokbench_async(sweep(
        &url,
        &dir,
        &[
            "--backend",
            "ollama-generate",
            "--concurrency",
            "1,2",
            "--num-prompts",
            "12",
            "--random-input-len",
            "32",
            "--random-output-len",
            "64",
            "--seed",
            "3",
        ],
    ))
    .await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("num_predict (a cap, not forced)"), "{all}");
    assert!(!all.contains(", ignore_eos"), "{all}");
    assert!(!all.contains("use ignore_eos"), "{all}");
    assert!(
        all.contains("this engine cannot force an answer's length"),
        "{all}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap_or_default();
    assert!(!report.contains(" ignore_eos"), "{report}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn seed_of(dir: &Path) -> u64 {
    let summary = read_json(&dir.join("summary.json"));
    summary["run"]["seed"]
        .as_u64()
        .unwrap_or_else(|| panic!("no seed in {summary}"))
}

/// A run's config.toml, run again, draws a fresh seed: its prompts are new
/// to the prefix cache the first run filled. `--seed` repeats them on
/// purpose, and the run says what the cache did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_draws_a_fresh_seed_and_a_given_seed_says_what_the_cache_did() {
    let sim = start_sim(SimConfig::default()).await;
    let url = format!("http://{}", sim.addr);
    let shape = [
        "--concurrency",
        "1",
        "--num-prompts",
        "30",
        "--random-input-len",
        "256",
        "--random-output-len",
        "16",
        "--probe-interval",
        "0.2",
    ];
    let first = scratch("notes", "seed-first");
    let out = tokbench_async(sweep(&url, &first, &shape)).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let config = std::fs::read_to_string(first.join("config.toml")).expect("config.toml");
    let drawn = seed_of(&first);
    assert!(
        config.contains(&format!("# seed = {drawn}  (drawn; uncomment")),
        "{config}"
    );
    assert!(!config.lines().any(|l| l.starts_with("seed =")), "{config}");
    let config_path = first.join("config.toml").display().to_string();

    // Again from the saved settings: a seed of its own, a cold cache.
    let again = scratch("notes", "seed-again");
    let args = vec![
        "sweep".to_string(),
        "--config".into(),
        config_path.clone(),
        "--result-dir".into(),
        again.display().to_string(),
    ];
    let out = tokbench_async(args).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert_ne!(seed_of(&again), drawn);
    assert!(!all.contains("prompts repeat"), "{all}");
    assert!(!all.contains("repeats earlier prompts"), "{all}");

    // With the first run's seed given: the same prompts, and the line.
    let given = scratch("notes", "seed-given");
    let args = vec![
        "sweep".to_string(),
        "--config".into(),
        config_path,
        "--result-dir".into(),
        given.display().to_string(),
        "--seed".into(),
        drawn.to_string(),
    ];
    let out = tokbench_async(args).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert_eq!(seed_of(&given), drawn);
    assert!(
        all.contains(&format!(
            "--seed {drawn} repeats earlier prompts: the server's prefix cache answered"
        )),
        "{all}"
    );
    let kept = std::fs::read_to_string(given.join("config.toml")).expect("config.toml");
    assert!(
        kept.lines().any(|l| l == format!("seed = {drawn}")),
        "{kept}"
    );
    sim.shutdown().await;
    for d in [first, again, given] {
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// Ollama with 2 slots swept at 1, 2, 4, 8 streams: requests queue for a
/// slot from 4 streams on. The slot diagnosis names OLLAMA_NUM_PARALLEL,
/// and the knee's cause is the slot cap, not the KV cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_with_two_slots_is_told_its_slot_cap() {
    let sim = start_sim(SimConfig {
        engine: SimEngine::Ollama,
        parallel: Some(2),
        ..SimConfig::default()
    })
    .await;
    let dir = scratch("notes", "ollama-slots");
    let url = format!("http://{}", sim.addr);
    let out = tokbench_async(sweep(
        &url,
        &dir,
        &[
            "--backend",
            "ollama-generate",
            "--concurrency",
            "1,2,4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "64",
            "--random-output-len",
            "32",
            "--seed",
            "3",
            "--probe-interval",
            "0.2",
        ],
    ))
    .await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains(
            "note: requests are waiting for a slot: OLLAMA_NUM_PARALLEL is probably about 2"
        ),
        "{all}"
    );
    let knee = all
        .lines()
        .find(|l| l.starts_with("knee: "))
        .unwrap_or_else(|| panic!("no knee: {all}"));
    assert!(
        knee.contains("(the slot cap, OLLAMA_NUM_PARALLEL 2)"),
        "{knee}"
    );
    assert!(!knee.contains("KV cache"), "{knee}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A vLLM-like server of 256 slots whose requests fail or stall: its
/// throughput stalls for the failures, and nothing waits for a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_not_told_they_wait_for_a_slot() {
    let sim = start_sim(SimConfig {
        fail_rate: 0.5,
        stall_rate: 0.2,
        ..SimConfig::default()
    })
    .await;
    let dir = scratch("notes", "faults-slots");
    let url = format!("http://{}", sim.addr);
    let mut args = sweep(
        &url,
        &dir,
        &[
            "--concurrency",
            "1,2,4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "64",
            "--random-output-len",
            "32",
            "--seed",
            "3",
            "--probe-interval",
            "0.2",
            "--stall-timeout",
            "1",
        ],
    );
    // Three warmup requests: at least one gets through the faults.
    if let Some(at) = args.iter().position(|a| a == "--warmup") {
        args[at + 1] = "3".into();
    }
    let out = tokbench_async(args).await;
    let all = text(&out);
    assert!(all.contains("requests failed"), "{all}");
    assert!(!all.contains("waiting for a slot"), "{all}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ignore_eos` sent to a server that still ends answers at its own end
/// (Ollama's OpenAI API, named vLLM by `--engine`): the tables do not claim
/// it was honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_eos_not_honoured_is_not_claimed() {
    let sim = start_sim(SimConfig {
        engine: SimEngine::Ollama,
        eos_mean_tokens: 5.0,
        parallel: Some(2),
        ..SimConfig::default()
    })
    .await;
    let dir = scratch("notes", "eos-ignored");
    let url = format!("http://{}", sim.addr);
    let out = tokbench_async(sweep(
        &url,
        &dir,
        &[
            "--engine",
            "vllm",
            "--concurrency",
            "1",
            "--num-prompts",
            "8",
            "--random-input-len",
            "32",
            "--random-output-len",
            "64",
            "--seed",
            "3",
        ],
    ))
    .await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let table = all
        .lines()
        .find(|l| l.starts_with("tokbench sweep, "))
        .unwrap_or_else(|| panic!("no table: {all}"));
    assert!(table.contains("ignore_eos sent, yet "), "{table}");
    assert!(
        all.contains("ignore_eos was sent, yet the server ended answers early"),
        "{all}"
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dataset and a replayed trace set each request's lengths: neither is
/// compared with the flags' one length (`--random-input-len` 1024 by
/// default), and short answers are not counted against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datasets_and_traces_get_no_note_of_an_asked_length() {
    let sim = start_sim(SimConfig::default()).await;
    let url = format!("http://{}", sim.addr);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dataset = root.join("datasets/requests.jsonl").display().to_string();
    let trace = root.join("traces/azure_small.csv").display().to_string();
    for (name, extra) in [
        (
            "dataset",
            vec!["--dataset", &dataset, "--concurrency", "1,2"],
        ),
        ("trace", vec!["--replay", &trace]),
    ] {
        let dir = scratch("notes", name);
        let mut args = sweep(&url, &dir, &extra);
        // Short answers where a record does not say its own: a quick test.
        args.extend(["--seed", "3", "--random-output-len", "16"].map(String::from));
        let out = tokbench_async(args).await;
        let all = text(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {all}");
        assert!(!all.contains("asked for"), "{name}: {all}");
        assert!(!all.contains("ended before"), "{name}: {all}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    sim.shutdown().await;
}
