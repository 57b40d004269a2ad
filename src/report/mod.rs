//! Result files and printed output (docs/architecture.md section 5).

pub mod atomic;
pub mod br;
pub mod csv;
pub mod formats;
pub mod frontier;
pub mod html;
pub mod markdown;
pub mod recorder;
pub mod resume;
pub mod run_info;
pub mod saved;
pub mod schema;
pub mod svg;
pub mod tally;
pub mod text;
pub mod timing;
/// Moved to the crate root (the simulator needs it and imports nothing of
/// the client); kept here so `report::time` paths still resolve.
pub use crate::time;
