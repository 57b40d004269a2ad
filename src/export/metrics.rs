//! `--metrics-listen ADDR`: the run's live figures in the Prometheus text
//! format, for a Prometheus server to scrape beside the inference server's
//! own `/metrics` (and a Grafana board to show both, `assets/grafana/`).
//!
//! The exposition is `prometheus-client`'s (the Prometheus project's Rust
//! client): name rules, escaping and histogram layout are its business, not
//! ours. What is ours is which figures exist and when they change:
//! - gauges read at scrape time: requests in flight, streaming, waiting (the
//!   driver's atomics, so a scrape is never staler than the request it sees);
//!   the concurrency target and the level index, set by driver events;
//! - counters and histograms fed one record at a time, labelled by the level
//!   the request was sent in.
//!
//! Every series carries `target` (credentials removed), `model` and `run_id`
//! (the result folder's name), so several runs can share one Prometheus.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::load::driver::DriverEvent;
use crate::record::{Outcome, RequestRecord};

/// TTFT buckets, seconds: from a warm short prompt on a fast GPU (a few ms)
/// to a long prompt queued behind a full batch (a minute).
pub(crate) const TTFT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5,
    10.0, 20.0, 30.0, 60.0,
];
/// Inter-token gaps, seconds: about 5-50 ms on a GPU, up to seconds when a
/// CPU-only server or a preemption stalls a stream.
pub(crate) const ITL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.5, 1.0, 2.5,
];
/// Whole answers, seconds: a short reply in a fraction of a second to a
/// 10k-token one on a slow server (many minutes).
pub(crate) const E2EL_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0,
    180.0, 300.0, 600.0, 1200.0,
];

/// How long the end of a run waits for the scraper's next visit, at most,
/// whatever interval it was seen scraping at.
const FINAL_SCRAPE_CAP: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabel {
    level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    level: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    level: String,
    error: String,
}

fn ttft_histogram() -> Histogram {
    Histogram::new(TTFT_BUCKETS.iter().copied())
}
fn itl_histogram() -> Histogram {
    Histogram::new(ITL_BUCKETS.iter().copied())
}
fn e2el_histogram() -> Histogram {
    Histogram::new(E2EL_BUCKETS.iter().copied())
}

type HistogramFamily = Family<LevelLabel, Histogram, fn() -> Histogram>;

/// The metric handles (each an `Arc` inside), shared by the run's faces,
/// which feed them, and the HTTP task, which encodes them.
#[derive(Clone)]
struct Figures {
    in_flight: Gauge,
    streaming: Gauge,
    waiting: Gauge,
    concurrency_target: Gauge,
    level_index: Gauge,
    output_tokens: Family<LevelLabel, Counter>,
    input_tokens: Family<LevelLabel, Counter>,
    requests: Family<OutcomeLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    ttft: HistogramFamily,
    itl: HistogramFamily,
    e2el: HistogramFamily,
}

impl Figures {
    fn register(registry: &mut Registry) -> Figures {
        let figures = Figures {
            in_flight: Gauge::default(),
            streaming: Gauge::default(),
            waiting: Gauge::default(),
            concurrency_target: Gauge::default(),
            level_index: Gauge::default(),
            output_tokens: Family::default(),
            input_tokens: Family::default(),
            requests: Family::default(),
            errors: Family::default(),
            ttft: Family::new_with_constructor(ttft_histogram),
            itl: Family::new_with_constructor(itl_histogram),
            e2el: Family::new_with_constructor(e2el_histogram),
        };
        // No level has started yet.
        figures.level_index.set(-1);
        let f = figures.clone();
        registry.register(
            "tokbench_requests_in_flight",
            "Requests sent and not yet back, all levels together",
            f.in_flight,
        );
        registry.register(
            "tokbench_requests_streaming",
            "Requests in flight whose first output token has arrived",
            f.streaming,
        );
        registry.register(
            "tokbench_requests_waiting",
            "Requests in flight with no output token yet: the server's queue and prefill as the client sees them",
            f.waiting,
        );
        registry.register(
            "tokbench_concurrency_target",
            "Streams the running level keeps in flight (its concurrency)",
            f.concurrency_target,
        );
        registry.register(
            "tokbench_level_index",
            "Index of the running level, as in the level files' level_index (-1 before the first)",
            f.level_index,
        );
        // Counter names get their `_total` from the encoder.
        registry.register(
            "tokbench_output_tokens",
            "Output tokens of completed requests (the result files' total_output_tokens)",
            f.output_tokens,
        );
        registry.register(
            "tokbench_input_tokens",
            "Input tokens of completed requests (the result files' total_input_tokens)",
            f.input_tokens,
        );
        registry.register(
            "tokbench_requests",
            "Requests back, by outcome: ok, failed or cancelled",
            f.requests,
        );
        registry.register(
            "tokbench_request_errors",
            "Failed requests by error class (the level files' errors keys)",
            f.errors,
        );
        registry.register(
            "tokbench_ttft_seconds",
            "Time to first token of completed requests",
            f.ttft,
        );
        registry.register(
            "tokbench_itl_seconds",
            "Gaps between output chunks of completed requests (ITL samples)",
            f.itl,
        );
        registry.register(
            "tokbench_e2el_seconds",
            "End-to-end latency of completed requests (t0 to the last output chunk)",
            f.e2el,
        );
        figures
    }

