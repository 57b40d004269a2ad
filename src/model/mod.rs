//! A model of the server, fitted to its own sweep, and what it predicts
//! for what was not measured (docs/predict.md; docs/architecture.md
//! section 2: `model` imports `sim`'s pure engine, `report`, `analysis`,
//! `stats`, `engine`, `cli`, `fmt`; only `run`, `ui` and `main` import it).
//!
//! - `schema`: `model.json`, the one definition of its file (it lives in
//!   `report::model_file`, with the other result files, for the chart).
//! - `fit`: a series' levels into the simulator's physics, with the fit's
//!   own error on each level.
//! - `virtual_run`: one level on `sim::engine::Scheduler` in virtual time.
//! - `predict`: a table of levels for other knobs, streams and lengths,
//!   with the expected error, the extrapolation and the refusals.
//! - `files`: reading a run folder, writing `model.json`, the command.

pub(crate) mod files;
pub(crate) mod fit;
pub(crate) mod predict;
pub(crate) use crate::report::model_file as schema;
pub(crate) mod virtual_run;

pub use files::run_predict_command;
