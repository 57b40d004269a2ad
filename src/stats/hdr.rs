//! Bounded-memory samples: an HDR histogram of every value, plus the exact
//! values while there are few enough to keep (docs/architecture.md §7).
//!
//! Result files report numpy-linear percentiles of the raw samples, as vLLM
//! does. A level of a long soak has millions of requests and hundreds of
//! millions of inter-token gaps, which no run can keep, so each metric keeps
//! its exact values only up to a cap; past it they are dropped and the
//! percentiles come from the histogram instead. The histogram keeps 3
//! significant digits, so any value it reports is within 0.1% of a value it
//! was given. Mean and standard deviation are always exact (running sums),
//! whichever way the percentiles come.
//!
//! Values are recorded as whole units of a fixed resolution (microseconds
//! for latencies in milliseconds, 1 for token counts): the exact samples,
//! the histogram and what a level file saves all hold the same rounded
//! values, so a percentile recomputed from a saved file equals the saved one.

use base64::Engine as _;
use color_eyre::eyre::{eyre, Result, WrapErr};
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use super::percentile::{median_sorted, percentile_sorted};
use super::summary::Distribution;

/// Significant digits the histograms keep: every value within 0.1%.
pub(crate) const SIGFIG: u8 = 3;

/// Exact values kept per metric and level before the percentiles fall back
/// to the histogram: 250,000 requests (1 MB per metric as `u32`).
pub(crate) const EXACT_CAP: usize = 250_000;

/// Inter-token gaps kept exactly: a level of 400 answers of 256 tokens.
pub(crate) const EXACT_CAP_ITL: usize = 100_000;

/// Units per millisecond for latencies: microseconds.
pub(crate) const US_PER_MS: f64 = 1000.0;

// `Histogram::new(SIGFIG)` fails only for sigfig > 5; SIGFIG is the constant
// 3, so this cannot fail, and a fallible constructor would spread to every
// caller.
#[allow(clippy::expect_used)]
fn new_histogram() -> Histogram<u64> {
    let mut h = Histogram::new(SIGFIG).expect("3 significant digits is a valid histogram");
    h.auto(true);
    h
}

/// An HDR histogram of values at a fixed resolution, with its wire form:
/// hdrhistogram's V2 format, DEFLATE-compressed, in base64 (what a level
/// file's `histograms` hold, and what `tokbench merge` adds up).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            hist: new_histogram(),
        }
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.hist == other.hist
    }
}

impl LatencyHistogram {
    /// Record one value already in units (negative and non-finite values
    /// are not recorded: they cannot be a latency).
    pub fn record_units(&mut self, units: u64) {
        // Auto-resizing: recording grows the histogram, it cannot fail.
        let _ = self.hist.record(units);
    }

    pub(crate) fn len(&self) -> u64 {
        self.hist.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Add another histogram's counts (a merge of shards, or of levels).
    pub fn add(&mut self, other: &LatencyHistogram) -> Result<()> {
        self.hist
            .add(&other.hist)
            .map_err(|e| eyre!("cannot add histograms: {e:?}"))
    }

    /// Percentile `p` (0..=100) in units: the middle of the bucket holding
    /// the sample at that rank, so within half a bucket (0.05%) of it.
    pub fn percentile_units(&self, p: f64) -> Option<f64> {
        if self.hist.is_empty() || !(0.0..=100.0).contains(&p) {
            return None;
        }
        let v = self.hist.value_at_quantile(p / 100.0);
        Some(self.hist.median_equivalent(v) as f64)
    }

    pub(crate) fn max_units(&self) -> Option<u64> {
        (!self.hist.is_empty()).then(|| self.hist.max())
    }

    /// V2 + DEFLATE, base64 (standard alphabet, padded).
    pub fn to_base64(&self) -> Result<String> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.hist, &mut bytes)
            .map_err(|e| eyre!("cannot serialize a histogram: {e:?}"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The inverse of [`to_base64`](Self::to_base64); an error names what
    /// was wrong with the text.
    pub fn from_base64(text: &str) -> Result<LatencyHistogram> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .wrap_err("a histogram is not valid base64")?;
        let mut hist: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| eyre!("a histogram is not in HDR V2 format: {e:?}"))?;
        hist.auto(true);
        Ok(LatencyHistogram { hist })
    }
}

