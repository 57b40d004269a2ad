//! Rounds and stability (issue 5 item 4), end to end: the real binary runs every level
//! three times against the built-in simulator. On a quiet simulator the rounds agree
//! and nothing is flagged; with injected noise (`SimConfig::noise`, a machine that is
//! noisy or throttling) they differ and summary.json carries the `rounds_spread`
//! diagnosis.
//!
//! The simulator runs one sequence at a time (`max_num_seqs` 1) with 2 ms steps and no
//! prefill cost. That is what keeps the quiet case quiet on a loaded 2-core machine: in
//! a batch of several streams a new request waits for the next step boundary, so its
//! TTFT is one step or two depending on whether it raced in before the engine woke
//! (with 8 requests a level, p50 TTFT then jumped by 20-70% between rounds of a quiet
//! run). With one sequence at a time there is no race: each request queues behind the
//! other streams' whole requests, so at 2 streams TTFT is 33 steps (66 ms) less the
//! client's turnaround (well under 1 ms), and throughput is one token per step. A
//! level is 8 requests of 32 tokens: 256 steps, 0.5 s; measured spreads are under 1%.
//!
//! The noisy case: noise 0.3, a new factor every 512 ms of engine time (about one
//! level), seed 28. The engine's steps, and so the factor each step gets, do not depend
//! on the machine's timing at all here (serial requests of fixed size; the noise clock
//! counts busy time only), so the spread is the same in every run: 40% at 2 streams
//! and 53% at 4 (the larger of throughput and p50 TTFT). A model of the same steps gives at least 37% for any warmup from 40
//! to 200 steps; over 200 seeds, 97% of such runs would be flagged, so the fixed seed
//! only removes the last few per cent of luck.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tokbench::sim::{self, SimConfig};

use crate::support::{self, read_json, text};

const LIMIT: f64 = 0.15;

fn scratch(name: &str) -> PathBuf {
    support::scratch_path("rounds", name)
}

fn sim_config(noise: f64) -> SimConfig {
    SimConfig {
        step_ms: 2.0,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k: 0.0,
        max_num_seqs: 1,
        noise,
        noise_period_ms: 512.0,
        noise_seed: 28,
        ..SimConfig::default()
    }
}

/// One `--rounds 3` sweep at 2 and 4 streams against a fresh simulator; its summary.json.
async fn sweep_three_rounds(cfg: SimConfig, dir: &Path) -> Value {
    let sim = sim::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), cfg)
        .await
        .expect("simulator starts");
    let args: Vec<String> = [
        "sweep",
        "--base-url",
        &format!("http://{}", sim.addr),
        "--no-tui",
        "--result-dir",
        &dir.display().to_string(),
        "--seed",
        "7",
        "--rounds",
        "3",
        "--concurrency",
        "2,4",
        "--num-prompts",
        "8",
        "--random-input-len",
        "32",
        "--random-output-len",
        "32",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Off the async runtime: the simulator lives on it.
    let out = tokio::task::spawn_blocking(move || {
        Command::new(support::bin())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("tokbench runs")
    })
    .await
    .expect("join");
    sim.shutdown().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    read_json(&dir.join("summary.json"))
}

/// The two spreads of one `rounds` entry.
fn spreads(entry: &Value) -> (f64, f64) {
    let get = |key: &str| {
        entry[key]["spread"]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}.spread is not a number in {entry}"))
    };
    (get("output_throughput"), get("p50_ttft_ms"))
}

/// The `rounds` entries (one per concurrency, three rounds each), printed.
fn rounds(summary: &Value, label: &str) -> Vec<Value> {
    let rounds = summary["rounds"].as_array().expect("rounds array").clone();
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    for (entry, c) in rounds.iter().zip([2, 4]) {
        assert_eq!(entry["concurrency"], c, "{entry}");
        assert_eq!(entry["rounds"], 3, "{entry}");
        let (tput, ttft) = spreads(entry);
        eprintln!(
            "{label} c{c}: spread of throughput {:.1}%, of p50 TTFT {:.1}% \
             (medians {} tok/s, {} ms)",
            tput * 100.0,
            ttft * 100.0,
            entry["output_throughput"]["median"],
            entry["p50_ttft_ms"]["median"],
        );
    }
    rounds
}

/// The largest spread of either metric over the levels.
fn worst_spread(rounds: &[Value]) -> f64 {
    rounds
        .iter()
        .map(|e| {
            let (a, b) = spreads(e);
            a.max(b)
        })
        .fold(0.0, f64::max)
}

fn diagnosis<'a>(summary: &'a Value, id: &str) -> Option<&'a Value> {
    summary["diagnoses"]
        .as_array()
        .expect("diagnoses array")
        .iter()
        .find(|d| d["id"] == id)
}

/// Acceptance: a quiet simulator run is not flagged, and the rounds have their files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_rounds_are_not_flagged() {
    let dir = scratch("quiet");
    let mut summary = sweep_three_rounds(sim_config(0.0), &dir).await;
    let mut worst = worst_spread(&rounds(&summary, "quiet"));
    if worst > LIMIT {
        // Measured spreads are under 1%, but a client stalled for longer than a whole
        // request (~64 ms, a burst of load from the tests beside this one on 2 shared
        // cores) idles the engine and costs that round throughput. Once is bad luck;
        // twice is a finding.
        eprintln!("quiet run over the limit; running it once more");
        let _ = std::fs::remove_dir_all(&dir);
        summary = sweep_three_rounds(sim_config(0.0), &dir).await;
        worst = worst_spread(&rounds(&summary, "quiet"));
    }
    assert!(
        worst <= LIMIT,
        "quiet rounds spread {worst} over {LIMIT}: {}",
        summary["rounds"]
    );
    assert!(
        diagnosis(&summary, "rounds_spread").is_none(),
        "{}",
        summary["diagnoses"]
    );
    for entry in summary["rounds"].as_array().expect("rounds") {
        assert_eq!(entry["noisy"], false, "{entry}");
    }
    // Each round is its own level file; the first keeps the plain name.
    for c in [2, 4] {
        for name in [
            format!("sweep-c{c}.json"),
            format!("sweep-c{c}-r2.json"),
            format!("sweep-c{c}-r3.json"),
        ] {
            assert!(dir.join(&name).is_file(), "{name} missing");
        }
        assert!(!dir.join(format!("sweep-c{c}-r4.json")).exists());
    }
    let levels = summary["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Acceptance: with injected noise the spread is flagged, in the words of issue 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noisy_rounds_are_flagged() {
    let dir = scratch("noisy");
    let summary = sweep_three_rounds(sim_config(0.3), &dir).await;
    let rounds = rounds(&summary, "noisy");
    assert!(
        rounds.iter().any(|e| e["noisy"] == true),
        "no noisy level: {rounds:?}"
    );
    let d = diagnosis(&summary, "rounds_spread")
        .unwrap_or_else(|| panic!("no rounds_spread in {}", summary["diagnoses"]));
    let message = d["message"].as_str().expect("message");
    eprintln!("{message}");
    assert!(message.starts_with("results vary by "), "{message}");
    assert!(message.contains("between rounds"), "{message}");
    assert!(
        d["evidence"]["max_spread"].as_f64().unwrap_or(0.0) > LIMIT,
        "{d}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
