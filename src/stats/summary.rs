//! One level's statistics from its request records, and their vLLM-compatible
//! keys in a result file (docs/architecture.mds 2 and 6).
//!
//! Which records count where:
//! - latency distributions, token totals, throughputs, lengths: completed
//!   (`Outcome::Ok`) records only, as vLLM does;
//! - `duration`: completed and failed records (first dispatch to last end);
//! - `errors`: failed records;
//! - cancelled records are only counted;
//! - `client_rx_lag_ms` and `rx_clock`: completed and failed records (the
//!   client's reads, whatever the answer was).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::fmt::{num, opt_num, round3};
use crate::record::{RequestRecord, TokenSource};
use crate::stats::percentile::{median_sorted, percentile_label, percentile_sorted};
use crate::stats::tally::LevelTally;

/// Summary of a set of samples (milliseconds for latencies).
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    /// Finite samples used.
    pub count: usize,
    pub mean: f64,
    /// numpy.median: the middle sample or the mean of the two middle ones.
    pub median: f64,
    /// Population standard deviation (numpy.std default, ddof = 0), as vLLM.
    pub std: f64,
    /// `(p, value)` for each requested p in `0..=100`, in the order asked;
    /// a p outside that range is left out.
    pub percentiles: Vec<(f64, f64)>,
}

impl Distribution {
    /// Sorts `samples` in place and summarizes them. NaN and infinite samples
    /// are ignored (they sort to the ends and are cut off). `None` when no
    /// finite sample is left.
    pub fn from_samples(samples: &mut [f64], percentiles: &[f64]) -> Option<Distribution> {
        samples.sort_unstable_by(f64::total_cmp);
        // total_cmp order: -NaN < -inf < finite < +inf < +NaN, so the finite
        // samples are one contiguous run.
        let start = samples.partition_point(|x| !x.is_finite() && x.is_sign_negative());
        let rest = &samples[start..];
        let len = rest.partition_point(|x| x.is_finite());
        let finite = &rest[..len];
        if finite.is_empty() {
            return None;
        }
        let n = finite.len() as f64;
        let mean = finite.iter().sum::<f64>() / n;
        let var = finite.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let median = median_sorted(finite)?;
        let percentiles = percentiles
            .iter()
            .filter_map(|&p| percentile_sorted(finite, p).map(|v| (p, v)))
            .collect();
        Some(Distribution {
            count: finite.len(),
            mean,
            median,
            std: var.sqrt(),
            percentiles,
        })
    }

    /// The value saved for percentile `p`, if it was asked for.
    pub(crate) fn percentile(&self, p: f64) -> Option<f64> {
        self.percentiles
            .iter()
            .find(|(q, _)| *q == p)
            .map(|&(_, v)| v)
    }
}

/// Smallest, mean and largest of a per-request figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct MinMeanMax {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

impl MinMeanMax {
    pub(crate) fn to_json(self) -> Value {
        let mut m = Map::new();
        m.insert("min".into(), num(self.min));
        m.insert("mean".into(), num(self.mean));
        m.insert("max".into(), num(self.max));
        Value::Object(m)
    }
}