/// Every value of one metric over a level: exact while at most `cap` of
/// them, a histogram always, running sums for mean and spread.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Samples {
    units_per_value: f64,
    cap: usize,
    /// The values in units, in the order given; `None` once over the cap.
    exact: Option<Vec<u32>>,
    hist: LatencyHistogram,
    count: u64,
    /// Welford's running mean and sum of squared deviations, in values.
    mean: f64,
    m2: f64,
}

impl Samples {
    /// Latencies given in milliseconds, kept at microsecond resolution.
    pub(crate) fn latency_ms(cap: usize) -> Samples {
        Samples::with_resolution(US_PER_MS, cap)
    }

    /// Counts (tokens): whole numbers.
    pub(crate) fn counts(cap: usize) -> Samples {
        Samples::with_resolution(1.0, cap)
    }

    fn with_resolution(units_per_value: f64, cap: usize) -> Samples {
        Samples {
            units_per_value,
            cap,
            exact: Some(Vec::new()),
            hist: LatencyHistogram::default(),
            count: 0,
            mean: 0.0,
            m2: 0.0,
        }
    }

    /// A value as this set keeps it: rounded to its resolution.
    pub(crate) fn to_units(&self, value: f64) -> Option<u32> {
        let units = (value * self.units_per_value).round();
        (units.is_finite() && units >= 0.0).then(|| units.min(f64::from(u32::MAX)) as u32)
    }

    /// Record one value (ms for latencies). Negative, NaN and infinite
    /// values are left out, as `Distribution::from_samples` leaves them.
    pub(crate) fn add(&mut self, value: f64) {
        let Some(units) = self.to_units(value) else {
            return;
        };
        self.add_units(units);
    }

    fn add_units(&mut self, units: u32) {
        self.hist.record_units(u64::from(units));
        self.count += 1;
        let v = f64::from(units) / self.units_per_value;
        let delta = v - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (v - self.mean);
        if let Some(exact) = &mut self.exact {
            if exact.len() < self.cap {
                exact.push(units);
            } else {
                // Past the cap the percentiles come from the histogram; the
                // memory goes back at once.
                self.exact = None;
            }
        }
    }

    /// Values recorded.
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether every value is still held exactly.
    pub(crate) fn is_exact(&self) -> bool {
        self.exact.is_some()
    }

    /// The exact values, in the set's resolution (ms for latencies), when
    /// all are still held.
    pub(crate) fn exact_values(&self) -> Option<Vec<f64>> {
        self.exact.as_ref().map(|e| {
            e.iter()
                .map(|&u| f64::from(u) / self.units_per_value)
                .collect()
        })
    }

