//! `--find-capacity`: an adaptive search for the highest concurrency that
//! meets the SLO. Double from 1 until a level fails the SLO or stops adding
//! throughput, then bisect between the last passing and the first failing
//! level until they are within 10% (or one stream). Pure: the driver feeds
//! it each probe's verdict and runs the concurrency it answers.

use super::decide::{meets_slo, CapacitySlo, LevelPoint, KNEE_MAX_GAIN};
use crate::record::{Mode, RequestRecord};
use crate::stats::summary::level_stats;

/// Doubling that adds less than this share of throughput has hit the knee:
/// the decision's own knee threshold, so the search stops where the sweep's
/// knee would be.
pub(crate) const MIN_DOUBLING_GAIN: f64 = KNEE_MAX_GAIN;

/// A small step must still gain this much: two runs of the same level
/// differ by a few percent, and a gain inside that says nothing.
pub(crate) const NOISE_FLOOR: f64 = 0.03;

/// Bisection stops when the bounds are this close (share of the lower one).
pub(crate) const RESOLUTION: f64 = 0.10;

/// What one probe level showed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ProbeResult {
    pub concurrency: u32,
    pub meets_slo: bool,
    pub output_throughput: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CapacitySearch {
    max: u32,
    /// Highest concurrency that met the SLO (and its throughput).
    pass: Option<ProbeResult>,
    /// Lowest concurrency that failed the SLO or added nothing.
    fail: Option<u32>,
    pub probes: Vec<ProbeResult>,
}

impl CapacitySearch {
    /// A search that never goes above `max` streams.
    pub(crate) fn new(max: u32) -> CapacitySearch {
        CapacitySearch {
            max: max.max(1),
            pass: None,
            fail: None,
            probes: Vec::new(),
        }
    }

    pub(crate) fn first(&self) -> u32 {
        1
    }

    /// The bounds found so far: (highest passing, lowest failing).
    pub(crate) fn bounds(&self) -> (Option<u32>, Option<u32>) {
        (self.pass.map(|p| p.concurrency), self.fail)
    }

    /// Take a probe's result; the next concurrency to run, or None when the
    /// search is over.
    pub(crate) fn observe(&mut self, result: ProbeResult) -> Option<u32> {
        self.probes.push(result);
        let c = result.concurrency;
        let passed = result.meets_slo && self.adds_throughput(&result);
        if passed {
            if self.pass.is_none_or(|p| c > p.concurrency) {
                self.pass = Some(result);
            }
            if self.fail.is_none() {
                // Still doubling.
                return (c < self.max).then(|| c.saturating_mul(2).min(self.max));
            }
        } else if self.fail.is_none_or(|f| c < f) {
            self.fail = Some(c);
        }
        self.next_bisection()
    }

    /// More streams must buy throughput: at least MIN_DOUBLING_GAIN per
    /// doubling (the decision's knee threshold), pro rata for smaller steps. Past the knee they buy
    /// only queueing, whatever the SLO says.
    fn adds_throughput(&self, result: &ProbeResult) -> bool {
        let Some(pass) = self.pass else { return true };
        if result.concurrency <= pass.concurrency {
            return true;
        }
        // Per doubling, as the knee of the decision is judged: a step of 1.5x
        // needs 1.1^0.585 = 5.7% more.
        let doublings = (f64::from(result.concurrency) / f64::from(pass.concurrency)).log2();
        let due = ((1.0 + MIN_DOUBLING_GAIN).powf(doublings) - 1.0).max(NOISE_FLOOR);
        result.output_throughput >= pass.output_throughput * (1.0 + due)
    }

    fn next_bisection(&self) -> Option<u32> {
        let lo = self.pass?.concurrency;
        let hi = self.fail?;
        let step = ((f64::from(lo) * RESOLUTION).floor() as u32).max(1);
        if hi <= lo.saturating_add(step) {
            return None;
        }
        Some(lo + (hi - lo) / 2)
    }
}

/// `--find-capacity`'s whole judgement, as the driver calls it: where to
/// start, and after each probe (its records), whether it met the SLO and
/// bought throughput, and what to probe next. The driver only runs the
/// levels; what counts as passing lives here, beside the decision's own
/// SLO checks.
#[derive(Clone, Debug)]
pub(crate) struct CapacityPolicy {
    search: CapacitySearch,
    slo: CapacitySlo,
}

impl CapacityPolicy {
    pub(crate) fn new(max_concurrency: u32, slo: CapacitySlo) -> CapacityPolicy {
        CapacityPolicy {
            search: CapacitySearch::new(max_concurrency),
            slo,
        }
    }

    /// The first probe's concurrency.
    pub(crate) fn first(&self) -> u32 {
        self.search.first()
    }

