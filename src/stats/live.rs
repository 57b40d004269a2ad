//! A sliding window of recent latency samples for the live view.
//!
//! Samples (microseconds) go into one-second buckets keyed by the run-relative
//! time the caller gives; only the last `window_secs` seconds are kept, so
//! memory is bounded whatever the run length. Each bucket holds two
//! hdrhistograms (TTFT, ITL) at 2 significant digits (values within 1%), and
//! the window keeps a running merge of them so window-wide quantiles cost one
//! histogram scan, not one per bucket.
//!
//! Pure: no clock. The caller says what time it is (`advance`) and when each
//! sample belongs (`record_*`). Result files never use these figures; they
//! are computed from raw samples (see `summary`).

use std::collections::VecDeque;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::record::RequestRecord;

/// The window the live view shows by default: one minute.
pub(crate) const DEFAULT_WINDOW_SECS: usize = 60;

/// Largest value tracked, in microseconds (one hour); larger ones are
/// recorded as this.
const HIGHEST_US: u64 = 3_600_000_000;
/// Significant digits kept: 2 -> each histogram is ~26 KiB.
const SIGFIG: u8 = 2;

// Constant, valid bounds (1 <= 3.6e9, 2 significant digits): this
// cannot fail, and a fallible signature would spread to every caller.
#[allow(clippy::expect_used)]
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_US, SIGFIG).expect("constant histogram bounds are valid")
}

/// Median and 99th percentile of some samples, in microseconds, as
/// hdrhistogram reports them (the highest value equivalent to the sample at
/// that rank, so within 1% above the true sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quantiles {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

impl Quantiles {
    fn of(h: &Histogram<u64>) -> Option<Quantiles> {
        (!h.is_empty()).then(|| Quantiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
        })
    }
}

/// One second of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SecondStats {
    /// Whole seconds since the run started.
    pub second: u64,
    pub ttft: Option<Quantiles>,
    pub itl: Option<Quantiles>,
    pub output_tokens: u64,
}

struct Bucket {
    second: u64,
    ttft: Histogram<u64>,
    itl: Histogram<u64>,
    output_tokens: u64,
}

/// The last `window_secs` one-second buckets of TTFT and ITL samples and
/// output token counts.
pub(crate) struct LiveWindow {
    window_secs: u64,
    /// The newest second seen (by `advance` or a sample).
    now_sec: u64,
    /// Buckets that got at least one sample, oldest first; seconds without
    /// samples have no bucket.
    buckets: VecDeque<Bucket>,
    /// Merge of every bucket's histograms, kept in step on record and evict.
    ttft_all: Histogram<u64>,
    itl_all: Histogram<u64>,
}

impl Default for LiveWindow {
    fn default() -> Self {
        LiveWindow::new(DEFAULT_WINDOW_SECS)
    }
}

/// The two latencies kept per second.
#[derive(Clone, Copy)]
enum Latency {
    Ttft,
    Itl,
}

impl LiveWindow {
    /// A window of the last `window_secs` seconds (at least 1).
    pub(crate) fn new(window_secs: usize) -> LiveWindow {
        LiveWindow {
            window_secs: window_secs.max(1) as u64,
            now_sec: 0,
            buckets: VecDeque::new(),
            ttft_all: new_histogram(),
            itl_all: new_histogram(),
        }
    }

    /// The current second (the newest seen).
    pub(crate) fn now_sec(&self) -> u64 {
        self.now_sec
    }

    /// First second still inside the window.
    fn oldest_kept(&self) -> u64 {
        (self.now_sec + 1).saturating_sub(self.window_secs)
    }

    /// Moves the window's end to `now` (run-relative) and drops the buckets
    /// that fell out. Time never goes back: an earlier `now` does nothing.
    pub(crate) fn advance(&mut self, now: Duration) {
        let sec = now.as_secs();
        if sec <= self.now_sec {
            return;
        }
        self.now_sec = sec;
        let oldest = self.oldest_kept();
        while self.buckets.front().is_some_and(|b| b.second < oldest) {
            if let Some(b) = self.buckets.pop_front() {
                let ok_ttft = self.ttft_all.subtract(&b.ttft).is_ok();
                let ok_itl = self.itl_all.subtract(&b.itl).is_ok();
                if !(ok_ttft && ok_itl) {
                    // Cannot happen (each bucket was added to the merge), but
                    // if it did, rebuilding keeps the merge right.
                    self.rebuild_merge();
                }
            }
        }
    }

