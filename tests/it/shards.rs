//! Timed levels and shards end to end (issue 13 parts 2 and 3): the
//! binary against the simulator, each check against what the simulator
//! logged it received and sent (its emission log), never a wall-clock guess.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{bin, paced, read_json, scratch, text, Sim};
use serde_json::Value;
use tokbench::load::request::record_id_of_request_id;
use tokbench::sim::{EmissionLog, SimConfig, StreamEmissions};

fn sweep(sim: &Sim, dir: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .args(["sweep", "--base-url", &sim.url(), "--no-tui", "--no-probe"])
        .args(["--random-input-len", "32", "--random-output-len", "16"])
        .arg("--result-dir")
        .arg(dir)
        .args(extra)
        .output()
        .expect("tokbench runs")
}

fn lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A 1.5 s level at 4 streams: every request the simulator received for
/// it arrived inside a 1.5 s window, streams were kept busy to its end,
/// and the requests still out at the end were finished and counted.
#[test]
fn a_timed_level_sends_for_its_window_and_counts_its_drain() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(log.clone()),
        ..paced(10.0, 0.0)
    });
    let dir = scratch("shards", "timed");
    let out = sweep(
        &sim,
        &dir,
        &["--concurrency", "4", "--duration", "1.5s", "--warmup", "2"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let level = read_json(&dir.join("sweep-c4.json"));
    assert_eq!(level["duration_target"], 1.5);
    // Not sharded and no start time: no wall-clock stamp, no shard.
    assert!(level.get("started_unix_s").is_none() && level.get("shard").is_none());

    let streams: HashMap<u64, StreamEmissions> = log
        .take()
        .into_iter()
        .filter_map(|s| Some((record_id_of_request_id(&s.request)?, s)))
        .collect();
    let records = lines(&dir);
    let mine: Vec<&StreamEmissions> = records
        .iter()
        .filter(|r| r["level"] == 0)
        .map(|r| {
            let id = r["id"].as_u64().expect("id");
            streams.get(&id).expect("every record's stream was logged")
        })
        .collect();
    // Every request the level sent was answered in full and counted.
    assert_eq!(level["completed"].as_u64(), Some(mine.len() as u64));
    assert_eq!(
        (level["failed"].as_u64(), level["cancelled"].as_u64()),
        (Some(0), Some(0))
    );
    let first = mine.iter().map(|s| s.arrived_ns).min().expect("requests");
    let last = mine.iter().map(|s| s.arrived_ns).max().expect("requests");
    // How long the server spent on one answer, and how much later than the
    // server the client saw a first token (its error plus the loopback hop),
    // both from the emission log.
    let server_e2el = mine
        .iter()
        .map(|s| ms(s.t_ns[s.t_ns.len() - 1] - s.arrived_ns))
        .fold(0.0, f64::max);
    let span = ms(last - first);
    // Nothing was sent after the window (arrivals can be late by a hop).
    let hop = records
        .iter()
        .filter(|r| r["level"] == 0)
        .filter_map(|r| {
            let s = streams.get(&r["id"].as_u64()?)?;
            Some(r["ttft_ms"].as_f64()? - ms(s.t_ns[0] - s.arrived_ns))
        })
        .fold(0.0, f64::max);
    assert!(
        span <= 1500.0 + hop,
        "arrivals span {span:.1} ms, hop {hop:.1} ms"
    );
    // Closed loop: a stream sends again as soon as its answer is back, so
    // the last arrival is within two answers' time of the window's end.
    assert!(
        span >= 1500.0 - 2.0 * server_e2el,
        "arrivals span {span:.1} ms, an answer takes {server_e2el:.1} ms"
    );
    eprintln!(
        "timed level: {} requests, arrivals over {span:.1} ms of a 1500 ms window, answers take {server_e2el:.1} ms, hop {hop:.2} ms",
        mine.len()
    );
    // Some answers came after the window closed: the drain was counted.
    let window_end = first + 1_500_000_000;
    let drained = mine
        .iter()
        .filter(|s| s.t_ns[s.t_ns.len() - 1] > window_end)
        .count();
    assert!(
        (1..=4).contains(&drained),
        "{drained} answers after the window"
    );
    // The level's duration runs to its last answer: past the window.
    assert!(level["duration"].as_f64().expect("duration") >= 1.5);
}

/// Four shards of one run against one simulator, one start time: each ran
/// its part of each level, every level started on the schedule on every
/// shard, and no prompt was sent twice.
#[test]
fn four_shards_step_together_with_unique_prompts() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(log.clone()),
        max_num_seqs: 64,
        ..paced(10.0, 0.0)
    });
    let root = scratch("shards", "four");
    // Far enough ahead for four processes to start, measure the clock
    // offset (up to 1.5 s) and warm up on a busy machine.
    let start = SystemTime::now() + Duration::from_secs(8);
    let start_s = start
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let start_arg = format!("{start_s:.3}");
    let children: Vec<_> = (0..4)
        .map(|i| {
            Command::new(bin())
                .args(["sweep", "--base-url", &sim.url(), "--no-tui", "--no-probe"])
                .args(["--random-input-len", "32", "--random-output-len", "16"])
                .args([
                    "--concurrency",
                    "1,6",
                    "--duration",
                    "1",
                    "--level-gap",
                    "0.5",
                ])
                .args(["--seed", "42", "--save-prompts", "--start-at", &start_arg])
                .arg("--shard")
                .arg(format!("{i}/4"))
                .arg("--result-dir")
                .arg(root.join(format!("s{i}")))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("shard starts")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("shard ends"))
        .collect();
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", text(out));
    }

    // Level k is due at start + k * (1 + 0.5) s.
    let due = |k: usize| start_s + 1.5 * k as f64;
    let mut completed = 0;
    let mut openings = HashSet::new();
    let mut sent = 0;
    for i in 0..4u64 {
        let dir = root.join(format!("s{i}"));
        let summary = read_json(&dir.join("summary.json"));
        let shard = &summary["run"]["shard"];
        assert_eq!(
            (shard["index"].as_u64(), shard["count"].as_u64()),
            (Some(i), Some(4))
        );
        assert!(shard["host"].is_string());
        // Server and client share this machine's clock: the offset measured
        // from the Date header is 0 within the error it gives.
        let offset = shard["clock_offset_ms"].as_f64().expect("an offset");
        let error = shard["clock_offset_error_ms"].as_f64().expect("an error");
        assert!(offset.abs() <= error + 1.0, "offset {offset} +- {error} ms");
        assert_eq!(summary["run"]["duration_target"], 1.0);
        assert_eq!(summary["run"]["level_gap_s"], 0.5);
        assert_eq!(summary["run"]["seed"], 42);
        // 1 stream over 4: only shard 0 has a part; 6 over 4: 2, 2, 1, 1.
        let c6 = [2, 2, 1, 1][i as usize];
        let files: Vec<String> = summary["levels"]
            .as_array()
            .expect("levels")
            .iter()
            .filter_map(|l| l["file"].as_str().map(str::to_string))
            .collect();
        let want: Vec<String> = if i == 0 {
            vec!["sweep-c1.json".into(), "sweep-c2.json".into()]
        } else {
            vec![format!("sweep-c{c6}.json")]
        };
        assert_eq!(files, want, "shard {i}");
        for file in &files {
            let level = read_json(&dir.join(file));
            assert_eq!(&level["shard"], shard);
            assert_eq!(level["duration_target"], 1.0);
            let k = level["level_index"].as_u64().expect("index") as usize;
            let started = level["started_unix_s"].as_f64().expect("a stamp");
            // On time: not before its due time (to the stamp's ms), and not
            // later than a timer on this loaded machine wakes (100 ms).
            assert!(
                started >= due(k) - 0.001 && started < due(k) + 0.1,
                "shard {i} level {k} started at {started}, due {}",
                due(k)
            );
            assert_eq!(level["drain_overrun_s"], 0.0, "shard {i} {file}");
            completed += level["completed"].as_u64().expect("completed");
        }
        for r in lines(&dir) {
            sent += 1;
            let prompt = r["prompt"].as_str().expect("--save-prompts");
            let first: u64 = prompt
                .split_whitespace()
                .next()
                .and_then(|w| w.parse().ok())
                .expect("a number first");
            // Shard I's prompts open with I x 10^9 + a draw below 10^9.
            assert_eq!(first / 1_000_000_000, i, "{prompt}");
            openings.insert(first);
        }
    }
    // No prompt opened alike across the four shards.
    assert_eq!(openings.len(), sent);
    // The simulator answered every counted request, plus one warmup per
    // shard (the default when a shard's first part is 0 or 1 stream).
    let streams = log.take();
    assert_eq!(streams.len() as u64, completed + 4);
}

