//! Whether a level has settled: a live estimate of its output throughput and
//! how sure that estimate is.
//!
//! The estimate is per-second output throughput over the level's steady
//! stretch (from when its requests in flight first reached the target).
//! Each finished request's output tokens are spread evenly over its
//! streaming time (first token to last), so a second's figure is what the
//! server emitted in it rather than which requests happened to end in it: a
//! closed loop of long answers ends few requests a second, and counting
//! tokens at the end would make the figure jump by whole answers.
//!
//! The uncertainty is the relative standard error of that mean, s / (√n ·
//! mean) over the n complete seconds. A second is complete once every
//! request that streamed in it can have reported: the level's longest
//! request so far has passed since its end. Seconds are not independent
//! (one request spans several), so this is a floor on the true error; the
//! level is also held to a minimum of completed requests (two per stream by
//! default), which covers a generation of answers at the least.

use std::time::Duration;

/// Relative standard error below which a level counts as steady.
pub(crate) const STEADY_RSE: f64 = 0.05;
/// Completed requests per stream a level needs before it can be steady.
pub(crate) const STEADY_COMPLETIONS_PER_STREAM: u32 = 2;

/// Per-second output tokens since the steady stretch began.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SteadyEstimator {
    /// When the steady stretch began, on the run's clock; None before.
    origin: Option<Duration>,
    /// Tokens per second of the stretch, second 0 first.
    buckets: Vec<f64>,
    /// The longest request seen, send to end.
    longest: Duration,
    /// Completed requests counted for the level (not transition).
    pub completions: u32,
}

/// The estimate at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Estimate {
    /// Mean output tokens per second over the complete seconds.
    pub tok_s: f64,
    /// Relative standard error of that mean (0.03 is ±3%).
    pub rse: f64,
    /// Complete seconds it rests on.
    pub seconds: usize,
}

impl SteadyEstimator {
    /// The steady stretch starts at `at`; tokens before it are not counted.
    pub(crate) fn start(&mut self, at: Duration) {
        if self.origin.is_none() {
            self.origin = Some(at);
        }
    }

    pub(crate) fn started(&self) -> Option<Duration> {
        self.origin
    }

    /// A finished request: `tokens` output tokens streamed from
    /// `first_token` to `end` (run clock), sent at `start`. Requests of any
    /// level count, since they shared the server in those seconds; only
    /// `counted` ones add to the completions.
    pub(crate) fn add(
        &mut self,
        start: Duration,
        first_token: Duration,
        end: Duration,
        tokens: u32,
        counted: bool,
    ) {
        if counted {
            self.completions += 1;
        }
        self.longest = self.longest.max(end.saturating_sub(start));
        let Some(origin) = self.origin else { return };
        if tokens == 0 || end <= origin {
            return;
        }
        let (a, b) = (first_token.min(end), end);
        let span = (b - a).as_secs_f64();
        let per_s = if span > 0.0 {
            f64::from(tokens) / span
        } else {
            0.0
        };
        let rel = |t: Duration| t.saturating_sub(origin).as_secs_f64();
        let (from, to) = (rel(a), rel(b));
        if span <= 0.0 {
            // All at one instant: the second it fell in.
            self.bucket(to.floor() as usize, f64::from(tokens));
            return;
        }
        let mut t = from;
        while t < to {
            let second = t.floor();
            let next = (second + 1.0).min(to);
            self.bucket(second as usize, per_s * (next - t));
            t = next;
        }
    }

    fn bucket(&mut self, second: usize, tokens: f64) {
        // A request cannot stream for days; a bad clock must not allocate.
        if second > 1_000_000 {
            return;
        }
        if self.buckets.len() <= second {
            self.buckets.resize(second + 1, 0.0);
        }
        self.buckets[second] += tokens;
    }

    /// The estimate over the seconds complete at `now` (run clock), or up
    /// to `until` when the level is over (every request it shared the
    /// server with is back).
    pub(crate) fn estimate(&self, now: Duration, over: bool) -> Option<Estimate> {
        let origin = self.origin?;
        let age = now.saturating_sub(origin);
        let settled = if over {
            age
        } else {
            age.saturating_sub(self.longest)
        };
        // Seconds with no tokens in them are real zeros (a stalled server).
        let n = (settled.as_secs() as usize).min(1_000_000);
        let values: Vec<f64> = (0..n)
            .map(|i| self.buckets.get(i).copied().unwrap_or(0.0))
            .collect();
        rse_of(&values).map(|(tok_s, rse)| Estimate {
            tok_s,
            rse,
            seconds: values.len(),
        })
    }
}

/// Mean and relative standard error of the mean of `values`; None with
/// fewer than two values or a mean of zero.
pub(crate) fn rse_of(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some((mean, var.sqrt() / (n as f64).sqrt() / mean))
}

