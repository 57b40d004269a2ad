//! `model.json`: the one definition of the fitted server model's file
//! (docs/predict.md, `assets/schema/model.schema.json`). The writer after a
//! sweep or a tune setting (`model::files`), `tokbench predict` and the
//! chart's predicted line (`report::svg`) all go through it; `model`
//! names it `model::schema`. It lives with the other result files so the
//! report can read it without importing the model.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The version this tokbench writes. A file of another version is read
/// only when [`compatible`] says so.
pub(crate) const MODEL_VERSION: u32 = 1;

/// Whether a file of `version` can be read by this tokbench: the same
/// version only (there is one so far).
pub(crate) fn compatible(version: u32) -> bool {
    version == MODEL_VERSION
}

/// The whole file: one model per series that could be fitted (a sweep
/// has one series; a tune one per setting).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelFile {
    pub version: u32,
    pub tokbench_version: String,
    pub models: Vec<SeriesModel>,
}

/// The model of one series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SeriesModel {
    /// The series it was fitted on (0 first) and its label.
    pub series: u64,
    pub series_label: Option<String>,
    pub engine: Option<String>,
    pub params: Params,
    /// The range it was fitted on: predictions beyond twice it say so.
    pub range: FitRange,
    /// Where each parameter came from, in words.
    pub sources: Vec<String>,
    /// Regimes the run's own figures showed that the model does not hold.
    pub warnings: Vec<String>,
    /// The fit's own error on each measured level.
    pub levels: Vec<LevelCheck>,
    /// The typical error per figure over the measured levels, %.
    pub error_pct: Errors,
}

/// The fitted physics, in the simulator's own terms (docs/architecture.md
/// section 5, "Simulator timing").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Params {
    /// Decode step time at an empty batch, ms.
    pub step_ms: f64,
    /// Added step time per running sequence, ms.
    pub step_ms_per_seq: f64,
    /// Prefill time per prompt token, ms.
    pub prefill_ms_per_token: f64,
    /// The client and network's share of TTFT, ms.
    pub overhead_ms: f64,
    /// At most this many sequences run at once; null where none was seen.
    pub cap: Option<u32>,
    /// The tune knob's name and value the cap comes from (`np`), if any.
    pub knob: Option<String>,
    pub knob_value: Option<u32>,
    /// KV capacity in tokens, where the server's gauges told it.
    pub kv_tokens: Option<u64>,
    /// llama.cpp: each slot's context, tokens (`/props`), where known.
    pub slot_context_tokens: Option<u64>,
}

/// What the fit saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct FitRange {
    pub concurrency_min: u32,
    pub concurrency_max: u32,
    /// Mean running batch, lowest and highest level.
    pub batch_min: f64,
    pub batch_max: f64,
    pub input_len: f64,
    pub output_len: f64,
}

/// Predicted against measured at one level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct LevelCheck {
    pub concurrency: u32,
    pub measured: Figures3,
    pub predicted: Figures3,
    /// (predicted - measured) / measured, %.
    pub error_pct: Errors,
}

/// The three figures the model answers for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Figures3 {
    pub output_tok_s: f64,
    pub ttft_p50_ms: f64,
    pub tpot_p50_ms: f64,
}

/// An error per figure, %.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Errors {
    pub output_tok_s: f64,
    pub ttft_p50_ms: f64,
    pub tpot_p50_ms: f64,
}

/// The file's name in a run folder.
pub(crate) const FILE_NAME: &str = "model.json";

/// A folder's `model.json` when it is there and of a version this
/// tokbench reads; `None` otherwise (the chart then draws no prediction).
pub(crate) fn read_compatible(dir: &Path) -> Option<ModelFile> {
    let text = std::fs::read_to_string(dir.join(FILE_NAME)).ok()?;
    let file: ModelFile = serde_json::from_str(&text).ok()?;
    compatible(file.version).then_some(file)
}

/// The model's output tok/s at a series' measured levels (those in `at`),
/// from a run folder's `model.json`: the line the charts draw dashed
/// beside the measured one. Empty without a compatible file or a model of
/// that series.
pub(crate) fn predicted_line(dir: &Path, series: u64, at: &[u32]) -> Vec<(u32, f64)> {
    read_compatible(dir)
        .and_then(|f| f.models.into_iter().find(|m| m.series == series))
        .map(|m| {
            m.levels
                .iter()
                .filter(|l| at.contains(&l.concurrency))
                .map(|l| (l.concurrency, l.predicted.output_tok_s))
                .filter(|(_, t)| t.is_finite() && *t > 0.0)
                .collect()
        })
        .unwrap_or_default()
}
