//! Client overhead: CPU seconds tokbench spends per million streamed tokens,
//! against the simulator with zero step time (one token per SSE chunk, as
//! fast as the simulator can write them). The client runs on core 0 and the
//! simulator on core 1 (`taskset`), so neither steals the other's time.
//!
//! Run: `cargo bench --bench client_cpu` (prints a table; asserts nothing).
//! The figure is the whole `tokbench sweep` process as the kernel accounts
//! it (getrusage of the waited child, user + system): start-up, preflight,
//! warmup, every statistic and every `requests.jsonl` line included. The
//! simulator is another process and is not counted. The first row is a
//! one-request sweep: the fixed cost of a run (start-up, preflight, files),
//! which the other rows include once.
//!
//! `TOKBENCH_BIN=path/to/tokbench` measures another build (an A/B of two
//! commits on the same machine state); `CLIENT_CPU_ARGS="--tx-clock kernel"`
//! adds flags to every sweep (an A/B of two settings).

mod common;

use std::path::Path;
use std::time::Instant;

use common::{can_pin, command, instant_simulator};

const OUTPUT_LEN: u32 = 1000;

fn main() {
    let pin = can_pin();
    let (mut sim, base) = instant_simulator(pin.then_some("1"));

    println!(
        "client CPU per million streamed tokens (simulator at zero step time, one token per chunk)"
    );
    println!(
        "{:>11} {:>9} {:>10} {:>14} {:>15} {:>14}",
        "concurrency", "requests", "tokens", "client CPU s", "CPU s/M tokens", "tokens/s/core"
    );
    // (concurrency, measured requests of OUTPUT_LEN tokens, plus a warmup of
    // one request per stream); 0 requests: the fixed cost of a run, one
    // request of 16 tokens and no warmup.
    for (concurrency, requests) in [(1u32, 0u32), (1, 250), (256, 1024)] {
        let (requests, warmup, output_len) = if requests == 0 {
            (1, 0, 16)
        } else {
            (requests, concurrency, OUTPUT_LEN)
        };
        let dir = std::env::temp_dir().join(format!(
            "tokbench-bench-{}-{concurrency}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let before = children_cpu();
        let started = Instant::now();
        let extra = std::env::var("CLIENT_CPU_ARGS").unwrap_or_default();
        let mut args: Vec<String> = [
            "sweep",
            "--base-url",
            &base,
            "--no-tui",
            "--concurrency",
            &concurrency.to_string(),
            "--num-prompts",
            &requests.to_string(),
            "--warmup",
            &warmup.to_string(),
            "--random-input-len",
            "16",
            "--random-output-len",
            &output_len.to_string(),
            "--result-dir",
            &dir.display().to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(extra.split_whitespace().map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let status = command(pin.then_some("0"), &args)
            .spawn()
            .expect("spawn tokbench sweep")
            .wait()
            .expect("sweep ran");
        let wall = started.elapsed();
        let cpu = children_cpu() - before;
        assert!(status.success(), "sweep failed: {status}");
        // Warmup requests stream too: count their tokens with the measured ones.
        let measured = total_output_tokens(&dir.join(format!("sweep-c{concurrency}.json")));
        let tokens = measured + u64::from(warmup) * u64::from(output_len);
        println!(
            "{:>11} {:>9} {:>10} {:>14.3} {:>15.3} {:>14.0}",
            concurrency,
            requests,
            tokens,
            cpu,
            cpu / tokens as f64 * 1e6,
            tokens as f64 / cpu
        );
        eprintln!("  (wall {:.2} s)", wall.as_secs_f64());
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = sim.kill();
    let _ = sim.wait();
}

/// CPU seconds (user + system) of every child waited for so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn total_output_tokens(level_file: &Path) -> u64 {
    let text = std::fs::read_to_string(level_file).expect("level file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["total_output_tokens"]
        .as_u64()
        .expect("total_output_tokens")
}
