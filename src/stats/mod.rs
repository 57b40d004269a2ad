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

pub(crate) mod connect;
pub(crate) mod gauges;
pub mod hdr;
pub(crate) mod lateness;
pub(crate) mod live;
pub(crate) mod metrics;
pub(crate) mod occupancy;
pub mod percentile;
pub(crate) mod probes;
pub(crate) mod rate_series;
pub mod server_account;
pub(crate) mod steady;
pub mod summary;
pub(crate) mod tally;
pub(crate) mod turns;
