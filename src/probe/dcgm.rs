//! GPU gauges from a DCGM exporter (`--gpu-metrics URL`): NVIDIA's
//! dcgm-exporter serves each GPU's DCGM fields as Prometheus text, which is
//! how a load generator in another pod or on another node reaches the GPUs
//! (docs/server-figures.md, GPU). Each GPU of the page becomes a
//! [`GpuReading`], aggregated by the same [`gpu_gauges`] as nvidia-smi's,
//! so the level files and the live view read the same names whichever the
//! source. The GPUs' energy counters are followed by [`EnergyMeter`]: a
//! level's energy then comes from the GPUs' own meter, not from power
//! sampled once an interval.
//!
//! An exporter that cannot be read on the first try (HTML, an error status,
//! no answer) costs one line, through the caller's `give_up`, and the run
//! goes on without GPU figures.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::gpu::{gpu_gauges, GpuReading};
use super::live::{fetch_or_why, FetchError, ServerSample, SCRAPE_LIMIT};
use super::prometheus::{Metrics, Sample};
use crate::stats::gauges::{ENERGY_BREAKS, ENERGY_J};

/// The DCGM fields read, by the exporter's names (its default counters and
/// the clock fields a custom collector file can add).
pub(crate) const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
pub(crate) const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
pub(crate) const FB_FREE: &str = "DCGM_FI_DEV_FB_FREE";
pub(crate) const FB_RESERVED: &str = "DCGM_FI_DEV_FB_RESERVED";
pub(crate) const FB_TOTAL: &str = "DCGM_FI_DEV_FB_TOTAL";
pub(crate) const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";
pub(crate) const TOTAL_ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
pub(crate) const SM_CLOCK: &str = "DCGM_FI_DEV_SM_CLOCK";
pub(crate) const MAX_SM_CLOCK: &str = "DCGM_FI_DEV_MAX_SM_CLOCK";
pub(crate) const GPU_TEMP: &str = "DCGM_FI_DEV_GPU_TEMP";
/// The reasons bitmask under its name since DCGM 3.3 and the one before.
pub(crate) const CLOCKS_EVENT_REASONS: &str = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS";
pub(crate) const CLOCK_THROTTLE_REASONS: &str = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS";

/// DCGM writes a field it has no value for as a "blank" sentinel near the
/// top of the field's integer type (`DCGM_INT32_BLANK` 0x7ffffff0 and up;
/// int64 and fp64 blanks are larger still): the exporter's own README shows
/// `DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794`, int64's "not
/// supported". No clock, memory size, temperature or power comes near.
const INT32_BLANK: f64 = 2_147_483_632.0;

/// The energy counter is an int64 of millijoules that passes 2^31 within
/// hours, so only int64's blanks (0x7ffffffffffffff0 and up) are blanks.
const INT64_BLANK: f64 = 9_223_372_036_854_775_792.0;

/// One answer may take this long: the exporter may sit on another node.
const SCRAPE_TIMEOUT_FLOOR: Duration = Duration::from_secs(2);

/// One GPU of a page: who it is (host and UUID, else its index or device)
/// and what it said.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DcgmGpu {
    pub(crate) id: String,
    pub(crate) reading: GpuReading,
}

/// The GPU a sample is about: its `Hostname` (one exporter per node; a
/// page that gathers several nodes keeps them apart) and its `UUID`, else
/// `gpu` (the index), else `device` (`nvidia0`). None for a sample of no GPU.
fn gpu_id(s: &Sample) -> Option<String> {
    let host = s.label("Hostname").unwrap_or("");
    let who = ["UUID", "uuid", "gpu", "device"]
        .iter()
        .find_map(|k| s.label(k).filter(|v| !v.is_empty()))?;
    Some(format!("{host}/{who}"))
}

/// A value as DCGM meant it: None for a blank, a negative or a non-number.
fn value(name: &str, v: f64) -> Option<f64> {
    let blank = if name == TOTAL_ENERGY {
        INT64_BLANK
    } else {
        INT32_BLANK
    };
    (v.is_finite() && v >= 0.0 && v < blank).then_some(v)
}

/// The fields of one GPU as the page gave them, before they make a reading.
#[derive(Default)]
struct Fields {
    util: Option<f64>,
    fb_used: Option<f64>,
    fb_free: Option<f64>,
    fb_reserved: Option<f64>,
    fb_total: Option<f64>,
    power: Option<f64>,
    energy: Option<f64>,
    sm_clock: Option<f64>,
    max_sm_clock: Option<f64>,
    temp: Option<f64>,
    reasons: Option<f64>,
}

