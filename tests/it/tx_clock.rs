//! `--tx-clock kernel` (issue 15 item 3): a closed-loop request's t0 is the
//! kernel's send time of its last byte, and the request line says so; the
//! default run's lines carry neither key (their keys are the contract's).

use std::process::Command;

use crate::support::{bin, scratch, text};

fn request_lines(args: &[&str], name: &str) -> Vec<serde_json::Value> {
    let dir = scratch("tx_clock", name);
    let out = Command::new(bin())
        .args([
            "demo",
            "--no-tui",
            "--concurrency",
            "2",
            "--num-prompts",
            "8",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
        ])
        .args(args)
        .arg("--result-dir")
        .arg(&dir)
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "demo: {}", text(&out));
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn the_kernel_send_clock_is_recorded_per_request_and_only_when_asked() {
    let kernel = request_lines(&["--tx-clock", "kernel"], "kernel");
    assert_eq!(kernel.len(), 8);
    for line in &kernel {
        assert_eq!(line["tx_clock"], "kernel", "{line}");
        let shift = line["tx_shift_ms"]
            .as_f64()
            .expect("a shift with the clock");
        let ttft = line["ttft_ms"].as_f64().expect("a TTFT");
        // t0 moves later, never past the first token.
        assert!(
            (0.0..ttft).contains(&shift),
            "shift {shift} ms, TTFT {ttft} ms"
        );
    }
    let default = request_lines(&[], "default");
    assert_eq!(default.len(), 8);
    for line in &default {
        assert!(
            line.get("tx_clock").is_none() && line.get("tx_shift_ms").is_none(),
            "{line}"
        );
    }
}
