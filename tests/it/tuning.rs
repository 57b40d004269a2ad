//! The tuning loop end to end, in a real terminal (tmux) against the
//! simulator on loopback: steps that coalesce, levels that say whether they
//! settled, the queue a person can read, and series across server restarts.
//!
//! Needs tmux (`.ci/run` installs it). Every wait is for a state on the
//! screen or on disk, never a fixed time.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::audit::{assert_true_to_the_run, Asked};
use crate::support::{self, bin, paced, read_json, Sim, Tmux};

fn scratch(name: &str) -> PathBuf {
    support::scratch("tuning", name)
}

fn level_files(dir: &Path) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("sweep-") && n.ends_with(".json"))
                .map(|n| {
                    let v = read_json(&dir.join(&n));
                    (n, v)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn pane(args: &str, dir: &Path) -> String {
    format!(
        "sh -c 'exec env TERM=xterm-256color {bin} sweep {args} --result-dir {dir}'; \
         echo TOKBENCH_EXIT=$?; sleep 60",
        bin = bin(),
        dir = dir.display(),
    )
}

/// The `±N%` a level row shows for its throughput's spread.
fn spread_percent(row: &str) -> Option<u32> {
    let after = row.split('±').nth(1)?;
    after.split('%').next()?.trim().parse().ok()
}

/// `+ + +` within 300 ms is one manual level at +3, `] ]` one at x4; a
/// level left before it settled is saved `steady: false` and is no result;
/// no saved level is steady with fewer completions than its minimum.
#[test]
fn quick_steps_coalesce_and_short_levels_are_not_results() {
    // 64 tokens at a 20 ms step: an answer takes about 1.3 s, so a level
    // left within a second has none of its own.
    let sim = Sim::with(paced(20.0, 1.0));
    let dir = scratch("coalesce");
    let results = dir.join("results");
    let args = format!(
        "--base-url {} --concurrency 4 --num-prompts 100000 --warmup 1 \
         --random-input-len 16 --random-output-len 64 --seed 5",
        sim.url()
    );
    let tmux = Tmux::start("coalesce", 160, 48, &pane(&args, &results));
    tmux.wait_for("the planned level", Duration::from_secs(15), |s| {
        s.contains("Concurrency 4") && s.contains("PLANNED")
    });
    // Three presses in one send: well within 300 ms of each other.
    tmux.keys("+++");
    tmux.wait_for("one change to 7", Duration::from_secs(10), |s| {
        s.contains("Concurrency 7") && s.contains("MANUAL")
    });
    // x4 in two quick presses, at once: the level at 7 is left early.
    tmux.keys("]]");
    tmux.wait_for("one change to 28", Duration::from_secs(10), |s| {
        s.contains("Concurrency 28") && s.contains("streaming")
    });
    // The level at 28 settles: its row loses "settling…". Leave it once its
    // spread is well inside the 5% limit (3% or less): the saved verdict is
    // taken at the key, up to a second after the row last said, and one
    // second more must not tip a level that just made it (seen on a busy
    // box before stops were judged on whole seconds: ±5% live, 5.13% saved).
    tmux.wait_for("steady at 28", Duration::from_secs(60), |s| {
        s.lines().any(|l| {
            l.contains("▶")
                && l.contains(" 28 ")
                && !l.contains("settling")
                && spread_percent(l).is_some_and(|p| p <= 3)
        })
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=")
    });
    assert!(
        tmux.screen().contains("TOKBENCH_EXIT=0"),
        "{}",
        tmux.screen()
    );

    let levels = level_files(&results);
    let names: Vec<&str> = levels.iter().map(|(n, _)| n.as_str()).collect();
    let manual: Vec<&(String, Value)> = levels
        .iter()
        .filter(|(_, v)| v["mode"] == "manual")
        .collect();
    let concurrencies: Vec<u64> = manual
        .iter()
        .filter_map(|(_, v)| v["max_concurrency"].as_u64())
        .collect();
    assert_eq!(
        concurrencies,
        [28, 7],
        "one level per burst of keys: {names:?}"
    );
    let seven = &manual[1].1;
    assert_eq!(seven["steady"], false, "{seven}");
    let reason = seven["steady_reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("too short: "), "{reason}");
    let twenty_eight = &manual[0].1;
    assert_eq!(twenty_eight["steady"], true, "{twenty_eight}");
    for (name, v) in &levels {
        if v["steady"] == true {
            let min = 2 * v["max_concurrency"].as_u64().unwrap_or(0);
            let completed = v["completed"].as_u64().unwrap_or(0);
            assert!(completed >= min, "{name}: steady with {completed} of {min}");
        }
    }
    // Requests in flight across the changes were set apart, not counted.
    let lines = std::fs::read_to_string(results.join("requests.jsonl")).expect("requests.jsonl");
    let transition = lines
        .lines()
        .filter(|l| l.contains("\"transition\":true"))
        .count();
    assert!(transition > 0, "some requests crossed a change");
    // The short level is no result: not on the chart, not the capacity.
    let summary = read_json(&results.join("summary.json"));
    assert_ne!(summary["capacity"]["concurrency"], 7, "{summary}");
    let chart = std::fs::read_to_string(results.join("chart.svg")).unwrap_or_default();
    assert!(chart.contains("28 streams"), "the steady level is charted");
    assert!(
        !chart.contains(">7 streams") && !chart.contains(" 7 streams"),
        "the short one is not"
    );
    drop(tmux);
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A free port on loopback for a simulator we start and stop ourselves.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// `tokbench sim` as its own process, so it can be stopped and started
/// again on the same port with another setting.
struct SimProcess(Child);

impl SimProcess {
    fn start(port: u16, engine: &str, parallel: u32) -> SimProcess {
        SimProcess::start_with(port, engine, parallel, &[])
    }

    /// [`SimProcess::start`] with more of `tokbench sim`'s flags.
    fn start_with(port: u16, engine: &str, parallel: u32, extra: &[&str]) -> SimProcess {
        let child = Command::new(bin())
            .args(["sim", "--port", &port.to_string(), "--engine", engine])
            .args(["--parallel", &parallel.to_string(), "--step-ms", "5"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tokbench sim starts");
        // Wait for it to listen (a state, not a time).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "sim on {port} never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        SimProcess(child)
    }

    fn stop(mut self, port: u16) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "sim on {port} never stopped"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Ollama with one slot: at 4 streams three wait, on screen and in the
/// level file; restarted with four slots, the view notices, starts a
/// second series on its own, and the summary has both capacities.
#[test]
fn ollama_restart_starts_a_second_series() {
    let port = free_port();
    let server = SimProcess::start(port, "ollama", 1);
    let dir = scratch("restart");
    let results = dir.join("results");
    // 16 tokens at 5 ms: one answer about 90 ms; TTFT p99 SLO 150 ms,
    // which one slot fails at 4 streams (three answers ahead of each).
    // 24 prompts a level: at 4 streams three wait but for the last three
    // answers (2, 1, 0), a mean of (3 x 21 + 3) / 24 = 2.75 on a quiet box.
    let args = format!(
        "--base-url http://127.0.0.1:{port} --concurrency 1,4 --num-prompts 24 --warmup 1 \
         --random-input-len 16 --random-output-len 16 --seed 9 --slo-ttft-p99-ms 150"
    );
    let tmux = Tmux::start("restart", 160, 48, &pane(&args, &results));
    let seen = tmux.wait_for("three waiting at 4 streams", Duration::from_secs(30), |s| {
        s.contains("Concurrency 4")
            && ["waiting 2", "waiting 3", "waiting 4"]
                .iter()
                .any(|w| s.contains(w))
    });
    eprintln!("waiting count on screen after {seen:?}");
    tmux.wait_for("the plan done", Duration::from_secs(60), |s| {
        s.contains("sweep finished")
    });
    let four = read_json(&results.join("sweep-c4.json"));
    let mean = four["waiting"]["mean"].as_f64().expect("waiting.mean");
    eprintln!(
        "one slot, 4 streams: waiting.mean {mean}, streaming.mean {}",
        four["streaming"]["mean"]
    );
    // Three wait most of the time: the time-weighted median. Not the mean,
    // which follows the client's pace as well as the server's queue: on a
    // loaded box a client held off the CPU for 0.7 s (its rx lag said so)
    // sent the next requests late, fewer waited, and the mean read 2.21.
    assert_eq!(four["waiting"]["p50"].as_f64(), Some(3.0), "{four}");
    assert!(mean <= 3.0, "waiting.mean {mean}: {four}");

    server.stop(port);
    tmux.wait_for("server gone", Duration::from_secs(15), |s| {
        s.contains("server gone")
    });
    let server = SimProcess::start(port, "ollama", 4);
    tmux.wait_for(
        "a second series without a key",
        Duration::from_secs(30),
        |s| s.contains("new series") || s.contains("series 2"),
    );
    tmux.wait_for("the second plan done", Duration::from_secs(60), |s| {
        s.contains("sweep finished")
            && std::path::Path::new(&results.join("sweep-c4-s2.json")).exists()
    });
    let wide = tmux.screen();
    assert!(
        wide.contains("series 1") && wide.contains("series 2"),
        "{wide}"
    );
    tmux.run(&["resize-window", "-x", "80", "-y", "24"]);
    // The pane is 24 lines as soon as tmux resizes it; wait for the view's
    // redraw at that size too, not only for the smaller pane.
    let narrow = tmux.wait_for("80x24", Duration::from_secs(5), |s| {
        s.lines().count() <= 24 && s.contains("series 1") && s.contains("series 2")
    });
    eprintln!("resized in {narrow:?}");
    let small = tmux.screen();
    assert!(
        small.contains("series 1") && small.contains("series 2"),
        "{small}"
    );
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=")
    });
    // The notes audit's restart: what was printed on quitting, its table
    // with both series, read against what the run asked (Ollama: no
    // ignore_eos honoured).
    let printed = tmux.screen_with_history();
    let asked = Asked {
        ignore_eos_honoured: false,
        series: &["series 1", "series 2"],
        ..Asked::fixed()
    };
    assert_true_to_the_run("a restart with two series", &printed, &asked);

    let summary = read_json(&results.join("summary.json"));
    let series = summary["series"].as_array().expect("series").clone();
    assert_eq!(series.len(), 2, "{summary}");
    let capacity = |i: usize| series[i]["capacity"]["concurrency"].as_u64();
    assert_eq!((capacity(0), capacity(1)), (Some(1), Some(4)), "{summary}");
    let lines = std::fs::read_to_string(results.join("requests.jsonl")).unwrap_or_default();
    for line in lines
        .lines()
        .filter(|l| l.contains("\"error\":\"restart\""))
    {
        assert!(
            line.contains("\"transition\":true"),
            "charged to no level: {line}"
        );
    }
    drop(server);
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ollama killed in the middle of its 4-stream level (one slot: one
/// streaming, three queued) and started again with four slots after
/// `outage`. However short the outage, the run has two series, each
/// judged against one server: the cut level is partial, its failures are
/// `restart` (charged to no level), and the second series starts the plan
/// again. As a real Ollama, a new process lists no model in `/api/ps`
/// until a request loads one, whatever its load time (`load`: more of
/// `tokbench sim`'s flags), which is how the watch tells a new process from
/// dropped connections.
fn ollama_restart_after(name: &str, outage: Duration, load: &[&str]) {
    let port = free_port();
    let server = SimProcess::start_with(port, "ollama", 1, load);
    let dir = scratch(name);
    let results = dir.join("results");
    // As `ollama_restart_starts_a_second_series`: one answer about 90 ms,
    // a TTFT p99 SLO of 150 ms that one slot fails at 4 streams and four
    // slots pass. 32 prompts a level: the 4-stream level of one slot
    // runs about 3 s, time to see it queue and kill the server in it.
    let args = format!(
        "--base-url http://127.0.0.1:{port} --concurrency 1,4 --num-prompts 32 --warmup 1 \
         --random-input-len 16 --random-output-len 16 --seed 9 --slo-ttft-p99-ms 150"
    );
    let tmux = Tmux::start(name, 160, 48, &pane(&args, &results));
    tmux.wait_for("queued at 4 streams", Duration::from_secs(30), |s| {
        s.contains("Concurrency 4") && ["waiting 2", "waiting 3"].iter().any(|w| s.contains(w))
    });
    server.stop(port);
    // The outage is what is tested: its length is the point, not a wait
    // for a state.
    std::thread::sleep(outage);
    let server = SimProcess::start_with(port, "ollama", 4, load);
    tmux.wait_for("a second series", Duration::from_secs(30), |s| {
        s.contains("series 2")
    });
    tmux.wait_for("the second plan done", Duration::from_secs(60), |s| {
        s.contains("sweep finished") && results.join("sweep-c4-s2.json").exists()
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=")
    });

    let summary = read_json(&results.join("summary.json"));
    let series = summary["series"].as_array().expect("series").clone();
    assert_eq!(series.len(), 2, "{summary}");
    let capacity = |i: usize| series[i]["capacity"]["concurrency"].as_u64();
    assert_eq!((capacity(0), capacity(1)), (Some(1), Some(4)), "{summary}");
    // The cut level is partial, never a result of either series.
    let levels = summary["levels"].as_array().expect("levels").clone();
    let cut: Vec<&Value> = levels
        .iter()
        .filter(|l| l["series"].as_u64() == Some(0) && l["max_concurrency"].as_u64() == Some(4))
        .collect();
    assert!(
        cut.iter().all(|l| l["partial"].as_bool() == Some(true)),
        "{cut:?}"
    );
    let lines = std::fs::read_to_string(results.join("requests.jsonl")).unwrap_or_default();
    let restart: Vec<&str> = lines
        .lines()
        .filter(|l| l.contains("\"error\":\"restart\""))
        .collect();
    assert!(!restart.is_empty(), "no restart failure");
    for line in &restart {
        assert!(line.contains("\"transition\":true"), "charged: {line}");
    }
    assert!(
        !lines.contains("\"error\":\"connection_closed\""),
        "a cut request charged to its level"
    );
    drop(server);
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model load of 50 ms, as a small model's.
const LOAD_50_MS: &[&str] = &["--load-ms", "50"];

#[test]
fn ollama_restart_after_half_a_second_is_a_second_series() {
    ollama_restart_after("restart-0s5", Duration::from_millis(500), LOAD_50_MS);
}

#[test]
fn ollama_restart_after_one_second_is_a_second_series() {
    ollama_restart_after("restart-1s", Duration::from_secs(1), LOAD_50_MS);
}

#[test]
fn ollama_restart_after_three_seconds_is_a_second_series() {
    ollama_restart_after("restart-3s", Duration::from_secs(3), LOAD_50_MS);
}

/// The simulator's default load of no time: the model is still listed
/// only once a request loads it, so a restart 0.3 s apart is told as one.
/// (It listed its model from the start, and this run mixed both servers
/// in one series, the cut requests counted as failures.)
#[test]
fn ollama_restart_at_the_default_load_after_a_third_of_a_second_is_a_second_series() {
    ollama_restart_after("restart-0s3", Duration::from_millis(300), &[]);
}

/// llama.cpp with `-np` changed between series: the new series is labelled
/// from `/props` (`slots 2 → 4`); `s` and Enter start another by key.
#[test]
fn llamacpp_series_label_comes_from_props() {
    let port = free_port();
    let server = SimProcess::start(port, "llamacpp", 2);
    let dir = scratch("props");
    let results = dir.join("results");
    let args = format!(
        "--base-url http://127.0.0.1:{port} --concurrency 1,2 --num-prompts 8 --warmup 1 \
         --random-input-len 16 --random-output-len 16 --seed 11"
    );
    let tmux = Tmux::start("props", 160, 48, &pane(&args, &results));
    tmux.wait_for("the plan done", Duration::from_secs(60), |s| {
        s.contains("sweep finished")
    });
    server.stop(port);
    tmux.wait_for("server gone", Duration::from_secs(15), |s| {
        s.contains("server gone")
    });
    let server = SimProcess::start(port, "llamacpp", 4);
    tmux.wait_for("labelled from /props", Duration::from_secs(30), |s| {
        s.contains("slots 2 → 4")
    });
    tmux.wait_for("the second plan done", Duration::from_secs(60), |s| {
        s.contains("sweep finished") && results.join("sweep-c2-s2.json").exists()
    });
    // By key: the prompt offers a label; Enter takes it.
    tmux.keys("s");
    tmux.wait_for("the prompt", Duration::from_secs(5), |s| {
        s.contains("new series label")
    });
    tmux.run(&["send-keys", "Enter"]);
    tmux.wait_for("a third series", Duration::from_secs(60), |s| {
        s.contains("sweep finished") && results.join("sweep-c2-s3.json").exists()
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=")
    });
    let summary = read_json(&results.join("summary.json"));
    let labels: Vec<&str> = summary["series"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["label"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(labels.len(), 3, "{summary}");
    assert_eq!(labels[1], "slots 2 → 4", "{summary}");
    let level = read_json(&results.join("sweep-c2-s2.json"));
    assert_eq!(level["series"], 1);
    assert_eq!(level["series_label"], "slots 2 → 4");
    drop(server);
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}