    /// Create a level's per-request series at zero, so that `increase()` and
    /// `rate()` see the level from its first token rather than from the first
    /// scrape that happened to find it.
    fn touch_level(&self, level: &str) {
        let l = LevelLabel {
            level: level.into(),
        };
        // The guards are dropped at once: only the series' existence matters.
        let _ = self.output_tokens.get_or_create(&l);
        let _ = self.input_tokens.get_or_create(&l);
        for outcome in ["ok", "failed"] {
            let _ = self.requests.get_or_create(&OutcomeLabels {
                level: level.into(),
                outcome: outcome.into(),
            });
        }
        let _ = self.ttft.get_or_create(&l);
        let _ = self.itl.get_or_create(&l);
        let _ = self.e2el.get_or_create(&l);
    }

    fn observe(&self, level: &str, r: &RequestRecord) {
        let outcome = match r.outcome {
            Outcome::Ok => "ok",
            Outcome::Failed(_) => "failed",
            Outcome::Cancelled => "cancelled",
        };
        self.requests
            .get_or_create(&OutcomeLabels {
                level: level.into(),
                outcome: outcome.into(),
            })
            .inc();
        if let Outcome::Failed(class) = r.outcome {
            self.errors
                .get_or_create(&ErrorLabels {
                    level: level.into(),
                    error: class.key(),
                })
                .inc();
        }
        if !r.is_ok() {
            return;
        }
        let l = LevelLabel {
            level: level.into(),
        };
        self.output_tokens
            .get_or_create(&l)
            .inc_by(u64::from(r.output_tokens));
        self.input_tokens
            .get_or_create(&l)
            .inc_by(u64::from(r.input_tokens()));
        if let Some(ttft) = r.ttft {
            self.ttft.get_or_create(&l).observe(ttft.as_secs_f64());
        }
        if let Some(e2el) = r.e2el {
            self.e2el.get_or_create(&l).observe(e2el.as_secs_f64());
        }
        if !r.itl_ms.is_empty() {
            let itl = self.itl.get_or_create(&l);
            for gap in &r.itl_ms {
                itl.observe(gap / 1000.0);
            }
        }
    }
}

/// The driver's live counts, read at every scrape.
struct Queue {
    in_flight: Arc<AtomicU32>,
    streaming: Arc<AtomicU32>,
}

/// What the HTTP task shares with the run.
struct Shared {
    registry: Registry,
    figures: Figures,
    queue: OnceLock<Queue>,
    /// Scrapes served, and when the last one was (for the end of the run).
    scrapes: AtomicU64,
    last_scrapes: Mutex<(Option<Instant>, Option<Instant>)>,
}

impl Shared {
    /// The exposition, gauges refreshed from the driver first.
    fn scrape(&self) -> String {
        if let Some(q) = self.queue.get() {
            let in_flight = q.in_flight.load(Ordering::Relaxed);
            // Read after in_flight: a request that started streaming in
            // between would otherwise make waiting negative.
            let streaming = q.streaming.load(Ordering::Relaxed).min(in_flight);
            self.figures.in_flight.set(i64::from(in_flight));
            self.figures.streaming.set(i64::from(streaming));
            self.figures.waiting.set(i64::from(in_flight - streaming));
        }
        let mut text = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail; an encoder error would be a bug
        // in the label types, and a scrape then gets what was written.
        let _ = prometheus_text::encode(&mut text, &self.registry);
        let now = Instant::now();
        if let Ok(mut last) = self.last_scrapes.lock() {
            *last = (last.1, Some(now));
        }
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        text
    }
}

