//! GPU gauges when tokbench runs on the GPU host: `nvidia-smi` once a
//! probe interval, aggregated over the GPUs into the same named gauges the
//! server probe sends (`gpu_power_w`, `gpu_util_pct`, ...), so the recorder's
//! per-level min/mean/max covers them too. A DCGM exporter's page
//! (`--gpu-metrics`, `probe::dcgm`) becomes the same [`GpuReading`]s and
//! goes through the same [`gpu_gauges`].
//!
//! No `nvidia-smi` (or one that fails on the first call) means no GPU gauges,
//! silently: the probe task ends without sending anything.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::live::ServerSample;
pub(crate) use crate::stats::gauges::BUSY_UTIL_PCT;

/// The program asked when none is given.
pub(crate) const DEFAULT_PROGRAM: &str = "nvidia-smi";

/// The query: one CSV line per GPU, these fields in this order.
pub(crate) const QUERY_ARGS: [&str; 2] = [
    "--query-gpu=utilization.gpu,memory.used,memory.total,power.draw,clocks.sm,clocks.max.sm,temperature.gpu",
    "--format=csv,noheader,nounits",
];

/// One query may take this long; past it the child is killed.
pub(crate) const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Most bytes read of one answer: a line per GPU is under 100 bytes.
const OUTPUT_LIMIT: u64 = 64 << 10;

/// After the first good answer, this many failed reads in a row end a GPU
/// probe (a driver or an exporter gone bad should not cost a query per
/// interval forever).
const MAX_MISSES_IN_A_ROW: u32 = 10;

/// When a GPU probe (nvidia-smi, a DCGM exporter) gives up: at its first
/// miss before any good reading (there is nothing to read), or after
/// [`MAX_MISSES_IN_A_ROW`] misses in a row once it has read some.
#[derive(Debug, Default)]
pub(crate) struct MissRule {
    seen: bool,
    misses: u32,
}

impl MissRule {
    pub(crate) fn read(&mut self) {
        self.seen = true;
        self.misses = 0;
    }

    /// A miss: `Some(misses in a row)` when the probe gives up.
    pub(crate) fn missed(&mut self) -> Option<u32> {
        self.misses += 1;
        (!self.seen || self.misses >= MAX_MISSES_IN_A_ROW).then_some(self.misses)
    }

    /// Whether any reading came in.
    pub(crate) fn seen(&self) -> bool {
        self.seen
    }
}

/// Field count of one answer line.
const FIELDS: usize = 7;

/// One GPU's reading. A field the driver does not report (`[N/A]`,
/// `[Not Supported]`, blank, DCGM's blank values) is None.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuReading {
    pub utilization_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub memory_total_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub sm_clock_max_mhz: Option<f64>,
    pub temperature_c: Option<f64>,
    /// The GPU's energy counter since the driver loaded, mJ (DCGM's
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`; the nvidia-smi query asks none).
    pub energy_mj: Option<f64>,
    /// Why the clocks are held down now: NVML's clocks-event (once
    /// "throttle") reasons bitmask ([`CLOCKS_POWER_CAP`], ...).
    pub clock_event_reasons: Option<u64>,
}

/// NVML's clocks-event reason bits (`nvmlClocksEventReason*`, the same in
/// DCGM's `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`): the ones that hold a busy
/// GPU's clock down. Idle (0x1), application clocks (0x2), sync boost
/// (0x10) and display clock (0x100) are settings or rest, not a limit hit.
pub(crate) const CLOCKS_SW_POWER_CAP: u64 = 0x4;
pub(crate) const CLOCKS_HW_SLOWDOWN: u64 = 0x8;
pub(crate) const CLOCKS_SW_THERMAL: u64 = 0x20;
pub(crate) const CLOCKS_HW_THERMAL: u64 = 0x40;
pub(crate) const CLOCKS_HW_POWER_BRAKE: u64 = 0x80;

/// The reasons in three gauges, each the count of GPUs with any of its
/// bits set: the power limit, heat, and the hardware's own slowdown.
const CLOCK_EVENT_GAUGES: [(&str, u64); 3] = [
    (
        crate::stats::gauges::CLOCKS_POWER_CAP,
        CLOCKS_SW_POWER_CAP | CLOCKS_HW_POWER_BRAKE,
    ),
    (
        crate::stats::gauges::CLOCKS_THERMAL,
        CLOCKS_SW_THERMAL | CLOCKS_HW_THERMAL,
    ),
    (crate::stats::gauges::CLOCKS_HW_SLOWDOWN, CLOCKS_HW_SLOWDOWN),
];

/// One field: Ok(Some) a number, Ok(None) not reported, Err garbage.
fn field(text: &str) -> Result<Option<f64>, ()> {
    let t = text.trim();
    if t.is_empty() || (t.starts_with('[') && t.ends_with(']')) || t.eq_ignore_ascii_case("N/A") {
        return Ok(None);
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Some(v)),
        _ => Err(()),
    }
}

/// The readings of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`,
/// one per line in the tool's (GPU index) order. Lines that are not seven
/// fields of numbers or not-reported markers are skipped.
pub(crate) fn parse_nvidia_smi(text: &str) -> Vec<GpuReading> {
    text.lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split(',').collect();
            if parts.len() != FIELDS {
                return None;
            }
            let mut values = [None; FIELDS];
            for (slot, part) in values.iter_mut().zip(&parts) {
                *slot = field(part).ok()?;
            }
            let [utilization_pct, memory_used_mib, memory_total_mib, power_w, sm_clock_mhz, sm_clock_max_mhz, temperature_c] =
                values;
            Some(GpuReading {
                utilization_pct,
                memory_used_mib,
                memory_total_mib,
                power_w,
                sm_clock_mhz,
                sm_clock_max_mhz,
                temperature_c,
                energy_mj: None,
                clock_event_reasons: None,
            })
        })
        .collect()
}

