//! A replayed or ramped level second by second: how many requests were
//! offered (due by the schedule), sent, completed and failed in each second
//! of the level, and the p99 TTFT of those due in it. The second where p99
//! TTFT first failed is where the server broke: with a TTFT SLO, the first
//! second over it; without one, the first over three times the best of the
//! level's first quarter.
//!
//! Folded request by request: a second keeps the TTFTs of its requests
//! (at most [`KEPT_PER_SECOND`]) and counts.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fmt::round3;
use crate::record::RequestRecord;

/// TTFTs kept per second for its p99; past it the second counts only.
const KEPT_PER_SECOND: usize = 100_000;

/// Seconds a level may span (a longer trace keeps its first day).
const MAX_SECONDS: usize = 86_400;

#[derive(Clone, Debug, Default, PartialEq)]
struct Second {
    offered: u32,
    sent: u32,
    completed: u32,
    failed: u32,
    ttft_ms: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RateSeries {
    /// The level's start on the run's clock: second 0 begins here.
    from: Duration,
    seconds: Vec<Second>,
}

/// Where the level broke, and by what rule.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Break {
    pub second: usize,
    pub ttft_p99_ms: f64,
    pub limit_ms: f64,
    /// `slo`: over `--slo-ttft-p99-ms`; `baseline`: over 3x the best
    /// second of the level's first quarter.
    pub rule: &'static str,
}

impl RateSeries {
    pub(crate) fn starting_at(from: Duration) -> RateSeries {
        RateSeries {
            from,
            seconds: Vec::new(),
        }
    }

    fn second(&mut self, at: Duration) -> Option<&mut Second> {
        let k = at.saturating_sub(self.from).as_secs() as usize;
        if k >= MAX_SECONDS {
            return None;
        }
        if k >= self.seconds.len() {
            self.seconds.resize(k + 1, Second::default());
        }
        self.seconds.get_mut(k)
    }

    /// Count one of the level's requests: due at `start` (open-loop
    /// timings count from the intended time), sent `send_lag` after it.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let sent_at = r.start + r.send_lag.unwrap_or_default();
        if let Some(s) = self.second(r.start) {
            s.offered += 1;
            if let (true, Some(ttft)) = (r.is_ok(), r.ttft) {
                if s.ttft_ms.len() < KEPT_PER_SECOND {
                    s.ttft_ms.push(ttft.as_secs_f64() * 1000.0);
                }
            }
        }
        if let Some(s) = self.second(sent_at) {
            s.sent += 1;
        }
        let ok = r.is_ok();
        if let Some(s) = self.second(r.end) {
            if ok {
                s.completed += 1;
            } else {
                s.failed += 1;
            }
        }
    }

    /// Seconds counted so far, from second 0.
    pub(crate) fn seconds_counted(&self) -> usize {
        self.seconds.len()
    }

    /// Requests that finished in second `k` (completed, failed): the
    /// achieved rate of that second once it is over.
    pub(crate) fn finished_in(&self, k: usize) -> (u32, u32) {
        self.seconds
            .get(k)
            .map_or((0, 0), |s| (s.completed, s.failed))
    }

    /// Where second 0 begins on the run's clock.
    pub(crate) fn from(&self) -> Duration {
        self.from
    }

    /// Each second's p99 TTFT (numpy's, as every saved percentile), None
    /// for a second without one.
    fn p99s(&self) -> Vec<Option<f64>> {
        self.seconds
            .iter()
            .map(|s| {
                let mut v = s.ttft_ms.clone();
                v.sort_by(f64::total_cmp);
                crate::stats::percentile::percentile_sorted(&v, 99.0)
            })
            .collect()
    }

    /// The first second whose p99 TTFT is over the SLO, or without one over
    /// three times the best p99 of the first quarter of the seconds.
    pub(crate) fn broke(&self, slo_ttft_p99_ms: Option<f64>) -> Option<Break> {
        let p99s = self.p99s();
        let (limit, rule) = match slo_ttft_p99_ms {
            Some(slo) => (slo, "slo"),
            None => {
                let quarter = p99s.len().div_ceil(4).max(1);
                let best = p99s[..quarter.min(p99s.len())]
                    .iter()
                    .flatten()
                    .copied()
                    .reduce(f64::min)?;
                (3.0 * best, "baseline")
            }
        };
        p99s.iter().enumerate().find_map(|(second, p)| {
            let p = (*p)?;
            (p > limit).then_some(Break {
                second,
                ttft_p99_ms: p,
                limit_ms: limit,
                rule,
            })
        })
    }

    /// The level file's `rate_series`: every second, and where it broke
    /// with the rate offered then (`rate_at`, the ramp's rate in the middle
    /// of that second, else the requests due in it).
    pub(crate) fn to_json(
        &self,
        slo_ttft_p99_ms: Option<f64>,
        rate_at: Option<&dyn Fn(f64) -> f64>,
    ) -> Value {
        let p99s = self.p99s();
        let seconds: Vec<Value> = self
            .seconds
            .iter()
            .zip(&p99s)
            .enumerate()
            .map(|(t, (s, p))| {
                json!({
                    "t": t,
                    "offered": s.offered,
                    "sent": s.sent,
                    "completed": s.completed,
                    "failed": s.failed,
                    "ttft_p99_ms": p.map(round3),
                })
            })
            .collect();
        let broke = self.broke(slo_ttft_p99_ms).map(|b| {
            let offered = match rate_at {
                Some(rate) => rate(b.second as f64 + 0.5),
                None => f64::from(self.seconds[b.second].offered),
            };
            json!({
                "second": b.second,
                "offered_rate": round3(offered),
                "ttft_p99_ms": round3(b.ttft_p99_ms),
                "limit_ms": round3(b.limit_ms),
                "rule": b.rule,
            })
        });
        json!({"seconds": seconds, "broke_at": broke})
    }
}

