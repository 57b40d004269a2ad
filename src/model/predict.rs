//! Predictions from a fitted model: a table of levels for another knob,
//! other streams or other lengths, each with its expected error; the
//! extrapolation said, and refused past [`REFUSE_RATIO`]; the regimes the
//! model cannot see said instead of a number (docs/predict.md, "How far to
//! trust it").

use crate::analysis::decide::{decide_judged, CapacitySlo, Decision, Figures, LevelPoint};
use crate::record::Mode;

use super::schema::{Errors, Params, SeriesModel};
use super::virtual_run::{run_level, Outcome, Shape};

/// Beyond twice the fitted batch or length, a prediction says it
/// extrapolates and its expected error grows (see [`widen`]).
pub(crate) const EXTRAPOLATE_RATIO: f64 = 2.0;
/// At 8x the fitted batch or length or more, nothing is predicted.
pub(crate) const REFUSE_RATIO: f64 = 8.0;

/// The knobs that set the batch cap, per engine (`--set NAME=V`).
pub(crate) fn knobs(engine: &str) -> &'static [&'static str] {
    match engine {
        "llamacpp" => &["np", "parallel", "n-parallel"],
        "ollama" => &["np", "parallel", "num-parallel", "OLLAMA_NUM_PARALLEL"],
        // The simulator's own vLLM-like personality takes vLLM's knob.
        "vllm" | "tokbench-sim" => &["max-num-seqs", "max_num_seqs"],
        "sglang" => &["max-running-requests", "max_running_requests"],
        "tgi" => &["max-batch-size", "max_batch_size"],
        _ => &[],
    }
}

/// What to predict.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ask {
    pub concurrency: Vec<u32>,
    pub input_len: u64,
    pub output_len: u64,
    /// A new cap (`--set`), with the knob's name.
    pub set: Option<(String, u32)>,
}

/// One predicted level, or why there is none.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub concurrency: u32,
    pub outcome: Result<Outcome, String>,
    /// Expected error per figure, %: the fit's own, widened.
    pub expected_pct: Errors,
    /// Set when extrapolating: the ratio past the fitted range, in words.
    pub extrapolating: Option<String>,
}

/// The expected error at `ratio` past the fitted range: the fit's own
/// error up to twice the range, then times `1 + log2(ratio / 2)`: 2x
/// keeps it, 4x doubles it, 8x (refused) would be three times it.
pub(crate) fn widen(error_pct: f64, ratio: f64) -> f64 {
    if ratio <= EXTRAPOLATE_RATIO {
        error_pct
    } else {
        error_pct * (1.0 + (ratio / EXTRAPOLATE_RATIO).log2())
    }
}

fn beyond(asked: f64, fitted: f64) -> f64 {
    if asked <= 0.0 || fitted <= 0.0 {
        return 1.0;
    }
    (asked / fitted).max(fitted / asked)
}

/// The model with the asked knob in place; the error says why a setting
/// cannot be predicted at all.
pub(crate) fn with_setting(model: &SeriesModel, ask: &Ask) -> Result<Params, String> {
    let mut p = model.params.clone();
    let need = ask.input_len + ask.output_len;
    if let Some((name, v)) = &ask.set {
        if *v == 0 {
            return Err(format!("{name}=0 runs nothing: give a value of 1 or more"));
        }
        if model.warnings.iter().any(|w| w.contains("spilled")) && p.cap != Some(*v) {
            return Err(format!(
                "{name}={v} is not predicted: the run's model spilled to the CPU (size_vram < size), and another setting changes how much spills"
            ));
        }
        // The slots running now: the tune's knob, else the cap the run's
        // slots gave.
        if let (Some(ctx), Some(now)) = (p.slot_context_tokens, p.knob_value.or(p.cap)) {
            // llama.cpp splits one context among its slots.
            let per_slot = ctx.saturating_mul(u64::from(now)) / u64::from(*v);
            if per_slot < need {
                return Err(format!(
                    "{name}={v} does not fit: each slot would hold {per_slot} tokens of context, and a request needs {need} ({} in + {} out)",
                    ask.input_len, ask.output_len
                ));
            }
            p.slot_context_tokens = Some(per_slot);
        }
        p.cap = Some(*v);
        p.knob = Some(name.clone());
        p.knob_value = Some(*v);
    }
    if let Some(ctx) = p.slot_context_tokens.filter(|c| *c < need) {
        return Err(format!(
            "a request of {need} tokens does not fit a slot's context of {ctx} tokens"
        ));
    }
    if let Some(kv) = p.kv_tokens.filter(|kv| *kv < need) {
        return Err(format!(
            "a request of {need} tokens does not fit the KV cache of about {kv} tokens"
        ));
    }
    Ok(p)
}