    /// Judge a finished probe from its records; the next concurrency to
    /// probe, or None when the search is over.
    pub(crate) fn judge(
        &mut self,
        concurrency: u32,
        partial: bool,
        records: &[RequestRecord],
    ) -> Option<u32> {
        let stats = level_stats(records, concurrency, &[50.0, 99.0]);
        let point = LevelPoint::from_stats(concurrency, Mode::Search, partial, &stats);
        self.search.observe(ProbeResult {
            concurrency,
            meets_slo: meets_slo(&point, &self.slo),
            output_throughput: stats.output_throughput,
        })
    }

    /// (highest passing, lowest failing) so far.
    pub(crate) fn bounds(&self) -> (Option<u32>, Option<u32>) {
        self.search.bounds()
    }

    /// Forget every probe: a new series searches again from the start.
    pub(crate) fn restart(&mut self) {
        self.search = CapacitySearch::new(self.search.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose throughput rises linearly to `knee` streams (10 tok/s
    /// each) and is flat after; the SLO holds up to `slo_max` streams.
    fn run(knee: u32, slo_max: u32, max: u32) -> (Vec<u32>, Option<u32>) {
        let mut search = CapacitySearch::new(max);
        let mut c = search.first();
        let mut seen = vec![c];
        loop {
            let result = ProbeResult {
                concurrency: c,
                meets_slo: c <= slo_max,
                output_throughput: 10.0 * f64::from(c.min(knee)),
            };
            match search.observe(result) {
                Some(next) => {
                    c = next;
                    seen.push(c);
                }
                None => return (seen, search.bounds().0),
            }
        }
    }

    /// `n` answers of 20 tokens, one after another, each 500 ms with its
    /// first token at `ttft_ms`; the first `failed` of them failed.
    fn probe(n: u64, ttft_ms: u64, failed: u64) -> Vec<RequestRecord> {
        use crate::record::{ErrorClass, Outcome};
        use std::time::Duration;
        (0..n)
            .map(|i| {
                let mut r = RequestRecord::empty(i, 0);
                r.start = Duration::from_millis(500 * i);
                r.end = r.start + Duration::from_millis(500);
                if i < failed {
                    r.outcome = Outcome::Failed(ErrorClass::Http(500));
                    return r;
                }
                r.ttft = Some(Duration::from_millis(ttft_ms));
                r.e2el = Some(Duration::from_millis(500));
                r.tpot = Some(Duration::from_millis((500 - ttft_ms) / 19));
                r.output_tokens = 20;
                r
            })
            .collect()
    }

    fn slo() -> CapacitySlo {
        CapacitySlo {
            ttft_p99_ms: Some(100.0),
            min_stream_tok_s: None,
            tpot_p99_ms: None,
            max_error_rate: 0.01,
        }
    }

    #[test]
    fn the_policy_judges_a_probe_by_its_records() {
        let mut policy = CapacityPolicy::new(64, slo());
        assert_eq!(policy.first(), 1);
        // TTFT within the SLO: passes, so the search doubles.
        assert_eq!(policy.judge(1, false, &probe(10, 50, 0)), Some(2));
        // TTFT over it: fails, and between 1 and 2 there is nothing to bisect.
        assert_eq!(policy.judge(2, false, &probe(10, 200, 0)), None);
        assert_eq!(policy.bounds(), (Some(1), Some(2)));
        policy.restart();
        assert_eq!(policy.bounds(), (None, None));
        // One failure in ten breaks the 1% error budget, fast as it is.
        assert_eq!(policy.judge(1, false, &probe(10, 50, 1)), None);
        assert_eq!(policy.bounds(), (None, Some(1)));
    }

    #[test]
    fn slo_bound_found_by_doubling_then_bisecting() {
        // SLO holds to 40: 1..32 pass, 64 fails; bisect 32..64 -> 48 fails,
        // 32..48 -> 40 passes, 40..48 -> 44 fails; 44 <= 40 + 4 (10% of 40): done.
        let (seen, found) = run(1000, 40, 4096);
        assert_eq!(seen, vec![1, 2, 4, 8, 16, 32, 64, 48, 40, 44]);
        assert_eq!(found, Some(40));
    }

    #[test]
    fn flat_throughput_ends_doubling() {
        // Knee at 64, SLO never binding: 1..64 double throughput, 128 adds
        // nothing (fails); 96 adds 0% where 5% was due (fails), 80 and 72
        // fail; 72 > 64 + 6 (10% of 64, floored) so 68 fails; 68 <= 70: done at 64.
        let (seen, found) = run(64, 10_000, 4096);
        assert_eq!(seen, vec![1, 2, 4, 8, 16, 32, 64, 128, 96, 80, 72, 68]);
        assert_eq!(found, Some(64));
    }

    #[test]
    fn nothing_passes_and_max_caps() {
        let (seen, found) = run(100, 0, 4096);
        assert_eq!(seen, vec![1]);
        assert_eq!(found, None);
        let (seen, found) = run(1000, 1000, 8);
        assert_eq!(seen, vec![1, 2, 4, 8]);
        assert_eq!(found, Some(8));
    }
}
