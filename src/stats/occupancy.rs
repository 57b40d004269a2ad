//! How many requests waited and how many streamed over a stretch of time,
//! from the requests' own timestamps: a request waits from its send until
//! its first output token, and streams from then until it ends. Waiting is
//! the client's view of the server's queue (prefill included), which works
//! for servers that expose none (Ollama); the mean of streaming is the
//! server's effective slot count when requests queue.
//!
//! Time-weighted: a count held for 0.9 s weighs nine times one held for
//! 0.1 s, so the figures do not depend on how often anything was sampled.

use std::time::Duration;

use serde_json::{json, Value};

use crate::record::RequestRecord;

/// One request's life on the run's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestSpan {
    pub start: Duration,
    /// First output token; None when none came.
    pub first_token: Option<Duration>,
    pub end: Duration,
}

impl RequestSpan {
    pub fn of(r: &RequestRecord) -> RequestSpan {
        let end = r.end.max(r.start);
        RequestSpan {
            start: r.start,
            first_token: r.ttft.map(|t| (r.start + t).min(end)),
            end,
        }
    }
}

/// Time-weighted waiting and streaming counts over a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Occupancy {
    pub waiting_mean: f64,
    pub waiting_p50: f64,
    pub waiting_p99: f64,
    pub waiting_max: f64,
    pub streaming_mean: f64,
    pub streaming_max: f64,
}

impl Occupancy {
    /// The level file's `waiting` and `streaming` objects.
    pub fn waiting_json(&self) -> Value {
        json!({
            "mean": round3(self.waiting_mean),
            "p50": self.waiting_p50,
            "p99": self.waiting_p99,
            "max": self.waiting_max,
        })
    }

