//! What identifies a run on screen (target, model, shape), fixed for the run,
//! and text made safe for one terminal line.

use crate::run::Prepared;

/// What identifies the run on screen; fixed for the run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunView {
    /// Server root without credentials.
    pub target: String,
    pub engine: String,
    pub engine_version: Option<String>,
    pub model: String,
    /// 0 when unknown (a saved summary without it).
    pub input_len: u32,
    /// 0 when unknown.
    pub output_len: u32,
    /// What the bodies asked of the answers' length, as the engine honours
    /// it (`ignore_eos`, `num_predict (a cap, not forced)`); `None` when a
    /// saved summary does not say.
    pub(crate) length_ask: Option<crate::engine::LengthAsk>,
    /// `--extra-body` knobs (and labels) as `k=v` pairs, when given.
    pub knobs: Option<String>,
    /// The target is the built-in simulator (demo).
    pub simulated: bool,
    /// Concurrency of each planned level, in plan order.
    pub plan: Vec<u32>,
    pub result_dir: String,
    /// When the run started (`run.started_at` of a saved summary); the live
    /// view shows its clock instead.
    pub started_at: Option<String>,
    /// The traffic shape's name (`--profile`, or `dataset FILE`), when known.
    pub profile: Option<String>,
    /// `--gpus`: the frontier gives its throughput per GPU.
    pub gpus: Option<u32>,
    /// `--ramp`: the chart shows its offered and achieved rate by second.
    pub ramp: Option<RampView>,
}

/// A ramp on screen: its schedule, and the TTFT SLO its break is judged by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RampView {
    pub ramp: crate::load::ramp::Ramp,
    pub slo_ttft_p99_ms: Option<f64>,
}

/// `k=v` pairs of a JSON object, one space apart; `None` when empty.
pub(crate) fn knob_text(map: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let pairs: Vec<String> = map
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    (!pairs.is_empty()).then(|| pairs.join(" "))
}

impl RunView {
    pub(crate) fn from_prepared(p: &Prepared) -> RunView {
        let knobs = p.plan.extra_body.as_ref().and_then(knob_text);
        RunView {
            target: p.plan.display_target.clone(),
            engine: p.identity.engine.clone(),
            engine_version: p.identity.engine_version.clone(),
            model: p.model.clone(),
            input_len: p.plan.input_len,
            output_len: p.plan.output_len,
            length_ask: Some(crate::engine::LengthAsk::of(
                &p.identity.engine,
                p.plan.backend.as_str(),
                p.plan.ignore_eos,
            )),
            knobs,
            simulated: p.plan.simulated,
            plan: p.plan.levels.iter().map(|l| l.concurrency).collect(),
            result_dir: p.result_dir.display().to_string(),
            started_at: None,
            profile: match &p.plan.traffic.dataset {
                Some(d) => Some(format!("dataset {}", d.name)),
                None => crate::workload::profile::profile_words(Some(&p.plan.traffic.profile)),
            },
            gpus: p.plan.decision.gpus,
            ramp: p
                .plan
                .replay
                .as_ref()
                .and_then(|r| r.ramp)
                .map(|ramp| RampView {
                    ramp,
                    slo_ttft_p99_ms: p.plan.decision.slo.ttft_p99_ms,
                }),
        }
        .sanitized()
    }

    /// Server-supplied names (model, engine version) could carry terminal
    /// escape sequences; a cell holding ESC would reach the terminal raw.
    pub(crate) fn sanitized(mut self) -> RunView {
        for s in [
            &mut self.target,
            &mut self.engine,
            &mut self.model,
            &mut self.result_dir,
        ] {
            *s = one_line(s);
        }
        self.profile = self.profile.as_deref().map(one_line);
        self.engine_version = self.engine_version.as_deref().map(one_line);
        self.knobs = self.knobs.as_deref().map(one_line);
        self.started_at = self.started_at.as_deref().map(one_line);
        self
    }

    /// `in 1024 / out 1024`, `?` for a length not known.
    /// `(achieved 516 / 265)` once requests completed.
    pub(crate) fn achieved_text(achieved: (u64, u64, u64)) -> Option<String> {
        let (input, output, n) = achieved;
        (n > 0).then(|| format!("(achieved {} / {})", input / n, output / n))
    }

    pub(crate) fn shape(&self) -> String {
        let n = |x: u32| {
            if x == 0 {
                "?".to_string()
            } else {
                x.to_string()
            }
        };
        format!("in {} / out {}", n(self.input_len), n(self.output_len))
    }
}

/// Text safe for one terminal line: control characters become spaces.
pub(crate) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}