/// Ask `program` (`nvidia-smi`, or a path) for the GPUs' readings. None when
/// the program is absent, fails, takes over [`QUERY_TIMEOUT`], or lists no GPU.
pub async fn read_gpus(program: &str) -> Option<Vec<GpuReading>> {
    read_gpus_within(program, QUERY_TIMEOUT).await
}

/// [`read_gpus`] with its own time limit.
pub async fn read_gpus_within(program: &str, timeout: Duration) -> Option<Vec<GpuReading>> {
    let program = program.to_owned();
    let text = tokio::task::spawn_blocking(move || run_query(&program, timeout))
        .await
        .ok()
        .flatten()?;
    let readings = parse_nvidia_smi(&text);
    (!readings.is_empty()).then_some(readings)
}

/// Run the query, blocking, and never longer than `timeout`: the child is
/// killed and reaped past it. Stdout is read on its own thread so that a
/// child that keeps its output open (or a grandchild that inherited it)
/// cannot hold us.
fn run_query(program: &str, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(program)
        .args(QUERY_ARGS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("nvidia-smi-read".into())
        .spawn(move || {
            let mut text = String::new();
            let ok = stdout.take(OUTPUT_LIMIT).read_to_string(&mut text).is_ok();
            let _ = tx.send(ok.then_some(text));
        });
    if reader.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let output = rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .ok()
        .flatten();
    // Wait for the exit status until the deadline, then kill.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    match (status, output) {
        (Some(status), Some(text)) if status.success() => Some(text),
        _ => None,
    }
}

/// Aggregate gauges of one query over the GPUs: `gpu_count`, `gpu_util_pct`
/// (mean), `gpu_mem_used_mib` and `gpu_mem_total_mib` (sums), `gpu_power_w`
/// (sum), `gpu_sm_clock_ratio` (least SM clock / max SM clock among the busy
/// GPUs; absent when none is busy), `gpu_temp_c` (max), and where the
/// GPUs say why their clocks are held down, `gpu_clocks_power_cap`,
/// `gpu_clocks_thermal`, `gpu_clocks_hw_slowdown` (how many GPUs have that
/// reason now). A gauge no GPU reports is left out. The energy counter is
/// not a gauge of one reading: `probe::dcgm::EnergyMeter` follows it.
pub(crate) fn gpu_gauges(readings: &[GpuReading], out: &mut BTreeMap<&'static str, f64>) {
    if readings.is_empty() {
        return;
    }
    out.insert("gpu_count", readings.len() as f64);
    let values = |f: fn(&GpuReading) -> Option<f64>| readings.iter().filter_map(f);
    let mut put = |k, v| super::put_gauge(out, k, v);
    let utils: Vec<f64> = values(|r| r.utilization_pct).collect();
    put(
        "gpu_util_pct",
        (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64),
    );
    put(
        "gpu_mem_used_mib",
        values(|r| r.memory_used_mib).reduce(|a, b| a + b),
    );
    put(
        "gpu_mem_total_mib",
        values(|r| r.memory_total_mib).reduce(|a, b| a + b),
    );
    put("gpu_power_w", values(|r| r.power_w).reduce(|a, b| a + b));
    put(
        "gpu_sm_clock_ratio",
        readings
            .iter()
            .filter(|r| r.utilization_pct.is_some_and(|u| u > BUSY_UTIL_PCT))
            .filter_map(|r| match (r.sm_clock_mhz, r.sm_clock_max_mhz) {
                (Some(sm), Some(max)) if max > 0.0 => Some(sm / max),
                _ => None,
            })
            .reduce(f64::min),
    );
    put("gpu_temp_c", values(|r| r.temperature_c).reduce(f64::max));
    let reasons: Vec<u64> = readings
        .iter()
        .filter_map(|r| r.clock_event_reasons)
        .collect();
    if !reasons.is_empty() {
        for (name, bits) in CLOCK_EVENT_GAUGES {
            let gpus = reasons.iter().filter(|r| *r & bits != 0).count();
            put(name, Some(gpus as f64));
        }
    }
}