/// Each asked level predicted, or refused with its reason.
pub(crate) fn rows(model: &SeriesModel, params: &Params, ask: &Ask) -> Vec<Row> {
    let length_ratio = beyond(ask.input_len as f64, model.range.input_len)
        .max(beyond(ask.output_len as f64, model.range.output_len));
    let preempted = model.warnings.iter().any(|w| w.contains("preempted"));
    ask.concurrency
        .iter()
        .map(|&c| {
            let batch = params.cap.map_or(c, |cap| cap.min(c));
            let batch_ratio = (f64::from(batch) / model.range.batch_max.max(1.0)).max(1.0);
            let ratio = batch_ratio.max(length_ratio);
            let e = &model.error_pct;
            let expected_pct = Errors {
                output_tok_s: widen(e.output_tok_s, ratio),
                ttft_p50_ms: widen(e.ttft_p50_ms, ratio),
                tpot_p50_ms: widen(e.tpot_p50_ms, ratio),
            };
            let what = if batch_ratio >= length_ratio {
                format!("{batch_ratio:.1}x the fitted batch of {:.0}", model.range.batch_max)
            } else {
                format!(
                    "{length_ratio:.1}x the fitted lengths {:.0}/{:.0}",
                    model.range.input_len, model.range.output_len
                )
            };
            let extrapolating = (ratio > EXTRAPOLATE_RATIO).then(|| format!("extrapolating: {what}"));
            let need = ask.input_len + ask.output_len;
            let kv_full = params
                .kv_tokens
                .is_some_and(|kv| u64::from(batch).saturating_mul(need) > kv);
            let outcome = if ratio >= REFUSE_RATIO {
                Err(format!("not predicted: {what}, 8x or more"))
            } else if kv_full && preempted {
                Err(format!(
                    "not predicted: {batch} running fill the KV cache (about {} tokens), and the run saw preemption",
                    params.kv_tokens.unwrap_or(0)
                ))
            } else {
                let shape = Shape {
                    concurrency: c,
                    requests: 10 * u64::from(c).max(2),
                    input_len: ask.input_len,
                    output_len: ask.output_len,
                    // As a sweep's level: its streams start together.
                            };
                run_level(params, &shape).ok_or_else(|| "not predicted: a request does not fit the KV cache".to_string())
            };
            Row {
                concurrency: c,
                outcome,
                expected_pct,
                extrapolating,
            }
        })
        .collect()
}

