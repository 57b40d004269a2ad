//! One closed-loop level run on the simulator's own scheduler
//! (`sim::engine::Scheduler`) in virtual time: no clock, no socket, so a
//! whole predicted sweep takes milliseconds and shares the simulator's one
//! model of batching (docs/architecture.md section 5, "Simulator timing").

use std::collections::VecDeque;

use crate::sim::engine::{KvPolicy, Limits, Scheduler, Seq, Timing};

use super::schema::Params;

/// The level asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Shape {
    pub concurrency: u32,
    /// Requests in the level (each stream sends its next at once).
    pub requests: u64,
    pub input_len: u64,
    pub output_len: u64,
}

/// What the level would measure, as the client sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Outcome {
    pub output_tok_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p99_ms: f64,
    /// Most sequences that ran in one step.
    pub max_running: usize,
}

/// A request's clock, ms from the level's start.
struct Req {
    sent: f64,
    first: Option<f64>,
}

/// No level is worth more steps than this (a guard, not a limit any
/// sensible level reaches).
const MAX_STEPS: u64 = 20_000_000;

/// Run `shape` against the fitted `params`: `None` when a request could
/// never run (it needs more KV than the whole cache).
pub(crate) fn run_level(params: &Params, shape: &Shape) -> Option<Outcome> {
    let timing = Timing {
        step_ms: params.step_ms,
        step_ms_per_seq: params.step_ms_per_seq,
        prefill_ms_per_1k: params.prefill_ms_per_token * 1000.0,
    };
    let limits = Limits {
        max_num_seqs: params
            .cap
            .and_then(|c| usize::try_from(c).ok())
            .unwrap_or(usize::MAX)
            .max(1),
        kv_tokens: params.kv_tokens.unwrap_or(u64::MAX),
        kv_policy: KvPolicy::Reserve,
        prefix_block_tokens: 0,
    };
    let mut sched: Scheduler<Req> = Scheduler::new(limits);
    let total = shape.requests.max(1);
    let out_len = shape.output_len.max(1);
    let overhead = params.overhead_ms.max(0.0);
    // (arrival at the server, sent by the client): in time order, as
    // every arrival is a finish (which only moves forward) plus the same
    // overhead.
    let mut arrivals: VecDeque<(f64, f64)> = VecDeque::new();
    let mut sent = 0u64;
    // A sweep's level starts its streams together; with answers of one
    // length they stay in step, prefilling together (as measured levels
    // do on the simulator).
    while sent < total.min(u64::from(shape.concurrency.max(1))) {
        arrivals.push_back((overhead, 0.0));
        sent += 1;
    }
    let (mut t, mut last_end, mut tokens, mut steps) = (0.0f64, 0.0f64, 0u64, 0u64);
    let (mut ttfts, mut tpots) = (Vec::new(), Vec::new());
    let mut max_running = 0;
    loop {
        if sched.is_idle() {
            let (at, _) = *arrivals.front()?;
            t = t.max(at);
        }
        while arrivals.front().is_some_and(|(at, _)| *at <= t + 1e-9) {
            let Some((_, sent_at)) = arrivals.pop_front() else {
                break;
            };
            let req = Req {
                sent: sent_at,
                first: None,
            };
            sched
                .enqueue(Seq::new(shape.input_len, out_len, req))
                .ok()?;
        }
        let plan = sched.begin_step(&timing);
        if plan.running == 0 {
            break;
        }
        max_running = max_running.max(plan.running);
        t += plan.duration_ms.max(0.0);
        let mut done = Vec::new();
        sched.end_step(|req, index, last| {
            if index == 0 {
                req.first = Some(t);
            }
            if last {
                done.push((req.sent, req.first.unwrap_or(t)));
            }
            true
        });
        for (sent_at, first) in done {
            ttfts.push(first - sent_at);
            if out_len > 1 {
                tpots.push((t - first) / (out_len - 1) as f64);
            }
            tokens += out_len;
            last_end = t;
            if sent < total {
                arrivals.push_back((t + overhead, t));
                sent += 1;
            }
        }
        steps += 1;
        if steps > MAX_STEPS || (sched.is_idle() && arrivals.is_empty()) {
            break;
        }
    }
    Some(Outcome {
        output_tok_s: if last_end > 0.0 {
            tokens as f64 / last_end * 1000.0
        } else {
            0.0
        },
        ttft_p50_ms: percentile(&mut ttfts, 50.0),
        ttft_p99_ms: percentile(&mut ttfts, 99.0),
        tpot_p50_ms: percentile(&mut tpots, 50.0),
        tpot_p99_ms: percentile(&mut tpots, 99.0),
        max_running,
    })
}