/// The exporter of one run: the listener is bound when it is made (so a
/// taken port fails before any load), and serves until the process ends.
pub struct MetricsExporter {
    shared: Arc<Shared>,
    addr: SocketAddr,
    level_offset: usize,
}

impl MetricsExporter {
    /// Bind `addr` and start serving `/metrics`. `labels` go on every series.
    pub fn start(
        addr: SocketAddr,
        labels: Vec<(String, String)>,
        level_offset: usize,
    ) -> Result<MetricsExporter> {
        let listener = std::net::TcpListener::bind(addr)
            .wrap_err_with(|| format!("--metrics-listen {addr}: cannot listen there"))?;
        listener
            .set_nonblocking(true)
            .wrap_err("--metrics-listen: cannot set up the listener")?;
        let bound = listener
            .local_addr()
            .wrap_err("--metrics-listen: cannot read the bound address")?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .wrap_err("--metrics-listen: cannot set up the listener")?;
        let mut registry = Registry::with_labels(
            labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect::<Vec<_>>()
                .into_iter(),
        );
        let figures = Figures::register(&mut registry);
        let shared = Arc::new(Shared {
            registry,
            figures,
            queue: OnceLock::new(),
            scrapes: AtomicU64::new(0),
            last_scrapes: Mutex::new((None, None)),
        });
        tokio::spawn(serve(listener, Arc::clone(&shared)));
        Ok(MetricsExporter {
            shared,
            addr: bound,
            level_offset,
        })
    }

    /// Where it listens (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Read the queue gauges from the driver from now on.
    pub(crate) fn attach(&self, in_flight: Arc<AtomicU32>, streaming: Arc<AtomicU32>) {
        let _ = self.shared.queue.set(Queue {
            in_flight,
            streaming,
        });
    }

    /// Levels known before they start (a planned sweep): their series exist
    /// from the first scrape.
    pub fn expect_levels(&self, indexes: impl IntoIterator<Item = usize>) {
        for index in indexes {
            self.shared
                .figures
                .touch_level(&(index + self.level_offset).to_string());
        }
    }

    pub fn on_event(&self, event: &DriverEvent) {
        let f = &self.shared.figures;
        match event {
            DriverEvent::LevelStarted(info) => {
                let level = info.index + self.level_offset;
                f.touch_level(&level.to_string());
                f.level_index.set(level as i64);
                f.concurrency_target.set(i64::from(info.concurrency));
            }
            DriverEvent::TargetChanged { target, .. } => {
                f.concurrency_target.set(i64::from(*target));
            }
            DriverEvent::Record(r) => f.observe(&(r.level + self.level_offset).to_string(), r),
            _ => {}
        }
    }

    /// The output tokens counted so far, all levels (for tests and the end line).
    #[cfg(test)]
    pub(crate) fn output_tokens(&self) -> u64 {
        self.shared
            .scrape_counter_sum("tokbench_output_tokens_total")
    }

