//! Result files and printed output (DESIGN.md section 6).

pub mod atomic;
pub mod csv;
pub mod formats;
pub mod frontier;
pub mod html;
pub mod markdown;
pub mod recorder;
pub mod resume;
pub mod saved;
pub mod svg;
pub mod text;
pub mod time;
