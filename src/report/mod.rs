//! Result files and printed output (docs/architecture.md section 5).

pub mod atomic;
pub(crate) mod br;
pub(crate) mod csv;
pub mod formats;
pub(crate) mod frontier;
pub(crate) mod html;
pub(crate) mod junit;
pub(crate) mod markdown;
pub(crate) mod model_file;
pub(crate) mod recorder;
pub(crate) mod resume;
pub(crate) mod run_info;
pub(crate) mod saved;
pub mod schema;
pub(crate) mod svg;
pub(crate) mod tally;
pub(crate) mod text;
pub(crate) mod thresholds;
pub(crate) mod timing;
pub(crate) mod tune_text;
/// Moved to the crate root (the simulator needs it and imports nothing of
/// the client); kept here so `report::time` paths still resolve.
pub(crate) use crate::time;
