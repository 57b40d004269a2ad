//! The open-file limit, set in the test's own shell (`ulimit`) for the
//! binary alone: a hard limit too low for the largest level refuses the
//! run before any request; a low soft limit under a high hard one is
//! raised; under `--force` every request that found no descriptor is
//! `client_fd_limit`, and no result file is lost to the limit.

use std::process::{Command, Output, Stdio};

use tokbench::sim::{EmissionLog, SimConfig};

use crate::support::{bin, paced, read_json, scratch_path, text, Sim};

/// `tokbench ARGS` under `ulimit` commands run first in its shell.
fn under_ulimit(ulimit: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("{ulimit} && exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs")
}

fn sweep_args<'a>(url: &'a str, dir: &'a str, streams: &'a str, prompts: &'a str) -> Vec<&'a str> {
    vec![
        "sweep",
        "--base-url",
        url,
        "--concurrency",
        streams,
        "--num-prompts",
        prompts,
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--warmup",
        "0",
        "--no-tui",
        "--result-dir",
        dir,
    ]
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The test process's own hard limit: the soft-limit case needs room
/// above 400 streams to raise into.
fn hard_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct given.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit.rlim_max
}

#[test]
fn a_hard_limit_too_low_refuses_before_any_request_and_a_soft_one_is_raised() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(log.clone()),
        max_num_seqs: 512,
        ..paced(2.0, 0.0)
    });
    let url = sim.url();
    let refused = scratch_path("fd_limits", "refused");
    let d = refused.display().to_string();
    let out = under_ulimit(
        "ulimit -Sn 256 && ulimit -Hn 256",
        &sweep_args(&url, &d, "400", "400"),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(
            "level 400 needs about 432 open files; the hard limit is 256: raise it (ulimit -Hn"
        ),
        "{err}"
    );
    assert!(log.take().is_empty(), "a request reached the server");
    assert!(!refused.exists(), "a refused run leaves no folder");

    let hard = hard_limit();
    assert!(
        hard >= 1024,
        "this test needs a hard open-file limit of 1024 or more to raise into; it is {hard}"
    );
    let raised = scratch_path("fd_limits", "raised");
    let d = raised.display().to_string();
    let out = under_ulimit("ulimit -Sn 256", &sweep_args(&url, &d, "400", "800"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "raised the open-file limit from 256 to {hard}: level 400 needs about 432"
        )),
        "{err}"
    );
    let level = read_json(&raised.join("sweep-c400.json"));
    assert_eq!(level["completed"], 800, "no error: {level}");
    assert_eq!(level["failed"], 0, "{level}");
    let _ = std::fs::remove_dir_all(&raised);
}

/// Twenty runs in a row under a hard limit of 64 with 100 streams and
/// `--force`: about a third of the streams get a socket, the rest find no
/// descriptor. Every failed request is `client_fd_limit` (none is taken
/// for the server's fault), the diagnosis names the client's limit, and
/// every run leaves its level file and `summary.json` whole.
#[test]
fn under_force_every_request_without_a_descriptor_is_the_clients_and_no_result_is_lost() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 512,
        ..paced(1.0, 0.0)
    });
    let url = sim.url();
    let mut failed_in_all = 0;
    for run in 0..20 {
        let dir = scratch_path("fd_limits", &format!("force{run}"));
        let d = dir.display().to_string();
        let mut args = sweep_args(&url, &d, "100", "200");
        args.push("--force");
        let out = under_ulimit("ulimit -Sn 64 && ulimit -Hn 64", &args);
        assert_eq!(out.status.code(), Some(0), "run {run}: {}", text(&out));
        let err = stderr(&out);
        assert!(err.contains("running anyway (--force)"), "run {run}: {err}");
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(
            summary["levels"].as_array().map(Vec::len),
            Some(1),
            "run {run}: {summary}"
        );
        let level = read_json(&dir.join("sweep-c100.json"));
        let completed = level["completed"].as_u64().expect("completed");
        let failed = level["failed"].as_u64().expect("failed");
        assert_eq!(completed + failed, 200, "run {run}: {level}");
        assert!(failed > 0 && completed > 0, "run {run}: {level}");
        // Every failure by its class in the level file and line by line.
        let errors = level["errors"].as_object().expect("errors");
        assert_eq!(
            errors.keys().collect::<Vec<_>>(),
            ["client_fd_limit"],
            "run {run}: {errors:?}"
        );
        assert_eq!(errors["client_fd_limit"], failed, "run {run}");
        let lines = std::fs::read_to_string(dir.join("requests.jsonl")).expect("requests.jsonl");
        let failed_lines = lines
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| !r["error"].is_null())
            .inspect(|r| assert_eq!(r["error"], "client_fd_limit", "run {run}: {r}"))
            .count() as u64;
        assert_eq!(failed_lines, failed, "run {run}");
        let diagnosed = summary["diagnoses"].to_string();
        assert!(
            diagnosed.contains("had no file descriptor for a connection"),
            "run {run}: {diagnosed}"
        );
        failed_in_all += failed;
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("20 runs under a hard limit of 64: {failed_in_all} requests were client_fd_limit, every file written");
}