/// Each request's own output rate over a closed-loop level, its first
/// wave left out: whether their mean is known to within `max_rse`.
///
/// Per-second throughput never settles where one stream spends most of
/// each request in prefill (on a CPU box, seconds with no token alternate
/// with seconds of decode), though every request takes the same time; the
/// requests' own rates (output tokens over send-to-end) show that they
/// do. The first wave, one request a stream, met a queue that was still
/// filling, so it is not the level's state. [`MIN_RATES`] rates at least.
/// Rates past the first wave that a level's requests are judged on.
pub(crate) const MIN_RATES: u32 = 3;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RequestRates {
    /// Completions to pass over first: the level's streams.
    skip: u32,
    seen: u32,
    rates: Vec<f64>,
}

impl RequestRates {
    pub(crate) fn new(first_wave: u32) -> RequestRates {
        RequestRates {
            skip: first_wave,
            ..RequestRates::default()
        }
    }

    /// A completed request: `tokens` out from `start` to `end`.
    pub(crate) fn add(&mut self, tokens: u32, start: Duration, end: Duration) {
        self.seen += 1;
        let took = end.saturating_sub(start).as_secs_f64();
        if self.seen > self.skip && took > 0.0 && self.rates.len() < 1_000_000 {
            self.rates.push(f64::from(tokens) / took);
        }
    }

    /// The relative standard error of their mean, from three rates on.
    pub(crate) fn rse(&self) -> Option<f64> {
        if self.rates.len() < MIN_RATES as usize {
            return None;
        }
        rse_of(&self.rates).map(|(_, rse)| rse)
    }
}

/// The verdict on a hand-set level when it is left.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Steadiness {
    pub steady: bool,
    /// The estimate's relative standard error, when there was one.
    pub rse: Option<f64>,
    /// Why not steady, in words (`too short: 1 completion in 0.5 s`).
    pub reason: Option<String>,
}

/// Completed requests a hand-set level needs before it can be steady: two
/// seconds of arrivals at an open-loop level's rate (at least 2), else
/// `per_stream` a stream.
pub(crate) fn min_completions(rate: Option<f64>, concurrency: u32, per_stream: u32) -> u32 {
    match rate {
        Some(rate) => (2.0 * rate).ceil().max(2.0) as u32,
        None => concurrency.saturating_mul(per_stream),
    }
}

/// The steady rule itself, which the live badge and the saved verdict
/// ([`judge`]) share: enough completions, and an estimate whose relative
/// standard error is under `max_rse`.
pub(crate) fn is_steady(
    completions: u32,
    min_completions: u32,
    rse: Option<f64>,
    max_rse: f64,
) -> bool {
    completions >= min_completions && rse.is_some_and(|r| r < max_rse)
}

