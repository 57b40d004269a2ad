//! Connect time apart from TTFT: a level's connect times (TCP connect, 0 on
//! a reused keep-alive connection) and its TTFT less each request's own
//! connect, folded from the records (`RequestRecord::connect`,
//! `RequestRecord::ttft_after_connect`), and the level block's line when
//! connecting is a noticeable share of TTFT. Pure: no clock, no I/O.

use serde_json::Value;

use super::hdr::{Samples, EXACT_CAP};
use crate::fmt::round3;
use crate::record::RequestRecord;

/// Connect p99 above this share of TTFT p99 gets its line in the level block.
pub(crate) const CONNECT_SHARE_NOTE: f64 = 0.10;

/// p50, p99 and mean of one set of values, ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spread {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Spread {
    fn of(samples: &Samples) -> Option<Spread> {
        Some(Spread {
            p50: samples.percentile(50.0)?,
            p99: samples.percentile(99.0)?,
            mean: samples.mean()?,
        })
    }

    /// `{p50, p99, mean}`, ms at the microsecond.
    pub(crate) fn to_json(self) -> Value {
        serde_json::json!({
            "p50": round3(self.p50),
            "p99": round3(self.p99),
            "mean": round3(self.mean),
        })
    }
}

/// A level's connect times and TTFT after connect, over its completed
/// requests whose connect time is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ConnectStats {
    pub connect: Spread,
    pub ttft_after_connect: Spread,
    /// The same requests' TTFT p99 (connect included), ms: what the share
    /// is of.
    pub ttft_p99: f64,
}

impl ConnectStats {
    /// Connect p99 over TTFT p99; `None` when TTFT p99 is 0.
    pub(crate) fn share(&self) -> Option<f64> {
        (self.ttft_p99 > 0.0).then(|| self.connect.p99 / self.ttft_p99)
    }

    /// The level block's line when connect p99 is over 10% of TTFT p99.
    pub(crate) fn note(&self) -> Option<String> {
        let share = self.share().filter(|s| *s > CONNECT_SHARE_NOTE)?;
        Some(format!(
            "Connecting was {:.0}% of TTFT: connect p99 {:.2} ms of TTFT p99 {:.2} ms \
             (TTFT after connect p99 {:.2} ms). Warmed keep-alive connections are \
             the usual cure: open the streams' connections before the level.",
            share * 100.0,
            self.connect.p99,
            self.ttft_p99,
            self.ttft_after_connect.p99,
        ))
    }
}

/// The fold: one record at a time, completed ones with a known connect
/// time only.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConnectTally {
    connect: Samples,
    ttft_after_connect: Samples,
    ttft: Samples,
}

impl Default for ConnectTally {
    fn default() -> Self {
        ConnectTally {
            connect: Samples::latency_ms(EXACT_CAP),
            ttft_after_connect: Samples::latency_ms(EXACT_CAP),
            ttft: Samples::latency_ms(EXACT_CAP),
        }
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl ConnectTally {
    /// Count a completed record (the caller leaves out the others).
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let (Some(connect), Some(ttft), Some(after)) = (r.connect, r.ttft, r.ttft_after_connect())
        else {
            return;
        };
        self.connect.add(ms(connect));
        self.ttft.add(ms(ttft));
        self.ttft_after_connect.add(ms(after));
    }

    /// `None` when no completed request's connect time was known.
    pub(crate) fn stats(&self) -> Option<ConnectStats> {
        Some(ConnectStats {
            connect: Spread::of(&self.connect)?,
            ttft_after_connect: Spread::of(&self.ttft_after_connect)?,
            ttft_p99: self.ttft.percentile(99.0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rec(connect_ms: Option<u64>, ttft_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::empty(0, 0);
        r.connect = connect_ms.map(Duration::from_millis);
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn connect_and_ttft_after_connect_percentiles_by_hand() {
        // Five requests: two opened their connection (50 and 30 ms), three
        // reused one (0 ms). TTFT 100, 80, 40, 40, 40.
        let mut t = ConnectTally::default();
        for (c, ttft) in [(50, 100), (30, 80), (0, 40), (0, 40), (0, 40)] {
            t.add(&rec(Some(c), ttft));
        }
        // Unknown connect (reqwest): left out of all three.
        t.add(&rec(None, 900));
        let s = t.stats().unwrap();
        // Connect sorted 0 0 0 30 50: p50 = 0; p99 at rank 0.99 * 4 = 3.96:
        // 30 + 0.96 * 20 = 49.2; mean 80 / 5 = 16.
        assert!(close(s.connect.p50, 0.0), "{s:?}");
        assert!(close(s.connect.p99, 49.2), "{s:?}");
        assert!(close(s.connect.mean, 16.0), "{s:?}");
        // After connect: 50 50 40 40 40, sorted 40 40 40 50 50: p50 40,
        // p99 at 3.96: 50; mean 220 / 5 = 44.
        assert!(close(s.ttft_after_connect.p50, 40.0), "{s:?}");
        assert!(close(s.ttft_after_connect.p99, 50.0), "{s:?}");
        assert!(close(s.ttft_after_connect.mean, 44.0), "{s:?}");
        // TTFT sorted 40 40 40 80 100: p99 at 3.96: 80 + 0.96 * 20 = 99.2.
        assert!(close(s.ttft_p99, 99.2), "{s:?}");
        assert_eq!(
            s.connect.to_json(),
            serde_json::json!({"p50": 0.0, "p99": 49.2, "mean": 16.0})
        );
    }

    #[test]
    fn no_known_connect_time_gives_no_stats() {
        let mut t = ConnectTally::default();
        t.add(&rec(None, 40));
        assert_eq!(t.stats(), None);
    }

    #[test]
    fn the_share_line_comes_over_ten_percent_of_ttft_p99() {
        let spread = |p99: f64| Spread {
            p50: 0.0,
            p99,
            mean: 0.0,
        };
        // Connect p99 49.2 of TTFT p99 99.2: 49.6%.
        let s = ConnectStats {
            connect: spread(49.2),
            ttft_after_connect: spread(50.0),
            ttft_p99: 99.2,
        };
        assert!(close(s.share().unwrap(), 49.2 / 99.2));
        let note = s.note().unwrap();
        assert!(note.starts_with("Connecting was 50% of TTFT"), "{note}");
        assert!(
            note.contains("connect p99 49.20 ms of TTFT p99 99.20 ms"),
            "{note}"
        );
        assert!(note.contains("Warmed keep-alive connections"), "{note}");
        // Exactly 10% is not over it; 10.1% is.
        let at = |c: f64| ConnectStats {
            connect: spread(c),
            ..s
        };
        assert_eq!(at(9.92).note(), None);
        assert!(at(10.1).note().is_some());
        // A TTFT p99 of 0 has no share.
        let zero = ConnectStats { ttft_p99: 0.0, ..s };
        assert_eq!(zero.share(), None);
        assert_eq!(zero.note(), None);
    }
}
