//! Open-loop load, replay, the capacity search, a run watched from another
//! shell, and an unwritable result folder: the real binary against the
//! simulator (or a bare listener) on loopback, with timings short enough to
//! run in a second or two each.
//!
//! A binary of its own, the one exception to the single test binary
//! (`tests/it/`, docs/architecture.md section 6): these tests time a
//! schedule to the millisecond and take turns (`SERIAL`), so that none
//! shares the two cores with another test. In the one binary the tests of
//! other modules would run beside them (seen: the search's probe at 32
//! streams passing under that load).

#[allow(dead_code)] // this binary uses part of what the tests share
#[path = "it/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokbench::sim::SimConfig;

use support::{bin, paced, read_json, Sim};

/// The tests here time a schedule to the millisecond: they take turns,
/// so that two of them never share the two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    support::scratch("open", name)
}

fn log(out: &Output) -> String {
    support::text(out)
}

/// `step_ms` per token, nothing else: a request of N tokens takes about N steps.
fn steps(step_ms: f64, max_num_seqs: usize) -> SimConfig {
    SimConfig {
        max_num_seqs,
        ..paced(step_ms, 0.0)
    }
}

fn sweep(sim: &Sim, dir: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .args([
            "sweep",
            "--base-url",
            &sim.url(),
            "--no-tui",
            "--seed",
            "11",
        ])
        .args(if extra.contains(&"--random-input-len") {
            &[][..]
        } else {
            &["--random-input-len", "16"][..]
        })
        .arg("--result-dir")
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs")
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn rate_levels_go_out_on_schedule() {
    let _serial = serial();
    let sim = Sim::with(steps(2.0, 256));
    let dir = scratch("rate");
    let out = sweep(
        &sim,
        &dir,
        &[
            "--request-rate",
            "50,100",
            "--num-prompts",
            "40",
            "--random-output-len",
            "8",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    for (rate, file) in [(50.0, "sweep-rate50.json"), (100.0, "sweep-rate100.json")] {
        let level = read_json(&dir.join(file));
        assert_eq!(level["mode"], "rate");
        assert_eq!(f(&level, "request_rate"), rate);
        assert_eq!(level["completed"], 40);
        let late = &level["send_lateness"];
        eprintln!(
            "rate {rate}: send lateness {late}, request throughput {}",
            level["request_throughput"]
        );
        assert_eq!(late["scheduled"], 40);
        // Nothing holds requests back: the schedule is kept to a few timer
        // ticks when the client's event loop is not starved of CPU, looser
        // when it is, and either grows with the loop's lag in this same run
        // (1.9 ms of it once put one send of 40 at 6.2 ms).
        let lag = f(&level["client"], "loop_lag_ms_p99");
        let bound = if lag < 2.0 { 5.0 } else { 25.0 } + 2.0 * lag;
        assert!(f(late, "p99_ms") < bound, "{late}, loop lag p99 {lag} ms");
        // 40 Poisson gaps: their sum has a 16% relative spread; the
        // measured rate is within 40% of the asked one.
        let achieved = f(&level, "request_throughput");
        assert!(
            (achieved - rate).abs() < 0.4 * rate,
            "asked {rate}/s, sent {achieved}/s"
        );
    }
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["kind"], "rate");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Coordinated omission: a server that takes 100 ms per request and one
/// request at a time, asked for one every 25 ms. Request i is meant to go
/// at 25i ms but goes at about 100i ms, so its wait (75i ms) is in its TTFT
/// and counted as lateness, instead of hidden by a client that waited.
#[test]
fn a_slow_server_cannot_hide_behind_a_waiting_client() {
    let _serial = serial();
    // 20 tokens at 5 ms a step, one sequence at a time.
    let sim = Sim::with(steps(5.0, 1));
    let dir = scratch("omission");
    let out = sweep(
        &sim,
        &dir,
        &[
            "--request-rate",
            "40",
            "--burstiness",
            "1000",
            "--max-concurrency",
            "1",
            "--num-prompts",
            "10",
            "--random-output-len",
            "20",
            "--warmup",
            "0",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let level = read_json(&dir.join("sweep-rate40.json"));
    let late = &level["send_lateness"];
    eprintln!("send lateness {late}; TTFT p99 {} ms", level["p99_ttft_ms"]);
    // Requests 1..9 are late; the last by about 9 x 75 = 675 ms.
    assert!(late["late"].as_u64().unwrap_or(0) >= 8, "{late}");
    let max = f(late, "max_ms");
    assert!((500.0..1000.0).contains(&max), "{late}");
    // TTFT counts from the intended send: it holds the wait.
    assert!(f(&level, "p99_ttft_ms") >= 0.9 * max, "{level}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("client lagging"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn write_log(path: &Path, entries: usize, gap_s: f64, output_len: u32) {
    let text: String = (0..entries)
        .map(|i| {
            format!(
                "{{\"t\": {:.4}, \"input_len\": 16, \"output_len\": {output_len}}}\n",
                i as f64 * gap_s
            )
        })
        .collect();
    std::fs::write(path, text).expect("write log");
}

#[test]
fn a_replay_is_sent_on_its_timeline() {
    let _serial = serial();
    let sim = Sim::with(steps(1.0, 256));
    let dir = scratch("replay");
    let log_path = dir.join("log.jsonl");
    // 200 requests, 5 ms apart: a one-second timeline.
    write_log(&log_path, 200, 0.005, 4);
    let results = dir.join("results");
    let started = Instant::now();
    let out = sweep(
        &sim,
        &results,
        &["--replay", &log_path.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    eprintln!("replay of 200 over 1 s took {:?} in all", started.elapsed());
    let level = read_json(&results.join("sweep-replay.json"));
    assert_eq!(level["mode"], "replay");
    assert_eq!(level["completed"], 200);
    assert!(
        (f(&level, "replay_timeline_s") - 0.995).abs() < 1e-9,
        "{level}"
    );
    let late = &level["send_lateness"];
    let lag = f(&level["client"], "loop_lag_ms_p99");
    eprintln!("replay send lateness {late}; client loop lag p99 {lag} ms");
    // On schedule to 5 ms when the client is not starved of CPU (its own
    // 10 ms timer fires less than 2 ms late at p99), 25 ms when it is; and
    // either grows with that lag, measured in this same run.
    let bound = if lag < 2.0 { 5.0 } else { 25.0 } + 2.0 * lag;
    assert!(f(late, "p99_ms") < bound, "{late}, loop lag p99 {lag} ms");
    // Twice as fast: the same log in half the time.
    let fast = dir.join("fast");
    let out = sweep(
        &sim,
        &fast,
        &[
            "--replay",
            &log_path.display().to_string(),
            "--replay-speed",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let level = read_json(&fast.join("sweep-replay.json"));
    // 0.995 s / 2, saved to the millisecond.
    assert!(
        (f(&level, "replay_timeline_s") - 0.4975).abs() <= 0.0005 + 1e-9,
        "{level}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replay_on_a_slow_server_counts_the_wait() {
    let _serial = serial();
    // 10 tokens at 5 ms, one at a time: 50 ms each; the log asks every 10 ms.
    let sim = Sim::with(steps(5.0, 1));
    let dir = scratch("replay-slow");
    let log_path = dir.join("log.jsonl");
    write_log(&log_path, 12, 0.010, 10);
    let results = dir.join("results");
    let out = sweep(
        &sim,
        &results,
        &[
            "--replay",
            &log_path.display().to_string(),
            "--max-concurrency",
            "1",
            "--warmup",
            "0",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let level = read_json(&results.join("sweep-replay.json"));
    let late = &level["send_lateness"];
    // Request 11 goes at about 11 x 50 ms but was due at 110 ms: 440 ms late.
    let max = f(late, "max_ms");
    eprintln!("slow replay: {late}; TTFT p99 {}", level["p99_ttft_ms"]);
    assert!((300.0..800.0).contains(&max), "{late}");
    assert!(f(&level, "p99_ttft_ms") >= 0.9 * max, "{level}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_replay_line_stops_before_any_load() {
    let _serial = serial();
    let dir = scratch("replay-bad");
    let log_path = dir.join("log.jsonl");
    std::fs::write(
        &log_path,
        "{\"t\": 0, \"input_len\": 8}\n{\"t\": \"soon\"}\n",
    )
    .expect("write");
    let out = Command::new(bin())
        .args([
            "sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--no-tui",
            "--replay",
        ])
        .arg(&log_path)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", log(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("replay line 2: \"t\" must be a number of seconds >= 0"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server with 16 batch slots: throughput rises with streams up to 16
/// and is flat after (the rest queue; they only save the client's turnaround
/// gap, 1 step in 65 = 1.5%). The search finds 16 to within 10%.
#[test]
fn find_capacity_converges_on_the_knee() {
    let _serial = serial();
    let sim = Sim::with(steps(2.0, 16));
    let dir = scratch("search");
    let out = sweep(
        &sim,
        &dir,
        &[
            "--find-capacity",
            "--random-output-len",
            "64",
            "--prompts-per-stream",
            "3",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let summary = read_json(&dir.join("summary.json"));
    let probes: Vec<u64> = summary["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            assert_eq!(l["mode"], "search", "{l}");
            l["max_concurrency"].as_u64().unwrap_or(0)
        })
        .collect();
    let capacity = summary["capacity"]["concurrency"].as_u64();
    eprintln!(
        "probes {probes:?} -> capacity {capacity:?}; search {}",
        summary["search"]
    );
    // Doubling to 32 (flat: it fails), then bisecting between 16 and 32.
    assert_eq!(&probes[..6], &[1, 2, 4, 8, 16, 32]);
    assert_eq!(probes[6], 24);
    let found = capacity.expect("a capacity");
    assert!((16..=17).contains(&found), "capacity {found}, knee 16");
    assert_eq!(summary["search"]["passing"].as_u64(), Some(found));
    let failing = summary["search"]["failing"].as_u64().expect("bound");
    assert!(
        failing <= found + 1,
        "bounded within one stream: {}",
        summary["search"]
    );
    assert_eq!(summary["search"]["done"], true);
    // A fixed sweep finding 16 to within 10% would step 1, 2, ..., 10, 11,
    // 12, 13, 14, 15, 16, 17 (every step +10% or +1): 17 levels; the search
    // ran fewer.
    let fixed_grid_levels = {
        let (mut c, mut n) = (1.0f64, 0);
        while c <= 17.0 {
            c = (c * 1.1).max(c + 1.0).floor();
            n += 1;
        }
        n
    };
    assert!(
        probes.len() < fixed_grid_levels,
        "{probes:?} vs {fixed_grid_levels}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A result folder that cannot be written is reported in one line, and
/// the server never sees a request.
#[test]
fn an_unwritable_result_folder_fails_before_any_load() {
    let _serial = serial();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let dir = scratch("unwritable");
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a folder").expect("write");
    let out = Command::new(bin())
        .args(["sweep", "--base-url", &format!("http://{addr}"), "--no-tui"])
        .arg("--result-dir")
        .arg(blocker.join("results"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", log(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot create the result folder"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        listener.accept().is_err(),
        "the server was contacted before the folder was checked"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `view --follow` from another process: a line per level as the run
/// writes it, exit 0 on its own once the run's summary says it is over,
/// and 130 on SIGTERM while it still waits.
#[test]
fn view_follow_shows_levels_as_they_finish() {
    let _serial = serial();
    let sim = Sim::with(steps(2.0, 256));
    let dir = scratch("follow");
    let results = dir.join("results");
    let mut run = Command::new(bin())
        .args(["sweep", "--base-url", &sim.url(), "--no-tui"])
        .args(["--concurrency", "1,2,4", "--num-prompts", "8"])
        .args(["--random-input-len", "16", "--random-output-len", "16"])
        .arg("--result-dir")
        .arg(&results)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sweep starts");
    let started = Instant::now();
    while !results.join("summary.json").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no summary.json"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut viewer = Command::new(bin())
        .args(["view", "--follow"])
        .arg(&results)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("viewer starts");
    // The viewer's lines as they come (its stdout is line-buffered).
    let viewer_stdout = viewer.stdout.take().expect("piped stdout");
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(viewer_stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let status = run.wait().expect("sweep ends");
    assert!(status.success());
    // The viewer polls once a second; wait for its third level line, not a fixed time.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the viewer printed {seen:?} in 10 s"),
        }
    }
    // The run is over and its summary says so: the viewer ends on its own.
    let deadline = Instant::now() + Duration::from_secs(20);
    while viewer.try_wait().expect("viewer state").is_none() {
        assert!(
            Instant::now() < deadline,
            "follow still running after the run"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = viewer.wait_with_output().expect("viewer ends");
    reader.join().expect("reader");
    seen.extend(lines.try_iter());
    let stdout = seen.join("\n");
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run over: 3 levels"),
        "{}",
        log(&out)
    );
    for c in [1, 2, 4] {
        assert!(
            stdout.contains(&format!("level done: concurrency {c} planned")),
            "{stdout}"
        );
    }
    assert_eq!(stdout.lines().count(), 3, "each level once: {stdout}");

    // A run whose last save never came (killed with -9) has no end in its
    // summary: follow waits for it, and a signal ends the wait with 130.
    let summary_path = results.join("summary.json");
    let mut summary = read_json(&summary_path);
    summary["run"]
        .as_object_mut()
        .map(|run| run.remove("ended_at"));
    std::fs::write(&summary_path, summary.to_string()).expect("summary");
    let mut waiting = Command::new(bin())
        .args(["view", "--follow"])
        .arg(&results)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("viewer starts");
    let waiting_out = waiting.stdout.take().expect("piped stdout");
    let first_line = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = std::io::BufReader::new(waiting_out).read_line(&mut line);
        line
    });
    // It has read the folder once it has printed the levels there.
    let line = first_line.join().expect("reader");
    assert!(line.starts_with("level done"), "{line}");
    let _ = Command::new("kill")
        .args(["-TERM", &waiting.id().to_string()])
        .status();
    let out = waiting.wait_with_output().expect("viewer ends");
    assert_eq!(out.status.code(), Some(130), "{}", log(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prefix caching on purpose: the same 1536-token prompt length, once all
/// unique and once with a shared 512-token prefix (vLLM's meaning: prefix +
/// input). The simulator's cache answers the prefix, so there is less to
/// prefill (20 ms per 1k tokens) and TTFT drops by about a third.
#[test]
fn a_shared_prefix_lowers_ttft() {
    let _serial = serial();
    let sim = Sim::with(paced(2.0, 20.0));
    let dir = scratch("prefix");
    let mut ttft = Vec::new();
    for (prefix, input) in [("0", "1536"), ("512", "1024")] {
        let results = dir.join(prefix);
        let out = sweep(
            &sim,
            &results,
            &[
                "--concurrency",
                "4",
                "--num-prompts",
                "24",
                "--prefix-len",
                prefix,
                "--random-input-len",
                input,
                "--random-output-len",
                "8",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", log(&out));
        let level = read_json(&results.join("sweep-c4.json"));
        eprintln!(
            "prefix {prefix} + input {input}: median TTFT {} ms, prompt tokens {}, cache hit rate {}",
            level["median_ttft_ms"], level["input_len"]["mean"], level["prefix_cache_hit_rate"]
        );
        let prompt = f(&level["input_len"], "mean");
        assert!((prompt - 1536.0).abs() <= 0.02 * 1536.0, "prompt {prompt}");
        ttft.push(f(&level, "median_ttft_ms"));
        if prefix == "512" {
            // 512 of 1536 prompt tokens are shared: a third at most.
            let rate = f(&level, "prefix_cache_hit_rate");
            assert!((0.25..=0.34).contains(&rate), "hit rate {rate}");
        }
    }
    assert!(ttft[1] < 0.85 * ttft[0], "TTFT {ttft:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--turns 4`: each turn re-sends the history, so the cache answers a
/// growing share of its prompt: the hit rate rises turn by turn.
#[test]
fn turns_raise_the_cache_hit_rate_turn_by_turn() {
    let _serial = serial();
    let sim = Sim::with(steps(2.0, 256));
    let dir = scratch("turns");
    let out = sweep(
        &sim,
        &dir,
        &[
            "--concurrency",
            "4",
            "--num-prompts",
            "32",
            "--turns",
            "4",
            "--random-input-len",
            "256",
            "--random-output-len",
            "32",
            "--save-prompts",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let level = read_json(&dir.join("sweep-c4.json"));
    let turns = level["turns"].as_array().expect("turns");
    let rates: Vec<f64> = turns.iter().map(|t| f(t, "cache_hit_rate")).collect();
    let inputs: Vec<f64> = turns.iter().map(|t| f(t, "mean_input_tokens")).collect();
    eprintln!("hit rate by turn {rates:?}, prompt tokens {inputs:?}");
    assert_eq!(turns.len(), 4);
    assert_eq!(rates[0], 0.0, "a first turn is new to the cache");
    assert!(rates.windows(2).all(|w| w[1] > w[0]), "{rates:?}");
    // Turn k sends k user messages of 256 and k-1 replies of 32: 256 + 288 (k-1).
    for (k, mean) in inputs.iter().enumerate() {
        let want = 256.0 + 288.0 * k as f64;
        assert!(
            (mean - want).abs() <= 0.02 * want,
            "turn {}: {mean} vs {want}",
            k + 1
        );
    }
    // --save-prompts: each request's prompt is in requests.jsonl, the last
    // turns holding the whole history.
    let jsonl = std::fs::read_to_string(dir.join("requests.jsonl")).expect("jsonl");
    let fourth = jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["turn"] == 4)
        .expect("a fourth turn");
    let prompt = fourth["prompt"].as_str().expect("prompt saved");
    assert_eq!(prompt.matches("user: ").count(), 4, "{prompt}");
    assert_eq!(prompt.matches("assistant: ").count(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A published trace's test copy, under tests/fixtures/traces/.
fn trace_fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/traces")
        .join(name)
        .display()
        .to_string()
}

/// The measured requests of a run in dispatch order, with what the
/// simulator logged of each: (request line, arrived_ns).
fn requests_with_arrivals(
    results: &Path,
    log: &[tokbench::sim::StreamEmissions],
) -> Vec<(Value, u64)> {
    let arrived: std::collections::HashMap<u64, u64> = log
        .iter()
        .filter_map(|s| {
            Some((
                tokbench::load::request::record_id_of_request_id(&s.request)?,
                s.arrived_ns,
            ))
        })
        .collect();
    let text = std::fs::read_to_string(results.join("requests.jsonl")).expect("requests.jsonl");
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    lines.sort_by_key(|r| r["id"].as_u64());
    lines
        .into_iter()
        .map(|r| {
            let id = r["id"].as_u64().expect("id");
            let at = *arrived
                .get(&id)
                .expect("every request in the simulator's log");
            (r, at)
        })
        .collect()
}

/// One small trace of each format against the simulator: every request
/// sent once, with the trace's lengths as the simulator counted them
/// (prompt tokens by its tokenizer, output tokens by its usage), and each
/// reaching the simulator at its timestamp: its arrival in the simulator's
/// log, from the first one's, is the trace's gap to within the two sends'
/// recorded lateness and the longer of their trips to the server (each at
/// most its own time to first byte).
#[test]
fn each_trace_format_replays_its_requests_at_their_times() {
    let _serial = serial();
    // (file, extra flags, format, [(t s, input, output)])
    type Case<'a> = (&'a str, &'a [&'a str], &'a str, Vec<(f64, u64, u64)>);
    let cases: [Case; 3] = [
        (
            "mooncake_small.jsonl",
            &["--trace-block-tokens", "16"],
            "mooncake",
            vec![
                (0.0, 64, 8),
                (0.2, 80, 6),
                (0.4, 48, 4),
                (0.7, 64, 8),
                (0.9, 40, 5),
                (1.2, 32, 3),
            ],
        ),
        (
            "burstgpt_small.csv",
            &["--trace-filter", "model=ChatGPT"],
            "burstgpt",
            vec![
                (0.0, 40, 12),
                (0.5, 24, 1),
                (0.9, 80, 16),
                (1.6, 56, 10),
                (2.0, 16, 4),
            ],
        ),
        (
            "azure_small.csv",
            &[],
            "azure",
            vec![
                (0.0, 120, 10),
                (0.2, 48, 6),
                (0.5, 200, 12),
                (0.6, 64, 4),
                (1.0, 96, 8),
                (1.4, 32, 2),
            ],
        ),
    ];
    for (file, extra, format, want) in cases {
        let emissions = tokbench::sim::EmissionLog::in_memory();
        let sim = Sim::with(SimConfig {
            emission_log: Some(emissions.clone()),
            ..steps(1.0, 256)
        });
        let dir = scratch(&format!("trace-{format}"));
        let results = dir.join("results");
        let path = trace_fixture(file);
        let mut args = vec!["--replay", path.as_str(), "--warmup", "1"];
        args.extend(extra);
        let out = sweep(&sim, &results, &args);
        assert_eq!(out.status.code(), Some(0), "{format}: {}", log(&out));
        let level = read_json(&results.join("sweep-replay.json"));
        assert_eq!(level["completed"], want.len(), "{format}: {level}");
        assert_eq!(level["trace"]["format"], format, "{format}");
        assert_eq!(level["trace"]["requests"], want.len(), "{format}");
        assert_eq!(level["trace"]["clipped"], 0, "{format}");
        let sent = requests_with_arrivals(&results, &emissions.take());
        assert_eq!(sent.len(), want.len(), "{format}");
        let (first, first_at) = (&sent[0].0, sent[0].1);
        let lag = |r: &Value| r["send_lag_ms"].as_f64().unwrap_or(0.0).max(0.0);
        let mut worst: f64 = 0.0;
        for ((r, at), (t, input, output)) in sent.iter().zip(&want) {
            assert_eq!(r["input_tokens"].as_u64(), Some(*input), "{format}: {r}");
            assert_eq!(r["output_tokens"].as_u64(), Some(*output), "{format}: {r}");
            let gap_ms = (*at as f64 - first_at as f64) / 1e6;
            let off = (gap_ms - t * 1000.0).abs();
            worst = worst.max(off);
            // The trip from a send to the server's handler is at most the
            // request's own time to first byte (the server answered after
            // it arrived): on a loaded box that is the honest bound, not a
            // fixed few ms of loopback.
            let trip = |r: &Value| {
                r["ttfb_ms"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{format}: no ttfb_ms: {r}"))
            };
            let bound = lag(r) + lag(first) + trip(r).max(trip(first)) + 0.01;
            assert!(
                off <= bound,
                "{format}: request at {t} s reached the server {gap_ms:.1} ms after the first (bound {bound:.1} ms)"
            );
        }
        eprintln!(
            "{format}: {} requests, arrival off schedule by at most {worst:.2} ms",
            sent.len()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Mooncake's hash ids made real: requests 1, 2 and 4 share blocks 0-2 (48
/// tokens at 16 a block), 3 and 5 share blocks 6-7. With its prefix cache
/// on, the simulator answers from it exactly those blocks (the last prompt
/// token is always computed, so request 4, all four blocks seen, has 63):
/// cached tokens 0, 48, 0, 63, 32, 0. The two prompts of requests 1 and 2
/// are the same for 48 words and differ after. The trace's own reuse is
/// 144 of 328 prompt tokens (0.439); the simulator's hit rate, 143 of 328
/// (0.436), is within 5 points of it.
#[test]
fn a_traces_shared_blocks_are_a_prefix_the_servers_cache_sees() {
    let _serial = serial();
    let emissions = tokbench::sim::EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(emissions.clone()),
        prefix_block_tokens: 16,
        ..steps(1.0, 256)
    });
    let dir = scratch("trace-prefix");
    let results = dir.join("results");
    let path = trace_fixture("mooncake_small.jsonl");
    let out = sweep(
        &sim,
        &results,
        &[
            "--replay",
            &path,
            "--trace-block-tokens",
            "16",
            "--save-prompts",
            "--backend",
            "openai-completions",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let sent = requests_with_arrivals(&results, &emissions.take());
    let cached: Vec<u64> = sent
        .iter()
        .map(|(r, _)| r["cached_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(cached, vec![0, 48, 0, 63, 32, 0]);
    let words = |i: usize| -> Vec<String> {
        sent[i].0["prompt"]
            .as_str()
            .expect("--save-prompts keeps the prompt")
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let (a, b) = (words(0), words(1));
    assert_eq!(a[..48], b[..48]);
    assert_ne!(a[48], b[48]);
    let level = read_json(&results.join("sweep-replay.json"));
    let reuse = f(&level["trace"], "reuse");
    let hit = f(&level, "prefix_cache_hit_rate");
    eprintln!("trace reuse {reuse}, the simulator's hit rate {hit}");
    assert!((reuse - 144.0 / 328.0).abs() < 1e-4, "{level}");
    assert!(
        (hit - reuse).abs() <= 0.05,
        "hit rate {hit} vs reuse {reuse}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A malformed line of each format stops the run before anything is sent:
/// one line naming the file, the line and the field, and the simulator's
/// log holds no request.
#[test]
fn a_bad_trace_line_of_each_format_stops_before_any_load() {
    let _serial = serial();
    let emissions = tokbench::sim::EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(emissions.clone()),
        ..steps(1.0, 256)
    });
    let dir = scratch("trace-bad");
    let cases = [
        (
            "bad.jsonl",
            "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 2, \"hash_ids\": [0]}\n{\"timestamp\": 5, \"input_length\": 8, \"output_length\": \"two\"}\n",
            "line 2: \"output_length\" must be a whole number",
        ),
        (
            "bad_burst.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,8,2,10,API log\n1,ChatGPT,8,-2,6,API log\n",
            "line 3: \"Response tokens\" must be a whole number",
        ),
        (
            "bad_azure.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,8,2\n2023-11-16 25:00:00,8,2\n",
            "line 3: \"TIMESTAMP\" must be a date and time",
        ),
        (
            "unknown.csv",
            "when,prompt,answer\n1,2,3\n",
            "line 1 is no known trace header",
        ),
    ];
    for (name, text, want) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        let out = sweep(
            &sim,
            &dir.join("results"),
            &["--replay", &path.display().to_string()],
        );
        assert_eq!(out.status.code(), Some(1), "{name}: {}", log(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: {want}", path.display())),
            "{name}: {stderr}"
        );
    }
    assert!(emissions.take().is_empty(), "nothing was sent");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server with a context of 128 tokens (`max_model_len` in its
/// `/v1/models`): of the Azure test trace's six requests, 120+10 and 200+12
/// are longer. They are clipped (the prompt cut, the output kept) and
/// counted in the level file; `--strict-lengths` refuses the trace in one
/// line before anything is sent.
#[test]
fn trace_requests_past_the_context_are_clipped_or_refused() {
    let _serial = serial();
    let emissions = tokbench::sim::EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(emissions.clone()),
        kv_tokens: 128,
        ..steps(1.0, 256)
    });
    let dir = scratch("trace-context");
    let path = trace_fixture("azure_small.csv");
    let strict = sweep(
        &sim,
        &dir.join("strict"),
        &["--replay", &path, "--strict-lengths"],
    );
    assert_eq!(strict.status.code(), Some(1), "{}", log(&strict));
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--strict-lengths: 2 requests of the trace are longer than the server's context of 128 tokens (the first is request 1 of the schedule)"),
        "{stderr}"
    );
    assert!(emissions.take().is_empty(), "nothing was sent");

    let results = dir.join("results");
    let out = sweep(&sim, &results, &["--replay", &path, "--warmup", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let level = read_json(&results.join("sweep-replay.json"));
    assert_eq!(level["trace"]["clipped"], 2, "{level}");
    assert_eq!(level["trace"]["context_tokens"], 128, "{level}");
    assert_eq!(level["completed"], 6, "{level}");
    let sent = requests_with_arrivals(&results, &emissions.take());
    let inputs: Vec<u64> = sent
        .iter()
        .filter_map(|(r, _)| r["input_tokens"].as_u64())
        .collect();
    // 120 + 10 > 128: 118 + 10; 200 + 12: 116 + 12.
    assert_eq!(inputs, vec![118, 48, 116, 64, 96, 32]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A linear ramp from 2 to 20 requests/s over 6 s (66 requests; second k
/// offers 3.5 + 3k) against a simulator that serves 10 a second: one slot,
/// 20 tokens at 5 ms a step, 100 ms a request. Each second, the requests
/// reaching the simulator (its log) are the ones the level says were
/// offered, to within one or 10%. Past 10/s a queue builds and TTFT grows
/// with it, so p99 TTFT first passes its 50 ms SLO in second 2 or 3, at an
/// offered rate within one second of the ramp (3 requests/s) of 10.
#[test]
fn a_ramp_follows_its_rate_and_finds_where_the_server_breaks() {
    let _serial = serial();
    let emissions = tokbench::sim::EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(emissions.clone()),
        ..steps(5.0, 1)
    });
    let dir = scratch("ramp");
    let results = dir.join("results");
    let out = sweep(
        &sim,
        &results,
        &[
            "--ramp",
            "linear",
            "--ramp-from",
            "2",
            "--ramp-to",
            "20",
            "--ramp-duration",
            "6",
            "--random-output-len",
            "20",
            "--slo-ttft-p99-ms",
            "50",
            "--warmup",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let level = read_json(&results.join("sweep-ramp.json"));
    assert_eq!(level["completed"], 66, "{level}");
    assert_eq!(level["trace"]["format"], "ramp");
    let seconds = level["rate_series"]["seconds"]
        .as_array()
        .expect("seconds")
        .clone();
    let offered: Vec<u64> = seconds
        .iter()
        .map(|s| s["offered"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(offered.iter().sum::<u64>(), 66);
    // The simulator's log: arrivals by second of the ramp, anchored at the
    // first request's own time in the schedule ((sqrt 7 - 2) / 3 s).
    let first_due = (7f64.sqrt() - 2.0) / 3.0;
    let sent = requests_with_arrivals(&results, &emissions.take());
    let first_at = sent.iter().map(|(_, at)| *at).min().expect("arrivals");
    let slots = offered.len().max(7);
    let mut arrived = vec![0u64; slots];
    for (_, at) in &sent {
        let t = (at - first_at) as f64 / 1e9 + first_due;
        arrived[(t.floor() as usize).min(slots - 1)] += 1;
    }
    eprintln!("ramp: offered per second {offered:?}, reaching the simulator {arrived:?}");
    for (k, want) in offered.iter().enumerate().take(6) {
        let got = arrived[k];
        let slack = (0.1 * *want as f64).max(1.0);
        assert!(
            (got as f64 - *want as f64).abs() <= slack,
            "second {k}: {got} reached the simulator, {want} offered"
        );
    }
    let broke = &level["rate_series"]["broke_at"];
    eprintln!("ramp broke at {broke}");
    let second = broke["second"].as_u64().expect("it broke");
    assert!((2..=3).contains(&second), "{broke}");
    let rate = broke["offered_rate"].as_f64().expect("rate");
    assert!((rate - 10.0).abs() <= 3.5, "{broke}");
    assert_eq!(broke["rule"], "slo");
    // The run's answer is the break, not a capacity a ramp cannot have,
    // and the sweep's notes on one level do not apply.
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(&format!(
            "ramp: p99 TTFT first failed in second {second} at "
        )),
        "{printed}"
    );
    assert!(
        !printed.contains("one concurrency says nothing"),
        "{printed}"
    );
    let summary = read_json(&results.join("summary.json"));
    assert!(
        !summary["diagnoses"].to_string().contains("single_level"),
        "{}",
        summary["diagnoses"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ramp needs all four of its flags, each making sense, in one line.
#[test]
fn a_ramp_with_a_missing_or_bad_part_is_refused() {
    for (args, want) in [
        (
            &["--ramp", "linear", "--ramp-from", "2"][..],
            "a ramp needs all four of",
        ),
        (
            &[
                "--ramp",
                "linear",
                "--ramp-from",
                "0",
                "--ramp-to",
                "5",
                "--ramp-duration",
                "3",
            ][..],
            "--ramp-from and --ramp-to must be requests per second above 0",
        ),
        (
            &[
                "--ramp",
                "exponential",
                "--ramp-from",
                "1",
                "--ramp-to",
                "5",
                "--ramp-duration=-1",
            ][..],
            "--ramp-duration must be seconds above 0",
        ),
        (
            &[
                "--ramp",
                "linear",
                "--ramp-from",
                "1",
                "--ramp-to",
                "5",
                "--ramp-duration",
                "3",
                "--request-rate",
                "4",
            ][..],
            "are different kinds of run: choose one",
        ),
    ] {
        let out = Command::new(bin())
            .args(["sweep", "--base-url", "http://127.0.0.1:9", "--no-tui"])
            .args(args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
