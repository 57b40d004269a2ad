//! `tune --predict` (docs/predict.md, "In a tune"): measure the grid's
//! first setting (two when one cannot fit the batch term), predict the
//! rest from the model fitted to it, and measure only the predicted best
//! and its neighbour in the grid; one more candidate where the measured
//! best disagrees with the prediction by more than the model's own error.
//! The recommendation is judged on measured settings only: a predicted
//! setting never enters the tune's section.

use color_eyre::eyre::{bail, Result};

use crate::cli::TuneArgs;
use crate::model::files::{fit_summary, predicted_levels, predicted_peak};
use crate::model::predict::{knobs, Ask};
use crate::model::schema::SeriesModel;
use crate::report::schema::{number, SummaryFile, TuneSection};
use crate::tune::grid::Setting;

use super::tune_plan::TunePlan;

/// A setting's predicted peak output tok/s and its expected error, %, or
/// why it was not predicted.
struct Prediction {
    label: String,
    value: u32,
    peak: Result<(f64, f64), String>,
    /// Its output tok/s at each level the first setting ran: the dashed
    /// curve on the tune's chart.
    curve: Vec<(u32, f64)>,
}

/// What `--predict` knows between settings.
pub(super) struct Predicting {
    knob: String,
    /// The whole grid, in its order (`plan.settings` is cut to what is
    /// measured).
    grid: Vec<Setting>,
    predictions: Vec<Prediction>,
    planned: bool,
    extra_done: bool,
}

fn is_cap_knob(name: &str) -> bool {
    ["llamacpp", "ollama", "vllm", "sglang", "tgi"]
        .iter()
        .any(|e| knobs(e).contains(&name))
}

/// `--predict` checked before any server starts: one listed knob that
/// sets the batch cap, whole values.
pub(super) fn check(args: &TuneArgs, plan: &TunePlan) -> Result<Option<Predicting>> {
    if !args.predict.predict {
        return Ok(None);
    }
    if plan.search.is_some() || args.grid.len() != 1 {
        bail!("--predict: give one --grid of listed values for one knob (np=1,2,4,8)");
    }
    let Some(knob) = plan
        .settings
        .first()
        .and_then(|s| s.values.first())
        .map(|(k, _)| k.clone())
    else {
        bail!("--predict: the grid has no setting");
    };
    if !is_cap_knob(&knob) {
        bail!(
            "--predict: {knob} is not a knob the model predicts; name the grid np (llama.cpp, Ollama), max-num-seqs (vLLM), max-running-requests (SGLang) or max-batch-size (TGI)"
        );
    }
    for s in &plan.settings {
        let v = s.values.first().map(|(_, v)| v.as_str()).unwrap_or("");
        if v.trim().parse::<u32>().is_err() {
            bail!("--predict: {knob}={v} is not a whole number");
        }
    }
    Ok(Some(Predicting {
        knob,
        grid: plan.settings.clone(),
        predictions: Vec::new(),
        planned: false,
        extra_done: false,
    }))
}

fn value_of(plan: &TunePlan, i: usize) -> Option<u32> {
    plan.settings.get(i)?.values.first()?.1.trim().parse().ok()
}

fn measured_peak(section: &TuneSection, label: &str) -> Option<f64> {
    section
        .settings
        .iter()
        .find(|s| s.label.as_deref() == Some(label) && s.status.as_deref() == Some("finished"))
        .and_then(|s| number(&s.peak))
}

/// After the setting `done - 1` was measured and judged: say its
/// prediction beside its measurement, and decide what is measured next
/// (`plan.settings` cut to the measured ones and the candidates).
pub(super) fn after_setting(
    plan: &mut TunePlan,
    done: usize,
    section: &TuneSection,
    p: &mut Predicting,
) {
    let dir = plan.dir.clone();
    let Some(last) = section.settings.last() else {
        return;
    };
    let label = last.label.clone().unwrap_or_default();
    if let (Some(pred), Some(peak)) = (
        p.predictions.iter().find(|x| x.label == label),
        measured_peak(section, &label),
    ) {
        if let Ok((predicted, error)) = pred.peak {
            crate::say!(
                "tokbench tune --predict: {label}: predicted peak {predicted:.1} tok/s ±{error:.0}%, measured {peak:.1} tok/s ({:+.1}%)",
                (predicted - peak) / peak * 100.0
            );
        }
    }
    let Some(summary) = std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<SummaryFile>(&t).ok())
    else {
        return;
    };
    let (file, _) = fit_summary(&summary);
    let model = last
        .series
        .and_then(|s| file.models.iter().find(|m| m.series == s));
    if !p.planned {
        let Some(model) = model else {
            crate::say!("tokbench tune --predict: {label} could not be fitted: the next setting is measured too");
            return;
        };
        let unfitted = model.warnings.iter().any(|w| w.contains("not fitted"));
        if unfitted && done == 1 && plan.settings.len() > 1 {
            crate::say!(
                "tokbench tune --predict: {label}: every level ran the same batch, so the batch term is not fitted: the next setting is measured too"
            );
            return;
        }
        crate::say!(
            "tokbench tune --predict: {label} measured: the model's own error tok/s ±{:.1}%",
            model.error_pct.output_tok_s
        );
        plan_from(plan, done, section, model, p);
        return;
    }
    if done >= plan.settings.len() && !p.extra_done {
        p.extra_done = true;
        next_if_disagreeing(plan, section, p);
    }
}

