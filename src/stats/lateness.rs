//! Open-loop send lateness: how far behind its schedule the client sent.
//! A request is late when it left more than `LATE_AFTER` after its intended
//! time. tokio's timer has 1 ms granularity and a busy machine adds a
//! millisecond or two: below 5 ms (the replay acceptance's "on schedule") is
//! the clock's noise, not a lagging client or a full cap.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fmt::round3;
#[cfg(test)]
use crate::record::{Outcome, RequestRecord};
#[cfg(test)]
use crate::stats::percentile::percentile_sorted;

pub(crate) const LATE_AFTER: Duration = Duration::from_millis(5);

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Lateness {
    /// Requests that had an intended send time.
    pub scheduled: usize,
    /// Of those, sent more than LATE_AFTER late.
    pub late: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Requests in flight on average (Little's law: busy time / span), the
    /// open loop's counterpart of a concurrency.
    pub mean_in_flight: f64,
}

impl Lateness {
    /// None for a closed-loop level (no record has a schedule).
    #[cfg(test)]
    pub(crate) fn of(records: &[RequestRecord]) -> Option<Lateness> {
        let mut lags: Vec<f64> = records
            .iter()
            .filter_map(|r| r.send_lag)
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        if lags.is_empty() {
            return None;
        }
        lags.sort_by(f64::total_cmp);
        let answered = records.iter().filter(|r| r.outcome != Outcome::Cancelled);
        let (mut busy, mut first, mut last) = (0.0, f64::INFINITY, 0.0f64);
        for r in answered {
            busy += r.end.saturating_sub(r.start).as_secs_f64();
            first = first.min(r.start.as_secs_f64());
            last = last.max(r.end.as_secs_f64());
        }
        let span = last - first;
        let late_ms = LATE_AFTER.as_secs_f64() * 1000.0;
        Some(Lateness {
            scheduled: lags.len(),
            late: lags.iter().filter(|&&l| l > late_ms).count(),
            p50_ms: percentile_sorted(&lags, 50.0).unwrap_or(0.0),
            p99_ms: percentile_sorted(&lags, 99.0).unwrap_or(0.0),
            max_ms: lags.last().copied().unwrap_or(0.0),
            mean_in_flight: if span > 0.0 { busy / span } else { 0.0 },
        })
    }

    /// "client lagging: 312 requests sent late, max 840 ms", when any was.
    pub(crate) fn warning(&self) -> Option<String> {
        (self.late > 0).then(|| {
            format!(
                "client lagging: {} of {} requests sent late, max {:.0} ms",
                self.late, self.scheduled, self.max_ms
            )
        })
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "scheduled": self.scheduled,
            "late": self.late,
            "late_after_ms": LATE_AFTER.as_secs_f64() * 1000.0,
            "p50_ms": round3(self.p50_ms),
            "p99_ms": round3(self.p99_ms),
            "max_ms": round3(self.max_ms),
            "mean_in_flight": round3(self.mean_in_flight),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(lag_ms: Option<u64>) -> RequestRecord {
        let mut r = RequestRecord::empty(0, 0);
        r.send_lag = lag_ms.map(Duration::from_millis);
        r
    }

    fn span(start_ms: u64, end_ms: u64) -> RequestRecord {
        let mut r = rec(Some(0));
        r.start = Duration::from_millis(start_ms);
        r.end = Duration::from_millis(end_ms);
        r
    }

    #[test]
    fn mean_in_flight_is_busy_time_over_span() {
        // Busy 0-100, 50-150, 100-200 ms: 300 ms of requests over 200 ms = 1.5.
        let l = Lateness::of(&[span(0, 100), span(50, 150), span(100, 200)]).expect("some");
        assert!(
            (l.mean_in_flight - 1.5).abs() < 1e-9,
            "{}",
            l.mean_in_flight
        );
    }

    #[test]
    fn counts_late_sends_and_their_spread() {
        // Lags 0, 1, 3, 840 ms: late (> 5 ms) is 840 alone. numpy-linear
        // p50 of [0,1,3,840] = 1 + 0.5 * (3 - 1) = 2; p99 = 3 + 0.97 * 837 = 814.89.
        let records = [
            rec(Some(0)),
            rec(Some(1)),
            rec(Some(3)),
            rec(Some(840)),
            rec(None),
        ];
        let l = Lateness::of(&records).expect("scheduled");
        assert_eq!((l.scheduled, l.late), (4, 1));
        assert!((l.p50_ms - 2.0).abs() < 1e-9);
        assert!((l.p99_ms - 814.89).abs() < 1e-6, "{}", l.p99_ms);
        assert_eq!(l.max_ms, 840.0);
        assert_eq!(
            l.warning().as_deref(),
            Some("client lagging: 1 of 4 requests sent late, max 840 ms")
        );
        assert_eq!(Lateness::of(&[rec(None)]), None);
    }
}
