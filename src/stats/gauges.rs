//! Gauges folded over a level: the server's own (what the probe scraped)
//! and the client's CPU share, with what follows from them (energy per
//! million tokens, clock throttling). Pure: the probe measures, the
//! recorder folds these (docs/architecture.md §2).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fmt::{round3, round4};

/// A GPU above this utilisation counts as busy (for the clock ratio).
pub(crate) const BUSY_UTIL_PCT: f64 = 50.0;

/// SM clock below this share of its maximum, while busy, is throttling.
pub(crate) const THROTTLE_RATIO: f64 = 0.85;

/// The GPUs' energy since the probe's first reading, J, summed over the GPUs
/// from each one's own counter (`probe::dcgm::EnergyMeter`): it only grows.
pub(crate) const ENERGY_J: &str = "gpu_energy_j";

/// How many times the energy counters stopped adding up since the probe's
/// first reading (a counter went down, a GPU came or went): a level over
/// which it changed cannot take its energy from [`ENERGY_J`].
pub(crate) const ENERGY_BREAKS: &str = "gpu_energy_breaks";

/// How many GPUs hold their clocks down for power (software power cap or
/// hardware power brake), for heat, or by the hardware's own slowdown.
pub(crate) const CLOCKS_POWER_CAP: &str = "gpu_clocks_power_cap";
pub(crate) const CLOCKS_THERMAL: &str = "gpu_clocks_thermal";
pub(crate) const CLOCKS_HW_SLOWDOWN: &str = "gpu_clocks_hw_slowdown";

/// Running totals, not gauges: their min/mean/max over a level say nothing
/// (the level's share of them is the `gpu` block's energy), so the level
/// file's `server` block leaves them out.
const RUNNING_TOTALS: [&str; 2] = [ENERGY_J, ENERGY_BREAKS];

/// One scrape: gauge name -> value. Names are stable keys of the level
/// files' `server` object (`running`, `waiting`, `kv_cache_usage`, ...).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerSample {
    /// Offset from the run's start.
    pub at: Duration,
    pub gauges: BTreeMap<&'static str, f64>,
}

/// The gauges that count the requests a server runs, by engine: vLLM's,
/// SGLang's and TGI's `running`, Ollama's none, llama.cpp's `processing`
/// (`/metrics`) or `slots_busy` (`/slots`).
const RUNNING_GAUGES: [&str; 3] = ["running", "processing", "slots_busy"];

/// The requests the server runs, by a scrape's gauges, where it says.
pub(crate) fn running_count(gauges: &BTreeMap<&'static str, f64>) -> Option<f64> {
    RUNNING_GAUGES
        .iter()
        .find_map(|k| gauges.get(k))
        .copied()
        .filter(|r| r.is_finite())
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

/// Min, mean and max of each gauge over the samples a level saw, and the
/// first and last reading of the GPUs' energy total.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GaugeSummary {
    stats: BTreeMap<&'static str, (f64, f64, f64, u32)>,
    /// (at, energy J, breaks) of the first and the latest sample with
    /// [`ENERGY_J`].
    energy: Option<[(Duration, f64, f64); 2]>,
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
        if let Some(&joules) = sample.gauges.get(ENERGY_J) {
            let breaks = sample.gauges.get(ENERGY_BREAKS).copied().unwrap_or(0.0);
            let reading = (sample.at, joules, breaks);
            match &mut self.energy {
                Some([_, last]) => *last = reading,
                None => self.energy = Some([reading, reading]),
            }
        }
    }

    /// What the GPUs' energy counters say of the samples so far: their
    /// growth from the first to the latest, over how long, and whether it
    /// can be trusted. None without two such samples.
    pub(crate) fn counter_energy(&self) -> Option<CounterEnergy> {
        let [(t0, j0, b0), (t1, j1, b1)] = self.energy?;
        let span_s = t1.checked_sub(t0)?.as_secs_f64();
        (span_s > 0.0).then_some(CounterEnergy {
            joules: j1 - j0,
            span_s,
            broken: b1 != b0 || j1 < j0,
        })
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
            .filter(|(name, _)| !RUNNING_TOTALS.contains(name))
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

/// The GPUs' energy counters over a level's samples: `joules` between the
/// first and the last sample, `span_s` apart; `broken` when a counter went
/// down or a GPU came or went between them (an exporter restarted, a GPU
/// reset), so the difference is not the energy used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CounterEnergy {
    pub joules: f64,
    pub span_s: f64,
    pub broken: bool,
}

/// Where a level's energy came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EnergyFrom {
    /// The GPUs' own energy counters.
    Counter,
    /// The mean of the power readings times the level's duration.
    PowerTimesTime,
}

impl EnergyFrom {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EnergyFrom::Counter => "counter",
            EnergyFrom::PowerTimesTime => "power_x_time",
        }
    }
}

