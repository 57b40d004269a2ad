//! `tokbench predict` against the simulator (docs/predict.md): a model
//! fitted to one measured setting predicts another, which is then
//! measured. Personalities with different physics, the simulator's noise
//! on: the predicted peak within 10% of the measured one and the knee at
//! the same level; longer prompts and answers within 15% (throughput) and
//! 25% (p50 TTFT). Short levels and fast steps keep each run to seconds.

use std::path::Path;

use serde_json::Value;
use tokbench::sim::{SimConfig, SimEngine};

use crate::support::{read_json, scratch, stdout, text, tokbench, Sim};

fn noisy(engine: SimEngine) -> SimConfig {
    SimConfig {
        engine,
        noise: 0.05,
        noise_period_ms: 200.0,
        ..SimConfig::default()
    }
}

/// One sweep against `sim`, saved in `dir`.
fn sweep(sim: &Sim, dir: &Path, levels: &str, lens: (u32, u32), extra: &[&str]) {
    let mut args: Vec<String> = [
        "sweep",
        "--base-url",
        &sim.url(),
        "--concurrency",
        levels,
        "--random-input-len",
        &lens.0.to_string(),
        "--random-output-len",
        &lens.1.to_string(),
        "--prompts-per-stream",
        "4",
        "--warmup",
        "1",
        "--seed",
        "3",
        "--no-tui",
        "--result-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(dir.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = tokbench(&args);
    assert!(out.status.success(), "sweep: {}", text(&out));
}

/// The measured peak output tok/s, the knee's first level, and p50 TTFT
/// by concurrency.
fn measured(dir: &Path) -> (f64, Option<u64>, Vec<(u64, f64)>) {
    let summary = read_json(&dir.join("summary.json"));
    let levels = summary["levels"].as_array().expect("levels");
    let peak = levels
        .iter()
        .filter_map(|l| l["output_throughput"].as_f64())
        .fold(0.0, f64::max);
    let ttft = levels
        .iter()
        .filter_map(|l| {
            Some((
                l["max_concurrency"].as_u64()?,
                l["median_ttft_ms"].as_f64()?,
            ))
        })
        .collect();
    (peak, summary["knee"]["from_concurrency"].as_u64(), ttft)
}

/// A predicted table's rows: (streams, tok/s, TTFT p50), and the knee's
/// first level.
struct Predicted {
    rows: Vec<(u64, f64, f64)>,
    knee: Option<u64>,
    text: String,
}

impl Predicted {
    fn peak(&self) -> f64 {
        self.rows.iter().map(|r| r.1).fold(0.0, f64::max)
    }
}

fn predict(dir: &Path, extra: &[&str]) -> Predicted {
    let mut args = vec!["predict".to_string(), dir.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = tokbench(&args);
    assert!(out.status.success(), "predict: {}", text(&out));
    let printed = stdout(&out);
    // A prediction never says it measured what it predicted.
    for line in printed.lines().filter(|l| {
        ["predicted knee:", "predicted capacity:", "predicted cost:"]
            .iter()
            .any(|p| l.starts_with(p))
    }) {
        assert!(!line.contains("measured"), "{line}");
    }
    let rows = printed
        .lines()
        .filter(|l| l.contains("  predicted"))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| w.get(i)?.parse::<f64>().ok();
            Some((num(0)? as u64, num(1)?, num(3)?))
        })
        .collect();
    let knee = printed
        .lines()
        .find_map(|l| l.strip_prefix("predicted knee: "))
        .and_then(|k| k.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    Predicted {
        rows,
        knee,
        text: printed,
    }
}

fn within(predicted: f64, measured: f64, share: f64) -> bool {
    (predicted - measured).abs() <= share * measured
}

/// Fitted at one knob, the other predicted, then measured: peak within
/// 10%, knee at the same level.
fn knob_case(engine: SimEngine, fit: SimConfig, other: SimConfig, set: &str, extra: &[&str]) {
    let name = format!("{engine:?}").to_lowercase();
    let (a, b) = (
        scratch("predict", &format!("{name}-fit")),
        scratch("predict", &format!("{name}-other")),
    );
    let levels = "1,2,4,8";
    {
        let sim = Sim::with(fit);
        sweep(&sim, &a, levels, (128, 64), extra);
    }
    let model = read_json(&a.join("model.json"));
    assert_eq!(model["version"], 1, "{model}");
    predicted_line_is_drawn(&a);
    let p = predict(&a, &["--set", set, "--concurrency", levels]);
    // A setting that runs more at once than the fit saw says the batch's
    // cost is extrapolated; one that runs fewer says nothing of it.
    let fitted_batch = model["models"][0]["range"]["batch_max"]
        .as_f64()
        .expect("batch_max");
    let asked: f64 = set
        .rsplit('=')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a number");
    assert_eq!(
        p.text
            .contains("how the step grows with the batch is extrapolated"),
        asked > fitted_batch + 0.5,
        "{name} {set} (fitted at a batch of {fitted_batch}):\n{}",
        p.text
    );
    {
        let sim = Sim::with(other);
        sweep(&sim, &b, levels, (128, 64), extra);
    }
    let (peak, knee, _) = measured(&b);
    assert!(
        within(p.peak(), peak, 0.10),
        "{name} {set}: predicted peak {:.1} against measured {peak:.1}\n{}",
        p.peak(),
        p.text
    );
    assert_eq!(p.knee, knee, "{name} {set}: the knee\n{}", p.text);
    println!(
        "{name} {set}: peak predicted {:.1}, measured {peak:.1} ({:+.1}%); knee predicted {:?}, measured {knee:?}",
        p.peak(),
        (p.peak() - peak) / peak * 100.0,
        p.knee
    );
}

/// The run's chart draws the model's line dashed and labelled predicted,
/// beside the measured one; without a model.json, no such line.
fn predicted_line_is_drawn(dir: &Path) {
    let chart = std::fs::read_to_string(dir.join("chart.svg")).expect("chart.svg");
    let group = chart
        .split(r#"<g id="predicted""#)
        .nth(1)
        .and_then(|g| g.split("</g>").next())
        .unwrap_or_else(|| panic!("no predicted line in {chart}"));
    assert!(
        group.contains("stroke-dasharray") && group.contains(">predicted</text>"),
        "{group}"
    );
    let copy = scratch("predict", "no-model");
    std::fs::copy(dir.join("summary.json"), copy.join("summary.json")).expect("copy");
    let out = tokbench(["report", &copy.display().to_string(), "--format", "svg"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!stdout(&out).contains(r#"id="predicted""#));
}

#[test]
fn llamacpp_slots_fitted_at_two_predict_four() {
    let base = SimConfig {
        step_ms: 4.0,
        step_ms_per_seq: 1.5,
        prefill_ms_per_1k: 20.0,
        ..noisy(SimEngine::Llamacpp)
    };
    knob_case(
        SimEngine::Llamacpp,
        SimConfig {
            parallel: Some(2),
            ..base.clone()
        },
        SimConfig {
            parallel: Some(4),
            ..base
        },
        "np=4",
        &[],
    );
}

#[test]
fn vllm_batch_cap_fitted_at_four_predicts_two() {
    let base = SimConfig {
        step_ms: 3.0,
        step_ms_per_seq: 0.8,
        prefill_ms_per_1k: 30.0,
        kv_tokens: 2000,
        ..noisy(SimEngine::Vllm)
    };
    knob_case(
        SimEngine::Vllm,
        SimConfig {
            max_num_seqs: 4,
            ..base.clone()
        },
        SimConfig {
            max_num_seqs: 2,
            ..base
        },
        "max-num-seqs=2",
        &[],
    );
}

#[test]
fn ollama_with_a_load_fitted_at_two_predicts_one() {
    let base = SimConfig {
        step_ms: 5.0,
        step_ms_per_seq: 1.0,
        prefill_ms_per_1k: 15.0,
        load_ms: 300.0,
        ..noisy(SimEngine::Ollama)
    };
    knob_case(
        SimEngine::Ollama,
        SimConfig {
            parallel: Some(2),
            ..base.clone()
        },
        SimConfig {
            parallel: Some(1),
            ..base
        },
        "np=1",
        &["--backend", "ollama-generate"],
    );
}

/// Fitted at 128/64, predicted at 512/256, on a vLLM-like server whose
/// KV cache (2000 tokens) holds four of the short requests but only two
/// of the long ones: throughput within 15% at every level, p50 TTFT
/// within 25% at one stream and where the KV cache queues them. At two
/// streams TTFT depends on whether the streams stay in step (prefilling
/// together) or drift one step apart, a coin the level's resends toss:
/// measured 28 and 34 ms in two runs; the model holds them in step. It
/// is printed, not judged.
#[test]
fn longer_requests_are_predicted_within_15_percent() {
    let config = SimConfig {
        step_ms: 3.0,
        step_ms_per_seq: 0.8,
        prefill_ms_per_1k: 30.0,
        max_num_seqs: 4,
        kv_tokens: 2000,
        ..noisy(SimEngine::Vllm)
    };
    let (a, b) = (
        scratch("predict", "len-fit"),
        scratch("predict", "len-long"),
    );
    let sim = Sim::with(config);
    sweep(&sim, &a, "1,2,4", (128, 64), &[]);
    let p = predict(
        &a,
        &["--random-input-len", "512", "--random-output-len", "256"],
    );
    assert!(
        p.text
            .contains("extrapolating: 4.0x the fitted lengths 128/64"),
        "{}",
        p.text
    );
    sweep(&sim, &b, "1,2,4", (512, 256), &[]);
    let summary = read_json(&b.join("summary.json"));
    for level in summary["levels"].as_array().expect("levels") {
        let c = level["max_concurrency"].as_u64().expect("c");
        let tok_s = level["output_throughput"].as_f64().expect("tok/s");
        let ttft = level["median_ttft_ms"].as_f64().expect("ttft");
        let row = p.rows.iter().find(|r| r.0 == c).expect("a predicted row");
        println!("len {c}: tok/s predicted {:.1} measured {tok_s:.1}; TTFT p50 predicted {:.1} measured {ttft:.1}", row.1, row.2);
        assert!(
            within(row.1, tok_s, 0.15),
            "{c} streams: tok/s {} against {tok_s}\n{}",
            row.1,
            p.text
        );
        assert!(
            c == 2 || within(row.2, ttft, 0.25),
            "{c} streams: TTFT {} against {ttft}\n{}",
            row.2,
            p.text
        );
    }
}

/// The refusals, each one line: too few levels, an unknown knob, a model
/// of another version, 8x the fitted batch.
#[test]
fn refusals_are_one_line() {
    let dir = scratch("predict", "refusals");
    let sim = Sim::with(SimConfig {
        step_ms: 2.0,
        ..noisy(SimEngine::Llamacpp)
    });
    sweep(&sim, &dir, "1", (32, 16), &[]);
    let out = tokbench(["predict", &dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = crate::support::stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("nothing can be fitted: 1 finished level"),
        "{err}"
    );

    let dir = scratch("predict", "refusals-2");
    sweep(&sim, &dir, "1,2", (32, 16), &[]);
    let d = dir.display().to_string();
    let out = tokbench(["predict", &d, "--set", "max-num-seqs=8"]);
    let err = crate::support::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(err.trim(), "tokbench predict: --set max-num-seqs: not a knob tokbench knows for llamacpp; it knows np, parallel, n-parallel");
    // Fitted at batches up to 2 (the default 4 slots, 2 streams): 16 is 8x.
    let p = predict(&dir, &["--set", "np=16", "--concurrency", "16"]);
    assert!(p.rows.is_empty(), "{}", p.text);
    assert!(
        p.text
            .contains("16  not predicted: 8.0x the fitted batch of 2, 8x or more"),
        "{}",
        p.text
    );
    let path = dir.join("model.json");
    let mut model: Value = read_json(&path);
    model["version"] = Value::from(2);
    std::fs::write(&path, model.to_string()).expect("write");
    let out = tokbench(["predict", &d]);
    let err = crate::support::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        err.contains("is model version 2; this tokbench reads version 1"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

/// llama.cpp splits one context among its slots. A sweep at `-np 2` whose
/// slots hold 1024 tokens each (the probe reads `/slots`' `n_ctx`): at
/// `np=8` each would hold 1024 x 2 / 8 = 256, short of a request's 256 +
/// 64 (plus the chat template): said, not predicted. At `np=4`, 512 fits.
#[test]
fn a_slot_count_whose_context_no_longer_fits_is_said() {
    let dir = scratch("predict", "context");
    let sim = Sim::with(SimConfig {
        step_ms: 2.0,
        parallel: Some(2),
        kv_tokens: 1024,
        ..noisy(SimEngine::Llamacpp)
    });
    sweep(&sim, &dir, "1,2", (256, 64), &[]);
    let d = dir.display().to_string();
    let out = tokbench(["predict", &d, "--set", "np=8"]);
    let err = crate::support::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("np=8 does not fit: each slot would hold 256 tokens of context"),
        "{err}"
    );
    let p = predict(&dir, &["--set", "np=4"]);
    assert!(!p.rows.is_empty(), "{}", p.text);
}
