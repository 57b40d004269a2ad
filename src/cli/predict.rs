//! `tokbench predict`'s flags (docs/predict.md).

use std::path::PathBuf;

use clap::Args;

use crate::workload::Profile;

/// `tokbench predict --help` ends with these; a test parses each.
pub const EXAMPLES_PREDICT: &str = "Examples:
  tokbench predict results/20261201-100000
  tokbench predict results/20261201-100000 --set np=8 --concurrency 1,2,4,8,16
  tokbench predict results/20261201-100000 --random-input-len 512 --random-output-len 256";

#[derive(Args, Debug, Clone)]
pub struct PredictArgs {
    /// The result folder of a finished sweep or tune (its model.json, else its summary.json fitted now).
    #[arg(value_name = "RUN_DIR")]
    pub dir: PathBuf,

    /// A server setting to predict, as the knob's name and value (np=8, max-num-seqs=64); one knob.
    #[arg(long = "set", value_name = "KNOB=V")]
    pub set: Option<String>,

    /// Concurrency levels to predict (default: the run's own).
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub concurrency: Vec<u32>,

    /// Prompt length to predict, tokens (default: the run's).
    #[arg(long, value_name = "N")]
    pub random_input_len: Option<u32>,

    /// Answer length to predict, tokens (default: the run's).
    #[arg(long, value_name = "N")]
    pub random_output_len: Option<u32>,

    /// Length preset to predict; --random-input-len/--random-output-len override its values.
    #[arg(long, value_enum, value_name = "NAME")]
    pub profile: Option<Profile>,

    /// Which series of the run to predict from, 1 first (default: the last).
    #[arg(long, value_name = "N")]
    pub series: Option<u64>,

    /// Capacity SLO: p99 TTFT at most this, ms (default: the run's).
    #[arg(long, value_name = "MS")]
    pub slo_ttft_p99_ms: Option<f64>,

    /// Capacity SLO: p99 TPOT at most this, ms (default: the run's).
    #[arg(long, value_name = "MS")]
    pub slo_tpot_p99_ms: Option<f64>,

    /// Capacity SLO: decode speed per stream at least this, tok/s (default: the run's).
    #[arg(long, value_name = "TOK_S")]
    pub slo_min_stream_tok_s: Option<f64>,
}

/// `tokbench tune --predict` (docs/predict.md).
#[derive(Args, Debug, Clone, Default)]
pub struct TunePredictArgs {
    /// Measure the grid's first setting (two when one cannot fit the batch term), predict the rest from it, and measure only the predicted best and its grid neighbour (one more where the measurement disagrees); one knob that sets the batch cap (np, max-num-seqs, ...).
    #[arg(long)]
    pub predict: bool,
}