    fn rebuild_merge(&mut self) {
        self.ttft_all.reset();
        self.itl_all.reset();
        for b in &self.buckets {
            // Same bounds everywhere: adding cannot fail.
            let _ = self.ttft_all.add(&b.ttft);
            let _ = self.itl_all.add(&b.itl);
        }
    }

    /// The bucket for `at`, created if needed; `None` when `at` is older than
    /// the window (the sample is dropped). A later `at` advances the window.
    fn bucket(&mut self, at: Duration) -> Option<&mut Bucket> {
        self.advance(at);
        let sec = at.as_secs();
        if sec < self.oldest_kept() {
            return None;
        }
        let idx = self.buckets.partition_point(|b| b.second < sec);
        if self.buckets.get(idx).map(|b| b.second) != Some(sec) {
            self.buckets.insert(
                idx,
                Bucket {
                    second: sec,
                    ttft: new_histogram(),
                    itl: new_histogram(),
                    output_tokens: 0,
                },
            );
        }
        self.buckets.get_mut(idx)
    }

    /// Records a TTFT sample of `value_us` microseconds in the second of `at`.
    /// Returns false when `at` was older than the window and the sample was dropped.
    pub(crate) fn record_ttft(&mut self, at: Duration, value_us: u64) -> bool {
        self.record_latency(at, value_us, Latency::Ttft)
    }

    /// Records an ITL sample of `value_us` microseconds in the second of `at`.
    /// Returns false when `at` was older than the window and the sample was dropped.
    pub(crate) fn record_itl(&mut self, at: Duration, value_us: u64) -> bool {
        self.record_latency(at, value_us, Latency::Itl)
    }

    /// A latency sample goes into its second's histogram and the window's.
    fn record_latency(&mut self, at: Duration, value_us: u64, which: Latency) -> bool {
        let Some(bucket) = self.bucket(at) else {
            return false;
        };
        match which {
            Latency::Ttft => bucket.ttft.saturating_record(value_us),
            Latency::Itl => bucket.itl.saturating_record(value_us),
        }
        match which {
            Latency::Ttft => self.ttft_all.saturating_record(value_us),
            Latency::Itl => self.itl_all.saturating_record(value_us),
        }
        true
    }

    /// Adds `tokens` output tokens to the second of `at`.
    /// Returns false when `at` was older than the window and they were dropped.
    pub(crate) fn record_output_tokens(&mut self, at: Duration, tokens: u64) -> bool {
        match self.bucket(at) {
            Some(b) => {
                b.output_tokens = b.output_tokens.saturating_add(tokens);
                true
            }
            None => false,
        }
    }

    /// Records a finished request at the second it ended (`rec.end`): its
    /// TTFT, its ITL samples and its output tokens. Only completed requests
    /// count, as in the saved statistics. Output tokens are credited when the
    /// request ends (records arrive then), so per-second token counts are
    /// lumpy at low concurrency; the windowed rate smooths them.
    pub(crate) fn record_request(&mut self, rec: &RequestRecord) {
        if !rec.is_ok() {
            return;
        }
        let at = rec.end;
        if let Some(ttft) = rec.ttft {
            self.record_ttft(at, duration_us(ttft));
        }
        for &ms in &rec.itl_ms {
            if let Some(us) = ms_to_us(ms) {
                self.record_itl(at, us);
            }
        }
        self.record_output_tokens(at, u64::from(rec.output_tokens));
    }

    /// TTFT quantiles merged over the whole window; `None` with no samples.
    pub(crate) fn ttft(&self) -> Option<Quantiles> {
        Quantiles::of(&self.ttft_all)
    }

    /// ITL quantiles merged over the whole window; `None` with no samples.
    pub(crate) fn itl(&self) -> Option<Quantiles> {
        Quantiles::of(&self.itl_all)
    }

