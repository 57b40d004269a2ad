//! A level's records folded as they come back (docs/architecture.md,
//! "Flat memory"), and the finished level they make. Pure.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::analysis::decide::LevelPoint;
use crate::analysis::diagnose::StreamShape;
use crate::analysis::goodput::{Goodput, Slo as GoodputSlo};
use crate::load::driver::LevelInfo;
use crate::record::RequestRecord;
use crate::stats::gauges::GaugeSummary;
use crate::stats::lateness::Lateness;
use crate::stats::occupancy::{Occupancy, Timeline};
use crate::stats::probes::{ProbeStats, ProbeTally};
use crate::stats::rate_series::RateSeries;
use crate::stats::steady::{Steadiness, SteadyEstimator};
use crate::stats::summary::LevelStats;
use crate::stats::tally::{Lengths, LevelTally, ServerTimingTally};
use crate::stats::turns::{CacheHits, TurnStats, TurnTally};

/// Answers kept per level for the buffered-stream check: it looks at the
/// medians of their shape, which the first ten thousand settle.
const STREAM_SHAPES_KEPT: usize = 10_000;

/// What the client cost while a level ran.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ClientLoad {
    pub cpu_percent: Option<f64>,
    pub loop_lag_ms_p99: Option<f64>,
}

/// A level whose requests are all back.
#[derive(Clone, Debug)]
pub(crate) struct FinishedLevel {
    pub info: LevelInfo,
    pub partial: bool,
    pub stats: LevelStats,
    pub client: ClientLoad,
    /// Requests meeting every `--goodput` SLO, when given.
    pub goodput: Option<Goodput>,
    /// How each completed answer arrived, for the buffered-stream check.
    pub stream_shapes: Vec<StreamShape>,
    /// What the server itself reported per request (medians), when it did.
    pub server_timings: Value,
    /// The server's gauges while the level ran (min/mean/max each).
    pub server: GaugeSummary,
    /// The server's own account of the level (its histograms and counters
    /// between the level's edges), when read at both.
    pub server_account: Option<Value>,
    /// A replayed or ramped level second by second, and where it broke
    /// (`stats::rate_series`).
    pub rate_series: Option<Value>,
    /// The level file, when the level had anything to save (the recorder
    /// sets it; the tally never opens a file).
    pub file: Option<PathBuf>,
    /// What that file holds, for the consumers that repeat it (`--events`'
    /// `level_finished`): the same object, never a rebuilt copy.
    pub saved: Option<Value>,
    /// Input and output tokens of its completed requests (the `traffic` key).
    pub achieved: Lengths,
    /// Open loop: how late requests went out against their schedule.
    pub lateness: Option<Lateness>,
    /// `--turns`: TTFT and prefix-cache hits turn by turn.
    pub turns: Vec<TurnStats>,
    /// Prompt tokens the server's prefix cache answered, where it said.
    pub cache_hit_rate: Option<f64>,
    /// Requests waiting for a first token and streaming, over the level.
    pub occupancy: Option<Occupancy>,
    /// Records of the level left out of its statistics as transition.
    pub transition: u32,
    /// Relative standard error of its per-second output throughput.
    pub throughput_rse: Option<f64>,
    /// Hand-set levels: whether they measured a steady state.
    pub steadiness: Option<Steadiness>,
    /// `--probe-rate`: the level's probe requests, apart from its figures.
    pub probes: Option<ProbeStats>,
}

impl FinishedLevel {
    /// A hand-set level left before it settled: listed, never a result.
    pub(crate) fn is_unsteady(&self) -> bool {
        self.steadiness.as_ref().is_some_and(|s| !s.steady)
    }

    /// Whether any request of the level came back: such a level is saved
    /// (a hand-set level left before any of its own came back still is,
    /// to say it was too short), and only such a level is judged.
    pub(crate) fn has_answers(&self) -> bool {
        self.stats.completed + self.stats.failed > 0 || self.transition > 0
    }

    /// The level as the decision math sees it.
    pub(crate) fn point(&self) -> Option<LevelPoint> {
        Some(LevelPoint::from_stats(
            self.info.concurrency,
            self.info.mode,
            self.partial,
            &self.stats,
        ))
    }
}

/// A level still running: its records are folded as they come back and
/// not kept (docs/architecture.md, "Flat memory"), so a level of a million
/// requests holds what a level of a thousand does.
pub(super) struct OpenLevel {
    pub(super) info: LevelInfo,
    pub(super) server: GaugeSummary,
    /// Its records, transition ones left out, folded.
    pub(super) tally: LevelTally,
    pub(super) lengths: Lengths,
    pub(super) turns: TurnTally,
    pub(super) cache: CacheHits,
    pub(super) server_timings: ServerTimingTally,
    /// The first answers' shapes, for the buffered-stream check.
    pub(super) stream_shapes: Vec<StreamShape>,
    /// `--goodput`: completed requests meeting every SLO.
    pub(super) good: usize,
    /// Waiting and streaming over the level, every level's requests counted.
    pub(super) timeline: Timeline,
    /// The server's running count at each scrape while the level ran
    /// (when, count), for the live view's split read over the level.
    pub(super) running: Vec<(Duration, f64)>,
    pub(super) transition: u32,
    pub(super) steady: SteadyEstimator,
    /// Its probe requests, folded apart from its own records.
    pub(super) probes: ProbeTally,
    pub(super) cpu_at_start: Duration,
    /// The meter's monotonic time at the level's start.
    pub(super) wall_at_start: Duration,
    /// A level on its own timeline (a replay, a ramp): its seconds.
    pub(super) rate_series: Option<RateSeries>,
}

impl OpenLevel {
    /// Count one of the level's own records (not a transition one).
    pub(super) fn fold(&mut self, r: &RequestRecord, goodput: Option<&GoodputSlo>) {
        self.tally.add(r);
        self.lengths.add(r);
        self.turns.add(r);
        self.cache.add(r);
        self.server_timings.add(r);
        if let Some(series) = &mut self.rate_series {
            series.add(r);
        }
        if self.stream_shapes.len() < STREAM_SHAPES_KEPT {
            self.stream_shapes.extend(StreamShape::from_record(r));
        }
        if goodput.is_some_and(|slo| slo.is_good(r)) {
            self.good += 1;
        }
    }
}
