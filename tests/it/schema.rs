//! The result files' schema (docs/architecture.md section 5,
//! `src/report/schema.rs`, `assets/schema/`): fresh files validate against
//! the checked-in JSON Schemas, which name every key written; files of the
//! version before `schema_version` (tests/fixtures/schema_v0, written by
//! commit 37f59cb) still load; and a seeded simulator run writes the same
//! keys and the same non-timing values as that commit did.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{bin, python_with_jsonschema, read_json, scratch, text};

/// The run tests/fixtures/schema_v0 was written with (`tokbench demo`, the
/// in-process simulator), by the binary of commit 37f59cb.
const SEEDED_RUN: &[&str] = &[
    "demo",
    "--no-tui",
    "--concurrency",
    "1,2",
    "--num-prompts",
    "4",
    "--random-input-len",
    "64",
    "--random-output-len",
    "16",
    "--seed",
    "7",
    "--percentiles",
    "50,90,99",
    "--gpu-price-per-hour",
    "2",
    "--goodput",
    "ttft:500",
    "--gpus",
    "1",
];

const LEVEL_FILES: [&str; 2] = ["sweep-c1.json", "sweep-c2.json"];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_v0")
}

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/schema")
}

fn seeded_run(name: &str) -> PathBuf {
    let dir = scratch("schema", name);
    let out = Command::new(bin())
        .args(SEEDED_RUN)
        .arg("--result-dir")
        .arg(&dir)
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "demo: {}", text(&out));
    dir
}

fn request_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Validate a result folder against assets/schema/: summary.json, each level
/// file, each line of requests.jsonl. Also fails on a key the schema does not
/// name (in `properties` or, for the latency keys, `patternProperties`), so
/// the schema cannot fall behind the writer. Other files' runs (a GPU
/// block, tests/it/gpu.rs) are checked here too.
pub fn validate(dir: &Path) {
    let script = r#"
import json, re, sys, glob, os
import jsonschema
schemas, run = sys.argv[1], sys.argv[2]
load = lambda name: json.load(open(os.path.join(schemas, name)))
level, summary, request = load("level.schema.json"), load("summary.schema.json"), load("request.schema.json")
# summary.json's levels are level objects: the one file, inlined.
summary["properties"]["levels"]["items"] = level
errors = []
def unnamed(schema, obj, where):
    props = schema.get("properties", {})
    patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
    for key in obj:
        if key not in props and not any(p.search(key) for p in patterns):
            errors.append(f"{where}: key {key!r} is not in the schema")
def check(schema, obj, where):
    for e in jsonschema.Draft202012Validator(schema).iter_errors(obj):
        errors.append(f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    unnamed(schema, obj, where)
s = json.load(open(os.path.join(run, "summary.json")))
check(summary, s, "summary.json")
for i, l in enumerate(s.get("levels", [])):
    unnamed(level, l, f"summary.json levels/{i}")
files = sorted(glob.glob(os.path.join(run, "sweep-*.json")))
assert files, "no level file"
for f in files:
    obj = json.load(open(f))
    check(level, obj, os.path.basename(f))
    # The gpu block names its keys too (docs/server-figures.md, GPU).
    if isinstance(obj.get("gpu"), dict):
        unnamed(level["properties"]["gpu"], obj["gpu"], os.path.basename(f) + " gpu")
lines = open(os.path.join(run, "requests.jsonl")).read().splitlines()
assert lines, "no request line"
for n, line in enumerate(lines, 1):
    check(request, json.loads(line), f"requests.jsonl:{n}")
# model.json, where the run could be fitted: its schema names every key
# (additionalProperties is false throughout).
if os.path.exists(os.path.join(run, "model.json")):
    check(load("model.schema.json"), json.load(open(os.path.join(run, "model.json"))), "model.json")
print(f"{len(files)} level files, {len(lines)} request lines, {len(errors)} errors")
for e in errors[:40]:
    print(e)
sys.exit(1 if errors else 0)
"#;
    let out = Command::new(python_with_jsonschema(
        "the result files against assets/schema/",
    ))
    .args(["-c", script])
    .arg(schema_dir())
    .arg(dir)
    .output()
    .expect("python runs");
    assert!(
        out.status.success(),
        "schema validation of {}: {}",
        dir.display(),
        text(&out)
    );
}

#[test]
fn fresh_files_validate_against_the_schemas() {
    let dir = seeded_run("fresh");
    validate(&dir);
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["schema_version"], 1);
    // Two levels: the model was fitted and checked too.
    assert_eq!(read_json(&dir.join("model.json"))["version"], 1);
    for name in LEVEL_FILES {
        assert_eq!(read_json(&dir.join(name))["schema_version"], 1, "{name}");
    }
}