/// Judge a level: steady when it completed at least `min_completions` and
/// its estimate's error is under `max_rse`; otherwise why not, in words.
pub(crate) fn judge(
    estimate: Option<Estimate>,
    completions: u32,
    min_completions: u32,
    max_rse: f64,
    lasted: Duration,
) -> Steadiness {
    let rse = estimate.map(|e| e.rse);
    if is_steady(completions, min_completions, rse, max_rse) {
        return Steadiness {
            steady: true,
            rse,
            reason: None,
        };
    }
    let plural = if completions == 1 { "" } else { "s" };
    let secs = lasted.as_secs_f64();
    if completions < min_completions {
        return Steadiness {
            steady: false,
            rse,
            reason: Some(format!(
                "too short: {completions} completion{plural} in {secs:.1} s (needs {min_completions})"
            )),
        };
    }
    match rse {
        Some(r) => Steadiness {
            steady: false,
            rse,
            reason: Some(format!(
                "throughput still moving: ±{:.0}% after {completions} completions in {secs:.1} s",
                r * 100.0
            )),
        },
        None => Steadiness {
            steady: false,
            rse,
            reason: Some(format!(
                "too short: under 2 whole seconds of steady state in {secs:.1} s"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_set_level_needs_so_many_completions() {
        // 3.2 req/s: two seconds are 6.4 arrivals, so 7; 0.4 req/s: at least 2.
        assert_eq!(min_completions(Some(3.2), 64, 2), 7);
        assert_eq!(min_completions(Some(0.4), 64, 2), 2);
        // Closed loop: 8 streams x 2 a stream.
        assert_eq!(min_completions(None, 8, 2), 16);
        assert!(is_steady(16, 16, Some(0.04), 0.05));
        assert!(!is_steady(15, 16, Some(0.04), 0.05));
        assert!(!is_steady(16, 16, Some(0.05), 0.05));
        assert!(!is_steady(16, 16, None, 0.05));
    }

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    /// Worked by hand: per-second figures alternating 90 and 110. After n
    /// seconds the mean is 100 (n even) and s = 10·√(n/(n-1)):
    /// n = 4: s = 11.547, RSE = 11.547 / (2 · 100) = 5.77%;
    /// n = 5: mean 98, s = √(480/4) = 10.954, RSE = 10.954 / (√5 · 98) = 5.00%;
    /// n = 6: s = 10.954, RSE = 10.954 / (√6 · 100) = 4.47%: steady from
    /// the sixth second.
    #[test]
    fn an_alternating_rate_settles_after_six_seconds() {
        let values = [90.0, 110.0, 90.0, 110.0, 90.0, 110.0];
        let rse = |n: usize| rse_of(&values[..n]).expect("estimate").1;
        assert!((rse(4) - 0.057735).abs() < 1e-5, "{}", rse(4));
        assert!((rse(5) - 0.049985).abs() < 1e-5, "{}", rse(5));
        assert!((rse(6) - 0.044721).abs() < 1e-5, "{}", rse(6));
        assert!(rse(5) >= 0.049 && rse(6) < STEADY_RSE);
    }

    /// A constant rate: one request a second, each streaming 100 tokens
    /// over exactly one second from second k to k+1. Every complete second
    /// holds 100 tokens, so the error is 0 from the second complete second
    /// on; the first one alone gives no estimate.
    #[test]
    fn a_constant_rate_is_exact_once_two_seconds_are_complete() {
        let mut e = SteadyEstimator::default();
        e.start(s(10.0));
        for k in 0..8 {
            let t = 10.0 + f64::from(k);
            e.add(s(t - 0.1), s(t), s(t + 1.0), 100, true);
        }
        // Longest request 1.1 s: at 13.1, 2.0 s past the origin plus it,
        // seconds 0 and 1 are complete; at 13.0 only second 0 is.
        let at = e.estimate(s(13.1), false).expect("two seconds");
        assert_eq!(at.seconds, 2);
        assert!((at.tok_s - 100.0).abs() < 1e-9 && at.rse < 1e-12, "{at:?}");
        assert_eq!(
            e.estimate(s(13.0), false),
            None,
            "one second is no estimate"
        );
        let over = e.estimate(s(18.0), true).expect("over");
        assert_eq!(over.seconds, 8);
        assert!(over.rse < 1e-12);
    }

    #[test]
    fn tokens_are_spread_over_the_streaming_time_and_clipped_at_the_origin() {
        let mut e = SteadyEstimator::default();
        e.start(s(1.0));
        // 30 tokens from 0.5 to 2.0: 10 before the origin (dropped), 20 in
        // second 0.
        e.add(s(0.0), s(0.5), s(2.0), 30, false);
        // 10 tokens from 2.5 to 3.5: 5 in second 1, 5 in second 2.
        e.add(s(2.0), s(2.5), s(3.5), 10, true);
        assert_eq!(e.completions, 1);
        let b = &e.buckets;
        assert!(
            (b[0] - 20.0).abs() < 1e-9 && (b[1] - 5.0).abs() < 1e-9 && (b[2] - 5.0).abs() < 1e-9,
            "{b:?}"
        );
    }

    #[test]
    fn a_level_left_at_once_is_too_short() {
        let j = judge(None, 1, 128, STEADY_RSE, s(0.5));
        assert!(!j.steady);
        assert_eq!(
            j.reason.as_deref(),
            Some("too short: 1 completion in 0.5 s (needs 128)")
        );
        let moving = Estimate {
            tok_s: 100.0,
            rse: 0.12,
            seconds: 5,
        };
        let j = judge(Some(moving), 200, 128, STEADY_RSE, s(6.0));
        assert!(!j.steady);
        assert!(j.reason.is_some_and(|r| r.contains("±12%")));
        let settled = Estimate {
            rse: 0.03,
            ..moving
        };
        assert!(judge(Some(settled), 200, 128, STEADY_RSE, s(6.0)).steady);
    }
}

#[cfg(test)]
mod request_rate_tests {
    use super::*;

    /// One slot, four streams, requests of 1 s alone: the first wave ends
    /// after 1, 2, 3 and 4 s of waiting and decoding, every later request
    /// after 4 s (three ahead of it, then its own). 100 tokens each.
    #[test]
    fn the_first_wave_is_left_out_and_three_rates_are_needed() {
        let s = Duration::from_secs;
        let mut rates = RequestRates::new(4);
        for (start, end) in [(0, 1), (0, 2), (0, 3), (0, 4)] {
            rates.add(100, s(start), s(end));
        }
        // The wave's 100, 50, 33 and 25 tok/s are not the level's state.
        assert_eq!(rates.rse(), None);
        rates.add(100, s(1), s(5));
        rates.add(100, s(2), s(6));
        assert_eq!(rates.rse(), None, "two rates are too few");
        rates.add(100, s(3), s(7));
        // 25, 25, 25 tok/s: no spread at all.
        assert_eq!(rates.rse(), Some(0.0));
        // A fourth of 50 tok/s: mean 31.25, sample sd 12.5, RSE 12.5 / (2 x
        // 31.25) = 0.2.
        rates.add(100, s(5), s(7));
        let rse = rates.rse().expect("an error");
        assert!((rse - 0.2).abs() < 1e-12, "{rse}");
    }
}