    pub fn streaming_json(&self) -> Value {
        json!({
            "mean": round3(self.streaming_mean),
            "max": self.streaming_max,
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The counts over `[from, to)`; None for an empty window.
pub fn occupancy(spans: &[RequestSpan], from: Duration, to: Duration) -> Option<Occupancy> {
    if to <= from {
        return None;
    }
    // (time, waiting change, streaming change), clipped to the window.
    let mut changes: Vec<(Duration, i64, i64)> = Vec::with_capacity(spans.len() * 3);
    for s in spans {
        if s.end <= from || s.start >= to {
            continue;
        }
        let first = s.first_token.unwrap_or(s.end).clamp(s.start, s.end);
        changes.push((s.start.max(from), 1, 0));
        if first < s.end {
            changes.push((first.clamp(from, to), -1, 1));
            changes.push((s.end.min(to), 0, -1));
        } else {
            changes.push((s.end.min(to), -1, 0));
        }
    }
    changes.sort_by_key(|c| c.0);
    // Segments of constant counts: (waiting, streaming, seconds).
    let mut segments: Vec<(i64, i64, f64)> = Vec::new();
    let (mut waiting, mut streaming) = (0i64, 0i64);
    let mut at = from;
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        if t > at {
            segments.push((waiting, streaming, (t - at).as_secs_f64()));
            at = t;
        }
        // Every change at the same instant applies before the next segment,
        // so a hand-over (one ends, the next starts) never shows a blip.
        while i < changes.len() && changes[i].0 == t {
            waiting += changes[i].1;
            streaming += changes[i].2;
            i += 1;
        }
    }
    if to > at {
        segments.push((waiting, streaming, (to - at).as_secs_f64()));
    }
    let total: f64 = segments.iter().map(|s| s.2).sum();
    if total <= 0.0 {
        return None;
    }
    let mean = |f: fn(&(i64, i64, f64)) -> i64| {
        segments.iter().map(|s| f(s) as f64 * s.2).sum::<f64>() / total
    };
    let max = |f: fn(&(i64, i64, f64)) -> i64| segments.iter().map(f).max().unwrap_or(0) as f64;
    let mut by_waiting: Vec<(i64, f64)> = segments.iter().map(|s| (s.0, s.2)).collect();
    by_waiting.sort_by_key(|s| s.0);
    Some(Occupancy {
        waiting_mean: mean(|s| s.0),
        waiting_p50: time_quantile(&by_waiting, total, 0.50),
        waiting_p99: time_quantile(&by_waiting, total, 0.99),
        waiting_max: max(|s| s.0),
        streaming_mean: mean(|s| s.1),
        streaming_max: max(|s| s.1),
    })
}

/// The count held at or below which the window spent `q` of its time:
/// the smallest value whose cumulative time reaches `q * total`.
fn time_quantile(sorted: &[(i64, f64)], total: f64, q: f64) -> f64 {
    let goal = q * total;
    let mut seen = 0.0;
    for &(value, secs) in sorted {
        seen += secs;
        // A hair of slack: sums of float durations rarely hit a goal exactly.
        if seen >= goal - 1e-9 {
            return value as f64;
        }
    }
    sorted.last().map_or(0.0, |s| s.0 as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn span(start: u64, first: Option<u64>, end: u64) -> RequestSpan {
        RequestSpan {
            start: ms(start),
            first_token: first.map(ms),
            end: ms(end),
        }
    }

    /// One slot, four streams: each answer takes 100 ms, its first token
    /// 10 ms after the slot frees. Worked by hand over [0, 400): at any time
    /// one request streams or prefills and the other three wait.
    #[test]
    fn one_slot_four_streams() {
        // Request k (0..4) is sent at 0, gets its slot at 100k, first token
        // at 100k + 10, ends at 100k + 100. Closed loop: each end sends a
        // new request at once (ends at 100, 200, 300 send three more).
        let mut spans = vec![];
        for k in 0..4u64 {
            spans.push(span(0, Some(100 * k + 10), 100 * k + 100));
        }
        for k in 0..3u64 {
            spans.push(span(
                100 * k + 100,
                Some(100 * (k + 4) + 10),
                100 * (k + 4) + 100,
            ));
        }
        let o = occupancy(&spans, ms(0), ms(400)).expect("window");
        // Waiting: 4 for the first 10 ms of each 100 (the one in prefill
        // counts as waiting), 3 for the other 90: mean 3.1.
        assert!((o.waiting_mean - 3.1).abs() < 1e-9, "{o:?}");
        assert_eq!(o.waiting_p50, 3.0);
        assert_eq!(o.waiting_p99, 4.0);
        assert_eq!(o.waiting_max, 4.0);
        // Streaming: 0 for 10 ms of each 100, 1 for 90: mean 0.9.
        assert!((o.streaming_mean - 0.9).abs() < 1e-9, "{o:?}");
        assert_eq!(o.streaming_max, 1.0);
    }

    #[test]
    fn the_window_clips_and_a_failed_request_waits_to_its_end() {
        // Waits 0..50 then streams to 150; a failure with no token 20..80.
        let spans = [span(0, Some(50), 150), span(20, None, 80)];
        let o = occupancy(&spans, ms(40), ms(140)).expect("window");
        // [40,50): waiting 2; [50,80): waiting 1, streaming 1;
        // [80,140): streaming 1. Waiting mean (2*10 + 1*30) / 100 = 0.5.
        assert!((o.waiting_mean - 0.5).abs() < 1e-9, "{o:?}");
        assert!((o.streaming_mean - 0.9).abs() < 1e-9, "{o:?}");
        assert_eq!(o.waiting_max, 2.0);
        // Waiting is 0 for 60 of 100 ms: the median is 0.
        assert_eq!(o.waiting_p50, 0.0);
    }

    #[test]
    fn an_empty_window_has_no_figures() {
        assert_eq!(occupancy(&[], ms(10), ms(10)), None);
        let o = occupancy(&[], ms(0), ms(10)).expect("window");
        assert_eq!(o.waiting_max, 0.0);
        assert_eq!(o.streaming_mean, 0.0);
    }

    #[test]
    fn a_record_becomes_a_span() {
        let mut r = RequestRecord::empty(1, 0);
        r.start = ms(100);
        r.ttft = Some(ms(30));
        r.end = ms(200);
        assert_eq!(RequestSpan::of(&r), span(100, Some(130), 200));
    }
}
