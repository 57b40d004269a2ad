//! Traffic shape end to end (issue 7): the real binary against the built-in
//! simulator, whose tokenizer counts whitespace-separated words, so the
//! lengths the requests really had can be checked against what was asked.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tokbench::sim::SimHandle;

use crate::support::{self, paced, read_json, tokbench_async};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/datasets")
        .join(name)
        .display()
        .to_string()
}

fn scratch(name: &str) -> PathBuf {
    support::scratch_path("traffic", name)
}

/// Small fixed steps: a token every half millisecond, no prefill cost.
async fn start_sim() -> SimHandle {
    support::start_sim(paced(0.5, 0.0)).await
}

async fn sweep(sim: &SimHandle, dir: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec![
        "sweep".into(),
        "--base-url".into(),
        format!("http://{}", sim.addr),
        "--no-tui".into(),
        "--no-probe".into(),
        "--warmup".into(),
        "2".into(),
        "--result-dir".into(),
        dir.display().to_string(),
        "--seed".into(),
        "7".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = tokbench_async(args).await;
    assert!(
        out.status.success(),
        "tokbench {extra:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn requests(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_profile_with_a_range_ratio_hits_its_means_and_records_the_spread() {
    let sim = start_sim().await;
    let dir = scratch("chat");
    let out = sweep(
        &sim,
        &dir,
        &[
            "--profile",
            "chat",
            "--random-range-ratio",
            "0.5",
            "--concurrency",
            "50",
            "--num-prompts",
            "300",
        ],
    )
    .await;
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["profile"], "chat");
    assert_eq!(summary["run"]["input_len"], 512);
    assert_eq!(summary["run"]["output_len"], 256);
    assert_eq!(summary["run"]["range_ratio"], 0.5);
    let traffic = &summary["traffic"];
    let (input_mean, output_mean) = (f(&traffic["input_mean"]), f(&traffic["output_mean"]));
    println!("chat r=0.5: achieved input mean {input_mean}, output mean {output_mean}");
    assert!((input_mean / 512.0 - 1.0).abs() < 0.05, "{traffic}");
    assert!((output_mean / 256.0 - 1.0).abs() < 0.05, "{traffic}");
    // The spread stays in [L/2, 3L/2] and is recorded whole.
    for (key, lo, hi) in [
        ("input_tokens", 256.0, 768.0),
        ("output_tokens", 128.0, 384.0),
    ] {
        let d = &traffic[key];
        for stat in ["mean", "min", "p50", "p99", "max"] {
            assert!(d[stat].is_number(), "{key}.{stat}: {d}");
        }
        assert!(f(&d["min"]) >= lo && f(&d["max"]) <= hi, "{key}: {d}");
        assert!(f(&d["max"]) - f(&d["min"]) > (hi - lo) * 0.8, "spread: {d}");
        assert_eq!(d["count"], 300);
    }
    // requests.jsonl agrees: the server's own input count, and what came out.
    let lines = requests(&dir);
    assert_eq!(lines.len(), 300);
    let mean = |k: &str| lines.iter().map(|l| f(&l[k])).sum::<f64>() / lines.len() as f64;
    assert!((mean("input_tokens") - input_mean).abs() < 1e-3);
    assert!((mean("output_tokens") - output_mean).abs() < 1e-3);
    assert!(
        lines.iter().all(|l| l.get("prompt").is_none()),
        "no text saved"
    );
    // The level file carries the same, with the profile.
    let level = read_json(&dir.join("sweep-c50.json"));
    assert_eq!(level["profile"], "chat");
    assert_eq!(level["traffic"]["input_mean"], traffic["input_mean"]);
    assert!(level["traffic"]["output_tokens"]["p99"].is_number());
    // The reports' titles say the profile and the achieved means.
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    let title = report.lines().next().unwrap_or("");
    assert!(title.contains("profile chat"), "{title}");
    assert!(
        title.contains(&format!("(achieved {input_mean:.0} / {output_mean:.0})")),
        "{title}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("dataset line"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jsonl_dataset_sends_each_record_once_per_level() {
    let sim = start_sim().await;
    let dir = scratch("jsonl");
    sweep(
        &sim,
        &dir,
        &[
            "--dataset",
            &fixture("requests.jsonl"),
            "--concurrency",
            "1,3",
            "--random-output-len",
            "16",
            "--save-prompts",
        ],
    )
    .await;
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["profile"], "dataset");
    assert_eq!(summary["run"]["dataset"], "requests.jsonl");
    assert_eq!(summary["dataset"]["records"], 6);
    assert_eq!(summary["dataset"]["skipped"], 0);
    assert_eq!(summary["dataset"]["skipped_lines"], serde_json::json!([]));
    let levels = summary["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2);
    for level in levels {
        assert_eq!(level["completed"], 6, "each record once: {level}");
        assert_eq!(level["failed"], 0);
        // output_len 32, 48, 24, 64 from the records, 16 for the two without.
        assert_eq!(level["total_output_tokens"], 32 + 16 + 48 + 24 + 16 + 64);
    }
    // Prompts as given: the first record is 24 words, so 24 input tokens.
    let lines = requests(&dir);
    assert_eq!(lines.len(), 12);
    let by_output = |n: u64| {
        lines
            .iter()
            .find(|l| l["output_tokens_requested"] == n)
            .unwrap_or_else(|| panic!("a request for {n} tokens: {lines:?}"))
    };
    assert_eq!(by_output(32)["input_tokens"], 24);
    // The messages record (output_len 48) reached the server as two
    // messages: their words only ("You are a concise assistant." + "List
    // three ways to keep bread fresh for longer." = 5 + 9), without the
    // role labels a flattened prompt would have.
    assert_eq!(by_output(48)["input_tokens"], 14);
    assert!(lines
        .iter()
        .all(|l| l["output_tokens"] == l["output_tokens_requested"]));
    assert!(
        summary["traffic"]["input_mean"].is_number() && summary["traffic"]["profile"] == "dataset"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharegpt_dataset_uses_the_first_human_turn_and_the_answer_length() {
    let sim = start_sim().await;
    let dir = scratch("sharegpt");
    let out = sweep(
        &sim,
        &dir,
        &[
            "--dataset",
            &fixture("sharegpt.json"),
            "--concurrency",
            "2",
            "--profile",
            "chat",
        ],
    )
    .await;
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["dataset"]["format"], "sharegpt");
    assert_eq!(summary["dataset"]["records"], 3);
    assert_eq!(
        summary["dataset"]["skipped_lines"],
        serde_json::json!([{"line": 19, "reason": "entry 3: conversations has no human turn"}])
    );
    let level = &summary["levels"][0];
    assert_eq!(level["completed"], 3);
    // Answers of 10 and 14 words; the entry without one gets chat's 256.
    assert_eq!(level["total_output_tokens"], 10 + 14 + 256);
    // "Explain why the sky looks blue on a clear afternoon." is 10 words.
    assert!(requests(&dir).iter().any(|l| l["input_tokens"] == 10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("dataset line 19: entry 3: conversations has no human turn"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_dataset_lines_are_reported_and_skipped() {
    let sim = start_sim().await;
    let dir = scratch("bad");
    let out = sweep(
        &sim,
        &dir,
        &["--dataset", &fixture("bad.jsonl"), "--concurrency", "2"],
    )
    .await;
    let summary = read_json(&dir.join("summary.json"));
    let skipped = summary["dataset"]["skipped_lines"]
        .as_array()
        .expect("skipped_lines");
    let lines: Vec<u64> = skipped.iter().filter_map(|s| s["line"].as_u64()).collect();
    assert_eq!(lines, vec![2, 4, 6], "{skipped:?}");
    assert_eq!(summary["dataset"]["skipped"], 3);
    assert_eq!(summary["dataset"]["records"], 4);
    assert_eq!(summary["levels"][0]["completed"], 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "dataset line 2: not valid JSON",
        "dataset line 4: not valid JSON",
        "dataset line 6: prompt is not a string",
    ] {
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    assert_eq!(stderr.matches("dataset line ").count(), 3, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_refuses_different_profiles_unless_forced() {
    let sim = start_sim().await;
    let (a, b) = (scratch("cmp-a"), scratch("cmp-b"));
    // Same lengths, different presets (and prompt text: corpus, prose).
    let short = ["--random-input-len", "24", "--random-output-len", "8"];
    let common = ["--concurrency", "2", "--num-prompts", "6"];
    let corpus = fixture("corpus.txt");
    let mut args_a = vec!["--profile", "chat", "--corpus", &corpus];
    args_a.extend(short.iter().chain(&common));
    let mut args_b = vec!["--profile", "decode-heavy", "--prompt-source", "prose"];
    args_b.extend(short.iter().chain(&common));
    sweep(&sim, &a, &args_a).await;
    sweep(&sim, &b, &args_b).await;
    assert_eq!(
        read_json(&b.join("summary.json"))["run"]["prompt_source"],
        "prose"
    );
    assert_eq!(
        read_json(&a.join("summary.json"))["run"]["corpus"],
        "corpus.txt"
    );
    // Both sent prompts of the asked length: the nonce and 23 words.
    for dir in [&a, &b] {
        assert!(requests(dir).iter().all(|l| l["input_tokens"] == 24));
    }
    let compare = |force: bool| {
        let mut args = vec![
            "compare".to_string(),
            a.display().to_string(),
            b.display().to_string(),
        ];
        if force {
            args.push("--force".into());
        }
        tokbench_async(args)
    };
    let refused = compare(false).await;
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("profile decode-heavy") && stderr.contains("profile chat"),
        "{stderr}"
    );
    let forced = compare(true).await;
    assert_eq!(
        forced.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
}
