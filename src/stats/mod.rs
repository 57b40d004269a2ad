//! Statistics: per-request timing from chunk arrivals, per-level summaries
//! with vLLM-compatible result keys, and a bounded live window for the TUI.
//!
//! Everything here is pure (no I/O, no clock): callers measure and pass
//! times in; these functions only compute (docs/architecture.md section 7).
//!
//! - [`percentile`]: numpy-compatible percentiles on raw samples (result files);
//! - [`metrics`]: TTFT, E2EL, TPOT and ITL of one request from its arrivals;
//! - [`summary`]: one level's [`LevelStats`] and its result-file keys;
//! - [`live`]: hdrhistogram one-second buckets over the last minute (live view).

pub mod gauges;
pub mod hdr;
pub mod lateness;
pub mod live;
pub mod metrics;
pub mod occupancy;
pub mod percentile;
pub mod steady;
pub mod summary;
pub mod tally;
pub mod turns;

pub use live::{LiveWindow, Quantiles, SecondStats};
pub use metrics::{request_timing, RequestTiming};
pub use percentile::{median_sorted, percentile_label, percentile_sorted};
pub use summary::{level_stats, Distribution, LevelStats, MinMeanMax};
