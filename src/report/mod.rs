//! Result files and printed output (DESIGN.md section 6).

pub mod atomic;
pub mod formats;
pub mod recorder;
pub mod text;
pub mod time;
