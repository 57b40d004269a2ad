//! The process's exit codes (docs/architecture.md section 5), in one place so
//! every command and every script that reads them agrees.

/// Finished; also when the user quit and the results were saved.
pub const EXIT_OK: i32 = 0;
/// Could not start, or failed to measure.
pub const EXIT_FAILED: i32 = 1;
/// Refused: the runs cannot be compared (different shapes, without `--force`).
pub const EXIT_REFUSED: i32 = 2;
/// Measured, but a check the user set failed: a `--threshold`, or a regression
/// gate. k6's code for a failed threshold, which CI pipelines already know.
pub const EXIT_CHECK_FAILED: i32 = 99;
/// Interrupted by a signal, after saving what was measured.
pub const EXIT_INTERRUPTED: i32 = 130;