/// Twenty runs in a row of two levels under a hard limit of 64 with
/// `--force`: the first level fits, the second (100 streams) takes every
/// descriptor the load can find while its reports are rewritten. Every run
/// exits 0 with both level files, `summary.json` and `requests.jsonl`
/// whole; a chart or report that could not be rewritten during the run is
/// said and written at the end. About 1 s a run.
#[test]
fn two_levels_under_force_never_lose_a_result_file_to_the_limit() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 512,
        ..paced(1.0, 0.0)
    });
    let url = sim.url();
    for run in 0..20 {
        let dir = scratch_path("fd_limits", &format!("two{run}"));
        let d = dir.display().to_string();
        let mut args = sweep_args(&url, &d, "8,100", "200");
        args.push("--force");
        let out = under_ulimit("ulimit -Sn 64 && ulimit -Hn 64", &args);
        assert_eq!(out.status.code(), Some(0), "run {run}: {}", text(&out));
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(
            summary["levels"].as_array().map(Vec::len),
            Some(2),
            "run {run}: {summary}"
        );
        assert!(summary["run"]["ended_at"].is_string(), "run {run}");
        for (file, prompts) in [("sweep-c8.json", 200), ("sweep-c100.json", 200)] {
            let level = read_json(&dir.join(file));
            let completed = level["completed"].as_u64().expect("completed");
            let failed = level["failed"].as_u64().expect("failed");
            assert_eq!(completed + failed, prompts, "run {run} {file}: {level}");
        }
        let lines = std::fs::read_to_string(dir.join("requests.jsonl")).expect("requests.jsonl");
        assert_eq!(lines.lines().count(), 400, "run {run}");
        // A report the run could not rewrite is said, and then done at the end.
        let err = stderr(&out);
        if err.contains("could not rewrite") {
            assert!(
                err.contains("it will be written at the end"),
                "run {run}: {err}"
            );
        }
        for report in ["chart.svg", "report.md"] {
            assert!(
                dir.join(report).is_file()
                    || err.contains(&format!("could not write {d}/{report}")),
                "run {run}: {report} neither written nor said: {err}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Only the chart's write fails (`chart.svg` is a folder, which a rename
/// cannot replace): the run completes with every result file, and the
/// failure is named once while it runs, and once more at the end, where
/// it still fails.
#[test]
fn a_chart_that_cannot_be_written_does_not_end_the_run() {
    let sim = Sim::with(paced(1.0, 0.0));
    let url = sim.url();
    let dir = scratch_path("fd_limits", "chart_dir");
    std::fs::create_dir_all(dir.join("chart.svg")).expect("chart.svg as a folder");
    let d = dir.display().to_string();
    let out = Command::new(bin())
        .args(sweep_args(&url, &d, "1,2", "8"))
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = stderr(&out);
    let chart = format!("{d}/chart.svg");
    let during: Vec<_> = err
        .lines()
        .filter(|l| l.contains(&format!("could not rewrite {chart}")))
        .collect();
    assert_eq!(during.len(), 1, "said once while it runs: {err}");
    assert!(during[0].contains("it will be written at the end"), "{err}");
    let at_end: Vec<_> = err
        .lines()
        .filter(|l| l.contains(&format!("could not write {chart}")))
        .collect();
    assert_eq!(at_end.len(), 1, "said once at the end: {err}");
    assert!(dir.join("chart.svg").is_dir());
    for file in [
        "sweep-c1.json",
        "sweep-c2.json",
        "summary.json",
        "report.md",
    ] {
        assert!(dir.join(file).is_file(), "{file}: {err}");
    }
    assert_eq!(
        read_json(&dir.join("summary.json"))["levels"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
