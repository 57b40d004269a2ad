//! `tokbench compare` (being written).

use color_eyre::eyre::{bail, Result};

use crate::cli::CompareArgs;

/// Exit code 2 when the runs cannot be compared (DESIGN.md section 5).
pub fn run_compare_command(_args: &CompareArgs) -> Result<i32> {
    bail!("compare is not implemented yet")
}
