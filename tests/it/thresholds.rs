//! `--threshold` on real runs against the simulator: each kind passing
//! and failing with its exit code, the values checked against what the
//! run saved, a level the fit skipped, refusals before anything is sent,
//! a server down, and `report --format junit` against the JUnit schema.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use tokbench::sim::{EmissionLog, SimConfig};

use crate::support::{paced, read_json, scratch_path, stderr, stdout, text, tokbench, Sim};

/// A short sweep of levels 1 and 4 into `dir`, with `extra` flags.
fn sweep(url: &str, dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<String> = [
        "sweep",
        "--base-url",
        url,
        "--no-tui",
        "--concurrency",
        "1,4",
        "--num-prompts",
        "8",
        "--warmup",
        "1",
        "--random-input-len",
        "32",
        "--random-output-len",
        "16",
        "--result-dir",
        dir.to_str().expect("utf-8 path"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    tokbench(&args)
}

/// The saved level at `c` streams.
fn level(summary: &Value, c: u64) -> &Value {
    summary["levels"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["max_concurrency"].as_u64() == Some(c)))
        .unwrap_or_else(|| panic!("no level {c} in {summary}"))
}

/// summary.json's entry for `expr`.
fn entry<'a>(summary: &'a Value, expr: &str) -> &'a Value {
    summary["thresholds"]
        .as_array()
        .and_then(|t| t.iter().find(|e| e["expr"] == expr))
        .unwrap_or_else(|| panic!("no threshold {expr} in {}", summary["thresholds"]))
}

const PASSING: [&str; 4] = [
    "ttft_p99_ms<60000@4",
    "tok_s>0@all",
    "ttft_p99_ms<60000@capacity",
    "capacity>=1",
];

const FAILING: [&str; 4] = [
    "ttft_p99_ms<0.001@4",
    "tok_s>1000000000@all",
    "ttft_p99_ms<0.001@capacity",
    "capacity>=1000",
];

fn threshold_flags(exprs: &[&str]) -> Vec<String> {
    exprs
        .iter()
        .flat_map(|e| ["--threshold".to_string(), e.to_string()])
        .collect()
}

