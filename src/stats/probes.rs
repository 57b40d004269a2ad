//! A level's probe requests (`--probe-rate`) folded into their own
//! distribution: what a new user arriving during the level waited for.
//! Never mixed into the level's figures (its throughput, TTFT, counts,
//! capacity, knee); the server's own account check adds them to the
//! client's side, because the server counts them too.

use crate::record::{Outcome, RequestRecord};
use crate::stats::hdr::{Samples, EXACT_CAP};

/// A level's probes as they come back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProbeTally {
    /// Probes that came back, however (a Stop's cancelled ones are not).
    sent: u64,
    failed: u64,
    /// Send lateness against the schedule, ms.
    lateness_ms: Samples,
    /// Of the probes that succeeded.
    ttft_ms: Samples,
    e2el_ms: Samples,
    input_tokens: u64,
    output_tokens: u64,
}

impl Default for ProbeTally {
    fn default() -> Self {
        ProbeTally {
            sent: 0,
            failed: 0,
            lateness_ms: Samples::latency_ms(EXACT_CAP),
            ttft_ms: Samples::latency_ms(EXACT_CAP),
            e2el_ms: Samples::latency_ms(EXACT_CAP),
            input_tokens: 0,
            output_tokens: 0,
        }
    }
}

/// p50, p99 and mean of one probe metric, ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ProbeLatency {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    /// Samples it is over.
    pub count: u64,
}

/// A level's probes, summed up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ProbeStats {
    /// Probes sent that came back (ok or failed).
    pub count: u64,
    pub failed: u64,
    /// Send lateness against the schedule, p99, ms.
    pub lateness_p99_ms: Option<f64>,
    pub ttft: Option<ProbeLatency>,
    pub e2el: Option<ProbeLatency>,
    /// Of the probes that succeeded: what the server's token counters
    /// hold of them.
    pub ok: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl ProbeTally {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        match r.outcome {
            // A Stop's: the probe was not let finish, which says nothing
            // of the server.
            Outcome::Cancelled => return,
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Ok => {
                if let Some(ttft) = r.ttft {
                    self.ttft_ms.add(ms(ttft));
                }
                if let Some(e2el) = r.e2el {
                    self.e2el_ms.add(ms(e2el));
                }
                self.input_tokens += u64::from(r.input_tokens());
                self.output_tokens += u64::from(r.output_tokens);
            }
        }
        self.sent += 1;
        if let Some(lag) = r.send_lag {
            self.lateness_ms.add(ms(lag));
        }
    }

    /// None when no probe came back in the level.
    pub(crate) fn stats(&self) -> Option<ProbeStats> {
        if self.sent == 0 {
            return None;
        }
        let latency = |s: &Samples| {
            Some(ProbeLatency {
                p50: s.percentile(50.0)?,
                p99: s.percentile(99.0)?,
                mean: s.mean()?,
                count: s.len(),
            })
        };
        Some(ProbeStats {
            count: self.sent,
            failed: self.failed,
            lateness_p99_ms: self.lateness_ms.percentile(99.0),
            ttft: latency(&self.ttft_ms),
            e2el: latency(&self.e2el_ms),
            ok: self.sent - self.failed,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ErrorClass;
    use std::time::Duration;

    fn probe(lag_ms: u64, ttft_ms: u64, e2el_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::empty(0, 0);
        r.outcome = Outcome::Ok;
        r.send_lag = Some(Duration::from_millis(lag_ms));
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.e2el = Some(Duration::from_millis(e2el_ms));
        r.input_tokens_target = 32;
        r.output_tokens = 1;
        r
    }

    #[test]
    fn probes_folded_by_hand() {
        let mut t = ProbeTally::default();
        assert_eq!(t.stats(), None);
        // Five probes that answered, one 503, one cancelled by a Stop.
        for (lag, ttft, e2el) in [
            (1, 10, 12),
            (0, 20, 22),
            (2, 30, 33),
            (1, 40, 41),
            (3, 100, 110),
        ] {
            t.add(&probe(lag, ttft, e2el));
        }
        let mut failed = probe(9, 0, 0);
        failed.outcome = Outcome::Failed(ErrorClass::Http(503));
        failed.ttft = None;
        failed.e2el = None;
        t.add(&failed);
        let mut cancelled = probe(50, 0, 0);
        cancelled.outcome = Outcome::Cancelled;
        t.add(&cancelled);

        let s = t.stats().expect("probes came back");
        assert_eq!((s.count, s.failed, s.ok), (6, 1, 5));
        // numpy-linear over the five TTFTs 10, 20, 30, 40, 100:
        // p50: rank 0.5 x 4 = 2, the third: 30.
        // p99: rank 0.99 x 4 = 3.96, 40 + 0.96 x (100 - 40) = 97.6.
        // mean: 200 / 5 = 40.
        let ttft = s.ttft.expect("ttft");
        assert!((ttft.p50 - 30.0).abs() < 1e-9, "{ttft:?}");
        assert!((ttft.p99 - 97.6).abs() < 1e-9, "{ttft:?}");
        assert!((ttft.mean - 40.0).abs() < 1e-9, "{ttft:?}");
        // E2EL 12, 22, 33, 41, 110: p50 33; p99 41 + 0.96 x 69 = 107.24.
        let e2el = s.e2el.expect("e2el");
        assert!((e2el.p50 - 33.0).abs() < 1e-9, "{e2el:?}");
        assert!((e2el.p99 - 107.24).abs() < 1e-9, "{e2el:?}");
        // Lateness over the six that came back, the failed one's too:
        // 0, 1, 1, 2, 3, 9; p99: rank 4.95, 3 + 0.95 x 6 = 8.7.
        let lateness = s.lateness_p99_ms.expect("lateness");
        assert!((lateness - 8.7).abs() < 1e-9, "{lateness}");
        // What the server counted of them: five answers of 32 in, 1 out.
        assert_eq!((s.input_tokens, s.output_tokens), (160, 5));
    }
}