#[test]
fn version_0_files_validate_and_load() {
    validate(&fixture());
    // report and compare read them as before.
    for format in ["md", "csv", "json"] {
        let out = Command::new(bin())
            .arg("report")
            .arg(fixture())
            .args(["--format", format])
            .output()
            .expect("tokbench runs");
        assert!(
            out.status.success(),
            "report --format {format}: {}",
            text(&out)
        );
    }
    let out = Command::new(bin())
        .arg("report")
        .arg(fixture())
        .args(["--format", "csv"])
        .output()
        .expect("tokbench runs");
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(csv.contains("p90_ttft_ms"), "every key a column: {csv}");
    let out = Command::new(bin())
        .arg("compare")
        .arg(fixture())
        .arg(fixture())
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "compare: {}", text(&out));
}

/// Values that follow from the clock (latencies, throughputs, rates, dates,
/// loads) or from judging them (capacity, knee, cost, diagnoses, goodput),
/// which two runs of the same seed do not share. Paths use `#` for an index.
fn is_timing(path: &str) -> bool {
    const SUBTREES: [&str; 15] = [
        "/capacity",
        "/capacity_reason",
        "/knee",
        "/cost",
        "/diagnoses",
        "/series/#/capacity",
        "/series/#/knee",
        "/run/target",
        "/run/started_at",
        "/resumed/first_started_at",
        "/server",
        "/client",
        "/waiting",
        "/streaming",
        "/goodput",
    ];
    // How reads coalesce follows from the scheduler: a loaded machine reads
    // two chunks at once.
    const KEYS: [&str; 12] = [
        "date",
        "duration",
        "started_at_s",
        "at_s",
        "start_s",
        "end_s",
        "request_goodput",
        "throughput_rse",
        "rx_clock",
        "send_lateness",
        "output_reads",
        "coalesced_reads",
    ];
    let path = path.strip_prefix("/levels/#").unwrap_or(path);
    let key = path.rsplit('/').next().unwrap_or("");
    SUBTREES
        .iter()
        .any(|s| path == *s || path.starts_with(&format!("{s}/")))
        || KEYS.contains(&key)
        || path.split('/').any(|k| {
            k.ends_with("_ms")
                || k.contains("_ms_")
                || k.contains("throughput")
                || k.contains("tok_s")
        })
}

