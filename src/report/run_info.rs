//! What identifies a run: saved in `summary.json` and in every level file.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::schema::{RunSection, RunSlo};
use crate::analysis::goodput::Slo as GoodputSlo;
use crate::analysis::DecisionConfig;
use crate::fmt::round3;

/// What identifies a run; saved in `summary.json` and in every level file.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// Server root, with any credentials removed.
    pub target: String,
    pub engine: String,
    pub engine_version: Option<String>,
    pub model: String,
    pub backend: String,
    pub profile: String,
    pub input_len: u32,
    pub output_len: u32,
    pub ignore_eos: bool,
    pub extra_body: Option<Value>,
    pub labels: BTreeMap<String, String>,
    pub seed: u64,
    /// The user gave the seed (`--seed`, or a config file's `seed`): its
    /// prompts may repeat an earlier run's, which a prefix cache answers.
    pub seed_given: bool,
    /// ISO 8601 UTC.
    pub started_at: String,
    /// vLLM's `date` format (`20261129-191400`).
    pub date: String,
    pub percentiles: Vec<f64>,
    /// `--prefix-len`: shared prefix tokens before each prompt (0: none).
    pub prefix_len: u32,
    /// SLOs, prices and rounds.
    pub decision: DecisionConfig,
    /// Whether the user gave the SLO (any `--slo-*` flag, on the command
    /// line or in a config file). Where they gave none, the reading speed
    /// in `decision.slo` is the default's, and a run that no level reaches
    /// it on is judged by the knee (`analysis::decide::decide_judged`).
    /// Saved as `run.slo.given`.
    pub slo_given: bool,
    /// Warmup requests sent before the first level.
    pub warmup_requests: u32,
    /// Median connect + first byte of a tiny request before the run, ms.
    pub connect_probe_ms: Option<f64>,
    /// What read the measured streams: `lean-http1` (src/load/h1.rs),
    /// `reqwest-http1` or `reqwest-http2`.
    pub http_client: &'static str,
    /// Profile, range ratio, prompt source, dataset (issue 7).
    pub traffic: crate::workload::Traffic,
    /// Open loop: gamma shape of the request gaps (1 when closed loop).
    pub burstiness: f64,
    /// `--find-capacity`, `--request-rate`, `--replay`, or "sweep".
    pub kind: String,
    /// `--turns`: requests per conversation (1: single requests).
    pub turns: u32,
    /// `--duration`, `--shard`, `--start-at` (issue 13).
    pub timing: crate::report::timing::RunTiming,
    /// `--replay`: what the level file says of the trace (`Replay::to_json`).
    pub trace: Option<Value>,
    /// `--ramp`: its rate over time, for where a ramp broke.
    pub ramp: Option<crate::load::ramp::Ramp>,
    /// `--budget`, or the default budget: the levels are fitted to it.
    pub fit: Option<crate::load::driver::FitConfig>,
    /// `--threshold`: judged at the run's end into summary.json's
    /// `thresholds`.
    pub thresholds: crate::report::thresholds::Checks,
}

impl RunInfo {
    /// Where this run's lengths came from (`analysis::diagnose::AskedLengths`).
    pub(crate) fn asked_lengths(&self) -> crate::analysis::diagnose::AskedLengths {
        crate::analysis::diagnose::AskedLengths::of_run(
            self.input_len + self.prefix_len,
            self.output_len,
            self.traffic.dataset.is_some(),
            self.kind == "replay" || self.trace.is_some(),
            self.turns,
        )
    }

    /// What the bodies asked of the answers' length, as the engine honours it.
    pub(crate) fn length_ask(&self) -> crate::engine::LengthAsk {
        crate::engine::LengthAsk::of(&self.engine, &self.backend, self.ignore_eos)
    }

    pub(crate) fn to_json(&self) -> Value {
        serde_json::to_value(self.to_section()).unwrap_or(Value::Null)
    }

    /// summary.json's `run` (`report::schema::RunSection`).
    pub(crate) fn to_section(&self) -> RunSection {
        let slo = &self.decision.slo;
        RunSection {
            target: Some(self.target.clone()),
            engine: Some(self.engine.clone()),
            engine_version: self.engine_version.clone(),
            model: Some(self.model.clone()),
            backend: Some(self.backend.clone()),
            profile: Some(self.profile.clone()),
            input_len: Some(self.input_len),
            output_len: Some(self.output_len),
            ignore_eos: Some(self.ignore_eos),
            extra_body: self.extra_body.clone(),
            labels: Some(
                self.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                    .collect(),
            ),
            seed: Some(self.seed),
            started_at: Some(self.started_at.clone()),
            ended_at: None,
            warmup_requests: Some(self.warmup_requests),
            prefix_len: Some(self.prefix_len),
            rounds: Some(self.decision.rounds),
            gpus: self.decision.gpus,
            connect_probe_ms: self.connect_probe_ms.map(round3),
            http_client: Some(self.http_client.to_string()),
            kind: Some(self.kind.clone()),
            turns: Some(self.turns),
            burstiness: Some(self.burstiness),
            slo: Some(RunSlo {
                ttft_p99_ms: slo.ttft_p99_ms,
                min_stream_tok_s: slo.min_stream_tok_s,
                tpot_p99_ms: slo.tpot_p99_ms,
                max_error_rate: Some(slo.max_error_rate),
                given: Some(self.slo_given),
            }),
            goodput_slo: self.decision.goodput.map(GoodputSlo::to_json),
            shard: self.timing.shard.clone(),
            duration_target: self.timing.duration_s(),
            start_at: self.timing.start_at_text(),
            level_gap_s: self.timing.level_gap_s(),
            budget_s: self.fit.map(|f| round3(f.budget.as_secs_f64())),
            budget_default: self.fit.map(|f| f.default_budget),
            // Traffic shape: range_ratio, prompt_source, corpus, dataset, save_prompts.
            other: match self.traffic.run_json() {
                Value::Object(traffic) => traffic,
                _ => Map::new(),
            },
        }
    }
}

#[cfg(test)]
impl RunInfo {
    /// A plain closed-loop sweep of one vLLM server, for tests to change.
    pub(crate) fn example() -> RunInfo {
        RunInfo {
            target: "http://h:8000".into(),
            engine: "vllm".into(),
            engine_version: None,
            model: "m".into(),
            backend: "openai-chat".into(),
            profile: "custom".into(),
            input_len: 8,
            output_len: 4,
            ignore_eos: true,
            extra_body: None,
            labels: BTreeMap::new(),
            seed: 1,
            seed_given: false,
            started_at: "2026-12-01T10:00:00Z".into(),
            date: "20261201-100000".into(),
            percentiles: vec![50.0, 99.0],
            prefix_len: 0,
            decision: DecisionConfig::default(),
            slo_given: false,
            warmup_requests: 0,
            connect_probe_ms: None,
            http_client: "lean-http1",
            traffic: Default::default(),
            burstiness: 1.0,
            kind: "sweep".into(),
            turns: 1,
            timing: Default::default(),
            trace: None,
            ramp: None,
            fit: None,
            thresholds: Default::default(),
        }
    }
}