/// Predict every setting not measured, print each, and keep the predicted
/// best and its grid neighbour to measure.
fn plan_from(
    plan: &mut TunePlan,
    done: usize,
    section: &TuneSection,
    model: &SeriesModel,
    p: &mut Predicting,
) {
    let concurrency: Vec<u32> = model.levels.iter().map(|l| l.concurrency).collect();
    let measured: Vec<String> = section
        .settings
        .iter()
        .filter_map(|s| s.label.clone())
        .collect();
    for (i, s) in plan.settings.iter().enumerate() {
        let label = s.label();
        if measured.contains(&label) {
            continue;
        }
        let Some(value) = value_of(plan, i) else {
            continue;
        };
        let ask = Ask {
            concurrency: concurrency.clone(),
            input_len: model.range.input_len.round() as u64,
            output_len: model.range.output_len.round() as u64,
            set: Some((p.knob.clone(), value)),
        };
        let peak = predicted_peak(model, &ask);
        let curve = predicted_levels(model, &ask)
            .map(|levels| levels.into_iter().map(|(c, t, _)| (c, t)).collect())
            .unwrap_or_default();
        match &peak {
            Ok((tok_s, e)) => crate::say!("tokbench tune --predict: {label}: predicted peak {tok_s:.1} tok/s ±{e:.0}% (not measured yet)"),
            Err(why) => crate::say!("tokbench tune --predict: {label}: {why}"),
        }
        p.predictions.push(Prediction {
            label,
            value,
            peak,
            curve,
        });
    }
    let best = best_unmeasured(p, &measured);
    let Some(best) = best else {
        plan.settings.truncate(done);
        return;
    };
    let index = plan.settings.iter().position(|s| s.label() == best);
    let mut keep: Vec<usize> = (0..done).collect();
    if let Some(b) = index {
        keep.push(b);
        let up = b + 1;
        let neighbour = [Some(up), b.checked_sub(1)]
            .into_iter()
            .flatten()
            .find(|n| {
                *n < plan.settings.len()
                    && !measured.contains(&plan.settings[*n].label())
                    && *n != b
            });
        keep.extend(neighbour);
    }
    let all = std::mem::take(&mut plan.settings);
    plan.settings = keep.iter().filter_map(|i| all.get(*i).cloned()).collect();
    let next: Vec<String> = plan.settings[done..].iter().map(|s| s.label()).collect();
    crate::say!(
        "tokbench tune --predict: measuring the predicted best and its neighbour: {}",
        next.join(", ")
    );
    p.planned = true;
}

impl Predicting {
    /// Each predicted setting's curve with its label, for the chart; the
    /// settings measured since keep theirs, beside their measured line.
    pub(super) fn curves(&self) -> Vec<(String, Vec<(u32, f64)>)> {
        self.predictions
            .iter()
            .filter(|p| p.curve.len() >= 2)
            .map(|p| (p.label.clone(), p.curve.clone()))
            .collect()
    }
}

/// The highest predicted peak among the settings not measured.
fn best_unmeasured(p: &Predicting, measured: &[String]) -> Option<String> {
    p.predictions
        .iter()
        .filter(|x| !measured.contains(&x.label))
        .filter_map(|x| {
            x.peak
                .as_ref()
                .ok()
                .map(|(t, _)| (x.label.clone(), *t, x.value))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.2.cmp(&a.2)))
        .map(|(l, ..)| l)
}

/// The measured best against the prediction: where the setting measured
/// best is not the one predicted best, and beats it by more than the
/// model's own error there, the prediction picked wrong: the next
/// predicted candidate is measured too.
fn next_if_disagreeing(plan: &mut TunePlan, section: &TuneSection, p: &Predicting) {
    let measured: Vec<String> = section
        .settings
        .iter()
        .filter_map(|s| s.label.clone())
        .collect();
    let predicted_best = p
        .predictions
        .iter()
        .filter(|x| measured.contains(&x.label))
        .filter_map(|x| x.peak.as_ref().ok().map(|(t, e)| (x.label.clone(), *t, *e)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let measured_best = measured
        .iter()
        .filter_map(|l| Some((l.clone(), measured_peak(section, l)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let (Some((pb, _, error)), Some((mb, mb_peak))) = (predicted_best, measured_best) else {
        return;
    };
    let Some(pb_peak) = measured_peak(section, &pb) else {
        return;
    };
    let off = (mb_peak - pb_peak) / pb_peak * 100.0;
    if mb == pb || off <= error {
        return;
    }
    let Some(next) = best_unmeasured(p, &measured) else {
        return;
    };
    crate::say!(
        "tokbench tune --predict: {mb} measured {off:.0}% above {pb}, the predicted best (more than its ±{error:.0}%): measuring {next} too"
    );
    if let Some(s) = p.grid.iter().find(|s| s.label() == next) {
        plan.settings.push(s.clone());
    }
}
