//! Fault injection: every mode of the simulator's faults is survived by a sweep run
//! with the real binary: the failures are counted in their class, the run completes
//! and every result file is written.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::Value;
use tokbench::sim::{self, SimConfig, SimEngine};

use crate::support::{self, read_json, tokbench_async};

const NUM_PROMPTS: u64 = 8;
const LEVELS: [u64; 2] = [2, 4];

fn scratch(name: &str) -> PathBuf {
    support::scratch_path("faults", name)
}

/// Run a short sweep against a simulator with `cfg`'s faults; check that it survives
/// and return the total count of `class` over the levels.
async fn sweep_with(name: &str, cfg: SimConfig, class: &str) -> u64 {
    let sim = sim::spawn(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        SimConfig {
            step_ms: 1.0,
            step_ms_per_seq: 0.0,
            prefill_ms_per_1k: 0.0,
            ..cfg
        },
    )
    .await
    .expect("simulator starts");
    let dir = scratch(name);
    let args: Vec<String> = [
        "sweep",
        "--base-url",
        &format!("http://{}", sim.addr),
        "--concurrency",
        "2,4",
        "--num-prompts",
        &NUM_PROMPTS.to_string(),
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--stall-timeout",
        "0.3",
        "--no-tui",
        "--seed",
        "7",
        // A warmup whose requests all fail stops the run before the sweep; the
        // faults are about the measured levels.
        "--warmup",
        "0",
        "--result-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokbench_async(args).await;
    let log = format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{name}: {log}");
    assert!(
        dir.join("summary.json").is_file(),
        "{name}: no summary.json\n{log}"
    );
    let mut total = 0;
    for c in LEVELS {
        let level = read_json(&dir.join(format!("sweep-c{c}.json")));
        let completed = level["completed"].as_u64().unwrap_or(0);
        let failed = level["failed"].as_u64().unwrap_or(0);
        assert_eq!(
            completed + failed,
            NUM_PROMPTS,
            "{name} c{c}: completed {completed} + failed {failed}\n{level}"
        );
        let errors = level["errors"].as_object().cloned().unwrap_or_default();
        for (k, v) in &errors {
            assert_eq!(
                k, class,
                "{name} c{c}: unexpected error class in {errors:?}"
            );
            assert!(v.as_u64().is_some(), "{name} c{c}: {errors:?}");
        }
        total += errors.get(class).and_then(Value::as_u64).unwrap_or(0);
    }
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    total
}

fn faults(fail: f64, stall: f64, disconnect: f64, malformed: f64) -> SimConfig {
    SimConfig {
        fail_rate: fail,
        stall_rate: stall,
        disconnect_rate: disconnect,
        malformed_rate: malformed,
        fault_seed: 3,
        ..SimConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_mode_is_survived_and_counted_in_its_class() {
    let cases = [
        ("fail", faults(0.4, 0.0, 0.0, 0.0), "http_500"),
        ("stall", faults(0.0, 0.4, 0.0, 0.0), "stalled"),
        (
            "disconnect",
            faults(0.0, 0.0, 0.4, 0.0),
            "connection_closed",
        ),
        ("malformed", faults(0.0, 0.0, 0.0, 0.4), "malformed_stream"),
    ];
    for (name, cfg, class) in cases {
        let n = sweep_with(name, cfg, class).await;
        assert!(n > 0, "{name}: no {class} counted");
        assert!(n < 2 * NUM_PROMPTS, "{name}: every request failed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_hit_the_other_personalities_too() {
    for engine in [
        SimEngine::Ollama,
        SimEngine::Llamacpp,
        SimEngine::Sglang,
        SimEngine::Tgi,
    ] {
        let cfg = SimConfig {
            engine,
            ..faults(0.0, 0.0, 0.0, 0.4)
        };
        let n = sweep_with(engine.name(), cfg, "malformed_stream").await;
        assert!(n > 0, "{}: no malformed_stream counted", engine.name());
        let cfg = SimConfig {
            engine,
            ..faults(0.4, 0.0, 0.0, 0.0)
        };
        let n = sweep_with(&format!("{}-fail", engine.name()), cfg, "http_500").await;
        assert!(n > 0, "{}: no http_500 counted", engine.name());
    }
}

#[test]
fn fault_rates_are_validated() {
    for bad in [-0.1, 1.1, f64::NAN] {
        assert!(faults(bad, 0.0, 0.0, 0.0).validate().is_err());
        assert!(faults(0.0, 0.0, 0.0, bad).validate().is_err());
    }
    assert!(faults(1.0, 1.0, 1.0, 1.0).validate().is_ok());
}
