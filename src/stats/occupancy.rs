//! How many requests waited and how many streamed over a stretch of time,
//! from the requests' own timestamps: a request waits from its send until
//! its first output token, and streams from then until it ends. Waiting is
//! the client's view of the server's queue (prefill included), which works
//! for servers that expose none (Ollama); the mean of streaming is the
//! server's effective slot count when requests queue.
//!
//! Where the server says how long each request's prefill took (llama.cpp's
//! `timings.prompt_ms`, Ollama's `prompt_eval_duration` and `load_duration`),
//! waiting splits in two: in prefill for that long before the first token,
//! queued before that. A request in prefill holds a slot, so streaming plus
//! in prefill is the slots in use; queued is the server's queue, exact even
//! where the server exposes none.
//!
//! Time-weighted: a count held for 0.9 s weighs nine times one held for
//! 0.1 s, so the figures do not depend on how often anything was sampled.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fmt::round3;
use crate::record::RequestRecord;

/// One request's life on the run's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RequestSpan {
    pub start: Duration,
    /// When the server began its prefill (and model load): the first token
    /// less the times the server reported. None when it reported none.
    pub prefill_from: Option<Duration>,
    /// First output token; None when none came.
    pub first_token: Option<Duration>,
    pub end: Duration,
}

impl RequestSpan {
    pub(crate) fn of(r: &RequestRecord) -> RequestSpan {
        let end = r.end.max(r.start);
        let first_token = r.ttft.map(|t| (r.start + t).min(end));
        let prefill_from = match (
            first_token,
            r.server_timings.and_then(|t| t.in_prefill_ms()),
        ) {
            (Some(first), Some(ms)) => Some(
                first
                    .saturating_sub(Duration::from_secs_f64(ms / 1000.0))
                    .max(r.start),
            ),
            _ => None,
        };
        RequestSpan {
            start: r.start,
            prefill_from,
            first_token,
            end,
        }
    }

    /// The count changes of this request: (when, waiting, streaming, in prefill).
    fn changes(&self) -> [Option<(Duration, i32, i32, i32)>; 4] {
        let first = self
            .first_token
            .unwrap_or(self.end)
            .clamp(self.start, self.end);
        let prefill = self
            .prefill_from
            .filter(|_| first < self.end)
            .map(|p| p.clamp(self.start, first));
        let mut out = [None; 4];
        out[0] = Some((self.start, 1, 0, 0));
        if first < self.end {
            let leaves_prefill = i32::from(prefill.is_some());
            out[1] = Some((first, -1, 1, -leaves_prefill));
            out[2] = Some((self.end, 0, -1, 0));
            out[3] = prefill.map(|p| (p, 0, 0, 1));
        } else {
            out[1] = Some((self.end, -1, 0, 0));
        }
        out
    }
}

/// Time-weighted waiting and streaming counts over a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Occupancy {
    pub waiting_mean: f64,
    pub waiting_p50: f64,
    pub waiting_p99: f64,
    pub waiting_max: f64,
    pub streaming_mean: f64,
    pub streaming_max: f64,
    /// Of the waiting, those in prefill (mean); None when the server
    /// reported no prefill times for any request in the window.
    pub in_prefill_mean: Option<f64>,
    /// The same split read the live view's way, from the server's running
    /// count at each scrape; None where the server counts nothing it runs.
    pub live: Option<LiveSplit>,
}

/// The waiting split as the live view splits it, averaged over a level's
/// scrapes of the server's running count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LiveSplit {
    pub in_prefill_mean: f64,
    pub queued_mean: f64,
    pub scrapes: u32,
}

/// The client's waiting requests as a server's running count accounts for
/// them: (in prefill, queued). In prefill are the requests the server runs
/// that have not streamed to the client yet: its running count less the
/// client's streaming, never below 0 nor above the waiting (the server may
/// run another client's requests too); queued, the rest.
pub(crate) fn split_waiting(running: u32, streaming: u32, waiting: u32) -> (u32, u32) {
    let in_prefill = running.saturating_sub(streaming).min(waiting);
    (in_prefill, waiting - in_prefill)
}

