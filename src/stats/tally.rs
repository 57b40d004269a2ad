//! One level's statistics folded request by request, in memory that does
//! not grow with the level (docs/architecture.md §7, "Flat memory").
//!
//! A record is counted the moment it comes back and then dropped: what a
//! level keeps is one number per request for the per-request metrics (up to
//! `hdr::EXACT_CAP`), an HDR histogram per latency metric, inter-token gaps
//! included, and running sums. [`LevelTally::stats`] gives the same
//! [`LevelStats`] that `summary::level_stats` gives for the same records
//! while the exact values are held; past the caps the percentiles come from
//! the histograms (within 0.1%).
//!
//! Which records count where is `summary`'s rule, unchanged: latency,
//! tokens and lengths over completed requests; `duration` over completed
//! and failed; errors over failed; the client's read lag and clocks over
//! completed and failed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::hdr::{Samples, EXACT_CAP, EXACT_CAP_ITL};
use super::lateness::{Lateness, LATE_AFTER};
use super::summary::{LevelStats, MinMeanMax, RxLag};
use crate::fmt::round3;
use crate::record::{Outcome, RequestRecord, RxClock, TokenSource};

/// Smallest, sum and largest of a per-request count, and how many.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RunningRange {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl RunningRange {
    pub(crate) fn add(&mut self, v: f64) {
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        self.sum += v;
    }

    pub(crate) fn min_mean_max(&self) -> Option<MinMeanMax> {
        (self.count > 0).then(|| MinMeanMax {
            min: self.min,
            mean: self.sum / self.count as f64,
            max: self.max,
        })
    }
}

/// Open-loop send lateness, folded.
#[derive(Clone, Debug, PartialEq)]
struct LatenessTally {
    lags: Samples,
    late: usize,
    /// Summed send-to-end time of the answered (not cancelled) requests, s.
    busy_s: f64,
    first_start_s: f64,
    last_end_s: f64,
}

impl Default for LatenessTally {
    fn default() -> Self {
        LatenessTally {
            lags: Samples::latency_ms(EXACT_CAP),
            late: 0,
            busy_s: 0.0,
            first_start_s: f64::INFINITY,
            last_end_s: 0.0,
        }
    }
}

/// Everything a level's statistics need from its records, folded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LevelTally {
    completed: usize,
    failed: usize,
    cancelled: usize,
    /// Over completed and failed records.
    first_start: Option<Duration>,
    last_end: Option<Duration>,
    /// Over every record given, cancelled included: where the level's
    /// measurement window ends.
    latest_end: Option<Duration>,
    total_input_tokens: u64,
    total_output_tokens: u64,
    ttft: Samples,
    ttfb: Samples,
    tpot: Samples,
    e2el: Samples,
    ttfc: Samples,
    itl: Samples,
    connect: super::connect::ConnectTally,
    errors: BTreeMap<String, usize>,
    token_source_counts: BTreeMap<TokenSource, usize>,
    input_len: RunningRange,
    output_len: RunningRange,
    short_outputs: usize,
    rx_lag: Samples,
    rx_kernel: usize,
    rx_user: usize,
    lateness: LatenessTally,
    /// Any record had a send schedule (open loop).
    scheduled: bool,
}