    /// At the end of a run: give a scraper that has been visiting the chance
    /// to read the final figures. Waits for one scrape that starts after this
    /// call, at most 1.5 times the interval it was seen scraping at (capped);
    /// returns at once when nothing has scraped twice.
    pub(crate) async fn wait_for_final_scrape(&self) {
        let (previous, last) = self
            .shared
            .last_scrapes
            .lock()
            .map(|l| *l)
            .unwrap_or((None, None));
        let (Some(previous), Some(last)) = (previous, last) else {
            return;
        };
        let interval = last.saturating_duration_since(previous);
        let budget = interval.mul_f64(1.5).min(FINAL_SCRAPE_CAP);
        let seen = self.shared.scrapes.load(Ordering::Relaxed);
        let deadline = Instant::now() + budget;
        while Instant::now() < deadline {
            if self.shared.scrapes.load(Ordering::Relaxed) > seen {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Shared {
    /// Sum of a counter family's samples in a fresh exposition.
    #[cfg(test)]
    fn scrape_counter_sum(&self, name: &str) -> u64 {
        let mut text = String::new();
        let _ = prometheus_text::encode(&mut text, &self.registry);
        sum_samples(&text, name)
    }
}

/// Sum of the samples named `name` (any labels) in a text exposition.
#[cfg(test)]
pub(crate) fn sum_samples(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors and the like: back off, the run goes on.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, std::convert::Infallible>(respond(&shared, &req)) }
            });
            // A scraper that hangs up mid-answer is its own business.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn respond(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &'static str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(content_type),
        );
        response
    };
    match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => reply(
            StatusCode::OK,
            prometheus_text::CONTENT_TYPE,
            shared.scrape(),
        ),
        (&hyper::Method::GET, "/") => reply(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "tokbench: metrics at /metrics\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: tokbench serves /metrics\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::driver::{LevelInfo, Mode};
    use crate::record::ErrorClass;

    fn exposition(exporter: &MetricsExporter) -> String {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &exporter.shared.registry).expect("encode");
        text
    }

    #[tokio::test]
    async fn records_feed_the_counters_and_histograms_by_level() {
        let exporter = MetricsExporter::start(
            "127.0.0.1:0".parse().expect("addr"),
            vec![
                ("target".into(), "http://h:8000".into()),
                ("model".into(), "m\"x".into()),
                ("run_id".into(), "r1".into()),
            ],
            2,
        )
        .expect("exporter");
        exporter.on_event(&DriverEvent::LevelStarted(LevelInfo {
            num_prompts: Some(8),
            plan_index: Some(0),
            ..LevelInfo::new(0, 4, Mode::Planned, Duration::ZERO)
        }));
        let mut ok = RequestRecord::empty(1, 0);
        ok.output_tokens = 10;
        ok.input_tokens_target = 7;
        ok.ttft = Some(Duration::from_millis(40));
        ok.e2el = Some(Duration::from_millis(400));
        ok.itl_ms = vec![20.0, 30.0];
        exporter.on_event(&DriverEvent::Record(ok));
        let mut failed = RequestRecord::empty(2, 0);
        failed.outcome = Outcome::Failed(ErrorClass::Http(503));
        failed.output_tokens = 3;
        exporter.on_event(&DriverEvent::Record(failed));
        let text = exposition(&exporter);
        // Level 0 of a run resumed after two kept levels is level 2.
        let common = "target=\"http://h:8000\",model=\"m\\\"x\",run_id=\"r1\"";
        for line in [
            format!("tokbench_output_tokens_total{{{common},level=\"2\"}} 10"),
            format!("tokbench_input_tokens_total{{{common},level=\"2\"}} 7"),
            format!("tokbench_requests_total{{{common},level=\"2\",outcome=\"ok\"}} 1"),
            format!("tokbench_requests_total{{{common},level=\"2\",outcome=\"failed\"}} 1"),
            format!("tokbench_request_errors_total{{{common},level=\"2\",error=\"http_503\"}} 1"),
            format!("tokbench_ttft_seconds_bucket{{{common},level=\"2\",le=\"0.05\"}} 1"),
            format!("tokbench_ttft_seconds_bucket{{{common},level=\"2\",le=\"0.025\"}} 0"),
            format!("tokbench_itl_seconds_count{{{common},level=\"2\"}} 2"),
            format!("tokbench_e2el_seconds_sum{{{common},level=\"2\"}} 0.4"),
            format!("tokbench_concurrency_target{{{common}}} 4"),
            format!("tokbench_level_index{{{common}}} 2"),
        ] {
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
        // Failed requests' tokens are not output (as in the level files).
        assert_eq!(exporter.output_tokens(), 10);
    }

    #[tokio::test]
    async fn queue_gauges_come_from_the_driver_at_scrape_time() {
        let exporter = MetricsExporter::start("127.0.0.1:0".parse().expect("addr"), vec![], 0)
            .expect("exporter");
        let (in_flight, streaming) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        exporter.attach(Arc::clone(&in_flight), Arc::clone(&streaming));
        in_flight.store(5, Ordering::Relaxed);
        streaming.store(3, Ordering::Relaxed);
        let text = exporter.shared.scrape();
        for line in [
            "tokbench_requests_in_flight 5",
            "tokbench_requests_streaming 3",
            "tokbench_requests_waiting 2",
            "tokbench_level_index -1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        // Streaming read ahead of a request that finished in between: never negative.
        in_flight.store(1, Ordering::Relaxed);
        let text = exporter.shared.scrape();
        assert!(
            text.lines().any(|l| l == "tokbench_requests_waiting 0"),
            "{text}"
        );
    }

    #[test]
    fn sums_samples_of_one_name_only() {
        let text = "# HELP a_total x\na_total{l=\"1\"} 3\na_total{l=\"2\"} 4\na_total_x 100\nb 9\n";
        assert_eq!(sum_samples(text, "a_total"), 7);
    }
}