#[test]
fn bad_timing_flags_are_refused_in_one_line() {
    let sim = Sim::with(paced(10.0, 0.0));
    let dir = scratch("shards", "refused");
    for (args, want) in [
        (
            vec!["--duration", "5", "--num-prompts", "3"],
            "--duration and --num-prompts both say when a level ends",
        ),
        (vec!["--duration", "5x"], "--duration 5x: give seconds"),
        (vec!["--start-at", "1700000000"], "in the past"),
        (vec!["--shard", "2/2"], "0 to 1 of 2"),
        (vec!["--shard", "auto/3"], "neither JOB_COMPLETION_INDEX"),
        (vec!["--level-gap", "1"], "needs --start-at and --duration"),
    ] {
        let out = Command::new(bin())
            .args(["sweep", "--base-url", &sim.url(), "--no-tui"])
            .arg("--result-dir")
            .arg(dir.join("never"))
            .args(&args)
            .env_remove("JOB_COMPLETION_INDEX")
            .env_remove("RANK")
            .output()
            .expect("tokbench runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    // `auto` takes the Indexed Job's index, out of range named.
    let out = Command::new(bin())
        .args([
            "sweep",
            "--base-url",
            &sim.url(),
            "--no-tui",
            "--shard",
            "auto/3",
        ])
        .env("JOB_COMPLETION_INDEX", "3")
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JOB_COMPLETION_INDEX=3 is out of range"));
    assert!(!dir.join("never").exists());
}