impl Default for LevelTally {
    fn default() -> Self {
        LevelTally::new()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl LevelTally {
    pub(crate) fn new() -> LevelTally {
        LevelTally {
            completed: 0,
            failed: 0,
            cancelled: 0,
            first_start: None,
            last_end: None,
            latest_end: None,
            total_input_tokens: 0,
            total_output_tokens: 0,
            ttft: Samples::latency_ms(EXACT_CAP),
            ttfb: Samples::latency_ms(EXACT_CAP),
            tpot: Samples::latency_ms(EXACT_CAP),
            e2el: Samples::latency_ms(EXACT_CAP),
            ttfc: Samples::latency_ms(EXACT_CAP),
            itl: Samples::latency_ms(EXACT_CAP_ITL),
            connect: super::connect::ConnectTally::default(),
            errors: BTreeMap::new(),
            token_source_counts: BTreeMap::new(),
            input_len: RunningRange::default(),
            output_len: RunningRange::default(),
            short_outputs: 0,
            rx_lag: Samples::latency_ms(EXACT_CAP_ITL),
            rx_kernel: 0,
            rx_user: 0,
            lateness: LatenessTally::default(),
            scheduled: false,
        }
    }

    /// A tally of these records, as if each had been added in turn.
    pub(crate) fn of(records: &[RequestRecord]) -> LevelTally {
        let mut tally = LevelTally::new();
        for r in records {
            tally.add(r);
        }
        tally
    }

    /// Count one record. Nothing of it is kept but the numbers above.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let opt_min = |a: Option<Duration>, b: Duration| Some(a.map_or(b, |a| a.min(b)));
        let opt_max = |a: Option<Duration>, b: Duration| Some(a.map_or(b, |a| a.max(b)));
        self.latest_end = opt_max(self.latest_end, r.end);
        if let Some(lag) = r.send_lag {
            self.scheduled = true;
            let lag_ms = ms(lag);
            self.lateness.lags.add(lag_ms);
            if lag > LATE_AFTER {
                self.lateness.late += 1;
            }
        }
        if r.outcome != Outcome::Cancelled {
            let l = &mut self.lateness;
            l.busy_s += r.end.saturating_sub(r.start).as_secs_f64();
            l.first_start_s = l.first_start_s.min(r.start.as_secs_f64());
            l.last_end_s = l.last_end_s.max(r.end.as_secs_f64());
        }
        match r.outcome {
            Outcome::Cancelled => {
                self.cancelled += 1;
                return;
            }
            Outcome::Failed(class) => {
                self.failed += 1;
                *self.errors.entry(class.key()).or_insert(0) += 1;
            }
            Outcome::Ok => self.completed += 1,
        }
        // Completed and failed from here.
        self.first_start = opt_min(self.first_start, r.start);
        self.last_end = opt_max(self.last_end, r.end);
        for &lag in &r.rx_lag_ms {
            self.rx_lag.add(f64::from(lag));
        }
        match r.rx_clock {
            RxClock::Kernel => self.rx_kernel += 1,
            _ => self.rx_user += 1,
        }
        if !r.is_ok() {
            return;
        }
        let input = r.input_tokens();
        self.total_input_tokens += u64::from(input);
        self.total_output_tokens += u64::from(r.output_tokens);
        for (set, value) in [
            (&mut self.ttft, r.ttft),
            (&mut self.ttfb, r.ttfb),
            (&mut self.tpot, r.tpot),
            (&mut self.e2el, r.e2el),
            (&mut self.ttfc, r.ttfc),
        ] {
            if let Some(d) = value {
                set.add(ms(d));
            }
        }
        for &gap in &r.itl_ms {
            self.itl.add(gap);
        }
        self.connect.add(r);
        *self.token_source_counts.entry(r.token_source).or_insert(0) += 1;
        self.input_len.add(f64::from(input));
        self.output_len.add(f64::from(r.output_tokens));
        if r.output_tokens < r.output_tokens_requested {
            self.short_outputs += 1;
        }
    }

    /// Requests counted, whatever their outcome.
    pub(crate) fn records(&self) -> usize {
        self.completed + self.failed + self.cancelled
    }

    /// The last end of any record given (cancelled included).
    pub(crate) fn latest_end(&self) -> Option<Duration> {
        self.latest_end
    }

    /// The per-request metrics' sets, by the level file's key, for the
    /// `samples` and `histograms` a level file carries (ITL: histogram only).
    pub(crate) fn metric_sets(&self) -> [(&'static str, &Samples); 6] {
        [
            ("ttft_ms", &self.ttft),
            ("tpot_ms", &self.tpot),
            ("itl_ms", &self.itl),
            ("e2el_ms", &self.e2el),
            ("ttfb_ms", &self.ttfb),
            ("ttfc_ms", &self.ttfc),
        ]
    }

    /// The level's statistics. `concurrency` divides the output throughput
    /// into `per_stream_tok_s`; `percentiles` (each in `0..=100`) are the
    /// ones computed for every distribution.
    pub(crate) fn stats(&self, concurrency: u32, percentiles: &[f64]) -> LevelStats {
        let duration_s = match (self.first_start, self.last_end) {
            (Some(s), Some(e)) => e.saturating_sub(s).as_secs_f64(),
            _ => 0.0,
        };
        let per_second = |amount: f64| {
            if duration_s > 0.0 && duration_s.is_finite() {
                amount / duration_s
            } else {
                0.0
            }
        };
        let output_throughput = per_second(self.total_output_tokens as f64);
        let tpot = self.tpot.distribution(percentiles);
        let stream_decode_tok_s =
            super::metrics::stream_decode_tok_s(tpot.as_ref().map(|d| d.median));
        // Most used; on equal counts the greater TokenSource (less trusted) wins.
        let token_count_source = self
            .token_source_counts
            .iter()
            .max_by_key(|(src, n)| (**n, **src))
            .map(|(src, _)| *src);
        let client_rx_lag = (!self.rx_lag.is_empty()).then(|| RxLag {
            p50: self.rx_lag.percentile(50.0).unwrap_or(0.0),
            p99: self.rx_lag.percentile(99.0).unwrap_or(0.0),
            max: self.rx_lag.max().unwrap_or(0.0),
            reads: self.rx_lag.len() as usize,
        });
        LevelStats {
            completed: self.completed,
            failed: self.failed,
            cancelled: self.cancelled,
            duration_s,
            total_input_tokens: self.total_input_tokens,
            total_output_tokens: self.total_output_tokens,
            request_throughput: per_second(self.completed as f64),
            output_throughput,
            total_token_throughput: per_second(
                (self.total_input_tokens + self.total_output_tokens) as f64,
            ),
            per_stream_tok_s: if concurrency > 0 {
                output_throughput / f64::from(concurrency)
            } else {
                0.0
            },
            stream_decode_tok_s,
            ttft: self.ttft.distribution(percentiles),
            ttfb: self.ttfb.distribution(percentiles),
            tpot,
            itl: self.itl.distribution(percentiles),
            e2el: self.e2el.distribution(percentiles),
            errors: self.errors.clone(),
            token_count_source,
            token_source_counts: self.token_source_counts.clone(),
            input_len: self.input_len.min_mean_max(),
            output_len: self.output_len.min_mean_max(),
            short_outputs: self.short_outputs,
            ttfc: self.ttfc.distribution(percentiles),
            client_rx_lag,
            connect: self.connect.stats(),
            rx_kernel: self.rx_kernel,
            rx_user: self.rx_user,
        }
    }

    /// Open loop: how late requests went out. None for a closed loop.
    pub(crate) fn lateness(&self) -> Option<Lateness> {
        if !self.scheduled {
            return None;
        }
        let l = &self.lateness;
        let span = l.last_end_s - l.first_start_s;
        Some(Lateness {
            scheduled: l.lags.len() as usize,
            late: l.late,
            p50_ms: l.lags.percentile(50.0).unwrap_or(0.0),
            p99_ms: l.lags.percentile(99.0).unwrap_or(0.0),
            max_ms: l.lags.max().unwrap_or(0.0),
            mean_in_flight: if span > 0.0 { l.busy_s / span } else { 0.0 },
        })
    }
}

/// The lengths completed requests had: input tokens (the server's count,
/// else the target) and output tokens; the `traffic` object of a level file
/// and, folded over levels, of `summary.json`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lengths {
    input: Samples,
    output: Samples,
}

impl Default for Lengths {
    fn default() -> Self {
        Lengths {
            input: Samples::counts(EXACT_CAP),
            output: Samples::counts(EXACT_CAP),
        }
    }
}

impl Lengths {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        if r.is_ok() {
            self.input.add(f64::from(r.input_tokens()));
            self.output.add(f64::from(r.output_tokens));
        }
    }

