//! Judgements over measured levels: knee, capacity, cost, goodput, rounds,
//! and what to warn the user about. Pure functions of the numbers: nothing
//! here measures, reads a clock or prints. No output holds NaN or infinity
//! (a figure that cannot be computed is `None`, and `null` in JSON).
//!
//! What the caller passes, and gets:
//!
//! - [`decide::decide_judged`]`(&[LevelPoint], &CapacitySlo, slo_given) -> Decision`: one
//!   [`decide::LevelPoint`] per finished level of the run, any kind, partial
//!   or not (build it with `LevelPoint::from_stats(concurrency,
//!   mode, partial, &stats)`, `mode` a `record::Mode`); the SLO from
//!   `--slo-ttft-p99-ms`, `--slo-min-stream-tok-s` (default 20),
//!   `--slo-tpot-p99-ms` (`CapacitySlo::default()` is no TTFT/TPOT SLO, 20
//!   tok/s, errors < 1%); `slo_given` false where the user set none, so that
//!   a run no level of which reaches the default reading speed is judged by
//!   the knee. The `Decision` holds the merged sweep points, the
//!   knee (`Option<Knee>`) and the capacity (`Result<Capacity, NoCapacity>`,
//!   the error being a one-line reason). summary.json: `knee_json()`,
//!   `capacity_json()` (null when none); headless: `capacity_line()`.
//!   Pieces: `sweep_points`, `steps`, `find_knee`, `find_capacity`,
//!   `is_flat`, `no_rise_message`.
//! - [`cost::cost`]`(capacity_tok_s, gpu_price_per_hour, api_price_per_m:
//!   Option<f64>, utilization: Option<f64>) -> Cost`, `Cost::to_json()` is
//!   summary.json's `cost`; `Cost::verdict` the sentence.
//! - [`goodput::Slo::parse`]`(args)` for `--goodput ttft:500 tpot:50
//!   e2el:30000` (one string or clap's values; one-line error), then
//!   [`goodput::request_goodput`]`(&[RequestRecord], &Slo, duration_s) ->
//!   Goodput { good, share, rate_per_s }` per level.
//! - [`rounds::rounds_spread`]`(&[LevelPoint]) -> Vec<RoundsSpread>`: median
//!   and spread of output throughput and p50 TTFT for each concurrency run
//!   two or more times; `is_noisy()` above 15%.
//! - [`diagnose::diagnose_run`]`(&DiagnoseInput) -> Vec<Diagnosis>`: every
//!   check that fires. `DiagnoseInput` carries the level views, requested
//!   lengths, warmup request count, the pre-run connect + first-byte probe
//!   (ms), per-level client load, per-request stream shapes, `--rounds`,
//!   the spreads and the decision; anything left at its default skips the
//!   checks that need it. `diagnose(levels, input_target, output_target)`
//!   is the same with only the first three. Each check is also public on
//!   its own (`client_far`, `no_warmup`, `client_saturated`,
//!   `buffered_stream`, `rounds_spread`, `single_round`, `no_rise`,
//!   `no_capacity`, `short_outputs`, `single_level`, `failures`,
//!   `input_len_off_target`).

pub(crate) mod cost;
pub(crate) mod decide;
pub(crate) mod diagnose;
pub(crate) mod engine_checks;
pub(crate) mod fit;
pub(crate) mod goodput;
pub(crate) mod rounds;
pub(crate) mod search;
pub(crate) mod series;
mod words;

/// What the user accepts and pays: the inputs of knee, capacity, goodput and cost.
#[derive(Clone, Debug, Default)]
pub struct DecisionConfig {
    pub slo: decide::CapacitySlo,
    pub goodput: Option<goodput::Slo>,
    pub gpu_price_per_hour: Option<f64>,
    pub api_price_per_m: Option<f64>,
    pub utilization: Option<f64>,
    pub rounds: u32,
    /// `--gpus`: recorded with the run, for throughput per GPU in its charts.
    pub gpus: Option<u32>,
}
