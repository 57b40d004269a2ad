//! The server probe, live: scrape what the engine says about itself every
//! `--probe-interval` and hand named gauges to the event loop.
//!
//! The probe only reads; it never blocks the load tasks. An endpoint the
//! target does not have (it answers, but not with the page) is dropped after
//! its first miss, so a server without metrics costs one request, not one per
//! second. One that does not answer in time is asked again at the next tick:
//! a busy server's first scrape may be slow.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::gauges::{
    llamacpp_slots, ollama_ps, LlamacppGauges, SglangGauges, TgiGauges, VllmGauges,
};
use super::prometheus;
use crate::engine::{Engine, GaugeSource};
pub(crate) use crate::stats::gauges::ServerSample;

/// Most bytes read of one scrape: a metrics page is a few tens of KiB.
pub(super) const SCRAPE_LIMIT: usize = 4 << 20;

/// The shortest wait for one scrape, whatever the interval.
pub(super) const SCRAPE_TIMEOUT_FLOOR: Duration = Duration::from_secs(1);

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
    // A scrape may take longer than a short interval on a busy box; the
    // ticker skips the ticks it overran.
    let timeout = interval.max(SCRAPE_TIMEOUT_FLOOR);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut previous: Option<(Instant, VllmGauges)> = None;
        let mut previous_llama: Option<(Instant, LlamacppGauges)> = None;
        let mut previous_sglang: Option<(Instant, SglangGauges)> = None;
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
                let url = format!("{base_url}{path}");
                let body = match scrape(&client, &url, timeout, SCRAPE_LIMIT).await {
                    Ok(body) => body,
                    Err(Miss::Refused) => {
                        missing.push(source);
                        continue;
                    }
                    Err(Miss::NoAnswer) => continue,
                };
                let now = Instant::now();
                let found = match source {
                    GaugeSource::VllmMetrics => with_rates(
                        &body,
                        VllmGauges::from_metrics,
                        vllm_gauges,
                        &mut previous,
                        now,
                        &mut sample.gauges,
                    ),
                    GaugeSource::LlamacppMetrics => with_rates(
                        &body,
                        LlamacppGauges::from_metrics,
                        llamacpp_gauges,
                        &mut previous_llama,
                        now,
                        &mut sample.gauges,
                    ),
                    GaugeSource::SglangMetrics => with_rates(
                        &body,
                        SglangGauges::from_metrics,
                        sglang_gauges,
                        &mut previous_sglang,
                        now,
                        &mut sample.gauges,
                    ),
                    GaugeSource::TgiMetrics => {
                        let metrics = prometheus::parse_bytes(&body);
                        TgiGauges::from_metrics(&metrics).map(|g| {
                            let mut put = |k, v| super::put_gauge(&mut sample.gauges, k, v);
                            put("running", g.running);
                            put("waiting", g.waiting);
                            put("batch_tokens", g.batch_tokens);
                            put("kv_cache_usage", g.kv_cache_usage());
                        })
                    }
                    GaugeSource::LlamacppSlots => llamacpp_slots(&body).map(|s| {
                        sample.gauges.insert("slots_busy", f64::from(s.busy));
                        sample.gauges.insert("slots_total", f64::from(s.total));
                        if let Some(ctx) = s.context {
                            sample.gauges.insert("slot_context_tokens", ctx as f64);
                        }
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
            if previous.is_none()
                && previous_llama.is_none()
                && previous_sglang.is_none()
                && sample.gauges.is_empty()
            {
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
/// a status other than 2xx, a body over `limit` bytes (refused from its
/// `Content-Length`, or as soon as that many have arrived, so an endless
/// body costs at most `limit` of memory), or more than `timeout` for the
/// whole exchange.
pub(super) async fn fetch(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Option<Vec<u8>> {
    fetch_at_most(client, url, timeout, SCRAPE_LIMIT).await
}

async fn fetch_at_most(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
    limit: usize,
) -> Option<Vec<u8>> {
    scrape(client, url, timeout, limit).await.ok()
}

/// Why a scrape brought no body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Miss {
    /// The server answered, and not with the page: a status other than 2xx,
    /// or a body over the limit. Asking again gets the same.
    Refused,
    /// No answer in time, or the connection failed: a busy or restarting
    /// server, worth asking again.
    NoAnswer,
}

/// Why a GET brought no body, told apart for a line that names the cause
/// (`--gpu-metrics`). Never reqwest's own words: they quote the URL, and a
/// URL may hold credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FetchError {
    /// Nothing within the time limit.
    Timeout,
    /// The connection could not be made (refused, unreachable, no such host).
    Connect,
    /// The connection broke before the whole answer came.
    Broken,
    /// An answer, with this status (not 2xx).
    Status(u16),
    /// An answer longer than the limit.
    TooLarge,
}

impl FetchError {
    fn miss(self) -> Miss {
        match self {
            FetchError::Status(_) | FetchError::TooLarge => Miss::Refused,
            FetchError::Timeout | FetchError::Connect | FetchError::Broken => Miss::NoAnswer,
        }
    }
}

async fn scrape(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
    limit: usize,
) -> Result<Vec<u8>, Miss> {
    fetch_or_why(client, url, timeout, limit)
        .await
        .map_err(FetchError::miss)
}

/// GET `url`, at most `limit` bytes (refused from its `Content-Length`, or
/// as soon as that many have arrived, so an endless body costs at most
/// `limit` of memory), within `timeout` for the whole exchange; or why not.
pub(super) async fn fetch_or_why(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
    limit: usize,
) -> Result<Vec<u8>, FetchError> {
    let exchange = async {
        let mut response = client.get(url).send().await.map_err(|e| {
            if e.is_timeout() {
                FetchError::Timeout
            } else if e.is_connect() {
                FetchError::Connect
            } else {
                FetchError::Broken
            }
        })?;
        if !response.status().is_success() {
            return Err(FetchError::Status(response.status().as_u16()));
        }
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(FetchError::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|_| FetchError::Broken)? {
            if body.len() + chunk.len() > limit {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(FetchError::Timeout))
}

/// How one engine's gauges go into a sample, given the scrape before.
type PutGauges<G> = fn(&G, Option<&(Instant, G)>, Instant, &mut BTreeMap<&'static str, f64>);

/// The gauges a function of one engine reads from a Prometheus scrape, put
/// with the rates since the scrape before (`previous`, then replaced by this
/// one). None when the scrape has none of that engine's names.
fn with_rates<G>(
    body: &[u8],
    read: fn(&prometheus::Metrics) -> Option<G>,
    put: PutGauges<G>,
    previous: &mut Option<(Instant, G)>,
    now: Instant,
    out: &mut BTreeMap<&'static str, f64>,
) -> Option<()> {
    let gauges = read(&prometheus::parse_bytes(body))?;
    put(&gauges, previous.as_ref(), now, out);
    *previous = Some((now, gauges));
    Some(())
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

/// SGLang gauges under the names the rest reads (running, waiting,
/// kv_cache_usage), its split queues, and the rates since the last scrape.
fn sglang_gauges(
    g: &SglangGauges,
    previous: Option<&(Instant, SglangGauges)>,
    now: Instant,
    out: &mut BTreeMap<&'static str, f64>,
) {
    let mut put = |k, v| super::put_gauge(out, k, v);
    put("running", g.running);
    put("waiting", g.waiting);
    put("kv_cache_usage", g.kv_cache_usage);
    put("prefill_queue", g.prefill_queue);
    put("decode_queue", g.decode_queue);
    // Zero when the server does not speculate: not worth a gauge then.
    put(
        "spec_accept_length",
        g.spec_accept_length.filter(|v| *v > 0.0),
    );
    put("spec_accept_rate", g.spec_accept_rate.filter(|v| *v > 0.0));
    match previous {
        Some((then, prev)) => {
            let rates = g.rates(prev, now.saturating_duration_since(*then));
            put("generation_tok_s", rates.generation_tok_s);
            put("prefix_cache_hit_rate", rates.prefix_cache_hit_rate);
        }
        // Its own gauges stand in until two scrapes give rates.
        None => {
            put("generation_tok_s", g.gen_throughput);
            put("prefix_cache_hit_rate", g.cache_hit_rate);
        }
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

    /// A one-shot HTTP server on loopback: answers one request with `head`
    /// and then `body_chunks` chunked pieces of `piece` bytes.
    async fn serve_once(head: &'static str, pieces: usize, piece: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await;
            let _ = conn.write_all(head.as_bytes()).await;
            let chunk = format!("{piece:x}\r\n{}\r\n", "a".repeat(piece));
            for _ in 0..pieces {
                if conn.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
            }
            let _ = conn.write_all(b"0\r\n\r\n").await;
        });
        format!("http://{addr}/metrics")
    }

    const CHUNKED: &str = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";

    /// A server on loopback whose first `dropped` connections are closed
    /// unanswered; after that each request gets `answer`. Counts requests.
    async fn flaky_server(
        dropped: usize,
        answer: &'static str,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                if n >= dropped {
                    let _ = conn.write_all(answer.as_bytes()).await;
                }
            }
        });
        (format!("http://{addr}"), asked)
    }

    /// Two scrapes that get no answer do not drop the source: the third
    /// brings `/api/ps` (a model wholly in GPU memory, share 1). A source
    /// that answers 404 is asked once and never again.
    #[tokio::test]
    async fn a_source_without_an_answer_is_asked_again_and_a_refusal_is_not() {
        const PS: &str = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 52\r\n\r\n{\"models\":[{\"name\":\"m\",\"size\":100,\"size_vram\":100}]}";
        const NOT_FOUND: &str =
            "HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let client = reqwest::Client::new();
        let tick = Duration::from_millis(10);

        let (url, asked) = flaky_server(2, PS).await;
        let mut rx = spawn(client.clone(), url, Engine::Ollama, tick, Instant::now());
        let sample = rx.recv().await.expect("a sample after two misses");
        assert_eq!(sample.gauges.get("gpu_share"), Some(&1.0));
        assert_eq!(sample.gauges.get("models_loaded"), Some(&1.0));
        assert!(asked.load(std::sync::atomic::Ordering::SeqCst) >= 3);

        let (url, asked) = flaky_server(0, NOT_FOUND).await;
        let mut rx = spawn(client, url, Engine::Ollama, tick, Instant::now());
        // The task ends once its only source is dropped, closing the channel.
        assert!(rx.recv().await.is_none());
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// 3 pieces of 100 bytes: 300 bytes under a 1,000-byte limit come back;
    /// 30 pieces (3,000 bytes) are refused once 1,000 would be passed; a
    /// 500 with a body, or a declared length over the limit, give nothing.
    #[tokio::test]
    async fn a_scrape_over_its_limit_or_not_2xx_gives_nothing() {
        let client = reqwest::Client::new();
        let t = Duration::from_secs(10);
        let url = serve_once(CHUNKED, 3, 100).await;
        assert_eq!(
            fetch_at_most(&client, &url, t, 1000).await.map(|b| b.len()),
            Some(300)
        );
        let url = serve_once(CHUNKED, 30, 100).await;
        assert_eq!(fetch_at_most(&client, &url, t, 1000).await, None);
        let url = serve_once(
            "HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n",
            1,
            10,
        )
        .await;
        assert_eq!(fetch_at_most(&client, &url, t, 1000).await, None);
        let url = serve_once("HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n", 0, 0).await;
        assert_eq!(fetch_at_most(&client, &url, t, 1000).await, None);
    }

    /// SGLang: its own gauges stand in on the first scrape (gen 42 tok/s,
    /// hit rate 0.3); from the second, the counters' rates: 500 tokens in
    /// 2 s = 250 tok/s, 300 of 600 prompt tokens cached = 0.5. A speculative
    /// acceptance of 0 (no speculation) is no gauge.
    #[test]
    fn sglang_gauges_first_its_own_then_the_counters_rates() {
        let first = SglangGauges {
            running: Some(2.0),
            gen_throughput: Some(42.0),
            cache_hit_rate: Some(0.3),
            generation_tokens_total: Some(8.0),
            prompt_tokens_total: Some(1000.0),
            cached_tokens_total: Some(200.0),
            spec_accept_length: Some(0.0),
            ..SglangGauges::default()
        };
        let second = SglangGauges {
            generation_tokens_total: Some(508.0),
            prompt_tokens_total: Some(1600.0),
            cached_tokens_total: Some(500.0),
            spec_accept_length: Some(2.5),
            ..first
        };
        let t0 = Instant::now();
        let mut out = BTreeMap::new();
        sglang_gauges(&first, None, t0, &mut out);
        assert_eq!(out.get("generation_tok_s"), Some(&42.0));
        assert_eq!(out.get("prefix_cache_hit_rate"), Some(&0.3));
        assert_eq!(out.get("running"), Some(&2.0));
        assert!(!out.contains_key("spec_accept_length"));
        let mut out = BTreeMap::new();
        sglang_gauges(
            &second,
            Some(&(t0, first)),
            t0 + Duration::from_secs(2),
            &mut out,
        );
        assert_eq!(out.get("generation_tok_s"), Some(&250.0));
        assert_eq!(out.get("prefix_cache_hit_rate"), Some(&0.5));
        assert_eq!(out.get("spec_accept_length"), Some(&2.5));
    }

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
