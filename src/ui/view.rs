//! `tokbench view DIR [DIR2]` (being written).

use color_eyre::eyre::{bail, Result};

use crate::cli::ViewArgs;

pub async fn run_view(_args: &ViewArgs) -> Result<i32> {
    bail!("view is not implemented yet")
}