/// The predicted levels as the decision math sees them: knee and capacity
/// by the same rules as a measured sweep.
pub(crate) fn decide(rows: &[Row], slo: &CapacitySlo, slo_given: bool) -> Decision {
    let points: Vec<LevelPoint> = rows
        .iter()
        .filter_map(|r| {
            let o = r.outcome.as_ref().ok()?;
            Some(LevelPoint {
                concurrency: r.concurrency,
                kind: Mode::Planned,
                partial: false,
                figures: Figures {
                    output_throughput: o.output_tok_s,
                    per_stream_tok_s: o.output_tok_s / f64::from(r.concurrency.max(1)),
                    stream_decode_tok_s: (o.tpot_p50_ms > 0.0).then(|| 1000.0 / o.tpot_p50_ms),
                    p50_ttft_ms: Some(o.ttft_p50_ms),
                    p99_ttft_ms: Some(o.ttft_p99_ms),
                    p99_tpot_ms: Some(o.tpot_p99_ms),
                    error_rate: 0.0,
                },
            })
        })
        .collect();
    decide_judged(&points, slo, slo_given)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schema::{FitRange, SeriesModel};

    fn model() -> SeriesModel {
        SeriesModel {
            series: 0,
            series_label: None,
            engine: Some("llamacpp".into()),
            params: Params {
                step_ms: 4.0,
                step_ms_per_seq: 1.0,
                prefill_ms_per_token: 0.02,
                overhead_ms: 0.0,
                cap: Some(4),
                knob: Some("np".into()),
                knob_value: Some(4),
                kv_tokens: None,
                slot_context_tokens: Some(1024),
            },
            range: FitRange {
                concurrency_min: 1,
                concurrency_max: 8,
                batch_min: 1.0,
                batch_max: 4.0,
                input_len: 128.0,
                output_len: 64.0,
            },
            sources: vec![],
            warnings: vec![],
            levels: vec![],
            error_pct: Errors {
                output_tok_s: 3.0,
                ttft_p50_ms: 5.0,
                tpot_p50_ms: 2.0,
            },
        }
    }

    fn ask(set: Option<u32>, concurrency: Vec<u32>) -> Ask {
        Ask {
            concurrency,
            input_len: 128,
            output_len: 64,
            set: set.map(|v| ("np".to_string(), v)),
        }
    }

    /// 3% at 2x stays 3%; at 4x it is 3 x (1 + log2 2) = 6%.
    #[test]
    fn the_error_widens_past_twice_the_range() {
        assert_eq!(widen(3.0, 2.0), 3.0);
        assert!((widen(3.0, 4.0) - 6.0).abs() < 1e-12);
    }

    /// np=16 at 16 streams is 4x the fitted batch of 4: predicted, said
    /// extrapolating, error widened; np=32 at 32 streams is 8x: refused.
    /// The context of 1024 tokens at np=4 is 4096 in all: 128 a slot at
    /// np=32, under the 192 a request needs, so np=32 is refused first.
    #[test]
    fn extrapolation_is_said_and_refused_at_8x() {
        let m = model();
        let a = ask(Some(16), vec![16]);
        let p = with_setting(&m, &a).expect("fits: 256 a slot");
        let r = &rows(&m, &p, &a)[0];
        assert!(r.outcome.is_ok());
        assert!(
            r.extrapolating
                .as_deref()
                .is_some_and(|e| e.contains("4.0x the fitted batch")),
            "{r:?}"
        );
        assert!((r.expected_pct.output_tok_s - 6.0).abs() < 1e-9);
        let err = with_setting(&m, &ask(Some(32), vec![32])).expect_err("no room");
        assert!(err.contains("each slot would hold 128 tokens"), "{err}");
        let mut m = m;
        m.params.slot_context_tokens = None;
        let a = ask(Some(32), vec![32]);
        let p = with_setting(&m, &a).expect("no context known");
        let r = &rows(&m, &p, &a)[0];
        assert_eq!(
            r.outcome.as_ref().expect_err("refused"),
            "not predicted: 8.0x the fitted batch of 4, 8x or more"
        );
    }

    /// Fitted at np=4 with a cap seen, predicting np=2: the knee moves to
    /// 2 -> 4 streams, as the simulator's cap would put it.
    #[test]
    fn a_smaller_cap_moves_the_knee() {
        let m = model();
        let a = ask(Some(2), vec![1, 2, 4, 8]);
        let p = with_setting(&m, &a).expect("fits");
        let rows = rows(&m, &p, &a);
        let d = decide(&rows, &CapacitySlo::default(), false);
        let knee = d.knee.expect("a knee");
        assert_eq!((knee.from_concurrency, knee.to_concurrency), (2, 4));
    }
}
