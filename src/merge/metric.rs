//! One latency metric of one level, merged over shards: its histogram (a
//! sum of counts, exact), its samples when every shard kept them, and its
//! statistics (docs/architecture.md, `merge`'s contract).
//!
//! - Percentiles: numpy-linear over the union's values when every shard
//!   that has values of the metric saved them all (`samples`), else the
//!   merged histogram's (within 0.1% at 3 significant digits). ITL never
//!   has samples: always the histogram's.
//! - Mean and standard deviation: exact either way. With the samples they
//!   are computed from them; without, from each shard's saved count (its
//!   histogram's), mean and population standard deviation, pooled
//!   (Chan et al.'s parallel formula), which is the union's to rounding.

use color_eyre::eyre::{Result, WrapErr};
use serde_json::{Map, Value};

use crate::fmt::opt_num;
use crate::report::schema::LevelFile;
use crate::stats::hdr::{LatencyHistogram, EXACT_CAP, US_PER_MS};
use crate::stats::percentile::percentile_label;
use crate::stats::summary::Distribution;

/// A metric's figures over the union of shards.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MergedMetric {
    /// Values counted (the merged histogram's count).
    pub count: u64,
    pub mean: Option<f64>,
    pub median: Option<f64>,
    pub std: Option<f64>,
    /// `(p, value)` per asked percentile.
    pub percentiles: Vec<(f64, Option<f64>)>,
    /// True when the percentiles are numpy-linear over every value.
    pub exact: bool,
    pub histogram: LatencyHistogram,
    /// Every value (sorted), when every shard kept them and they fit the
    /// cap a level file keeps (`EXACT_CAP`), for a merge of merges.
    pub samples: Option<Vec<f64>>,
}

/// One shard's level as a metric sees it.
pub(crate) struct Part<'a> {
    /// `DIR/sweep-c4.json`, for messages.
    pub name: &'a str,
    pub level: &'a LevelFile,
}

/// Merges metric `metric` (`ttft`, `itl`, ...) over `parts`.
pub(crate) fn merge_metric(
    metric: &str,
    parts: &[Part<'_>],
    percentiles: &[f64],
) -> Result<MergedMetric> {
    let key = format!("{metric}_ms");
    let mut histogram = LatencyHistogram::default();
    let mut exact_values: Option<Vec<f64>> = (metric != "itl").then(Vec::new);
    // (count, mean, population std) per shard with values, while every
    // one of them saved both.
    let mut moments: Option<Vec<(f64, f64, f64)>> = Some(Vec::new());
    for part in parts {
        let Some(text) = part.level.histograms.as_ref().and_then(|h| h.get(&key)) else {
            // No histogram of this metric: the shard had no value of it
            // (ttfc without reasoning, TPOT of one-token answers).
            continue;
        };
        let h = LatencyHistogram::from_base64(text)
            .wrap_err_with(|| format!("{}: histograms.{key}", part.name))?;
        let n = h.len();
        histogram
            .add(&h)
            .wrap_err_with(|| format!("{}: histograms.{key}", part.name))?;
        if n == 0 {
            continue;
        }
        let saved = part
            .level
            .samples
            .as_ref()
            .and_then(|s| s.get(&key))
            .filter(|v| v.len() as u64 == n);
        exact_values = match (exact_values, saved) {
            (Some(mut all), Some(values)) => {
                all.extend_from_slice(values);
                Some(all)
            }
            _ => None,
        };
        let mean = part.level.stat(&format!("mean_{metric}_ms"));
        let std = part.level.stat(&format!("std_{metric}_ms"));
        moments = match (moments, mean, std) {
            (Some(mut m), Some(mean), Some(std)) => {
                m.push((n as f64, mean, std));
                Some(m)
            }
            _ => None,
        };
    }
    let count = histogram.len();
    if let Some(mut values) = exact_values.filter(|v| !v.is_empty()) {
        if let Some(d) = Distribution::from_samples(&mut values, percentiles) {
            let samples = (values.len() <= EXACT_CAP).then_some(values);
            return Ok(MergedMetric {
                count,
                mean: Some(d.mean),
                median: Some(d.median),
                std: Some(d.std),
                percentiles: percentiles.iter().map(|&p| (p, d.percentile(p))).collect(),
                exact: true,
                histogram,
                samples,
            });
        }
    }
    let at = |p: f64| histogram.percentile_units(p).map(|u| u / US_PER_MS);
    let (mean, std) = moments
        .filter(|_| count > 0)
        .and_then(|m| pooled(&m))
        .map_or((None, None), |(mean, std)| (Some(mean), Some(std)));
    Ok(MergedMetric {
        count,
        mean,
        median: at(50.0),
        std,
        percentiles: percentiles.iter().map(|&p| (p, at(p))).collect(),
        exact: false,
        samples: None,
        histogram,
    })
}

/// Mean and population standard deviation of a union from each part's
/// `(count, mean, population std)`: M2 = sum(n_i std_i^2 + n_i (mean_i - mean)^2).
pub(crate) fn pooled(parts: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    let n: f64 = parts.iter().map(|p| p.0).sum();
    if n <= 0.0 {
        return None;
    }
    let mean = parts.iter().map(|(k, m, _)| k * m).sum::<f64>() / n;
    let m2: f64 = parts
        .iter()
        .map(|(k, m, s)| k * s * s + k * (m - mean) * (m - mean))
        .sum();
    Some((mean, (m2 / n).max(0.0).sqrt()))
}

impl MergedMetric {
    /// `mean_`, `median_`, `std_` and `p{P}_` + metric + `_ms`, as
    /// `LevelStats::latency_json` names them.
    pub(crate) fn insert_keys(&self, metric: &str, map: &mut Map<String, Value>) {
        map.insert(format!("mean_{metric}_ms"), opt_num(self.mean));
        map.insert(format!("median_{metric}_ms"), opt_num(self.median));
        map.insert(format!("std_{metric}_ms"), opt_num(self.std));
        for &(p, v) in &self.percentiles {
            map.insert(format!("p{}_{metric}_ms", percentile_label(p)), opt_num(v));
        }
    }

    /// The same keys, all null: a metric no shard had a value of.
    pub(crate) fn insert_nulls(metric: &str, percentiles: &[f64], map: &mut Map<String, Value>) {
        for stat in ["mean", "median", "std"] {
            map.insert(format!("{stat}_{metric}_ms"), Value::Null);
        }
        for &p in percentiles {
            map.insert(format!("p{}_{metric}_ms", percentile_label(p)), Value::Null);
        }
    }
}
