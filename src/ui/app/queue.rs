//! The queue and the server's gauges: the driver's in-flight count sampled
//! each frame, failure rates, the probe's scrapes and the client's receive lag.

use super::*;
use crate::stats::gauges::running_count;
use crate::stats::occupancy::split_waiting;

/// Seconds of in-flight counts a server's running count is read against.
const OTHER_TRAFFIC_WINDOW_S: u64 = 3;

impl App {
    /// The driver's gauges before a frame: in flight, and of those the ones
    /// streaming. Samples the waiting count for this second's bar.
    pub(crate) fn set_queue(&mut self, in_flight: u32, streaming: u32) {
        self.in_flight = in_flight;
        self.streaming = streaming.min(in_flight);
        let second = self.elapsed.as_secs();
        let waiting = f64::from(self.waiting());
        let slot = self.waiting_seconds.entry(second).or_insert((0.0, 0));
        slot.0 += waiting;
        slot.1 += 1;
        if self.waiting_seconds.len() > 120 {
            let keep_from = second.saturating_sub(120);
            self.waiting_seconds = self.waiting_seconds.split_off(&keep_from);
        }
        if let Some((in_prefill, _)) = self.waiting_split() {
            let slot = self.prefill_seconds.entry(second).or_insert((0.0, 0));
            slot.0 += f64::from(in_prefill);
            slot.1 += 1;
            if self.prefill_seconds.len() > 120 {
                let keep_from = second.saturating_sub(120);
                self.prefill_seconds = self.prefill_seconds.split_off(&keep_from);
            }
        }
        let most = self.in_flight_seconds.entry(second).or_insert(0);
        *most = (*most).max(in_flight);
        if self.in_flight_seconds.len() > OTHER_TRAFFIC_WINDOW_S as usize + 1 {
            let keep_from = second.saturating_sub(OTHER_TRAFFIC_WINDOW_S);
            self.in_flight_seconds = self.in_flight_seconds.split_off(&keep_from);
        }
    }

    /// Requests sent that have not had their first token.
    pub(crate) fn waiting(&self) -> u32 {
        self.in_flight.saturating_sub(self.streaming)
    }

    /// The waiting requests as the server's latest scrape accounts for
    /// them: (in prefill, queued). In prefill are the requests the server
    /// runs that have not streamed to the client yet: its running count
    /// less the client's streaming, never below 0 nor above the waiting;
    /// queued, the rest. None where the server reports no running count
    /// (Ollama): that split comes at the level's end, from its timings.
    pub(crate) fn waiting_split(&self) -> Option<(u32, u32)> {
        let running = self.server_running()?;
        Some(split_waiting(running, self.streaming, self.waiting()))
    }

    /// The requests the server runs, by its latest scrape, where it says.
    pub(crate) fn server_running(&self) -> Option<u32> {
        let running = running_count(self.server.as_ref()?)?;
        // A gauge is a count: at most the u32 the cast saturates to.
        Some(running.round().max(0.0) as u32)
    }

    /// The server runs more than this sweep had in flight at any moment
    /// of the last few seconds (a scrape lags: a level that just drained
    /// is not another client): (its running count, how many of those are
    /// not this sweep's: another client's, or this run's own probes).
    pub(crate) fn other_traffic(&self) -> Option<(u32, u32)> {
        let from = self
            .elapsed
            .as_secs()
            .saturating_sub(OTHER_TRAFFIC_WINDOW_S);
        let most = self
            .in_flight_seconds
            .range(from..)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(self.in_flight)
            .max(self.in_flight);
        self.server_running()
            .filter(|running| *running > most)
            .map(|running| (running, running - most))
    }

    /// Failures per second of 503, 429 and timeouts over the last
    /// `RATE_WINDOW_S` complete seconds; None for a class with none.
    pub(crate) fn failure_rates(&self) -> [Option<f64>; 3] {
        let now = self.elapsed.as_secs();
        let from = now.saturating_sub(RATE_WINDOW_S);
        let span = (now - from).max(1) as f64;
        let mut sums = [0u32; 3];
        for (_, counts) in self.failure_seconds.range(from..now) {
            for (sum, n) in sums.iter_mut().zip(counts) {
                *sum += n;
            }
        }
        sums.map(|n| (n > 0).then(|| f64::from(n) / span))
    }

    /// The client's and the server's queue counts have disagreed by more
    /// than `QUEUE_DISAGREE_BY` for `QUEUE_DISAGREE_FOR_S` seconds or more.
    pub(crate) fn queue_disagrees(&self) -> bool {
        self.queue_disagree_since.is_some_and(|since| {
            self.elapsed.as_secs().saturating_sub(since) >= QUEUE_DISAGREE_FOR_S
        })
    }

    pub(super) fn track_queue_disagreement(&mut self, second: u64) {
        // Set beside the server's queue, the client's queued part: its
        // waiting less those the server runs, where it says.
        let prefill = self
            .prefill_seconds
            .get(&second)
            .map_or(0.0, |(sum, n)| sum / f64::from((*n).max(1)));
        let client = self
            .waiting_seconds
            .get(&second)
            .map(|(sum, n)| sum / f64::from((*n).max(1)) - prefill);
        let server = self.server_queue.get(&second).copied();
        match (client, server) {
            (Some(c), Some(s)) if (c - s).abs() > QUEUE_DISAGREE_BY => {
                self.queue_disagree_since.get_or_insert(second);
            }
            (Some(_), Some(_)) => self.queue_disagree_since = None,
            _ => {}
        }
    }

    pub(crate) fn set_client_cpu(&mut self, percent: Option<f64>) {
        self.client_cpu = percent;
    }

    /// p99 of the client's receive lag over the latest reads, ms; None
    /// before any kernel-timed read (`--rx-clock user`, reqwest).
    pub(crate) fn client_rx_lag_p99(&self) -> Option<f64> {
        let mut lags: Vec<f64> = self.rx_lag_ms.iter().map(|&v| f64::from(v)).collect();
        lags.sort_by(f64::total_cmp);
        crate::stats::percentile::percentile_sorted(&lags, 99.0)
    }

    /// A scrape of the server's (or the GPU's) gauges: each gauge keeps its
    /// latest value, so the two probes never blank each other.
    pub(crate) fn on_server_sample(&mut self, sample: &crate::probe::live::ServerSample) {
        self.server
            .get_or_insert_with(Default::default)
            .extend(sample.gauges.iter().map(|(k, v)| (*k, *v)));
        self.server_missing = false;
        let queued = sample
            .gauges
            .get("waiting")
            .or_else(|| sample.gauges.get("deferred"));
        if let Some(&queued) = queued {
            let second = sample.at.as_secs();
            self.server_queue.insert(second, queued);
            let keep_from = second.saturating_sub(120);
            self.server_queue = self.server_queue.split_off(&keep_from);
        }
    }
}