/// A level's statistics. Latencies are in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LevelStats {
    pub completed: usize,
    pub failed: usize,
    pub cancelled: usize,
    /// First dispatch (min start) to last completion (max end) over completed
    /// and failed records; 0 when there are none.
    pub duration_s: f64,
    /// Over completed requests; input = `RequestRecord::input_tokens()`.
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// completed / duration; 0.0 when duration is 0 (also for the two below).
    pub request_throughput: f64,
    /// total_output_tokens / duration.
    pub output_throughput: f64,
    /// (total_input_tokens + total_output_tokens) / duration.
    pub total_token_throughput: f64,
    /// output_throughput / concurrency: what each user gets, waiting
    /// included. 0.0 when concurrency is 0.
    pub per_stream_tok_s: f64,
    /// 1000 / median TPOT (ms): an answer's speed once it streams. `None`
    /// without TPOT samples or when the median TPOT is 0.
    pub stream_decode_tok_s: Option<f64>,
    pub ttft: Option<Distribution>,
    pub ttfb: Option<Distribution>,
    pub tpot: Option<Distribution>,
    /// Pooled `itl_ms` of every completed request.
    pub itl: Option<Distribution>,
    pub e2el: Option<Distribution>,
    /// `ErrorClass::key()` -> count, over failed requests.
    pub errors: BTreeMap<String, usize>,
    /// The output-token source used by most completed requests; on a tie the
    /// less trusted source wins (the saved label never overstates trust).
    /// `None` with no completed request. The full tally is in
    /// `token_source_counts`, for checks that want to flag a mixed level.
    pub token_count_source: Option<TokenSource>,
    /// How many completed requests used each source.
    pub token_source_counts: BTreeMap<TokenSource, usize>,
    /// Per completed request: `input_tokens()`.
    pub input_len: Option<MinMeanMax>,
    /// Per completed request: `output_tokens`.
    pub output_len: Option<MinMeanMax>,
    /// Completed with output_tokens < output_tokens_requested.
    pub short_outputs: usize,
    /// Reasoning models: time to first content token, over the completed
    /// requests whose reasoning came first (`RequestRecord::ttfc`). `None`
    /// when no request had one, and then no `ttfc` key is written.
    pub ttfc: Option<Distribution>,
    /// How late the client read its sockets: user-space read time minus
    /// the kernel's receive time, pooled over every kernel-timed body read.
    /// `None` when no read had a kernel time (`--rx-clock user`, reqwest).
    pub client_rx_lag: Option<RxLag>,
    /// Connect times and TTFT after connect (`stats::connect`); `None` when
    /// no completed request's connect time is known (reqwest).
    pub connect: Option<super::connect::ConnectStats>,
    /// Requests (completed and failed) timed by the kernel and by user space.
    pub rx_kernel: usize,
    pub rx_user: usize,
}

/// `client_rx_lag_ms`: p50, p99 and max of the reads' lag, ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RxLag {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub reads: usize,
}

impl RxLag {
    pub(crate) fn to_json(self) -> Value {
        serde_json::json!({"p50": round3(self.p50), "p99": round3(self.p99), "max": round3(self.max)})
    }
}

/// Summarizes one level's records: the fold of [`LevelTally`] over them,
/// so a slice and a stream of records give the same figures.
/// `concurrency` divides the output throughput into `per_stream_tok_s`;
/// `percentiles` (each in `0..=100`) are the ones computed for every
/// distribution.
pub(crate) fn level_stats(
    records: &[RequestRecord],
    concurrency: u32,
    percentiles: &[f64],
) -> LevelStats {
    LevelTally::of(records).stats(concurrency, percentiles)
}

impl LevelStats {
    /// The latency keys alone: `mean_/median_/std_/p{P}_` + `ttft|tpot|itl|
    /// e2el|ttfb` + `_ms` (one `p{P}` per percentile), and the same for
    /// `ttfc` when some request reasoned. Their names follow `--percentiles`,
    /// so the level file keeps them in a map (`report::schema::LevelFile::stats`).
    pub(crate) fn latency_json(&self, percentiles: &[f64]) -> Map<String, Value> {
        let mut map = Map::new();
        let mut family = |name: &str, d: Option<&Distribution>| {
            map.insert(format!("mean_{name}_ms"), opt_num(d.map(|d| d.mean)));
            map.insert(format!("median_{name}_ms"), opt_num(d.map(|d| d.median)));
            map.insert(format!("std_{name}_ms"), opt_num(d.map(|d| d.std)));
            for &p in percentiles {
                map.insert(
                    format!("p{}_{name}_ms", percentile_label(p)),
                    opt_num(d.and_then(|d| d.percentile(p))),
                );
            }
        };
        for (name, dist) in [
            ("ttft", &self.ttft),
            ("tpot", &self.tpot),
            ("itl", &self.itl),
            ("e2el", &self.e2el),
            ("ttfb", &self.ttfb),
        ] {
            family(name, dist.as_ref());
        }
        // Reasoning models only: TTFC's keys, written only when some request
        // reasoned before its content.
        if let Some(d) = &self.ttfc {
            family("ttfc", Some(d));
        }
        map
    }

