//! `tokbench report` (being written).

use color_eyre::eyre::{bail, Result};

use crate::cli::ReportArgs;

pub fn run_report_command(_args: &ReportArgs) -> Result<i32> {
    bail!("report is not implemented yet")
}
