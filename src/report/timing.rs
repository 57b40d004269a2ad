//! What `--duration`, `--shard` and `--start-at` add to the result files
//! (issue 13): `run.shard`, `run.duration_target`, and in each level file
//! `duration_target`, `started_unix_s` and `shard`. Runs without these
//! flags write none of them, so their files stay as they were.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fmt::round3;
use crate::record::Mode;
use crate::report::schema::ShardSection;

/// The run's timing identity, carried in `RunInfo`.
#[derive(Clone, Debug, Default)]
pub struct RunTiming {
    /// `--shard`: index, count, host and clock offset.
    pub shard: Option<ShardSection>,
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--start-at`.
    pub start_at: Option<SystemTime>,
    /// `--level-gap` (with `--start-at` and `--duration`).
    pub level_gap: Option<Duration>,
    /// The wall clock at the run's time zero (the driver's `run_start`),
    /// set once when the driver starts: a level's `started_at` offset plus
    /// this is its start on the wall clock. Shared, as the recorder gets its
    /// copy of the run before the driver is started.
    pub origin: Arc<OnceLock<SystemTime>>,
}

impl RunTiming {
    /// Level files and the summary say when levels started on the wall
    /// clock only where a merger needs it.
    fn stamped(&self) -> bool {
        self.shard.is_some() || self.start_at.is_some()
    }

    /// A level's `duration_target`: the planned and rate levels of a timed
    /// run (a hand-set level runs until changed).
    pub(crate) fn duration_target(&self, mode: Mode) -> Option<f64> {
        let timed = matches!(mode, Mode::Planned | Mode::Rate);
        self.duration
            .filter(|_| timed)
            .map(|d| round3(d.as_secs_f64()))
    }

    /// A level's `started_unix_s`, from its offset into the run.
    pub(crate) fn started_unix_s(&self, started_at: Duration) -> Option<f64> {
        if !self.stamped() {
            return None;
        }
        let at = *self.origin.get()? + started_at;
        at.duration_since(UNIX_EPOCH)
            .ok()
            .map(|d| round3(d.as_secs_f64()))
    }

    /// `run.start_at`: RFC 3339 UTC, to the ms.
    pub(crate) fn start_at_text(&self) -> Option<String> {
        self.start_at.map(rfc3339_ms)
    }

    /// A scheduled level's `drain_overrun_s`: how long after the next
    /// level started (`next_start`, None when it had not yet) its last
    /// answer came (`last_end`), as offsets into the run.
    pub(crate) fn drain_overrun_s(
        &self,
        last_end: Duration,
        next_start: Option<Duration>,
    ) -> Option<f64> {
        self.level_gap?;
        let over = next_start.map_or(Duration::ZERO, |next| last_end.saturating_sub(next));
        Some(round3(over.as_secs_f64()))
    }

    pub(crate) fn duration_s(&self) -> Option<f64> {
        self.duration.map(|d| round3(d.as_secs_f64()))
    }

    pub(crate) fn level_gap_s(&self) -> Option<f64> {
        self.level_gap.map(|d| round3(d.as_secs_f64()))
    }
}

/// `2026-12-01T13:00:00Z`, or `2026-12-01T13:00:00.250Z` with ms.
pub(crate) fn rfc3339_ms(at: SystemTime) -> String {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let whole = crate::time::iso8601(at);
    match ms {
        0 => whole,
        ms => format!("{}.{ms:03}Z", whole.trim_end_matches('Z')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_stamps_only_where_asked() {
        let plain = RunTiming::default();
        let _ = plain
            .origin
            .set(UNIX_EPOCH + Duration::from_secs(1_796_130_000));
        assert_eq!(plain.started_unix_s(Duration::from_millis(1500)), None);
        assert_eq!(plain.duration_target(Mode::Planned), None);
        assert_eq!(plain.start_at_text(), None);

        let sharded = RunTiming {
            shard: Some(ShardSection {
                index: Some(1),
                count: Some(4),
                ..ShardSection::default()
            }),
            duration: Some(Duration::from_millis(2500)),
            start_at: Some(UNIX_EPOCH + Duration::from_millis(1_796_130_000_250)),
            ..RunTiming::default()
        };
        // No origin yet (the driver has not started): no stamp.
        assert_eq!(sharded.started_unix_s(Duration::ZERO), None);
        let _ = sharded
            .origin
            .set(UNIX_EPOCH + Duration::from_millis(1_796_129_990_000));
        // 10 s of warmup and wait, then 1.2345 s: 1796130001.2346 -> ms.
        assert_eq!(
            sharded.started_unix_s(Duration::from_micros(11_234_600)),
            Some(1_796_130_001.235)
        );
        assert_eq!(sharded.duration_target(Mode::Planned), Some(2.5));
        assert_eq!(sharded.duration_target(Mode::Rate), Some(2.5));
        assert_eq!(sharded.duration_target(Mode::Manual), None);
        assert_eq!(
            sharded.start_at_text().as_deref(),
            Some("2026-12-01T13:00:00.250Z")
        );
        // Not a schedule (no --level-gap): no overrun key.
        assert_eq!(
            sharded.drain_overrun_s(Duration::from_secs(9), Some(Duration::from_secs(7))),
            None
        );
        let scheduled = RunTiming {
            level_gap: Some(Duration::from_secs(2)),
            ..sharded
        };
        // The last answer at 9.25 s, the next level from 7 s: 2.25 s over.
        assert_eq!(
            scheduled.drain_overrun_s(Duration::from_millis(9250), Some(Duration::from_secs(7))),
            Some(2.25)
        );
        // Back before the next level started (or none started yet): 0.
        assert_eq!(
            scheduled.drain_overrun_s(Duration::from_millis(6500), Some(Duration::from_secs(7))),
            Some(0.0)
        );
        assert_eq!(
            scheduled.drain_overrun_s(Duration::from_millis(6500), None),
            Some(0.0)
        );
    }
}