    /// Fold another level's lengths in (the run's traffic).
    pub(crate) fn absorb(&mut self, other: &Lengths) {
        // Same resolution by construction: absorbing cannot fail.
        let _ = self.input.absorb(&other.input);
        let _ = self.output.absorb(&other.output);
    }

    /// `{"profile", "input_mean", "output_mean", "input_tokens": {...},
    /// "output_tokens": {...}}`; each distribution is `{mean, min, p50,
    /// p99, max, count}` with nearest-rank percentiles (the smallest length
    /// with at least p% of the lengths at or below it), `null` when empty.
    pub(crate) fn to_json(&self, profile: &str) -> Value {
        let mean = |s: &Samples| s.mean().map(round3);
        json!({
            "profile": profile,
            "input_mean": mean(&self.input),
            "output_mean": mean(&self.output),
            "input_tokens": length_json(&self.input),
            "output_tokens": length_json(&self.output),
        })
    }
}

fn length_json(s: &Samples) -> Value {
    let (Some(mean), Some(min), Some(max)) = (s.mean(), s.min(), s.max()) else {
        return Value::Null;
    };
    // Token counts are whole: written as integers, as they always were.
    let whole = |v: f64| v.round() as u64;
    json!({
        "mean": round3(mean),
        "min": whole(min),
        "p50": s.nearest_rank(50.0).map(whole),
        "p99": s.nearest_rank(99.0).map(whole),
        "max": whole(max),
        "count": s.len(),
    })
}

