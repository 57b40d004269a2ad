//! The scheduler and the engine loop, on hand-worked steps.

use super::*;

const DEFAULT: Timing = timing(10.5, 0.35, 20.0);

/// A step of `step_ms` + `step_ms_per_seq` per sequence, prefill at
/// `prefill_ms_per_1k` per 1,000 prompt tokens.
const fn timing(step_ms: f64, step_ms_per_seq: f64, prefill_ms_per_1k: f64) -> Timing {
    Timing {
        step_ms,
        step_ms_per_seq,
        prefill_ms_per_1k,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn step_time_formula() {
    // Decode only, one sequence.
    assert!(close(step_time_ms(&DEFAULT, 1, 0), 10.85));
    // Four sequences, one of them admitted with a 500-token prompt.
    assert!(close(step_time_ms(&DEFAULT, 4, 500), 10.5 + 1.4 + 10.0));
    // All zero: zero.
    let zero = timing(0.0, 0.0, 0.0);
    assert_eq!(step_time_ms(&zero, 256, 100_000), 0.0);
}

fn limits(max_num_seqs: usize, kv_tokens: u64) -> Limits {
    Limits {
        max_num_seqs,
        kv_tokens,
        kv_policy: KvPolicy::Reserve,
        prefix_block_tokens: 0,
    }
}

#[test]
fn admission_respects_max_num_seqs() {
    assert_eq!(admissible([10, 10, 10, 10], 0, 0, limits(3, 1000)), 3);
    assert_eq!(admissible([10, 10, 10, 10], 2, 0, limits(3, 1000)), 1);
    assert_eq!(admissible([10], 3, 0, limits(3, 1000)), 0);
}

#[test]
fn admission_respects_kv_budget() {
    assert_eq!(admissible([40, 40, 40], 0, 0, limits(10, 100)), 2);
    assert_eq!(admissible([40, 40, 40], 1, 30, limits(10, 100)), 1);
    // Exactly full is allowed.
    assert_eq!(admissible([50, 50], 0, 0, limits(10, 100)), 2);
    assert_eq!(admissible([u64::MAX], 0, 1, limits(10, 100)), 0);
}

#[test]
fn admission_is_head_of_line() {
    // The big head does not fit; the small one behind it must not skip ahead.
    assert_eq!(admissible([90, 5], 1, 20, limits(10, 100)), 0);
    assert_eq!(admissible([5, 90, 5], 1, 20, limits(10, 100)), 1);
}

#[test]
fn enqueue_refuses_what_can_never_run() {
    let mut s: Scheduler<u32> = Scheduler::new(limits(4, 100));
    assert!(s.enqueue(Seq::new(60, 41, 1)).is_err());
    assert!(s.enqueue(Seq::new(10, 0, 2)).is_err());
    assert!(s.enqueue(Seq::new(60, 40, 3)).is_ok());
    assert_eq!(s.waiting(), 1);
}

/// Drive a scheduler with a virtual clock, the way `run` does with a real one, and
/// record (id, token index, emission time).
fn simulate(
    timing: Timing,
    lim: Limits,
    arrivals: &[(f64, u64, u64)], // (arrival ms, prompt, max_tokens), id = index
) -> Vec<(usize, u64, f64)> {
    let mut sched: Scheduler<usize> = Scheduler::new(lim);
    let mut emitted = Vec::new();
    let mut next = 0;
    let mut now = 0.0;
    loop {
        if sched.is_idle() {
            if next == arrivals.len() {
                return emitted;
            }
            now = f64::max(now, arrivals[next].0);
        }
        while next < arrivals.len() && arrivals[next].0 <= now {
            let (_, p, m) = arrivals[next];
            sched.enqueue(Seq::new(p, m, next)).unwrap();
            next += 1;
        }
        let plan = sched.begin_step(&timing);
        now += plan.duration_ms;
        sched.end_step(|id, index, _| {
            emitted.push((*id, index, now));
            true
        });
    }
}

#[test]
fn concurrency_one_ttft_and_tpot() {
    let t = timing(5.0, 0.5, 10.0);
    let ev = simulate(t, limits(256, 200_000), &[(0.0, 500, 4)]);
    let times: Vec<f64> = ev.iter().map(|e| e.2).collect();
    // TTFT = step + per_seq + prefill(500) = 5 + 0.5 + 5; then TPOT = 5.5.
    assert!(close(times[0], 10.5));
    assert!(close(times[1], 16.0));
    assert!(close(times[3], 27.0));
    assert_eq!(ev.len(), 4);
}

#[test]
fn late_arrival_waits_for_the_step_boundary_and_joins_the_batch() {
    let t = timing(10.0, 1.0, 0.0);
    let ev = simulate(t, limits(256, 200_000), &[(0.0, 10, 3), (4.0, 10, 2)]);
    // Step 1 (A alone): 11 ms. B arrived at 4 and joins at the boundary (11):
    // step 2 has two sequences, 12 ms -> A's 2nd and B's 1st token at 23.
    let b_first = ev.iter().find(|e| e.0 == 1 && e.1 == 0).unwrap().2;
    assert!(close(b_first, 23.0));
    let a_last = ev.iter().find(|e| e.0 == 0 && e.1 == 2).unwrap().2;
    assert!(close(a_last, 35.0));
    // Step 4: B alone, 11 ms.
    let b_last = ev.iter().find(|e| e.0 == 1 && e.1 == 1).unwrap().2;
    assert!(close(b_last, 35.0));
}

#[test]
fn kv_full_queues_until_a_sequence_finishes() {
    let t = timing(1.0, 0.0, 0.0);
    // Each needs 10 + 5 = 15 KV; a budget of 30 fits two.
    let reqs = [(0.0, 10, 5); 4];
    let ev = simulate(t, limits(256, 30), &reqs);
    let first = |id: usize| ev.iter().find(|e| e.0 == id && e.1 == 0).unwrap().2;
    let last = |id: usize| ev.iter().find(|e| e.0 == id && e.1 == 4).unwrap().2;
    assert!(close(first(0), 1.0) && close(first(1), 1.0));
    assert!(close(last(0), 5.0));
    // Admitted at the boundary where the first two freed their KV.
    assert!(close(first(2), 6.0) && close(first(3), 6.0));
}

#[test]
fn dropped_sequence_frees_its_kv() {
    let mut s: Scheduler<u32> = Scheduler::new(limits(1, 100));
    s.enqueue(Seq::new(10, 50, 1)).unwrap();
    s.enqueue(Seq::new(10, 50, 2)).unwrap();
    let plan = s.begin_step(&DEFAULT);
    assert_eq!((plan.admitted, plan.running), (1, 1));
    assert_eq!(s.kv_used(), 60);
    let out = s.end_step(|_, _, _| false);
    assert_eq!(out.dropped, 1);
    assert_eq!(s.kv_used(), 0);
    let plan = s.begin_step(&DEFAULT);
    assert_eq!(plan.admitted, 1);
    assert_eq!(plan.admitted_prompt_tokens, 10);
}

#[test]
fn retain_waiting_drops_gone_requests() {
    let mut s: Scheduler<u32> = Scheduler::new(limits(1, 1000));
    for id in 0..4 {
        s.enqueue(Seq::new(1, 1, id)).unwrap();
    }
    assert_eq!(s.retain_waiting(|id| id % 2 == 0), 2);
    assert_eq!(s.waiting(), 2);
}

#[test]
fn grow_preempts_the_newest_and_it_completes_after_recompute() {
    let t = timing(1.0, 0.0, 1000.0);
    let lim = Limits {
        kv_policy: KvPolicy::Grow,
        ..limits(8, 30)
    };
    let mut s: Scheduler<usize> = Scheduler::new(lim);
    // Each needs 10 + 10 = 20 at the end: two fit at admission (11 each), not later.
    s.enqueue(Seq::new(10, 10, 0)).unwrap();
    s.enqueue(Seq::new(10, 10, 1)).unwrap();
    let mut tokens = [0u64; 2];
    let mut preempted = 0;
    let mut recompute = 0;
    for _ in 0..100 {
        if s.is_idle() {
            break;
        }
        let plan = s.begin_step(&t);
        preempted += plan.preempted;
        if plan.preempted == 0 && plan.admitted == 1 && plan.prefill_tokens > 10 {
            // Readmitted: prompt and the tokens generated before, recomputed.
            recompute = plan.prefill_tokens;
        }
        assert!(s.kv_used() <= 30, "KV {} over the budget", s.kv_used());
        s.end_step(|id, index, _| {
            assert_eq!(index, tokens[*id], "tokens in order, none lost");
            tokens[*id] += 1;
            true
        });
    }
    assert_eq!(tokens, [10, 10]);
    assert_eq!(preempted, 1);
    assert!(recompute > 10, "no recompute seen");
    assert_eq!(s.kv_used(), 0);
}

#[test]
fn prefix_cache_skips_cached_blocks_and_evicts_the_oldest() {
    let t = timing(0.0, 0.0, 1000.0);
    // 64 KV tokens / 16 per block: 4 blocks cached at most.
    let lim = Limits {
        prefix_block_tokens: 16,
        ..limits(8, 64)
    };
    let mut s: Scheduler<u32> = Scheduler::new(lim);
    let run = |s: &mut Scheduler<u32>, blocks: Vec<u64>| {
        s.enqueue(Seq::new(33, 1, 0).with_blocks(blocks)).unwrap();
        let plan = s.begin_step(&t);
        s.end_step(|_, _, _| true);
        (plan.cache_queries, plan.cache_hits, plan.prefill_tokens)
    };
    assert_eq!(run(&mut s, vec![1, 2]), (33, 0, 33));
    assert_eq!(run(&mut s, vec![1, 2]), (33, 32, 1));
    assert_eq!(run(&mut s, vec![1, 9]), (33, 16, 17));
    // Three new blocks evict the least recently used (2, then 1).
    assert_eq!(run(&mut s, vec![5, 6]), (33, 0, 33));
    assert_eq!(run(&mut s, vec![7, 8]), (33, 0, 33));
    assert_eq!(run(&mut s, vec![1, 2]).1, 0);
}