impl Occupancy {
    /// The level file's `waiting` and `streaming` objects.
    pub(crate) fn waiting_json(&self) -> Value {
        let mut out = json!({
            "mean": round3(self.waiting_mean),
            "p50": self.waiting_p50,
            "p99": self.waiting_p99,
            "max": self.waiting_max,
        });
        if let Some(prefill) = self.in_prefill_mean {
            out["in_prefill_mean"] = json!(round3(prefill));
            out["queued_mean"] = json!(round3(self.queued_mean().unwrap_or(0.0)));
        }
        if let Some(live) = self.live {
            out["live"] = json!({
                "in_prefill_mean": round3(live.in_prefill_mean),
                "queued_mean": round3(live.queued_mean),
                "scrapes": live.scrapes,
            });
        }
        out
    }

    /// Of the waiting, those queued (mean): waiting less in prefill.
    pub(crate) fn queued_mean(&self) -> Option<f64> {
        self.in_prefill_mean
            .map(|p| (self.waiting_mean - p).max(0.0))
    }

    /// Requests in flight (waiting and streaming), time-weighted mean.
    pub(crate) fn in_flight_mean(&self) -> f64 {
        self.waiting_mean + self.streaming_mean
    }

    pub(crate) fn streaming_json(&self) -> Value {
        json!({
            "mean": round3(self.streaming_mean),
            "max": self.streaming_max,
        })
    }
}

/// The counts over `[from, to)`; None for an empty window.
#[cfg(test)]
pub(crate) fn occupancy(spans: &[RequestSpan], from: Duration, to: Duration) -> Option<Occupancy> {
    if to <= from {
        return None;
    }
    // (time, waiting, streaming, in prefill changes), clipped to the window.
    let mut changes: Vec<(Duration, i32, i32, i32)> = Vec::with_capacity(spans.len() * 4);
    let mut prefill_known = false;
    for s in spans {
        if s.end <= from || s.start >= to {
            continue;
        }
        prefill_known |= s.prefill_from.is_some();
        changes.extend(
            s.changes()
                .into_iter()
                .flatten()
                .map(|(t, w, st, p)| (t.clamp(from, to), w, st, p)),
        );
    }
    changes.sort_by_key(|c| c.0);
    let mut segments: Vec<Segment> = Vec::new();
    let mut counts = (0i64, 0i64, 0i64);
    let mut at = from;
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        if t > at {
            segments.push((counts.0, counts.1, counts.2, (t - at).as_secs_f64()));
            at = t;
        }
        // Every change at the same instant applies before the next segment,
        // so a hand-over (one ends, the next starts) never shows a blip.
        while i < changes.len() && changes[i].0 == t {
            counts.0 += i64::from(changes[i].1);
            counts.1 += i64::from(changes[i].2);
            counts.2 += i64::from(changes[i].3);
            i += 1;
        }
    }
    if to > at {
        segments.push((counts.0, counts.1, counts.2, (to - at).as_secs_f64()));
    }
    summarize(&segments, prefill_known)
}

/// A stretch of constant counts: (waiting, streaming, in prefill, seconds).
type Segment = (i64, i64, i64, f64);

/// Mean, quantiles and maxima of segments of constant counts; None when
/// they span no time.
fn summarize(segments: &[Segment], prefill_known: bool) -> Option<Occupancy> {
    let total: f64 = segments.iter().map(|s| s.3).sum();
    if total <= 0.0 {
        return None;
    }
    let mean =
        |f: fn(&Segment) -> i64| segments.iter().map(|s| f(s) as f64 * s.3).sum::<f64>() / total;
    let max = |f: fn(&Segment) -> i64| segments.iter().map(f).max().unwrap_or(0) as f64;
    let mut by_waiting: Vec<(i64, f64)> = segments.iter().map(|s| (s.0, s.3)).collect();
    by_waiting.sort_by_key(|s| s.0);
    Some(Occupancy {
        waiting_mean: mean(|s| s.0),
        waiting_p50: time_quantile(&by_waiting, total, 0.50),
        waiting_p99: time_quantile(&by_waiting, total, 0.99),
        waiting_max: max(|s| s.0),
        streaming_mean: mean(|s| s.1),
        streaming_max: max(|s| s.1),
        in_prefill_mean: prefill_known.then(|| mean(|s| s.2)),
        live: None,
    })
}

/// Finest step of a [`Timeline`]: one millisecond.
const TIMELINE_STEP_NS: u64 = 1_000_000;
/// Steps a timeline holds before it halves its resolution: about 8.7
/// minutes at 1 ms, 4 MiB of counts; a one-hour level ends at 8 ms steps.
const TIMELINE_MAX_STEPS: usize = 1 << 19;