/// Each kind passing: exit 0. Each kind failing beside them: exit 99,
/// every failure's value the one the run saved, printed, sent as events
/// and turned into JUnit that the schema takes, its counts the thresholds'.
#[test]
fn each_kind_passes_and_fails_with_its_exit_code() {
    let sim = Sim::with(paced(2.0, 0.0));
    let url = sim.url();

    let pass_dir = scratch_path("thresholds", "pass");
    let flags = threshold_flags(&PASSING);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = sweep(&url, &pass_dir, &flags);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = read_json(&pass_dir.join("summary.json"));
    for expr in PASSING {
        assert_eq!(entry(&summary, expr)["ok"], true, "{expr}: {}", text(&out));
        assert!(
            stdout(&out).contains(&format!("threshold {expr}: ")),
            "{}",
            text(&out)
        );
    }

    let fail_dir = scratch_path("thresholds", "fail");
    let events = fail_dir.with_extension("events.jsonl");
    let all: Vec<&str> = PASSING.iter().chain(FAILING.iter()).copied().collect();
    let mut flags = threshold_flags(&all);
    flags.extend(
        ["--slo-ttft-p99-ms", "60000", "--events"]
            .iter()
            .map(|s| s.to_string()),
    );
    flags.push(events.display().to_string());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = sweep(&url, &fail_dir, &flags);
    assert_eq!(out.status.code(), Some(99), "{}", text(&out));
    let summary = read_json(&fail_dir.join("summary.json"));
    let printed = stdout(&out);
    for expr in FAILING {
        let e = entry(&summary, expr);
        assert_eq!(e["ok"], false, "{expr}");
        assert!(
            printed
                .lines()
                .any(|l| l.starts_with(&format!("threshold {expr}: ")) && l.contains("FAIL")),
            "{printed}"
        );
    }
    for expr in PASSING {
        assert_eq!(entry(&summary, expr)["ok"], true, "{expr}");
    }
    // The values are the run's own: concurrency 4's saved p99 TTFT, the
    // capacity's level's, the lowest level throughput, the capacity.
    let capacity = summary["capacity"]["concurrency"]
        .as_u64()
        .expect("a capacity");
    let close = |a: &Value, b: &Value| {
        let (a, b) = (a.as_f64().expect("a value"), b.as_f64().expect("saved"));
        assert!((a - b).abs() < 1e-3, "{a} vs {b}");
    };
    close(
        &entry(&summary, "ttft_p99_ms<0.001@4")["value"],
        &level(&summary, 4)["p99_ttft_ms"],
    );
    close(
        &entry(&summary, "ttft_p99_ms<0.001@capacity")["value"],
        &level(&summary, capacity)["p99_ttft_ms"],
    );
    let lowest = [1, 4]
        .iter()
        .map(|c| {
            level(&summary, *c)["output_throughput"]
                .as_f64()
                .expect("tok/s")
        })
        .fold(f64::INFINITY, f64::min);
    close(
        &entry(&summary, "tok_s>1000000000@all")["value"],
        &Value::from(lowest),
    );
    assert_eq!(
        entry(&summary, "capacity>=1000")["value"].as_f64(),
        Some(capacity as f64)
    );
    // The saved entries are what assets/schema/ says they are.
    crate::schema::validate(&fail_dir);
    // report.md shows them; --events sends each, then run_finished with 99.
    let md = std::fs::read_to_string(fail_dir.join("report.md")).expect("report.md");
    assert!(
        md.contains("**Thresholds**") && md.contains("capacity>=1000"),
        "{md}"
    );
    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .expect("events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let sent: Vec<&Value> = lines.iter().filter(|l| l["event"] == "threshold").collect();
    assert_eq!(sent.len(), all.len(), "{lines:?}");
    assert_eq!(
        sent.iter().filter(|l| l["ok"] == false).count(),
        FAILING.len()
    );
    assert_eq!(
        lines.last().map(|l| &l["exit_code"]),
        Some(&Value::from(99))
    );

    // JUnit: valid against the schema; a case per threshold and per level
    // under the SLO given, the failures the failed thresholds.
    let xml_path = fail_dir.join("junit.xml");
    let out = tokbench([
        "report",
        fail_dir.to_str().expect("utf-8"),
        "--format",
        "junit",
        "-o",
        xml_path.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/junit/JUnit.xsd");
    let lint = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&xsd)
        .arg(&xml_path)
        .output()
        .expect("xmllint runs (Debian package libxml2-utils; .ci/run installs it)");
    assert!(lint.status.success(), "{}", text(&lint));
    let xml = std::fs::read_to_string(&xml_path).expect("junit.xml");
    let levels = summary["levels"].as_array().map_or(0, Vec::len);
    assert_eq!(levels, 2);
    assert!(
        xml.contains(&format!(
            "tests=\"{}\" failures=\"{}\" errors=\"0\"",
            all.len() + levels,
            FAILING.len()
        )),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), all.len() + levels);
    assert_eq!(xml.matches("<failure ").count(), FAILING.len());
    assert!(xml.contains("message=\"measured "), "{xml}");
    assert!(xml.contains("limit &lt; 0.001"), "{xml}");
}

/// A server nobody answers: the run fails to measure, exit 1 (not 99).
#[test]
fn a_server_down_exits_1_not_99() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = scratch_path("thresholds", "down");
    let out = sweep(
        &format!("http://127.0.0.1:{port}"),
        &dir,
        &["--threshold", "tok_s>1@4"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

/// One batch slot: throughput stops rising at 4, so the fitted plan skips
/// 16 past the knee; a threshold at 16 fails naming it and why.
#[test]
fn a_level_the_fit_skipped_fails_naming_it() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 1,
        ..paced(2.0, 0.0)
    });
    let dir = scratch_path("thresholds", "skipped");
    let out = tokbench([
        "sweep",
        "--base-url",
        &sim.url(),
        "--no-tui",
        "--concurrency",
        "1,4,16",
        "--budget",
        "60s",
        "--warmup",
        "1",
        "--random-input-len",
        "32",
        "--random-output-len",
        "16",
        "--result-dir",
        dir.to_str().expect("utf-8 path"),
        "--threshold",
        "tok_s>1@16",
        "--threshold",
        "tok_s>1@4",
    ]);
    assert_eq!(out.status.code(), Some(99), "{}", text(&out));
    let summary = read_json(&dir.join("summary.json"));
    let skipped = entry(&summary, "tok_s>1@16");
    assert_eq!(skipped["ok"], false);
    assert_eq!(skipped["value"], Value::Null);
    assert_eq!(
        skipped["reason"],
        "concurrency 16 did not run: skipped (past knee)"
    );
    assert_eq!(entry(&summary, "tok_s>1@4")["ok"], true);
    assert!(
        stdout(&out).contains("threshold tok_s>1@16: not measured  FAIL (concurrency 16 did not run: skipped (past knee))"),
        "{}",
        text(&out)
    );
}

/// A threshold that does not parse, or names a level the plan lacks, is
/// refused in one line before anything is sent: the simulator generated
/// nothing and no result folder was made.
#[test]
fn bad_thresholds_are_refused_before_anything_is_sent() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(log.clone()),
        ..paced(2.0, 0.0)
    });
    let cases = [
        (
            "ttft_p42_msx<5@4",
            "unknown figure \"ttft_p42_msx\"; known: ttft_p50_ms",
        ),
        (
            "tok_s=>5@4",
            "unknown operator \"=>\"; known: <, <=, >, >=, ==",
        ),
        (
            "tok_s>5@8",
            "concurrency 8 is not in the plan (concurrency 1,4)",
        ),
        ("tok_s>5", "add @N (a level), @all or @capacity"),
    ];
    for (i, (expr, says)) in cases.iter().enumerate() {
        let dir = scratch_path("thresholds", &format!("refused{i}"));
        let out = sweep(&sim.url(), &dir, &["--threshold", expr]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{expr}: {err}");
        assert!(!dir.exists(), "{expr}: a result folder was made");
    }
    // demo and tune check theirs the same way.
    let out = tokbench(["demo", "--concurrency", "1,4", "--threshold", "tok_s>5@8"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("concurrency 8 is not in the plan"),
        "{}",
        text(&out)
    );
    assert!(log.take().is_empty(), "the simulator was sent requests");
}
