//! The server probe, live: scrape what the engine says about itself every
//! `--probe-interval` and hand named gauges to the event loop.
//!
//! The probe only reads; it never blocks the load tasks. An endpoint the
//! target does not have is dropped after its first miss, so a server without
//! metrics costs one request, not one per second.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::gauges::{llamacpp_slots, ollama_ps, LlamacppGauges, VllmGauges};
use super::prometheus;
use crate::engine::{Engine, GaugeSource};
pub(crate) use crate::stats::gauges::ServerSample;

/// Most bytes read of one scrape: a metrics page is a few tens of KiB.
const SCRAPE_LIMIT: usize = 4 << 20;

/// Start scraping. The task ends when the receiver is dropped. Nothing is
/// sent when the target exposes none of its engine's endpoints; the caller
/// shows "no server metrics" once.
pub(crate) fn spawn(
    client: reqwest::Client,
    base_url: String,
    engine: Engine,
    interval: Duration,
    run_start: Instant,
) -> mpsc::UnboundedReceiver<ServerSample> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut sources = engine.gauge_sources().to_vec();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut previous: Option<(Instant, VllmGauges)> = None;
        let mut previous_llama: Option<(Instant, LlamacppGauges)> = None;
        while !sources.is_empty() {
            ticker.tick().await;
            if tx.is_closed() {
                break;
            }
            let mut sample = ServerSample {
                at: run_start.elapsed(),
                gauges: BTreeMap::new(),
            };
            let mut missing = Vec::new();
            for source in sources.clone() {
                let path = source.path();
                let Some(body) = fetch(&client, &format!("{base_url}{path}"), interval).await
                else {
                    missing.push(source);
                    continue;
                };
                let now = Instant::now();
                let found = match source {
                    GaugeSource::VllmMetrics => {
                        let metrics = prometheus::parse_bytes(&body);
                        VllmGauges::from_metrics(&metrics).map(|g| {
                            vllm_gauges(&g, previous.as_ref(), now, &mut sample.gauges);
                            previous = Some((now, g));
                        })
                    }
                    GaugeSource::LlamacppMetrics => {
                        let metrics = prometheus::parse_bytes(&body);
                        LlamacppGauges::from_metrics(&metrics).map(|g| {
                            llamacpp_gauges(&g, previous_llama.as_ref(), now, &mut sample.gauges);
                            previous_llama = Some((now, g));
                        })
                    }
                    GaugeSource::LlamacppSlots => llamacpp_slots(&body).map(|s| {
                        sample.gauges.insert("slots_busy", f64::from(s.busy));
                        sample.gauges.insert("slots_total", f64::from(s.total));
                    }),
                    GaugeSource::OllamaPs => ollama_ps(&body).map(|models| {
                        sample.gauges.insert("models_loaded", models.len() as f64);
                        if let Some(share) =
                            models.iter().filter_map(|m| m.gpu_share()).reduce(f64::min)
                        {
                            sample.gauges.insert("gpu_share", share);
                        }
                    }),
                };
                if found.is_none() {
                    missing.push(source);
                }
            }
            // A source that failed on the first scrape is not there at all.
            if previous.is_none() && previous_llama.is_none() && sample.gauges.is_empty() {
                sources.retain(|s| !missing.contains(s));
            }
            if !sample.gauges.is_empty() && tx.send(sample).is_err() {
                break;
            }
        }
    });
    rx
}

/// GET a small document; None on any failure (the probe never errors),
/// a status other than 2xx, or a body over `SCRAPE_LIMIT`.
pub(super) async fn fetch(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Option<Vec<u8>> {
    let response = tokio::time::timeout(timeout, client.get(url).send())
        .await
        .ok()?
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = tokio::time::timeout(timeout, response.bytes())
        .await
        .ok()?
        .ok()?;
    (body.len() <= SCRAPE_LIMIT).then(|| body.to_vec())
}

/// vLLM gauges, and the rates since the previous scrape.
fn vllm_gauges(
    g: &VllmGauges,
    previous: Option<&(Instant, VllmGauges)>,
    now: Instant,
    out: &mut BTreeMap<&'static str, f64>,
) {
    let mut put = |k, v| super::put_gauge(out, k, v);
    put("running", g.running);
    put("waiting", g.waiting);
    put("kv_cache_usage", g.kv_cache_usage);
    put("preemptions_total", g.preemptions_total);
    if let Some((then, prev)) = previous {
        let rates = g.rates(prev, now.saturating_duration_since(*then));
        put("generation_tok_s", rates.generation_tok_s);
        put("prefix_cache_hit_rate", rates.prefix_cache_hit_rate);
        put("preemptions", rates.preemptions);
    }
}

/// llama.cpp gauges; rates from the counters, since scraping resets its
/// per-second gauges (docs/architecture.md section 8).
fn llamacpp_gauges(
    g: &LlamacppGauges,
    previous: Option<&(Instant, LlamacppGauges)>,
    now: Instant,
    out: &mut BTreeMap<&'static str, f64>,
) {
    let mut put = |k, v| super::put_gauge(out, k, v);
    put("processing", g.requests_processing);
    put("deferred", g.requests_deferred);
    if let Some((then, prev)) = previous {
        let rates = g.rates(prev, now.saturating_duration_since(*then));
        put("generation_tok_s", rates.generation_tok_s);
        put("prompt_tok_s", rates.prompt_tok_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_rates_come_from_two_scrapes() {
        let first = VllmGauges {
            generation_tokens_total: Some(1000.0),
            running: Some(3.0),
            ..VllmGauges::default()
        };
        let second = VllmGauges {
            generation_tokens_total: Some(1500.0),
            running: Some(4.0),
            ..VllmGauges::default()
        };
        let t0 = Instant::now();
        let mut out = BTreeMap::new();
        vllm_gauges(&first, None, t0, &mut out);
        assert_eq!(out.get("running"), Some(&3.0));
        assert!(
            !out.contains_key("generation_tok_s"),
            "no rate from one scrape"
        );
        let mut out = BTreeMap::new();
        // 500 tokens in 2 s = 250 tok/s.
        vllm_gauges(
            &second,
            Some(&(t0, first)),
            t0 + Duration::from_secs(2),
            &mut out,
        );
        assert_eq!(out.get("generation_tok_s"), Some(&250.0));
        assert_eq!(out.get("running"), Some(&4.0));
    }
}