/// A saved `rate_series`' break in words: `second 3 at 12.5 req/s offered
/// (p99 TTFT 257 ms over 50 ms, the SLO)`; None where it never broke.
pub(crate) fn broke_text(series: &Value) -> Option<String> {
    let b = series.get("broke_at").filter(|b| !b.is_null())?;
    Some(format!(
        "second {} at {} req/s offered (p99 TTFT {:.0} ms over {:.0} ms{})",
        b["second"],
        b["offered_rate"]
            .as_f64()
            .map_or_else(|| "?".into(), |r| format!("{r:.1}")),
        b["ttft_p99_ms"].as_f64().unwrap_or(0.0),
        b["limit_ms"].as_f64().unwrap_or(0.0),
        if b["rule"] == "slo" {
            ", the SLO"
        } else {
            ", 3x the first seconds' best"
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(start_ms: u64, lag_ms: u64, ttft_ms: u64, end_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::empty(1, 0);
        r.start = Duration::from_millis(start_ms);
        r.send_lag = Some(Duration::from_millis(lag_ms));
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.end = Duration::from_millis(end_ms);
        r.output_tokens = 4;
        r
    }

    /// A level from 10 s on. Second 0 (10.0-11.0 s): two due (10.2, 10.9),
    /// the second sent 200 ms late (at 11.1, in second 1), TTFTs 20 and 30;
    /// second 1: one due at 11.5, TTFT 40; second 2: two due at 12.1 and
    /// 12.6, TTFTs 200 and 300. p99s (numpy's: a + 0.99 (b - a)): 29.9,
    /// 40, 299. With an SLO of 100 ms it broke in second 2; without one,
    /// the first quarter of the 4 seconds is second 0 (best 29.9), three
    /// times that is 89.7: second 2 again.
    #[test]
    fn seconds_counted_and_the_break_found_by_hand() {
        let mut s = RateSeries::starting_at(Duration::from_secs(10));
        for r in [
            rec(10_200, 0, 20, 10_300),
            rec(10_900, 200, 30, 11_200),
            rec(11_500, 0, 40, 11_700),
            rec(12_100, 0, 200, 12_400),
            rec(12_600, 0, 300, 13_100),
        ] {
            s.add(&r);
        }
        let j = s.to_json(Some(100.0), None);
        let col = |k: &str| -> Vec<u64> {
            j["seconds"]
                .as_array()
                .expect("seconds")
                .iter()
                .map(|x| x[k].as_u64().unwrap_or(0))
                .collect()
        };
        assert_eq!(col("offered"), vec![1 + 1, 1, 2, 0]);
        assert_eq!(col("sent"), vec![1, 2, 2, 0]);
        assert_eq!(col("completed"), vec![1, 2, 1, 1]);
        assert_eq!(j["seconds"][2]["ttft_p99_ms"], 299.0);
        assert_eq!(j["broke_at"]["second"], 2);
        assert_eq!(j["broke_at"]["offered_rate"], 2.0);
        assert_eq!(j["broke_at"]["rule"], "slo");
        let b = s.broke(None).expect("breaks");
        assert_eq!((b.second, b.rule), (2, "baseline"));
        assert!((b.limit_ms - 89.7).abs() < 1e-9, "{b:?}");
        // The ramp's own rate at 2.5 s when it has one.
        let ramp = |t: f64| 2.0 + 3.0 * t;
        let j = s.to_json(Some(100.0), Some(&ramp));
        assert_eq!(j["broke_at"]["offered_rate"], 9.5);
        // Never over the SLO: no break.
        assert_eq!(s.broke(Some(1000.0)), None);
    }
}