/// Waiting and streaming over a level, folded request by request in memory
/// that grows with the level's length, never with its request count: each
/// request's send, first token and end are changes at the nearest step
/// boundary (1 ms; coarser past ~9 minutes, see `TIMELINE_MAX_STEPS`).
/// Times on the step grid give exactly what [`occupancy`] gives; others
/// move by at most half a step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Timeline {
    from: Duration,
    step_ns: u64,
    /// Changes at each step boundary: (waiting, streaming, in prefill).
    changes: Vec<(i32, i32, i32)>,
    /// Some request told its prefill time.
    prefill_known: bool,
}

impl Timeline {
    /// A timeline of the window starting at `from`.
    pub(crate) fn starting_at(from: Duration) -> Timeline {
        Timeline {
            from,
            step_ns: TIMELINE_STEP_NS,
            changes: Vec::new(),
            prefill_known: false,
        }
    }

    /// The step boundary nearest to `t` (a time before the window is its start).
    fn boundary(&self, t: Duration) -> usize {
        let ns = t.saturating_sub(self.from).as_nanos();
        let step = u128::from(self.step_ns);
        ((ns + step / 2) / step).min(usize::MAX as u128) as usize
    }

    fn change(&mut self, t: Duration, waiting: i32, streaming: i32, in_prefill: i32) {
        let mut at = self.boundary(t);
        while at >= TIMELINE_MAX_STEPS {
            self.coarsen();
            at = self.boundary(t);
        }
        if at >= self.changes.len() {
            self.changes.resize(at + 1, (0, 0, 0));
        }
        let c = &mut self.changes[at];
        c.0 += waiting;
        c.1 += streaming;
        c.2 += in_prefill;
    }

    /// Half the resolution: boundary k's changes move to k / 2.
    fn coarsen(&mut self) {
        let mut half = vec![(0, 0, 0); self.changes.len().div_ceil(2)];
        for (k, c) in self.changes.iter().enumerate() {
            half[k / 2].0 += c.0;
            half[k / 2].1 += c.1;
            half[k / 2].2 += c.2;
        }
        self.changes = half;
        self.step_ns *= 2;
    }

    /// Count one request's life (any level's: a neighbour's request waiting
    /// beside this level's counts too).
    pub(crate) fn add(&mut self, s: RequestSpan) {
        self.prefill_known |= s.prefill_from.is_some();
        for (t, waiting, streaming, in_prefill) in s.changes().into_iter().flatten() {
            self.change(t, waiting, streaming, in_prefill);
        }
    }

    /// The counts over `[from, to)`; None for an empty window.
    pub(crate) fn occupancy(&self, to: Duration) -> Option<Occupancy> {
        if to <= self.from {
            return None;
        }
        let window_ns = (to - self.from).as_nanos();
        let step = u128::from(self.step_ns);
        let full = (window_ns / step).min(usize::MAX as u128) as usize;
        let rest_s = (window_ns % step) as f64 / 1e9;
        let step_s = self.step_ns as f64 / 1e9;
        let mut counts = (0i64, 0i64, 0i64);
        let mut segments: Vec<Segment> = Vec::new();
        let mut push = |c: (i64, i64, i64), secs: f64| match segments.last_mut() {
            Some(last) if (last.0, last.1, last.2) == c => last.3 += secs,
            _ => segments.push((c.0, c.1, c.2, secs)),
        };
        for k in 0..=full {
            if let Some(c) = self.changes.get(k) {
                counts.0 += i64::from(c.0);
                counts.1 += i64::from(c.1);
                counts.2 += i64::from(c.2);
            }
            let secs = if k < full { step_s } else { rest_s };
            if secs > 0.0 {
                push(counts, secs);
            }
        }
        summarize(&segments, self.prefill_known)
    }
}

