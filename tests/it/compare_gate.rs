//! `tokbench compare --fail-on-regression`, end to end on runs of the
//! simulator.
//!
//! The simulator decodes one sequence at a time (`max_num_seqs` 1), so no
//! request races another into a step (docs/architecture.md section 5,
//! "Simulator timing"): a step is `step_ms`, and the step that admits a
//! request also pays its prefill, 2000 ms per 1k prompt tokens (64 tokens:
//! 128 ms). With 10 ms steps a request of 32 tokens at 1 stream has TTFT
//! 10 + 128 = 138 ms, then 31 steps: E2EL 448 ms, TPOT 10 ms, 32 / 0.448 =
//! 71.4 tok/s. At 2 streams the server still runs one answer at a time: the
//! same tok/s and TPOT, TTFT one whole request more.
//!
//! The server 20% slower (12 ms steps): TTFT 140 ms (+1.4%), E2EL 140 +
//! 372 = 512 ms, TPOT 12 ms (+20%), 62.5 tok/s (-12.5%); cost per million
//! output tokens at capacity rises as tok/s falls (+14.3%). A p99 over 4
//! requests is nearly their slowest: a client stall in one request of the
//! baseline raises its p99 TPOT by the stall / 31, and it takes one of 44
//! ms (12 / 1.05 = 11.43 ms, 1.43 ms a gap) to bring the slower run's TPOT
//! within 5%; its tok/s, 8% under the baseline's less 5%, takes 140 ms of
//! stalls in a level of 1.8 s.
//! p99 TTFT at 1 stream is not asserted: with one round a 25 ms stall in
//! the baseline (seen under a load average of 10) made it an improvement.
//!
//! The same server twice, three rounds each: the client's jitter is the
//! only difference. On a loaded 2-core machine a client thread waits for a
//! core for up to about 10 ms (the p99 TTFT of one round was seen 10 ms
//! over its fellows'), most in TTFT at 1 stream; for a regression every
//! round of the second run would have to be past the first run's slowest
//! round by the threshold (10% here: 14 ms at 1 stream, 31 ms over a
//! request's 31 gaps for TPOT), and for an improvement under its fastest
//! less 10%, below the simulator's own floor. The simulator's prefix cache
//! is off: the same seed sends the same prompts, whose prefill a cache
//! would skip the second time (a real vLLM's too).

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokbench::compare::gate::{Figure, Verdict, Why};
use tokbench::compare::verdict::CompareVerdict;
use tokbench::sim::SimConfig;

use crate::support::{python_with_jsonschema, scratch, stdout, text, tokbench, Sim};

fn config(step_ms: f64) -> SimConfig {
    SimConfig {
        step_ms,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k: 2000.0,
        max_num_seqs: 1,
        // No prefix cache: the second run of the same prompts (one seed)
        // would skip their prefill.
        prefix_block_tokens: 0,
        ..SimConfig::default()
    }
}

