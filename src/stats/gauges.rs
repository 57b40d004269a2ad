//! Gauges folded over a level: the server's own (what the probe scraped)
//! and the client's CPU share, with what follows from them (energy per
//! million tokens, clock throttling). Pure: the probe measures, the
//! recorder folds these (docs/architecture.md §2).

use std::collections::BTreeMap;
use std::time::Duration;

/// A GPU above this utilisation counts as busy (for the clock ratio).
pub(crate) const BUSY_UTIL_PCT: f64 = 50.0;

/// SM clock below this share of its maximum, while busy, is throttling.
pub(crate) const THROTTLE_RATIO: f64 = 0.85;

/// One scrape: gauge name -> value. Names are stable keys of the level
/// files' `server` object (`running`, `waiting`, `kv_cache_usage`, ...).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerSample {
    /// Offset from the run's start.
    pub at: Duration,
    pub gauges: BTreeMap<&'static str, f64>,
}

#[cfg(test)]
impl ServerSample {
    /// A sample at the run's start with these gauges.
    pub(crate) fn of(gauges: &[(&'static str, f64)]) -> ServerSample {
        ServerSample {
            gauges: gauges.iter().copied().collect(),
            ..ServerSample::default()
        }
    }
}

/// Min, mean and max of each gauge over the samples a level saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GaugeSummary {
    stats: BTreeMap<&'static str, (f64, f64, f64, u32)>,
}

impl GaugeSummary {
    pub(crate) fn add(&mut self, sample: &ServerSample) {
        for (&name, &value) in &sample.gauges {
            let entry = self.stats.entry(name).or_insert((value, 0.0, value, 0));
            entry.0 = entry.0.min(value);
            entry.1 += value;
            entry.2 = entry.2.max(value);
            entry.3 += 1;
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.stats.is_empty()
    }

    pub(crate) fn min(&self, name: &str) -> Option<f64> {
        self.stats.get(name).map(|s| s.0)
    }

    pub(crate) fn mean(&self, name: &str) -> Option<f64> {
        self.stats.get(name).map(|s| s.1 / f64::from(s.3.max(1)))
    }

    pub(crate) fn max(&self, name: &str) -> Option<f64> {
        self.stats.get(name).map(|s| s.2)
    }

    /// `{"running": {"min", "mean", "max"}, ...}`
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> = self
            .stats
            .iter()
            .map(|(name, (min, sum, max, n))| {
                let mean = sum / f64::from((*n).max(1));
                (
                    (*name).to_string(),
                    serde_json::json!({"min": min, "mean": mean, "max": max}),
                )
            })
            .collect();
        serde_json::Value::Object(map)
    }
}

/// CPU share of one core between two readings, in percent.
pub(crate) fn cpu_percent(
    cpu_before: Duration,
    cpu_after: Duration,
    wall: Duration,
) -> Option<f64> {
    if wall.is_zero() {
        return None;
    }
    Some(cpu_after.saturating_sub(cpu_before).as_secs_f64() / wall.as_secs_f64() * 100.0)
}

/// Energy per million output tokens, joules: mean power (W) x duration (s)
/// / output tokens x 1e6. None without tokens, or for a negative or
/// non-finite power or duration.
pub(crate) fn energy_per_m_output_tokens(
    mean_power_w: f64,
    duration_s: f64,
    output_tokens: u64,
) -> Option<f64> {
    if output_tokens == 0
        || !mean_power_w.is_finite()
        || !duration_s.is_finite()
        || mean_power_w < 0.0
        || duration_s < 0.0
    {
        return None;
    }
    Some(mean_power_w * duration_s / output_tokens as f64 * 1e6)
}

/// The same in watt-hours per million output tokens (J / 3600).
#[cfg(test)]
pub(crate) fn wh_per_m_output_tokens(
    mean_power_w: f64,
    duration_s: f64,
    output_tokens: u64,
) -> Option<f64> {
    energy_per_m_output_tokens(mean_power_w, duration_s, output_tokens).map(|j| j / 3600.0)
}

/// Clock throttling: the GPUs were busy (mean utilisation above 50 %) and
/// the least SM clock ratio seen while busy was under 0.85. Either unknown:
/// false.
pub(crate) fn throttled(sm_clock_ratio_min: Option<f64>, util_mean: Option<f64>) -> bool {
    match (sm_clock_ratio_min, util_mean) {
        (Some(ratio), Some(util)) => util > BUSY_UTIL_PCT && ratio < THROTTLE_RATIO,
        _ => false,
    }
}

/// What a level's level file says of the GPUs, from the level's gauge
/// summary: `{"power_w_mean", "energy_j_per_m_output_tokens",
/// "energy_wh_per_m_output_tokens", "sm_clock_ratio_min", "throttled"}`
/// (a number that cannot be had is null). None when the level saw no GPU
/// sample.
pub(crate) fn level_gpu_json(
    summary: &GaugeSummary,
    duration_s: f64,
    output_tokens: u64,
) -> Option<serde_json::Value> {
    summary.max("gpu_count")?;
    let power = summary.mean("gpu_power_w");
    let joules = power.and_then(|w| energy_per_m_output_tokens(w, duration_s, output_tokens));
    let ratio = summary.min("gpu_sm_clock_ratio");
    Some(serde_json::json!({
        "power_w_mean": power,
        "energy_j_per_m_output_tokens": joules,
        "energy_wh_per_m_output_tokens": joules.map(|j| j / 3600.0),
        "sm_clock_ratio_min": ratio,
        "throttled": throttled(ratio, summary.mean("gpu_util_pct")),
    }))
}

/// What the face that runs the recorder read of the client itself: its
/// CPU time so far, monotonic time since the meter started, and its event
/// loop's lag samples (ms) since the last reading. The wall time rides in
/// the reading so that the tally that divides one by the other reads no
/// clock of its own.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ClientReading {
    pub cpu_time: Duration,
    pub wall_time: Duration,
    pub loop_lag_ms: Vec<f64>,
}

/// Reads the client's own load when called (`probe::client::meter` on a
/// real run); the recorder calls it when a level starts and ends, so it
/// folds what it is told and measures nothing itself.
pub(crate) type ClientMeter = Box<dyn FnMut() -> ClientReading + Send>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_keeps_min_mean_max_per_gauge() {
        // running: 2, 4, 9 -> min 2, mean 5, max 9; waiting only once: 1.
        let mut s = GaugeSummary::default();
        for (i, running) in [2.0, 4.0, 9.0].into_iter().enumerate() {
            let mut sample = ServerSample::default();
            sample.gauges.insert("running", running);
            if i == 1 {
                sample.gauges.insert("waiting", 1.0);
            }
            s.add(&sample);
        }
        let v = s.to_json();
        assert_eq!(
            v["running"],
            serde_json::json!({"min": 2.0, "mean": 5.0, "max": 9.0})
        );
        assert_eq!(
            v["waiting"],
            serde_json::json!({"min": 1.0, "mean": 1.0, "max": 1.0})
        );
        assert!(GaugeSummary::default().is_empty());
    }

    #[test]
    fn cpu_percent_is_cpu_over_wall() {
        // 0.5 s of CPU over 2 s of wall time = 25 % of one core.
        let p = cpu_percent(
            Duration::from_millis(1000),
            Duration::from_millis(1500),
            Duration::from_secs(2),
        );
        assert_eq!(p, Some(25.0));
        assert_eq!(
            cpu_percent(Duration::ZERO, Duration::ZERO, Duration::ZERO),
            None
        );
    }
}