/// numpy's linear percentile (the one result files use); 0 for no value.
pub(crate) fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (values.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    values[lo] + (values[hi.min(values.len() - 1)] - values[lo]) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(cap: Option<u32>) -> Params {
        Params {
            step_ms: 4.0,
            step_ms_per_seq: 1.0,
            prefill_ms_per_token: 0.02,
            overhead_ms: 1.0,
            cap,
            knob: None,
            knob_value: None,
            kv_tokens: None,
            slot_context_tokens: None,
        }
    }

    /// One stream, 100 in / 10 out, two requests: the admitting step is
    /// 4 + 1 + 0.02 * 100 = 7 ms, so TTFT = 1 (overhead) + 7 = 8 ms; the
    /// nine steps after are 4 + 1 = 5 ms each: TPOT 5 ms; the first ends
    /// at 1 + 7 + 45 = 53 ms, the second, sent then, at 106 ms, with the
    /// same TTFT counted from its own send: 20 tokens / 106 ms.
    #[test]
    fn one_stream_by_hand() {
        let shape = Shape {
            concurrency: 1,
            requests: 2,
            input_len: 100,
            output_len: 10,
        };
        let o = run_level(&params(None), &shape).expect("runs");
        assert!((o.ttft_p50_ms - 8.0).abs() < 1e-9, "{o:?}");
        assert!((o.tpot_p50_ms - 5.0).abs() < 1e-9, "{o:?}");
        assert!((o.ttft_p99_ms - 8.0).abs() < 1e-9, "{o:?}");
        assert!(
            (o.output_tok_s - 20.0 / 106.0 * 1000.0).abs() < 1e-6,
            "{o:?}"
        );
    }

    /// Four streams on a cap of two: never more than two run, and the
    /// second pair waits a whole answer: its TTFT is the first pair's
    /// life. Pair one: admitted together at 1 ms, step 4 + 2 + 0.02 * 200
    /// = 10 ms, then 9 steps of 6 ms: ends at 1 + 10 + 54 = 65 ms. Pair
    /// two: queued since 1 ms, admitted at 65: TTFT 64 + 10 = 74... and
    /// its send was at 0, so TTFT = 75 - 0 = 75 ms. p50 of (11, 11, 75,
    /// 75) = 43 ms.
    #[test]
    fn a_cap_queues_the_rest() {
        let shape = Shape {
            concurrency: 4,
            requests: 4,
            input_len: 100,
            output_len: 10,
        };
        let o = run_level(&params(Some(2)), &shape).expect("runs");
        assert_eq!(o.max_running, 2);
        assert!((o.ttft_p50_ms - 43.0).abs() < 1e-9, "{o:?}");
        assert!((o.tpot_p50_ms - 6.0).abs() < 1e-9, "{o:?}");
    }

    #[test]
    fn a_request_larger_than_the_cache_is_none() {
        let mut p = params(None);
        p.kv_tokens = Some(50);
        let shape = Shape {
            concurrency: 1,
            requests: 1,
            input_len: 100,
            output_len: 10,
        };
        assert!(run_level(&p, &shape).is_none());
    }
}