impl Fields {
    fn slot(&mut self, name: &str) -> Option<&mut Option<f64>> {
        Some(match name {
            GPU_UTIL => &mut self.util,
            FB_USED => &mut self.fb_used,
            FB_FREE => &mut self.fb_free,
            FB_RESERVED => &mut self.fb_reserved,
            FB_TOTAL => &mut self.fb_total,
            POWER_USAGE => &mut self.power,
            TOTAL_ENERGY => &mut self.energy,
            SM_CLOCK => &mut self.sm_clock,
            MAX_SM_CLOCK => &mut self.max_sm_clock,
            GPU_TEMP => &mut self.temp,
            CLOCKS_EVENT_REASONS | CLOCK_THROTTLE_REASONS => &mut self.reasons,
            _ => return None,
        })
    }

    fn reading(&self) -> GpuReading {
        // DCGM splits the frame buffer into used, free and (since DCGM 3)
        // reserved; FB_TOTAL, where a collector file asks for it, is the sum.
        let total = self.fb_total.or(match (self.fb_used, self.fb_free) {
            (Some(used), Some(free)) => Some(used + free + self.fb_reserved.unwrap_or(0.0)),
            _ => None,
        });
        GpuReading {
            utilization_pct: self.util,
            memory_used_mib: self.fb_used,
            memory_total_mib: total,
            power_w: self.power,
            sm_clock_mhz: self.sm_clock,
            // The default counters have no maximum clock: then no ratio,
            // rather than one against a guess.
            sm_clock_max_mhz: self.max_sm_clock,
            temperature_c: self.temp,
            energy_mj: self.energy,
            // A bitmask: whole, and exact in an f64 below 2^53.
            clock_event_reasons: self
                .reasons
                .filter(|r| r.fract() == 0.0 && *r < 9_007_199_254_740_992.0)
                .map(|r| r as u64),
        }
    }
}

/// The GPUs of a DCGM exporter's page, in the order the page first names
/// them. A field a GPU has twice (MIG instances or pods sharing a GPU
/// repeat the GPU's own fields with more labels) counts once: the first.
/// Empty when the page has no DCGM field of a GPU.
pub(crate) fn parse_dcgm(metrics: &Metrics) -> Vec<DcgmGpu> {
    let mut order: Vec<String> = Vec::new();
    let mut fields: BTreeMap<String, Fields> = BTreeMap::new();
    for s in &metrics.samples {
        if !s.name.starts_with("DCGM_FI_") {
            continue;
        }
        let Some(id) = gpu_id(s) else { continue };
        let known = fields.contains_key(&id);
        let gpu = fields.entry(id.clone()).or_default();
        let Some(slot) = gpu.slot(&s.name) else {
            // A DCGM field not read here still says the GPU is there.
            if !known {
                order.push(id);
            }
            continue;
        };
        if !known {
            order.push(id);
        }
        if slot.is_none() {
            *slot = value(&s.name, s.value);
        }
    }
    order
        .into_iter()
        .filter_map(|id| {
            let reading = fields.get(&id)?.reading();
            Some(DcgmGpu { id, reading })
        })
        .collect()
}

/// The GPUs' energy, followed from one page to the next: each GPU's own
/// counter (mJ since its driver loaded) grows by what it used, and their
/// growth summed over the GPUs is added up from the first page on. Where
/// the counters stop adding up (one went down: a GPU reset, a driver
/// reload; a GPU came or went) the total does not move and `breaks` counts
/// one: a level over which `breaks` changed takes its energy from power x
/// time instead. Pure: the probe feeds it pages.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EnergyMeter {
    last: BTreeMap<String, f64>,
    started: bool,
    total_j: f64,
    breaks: u32,
}

impl EnergyMeter {
    /// Fold one page's counters, `(GPU id, mJ)`: `Some((J since the first
    /// page, breaks))` when the page has news of them. None when no GPU has
    /// the counter, or when no counter moved since the last page: an
    /// exporter collects on its own interval (30 s unless told otherwise)
    /// and repeats its last values in between, and a repeated value dated
    /// by this scrape would date the energy to the wrong time.
    pub(crate) fn add(&mut self, counters: &[(String, f64)]) -> Option<(f64, u32)> {
        if counters.is_empty() {
            return None;
        }
        let same_gpus = counters.len() == self.last.len()
            && counters.iter().all(|(id, _)| self.last.contains_key(id));
        let moved = if !self.started {
            self.started = true;
            true
        } else if !same_gpus {
            self.breaks += 1;
            true
        } else {
            let mut grew = 0.0;
            let mut went_down = false;
            let mut moved = false;
            for (id, mj) in counters {
                let before = self.last.get(id).copied().unwrap_or(*mj);
                moved |= *mj != before;
                if *mj < before {
                    went_down = true;
                } else {
                    grew += mj - before;
                }
            }
            if went_down {
                self.breaks += 1;
            } else {
                self.total_j += grew / 1000.0;
            }
            moved
        };
        self.last = counters.iter().cloned().collect();
        moved.then_some((self.total_j, self.breaks))
    }
}