/// A sweep of 1 and 2 streams, 4 requests each, `rounds` times, into `dir`.
fn sweep(sim: &Sim, dir: &Path, rounds: u32, output_len: u32) -> PathBuf {
    let out = tokbench([
        "sweep",
        "--base-url",
        &sim.url(),
        "--no-tui",
        "--seed",
        "5",
        "--warmup",
        "1",
        "--concurrency",
        "1,2",
        "--num-prompts",
        "4",
        "--rounds",
        &rounds.to_string(),
        "--random-input-len",
        "64",
        "--random-output-len",
        &output_len.to_string(),
        "--gpu-price-per-hour",
        "2",
        "--result-dir",
        &dir.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "sweep failed: {}", text(&out));
    dir.to_path_buf()
}

fn compare(args: &[&Path], extra: &[&str]) -> std::process::Output {
    let mut all: Vec<String> = vec!["compare".into()];
    all.extend(args.iter().map(|p| p.display().to_string()));
    all.extend(extra.iter().map(|s| s.to_string()));
    tokbench(all)
}

/// A slower server fails the gate, naming tok/s and TPOT; the Markdown and
/// JSON say the same; runs of another shape are refused, and judged under
/// `--force` with the verdict saying so.
#[test]
fn a_slower_server_fails_the_gate() {
    let root = scratch("compare-gate", "slower");
    let base = {
        let sim = Sim::with(config(10.0));
        sweep(&sim, &root.join("base"), 1, 32)
    };
    let (slow, short) = {
        let sim = Sim::with(config(12.0));
        (
            sweep(&sim, &root.join("slow"), 1, 32),
            sweep(&sim, &root.join("short"), 1, 8),
        )
    };

    // Without the gate: today's tables, exit 0, no verdict.
    let out = compare(&[&base, &slow], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!stdout(&out).contains("regression gate"), "{}", text(&out));

    let out = compare(&[&base, &slow], &["--fail-on-regression"]);
    assert_eq!(out.status.code(), Some(99), "{}", text(&out));
    let said = stdout(&out);
    assert!(
        said.starts_with("tokbench compare: in 64 / out 32"),
        "{said}"
    );
    for figure in ["output tok/s", "p99 TPOT ms"] {
        for streams in ["1 stream:", "2 streams:"] {
            assert!(
                said.lines()
                    .any(|l| l.trim_start().starts_with("regression: ")
                        && l.contains(&format!("{figure} at {streams}"))
                        && l.ends_with(", beyond 5%")),
                "no regression of {figure} at {streams}\n{said}"
            );
        }
    }
    assert!(
        said.lines()
            .any(|l| l.contains("regression: cost per M output tokens: $")),
        "{said}"
    );
    assert!(said.contains("\ngate: FAIL: "), "{said}");

    // The JSON: the typed verdict, and the figures worked out above.
    let out = compare(
        &[&base, &slow],
        &["--fail-on-regression", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(99), "{}", text(&out));
    let json = stdout(&out);
    let v: CompareVerdict = serde_json::from_str(&json).expect("the typed verdict");
    assert_eq!(
        (v.gated, v.passed, v.threshold_pct),
        (true, Some(false), 5.0)
    );
    let tpot = |c: u32| {
        v.figures
            .iter()
            .find(|f| f.figure == Figure::TpotP99Ms && f.concurrency == Some(c))
            .unwrap_or_else(|| panic!("TPOT at {c}: {json}"))
    };
    for c in [1, 2] {
        let f = tpot(c);
        assert_eq!((f.verdict, f.why), (Verdict::Regression, Why::BeyondPct));
        // 10 -> 12 ms: +20%; a stall in the client moves its view of it.
        let change = f.change_pct.expect("a change");
        assert!((10.0..30.0).contains(&change), "TPOT +{change}%: {json}");
    }
    let tok = v
        .figures
        .iter()
        .find(|f| f.figure == Figure::OutputTokS && f.concurrency == Some(1))
        .expect("tok/s at 1");
    let change = tok.change_pct.expect("a change");
    assert!((-25.0..-8.0).contains(&change), "tok/s {change}%: {json}");
    assert_eq!(
        v.regressions,
        v.figures
            .iter()
            .filter(|f| f.verdict == Verdict::Regression)
            .count()
    );
    validate(&json);

    // The Markdown: a pass/fail header and one table row per figure. (The
    // baseline's TPOT is 10 ms give or take the client: 9.99 was seen.)
    let out = compare(
        &[&base, &slow],
        &["--fail-on-regression", "--format", "markdown"],
    );
    assert_eq!(out.status.code(), Some(99), "{}", text(&out));
    let md = stdout(&out);
    assert!(md.starts_with("### tokbench compare: FAIL: "), "{md}");
    assert!(
        md.contains("| figure | level | baseline | new | change | verdict |\n|---|---|---:|---:|---:|---|\n"),
        "{md}"
    );
    let rows = md
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| figure"))
        .count();
    assert_eq!(rows, v.figures.len(), "{md}");
    assert!(
        md.lines()
            .any(|l| l.starts_with("| p99 TPOT ms | 2 streams | ")
                && l.contains("| **regression**: beyond 5% |")),
        "{md}"
    );

    // Another output length: refused, exit 2, unless --force.
    let out = compare(&[&base, &short], &["--fail-on-regression"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stdout(&out).is_empty(), "{}", text(&out));
    let out = compare(&[&base, &short], &["--fail-on-regression", "--force"]);
    let said = stdout(&out);
    assert!(
        said.contains("\n  note: this verdict compares unlike runs (--force): B ("),
        "{said}"
    );
    let out = compare(
        &[&base, &short],
        &["--fail-on-regression", "--force", "--format", "json"],
    );
    let v: CompareVerdict = serde_json::from_str(&stdout(&out)).expect("the typed verdict");
    assert!(
        v.unlike_shapes
            .as_deref()
            .is_some_and(|u| u.contains("out 8")),
        "{v:?}"
    );
    let out = compare(
        &[&base, &short],
        &["--fail-on-regression", "--force", "--format", "md"],
    );
    assert!(
        stdout(&out).contains("**This verdict compares unlike runs** (`--force`): B ("),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The same server twice, three rounds each: within the noise, exit 0.
#[test]
fn the_same_server_twice_is_within_noise() {
    let root = scratch("compare-gate", "same");
    let (a, b) = {
        let sim = Sim::with(config(10.0));
        (
            sweep(&sim, &root.join("a"), 3, 32),
            sweep(&sim, &root.join("b"), 3, 32),
        )
    };
    let out = compare(&[&a, &b], &["--fail-on-regression", "10"]);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!said.contains("regression: "), "{said}");
    assert!(
        // Nor better: the second run is the same server, not a faster one.
        said.contains("\ngate: pass: 0 worse beyond the noise, 0 better, 8 within noise\n"),
        "{said}"
    );
    // Every level figure was judged over three rounds a run, and says so.
    let out = compare(&[&a, &b], &["--fail-on-regression=10", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: CompareVerdict = serde_json::from_str(&stdout(&out)).expect("the typed verdict");
    let at_levels: Vec<_> = v
        .figures
        .iter()
        .filter(|f| f.concurrency.is_some())
        .collect();
    assert_eq!(at_levels.len(), 6, "3 figures at 2 levels: {v:?}");
    for f in at_levels {
        assert_eq!(
            (f.baseline_rounds.rounds, f.new_rounds.rounds),
            (3, 3),
            "{f:?}"
        );
        assert!(f.reason.contains("over 3 rounds"), "{f:?}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The JSON against assets/schema/compare.schema.json, with no key the
/// schema does not name.
fn validate(json: &str) {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/schema/compare.schema.json");
    let script = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
obj = json.loads(sys.stdin.read())
errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
          for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]
print("\n".join(errors))
sys.exit(1 if errors else 0)
"#;
    let mut child = std::process::Command::new(python_with_jsonschema("compare --format json"))
        .args(["-c", script])
        .arg(&schema)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(json.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python ends");
    assert!(out.status.success(), "schema: {}\n{json}", text(&out));
    let _: Value = serde_json::from_str(json).expect("json");
}
