//! `--threshold`: the pass/fail checks of a sweep, a demo or a tune
//! (parsed and judged by `report::thresholds`, docs/thresholds.md).

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ThresholdArgs {
    /// Fail the run (exit 99) unless FIGURE OP VALUE holds, e.g. 'ttft_p99_ms<500@16', 'tok_s>=100@all', 'ttft_p99_ms<800@capacity', 'capacity>=8'; repeatable. @N is the level at concurrency N (N req/s in a --request-rate run); run-level figures (capacity, peak_tok_s, cost_per_m) take no @.
    #[arg(help_heading = "SLO and cost", long = "threshold", value_name = "EXPR")]
    pub thresholds: Vec<String>,
}