/// Differences between two files: keys one has and the other lacks
/// (anywhere), and non-timing values that differ (numbers compared as
/// numbers, so `1` and `1.0` are the same).
fn differences(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    let shape = |p: &str| {
        p.split('/')
            .map(|k| if k.parse::<usize>().is_ok() { "#" } else { k })
            .collect::<Vec<_>>()
            .join("/")
    };
    match (before, after) {
        // Which gauges a level's `server` holds depends on when the probe's
        // samples fell (one a second, levels of a fraction of one), so a
        // clock-following subtree is compared key by key where both have
        // the key, not for the keys it has.
        (Value::Object(a), Value::Object(b)) if !path.is_empty() && is_timing(&shape(path)) => {
            for (k, v) in a {
                if let Some(w) = b.get(k) {
                    differences(v, w, &format!("{path}/{k}"), out);
                }
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                out.push(format!("{path}/{k}: gone"));
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                // Keys added on purpose since the fixture was written.
                if !ADDED_SINCE_FIXTURE.contains(&k.as_str()) {
                    out.push(format!("{path}/{k}: new"));
                }
            }
            for (k, v) in a {
                if let Some(w) = b.get(k) {
                    differences(v, w, &format!("{path}/{k}"), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if !is_timing(&shape(path)) => {
            if a.len() != b.len() {
                out.push(format!("{path}: {} entries, now {}", a.len(), b.len()));
            }
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                differences(v, w, &format!("{path}/{i}"), out);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            // A judged list (diagnoses): its entries keep their keys.
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                if let (Value::Object(v), Value::Object(w)) = (v, w) {
                    let (kv, kw): (Vec<_>, Vec<_>) = (v.keys().collect(), w.keys().collect());
                    if kv != kw {
                        out.push(format!("{path}/{i}: keys {kv:?}, now {kw:?}"));
                    }
                }
            }
        }
        _ if is_timing(&shape(path)) => {}
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {a}, now {b}")),
    }
}

/// Keys written since tests/fixtures/schema_v0: the schema's version
/// (issue 12), what merges read, level files only (issue 13), and the
/// server's own account of each level (its /metrics at the level's edges),
/// a level's probe requests (`--probe-rate`), the plan's estimate after
/// the warmup (`fit`), and whether the user gave the SLO (`run.slo.given`)
/// and which rule judged the capacity (`rule`), and when the run ended
/// (`run.ended_at`).
const ADDED_SINCE_FIXTURE: &[&str] = &[
    "schema_version",
    "histograms",
    "samples",
    "server_account",
    "probe",
    "fit",
    "given",
    "rule",
    "ended_at",
    "connect_ms",
    "ttft_after_connect_ms",
];

#[test]
fn a_seeded_run_writes_what_the_base_commit_wrote() {
    let dir = seeded_run("same");
    let mut diff = Vec::new();
    for name in ["summary.json", LEVEL_FILES[0], LEVEL_FILES[1]] {
        let mut d = Vec::new();
        differences(
            &read_json(&fixture().join(name)),
            &read_json(&dir.join(name)),
            "",
            &mut d,
        );
        diff.extend(d.into_iter().map(|d| format!("{name}{d}")));
    }
    // Requests finish in either order within a level: matched by id.
    let by_id = |lines: Vec<Value>| -> BTreeMap<u64, Value> {
        lines
            .into_iter()
            .map(|l| (l["id"].as_u64().expect("an id"), l))
            .collect()
    };
    let (before, after) = (by_id(request_lines(&fixture())), by_id(request_lines(&dir)));
    let ids = |m: &BTreeMap<u64, Value>| m.keys().copied().collect::<Vec<_>>();
    assert_eq!(ids(&before), ids(&after), "the same requests");
    for (id, line) in &before {
        let mut d = Vec::new();
        differences(line, &after[id], "", &mut d);
        diff.extend(d.into_iter().map(|d| format!("requests.jsonl id {id}{d}")));
    }
    assert!(
        diff.is_empty(),
        "the result files differ from tests/fixtures/schema_v0 beyond timing:\n{}",
        diff.join("\n")
    );
}

#[test]
fn timing_paths_are_told_apart() {
    for path in [
        "/levels/#/p99_ttft_ms",
        "/output_throughput",
        "/client/cpu_percent",
        "/run/started_at",
        "/levels/#/stream_decode_tok_s",
        "/diagnoses/#/message",
        "/target_changes/#/at_s",
    ] {
        assert!(is_timing(path), "{path}");
    }
    for path in [
        "/completed",
        "/levels/#/total_output_tokens",
        "/run/seed",
        "/mode",
        "/target_changes/#/concurrency",
        "/output_tokens",
        "/input_len/mean",
    ] {
        assert!(!is_timing(path), "{path}");
    }
}

/// A level file's `samples` are its completed requests' own values, as
/// `requests.jsonl` has them (both at the microsecond), and its histograms
/// hold the same number of values: what `tokbench merge` relies on to be
/// exact. Key order stays sorted, as every other key of the file.
#[test]
fn level_files_carry_their_requests_samples_and_histograms() {
    let dir = seeded_run("samples");
    let lines = request_lines(&dir);
    for (index, name) in LEVEL_FILES.iter().enumerate() {
        let text = std::fs::read_to_string(dir.join(name)).expect("level file");
        let level: Value = serde_json::from_str(&text).expect("json");
        let mut want: Vec<f64> = lines
            .iter()
            .filter(|l| l["level"] == index as u64 && l["error"].is_null())
            .filter(|l| l["transition"] != true)
            .filter_map(|l| l["ttft_ms"].as_f64())
            .collect();
        let mut got: Vec<f64> = level["samples"]["ttft_ms"]
            .as_array()
            .expect("ttft samples")
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        want.sort_by(f64::total_cmp);
        got.sort_by(f64::total_cmp);
        assert!(!got.is_empty(), "{name}");
        assert_eq!(got, want, "{name}: samples are the requests' TTFTs");
        assert_eq!(
            level["completed"].as_u64(),
            Some(got.len() as u64),
            "{name}"
        );
        assert!(
            level["samples"].get("itl_ms").is_none(),
            "ITL is never listed"
        );
        for key in ["ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "ttfb_ms"] {
            let h = level["histograms"][key].as_str().unwrap_or_default();
            assert!(h.len() > 8, "{name}: histogram {key}");
        }
        let keys: Vec<&String> = level.as_object().expect("object").keys().collect();
        let at = |k: &str| text.find(&format!("\n  \"{k}\":")).expect(k);
        assert!(
            at("rx_clock") < at("samples") && at("samples") < at("schema_version"),
            "{keys:?}"
        );
    }
}

/// A python whose jsonschema imports `with` too (`referencing`), or one
/// whose jsonschema lacks it (`without`).
fn python_where(module: &str, present: bool) -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        let has = |code: &str| {
            Command::new(python)
                .args(["-c", code])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        has("import jsonschema") && has(&format!("import {module}")) == present
    })
}

/// The validation commands docs/results.md shows, run as shown (from the
/// source folder, `RUN` a result folder) on the files of a real run: each
/// passes, and each fails on a copy whose first level says `"completed":
/// "x"`, so the level schema was reached through summary.json's `$ref`.
/// Read from the page, so the page cannot drift from what works.
#[test]
fn the_documented_validation_commands_work_on_a_real_run() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results.md"))
            .expect("docs/results.md");
    let block = page
        .split("```sh\n")
        .filter_map(|b| b.split("\n```").next())
        .find(|b| b.contains("check-jsonschema --base-uri"))
        .expect("docs/results.md shows the validation commands");
    let commands: Vec<&str> = block
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("RUN=") && !l.trim().is_empty())
        .collect();
    assert_eq!(commands.len(), 4, "{block}");

    let good = seeded_run("documented");
    let bad = scratch("schema", "documented-bad");
    for entry in std::fs::read_dir(&good).expect("run folder") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("a name");
        if name.to_string_lossy().ends_with(".json") {
            let mut value = read_json(&path);
            let level = if name == "summary.json" {
                &mut value["levels"][0]
            } else {
                &mut value
            };
            level["completed"] = Value::from("x");
            std::fs::write(bad.join(name), value.to_string()).expect("write");
        }
    }

    let mut ran = 0;
    for command in commands {
        let line = if let Some(rest) = command.strip_prefix("python3 ") {
            // The referencing line needs jsonschema 4.18+; the other is for
            // versions before it (Debian 12's), run where one is installed.
            let python = if command.contains("referencing") {
                python_where("referencing", true).unwrap_or_else(|| {
                    panic!("no python3 with jsonschema 4.18+ and referencing: pip install check-jsonschema brings both (.ci/run does)")
                })
            } else {
                match python_where("referencing", false) {
                    Some(python) => python,
                    None => continue,
                }
            };
            format!("{python} {rest}")
        } else {
            assert!(
                command.starts_with("check-jsonschema "),
                "an unexpected command: {command}"
            );
            let there = Command::new("check-jsonschema")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                there,
                "check-jsonschema is not installed: pip install check-jsonschema (.ci/run does)"
            );
            command.to_string()
        };
        for (dir, valid) in [(&good, true), (&bad, false)] {
            let out = Command::new("bash")
                .args(["-c", &line])
                .env("RUN", dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("bash runs");
            assert_eq!(
                out.status.success(),
                valid,
                "{line}\non {}: {}",
                dir.display(),
                text(&out)
            );
        }
        ran += 1;
    }
    assert!(ran >= 3, "the referencing line and check-jsonschema's ran");
}
