//! Memory of a long level: peak resident set of `tokbench sweep` over one
//! level of N requests of 256 output tokens at 64 streams, against the
//! simulator at zero step time (one token per SSE chunk, as fast as it can
//! write them). The client runs on core 0 and the simulator on core 1
//! (`taskset`) when both exist.
//!
//! Run: `cargo bench --bench memory` (prints a table; asserts nothing).
//! Rows: 10,000, 100,000 and 1,000,000 requests; `TOKBENCH_MEMORY_ROWS=
//! 2560,25600` picks others. The figure is the kernel's high-water mark of
//! the sweep process's resident memory (`wait4`'s `ru_maxrss`), start-up and
//! `requests.jsonl` buffering included; the simulator is another process.
//! The goal (issue 13): under 64 MB at a million requests, and 10k and 1M
//! within 16 MB of each other.
//!
//! `TOKBENCH_BIN=path/to/tokbench` measures another build (before/after).

mod common;

use std::time::Instant;

use common::{can_pin, command, instant_simulator};

const CONCURRENCY: u32 = 64;
const OUTPUT_LEN: u32 = 256;

fn main() {
    let rows: Vec<u64> = std::env::var("TOKBENCH_MEMORY_ROWS")
        .ok()
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    let pin = can_pin();
    let (mut sim, base) = instant_simulator(pin.then_some("1"));

    println!(
        "peak RSS of one level at {CONCURRENCY} streams, {OUTPUT_LEN} output tokens per request"
    );
    println!(
        "{:>10} {:>12} {:>10} {:>13} {:>16}",
        "requests", "tokens", "wall s", "peak RSS MB", "requests.jsonl MB"
    );
    for requests in rows {
        let dir =
            std::env::temp_dir().join(format!("tokbench-memory-{}-{requests}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let started = Instant::now();
        let concurrency = CONCURRENCY.to_string();
        let num_prompts = requests.to_string();
        let output_len = OUTPUT_LEN.to_string();
        let result_dir = dir.display().to_string();
        let mut sweep = command(
            pin.then_some("0"),
            &[
                "sweep",
                "--base-url",
                &base,
                "--no-tui",
                "--concurrency",
                &concurrency,
                "--num-prompts",
                &num_prompts,
                "--warmup",
                "0",
                "--random-input-len",
                "16",
                "--random-output-len",
                &output_len,
                "--result-dir",
                &result_dir,
            ],
        );
        // Reaped by wait4 below, which also reports this child's own peak
        // memory (Child::wait would not).
        #[allow(clippy::zombie_processes)]
        let child = sweep.spawn().expect("spawn tokbench sweep");
        let (ok, max_rss_kb) = wait_with_rusage(child.id());
        let wall = started.elapsed();
        assert!(ok, "sweep failed");
        let jsonl = std::fs::metadata(dir.join("requests.jsonl")).map_or(0, |m| m.len());
        println!(
            "{:>10} {:>12} {:>10.1} {:>13.1} {:>16.1}",
            requests,
            requests * u64::from(OUTPUT_LEN),
            wall.as_secs_f64(),
            max_rss_kb as f64 / 1024.0,
            jsonl as f64 / 1e6
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = sim.kill();
    let _ = sim.wait();
}

/// Wait for one child and return (exited 0, its own peak RSS in KiB).
fn wait_with_rusage(pid: u32) -> (bool, i64) {
    let mut status = 0;
    // SAFETY: wait4 only writes the status and the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let got = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(got, pid as libc::pid_t, "wait4 failed");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, usage.ru_maxrss)
}