    /// The exact values as [`exact_values`](Self::exact_values) gives them,
    /// without a copy: for writing them out.
    pub(crate) fn exact_iter(&self) -> Option<impl Iterator<Item = f64> + '_> {
        self.exact
            .as_ref()
            .map(|e| e.iter().map(|&u| f64::from(u) / self.units_per_value))
    }

    pub(crate) fn histogram(&self) -> &LatencyHistogram {
        &self.hist
    }

    /// Fold another set into this one (levels into a run, shards into a
    /// merge): exact while both are exact and the sum fits the cap.
    pub(crate) fn absorb(&mut self, other: &Samples) -> Result<()> {
        if (self.units_per_value - other.units_per_value).abs() > f64::EPSILON {
            return Err(eyre!("cannot add samples of different resolutions"));
        }
        self.hist.add(&other.hist)?;
        let n = self.count + other.count;
        if n > 0 {
            let delta = other.mean - self.mean;
            let (na, nb) = (self.count as f64, other.count as f64);
            self.m2 += other.m2 + delta * delta * na * nb / n as f64;
            self.mean += delta * nb / n as f64;
        }
        self.count = n;
        self.exact = match (self.exact.take(), &other.exact) {
            (Some(mut mine), Some(theirs)) if mine.len() + theirs.len() <= self.cap => {
                mine.extend_from_slice(theirs);
                Some(mine)
            }
            _ => None,
        };
        Ok(())
    }

    /// A set rebuilt from what a level file saved: its histogram and, when
    /// the file had them, every exact value (ms for latencies).
    #[cfg(test)]
    pub(crate) fn from_saved(
        units_per_value: f64,
        cap: usize,
        hist: LatencyHistogram,
        exact: Option<&[f64]>,
    ) -> Samples {
        let mut set = Samples::with_resolution(units_per_value, cap.max(1));
        match exact {
            Some(values) => {
                set.cap = set.cap.max(values.len());
                for &v in values {
                    set.add(v);
                }
            }
            None => {
                // Mean and spread from the histogram's bucket values: exact
                // sums were not saved, and a merged mean from the histogram
                // is within its 0.1%.
                set.exact = None;
                for item in hist.hist.iter_recorded() {
                    let v = hist.hist.median_equivalent(item.value_iterated_to()) as f64
                        / units_per_value;
                    let k = item.count_at_value() as f64;
                    let n = set.count as f64 + k;
                    let delta = v - set.mean;
                    set.mean += delta * k / n;
                    set.m2 += delta * delta * set.count as f64 * k / n;
                    set.count += item.count_at_value();
                }
                set.hist = hist;
            }
        }
        set
    }

    /// The level file's summary of this metric: numpy-linear percentiles of
    /// the exact values while held, the histogram's otherwise; exact mean
    /// and population standard deviation either way. `None` when empty.
    pub(crate) fn distribution(&self, percentiles: &[f64]) -> Option<Distribution> {
        if self.count == 0 {
            return None;
        }
        let std = (self.m2 / self.count as f64).max(0.0).sqrt();
        if let Some(mut values) = self.exact_values() {
            // Held values: the same two-pass statistics as before the cap
            // existed, to the last bit.
            return Distribution::from_samples(&mut values, percentiles);
        }
        let at = |p: f64| {
            self.hist
                .percentile_units(p)
                .map(|u| u / self.units_per_value)
        };
        Some(Distribution {
            count: self.count as usize,
            mean: self.mean,
            median: at(50.0)?,
            std,
            percentiles: percentiles
                .iter()
                .filter_map(|&p| at(p).map(|v| (p, v)))
                .collect(),
        })
    }

    /// One percentile (0..=100), the same way [`distribution`](Self::distribution) computes it.
    pub(crate) fn percentile(&self, p: f64) -> Option<f64> {
        match &self.exact {
            Some(_) => {
                let mut v = self.exact_values()?;
                v.sort_by(f64::total_cmp);
                if p == 50.0 {
                    median_sorted(&v)
                } else {
                    percentile_sorted(&v, p)
                }
            }
            None => self
                .hist
                .percentile_units(p)
                .map(|u| u / self.units_per_value),
        }
    }

    /// The largest value (exact: the histogram's max is its bucket's top).
    pub(crate) fn max(&self) -> Option<f64> {
        match &self.exact {
            Some(e) => e.iter().max().map(|&u| f64::from(u) / self.units_per_value),
            None => self
                .hist
                .max_units()
                .map(|u| u as f64 / self.units_per_value),
        }
    }

    pub(crate) fn mean(&self) -> Option<f64> {
        (self.count > 0).then_some(self.mean)
    }

    /// The smallest value.
    pub(crate) fn min(&self) -> Option<f64> {
        match &self.exact {
            Some(e) => e.iter().min().map(|&u| f64::from(u) / self.units_per_value),
            None => {
                (!self.hist.is_empty()).then(|| self.hist.hist.min() as f64 / self.units_per_value)
            }
        }
    }

    /// Nearest rank: the smallest value with at least p% of the values at
    /// or below it (lengths use it; latencies interpolate).
    pub(crate) fn nearest_rank(&self, p: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        match &self.exact {
            Some(e) => {
                let mut sorted = e.clone();
                sorted.sort_unstable();
                let n = sorted.len();
                let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
                Some(f64::from(sorted[rank - 1]) / self.units_per_value)
            }
            None => {
                let v = self.hist.hist.value_at_quantile(p / 100.0);
                Some(self.hist.hist.median_equivalent(v) as f64 / self.units_per_value)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// numpy.percentile(x, p) with linear interpolation, written out.
    fn numpy_linear(sorted: &[f64], p: f64) -> f64 {
        let rank = p / 100.0 * (sorted.len() - 1) as f64;
        let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
        sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
    }

    #[test]
    fn exact_values_give_numpy_percentiles_and_the_cap_switches_to_the_histogram() {
        // 1, 2, 3, 4 ms: median 2.5, p75 = 3.25 (rank 2.25), mean 2.5,
        // population std sqrt(1.25).
        let mut s = Samples::latency_ms(4);
        for v in [4.0, 1.0, 3.0, 2.0] {
            s.add(v);
        }
        assert!(s.is_exact());
        let d = s.distribution(&[75.0]).unwrap();
        assert_eq!(d.count, 4);
        assert_eq!(d.median, 2.5);
        assert_eq!(d.percentile(75.0), Some(3.25));
        assert!((d.std - 1.25f64.sqrt()).abs() < 1e-12);
        // A fifth value passes the cap of 4: percentiles from the
        // histogram, which at 1..5 ms (1,000..5,000 us) is exact to the us
        // bucket middle: p50 of 1..5 is the third value, 3 ms.
        s.add(5.0);
        assert!(!s.is_exact());
        let d = s.distribution(&[50.0]).unwrap();
        assert_eq!(d.count, 5);
        assert!((d.mean - 3.0).abs() < 1e-12, "mean stays exact: {}", d.mean);
        assert!((d.std - 2.0f64.sqrt()).abs() < 1e-12, "std stays exact");
        assert!(
            (d.median - 3.0).abs() <= 3.0 * 0.0005,
            "median {}",
            d.median
        );
    }

    #[test]
    fn values_are_kept_at_microsecond_resolution() {
        let mut s = Samples::latency_ms(10);
        s.add(1.23449);
        s.add(-1.0);
        s.add(f64::NAN);
        assert_eq!(s.exact_values(), Some(vec![1.234]));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn histogram_percentiles_are_within_a_tenth_of_a_percent_on_100k_gaps() {
        // 100,000 synthetic inter-token gaps: a deterministic spread from
        // 5 ms to about 80 ms with a long tail, the shape of a busy server.
        // A 64-bit LCG (Knuth's MMIX constants): stats imports nothing of
        // the workload module, and any fixed uniform stream will do.
        let mut state = 7u64;
        let mut gaps: Vec<f64> = (0..100_000)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                5.0 + 20.0 * (-(1.0 - u).ln())
            })
            .collect();
        let mut s = Samples::latency_ms(0);
        for &g in &gaps {
            s.add(g);
        }
        assert!(!s.is_exact());
        // The exact reference is numpy-linear on the same us-rounded values.
        for g in &mut gaps {
            *g = crate::fmt::round3(*g);
        }
        gaps.sort_by(f64::total_cmp);
        for p in [50.0, 90.0, 99.0, 99.9] {
            let exact = numpy_linear(&gaps, p);
            let hdr = s.percentile(p).unwrap();
            let err = (hdr - exact).abs() / exact;
            assert!(err <= 0.001, "p{p}: hdr {hdr} exact {exact} error {err}");
        }
    }

    #[test]
    fn histograms_survive_base64_and_add_up() {
        let mut a = LatencyHistogram::default();
        let mut b = LatencyHistogram::default();
        for v in [1_000u64, 2_000, 3_000] {
            a.record_units(v);
        }
        b.record_units(40_000);
        let text = a.to_base64().unwrap();
        let back = LatencyHistogram::from_base64(&text).unwrap();
        assert_eq!(back, a);
        let mut sum = back;
        sum.add(&b).unwrap();
        assert_eq!(sum.len(), 4);
        // 40,000 us sits in a bucket 32 us wide at 3 digits: 40,000..=40,031.
        assert_eq!(sum.max_units(), Some(40_031));
        assert!(LatencyHistogram::from_base64("not base64!").is_err());
        assert!(LatencyHistogram::from_base64("aGVsbG8=").is_err());
    }

    #[test]
    fn absorbing_keeps_exactness_and_the_exact_moments() {
        let mut a = Samples::latency_ms(10);
        let mut b = Samples::latency_ms(10);
        for v in [1.0, 2.0] {
            a.add(v);
        }
        for v in [3.0, 4.0, 5.0] {
            b.add(v);
        }
        a.absorb(&b).unwrap();
        assert!(a.is_exact());
        let d = a.distribution(&[]).unwrap();
        assert_eq!(d.median, 3.0);
        assert!((d.mean - 3.0).abs() < 1e-12);
        // Rebuilt from a saved histogram only: mean within the 0.1%.
        let rebuilt = Samples::from_saved(US_PER_MS, 10, a.histogram().clone(), None);
        assert!(!rebuilt.is_exact());
        assert_eq!(rebuilt.len(), 5);
        assert!((rebuilt.mean().unwrap() - 3.0).abs() < 0.003);
    }
}