impl Timeline {
    /// The live view's split at each scrape in `[from, to)`, averaged:
    /// `running` holds (when, the server's running count), in time order.
    /// The client's counts at a scrape are those of its step (a change
    /// applies from its step boundary on). None without a scrape in the
    /// window.
    pub(crate) fn live_split(
        &self,
        running: &[(Duration, f64)],
        to: Duration,
    ) -> Option<LiveSplit> {
        let mut counts = (0i64, 0i64);
        let mut applied = 0usize;
        let (mut prefill_sum, mut queued_sum, mut scrapes) = (0u64, 0u64, 0u32);
        for &(at, count) in running {
            if at < self.from || at >= to || !count.is_finite() {
                continue;
            }
            let step = ((at - self.from).as_nanos() / u128::from(self.step_ns))
                .min(usize::MAX as u128) as usize;
            while applied <= step && applied < self.changes.len() {
                counts.0 += i64::from(self.changes[applied].0);
                counts.1 += i64::from(self.changes[applied].1);
                applied += 1;
            }
            let clamp = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
            // A gauge is a count: at most the u32 the cast saturates to.
            let running = count.round().max(0.0) as u32;
            let (prefill, queued) = split_waiting(running, clamp(counts.1), clamp(counts.0));
            prefill_sum += u64::from(prefill);
            queued_sum += u64::from(queued);
            scrapes += 1;
        }
        (scrapes > 0).then(|| LiveSplit {
            in_prefill_mean: prefill_sum as f64 / f64::from(scrapes),
            queued_mean: queued_sum as f64 / f64::from(scrapes),
            scrapes,
        })
    }
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
            prefill_from: None,
            first_token: first.map(ms),
            end: ms(end),
        }
    }

    /// One slot, four streams, closed loop. Request k (0..4) is sent at 0,
    /// gets its slot at 100k, first token at 100k + 10, ends at 100k + 100;
    /// each end sends a new request at once (ends at 100, 200, 300 send
    /// three more).
    fn one_slot_spans() -> Vec<RequestSpan> {
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
        spans
    }

    /// One slot, four streams: each answer takes 100 ms, its first token
    /// 10 ms after the slot frees. Worked by hand over [0, 400): at any time
    /// one request streams or prefills and the other three wait.
    #[test]
    fn one_slot_four_streams() {
        let spans = one_slot_spans();
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

    /// The one-slot case with the server's prefill times: each request's
    /// 10 ms before its first token were prefill. Over [0, 400): one in
    /// prefill for 10 ms of each 100 (mean 0.1), so of the 3.1 waiting,
    /// 3.0 queued; streaming plus in prefill is 1, the one slot. A record
    /// whose server said prompt_ms 6 and load 4 starts its prefill 10 ms
    /// before its first token; one with more than its TTFT at its send.
    #[test]
    fn prefill_times_split_waiting_into_queued_and_in_prefill() {
        let spans: Vec<RequestSpan> = one_slot_spans()
            .into_iter()
            .map(|s| RequestSpan {
                prefill_from: s.first_token.map(|f| f - ms(10)),
                ..s
            })
            .collect();
        let o = occupancy(&spans, ms(0), ms(400)).expect("window");
        assert!((o.waiting_mean - 3.1).abs() < 1e-9, "{o:?}");
        let prefill = o.in_prefill_mean.expect("known");
        assert!((prefill - 0.1).abs() < 1e-9, "{o:?}");
        assert!((o.queued_mean().expect("known") - 3.0).abs() < 1e-9);
        assert!((o.streaming_mean + prefill - 1.0).abs() < 1e-9);
        let json = o.waiting_json();
        assert_eq!(
            (
                json["queued_mean"].as_f64(),
                json["in_prefill_mean"].as_f64()
            ),
            (Some(3.0), Some(0.1))
        );
        // The timeline folds the same.
        let mut timeline = Timeline::starting_at(ms(0));
        for s in &spans {
            timeline.add(*s);
        }
        assert_close(timeline.occupancy(ms(400)).expect("window"), o);

        let mut r = RequestRecord::empty(1, 0);
        r.start = ms(100);
        r.ttft = Some(ms(30));
        r.end = ms(200);
        r.server_timings = Some(crate::record::ServerTimings {
            prompt_ms: Some(6.0),
            load_ms: 4.0,
            ..Default::default()
        });
        assert_eq!(RequestSpan::of(&r).prefill_from, Some(ms(120)));
        r.server_timings = Some(crate::record::ServerTimings {
            prompt_ms: Some(50.0),
            ..Default::default()
        });
        assert_eq!(RequestSpan::of(&r).prefill_from, Some(ms(100)));
        // Without server times, no split.
        assert_eq!(
            occupancy(&one_slot_spans(), ms(0), ms(400)).and_then(|o| o.in_prefill_mean),
            None
        );
    }

    /// The fold on the millisecond grid gives what the exact sweep gives:
    /// the one-slot case above, request by request.
    #[test]
    fn the_timeline_agrees_with_the_sweep_on_the_grid() {
        let spans = one_slot_spans();
        let exact = occupancy(&spans, ms(0), ms(400)).unwrap();
        let mut timeline = Timeline::starting_at(ms(0));
        for s in &spans {
            timeline.add(*s);
        }
        assert_close(timeline.occupancy(ms(400)).unwrap(), exact);
        // A window that starts late counts the requests already out.
        let late = occupancy(&spans, ms(150), ms(400)).unwrap();
        let mut timeline = Timeline::starting_at(ms(150));
        for s in &spans {
            timeline.add(*s);
        }
        assert_close(timeline.occupancy(ms(400)).unwrap(), late);
    }

    /// Equal but for the order floats were summed in.
    fn assert_close(a: Occupancy, b: Occupancy) {
        let pairs = [
            (a.waiting_mean, b.waiting_mean),
            (a.waiting_p50, b.waiting_p50),
            (a.waiting_p99, b.waiting_p99),
            (a.waiting_max, b.waiting_max),
            (a.streaming_mean, b.streaming_mean),
            (a.streaming_max, b.streaming_max),
            (
                a.in_prefill_mean.unwrap_or(-1.0),
                b.in_prefill_mean.unwrap_or(-1.0),
            ),
        ];
        for (x, y) in pairs {
            assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
        }
    }

    /// Worked by hand: one request waits 0..2 ms and streams 2..4 ms, over a
    /// window of 4.5 ms (the last half step counts for half).
    #[test]
    fn a_partial_last_step_weighs_its_share() {
        let mut timeline = Timeline::starting_at(ms(0));
        timeline.add(span(0, Some(2), 4));
        let o = timeline.occupancy(Duration::from_micros(4_500)).unwrap();
        // Waiting 1 for 2 of 4.5 ms; streaming 1 for 2 of 4.5 ms.
        assert!((o.waiting_mean - 2.0 / 4.5).abs() < 1e-12);
        assert!((o.streaming_mean - 2.0 / 4.5).abs() < 1e-12);
        assert_eq!((o.waiting_max, o.streaming_max), (1.0, 1.0));
        assert_eq!(o.waiting_p50, 0.0);
    }

    /// Past its step budget the timeline halves its resolution and keeps
    /// the mean: one request waiting for the first half of a long window.
    #[test]
    fn a_long_window_coarsens_and_keeps_the_mean() {
        let long = TIMELINE_MAX_STEPS as u64 * 3;
        let mut timeline = Timeline::starting_at(ms(0));
        timeline.add(span(0, Some(long / 2), long / 2));
        assert_eq!(timeline.step_ns, 2 * TIMELINE_STEP_NS);
        assert!(timeline.changes.len() <= TIMELINE_MAX_STEPS);
        let o = timeline.occupancy(ms(long)).unwrap();
        assert!((o.waiting_mean - 0.5).abs() < 1e-6, "{}", o.waiting_mean);
        assert_eq!(o.waiting_max, 1.0);
    }
    /// The live view's split at three scrapes. A sent at 0 streams from 100
    /// to 300; B sent at 0 streams from 200 to 400; C sent at 50 streams
    /// from 350 to 500.
    /// - at 50 ms: 3 waiting, 0 streaming; the server runs 2: 2 in prefill, 1 queued;
    /// - at 150: 2 waiting (B, C), 1 streaming; runs 2: 1 in prefill, 1 queued;
    /// - at 250: 1 waiting (C), 2 streaming; runs 3: 1 in prefill, 0 queued.
    ///
    /// Means: in prefill (2+1+1)/3 = 4/3, queued (1+1+0)/3 = 2/3. The scrape
    /// at 500 is past the window's end and the one at 20 before its start.
    #[test]
    fn the_live_split_is_read_at_each_scrape() {
        let mut timeline = Timeline::starting_at(ms(30));
        for s in [
            span(0, Some(100), 300),
            span(0, Some(200), 400),
            span(50, Some(350), 500),
        ] {
            timeline.add(s);
        }
        let running = [
            (ms(20), 9.0),
            (ms(50), 2.0),
            (ms(150), 2.0),
            (ms(250), 3.0),
            (ms(500), 9.0),
        ];
        let live = timeline.live_split(&running, ms(500)).expect("scrapes");
        assert_eq!(live.scrapes, 3);
        assert!((live.in_prefill_mean - 4.0 / 3.0).abs() < 1e-9, "{live:?}");
        assert!((live.queued_mean - 2.0 / 3.0).abs() < 1e-9, "{live:?}");
        // Another client's requests on the server never count as ours:
        // running 9 against 3 waiting puts 3 in prefill, none queued.
        assert_eq!(split_waiting(9, 0, 3), (3, 0));
        assert_eq!(split_waiting(1, 2, 3), (0, 3));
    }
}
