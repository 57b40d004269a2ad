//! End to end: the real binary against the built-in simulator on loopback,
//! whose timing is known, so the measurement error is itself measured.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokbench::sim::{EmissionLog, SimConfig, SimHandle};

use crate::support::{
    self, against_server, bin, median, paced, read_json, start_sim, text, tokbench_async,
    AgainstServer,
};

fn scratch(name: &str) -> PathBuf {
    support::scratch_path("e2e", name)
}

fn steps_only(step_ms: f64) -> SimConfig {
    paced(step_ms, 0.0)
}

fn fast_sim(step_ms: f64) -> SimConfig {
    paced(step_ms, 10.0)
}

fn sweep_args(sim: &SimHandle, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "sweep".into(),
        "--base-url".into(),
        format!("http://{}", sim.addr),
        "--no-tui".into(),
        "--result-dir".into(),
        dir.display().to_string(),
        "--seed".into(),
        "7".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// Acceptance: step 5 ms, no per-sequence cost, 10 ms per 1k prompt tokens,
/// in 500 / out 64. At concurrency 1 the contract gives TTFT = 5 + 0 + 500/1000*10
/// = 10 ms and TPOT = 5 ms; at 4, four sequences share each 5 ms step, so the
/// output throughput is 4x (3.5x allows for the tail of the level).
///
/// The client's own error is measured too, against what the simulator logged it
/// did (its emission log): each request's TTFT minus the server's (first chunk
/// handed to the connection minus the request reaching its handler) and its TPOT
/// minus the mean gap the server wrote. A starved simulator moves the figures
/// above; it cannot move these.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measures_the_simulator_timing_it_was_given() {
    let log = EmissionLog::in_memory();
    let sim = start_sim(SimConfig {
        emission_log: Some(log.clone()),
        ..fast_sim(5.0)
    })
    .await;
    let dir = scratch("timing");
    let out = tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "1,4",
            "--num-prompts",
            "8",
            "--warmup",
            "2",
            "--random-input-len",
            "500",
            "--random-output-len",
            "64",
            "--probe-interval",
            "0.1",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let measured = against_server(&dir, &log.take());
    // 8 requests at each of the two levels, every one matched to its stream.
    assert_eq!(measured.len(), 16);
    let c1 = read_json(&dir.join("sweep-c1.json"));
    // The probe scraped the simulator's vLLM /metrics while the level ran:
    // one sequence at a time at concurrency 1, so running never exceeds 1.
    let running = &c1["server"]["running"];
    assert_eq!(running["max"], 1.0, "server gauges: {}", c1["server"]);
    assert!(c1["server"]["kv_cache_usage"]["max"]
        .as_f64()
        .is_some_and(|v| v > 0.0));
    let c4 = read_json(&dir.join("sweep-c4.json"));
    let tpot = num(&c1, "median_tpot_ms");
    let ttft = num(&c1, "median_ttft_ms");
    let at_c1 = |f: fn(&AgainstServer) -> f64| -> Vec<f64> {
        measured
            .iter()
            .filter(|r| r.concurrency == 1)
            .map(f)
            .collect()
    };
    let server_ttft = at_c1(|r| r.server_ttft_ms);
    let fastest = server_ttft.iter().copied().fold(f64::MAX, f64::min);
    eprintln!(
        "c1: median TPOT {tpot:.3} ms (want 5), median TTFT {ttft:.3} ms (want 10; the \
         simulator's own: median {:.3}, fastest {fastest:.3})",
        median(&server_ttft)
    );
    assert!(
        (tpot - 5.0).abs() <= 0.5,
        "median TPOT {tpot} not within 0.5 ms of 5"
    );
    // The simulator kept its contract: its fastest TTFT is the formula's 10 ms (plus
    // reading the request). Its median drifts when a loaded box starves the test
    // process (14.5 ms seen), which no client could help; the client is checked
    // against what the simulator did instead.
    assert!(
        (9.5..=13.0).contains(&fastest),
        "the simulator's fastest TTFT {fastest} ms is not 10 (+3)"
    );
    let ttft_err: Vec<f64> = measured.iter().map(AgainstServer::ttft_err_ms).collect();
    let tpot_err: Vec<f64> = measured.iter().map(|r| r.tpot_abs_err_ms).collect();
    let c1_ttft_err = median(&at_c1(AgainstServer::ttft_err_ms));
    eprintln!(
        "client error against the emission log: TTFT median {c1_ttft_err:.3} ms at c1, \
         {:.3} ms over all 16 (max {:.3}); |TPOT| median {:.4} ms (max {:.4})",
        median(&ttft_err),
        ttft_err.iter().copied().fold(f64::MIN, f64::max),
        median(&tpot_err),
        tpot_err.iter().copied().fold(f64::MIN, f64::max),
    );
    // One clock: the client starts before the server sees the request and reads the
    // first chunk after it was handed over, so the error is never negative.
    assert!(ttft_err.iter().all(|e| *e >= 0.0), "{ttft_err:?}");
    // Quiet, the median is 0.2-0.3 ms (debug build); a starved box has pushed it to
    // 2.3 ms at c1. A client that counted a 5 ms step too many would fail here.
    assert!(c1_ttft_err <= 2.5, "TTFT errors {ttft_err:?} ms");
    assert!(median(&ttft_err) <= 5.0, "TTFT errors {ttft_err:?} ms");
    assert!(median(&tpot_err) <= 0.2, "TPOT errors {tpot_err:?} ms");
    assert_eq!(num(&c1, "completed"), 8.0);
    assert_eq!(num(&c1, "total_output_tokens"), 8.0 * 64.0);
    // Calibration on the simulator's word tokenizer lands on the target exactly.
    assert_eq!(num(&c1, "total_input_tokens"), 8.0 * 500.0);
    assert_eq!(c1["token_count_source"], "usage");
    let (t1, t4) = (num(&c1, "output_throughput"), num(&c4, "output_throughput"));
    eprintln!(
        "output throughput c1 {t1:.1}, c4 {t4:.1} tok/s ({:.2}x)",
        t4 / t1
    );
    assert!(t4 >= 3.5 * t1, "c4 {t4} is not 3.5x c1 {t1}");
    // Total counts input too: (500 + 64) / 64 = 8.81x the output figure.
    let ratio = num(&c1, "total_token_throughput") / t1;
    assert!(
        (ratio - 564.0 / 64.0).abs() < 1e-6,
        "total/output = {ratio}"
    );

    // Both per-stream figures: output/concurrency, and 1000/median TPOT.
    assert!((num(&c4, "per_stream_tok_s") - t4 / 4.0).abs() < 1e-6);
    assert!((num(&c1, "stream_decode_tok_s") - 1000.0 / tpot).abs() < 1e-6);

    // summary.json holds both levels, in run order, with the run's identity.
    let summary = read_json(&dir.join("summary.json"));
    let levels = summary["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2);
    assert_eq!(levels[0]["max_concurrency"], 1);
    assert_eq!(levels[1]["max_concurrency"], 4);
    assert_eq!(summary["run"]["seed"], 7);
    assert_eq!(summary["run"]["engine"], "tokbench-sim");
    assert_eq!(summary["run"]["input_len"], 500);

    // requests.jsonl: one line per measured request (warmup excluded).
    let lines = std::fs::read_to_string(dir.join("requests.jsonl")).expect("jsonl");
    assert_eq!(lines.lines().count(), 16);
    for line in lines.lines() {
        let v: Value = serde_json::from_str(line).expect("each line is JSON");
        assert!(v["ttft_ms"].is_number() && v["error"].is_null(), "{v}");
    }

    jq_reads_four_numbers(&dir.join("sweep-c1.json"));
    // The headless run leaves the human-readable pair beside the data.
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(report.contains("in 500 / out 64"), "{report}");
    let chart = std::fs::read_to_string(dir.join("chart.svg")).expect("chart.svg");
    assert!(
        chart.starts_with("<?xml") || chart.starts_with("<svg"),
        "{chart}"
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 15 acceptance: a client made late on purpose. The lean reader's
/// test hook (`TOKBENCH_TEST_READ_DELAY_MS=20`) makes every read wait 20 ms
/// after its socket turned readable, as a starved client would. Against the
/// simulator's emission log (first frame handed to the connection minus the
/// request reaching its handler):
/// - `--rx-clock user`: every TTFT is at least 20 ms high (the hook's wait
///   is a floor), its median within 1.5x of that;
/// - `--rx-clock kernel`: the median TTFT error is at most 1 ms, none
///   negative, and the level says how late the client read (lag >= 20 ms)
///   and diagnoses it.
///
/// Steps are 100 ms, five times the delay, so a late read still finds one
/// frame only (two would move the kernel time to the later one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_client_is_late_on_the_user_clock_and_not_on_the_kernel_clock() {
    const DELAY_MS: f64 = 20.0;
    // Nine, not five: the reference, the request reaching the simulator's
    // handler, is stamped on the test's own runtime, which a burst of load
    // delays, and each such request reads the client that much late. A
    // burst beside two busy loops hit three of five ([3.7, 3.2, 1.7, 0.18,
    // 0.12] ms, median 1.7); nine requests outlast such a burst.
    const PROMPTS: &str = "9";
    let log = EmissionLog::in_memory();
    let sim = start_sim(SimConfig {
        emission_log: Some(log.clone()),
        ..steps_only(100.0)
    })
    .await;
    for clock in ["user", "kernel"] {
        let dir = scratch(&format!("rx-clock-{clock}"));
        let args = sweep_args(
            &sim,
            &dir,
            &[
                "--concurrency",
                "1",
                "--num-prompts",
                PROMPTS,
                "--warmup",
                "1",
                "--random-input-len",
                "16",
                "--random-output-len",
                "4",
                "--no-probe",
                "--rx-clock",
                clock,
            ],
        );
        let out = tokio::task::spawn_blocking(move || {
            Command::new(bin())
                .args(&args)
                .env("TOKBENCH_TEST_READ_DELAY_MS", DELAY_MS.to_string())
                .stdin(Stdio::null())
                .output()
                .expect("tokbench runs")
        })
        .await
        .expect("join");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let measured = against_server(&dir, &log.take());
        assert_eq!(
            measured.len().to_string(),
            PROMPTS,
            "every request matched to its stream"
        );
        let errs: Vec<f64> = measured.iter().map(AgainstServer::ttft_err_ms).collect();
        let err = median(&errs);
        eprintln!(
            "--rx-clock {clock}: TTFT error against the emission log {errs:?} ms, median {err:.3}"
        );
        let jsonl = std::fs::read_to_string(dir.join("requests.jsonl")).expect("jsonl");
        for line in jsonl.lines() {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(v["rx_clock"], clock, "{v}");
            assert_eq!(v["coalesced_reads"], 0, "one frame per read: {v}");
        }
        let c1 = read_json(&dir.join("sweep-c1.json"));
        let summary = read_json(&dir.join("summary.json"));
        let fired = summary["diagnoses"]
            .as_array()
            .expect("diagnoses")
            .iter()
            .any(|d| d["id"] == "client_rx_lag");
        match clock {
            "user" => {
                assert!(
                    errs.iter().all(|e| *e >= DELAY_MS),
                    "a user-clock TTFT hid the hook's delay: {errs:?}"
                );
                assert!(err <= 1.5 * DELAY_MS, "user-clock TTFT errors {errs:?}");
                assert!(
                    c1["client_rx_lag_ms"].is_null(),
                    "{}",
                    c1["client_rx_lag_ms"]
                );
                assert_eq!(c1["rx_clock"]["user"].to_string(), PROMPTS);
                assert!(!fired);
            }
            _ => {
                assert!(
                    errs.iter().all(|e| *e >= 0.0),
                    "before the server wrote: {errs:?}"
                );
                assert!(err <= 1.0, "kernel-clock TTFT errors {errs:?} ms");
                let lag = &c1["client_rx_lag_ms"];
                assert!(lag["p50"].as_f64().is_some_and(|p| p >= DELAY_MS), "{lag}");
                assert_eq!(c1["rx_clock"]["kernel"].to_string(), PROMPTS);
                assert!(fired, "{}", summary["diagnoses"]);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    sim.shutdown().await;
}

/// Acceptance: `jq '.output_throughput, .total_token_throughput, .median_ttft_ms, .p99_ttft_ms'`
/// gives four numbers. Uses the real jq: scripts in the field use it.
fn jq_reads_four_numbers(file: &Path) {
    let out = Command::new("jq")
        .arg(".output_throughput, .total_token_throughput, .median_ttft_ms, .p99_ttft_ms")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("this test needs jq (apt-get install jq): {e}"));
    assert!(out.status.success(), "jq failed: {}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<f64> = printed
        .lines()
        .map(|l| {
            l.trim()
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("jq printed {l:?}, not a number"))
        })
        .collect();
    assert_eq!(numbers.len(), 4, "{printed}");
}

/// Acceptance: with the default timings the sweep shows the seed article's
/// shape. Expected from the contract (step = 10.5 + 0.35 x running ms):
/// per-stream speed 1000/10.85 = 92 at 1 falling to 1000/55.3 = 18 at 128;
/// total output 92 -> ~2300 tok/s, the last doubling adding far less than
/// the first ones; p99 TTFT growing with the step time and the prefill of
/// every sequence admitted together. 64 output tokens, not the article's
/// 128: the shape is the step's, and by the same contract the two ratios
/// checked move by about 1% (1 -> 4: 3.63 at 128, 3.61 at 64; 64 -> 128:
/// 1.18, 1.17), while the 128-stream level alone took 7 s at 128.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_timings_show_the_article_shape() {
    let sim = start_sim(SimConfig::default()).await;
    let dir = scratch("shape");
    let out = tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "1,4,16,64,128",
            "--prompts-per-stream",
            "1",
            "--warmup",
            "1",
            "--random-input-len",
            "128",
            "--random-output-len",
            "64",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = read_json(&dir.join("summary.json"));
    let levels = summary["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 5);
    let per_stream: Vec<f64> = levels.iter().map(|l| num(l, "per_stream_tok_s")).collect();
    let total: Vec<f64> = levels.iter().map(|l| num(l, "output_throughput")).collect();
    let p99: Vec<f64> = levels.iter().map(|l| num(l, "p99_ttft_ms")).collect();
    eprintln!("per-stream {per_stream:.1?}\ntotal {total:.1?}\np99 TTFT {p99:.1?}");
    for w in per_stream.windows(2) {
        assert!(w[1] < w[0], "per-stream tok/s must fall: {per_stream:?}");
    }
    for w in total.windows(2) {
        assert!(w[1] > w[0], "total tok/s must rise: {total:?}");
    }
    // Flattening: 1 -> 4 more than triples throughput, 64 -> 128 adds under 40%.
    assert!(total[1] / total[0] > 3.0, "{total:?}");
    assert!(total[4] / total[3] < 1.4, "{total:?}");
    assert!(
        p99[4] > p99[3] && p99[3] > p99[0],
        "p99 TTFT must climb at the top: {p99:?}"
    );
    // Stdout ends with the sweep table titled with the shape.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("in 128 / out 64, ignore_eos"), "{stdout}");
    assert!(!stdout.contains("profile custom"), "{stdout}");
    assert!(stdout.contains("TTFT p99 ms"), "{stdout}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Acceptance: an unreachable server gives one clear line naming the URL,
/// exit code 1, within 5 s, and no panic.
#[test]
fn unreachable_server_is_one_line_and_exit_1() {
    // A port that was just free: bind, note it, release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let dir = scratch("unreachable");
    let started = Instant::now();
    let out = Command::new(bin())
        .args(["sweep", "--base-url", &url, "--no-tui", "--result-dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains(&url), "names the URL: {stderr}");
    assert!(lines[0].contains("connection refused"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Bad flags fail before anything is sent, in one line, exit 1.
#[test]
fn bad_flags_are_one_line_errors() {
    for (args, needle) in [
        (
            vec!["--extra-body", "{not json"],
            "--extra-body is not valid JSON",
        ),
        (
            vec!["--extra-body", "[1]"],
            "--extra-body must be a JSON object",
        ),
        (vec!["--label", "novalue"], "is not K=V"),
        (vec!["--concurrency", "0"], "out of range"),
        (
            vec!["--settle-s=-1"],
            "--settle-s -1: give a number of seconds",
        ),
        (
            vec!["--steady-rse", "2"],
            "--steady-rse 2: give a fraction between 0 and 1",
        ),
    ] {
        let out = Command::new(bin())
            .args(["sweep", "--base-url", "http://127.0.0.1:9", "--no-tui"])
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

/// Ctrl-C mid-level: exit 130 within 2 s of the signal, the cut level saved
/// as partial, requests.jsonl and summary.json written, the key nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_saves_partial_level_and_exits_130() {
    interrupted_by(libc::SIGINT, "interrupt").await;
}

/// The SSH session dropping (SIGHUP) saves like Ctrl-C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hangup_saves_partial_level_and_exits_130() {
    interrupted_by(libc::SIGHUP, "hangup").await;
}

async fn interrupted_by(signal: i32, name: &str) {
    // Slow steps: a level of 64 tokens takes ~1.3 s per request. The
    // simulator demands the key, so a finished request proves it was sent.
    let secret = "sk-test-DO-NOT-LEAK-4242";
    let sim = start_sim(SimConfig {
        api_key: Some(secret.to_string()),
        ..fast_sim(20.0)
    })
    .await;
    let dir = scratch(name);
    let mut args = sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "2,4",
            "--num-prompts",
            "40",
            "--warmup",
            "0",
            "--random-input-len",
            "32",
            "--random-output-len",
            "64",
            "--extra-body",
            r#"{"block_size":32,"threshold":0.95}"#,
        ],
    );
    args.extend(["--api-key".to_string(), secret.to_string()]);
    let child = Command::new(bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until some requests have finished (lines in requests.jsonl).
    let jsonl = dir.join("requests.jsonl");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines = std::fs::read_to_string(&jsonl)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "no requests finished in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = child.id() as i32;
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid, signal) };
    let signalled = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    let took = signalled.elapsed();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    // Prompt, read against this run's own pace rather than a wall-clock
    // bound a loaded box can break: the exit takes under half the time the
    // rest of the first level alone would have needed (its unfinished
    // requests, two at a time, each at least as long as the quickest
    // answer this run logged). Here that is ~16 rounds of ~1.3 s.
    let e2e: Vec<f64> = std::fs::read_to_string(&jsonl)
        .expect("requests.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|r| r["e2el_ms"].as_f64())
        .collect();
    let quickest_s = e2e.iter().copied().fold(f64::INFINITY, f64::min) / 1000.0;
    let unfinished = 40 - e2e.len().min(40);
    let rest_of_level_s = (unfinished / 2) as f64 * quickest_s;
    assert!(
        took.as_secs_f64() < 0.5 * rest_of_level_s,
        "exit took {took:?}, the rest of the level needed {rest_of_level_s:.1} s"
    );

    let partial = read_json(&dir.join("sweep-c2-partial.json"));
    assert_eq!(partial["partial"], true);
    assert_eq!(partial["mode"], "planned");
    assert!(num(&partial, "completed") >= 4.0);
    assert!(
        num(&partial, "cancelled") >= 1.0,
        "in-flight requests were cancelled"
    );
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["levels"].as_array().map(Vec::len), Some(1));
    assert_eq!(summary["run"]["extra_body"]["block_size"], 32);

    // The key reached the server (no 401) and nothing of ours repeats it.
    assert_eq!(
        num(&partial, "failed"),
        0.0,
        "requests were refused: was the key sent?"
    );
    let mut everything = text(&out);
    for entry in std::fs::read_dir(&dir).expect("dir").flatten() {
        everything.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    assert!(!everything.contains(secret), "the API key leaked");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// The driver steered at run time (manual levels, the transition rule,
// steering during warmup, pause and stop) is tested without a network or a
// wall clock in src/load/driver_tests.rs.

/// A server that refuses every request with an HTTP error and a JSON body:
/// the run cannot measure anything, so it stops after warmup with the
/// server's own words, exit 1, and no level file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_in_warmup_end_the_run_with_the_servers_message() {
    // 100 KV tokens cannot hold a 200-token prompt: the simulator answers 400.
    let sim = start_sim(SimConfig {
        kv_tokens: 100,
        ..fast_sim(1.0)
    })
    .await;
    let dir = scratch("http400");
    let out = tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "2",
            "--random-input-len",
            "200",
            "--random-output-len",
            "16",
            "--engine",
            "SGLang",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("all 2 warmup requests failed"), "{stderr}");
    assert!(last.contains("http_400"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!dir.join("sweep-c2.json").exists());
    // --engine overrides detection, and the run's identity says so.
    assert_eq!(
        read_json(&dir.join("summary.json"))["run"]["engine"],
        "sglang"
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Read one whole request (head, then a `Content-Length` body) into `seen`
/// and take it out; false when the connection ends first. `seen` keeps
/// whatever came after it.
async fn read_request(socket: &mut tokio::net::TcpStream, seen: &mut Vec<u8>) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    loop {
        if let Some(head_end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let len = String::from_utf8_lossy(&seen[..head_end])
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if seen.len() >= head_end + 4 + len {
                seen.drain(..head_end + 4 + len);
                return true;
            }
        }
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// A 200 answer carrying a recorded llama-server stream as one chunk, with
/// `head` (whole header lines) beside the stream's own headers.
fn llama_answer(head: &str, capture: &[u8]) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\n{head}Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        capture.len()
    )
    .into_bytes();
    answer.extend_from_slice(capture);
    answer.extend_from_slice(b"\r\n0\r\n\r\n");
    answer
}

/// A listener on a free loopback port, and its address.
async fn loopback_listener() -> (tokio::net::TcpListener, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// Request `id` of level 0: 38 prompt tokens asked, 64 out (the capture's).
fn chat_request(id: u64) -> tokbench::load::request::PreparedRequest {
    tokbench::load::request::PreparedRequest {
        id,
        level: 0,
        body: bytes::Bytes::from_static(b"{}"),
        input_tokens_target: 38,
        max_tokens: 64,
        scheduled: None,
        turn: None,
        probe: false,
    }
}

/// A chat target at `url`: the lean client when `lean`, else reqwest.
fn chat_target(url: &reqwest::Url, lean: bool) -> tokbench::load::request::Target {
    tokbench::load::request::Target {
        wire: tokbench::load::Wire::OpenAi(tokbench::protocol::openai::Api::Chat),
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
        h1: lean
            .then(|| tokbench::load::h1::Connections::for_url(url, None, 4))
            .flatten()
            .map(std::sync::Arc::new),
        url: url.clone(),
        authorization: None,
        request_timeout: Duration::from_secs(10),
        stall_timeout: Duration::from_secs(5),
    }
}

/// llama-server closes the connection after every streamed answer while
/// advertising keep-alive (seen by hand against a real one). A stand-in
/// replays its recorded stream byte for byte and closes the same way: the
/// second request lands on the dead pooled connection, is sent again on a
/// fresh one, and succeeds, with its token count from llama.cpp's timings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_after_each_stream_costs_a_retry_not_a_failure() {
    use tokbench::load::request::execute;
    use tokbench::record::{Outcome, TokenSource};
    use tokio::io::AsyncWriteExt;

    let capture = include_bytes!("../fixtures/captures/llama-server/stream_basic.txt");
    let (listener, addr) = loopback_listener().await;
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the request head and body (Content-Length), answer, close.
                if !read_request(&mut socket, &mut Vec::new()).await {
                    return;
                }
                let head = "Server: llama.cpp\r\nKeep-Alive: timeout=5, max=100\r\n";
                let _ = socket.write_all(&llama_answer(head, capture)).await;
                // The real server closes a moment after its last chunk: by
                // then the client has already put its next request on this
                // connection.
                tokio::time::sleep(Duration::from_millis(30)).await;
                let _ = socket.shutdown().await;
            });
        }
    });

    let url = reqwest::Url::parse(&format!("http://{addr}/v1/chat/completions")).expect("url");
    // Both HTTP clients: the lean one of plain-HTTP runs, and reqwest.
    for lean in [true, false] {
        let target = chat_target(&url, lean);
        let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
        let start = Instant::now();
        let mut retries = 0;
        for id in 0..3 {
            let record = execute(&target, chat_request(id), start, cancel.clone()).await;
            assert_eq!(record.outcome, Outcome::Ok, "{:?}", record.error_message);
            // The capture: 64 content chunks after a role-only one, no usage,
            // a finish chunk with timings.predicted_n = 64.
            assert_eq!(record.output_tokens, 64);
            assert_eq!(record.chunks, 64);
            assert_eq!(record.token_source, TokenSource::LlamacppTimings);
            assert_eq!(record.server_timings.and_then(|t| t.prompt_n), Some(38));
            retries += record.retries;
        }
        assert!(
            retries >= 1,
            "the dead pooled connection was never hit (lean client: {lean})"
        );
    }
}

/// reqwest's pool can hold two connections the server has closed, and hand
/// out the second after the first fails: the stand-in answers the first
/// request of each connection, keeps it open, and closes it when a second
/// request arrives on it. Two requests side by side leave two such
/// connections idle in the pool; the third request meets both dead ones,
/// then a fresh one, and still succeeds, with two retries counted.
#[tokio::test(flavor = "current_thread")]
async fn two_dead_pooled_connections_cost_two_retries_not_a_failure() {
    use tokbench::load::request::execute;
    use tokbench::record::Outcome;
    use tokio::io::AsyncWriteExt;

    let capture = include_bytes!("../fixtures/captures/llama-server/stream_basic.txt");
    let (listener, addr) = loopback_listener().await;
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let closed_by_server = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let closed = closed_by_server.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                if !read_request(&mut socket, &mut seen).await {
                    return;
                }
                if socket.write_all(&llama_answer("", capture)).await.is_err() {
                    return;
                }
                // A second request on this connection: read, never answered.
                if read_request(&mut socket, &mut seen).await {
                    closed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });

    let url = reqwest::Url::parse(&format!("http://{addr}/v1/chat/completions")).expect("url");
    let target = chat_target(&url, false);
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let (a, b) = tokio::join!(
        execute(&target, chat_request(0), start, cancel.clone()),
        execute(&target, chat_request(1), start, cancel.clone())
    );
    assert_eq!((a.outcome, b.outcome), (Outcome::Ok, Outcome::Ok));
    // On this one thread, the pool takes both connections back once their
    // bodies are read and its own tasks have run: let them run.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let third = execute(&target, chat_request(2), start, cancel.clone()).await;
    assert_eq!(third.outcome, Outcome::Ok, "{:?}", third.error_message);
    assert_eq!(third.output_tokens, 64);
    let dead = closed.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        (dead, third.retries),
        (2, 2),
        "the pool handed out both dead connections before a fresh one"
    );
}

/// Ollama, natively: with one parallel slot the sweep shows flat throughput,
/// rising p99 TTFT and the NUM_PARALLEL diagnosis; with four it does not;
/// half the model in system memory is reported from /api/ps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_slots_and_offload_are_diagnosed() {
    async fn run(parallel: usize, vram_share: f64, name: &str) -> Value {
        let sim = start_sim(SimConfig {
            engine: tokbench::sim::SimEngine::Ollama,
            parallel: Some(parallel),
            vram_share,
            ..fast_sim(2.0)
        })
        .await;
        let dir = scratch(name);
        let out = tokbench_async(sweep_args(
            &sim,
            &dir,
            &[
                "--backend",
                "ollama-generate",
                "--concurrency",
                "1,2,4",
                "--num-prompts",
                "8",
                "--random-input-len",
                "32",
                "--random-output-len",
                "16",
                "--probe-interval",
                "0.05",
            ],
        ))
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let summary = read_json(&dir.join("summary.json"));
        sim.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
        summary
    }
    let ids = |s: &Value| -> Vec<String> {
        s["diagnoses"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d["id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };

    let one = run(1, 1.0, "ollama1").await;
    assert_eq!(one["run"]["engine"], "ollama");
    let levels = one["levels"].as_array().expect("levels");
    let t: Vec<f64> = levels.iter().map(|l| num(l, "output_throughput")).collect();
    let p99: Vec<f64> = levels.iter().map(|l| num(l, "p99_ttft_ms")).collect();
    eprintln!("1 slot: throughput {t:.1?}, p99 TTFT {p99:.1?}");
    // Flat from 2 streams on, where one slot always has a request queued
    // behind the one it serves. At 1 stream the slot idles for the client's
    // turnaround between answers, which a loaded box stretches: two busy
    // loops beside the suite read [319.4, 491.0, 484.1] (a 2 ms step with 16
    // tokens leaves the client's wake-up a third of each request).
    assert!(t[2] < 1.2 * t[1], "flat throughput with one slot: {t:?}");
    assert!(p99[2] > 2.0 * p99[0], "p99 TTFT climbs: {p99:?}");
    assert!(
        ids(&one).contains(&"slot_queueing".to_string()),
        "{:?}",
        ids(&one)
    );
    assert_eq!(levels[0]["token_count_source"], "ollama_eval_count");
    assert!(levels[0]["server_timings"]["decode_tok_s_median"].is_number());

    let four = run(4, 0.5, "ollama4").await;
    let t4: Vec<f64> = four["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| num(l, "output_throughput"))
        .collect();
    eprintln!("4 slots: throughput {t4:.1?}");
    assert!(
        t4[2] > 2.5 * t4[0],
        "throughput rises with four slots: {t4:?}"
    );
    let found = ids(&four);
    assert!(!found.contains(&"slot_queueing".to_string()), "{found:?}");
    assert!(found.contains(&"cpu_offload".to_string()), "{found:?}");
}

/// llama.cpp, as tokbench sees it over both OpenAI endpoints: the client's
/// decode speed agrees with the server's own `timings` within 10%, and the
/// probe reads its slots and deferred requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_timings_agree_with_the_client() {
    let sim = start_sim(SimConfig {
        engine: tokbench::sim::SimEngine::Llamacpp,
        parallel: Some(2),
        ..fast_sim(4.0)
    })
    .await;
    for backend in ["openai-chat", "openai-completions"] {
        let dir = scratch(&format!("llamacpp-{backend}"));
        let out = tokbench_async(sweep_args(
            &sim,
            &dir,
            &[
                "--backend",
                backend,
                "--concurrency",
                "1,4",
                "--num-prompts",
                "8",
                "--random-input-len",
                "32",
                "--random-output-len",
                "32",
                "--probe-interval",
                "0.05",
            ],
        ))
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(summary["run"]["engine"], "llamacpp");
        for level in summary["levels"].as_array().expect("levels") {
            let client = num(level, "stream_decode_tok_s");
            let server = num(&level["server_timings"], "decode_tok_s_median");
            eprintln!(
                "{backend} c{}: client {client:.1} tok/s, server timings {server:.1}",
                level["max_concurrency"]
            );
            assert!(
                (client / server - 1.0).abs() < 0.10,
                "{backend}: client {client} vs server {server}"
            );
        }
        // Four streams on two slots: the server defers two of them.
        let c4 = read_json(&dir.join("sweep-c4.json"));
        assert!(
            c4["server"]["deferred"]["max"]
                .as_f64()
                .is_some_and(|d| d >= 1.0),
            "{}",
            c4["server"]
        );
        assert_eq!(c4["server"]["slots_total"]["max"], 2.0, "{}", c4["server"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
    sim.shutdown().await;
}

/// On a GPU host: a stand-in `nvidia-smi` on PATH (two GPUs, 150 W and
/// 250 W) gives every level file its power and energy per million tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_power_and_energy_reach_the_level_files() {
    use std::os::unix::fs::PermissionsExt;
    let bin_dir = scratch("fake-gpu-bin");
    std::fs::create_dir_all(&bin_dir).expect("dir");
    let script = bin_dir.join("nvidia-smi");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '90, 40000, 81559, 150.00, 1980, 1980, 61'\necho '80, 38000, 81559, 250.00, 1980, 1980, 63'\n",
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let sim = start_sim(fast_sim(2.0)).await;
    let dir = scratch("gpu");
    let args = sweep_args(
        &sim,
        &dir,
        &[
            "--concurrency",
            "2",
            "--num-prompts",
            "16",
            "--random-input-len",
            "16",
            "--random-output-len",
            "32",
            "--probe-interval",
            "0.05",
        ],
    );
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(&args)
            .env("PATH", path)
            .stdin(Stdio::null())
            .output()
            .expect("runs")
    })
    .await
    .expect("join");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let level = read_json(&dir.join("sweep-c2.json"));
    // Summed over both GPUs: 150 + 250 = 400 W at every sample.
    assert_eq!(level["gpu"]["power_w_mean"], 400.0, "{}", level["gpu"]);
    // Energy = 400 W x duration / output tokens x 1e6, from the file's own figures.
    let expected = 400.0 * num(&level, "duration") / num(&level, "total_output_tokens") * 1e6;
    let energy = num(&level["gpu"], "energy_j_per_m_output_tokens");
    assert!(
        (energy / expected - 1.0).abs() < 1e-6,
        "{energy} vs {expected}"
    );
    assert_eq!(level["server"]["gpu_count"]["max"], 2.0);
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&bin_dir);
}

/// Ollama cold start: a model load of 500 ms with room for two waiting
/// requests; eight arrive at once, so the excess gets Ollama's exact 503,
/// counted as its own class and explained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_cold_start_503s_are_counted_and_explained() {
    let sim = start_sim(SimConfig {
        engine: tokbench::sim::SimEngine::Ollama,
        parallel: Some(4),
        load_ms: 500.0,
        max_queue: 2,
        ..fast_sim(2.0)
    })
    .await;
    let dir = scratch("ollama-cold");
    let out = tokbench_async(sweep_args(
        &sim,
        &dir,
        &[
            "--backend",
            "ollama-generate",
            "--concurrency",
            "8",
            "--num-prompts",
            "8",
            "--warmup",
            "0",
            "--random-input-len",
            "16",
            "--random-output-len",
            "16",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let level = read_json(&dir.join("sweep-c8.json"));
    let refused = level["errors"]["http_503"].as_u64().unwrap_or(0);
    eprintln!("errors {}", level["errors"]);
    // Two wait for the load; how many more are turned away depends on
    // arrival order around the first one: at least four of the eight.
    assert!(refused >= 4, "{}", level["errors"]);
    assert_eq!(num(&level, "completed") + refused as f64, 8.0);
    let summary = read_json(&dir.join("summary.json"));
    let overload = summary["diagnoses"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["id"] == "overload_responses"))
        .expect("the 503s are explained");
    assert!(
        overload["message"]
            .as_str()
            .is_some_and(|m| m.contains("OLLAMA_MAX_QUEUE")),
        "{overload}"
    );
    let cold = summary["diagnoses"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["id"] == "cold_model"));
    assert!(
        cold.is_some(),
        "the load is seen in the measured requests: {}",
        summary["diagnoses"]
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--goodput` is shown where it was given: in each level's block, as a
/// column of the sweep table with its SLOs under it, and in `report.md`;
/// without it, nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goodput_is_shown_only_where_it_was_asked_for() {
    let sim = start_sim(fast_sim(2.0)).await;
    let run = |name: &str, extra: &[&str]| {
        let dir = scratch(name);
        let mut args = sweep_args(
            &sim,
            &dir,
            &[
                "--concurrency",
                "1,2",
                "--num-prompts",
                "4",
                "--random-input-len",
                "32",
                "--random-output-len",
                "8",
            ],
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        (dir, args)
    };
    let (dir, args) = run("slo-words-on", &["--goodput", "ttft:60000 tpot:50000"]);
    let out = tokbench_async(args).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Every request of the simulator is well within these SLOs.
    assert!(
        stdout.contains("(100% of requests within TTFT<=60000 ms, TPOT<=50000 ms)"),
        "{stdout}"
    );
    assert!(stdout.contains("goodput req/s"), "{stdout}");
    assert!(
        stdout.contains("goodput: requests per second within TTFT<=60000 ms, TPOT<=50000 ms"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(report.contains("| goodput req/s |"), "{report}");
    assert!(report.contains("(100%) |"), "{report}");
    assert!(
        report.contains("**Goodput:** requests per second within TTFT<=60000 ms, TPOT<=50000 ms"),
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let (dir, args) = run("slo-words-off", &[]);
    let out = tokbench_async(args).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.to_lowercase().contains("goodput"), "{stdout}");
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(!report.to_lowercase().contains("goodput"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
    sim.shutdown().await;
}

/// An open-loop level's streams column is its mean number in flight, and
/// its per-stream figure the total over that mean: never `~0` with the
/// total again beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_table_shows_what_was_in_flight() {
    let sim = start_sim(fast_sim(2.0)).await;
    let dir = scratch("open-loop-streams");
    let args = sweep_args(
        &sim,
        &dir,
        &[
            "--request-rate",
            "8",
            "--num-prompts",
            "8",
            "--random-input-len",
            "32",
            "--random-output-len",
            "128",
        ],
    );
    let out = tokbench_async(args).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.contains("rate 8/s"))
        .unwrap_or_else(|| panic!("no rate row: {stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells[0].starts_with('~') && cells[0] != "~0", "{row}");
    let mean: f64 = cells[0][1..].parse().expect("a mean");
    let (per_stream, total): (f64, f64) = (
        cells[1].parse().expect("per stream"),
        cells[2].parse().expect("total"),
    );
    // Per stream is the total over the mean in flight (both rounded).
    assert!(
        (per_stream * mean - total).abs() <= 0.06 * total + 1.0,
        "{row}"
    );
    assert!(stdout.contains("Mean requests in flight:"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    sim.shutdown().await;
}