    /// Every second of the window, oldest first, ending at the current
    /// second; seconds without samples have `None` quantiles and 0 tokens.
    pub(crate) fn seconds(&self) -> Vec<SecondStats> {
        let mut out = Vec::with_capacity(self.window_secs as usize);
        let mut it = self.buckets.iter().peekable();
        for second in self.oldest_kept()..=self.now_sec {
            match it.next_if(|b| b.second == second) {
                Some(b) => out.push(SecondStats {
                    second,
                    ttft: Quantiles::of(&b.ttft),
                    itl: Quantiles::of(&b.itl),
                    output_tokens: b.output_tokens,
                }),
                None => out.push(SecondStats {
                    second,
                    ttft: None,
                    itl: None,
                    output_tokens: 0,
                }),
            }
        }
        out
    }

    /// Output tokens per second averaged over the last `secs` COMPLETE
    /// seconds (the current second is still filling and is left out). Fewer
    /// seconds are used when the run or the window is shorter; 0.0 during
    /// the run's first second.
    pub(crate) fn output_tok_s(&self, secs: u64) -> f64 {
        let span = secs
            .min(self.window_secs.saturating_sub(1))
            .min(self.now_sec);
        if span == 0 {
            return 0.0;
        }
        let from = self.now_sec - span;
        let tokens: u64 = self
            .buckets
            .iter()
            .filter(|b| b.second >= from && b.second < self.now_sec)
            .map(|b| b.output_tokens)
            .sum();
        tokens as f64 / span as f64
    }
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Milliseconds to whole microseconds; `None` for NaN, infinities and
/// negatives.
fn ms_to_us(ms: f64) -> Option<u64> {
    let us = (ms * 1000.0).round();
    // `as` saturates at u64::MAX for huge finite values.
    (us.is_finite() && us >= 0.0).then_some(us as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn empty_window() {
        let w = LiveWindow::new(60);
        assert_eq!(w.ttft(), None);
        assert_eq!(w.itl(), None);
        assert_eq!(w.output_tok_s(10), 0.0);
        // Second 0 only, empty.
        assert_eq!(
            w.seconds(),
            [SecondStats {
                second: 0,
                ttft: None,
                itl: None,
                output_tokens: 0
            }]
        );
    }

    #[test]
    fn per_second_and_merged_quantiles() {
        // Values under 256 us are exact at 2 significant digits.
        // Second 0: ITL 100, 200. Second 2: ITL 50, 60, 70, 80.
        let mut w = LiveWindow::new(60);
        for v in [100, 200] {
            assert!(w.record_itl(s(0.3), v));
        }
        for v in [50, 60, 70, 80] {
            assert!(w.record_itl(s(2.9), v));
        }
        let secs = w.seconds();
        assert_eq!(secs.len(), 3); // seconds 0, 1, 2
                                   // Second 0: nearest rank: p50 = ceil(0.5*2) = 1st = 100; p99 = ceil(1.98) = 2nd = 200.
        assert_eq!(
            secs[0].itl,
            Some(Quantiles {
                count: 2,
                p50_us: 100,
                p99_us: 200
            })
        );
        assert_eq!(secs[1].itl, None);
        // Second 2: p50 = 2nd of 4 = 60; p99 = ceil(3.96) = 4th = 80.
        assert_eq!(
            secs[2].itl,
            Some(Quantiles {
                count: 4,
                p50_us: 60,
                p99_us: 80
            })
        );
        // Merged [50, 60, 70, 80, 100, 200]: p50 = 3rd = 70; p99 = ceil(5.94) = 6th = 200.
        assert_eq!(
            w.itl(),
            Some(Quantiles {
                count: 6,
                p50_us: 70,
                p99_us: 200
            })
        );
        assert_eq!(w.ttft(), None);
    }

    #[test]
    fn large_values_are_within_one_percent() {
        // 10_000 us at 2 significant digits: the range 8192..16383 has a
        // resolution of 64, so 10_000 lies in [9984, 10047] and reads as 10047.
        let mut w = LiveWindow::new(60);
        w.record_ttft(s(0.0), 10_000);
        let q = w.ttft().unwrap();
        assert_eq!((q.p50_us, q.p99_us), (10_047, 10_047));
        // Beyond an hour saturates at the top instead of failing.
        w.record_ttft(s(0.0), u64::MAX);
        assert!(w.ttft().unwrap().p99_us >= HIGHEST_US);
    }

    #[test]
    fn old_buckets_fall_out_of_the_window() {
        // Window of 3 s. ITL 10 at second 0, 20 at second 1, 30 at second 3.
        let mut w = LiveWindow::new(3);
        w.record_itl(s(0.5), 10);
        w.record_itl(s(1.5), 20);
        assert_eq!(w.itl().unwrap().count, 2);
        // At second 3 the window is seconds 1..=3: second 0 is evicted.
        w.record_itl(s(3.1), 30);
        let secs: Vec<u64> = w.seconds().iter().map(|x| x.second).collect();
        assert_eq!(secs, [1, 2, 3]);
        // Merged [20, 30]: p50 = 1st = 20; p99 = 2nd = 30.
        assert_eq!(
            w.itl(),
            Some(Quantiles {
                count: 2,
                p50_us: 20,
                p99_us: 30
            })
        );
        // A sample for second 0 is now too old: dropped.
        assert!(!w.record_itl(s(0.9), 99));
        // One for second 2 (inside, no bucket yet) is kept, in order.
        assert!(w.record_itl(s(2.0), 25));
        assert_eq!(w.seconds()[1].itl.unwrap().p50_us, 25);
        // Advancing far empties it, and memory with it.
        w.advance(s(100.0));
        assert_eq!(w.itl(), None);
        assert!(w.buckets.is_empty());
        // Going back in time does nothing.
        w.advance(s(50.0));
        assert_eq!(w.now_sec(), 100);
    }

    #[test]
    fn buckets_stay_bounded() {
        // One sample a second for 10 minutes into a 60 s window: at most
        // 60 buckets, and the merge holds exactly the last 60 samples.
        let mut w = LiveWindow::new(60);
        for sec in 0..600u64 {
            w.record_ttft(Duration::from_secs(sec), 100);
        }
        assert!(w.buckets.len() <= 60);
        assert_eq!(w.ttft().unwrap().count, 60);
        assert_eq!(w.seconds().len(), 60);
    }

    #[test]
    fn output_tokens_per_second() {
        // Tokens: 100 in second 0, 300 in second 1, 50 in second 2 (current).
        let mut w = LiveWindow::new(60);
        w.record_output_tokens(s(0.2), 100);
        w.record_output_tokens(s(1.2), 200);
        w.record_output_tokens(s(1.8), 100);
        w.record_output_tokens(s(2.1), 50);
        // Complete seconds are 0 and 1. Last 1: 300 / 1 = 300.
        assert_eq!(w.output_tok_s(1), 300.0);
        // Last 10: only 2 seconds exist -> (100 + 300) / 2 = 200.
        assert_eq!(w.output_tok_s(10), 200.0);
        assert_eq!(w.seconds()[2].output_tokens, 50);
    }

    #[test]
    fn records_feed_the_window() {
        // A completed request ending at 1.5 s: TTFT 120 ms, ITL 20 and 30.5 ms,
        // 3 tokens. A failed one is ignored.
        let mut rec = RequestRecord::empty(0, 0);
        rec.end = s(1.5);
        rec.ttft = Some(Duration::from_millis(120));
        rec.itl_ms = vec![20.0, 30.5, f64::NAN];
        rec.output_tokens = 3;
        let mut w = LiveWindow::new(60);
        w.record_request(&rec);
        let mut bad = rec.clone();
        bad.outcome = crate::record::Outcome::Failed(crate::record::ErrorClass::Timeout);
        w.record_request(&bad);

        // 120_000 us: range 65536..131071 has resolution 512;
        // 120_000 / 512 = 234.375 -> [119_808, 120_319] -> reads 120_319.
        assert_eq!(w.ttft().unwrap().count, 1);
        assert_eq!(w.ttft().unwrap().p50_us, 120_319);
        // ITL 20_000 us: range 16384..32767, resolution 128;
        // 20_000 / 128 = 156.25 -> [19_968, 20_095] -> 20_095.
        // 30_500 us: 30_500 / 128 = 238.28 -> [30_464, 30_591] -> 30_591.
        // NaN is skipped: 2 samples. p50 = 1st, p99 = 2nd.
        let itl = w.itl().unwrap();
        assert_eq!((itl.count, itl.p50_us, itl.p99_us), (2, 20_095, 30_591));
        assert_eq!(w.seconds()[1].output_tokens, 3);
    }
}
