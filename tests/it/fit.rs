//! A run fitted to the box it meets: the estimate said after the warmup and
//! held against the run's own duration, a budget kept with an answer, the
//! plan stopped past the knee; and a fast server's answer the same as with
//! fixed counts.

use serde_json::Value;
use tokbench::sim::{SimConfig, SimEngine};

use crate::support::{read_json, scratch_path, stderr, text, tokbench, Sim};

/// Where a saved level ended, in seconds of the run: its start plus its
/// duration (first dispatch to last completion).
fn level_end_s(level: &Value) -> f64 {
    level["started_at_s"].as_f64().unwrap_or(f64::NAN) + level["duration"].as_f64().unwrap_or(0.0)
}

fn concurrencies(summary: &Value) -> Vec<u64> {
    summary["levels"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|l| l["max_concurrency"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// The Ollama personality with one slot at 5 ms a token: 200 tok/s for one
/// stream, so a 1,024-token answer takes 5 s and levels 1 and 4 (3 and 8 + 3
/// requests once steady) about 72 s, which a 20 s budget cannot hold: the
/// answers are shortened, and the run ends inside the budget with a knee
/// at 1 -> 4 (one slot: no gain, TTFT a queue) and a capacity of 1.
#[test]
fn a_one_slot_box_is_fitted_to_its_budget_with_an_answer() {
    let sim = Sim::with(SimConfig {
        engine: SimEngine::Ollama,
        parallel: Some(1),
        step_ms: 5.0,
        step_ms_per_seq: 0.0,
        ..SimConfig::default()
    });
    let dir = scratch_path("fit", "one_slot");
    let out = tokbench([
        "sweep",
        "--base-url",
        &sim.url(),
        "--backend",
        "ollama-generate",
        "--no-tui",
        "--result-dir",
        dir.to_str().expect("utf-8 path"),
        "--budget",
        "20s",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("tokbench: "))
        .collect();
    let warm = lines
        .iter()
        .position(|l| l.starts_with("tokbench: warmup done"))
        .unwrap_or_else(|| panic!("no warmup line:\n{err}"));
    // The estimate is the very next thing said: before any level runs.
    let estimate = lines.get(warm + 1).copied().unwrap_or_default();
    assert!(
        estimate.starts_with("tokbench: this plan: about ")
            && estimate.contains("for levels 1 and 4")
            && estimate.contains("within the given budget of 20s"),
        "{err}"
    );
    assert!(err.contains("answers shortened to "), "{err}");
    assert!(
        err.contains("skipped 16, 32, 64, 128: past the knee at 1 -> 4"),
        "{err}"
    );

    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["run"]["budget_s"].as_f64(), Some(20.0));
    assert_eq!(summary["run"]["budget_default"].as_bool(), Some(false));
    assert_eq!(concurrencies(&summary), vec![1, 4], "{summary:#}");
    let fit = &summary["fit"];
    let used = fit["output_len"].as_u64().expect("answers shortened");
    assert_eq!(fit["output_len_asked"].as_u64(), Some(1024));
    assert!(used < 1024, "{fit}");
    // The shortened shape is the run's shape, in every file.
    assert_eq!(summary["run"]["output_len"].as_u64(), Some(used));
    let levels = summary["levels"].as_array().expect("levels");
    for level in levels {
        assert_eq!(level["output_len_target"].as_u64(), Some(used), "{level}");
        assert_eq!(level["end_reason"].as_str(), Some("steady"), "{level}");
        assert_eq!(level["partial"].as_bool(), Some(false), "{level}");
    }
    let skipped: Vec<(u64, &str)> = fit["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| {
            (
                s["concurrency"].as_u64().unwrap_or(0),
                s["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        vec![
            (16, "past knee"),
            (32, "past knee"),
            (64, "past knee"),
            (128, "past knee")
        ]
    );
    assert_eq!(
        summary["knee"]["from_concurrency"].as_u64(),
        Some(1),
        "{summary:#}"
    );
    assert_eq!(summary["knee"]["to_concurrency"].as_u64(), Some(4));
    assert_eq!(summary["capacity"]["concurrency"].as_u64(), Some(1));

    // Within the budget, on tokbench's own clock: the last level's end.
    let end = levels.iter().map(level_end_s).fold(0.0, f64::max);
    assert!(
        end <= 20.0 * 1.1,
        "the run ended at {end:.1} s of a 20 s budget"
    );
    // The first estimate against the levels' real time, on the same clock:
    // from the first level's start to the last one's end.
    let real = end - levels[0]["started_at_s"].as_f64().expect("start");
    let guessed = fit["estimate_s"].as_f64().expect("estimate_s");
    let off = (guessed - real).abs() / real;
    assert!(
        off <= 0.25,
        "estimate {guessed:.1} s against {real:.1} s real ({:.0}% off)",
        off * 100.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that batches (four sequences at once, then a queue) answers a
/// bare sweep the way it answers a sweep of fixed counts: the same capacity
/// and knee, in fewer requests, the level past the knee skipped.
#[test]
fn a_fast_server_gives_the_same_answer_fitted_as_with_fixed_counts() {
    let sim = Sim::with(SimConfig {
        step_ms: 5.0,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k: 10.0,
        max_num_seqs: 4,
        ..SimConfig::default()
    });
    let run = |name: &str, extra: &[&str]| -> Value {
        let dir = scratch_path("fit", name);
        let mut args = vec![
            "sweep".to_string(),
            "--base-url".into(),
            sim.url(),
            "--no-tui".into(),
            "--result-dir".into(),
            dir.to_string_lossy().into_owned(),
            "--concurrency".into(),
            "1,2,4,8,16".into(),
            "--random-input-len".into(),
            "32".into(),
            "--random-output-len".into(),
            "32".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = tokbench(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let summary = read_json(&dir.join("summary.json"));
        let _ = std::fs::remove_dir_all(&dir);
        summary
    };
    let fitted = run("fast_fitted", &[]);
    let fixed = run("fast_fixed", &["--prompts-per-stream", "10"]);
    let answer = |s: &Value| {
        (
            s["capacity"]["concurrency"].as_u64(),
            s["knee"]["from_concurrency"].as_u64(),
            s["knee"]["to_concurrency"].as_u64(),
        )
    };
    assert_eq!(answer(&fixed), (Some(4), Some(4), Some(8)), "{fixed:#}");
    assert_eq!(answer(&fitted), answer(&fixed), "{fitted:#}");
    assert_eq!(fitted["run"]["budget_default"].as_bool(), Some(true));
    assert_eq!(fixed["run"].get("budget_s"), None);
    assert_eq!(concurrencies(&fitted), vec![1, 2, 4, 8]);
    assert_eq!(concurrencies(&fixed), vec![1, 2, 4, 8, 16]);
    assert_eq!(
        fitted["fit"]["skipped"][0]["line"].as_str(),
        Some("skipped 16: past the knee at 4 -> 8")
    );
    // A fixed run names no end reason; a fitted one names each.
    let reasons = |s: &Value| -> Vec<Option<String>> {
        s["levels"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|l| l["end_reason"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(reasons(&fixed).iter().all(Option::is_none));
    assert!(
        reasons(&fitted)
            .iter()
            .all(|r| matches!(r.as_deref(), Some("steady" | "count"))),
        "{:?}",
        reasons(&fitted)
    );
}