/// A level's GPU energy, J, over its whole `duration_s`. From the counters
/// where they hold (not broken, a span of time between two samples): their
/// growth is exact over the span the samples cover, and the level's edges
/// outside it (under a probe interval each side) are carried at the
/// counters' own mean power over the span, `joules / span_s`. Otherwise
/// mean power x duration, which samples the power once an interval and
/// misses what happens between. None when neither can be had.
pub(crate) fn level_energy(
    counter: Option<CounterEnergy>,
    mean_power_w: Option<f64>,
    duration_s: f64,
) -> Option<(f64, EnergyFrom)> {
    if !duration_s.is_finite() || duration_s < 0.0 {
        return None;
    }
    let from_counter = counter
        .filter(|c| !c.broken && c.joules.is_finite() && c.joules >= 0.0)
        .filter(|c| c.span_s.is_finite() && c.span_s > 0.0)
        .map(|c| c.joules / c.span_s * duration_s);
    if let Some(joules) = from_counter {
        return Some((joules, EnergyFrom::Counter));
    }
    mean_power_w
        .filter(|w| w.is_finite() && *w >= 0.0)
        .map(|w| (w * duration_s, EnergyFrom::PowerTimesTime))
}

/// Energy per million output tokens, joules: `joules` / output tokens x 1e6.
/// None without tokens, or for a negative or non-finite energy.
pub(crate) fn joules_per_m_output_tokens(joules: f64, output_tokens: u64) -> Option<f64> {
    if output_tokens == 0 || !joules.is_finite() || joules < 0.0 {
        return None;
    }
    Some(joules / output_tokens as f64 * 1e6)
}

/// Energy per million output tokens, joules, from mean power (W) x duration
/// (s). None without tokens, or for a negative or non-finite power or
/// duration.
#[cfg(test)]
pub(crate) fn energy_per_m_output_tokens(
    mean_power_w: f64,
    duration_s: f64,
    output_tokens: u64,
) -> Option<f64> {
    let (joules, _) = level_energy(None, Some(mean_power_w), duration_s)?;
    joules_per_m_output_tokens(joules, output_tokens)
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

/// The clock-event reasons any GPU gave during the level, by name
/// (`power_cap`, `thermal`, `hw_slowdown`); None when no GPU told its
/// reasons (nvidia-smi's query, or an exporter without the field).
fn clock_events(summary: &GaugeSummary) -> Option<Vec<&'static str>> {
    let named = [
        (CLOCKS_POWER_CAP, "power_cap"),
        (CLOCKS_THERMAL, "thermal"),
        (CLOCKS_HW_SLOWDOWN, "hw_slowdown"),
    ];
    let mut told = false;
    let mut seen = Vec::new();
    for (gauge, name) in named {
        if let Some(max) = summary.max(gauge) {
            told = true;
            if max > 0.0 {
                seen.push(name);
            }
        }
    }
    told.then_some(seen)
}