/// One page as the gauges of a sample, the energy meter fed. None when the
/// page holds no GPU.
pub(crate) fn page_gauges(
    metrics: &Metrics,
    meter: &mut EnergyMeter,
) -> Option<BTreeMap<&'static str, f64>> {
    let gpus = parse_dcgm(metrics);
    if gpus.is_empty() {
        return None;
    }
    let readings: Vec<GpuReading> = gpus.iter().map(|g| g.reading).collect();
    let mut gauges = BTreeMap::new();
    gpu_gauges(&readings, &mut gauges);
    let counters: Vec<(String, f64)> = gpus
        .iter()
        .filter_map(|g| Some((g.id.clone(), g.reading.energy_mj?)))
        .collect();
    if let Some((joules, breaks)) = meter.add(&counters) {
        gauges.insert(ENERGY_J, joules);
        gauges.insert(ENERGY_BREAKS, f64::from(breaks));
    }
    Some(gauges)
}

/// Why a page brought no GPU, in the words of the one line the user gets.
fn why_not(miss: Result<&[u8], FetchError>, timeout: Duration) -> String {
    match miss {
        Ok(body) if body.trim_ascii_start().starts_with(b"<") => {
            "no DCGM metrics there (answered HTML)".into()
        }
        Ok(_) => "no DCGM metrics there (no DCGM_FI_DEV_ field of a GPU on the page)".into(),
        Err(FetchError::Status(code)) => format!("no DCGM metrics there (answered HTTP {code})"),
        Err(FetchError::TooLarge) => format!(
            "no DCGM metrics there (a page over {} MiB)",
            SCRAPE_LIMIT >> 20
        ),
        Err(FetchError::Timeout) => format!("no answer within {} s", timeout.as_secs_f64()),
        Err(FetchError::Connect) => "no answer (connection refused or host unreachable)".into(),
        Err(FetchError::Broken) => "the connection broke before the page came".into(),
    }
}

/// Scrape `url` every `interval` and send the aggregate GPU gauges, with
/// the energy total where the GPUs have the counter. When the first scrape
/// brings no GPU, `give_up` gets one line (naming the URL as `shown`, which
/// holds no credentials) and the task ends without sending anything; after
/// ten failed scrapes in a row it does the same. It also ends when the
/// receiver is dropped. `client` must not be the target's: that one sends
/// the API key with every request.
pub(crate) fn spawn(
    client: reqwest::Client,
    url: String,
    shown: String,
    interval: Duration,
    run_start: Instant,
    give_up: impl FnOnce(String) + Send + 'static,
) -> mpsc::UnboundedReceiver<ServerSample> {
    let (tx, rx) = mpsc::unbounded_channel();
    let interval = interval.max(Duration::from_millis(10));
    let timeout = interval.max(SCRAPE_TIMEOUT_FLOOR);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut meter = EnergyMeter::default();
        let mut rule = super::gpu::MissRule::default();
        loop {
            ticker.tick().await;
            if tx.is_closed() {
                break;
            }
            let fetched = fetch_or_why(&client, &url, timeout, SCRAPE_LIMIT).await;
            let gauges = match &fetched {
                Ok(body) => {
                    page_gauges(&super::prometheus::parse_bytes(body), &mut meter).ok_or(())
                }
                Err(_) => Err(()),
            };
            let Ok(gauges) = gauges else {
                if let Some(misses) = rule.missed() {
                    let why = why_not(fetched.as_deref().map_err(|e| *e), timeout);
                    let line = if rule.seen() {
                        format!("--gpu-metrics {shown}: {why}, {misses} times in a row; GPU figures stop here")
                    } else {
                        format!("--gpu-metrics {shown}: {why}; the run goes on without GPU figures")
                    };
                    give_up(line);
                    break;
                }
                continue;
            };
            rule.read();
            let sample = ServerSample {
                at: run_start.elapsed(),
                gauges,
            };
            if tx.send(sample).is_err() {
                break;
            }
        }
    });
    rx
}

#[cfg(test)]
#[path = "dcgm_tests.rs"]
mod tests;