/// Query `program` every `interval` and send the aggregate gauges. When the
/// first query finds nothing (no `nvidia-smi`, no GPU, a failing driver) the
/// task ends at once without sending anything, and says nothing. It also ends
/// when the receiver is dropped, or after ten failed queries in a row.
pub fn spawn_gpu_probe(
    program: String,
    interval: Duration,
    run_start: Instant,
) -> mpsc::UnboundedReceiver<ServerSample> {
    let (tx, rx) = mpsc::unbounded_channel();
    let interval = interval.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut rule = MissRule::default();
        loop {
            ticker.tick().await;
            if tx.is_closed() {
                break;
            }
            let Some(readings) = read_gpus(&program).await else {
                if rule.missed().is_some() {
                    break;
                }
                continue;
            };
            rule.read();
            let mut sample = ServerSample {
                at: run_start.elapsed(),
                gauges: BTreeMap::new(),
            };
            gpu_gauges(&readings, &mut sample.gauges);
            if tx.send(sample).is_err() {
                break;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::gauges::{
        energy_per_m_output_tokens, level_gpu_json, throttled, wh_per_m_output_tokens, GaugeSummary,
    };

    const TWO_GPUS: &str = "\
87, 70000, 81559, 300.50, 1755, 1980, 71
40, 1000, 81559, 99.50, 1980, 1980, 55
";

    /// A probe that never read gives up at its first miss; one that read
    /// goes on through nine misses in a row and gives up at the tenth; a
    /// good reading between starts the count again.
    #[test]
    fn a_gpu_probe_gives_up_at_once_or_after_ten_misses_in_a_row() {
        let mut never = MissRule::default();
        assert_eq!(never.missed(), Some(1));
        let mut rule = MissRule::default();
        rule.read();
        for _ in 0..9 {
            assert_eq!(rule.missed(), None);
        }
        rule.read();
        for _ in 0..9 {
            assert_eq!(rule.missed(), None);
        }
        assert_eq!(rule.missed(), Some(10));
        assert!(rule.seen());
    }

    #[test]
    fn two_gpus_parse_in_order() {
        let r = parse_nvidia_smi(TWO_GPUS);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            GpuReading {
                utilization_pct: Some(87.0),
                memory_used_mib: Some(70000.0),
                memory_total_mib: Some(81559.0),
                power_w: Some(300.5),
                sm_clock_mhz: Some(1755.0),
                sm_clock_max_mhz: Some(1980.0),
                temperature_c: Some(71.0),
                energy_mj: None,
                clock_event_reasons: None,
            }
        );
        assert_eq!(r[1].power_w, Some(99.5));
    }

    #[test]
    fn not_reported_fields_are_none_and_garbage_is_skipped() {
        let text = "\
[N/A], 500, 16384, [Not Supported], 1200, 2100,
NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.
1, 2, 3
a, b, c, d, e, f, g
10, 20, 30, 40, 50, 60, 70, 80
55, 1024, 8192, N/A, [Unknown Error], 1500, 60\r
";
        let r = parse_nvidia_smi(text);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].utilization_pct, None);
        assert_eq!(r[0].memory_used_mib, Some(500.0));
        assert_eq!(r[0].power_w, None);
        assert_eq!(r[0].temperature_c, None);
        assert_eq!(r[1].power_w, None);
        assert_eq!(r[1].sm_clock_mhz, None);
        assert_eq!(r[1].temperature_c, Some(60.0));
        assert!(parse_nvidia_smi("").is_empty());
        assert!(parse_nvidia_smi(",,,,,,\u{0}").is_empty());
        assert!(parse_nvidia_smi("NaN, inf, 1, 1, 1, 1, 1").is_empty());
    }

    #[test]
    fn aggregates_over_two_gpus() {
        let mut out = BTreeMap::new();
        gpu_gauges(&parse_nvidia_smi(TWO_GPUS), &mut out);
        assert_eq!(out.get("gpu_count"), Some(&2.0));
        // (87 + 40) / 2
        assert_eq!(out.get("gpu_util_pct"), Some(&63.5));
        assert_eq!(out.get("gpu_mem_used_mib"), Some(&71000.0));
        assert_eq!(out.get("gpu_mem_total_mib"), Some(&163118.0));
        // 300.5 + 99.5
        assert_eq!(out.get("gpu_power_w"), Some(&400.0));
        // Only GPU 0 is busy: 1755 / 1980.
        assert_eq!(out.get("gpu_sm_clock_ratio"), Some(&(1755.0 / 1980.0)));
        assert_eq!(out.get("gpu_temp_c"), Some(&71.0));
    }

    #[test]
    fn idle_or_unreported_gpus_leave_gauges_out() {
        let mut out = BTreeMap::new();
        gpu_gauges(&[], &mut out);
        assert!(out.is_empty());
        let idle = GpuReading {
            utilization_pct: Some(10.0),
            sm_clock_mhz: Some(300.0),
            sm_clock_max_mhz: Some(1980.0),
            ..GpuReading::default()
        };
        gpu_gauges(&[idle, GpuReading::default()], &mut out);
        assert_eq!(out.get("gpu_count"), Some(&2.0));
        assert_eq!(out.get("gpu_util_pct"), Some(&10.0));
        assert!(!out.contains_key("gpu_sm_clock_ratio"), "no busy GPU");
        assert!(!out.contains_key("gpu_power_w"));
        assert!(!out.contains_key("gpu_temp_c"));
    }

    #[test]
    fn energy_per_million_output_tokens() {
        // 300 W for 10 s = 3000 J over 30,000 tokens = 0.1 J/token
        // = 100,000 J per million = 27.78 Wh per million.
        let j = energy_per_m_output_tokens(300.0, 10.0, 30_000);
        assert!(j.is_some_and(|j| (j - 100_000.0).abs() < 1e-6));
        let wh = wh_per_m_output_tokens(300.0, 10.0, 30_000);
        assert!(wh.is_some_and(|wh| (wh - 27.777_777).abs() < 1e-3));
        assert_eq!(energy_per_m_output_tokens(300.0, 10.0, 0), None);
        assert_eq!(energy_per_m_output_tokens(f64::NAN, 10.0, 1), None);
        assert_eq!(energy_per_m_output_tokens(-1.0, 10.0, 1), None);
    }

    #[test]
    fn throttling_needs_busy_and_a_low_clock() {
        assert!(throttled(Some(0.7), Some(90.0)));
        assert!(!throttled(Some(0.9), Some(90.0)));
        assert!(!throttled(Some(0.7), Some(30.0)), "idle clocks drop");
        assert!(!throttled(None, Some(90.0)));
        assert!(!throttled(Some(0.7), None));
    }

    #[test]
    fn level_json_from_a_summary() {
        let mut summary = GaugeSummary::default();
        assert_eq!(level_gpu_json(&summary, 10.0, 30_000), None);
        for (power, ratio) in [(250.0, 0.8), (350.0, 0.9)] {
            summary.add(&ServerSample::of(&[
                ("gpu_count", 1.0),
                ("gpu_power_w", power),
                ("gpu_util_pct", 95.0),
                ("gpu_sm_clock_ratio", ratio),
            ]));
        }
        let Some(v) = level_gpu_json(&summary, 10.0, 30_000) else {
            panic!("a level with GPU samples has GPU figures");
        };
        assert_eq!(v["power_w_mean"], 300.0);
        assert_eq!(v["sm_clock_ratio_min"], 0.8);
        assert_eq!(v["throttled"], true);
        let j = v["energy_j_per_m_output_tokens"].as_f64().unwrap_or(0.0);
        assert!((j - 100_000.0).abs() < 1e-6);
        // No tokens: the energy is null, the power stays.
        let v = level_gpu_json(&summary, 10.0, 0);
        assert!(v.is_some_and(|v| v["energy_j_per_m_output_tokens"].is_null()));
    }
}