/// What a level's level file says of the GPUs, from the level's gauge
/// summary: `{"power_w_mean", "util_pct_mean", "energy_j", "energy_from",
/// "energy_counter_j", "energy_counter_span_s", "energy_counter_reset",
/// "energy_j_per_m_output_tokens", "energy_wh_per_m_output_tokens",
/// "sm_clock_ratio_min", "clock_events", "throttled"}` (a number that cannot
/// be had is null; docs/server-figures.md, GPU). None when the level saw no
/// GPU sample.
pub(crate) fn level_gpu_json(
    summary: &GaugeSummary,
    duration_s: f64,
    output_tokens: u64,
) -> Option<serde_json::Value> {
    summary.max("gpu_count")?;
    let power = summary.mean("gpu_power_w");
    let util = summary.mean("gpu_util_pct");
    let counter = summary.counter_energy();
    let energy = level_energy(counter, power, duration_s);
    let joules = energy.and_then(|(j, _)| joules_per_m_output_tokens(j, output_tokens));
    let ratio = summary.min("gpu_sm_clock_ratio");
    let events = clock_events(summary);
    // A limit the GPUs said they hit while busy is throttling, where the
    // clock ratio cannot tell (a DCGM exporter gives no maximum clock).
    let limited =
        events.as_ref().is_some_and(|e| !e.is_empty()) && util.is_some_and(|u| u > BUSY_UTIL_PCT);
    let good = counter.filter(|c| !c.broken);
    let r3 = |x: Option<f64>| x.map(round3);
    Some(serde_json::json!({
        "power_w_mean": r3(power),
        "util_pct_mean": r3(util),
        "energy_j": r3(energy.map(|(j, _)| j)),
        "energy_from": energy.map(|(_, from)| from.as_str()),
        "energy_counter_j": r3(good.map(|c| c.joules)),
        "energy_counter_span_s": r3(good.map(|c| c.span_s)),
        "energy_counter_reset": counter.map(|c| c.broken),
        "energy_j_per_m_output_tokens": r3(joules),
        "energy_wh_per_m_output_tokens": r3(joules.map(|j| j / 3600.0)),
        "sm_clock_ratio_min": ratio.map(round4),
        "clock_events": events,
        "throttled": throttled(ratio, util) || limited,
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

    /// A sample `at` seconds in with the GPUs' energy total and breaks, and
    /// a power reading.
    fn energy_sample(at: f64, joules: f64, breaks: f64, power: f64) -> ServerSample {
        let mut sample = ServerSample::of(&[
            ("gpu_count", 2.0),
            ("gpu_power_w", power),
            ("gpu_util_pct", 80.0),
            (ENERGY_J, joules),
            (ENERGY_BREAKS, breaks),
        ]);
        sample.at = Duration::from_secs_f64(at);
        sample
    }

    #[test]
    fn energy_from_the_counter_spans_the_level() {
        // Counter total 0 J at 1 s, 1000 J at 3 s, 2000 J at 5 s: 2000 J over
        // 4 s, 500 W by the GPUs' own meter. The power readings say 480 W.
        let mut s = GaugeSummary::default();
        for (at, j) in [(1.0, 0.0), (3.0, 1000.0), (5.0, 2000.0)] {
            s.add(&energy_sample(at, j, 0.0, 480.0));
        }
        let c = s.counter_energy();
        assert_eq!(
            c,
            Some(CounterEnergy {
                joules: 2000.0,
                span_s: 4.0,
                broken: false
            })
        );
        // A 5 s level at the counter's 500 W: 2500 J (power x time: 2400 J).
        assert_eq!(
            level_energy(c, Some(480.0), 5.0),
            Some((2500.0, EnergyFrom::Counter))
        );
        // 2500 J over 10,000 tokens = 250,000 J per million = 69.444 Wh.
        let Some(v) = level_gpu_json(&s, 5.0, 10_000) else {
            panic!("GPU samples make a gpu block");
        };
        assert_eq!(v["energy_from"], "counter");
        assert_eq!(v["energy_j"], 2500.0);
        assert_eq!(v["energy_counter_j"], 2000.0);
        assert_eq!(v["energy_counter_span_s"], 4.0);
        assert_eq!(v["energy_counter_reset"], false);
        assert_eq!(v["energy_j_per_m_output_tokens"], 250_000.0);
        assert_eq!(v["energy_wh_per_m_output_tokens"], 69.444);
        assert_eq!(v["power_w_mean"], 480.0);
        assert_eq!(v["util_pct_mean"], 80.0);
        // The running totals stay out of the `server` block.
        let server = s.to_json();
        assert!(server.get(ENERGY_J).is_none() && server.get(ENERGY_BREAKS).is_none());
        assert_eq!(server["gpu_power_w"]["mean"], 480.0);
    }

    #[test]
    fn a_broken_counter_falls_back_to_power_times_time() {
        // The breaks count moved from 0 to 1 inside the level: an exporter
        // or GPU reset. 480 W x 5 s = 2400 J, said to be power x time.
        let mut s = GaugeSummary::default();
        s.add(&energy_sample(1.0, 100.0, 0.0, 470.0));
        s.add(&energy_sample(5.0, 150.0, 1.0, 490.0));
        assert!(s.counter_energy().is_some_and(|c| c.broken));
        let Some(v) = level_gpu_json(&s, 5.0, 10_000) else {
            panic!("GPU samples make a gpu block");
        };
        assert_eq!(v["energy_from"], "power_x_time");
        assert_eq!(v["energy_j"], 2400.0);
        assert_eq!(v["energy_counter_reset"], true);
        assert!(v["energy_counter_j"].is_null());
        // 2400 J / 10,000 tokens x 1e6
        assert_eq!(v["energy_j_per_m_output_tokens"], 240_000.0);
        // One sample of the counter has no span: power x time, no reset said.
        let mut one = GaugeSummary::default();
        one.add(&energy_sample(2.0, 10.0, 0.0, 300.0));
        assert_eq!(one.counter_energy(), None);
        let v = level_gpu_json(&one, 2.0, 1000);
        assert!(v.is_some_and(|v| v["energy_from"] == "power_x_time"
            && v["energy_j"] == 600.0
            && v["energy_counter_reset"].is_null()));
        // Neither counter nor power: no energy at all.
        assert_eq!(level_energy(None, None, 5.0), None);
        assert_eq!(joules_per_m_output_tokens(1.0, 0), None);
        assert_eq!(joules_per_m_output_tokens(f64::NAN, 1), None);
    }

    #[test]
    fn clock_events_while_busy_are_throttling() {
        let mut s = GaugeSummary::default();
        s.add(&ServerSample::of(&[
            ("gpu_count", 1.0),
            ("gpu_util_pct", 95.0),
            (CLOCKS_POWER_CAP, 1.0),
            (CLOCKS_THERMAL, 0.0),
            (CLOCKS_HW_SLOWDOWN, 0.0),
        ]));
        let Some(v) = level_gpu_json(&s, 1.0, 1) else {
            panic!("a gpu block");
        };
        assert_eq!(v["clock_events"], serde_json::json!(["power_cap"]));
        assert_eq!(v["throttled"], true);
        // nvidia-smi's query tells no reasons: null, not an empty list.
        let mut smi = GaugeSummary::default();
        smi.add(&ServerSample::of(&[
            ("gpu_count", 1.0),
            ("gpu_util_pct", 95.0),
        ]));
        assert!(level_gpu_json(&smi, 1.0, 1)
            .is_some_and(|v| v["clock_events"].is_null() && v["throttled"] == false));
    }
}
