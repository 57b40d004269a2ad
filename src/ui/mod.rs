//! The live terminal view (being written): until it lands, the headless face.

use color_eyre::eyre::Result;

use crate::run::{self, Prepared};

/// Run a prepared sweep with the live view. Returns the exit code.
pub async fn run_tui(prepared: Prepared) -> Result<i32> {
    run::run_headless(prepared).await
}
