//! How much the client itself costs: its CPU time and its event-loop lag.
//! On a CPU-only host the client competes with the server, so every level
//! records both (docs/architecture.md section 8).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) use crate::stats::gauges::cpu_percent;
use crate::stats::gauges::{ClientMeter, ClientReading};

/// User + system CPU time of this process so far.
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct we hand it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Samples how late a 10 ms timer fires on the runtime: a busy or starved
/// event loop delays every timestamp the load tasks take.
#[derive(Clone, Default)]
pub(crate) struct LagMonitor {
    samples_ms: Arc<Mutex<Vec<f64>>>,
}

const LAG_PERIOD: Duration = Duration::from_millis(10);
/// Bound on kept samples (about 10 minutes at 100 Hz); older ones are dropped.
const LAG_MAX_SAMPLES: usize = 60_000;

impl LagMonitor {
    /// Start sampling on the current runtime; stops when the monitor and its
    /// clones are dropped.
    pub(crate) fn start() -> LagMonitor {
        let monitor = LagMonitor::default();
        let weak = Arc::downgrade(&monitor.samples_ms);
        tokio::spawn(async move {
            let mut expected = Instant::now() + LAG_PERIOD;
            loop {
                tokio::time::sleep_until(expected.into()).await;
                let lag = Instant::now().saturating_duration_since(expected);
                let Some(samples) = weak.upgrade() else { break };
                if let Ok(mut samples) = samples.lock() {
                    if samples.len() >= LAG_MAX_SAMPLES {
                        samples.drain(..LAG_MAX_SAMPLES / 2);
                    }
                    samples.push(lag.as_secs_f64() * 1000.0);
                }
                expected = Instant::now() + LAG_PERIOD;
            }
        });
        monitor
    }

    /// Take the samples gathered since the last take.
    pub(crate) fn take(&self) -> Vec<f64> {
        self.samples_ms
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }
}

/// The recorder's view of this process: CPU time from the kernel and the
/// lag samples `lag` gathered since the last reading.
pub(crate) fn meter(lag: LagMonitor) -> ClientMeter {
    let started = std::time::Instant::now();
    Box::new(move || ClientReading {
        cpu_time: process_cpu_time(),
        wall_time: started.elapsed(),
        loop_lag_ms: lag.take(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_time_moves_forward() {
        let before = process_cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_time() > before);
    }
}