    /// Inserts vLLM-compatible keys into a result-file object (docs/architecture.md
    /// section 6): `completed`, `failed`, `duration` (s), `total_input_tokens`,
    /// `total_output_tokens`, `request_throughput`, `output_throughput`,
    /// `total_token_throughput`; `mean_`/`median_`/`std_` + metric + `_ms` and
    /// `p{P}_` + metric + `_ms` for each of `percentiles` (P as vLLM writes it:
    /// `p99`, `p99.9`), for metric in ttft, tpot, itl, e2el and ttfb; then
    /// `per_stream_tok_s`, `stream_decode_tok_s`, `errors` (object),
    /// `token_count_source`, `input_len`, `output_len` (`{min, mean, max}`),
    /// `cancelled`, `short_outputs`.
    ///
    /// A statistic without samples is `null`, never NaN; every key is written
    /// either way, so a level file always has the same shape. Existing keys of
    /// the same names are overwritten.
    #[cfg(test)]
    pub(crate) fn insert_json(&self, map: &mut Map<String, Value>, percentiles: &[f64]) {
        map.insert("completed".into(), Value::from(self.completed));
        map.insert("failed".into(), Value::from(self.failed));
        map.insert("duration".into(), num(self.duration_s));
        map.insert(
            "total_input_tokens".into(),
            Value::from(self.total_input_tokens),
        );
        map.insert(
            "total_output_tokens".into(),
            Value::from(self.total_output_tokens),
        );
        map.insert("request_throughput".into(), num(self.request_throughput));
        map.insert("output_throughput".into(), num(self.output_throughput));
        map.insert(
            "total_token_throughput".into(),
            num(self.total_token_throughput),
        );

        map.extend(self.latency_json(percentiles));
        map.insert("per_stream_tok_s".into(), num(self.per_stream_tok_s));
        map.insert(
            "stream_decode_tok_s".into(),
            opt_num(self.stream_decode_tok_s),
        );
        let errors: Map<String, Value> = self
            .errors
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(*v)))
            .collect();
        map.insert("errors".into(), Value::Object(errors));
        map.insert(
            "token_count_source".into(),
            self.token_count_source
                .map_or(Value::Null, |s| Value::from(s.as_str())),
        );
        map.insert(
            "input_len".into(),
            self.input_len.map_or(Value::Null, MinMeanMax::to_json),
        );
        map.insert(
            "output_len".into(),
            self.output_len.map_or(Value::Null, MinMeanMax::to_json),
        );
        map.insert("cancelled".into(), Value::from(self.cancelled));
        map.insert("short_outputs".into(), Value::from(self.short_outputs));
        // tokbench's own: how late the client read (null without kernel
        // receive times) and which clock timed the requests.
        map.insert(
            "client_rx_lag_ms".into(),
            self.client_rx_lag.map_or(Value::Null, |l| l.to_json()),
        );
        map.insert(
            "rx_clock".into(),
            serde_json::json!({"kernel": self.rx_kernel, "user": self.rx_user}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ErrorClass;
    use crate::record::Outcome;
    use std::time::Duration;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// A completed request from `start` to `end` (seconds since run start).
    fn ok(id: u64, start: f64, end: f64) -> RequestRecord {
        let mut r = RequestRecord::empty(id, 0);
        r.start = secs(start);
        r.end = secs(end);
        r.token_source = TokenSource::Usage;
        r
    }

    fn failed(id: u64, start: f64, end: f64, class: ErrorClass) -> RequestRecord {
        let mut r = ok(id, start, end);
        r.outcome = Outcome::Failed(class);
        r
    }

    /// Every number in `v`, recursively, is finite (or the value is null).
    fn assert_no_nan(v: &Value) {
        match v {
            Value::Number(n) => assert!(n.as_f64().is_some_and(f64::is_finite), "{n}"),
            Value::Array(a) => a.iter().for_each(assert_no_nan),
            Value::Object(o) => o.values().for_each(assert_no_nan),
            _ => {}
        }
    }

    #[test]
    fn distribution_basics() {
        // [4, 1, 3, 2] sorted -> [1, 2, 3, 4]; mean 2.5; median (2+3)/2 = 2.5;
        // population std: deviations -1.5 -0.5 0.5 1.5 -> squares 2.25 0.25 0.25 2.25
        // = 5 / 4 = 1.25 -> sqrt(1.25) = 1.1180339887...
        // p90: rank 0.9*3 = 2.7 -> 3 + 1*0.7 = 3.7.
        let mut s = [4.0, 1.0, 3.0, 2.0];
        let d = Distribution::from_samples(&mut s, &[90.0, 150.0]).unwrap();
        assert_eq!(s, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(d.count, 4);
        assert!(close(d.mean, 2.5));
        assert!(close(d.median, 2.5));
        assert!(close(d.std, 1.25f64.sqrt()));
        // p150 is out of range: left out.
        assert_eq!(d.percentiles.len(), 1);
        assert!(close(d.percentile(90.0).unwrap(), 3.7));
        assert_eq!(d.percentile(150.0), None);
    }

    #[test]
    fn distribution_one_sample_and_none() {
        // One sample: mean = median = every percentile = 5, std 0.
        let d = Distribution::from_samples(&mut [5.0], &[99.0]).unwrap();
        assert_eq!((d.count, d.mean, d.median, d.std), (1, 5.0, 5.0, 0.0));
        assert_eq!(d.percentile(99.0), Some(5.0));
        assert_eq!(Distribution::from_samples(&mut [], &[99.0]), None);
    }

    #[test]
    fn distribution_ignores_non_finite() {
        // Only 1 and 3 are finite: mean 2, std 1.
        let mut s = [
            f64::NAN,
            1.0,
            f64::INFINITY,
            3.0,
            f64::NEG_INFINITY,
            -f64::NAN,
        ];
        let d = Distribution::from_samples(&mut s, &[50.0]).unwrap();
        assert_eq!(d.count, 2);
        assert!(close(d.mean, 2.0));
        assert!(close(d.std, 1.0));
        assert!(close(d.percentile(50.0).unwrap(), 2.0));
        assert_eq!(Distribution::from_samples(&mut [f64::NAN], &[50.0]), None);
    }

    #[test]
    fn output_vs_total_throughput() {
        // Two requests, 100 in / 50 out each; first dispatch 0 s, last end 2 s.
        // duration 2 s; request_throughput 2/2 = 1; output 100/2 = 50 tok/s;
        // total (200+100)/2 = 150 tok/s; per stream at concurrency 2: 50/2 = 25.
        // TPOT 10 and 30 ms -> median 20 ms -> stream decode 1000/20 = 50 tok/s.
        let mut a = ok(0, 0.0, 2.0);
        let mut b = ok(1, 0.5, 1.5);
        for (r, tpot) in [(&mut a, 10), (&mut b, 30)] {
            r.input_tokens_target = 100;
            r.output_tokens = 50;
            r.output_tokens_requested = 50;
            r.tpot = Some(ms(tpot));
        }
        let s = level_stats(&[a, b], 2, &[50.0, 99.0]);
        assert_eq!(s.completed, 2);
        assert!(close(s.duration_s, 2.0));
        assert_eq!((s.total_input_tokens, s.total_output_tokens), (200, 100));
        assert!(close(s.request_throughput, 1.0));
        assert!(close(s.output_throughput, 50.0));
        assert!(close(s.total_token_throughput, 150.0));
        assert!(close(s.per_stream_tok_s, 25.0));
        assert!(close(s.stream_decode_tok_s.unwrap(), 50.0));
        assert_eq!(s.short_outputs, 0);
    }

    #[test]
    fn failed_and_cancelled_stay_out_of_latency() {
        // A, B completed; C, D failed; E cancelled.
        let mut a = ok(0, 1.0, 3.0);
        a.ttft = Some(ms(100));
        a.ttfb = Some(ms(50));
        a.e2el = Some(ms(2000));
        a.tpot = Some(ms(10));
        a.itl_ms = vec![10.0, 10.0];
        a.input_tokens_target = 90;
        a.input_tokens_reported = Some(120); // reported wins: 120
        a.output_tokens = 50;
        a.output_tokens_requested = 50;
        let mut b = ok(1, 1.5, 4.0);
        b.ttft = Some(ms(300));
        b.ttfb = Some(ms(60));
        b.e2el = Some(ms(2500));
        b.tpot = Some(ms(30));
        b.itl_ms = vec![20.0, 40.0, 60.0];
        b.input_tokens_target = 100;
        b.output_tokens = 50;
        b.output_tokens_requested = 60; // short
        let c = failed(2, 0.5, 0.6, ErrorClass::Http(503));
        let mut d = failed(3, 2.0, 5.0, ErrorClass::Timeout);
        d.ttft = Some(ms(9000));
        d.itl_ms = vec![5000.0];
        d.output_tokens = 1000;
        let mut e = ok(4, 0.0, 9.0);
        e.outcome = Outcome::Cancelled;
        e.ttft = Some(ms(1));
        e.output_tokens = 1000;

        let s = level_stats(&[a, b, c, d, e], 4, &[50.0, 90.0, 99.0]);
        assert_eq!((s.completed, s.failed, s.cancelled), (2, 2, 1));
        // Duration over completed + failed: min start 0.5 (C), max end 5.0 (D)
        // -> 4.5 s. The cancelled E (0..9 s) does not stretch it.
        assert!(close(s.duration_s, 4.5));
        // Tokens over completed only: in 120 + 100 = 220, out 50 + 50 = 100.
        assert_eq!((s.total_input_tokens, s.total_output_tokens), (220, 100));
        // 100 / 4.5 = 22.2222...; per stream at concurrency 4: 5.5555...
        assert!(close(s.output_throughput, 100.0 / 4.5));
        assert!(close(s.total_token_throughput, 320.0 / 4.5));
        assert!(close(s.request_throughput, 2.0 / 4.5));
        assert!(close(s.per_stream_tok_s, 100.0 / 4.5 / 4.0));

        // TTFT [100, 300]: mean 200, median 200, std 100, p99 = 100 + 200*0.99 = 298.
        let ttft = s.ttft.as_ref().unwrap();
        assert_eq!(ttft.count, 2);
        assert!(close(ttft.mean, 200.0));
        assert!(close(ttft.median, 200.0));
        assert!(close(ttft.std, 100.0));
        assert!(close(ttft.percentile(99.0).unwrap(), 298.0));
        // TTFB [50, 60] -> mean 55.
        assert!(close(s.ttfb.as_ref().unwrap().mean, 55.0));
        // E2EL [2000, 2500] -> median 2250.
        assert!(close(s.e2el.as_ref().unwrap().median, 2250.0));
        // TPOT [10, 30] -> median 20 -> 50 tok/s.
        assert!(close(s.stream_decode_tok_s.unwrap(), 50.0));

        // ITL pooled [10, 10, 20, 40, 60]: mean 28, median 20;
        // deviations -18 -18 -8 12 32 -> 324+324+64+144+1024 = 1880 / 5 = 376;
        // p90: rank 3.6 -> 40 + 20*0.6 = 52; p99: rank 3.96 -> 40 + 20*0.96 = 59.2.
        let itl = s.itl.as_ref().unwrap();
        assert_eq!(itl.count, 5);
        assert!(close(itl.mean, 28.0));
        assert!(close(itl.median, 20.0));
        assert!(close(itl.std, 376f64.sqrt()));
        assert!(close(itl.percentile(90.0).unwrap(), 52.0));
        assert!(close(itl.percentile(99.0).unwrap(), 59.2));

        let errors: Vec<(&str, usize)> = s.errors.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(errors, [("http_503", 1), ("timeout", 1)]);

        // Lengths per completed request: in 120, 100; out 50, 50.
        assert_eq!(
            s.input_len,
            Some(MinMeanMax {
                min: 100.0,
                mean: 110.0,
                max: 120.0
            })
        );
        assert_eq!(
            s.output_len,
            Some(MinMeanMax {
                min: 50.0,
                mean: 50.0,
                max: 50.0
            })
        );
        assert_eq!(s.short_outputs, 1);
        assert_eq!(s.token_count_source, Some(TokenSource::Usage));
    }

    #[test]
    fn token_source_majority_and_ties() {
        let mut a = ok(0, 0.0, 1.0);
        let b = ok(1, 0.0, 1.0);
        let mut c = ok(2, 0.0, 1.0);
        a.token_source = TokenSource::ChunkCount;
        c.token_source = TokenSource::Usage;
        // usage x2, chunk_count x1 -> usage.
        let s = level_stats(&[a.clone(), b, c], 1, &[]);
        assert_eq!(s.token_count_source, Some(TokenSource::Usage));
        assert_eq!(s.token_source_counts.len(), 2);
        // usage x1, chunk_count x1 -> the less trusted, chunk_count.
        let s = level_stats(&[a, ok(1, 0.0, 1.0)], 1, &[]);
        assert_eq!(s.token_count_source, Some(TokenSource::ChunkCount));
    }

    #[test]
    fn zero_tpot_and_zero_concurrency_give_no_inf() {
        // Every token in one chunk: TPOT 0 -> 1000/0 would be inf -> None.
        let mut a = ok(0, 0.0, 1.0);
        a.tpot = Some(Duration::ZERO);
        a.output_tokens = 10;
        let s = level_stats(&[a], 0, &[99.0]);
        assert_eq!(s.stream_decode_tok_s, None);
        assert!(close(s.output_throughput, 10.0));
        assert_eq!(s.per_stream_tok_s, 0.0);
        let mut m = Map::new();
        s.insert_json(&mut m, &[99.0]);
        assert_eq!(m["stream_decode_tok_s"], Value::Null);
        assert_eq!(m["p99_tpot_ms"], Value::from(0.0));
    }

    #[test]
    fn empty_level_is_nulls() {
        let s = level_stats(&[], 8, &[50.0, 99.0]);
        assert_eq!((s.completed, s.failed, s.cancelled), (0, 0, 0));
        assert_eq!(s.duration_s, 0.0);
        assert_eq!(s.output_throughput, 0.0);
        assert!(s.ttft.is_none() && s.itl.is_none() && s.tpot.is_none());
        assert!(s.stream_decode_tok_s.is_none() && s.token_count_source.is_none());

        let mut m = Map::new();
        s.insert_json(&mut m, &[50.0, 99.0]);
        for k in [
            "mean_ttft_ms",
            "median_itl_ms",
            "std_e2el_ms",
            "p99_tpot_ms",
            "p50_ttfb_ms",
            "stream_decode_tok_s",
            "token_count_source",
            "input_len",
            "output_len",
        ] {
            assert_eq!(m[k], Value::Null, "{k}");
        }
        assert_eq!(m["duration"], Value::from(0.0));
        assert_eq!(m["completed"], Value::from(0));
        assert_eq!(m["errors"], Value::Object(Map::new()));
        assert_no_nan(&Value::Object(m));
    }

    #[test]
    fn only_failed_requests_have_a_duration_but_no_latency() {
        // Failed 1.0 -> 3.0 s: duration 2 s, nothing completed.
        let s = level_stats(&[failed(0, 1.0, 3.0, ErrorClass::Stalled)], 1, &[99.0]);
        assert!(close(s.duration_s, 2.0));
        assert_eq!(s.request_throughput, 0.0);
        assert!(s.ttft.is_none());
        assert_eq!(s.errors.get("stalled"), Some(&1));
    }

    #[test]
    fn json_keys_are_named_like_vllm() {
        let mut a = ok(0, 0.0, 1.0);
        a.ttft = Some(ms(100));
        a.ttfb = Some(ms(40));
        a.e2el = Some(ms(900));
        a.tpot = Some(ms(20));
        a.itl_ms = vec![20.0; 4];
        a.input_tokens_target = 10;
        a.output_tokens = 5;
        let e = failed(1, 0.0, 0.5, ErrorClass::ConnectRefused);
        let pcts = [50.0, 90.0, 99.0, 99.9];
        let s = level_stats(&[a, e], 1, &pcts);
        let mut m = Map::new();
        m.insert("backend".into(), Value::from("openai-chat"));
        s.insert_json(&mut m, &pcts);

        for metric in ["ttft", "tpot", "itl", "e2el", "ttfb"] {
            for prefix in ["mean", "median", "std", "p50", "p90", "p99", "p99.9"] {
                let k = format!("{prefix}_{metric}_ms");
                assert!(m[&k].is_number(), "{k} = {:?}", m.get(&k));
            }
        }
        assert!(!m.contains_key("p99.0_ttft_ms"));
        assert!(!m.contains_key("p50.0_ttft_ms"));
        assert_eq!(m["p99.9_ttft_ms"], Value::from(100.0));
        assert_eq!(m["median_itl_ms"], Value::from(20.0));
        assert_eq!(m["std_itl_ms"], Value::from(0.0));
        for k in [
            "completed",
            "failed",
            "duration",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "per_stream_tok_s",
            "stream_decode_tok_s",
            "cancelled",
            "short_outputs",
        ] {
            assert!(m[k].is_number(), "{k}");
        }
        assert_eq!(m["backend"], Value::from("openai-chat"));
        assert_eq!(m["completed"], Value::from(1));
        assert_eq!(m["failed"], Value::from(1));
        assert_eq!(m["duration"], Value::from(1.0));
        assert_eq!(m["output_throughput"], Value::from(5.0));
        assert_eq!(m["stream_decode_tok_s"], Value::from(50.0));
        assert_eq!(m["errors"]["connect_refused"], Value::from(1));
        assert_eq!(m["token_count_source"], Value::from("usage"));
        assert_eq!(m["input_len"]["mean"], Value::from(10.0));
        assert_eq!(m["output_len"]["max"], Value::from(5.0));
        let v = Value::Object(m);
        assert_no_nan(&v);
        let text = serde_json::to_string(&v).unwrap();
        assert!(!text.contains("NaN") && !text.contains("inf"));
    }

    #[test]
    fn ttfc_keys_only_when_some_request_reasoned_first() {
        // Without TTFC: no key at all.
        let mut a = ok(0, 0.0, 1.0);
        a.ttft = Some(ms(20));
        let mut m = Map::new();
        let s = level_stats(std::slice::from_ref(&a), 1, &[99.0]);
        assert_eq!(s.ttfc, None);
        s.insert_json(&mut m, &[99.0]);
        assert!(!m.keys().any(|k| k.contains("ttfc")));
        // One request reasoned for 50 ms, one did not: TTFC over the one.
        // A failed request's TTFC is left out like its TTFT.
        let mut b = ok(1, 0.0, 1.0);
        b.ttft = Some(ms(20));
        b.ttfc = Some(ms(70));
        let mut c = failed(2, 0.0, 1.0, ErrorClass::Truncated);
        c.ttfc = Some(ms(500));
        let s = level_stats(&[a, b, c], 1, &[99.0]);
        s.insert_json(&mut m, &[99.0]);
        for k in ["mean_ttfc_ms", "median_ttfc_ms", "p99_ttfc_ms"] {
            assert_eq!(m[k], Value::from(70.0), "{k}");
        }
        assert_eq!(m["std_ttfc_ms"], Value::from(0.0));
    }
}
