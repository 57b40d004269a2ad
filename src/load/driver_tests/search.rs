//! `--find-capacity`: the probes the driver runs for the search policy.

use super::*;

#[tokio::test(start_paused = true)]
async fn the_capacity_search_doubles_then_bisects() {
    // 8 slots: from 9 streams on, someone waits a whole request for a slot,
    // and p99 TTFT (10 ms with a free slot) breaks the 50 ms SLO.
    let server = FakeServer::new(|_| ok(10, 100)).with_slots(8);
    let mut cfg = config(vec![LevelPlan::closed(1, 1)]);
    cfg.search = Some(SearchPlan {
        max_concurrency: 64,
        slo: CapacitySlo {
            ttft_p99_ms: Some(50.0),
            min_stream_tok_s: None,
            tpot_p99_ms: None,
            max_error_rate: 0.01,
        },
        num_prompts: None,
        prompts_per_stream: 4,
    });
    let run = Harness::start(cfg, server).finish().await;
    let probes: Vec<u32> = run.levels().iter().map(|l| l.concurrency).collect();
    assert_eq!(probes, vec![1, 2, 4, 8, 16, 12, 10, 9]);
    for (i, level) in run.levels().iter().enumerate() {
        assert_eq!(level.mode, Mode::Search);
        assert_eq!(level.plan_index, Some(i));
        assert_eq!(level.num_prompts, Some(4 * level.concurrency));
    }
    let progress: Vec<SearchProgress> = run
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            DriverEvent::Search(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(progress.len(), 8);
    assert_eq!(
        progress[4],
        SearchProgress {
            passing: Some(8),
            failing: Some(16),
            next: Some(12)
        }
    );
    assert_eq!(
        progress[7],
        SearchProgress {
            passing: Some(8),
            failing: Some(9),
            next: None
        }
    );
    assert_eq!(*run.last(), finished(false));
}