/// What the server said of each completed request (llama.cpp `timings`,
/// Ollama's durations), folded: medians of its decode and prefill speeds and
/// of its slot wait, and the longest model load.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ServerTimingTally {
    decode_tok_s: Samples,
    prefill_tok_s: Samples,
    slot_wait_ms: Samples,
    load_ms_max: Option<f64>,
}

impl Default for ServerTimingTally {
    fn default() -> Self {
        // Speeds and waits at a thousandth, the precision they are saved at.
        ServerTimingTally {
            decode_tok_s: Samples::latency_ms(EXACT_CAP),
            prefill_tok_s: Samples::latency_ms(EXACT_CAP),
            slot_wait_ms: Samples::latency_ms(EXACT_CAP),
            load_ms_max: None,
        }
    }
}

impl ServerTimingTally {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let Some(t) = r.server_timings else { return };
        let load = f64::from(t.load_ms);
        if load > 0.0 {
            self.load_ms_max = Some(self.load_ms_max.map_or(load, |m| m.max(load)));
        }
        if !r.is_ok() {
            return;
        }
        for (set, value) in [
            (&mut self.decode_tok_s, t.decode_tok_s()),
            (&mut self.prefill_tok_s, t.prefill_tok_s()),
            (&mut self.slot_wait_ms, t.slot_wait_ms()),
        ] {
            if let Some(v) = value.filter(|v| v.is_finite()) {
                set.add(v);
            }
        }
    }

    /// The level file's `server_timings`.
    pub(crate) fn to_json(&self) -> Value {
        let median = |s: &Samples| s.percentile(50.0).map(round3);
        json!({
            "decode_tok_s_median": median(&self.decode_tok_s),
            "prefill_tok_s_median": median(&self.prefill_tok_s),
            "slot_wait_ms_median": median(&self.slot_wait_ms),
            "load_ms_max": self.load_ms_max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ErrorClass;

    fn rec(id: u64, start_ms: u64, ttft_ms: u64, end_ms: u64, tokens: u32) -> RequestRecord {
        let mut r = RequestRecord::empty(id, 0);
        r.start = Duration::from_millis(start_ms);
        r.end = Duration::from_millis(end_ms);
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.ttfb = Some(Duration::from_millis(ttft_ms / 2));
        r.e2el = Some(Duration::from_millis(end_ms - start_ms));
        r.output_tokens = tokens;
        r.output_tokens_requested = tokens;
        r.input_tokens_target = 100;
        if tokens > 1 {
            let gap = (end_ms - start_ms - ttft_ms) as f64 / f64::from(tokens - 1);
            r.tpot = Some(Duration::from_secs_f64(gap / 1000.0));
            r.itl_ms = vec![gap; tokens as usize - 1];
        }
        r
    }

    /// Worked by hand: three completed requests over 0..1,000 ms and one
    /// failure ending at 1,500 ms.
    /// - duration 1.5 s (first start 0, last end 1,500: the failure counts);
    /// - output 10 + 20 + 30 = 60 tokens: 40 tok/s, 20 tok/s per stream at 2;
    /// - TTFT 100, 200, 300 ms: median 200, mean 200, p99 = 200 + 0.98 x 100;
    /// - TPOT (1000 - 100) / 9 = 100, (900 - 200) / 19 = 36.842..., and
    ///   (600 - 300) / 29 = 10.344...: median 36.842 ms, so the stream decodes
    ///   at 1000 / 36.842 = 27.14 tok/s;
    /// - ITL pooled: 9 gaps of 100, 19 of 36.842, 29 of 10.345 (each at the
    ///   microsecond): the 29th of 57 sorted (the median) is the last 10.345.
    #[test]
    fn a_level_folded_by_hand() {
        let mut failed = RequestRecord::empty(9, 0);
        failed.start = Duration::from_millis(200);
        failed.end = Duration::from_millis(1500);
        failed.outcome = Outcome::Failed(ErrorClass::Http(503));
        let records = [
            rec(1, 0, 100, 1000, 10),
            rec(2, 100, 200, 1000, 20),
            rec(3, 400, 300, 1000, 30),
            failed,
        ];
        let s = LevelTally::of(&records).stats(2, &[99.0]);
        assert_eq!((s.completed, s.failed), (3, 1));
        assert_eq!(s.duration_s, 1.5);
        assert_eq!(s.total_output_tokens, 60);
        assert_eq!(s.output_throughput, 40.0);
        assert_eq!(s.per_stream_tok_s, 20.0);
        let ttft = s.ttft.as_ref().unwrap();
        assert_eq!((ttft.median, ttft.mean), (200.0, 200.0));
        assert!((ttft.percentile(99.0).unwrap() - 298.0).abs() < 1e-9);
        let tpot = s.tpot.as_ref().unwrap();
        assert!((tpot.median - 36.842).abs() < 1e-9, "{}", tpot.median);
        assert!((s.stream_decode_tok_s.unwrap() - 1000.0 / 36.842).abs() < 1e-9);
        let itl = s.itl.as_ref().unwrap();
        assert_eq!(itl.count, 57);
        assert_eq!(itl.median, 10.345);
        assert_eq!(s.errors.get("http_503"), Some(&1));
        assert_eq!(s.input_len.unwrap().mean, 100.0);
    }

    /// Lateness by hand: lags 0, 2, 10 ms (one over the 5 ms mark); three
    /// requests busy 1 s each over a 2 s span: 1.5 in flight on average.
    #[test]
    fn send_lateness_folded() {
        let mut records = vec![
            rec(1, 0, 100, 1000, 2),
            rec(2, 500, 100, 1500, 2),
            rec(3, 1000, 100, 2000, 2),
        ];
        for (r, lag) in records.iter_mut().zip([0u64, 2, 10]) {
            r.send_lag = Some(Duration::from_millis(lag));
        }
        let l = LevelTally::of(&records).lateness().unwrap();
        assert_eq!((l.scheduled, l.late), (3, 1));
        assert_eq!((l.p50_ms, l.max_ms), (2.0, 10.0));
        assert_eq!(l.mean_in_flight, 1.5);
        assert!(LevelTally::of(&records[..0]).lateness().is_none());
    }

    /// Lengths by hand: 1..=100 output tokens, mean 50.5, nearest-rank p50
    /// the 50th value, p99 the 99th; two requests' inputs 10 and 20.
    #[test]
    fn lengths_by_hand() {
        let mut lengths = Lengths::default();
        for (i, out) in (1..=100u32).enumerate() {
            let mut r = rec(i as u64, 0, 1, 2, out);
            r.input_tokens_target = if i % 2 == 0 { 10 } else { 20 };
            lengths.add(&r);
        }
        let j = lengths.to_json("chat");
        assert_eq!(j["profile"], json!("chat"));
        assert_eq!(j["input_mean"], json!(15.0));
        assert_eq!(j["output_mean"], json!(50.5));
        let out = &j["output_tokens"];
        assert_eq!(out["min"], json!(1));
        assert_eq!(out["p50"], json!(50));
        assert_eq!(out["p99"], json!(99));
        assert_eq!(out["max"], json!(100));
        assert_eq!(out["count"], json!(100));
        assert_eq!(Lengths::default().to_json("x")["input_tokens"], Value::Null);
    }

    /// Server timings by hand: decode 100 tokens in 1,000 ms and 2,000 ms
    /// (100 and 50 tok/s: median 75), prefill 200 tokens in 100 ms for both
    /// (2,000 tok/s); a failed request's 300 ms model load still counts for
    /// `load_ms_max`, not for the medians.
    #[test]
    fn server_timings_folded_by_hand() {
        let timings = |predicted_ms: f64, load_ms: f32| crate::record::ServerTimings {
            prompt_n: Some(200),
            prompt_ms: Some(100.0),
            predicted_n: Some(100),
            predicted_ms: Some(predicted_ms),
            load_ms,
            total_ms: 0.0,
        };
        let mut tally = ServerTimingTally::default();
        for (predicted, load, ok) in [
            (1000.0, 0.0, true),
            (2000.0, 20.0, true),
            (10.0, 300.0, false),
        ] {
            let mut r = rec(1, 0, 1, 2, 2);
            r.server_timings = Some(timings(predicted, load));
            if !ok {
                r.outcome = Outcome::Failed(ErrorClass::Http(500));
            }
            tally.add(&r);
        }
        let j = tally.to_json();
        assert_eq!(j["decode_tok_s_median"], json!(75.0));
        assert_eq!(j["prefill_tok_s_median"], json!(2000.0));
        assert_eq!(j["slot_wait_ms_median"], Value::Null, "no total: no wait");
        assert_eq!(j["load_ms_max"], json!(300.0));
    }
}
