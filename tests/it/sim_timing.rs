//! The vLLM-like simulator, measured from the client side: its timing contract
//! (docs/architecture.md section 5), its SSE shape, admission under a KV limit, client
//! disconnects, and the auxiliary endpoints.
//!
//! Arrival times are taken where the bytes arrive, with a small hand-rolled SSE split
//! on "\n\n" (independent of `tokbench::protocol`).
//!
//! A note on precision: the engine sleeps on a timerfd (Linux), so a step ends ~0.05-0.1
//! ms after its deadline on an idle machine (tokio's own 1 ms timer made that 1-2 ms),
//! and the client's wake-up adds about as much. The engine schedules against absolute
//! deadlines, so lateness never accumulates: sums over many steps are exact to well
//! under a millisecond. The bounds below hold on a loaded 2-core machine (checked with
//! a busy loop on one core and a cargo build running).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokbench::sim::{spawn, EmissionLog, SimConfig, SimHandle};

fn cfg(step_ms: f64, step_ms_per_seq: f64, prefill_ms_per_1k: f64) -> SimConfig {
    SimConfig {
        step_ms,
        step_ms_per_seq,
        prefill_ms_per_1k,
        // These tests repeat prompts and check the prefill formula: no prefix cache.
        prefix_block_tokens: 0,
        ..SimConfig::default()
    }
}

async fn start(cfg: SimConfig) -> SimHandle {
    spawn("127.0.0.1:0".parse().unwrap(), cfg).await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn chat_body(prompt_words: usize, max_tokens: u64) -> Value {
    json!({
        "model": "anything",
        "messages": [{"role": "user", "content": words(prompt_words)}],
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true}
    })
}

/// One streamed response: each SSE event's `data:` payload with the instant the bytes
/// that completed it arrived.
struct Trace {
    t0: Instant,
    status: u16,
    content_type: String,
    events: Vec<(Instant, String)>,
}

impl Trace {
    /// Events that carry generated output (chat `delta.content` or completions `text`,
    /// non-empty): the role-only chunk, the usage chunk and `[DONE]` are not output.
    fn output_times(&self) -> Vec<Instant> {
        self.events
            .iter()
            .filter(|(_, data)| {
                let Ok(v) = serde_json::from_str::<Value>(data) else {
                    return false;
                };
                let c = &v["choices"][0];
                let text = c["delta"]["content"].as_str().or(c["text"].as_str());
                text.is_some_and(|t| !t.is_empty())
            })
            .map(|(t, _)| *t)
            .collect()
    }

    fn ttft_ms(&self) -> f64 {
        ms(self.output_times()[0] - self.t0)
    }

    fn gaps_ms(&self) -> Vec<f64> {
        self.output_times()
            .windows(2)
            .map(|w| ms(w[1] - w[0]))
            .collect()
    }

    fn json(&self, i: usize) -> Value {
        serde_json::from_str(&self.events[i].1).unwrap()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Split complete SSE events off the front of `buf`.
fn take_events(buf: &mut Vec<u8>, at: Instant, out: &mut Vec<(Instant, String)>) {
    while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
        let event: Vec<u8> = buf.drain(..pos + 2).collect();
        let text = String::from_utf8(event).unwrap();
        let data = text.trim_end().strip_prefix("data: ").unwrap().to_owned();
        out.push((at, data));
    }
}

async fn stream(client: &reqwest::Client, url: &str, body: &Value) -> Trace {
    // Serialized before the clock starts: the test measures the server, not serde.
    let req = client
        .post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap());
    let t0 = Instant::now();
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let mut bytes = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    while let Some(chunk) = bytes.next().await {
        let at = Instant::now();
        buf.extend_from_slice(&chunk.unwrap());
        take_events(&mut buf, at, &mut events);
    }
    assert!(buf.is_empty(), "stream ended inside an event");
    Trace {
        t0,
        status,
        content_type,
        events,
    }
}

/// Open `n` keep-alive connections in the client's pool, so concurrent requests start
/// together instead of behind TCP handshakes.
async fn warm_pool(client: &reqwest::Client, base: &str, n: usize) {
    let url = format!("{base}/health");
    let reqs = (0..n).map(|_| client.get(&url).send());
    for r in futures_util::future::join_all(reqs).await {
        assert_eq!(r.unwrap().status(), 200);
    }
}

fn metric(text: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{model_name=\"sim\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
        .parse()
        .unwrap()
}

/// Concurrency 1 at step 5 ms, no per-sequence cost, prefill 10 ms/1k tokens:
/// TTFT = 5 + 0 + 10 * 500/1000 = 10 ms; gaps = 5 ms.
///
/// Bounds: TTFT also holds the client's own request write and the server's parsing
/// (~0.1 ms release, ~0.3 ms debug) plus two wake-ups (~0.1 ms each on a VM), so it is
/// checked at 10 +1.5/-0 ms (+1 until this VM read p20 11.00-11.08 ms on a quiet
/// run, request write and parse included; the gap below still tells the precise
/// timer from tokio's, whose 1 ms granularity shows there). On a loaded machine a request is often late by a scheduler
/// slice (3-20 ms seen at load 7 on 2 cores), and load only ever adds delay: so the
/// check takes the low end of 11 requests (p20), which load does not move but a
/// systematic excess does (tokio's 1 ms timer gave 11.1-11.6 ms). Each gap holds the
/// difference of two wake-up latencies, so its median is 5 +- 0.15 ms (tokio's timer
/// gave 5.2-5.25); and since steps follow absolute deadlines, the schedule does not
/// drift (see [`drift_ms`]): within 1 ms over 64 steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_stream_ttft_and_gap_follow_the_formula() {
    let sim = start(cfg(5.0, 0.0, 10.0)).await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    warm_pool(&c, &base, 1).await;
    let url = format!("{base}/v1/chat/completions");

    // The first request after start-up pays one-off costs (task wake-ups, allocations);
    // a short warm-up keeps them out of the measured ones.
    stream(&c, &url, &chat_body(10, 2)).await;
    // A burst of load on a shared machine can still spoil one measurement, so up to
    // three are tried; a systematic error (like the 1-2 ms of a 1 ms timer) fails all.
    let mut failures = Vec::new();
    for _ in 0..3 {
        match measure_single_stream(&c, &url).await {
            Ok(()) => break,
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.len() < 3, "{failures:#?}");
    sim.shutdown().await;
}

/// One measurement: a 64-token stream (shape, gaps, drift) and 10 one-token requests
/// (same prefill, same first step) for 11 TTFT samples. Panics on a wrong stream; returns
/// what was off when a timing bound is missed.
async fn measure_single_stream(c: &reqwest::Client, url: &str) -> Result<(), String> {
    let tr = stream(c, url, &chat_body(500, 64)).await;
    check_chat_stream_shape(&tr);
    let mut ttfts = vec![tr.ttft_ms()];
    for _ in 0..10 {
        let short = stream(c, url, &chat_body(500, 1)).await;
        assert_eq!(short.output_times().len(), 1);
        ttfts.push(short.ttft_ms());
    }
    let mut sorted = ttfts.clone();
    sorted.sort_by(f64::total_cmp);
    assert!(
        sorted[0] >= 10.0,
        "TTFT {} ms: a token came before its step ended",
        sorted[0]
    );
    // Load only ever adds delay, so the low end of the distribution is the figure that
    // load does not move: the 3rd of 11 (p20). The 1-2 ms of a 1 ms timer moves it all.
    let ttft = sorted[2];
    let gap = median(tr.gaps_ms());
    let drift = drift_ms(&tr.output_times(), 5.0);
    let report = format!(
        "step 5 ms, prefill 500 words: TTFT p20 {ttft:.3} ms, median {:.3} ms (of {ttfts:.2?}), \
         median gap {gap:.3} ms, drift {drift:.3} ms",
        median(ttfts.clone())
    );
    println!("{report}");
    if ttft <= 11.5 && (gap - 5.0).abs() <= 0.15 && drift.abs() <= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "{report}; expected TTFT p20 10 +1.5/-0, gap 5 +- 0.15, drift 0 +- 1"
        ))
    }
}

/// How much later the last outputs come than the first ones, against a schedule of one
/// output every `step_ms`: the least (arrival - step_ms x index) over the last 10
/// outputs minus the least over the first 10. Load only delays arrivals, so the least
/// of ten is the one it left alone (unless it stalled the client for all ten); a step
/// that ran 0.1 ms long would show as ~5 ms here.
fn drift_ms(times: &[Instant], step_ms: f64) -> f64 {
    let offsets: Vec<f64> = times
        .iter()
        .enumerate()
        .map(|(i, t)| ms(*t - times[0]) - step_ms * i as f64)
        .collect();
    let n = offsets.len();
    assert!(n >= 20);
    let least = |w: &[f64]| w.iter().copied().fold(f64::INFINITY, f64::min);
    least(&offsets[n - 10..]) - least(&offsets[..10])
}

/// The SSE shape of a chat stream with 64 tokens and `include_usage`, prompt 500.
fn check_chat_stream_shape(tr: &Trace) {
    assert_eq!(tr.status, 200);
    assert!(tr.content_type.starts_with("text/event-stream"));
    // role + 64 tokens + usage + [DONE]
    assert_eq!(tr.events.len(), 67);
    let role = tr.json(0);
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(role["model"], "anything");
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(role["choices"][0]["delta"]["content"], "");
    assert_eq!(role["choices"][0]["finish_reason"], Value::Null);
    for i in 1..=64 {
        let v = tr.json(i);
        let choice = &v["choices"][0];
        assert!(!choice["delta"]["content"].as_str().unwrap().is_empty());
        let expect = if i == 64 {
            json!("length")
        } else {
            Value::Null
        };
        assert_eq!(choice["finish_reason"], expect, "chunk {i}");
        assert_eq!(v["id"], role["id"]);
    }
    let usage = tr.json(65);
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 500, "total_tokens": 564, "completion_tokens": 64})
    );
    assert_eq!(tr.events[66].1, "[DONE]");
}

/// Four concurrent streams, default timings (10.5 ms + 0.35 ms/seq, 20 ms/1k prefill),
/// 128-word prompts, 40 tokens each.
///
/// Once all four run, every step is 10.5 + 4 x 0.35 = 11.9 ms, so each stream's gap is
/// 11.9 ms. The admission steps (prefill 2.56 ms per prompt) and the tail (a stream that
/// started one step earlier finishes one step earlier, leaving 3 sequences: 11.55 ms) are
/// excluded by skipping each stream's first and last 3 gaps. In that window the median
/// gap is checked at +-0.3 ms, and the drift against an 11.9 ms schedule (see
/// [`drift_ms`]) at +-1 ms: a missing 0.35 ms/seq term for even one sequence would show
/// in both. Up to three tries, as a burst of load can spoil one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_streams_share_each_step() {
    let sim = start(SimConfig::default()).await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    warm_pool(&c, &base, 4).await;
    let url = format!("{base}/v1/chat/completions");
    let mut failures = Vec::new();
    for _ in 0..3 {
        match measure_four_streams(&c, &url).await {
            Ok(()) => break,
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.len() < 3, "{failures:#?}");
    sim.shutdown().await;
}

async fn measure_four_streams(c: &reqwest::Client, url: &str) -> Result<(), String> {
    let body = chat_body(128, 40);
    let traces = futures_util::future::join_all((0..4).map(|_| stream(c, url, &body))).await;
    let expected = 10.5 + 4.0 * 0.35;
    let mut report = Vec::new();
    let mut ok = true;
    for (i, tr) in traces.iter().enumerate() {
        assert_eq!(tr.status, 200);
        let times = tr.output_times();
        assert_eq!(times.len(), 40);
        let window = &times[3..times.len() - 3];
        let gaps: Vec<f64> = window.windows(2).map(|w| ms(w[1] - w[0])).collect();
        let med = median(gaps);
        let drift = drift_ms(window, expected);
        let line = format!(
            "stream {i}: TTFT {:.2} ms, steady median gap {med:.3} ms, drift {drift:.3} ms",
            tr.ttft_ms()
        );
        println!("{line}");
        report.push(line);
        ok &= (med - expected).abs() <= 0.3 && drift.abs() <= 1.0;
    }
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{report:#?}; expected median gap {expected} +- 0.3, drift 0 +- 1"
        ))
    }
}

/// KV budget for two: each request reserves 100 + 10 = 110 tokens of 300. The other two
/// wait (FIFO) and are admitted only when the first two have finished.
///
/// The order is read from the simulator's own emission log (when each frame was handed
/// to its connection), not from client receipt: on a loaded machine the client can
/// take two streams' bytes in one late wake-up, in either order (CI once saw a queued
/// first token and the freeing last token both arrive at 132.1 ms). Steps are 20 ms, so
/// a queued request's first frame is written a whole step after the freeing one's last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_limit_queues_the_rest_until_the_first_finish() {
    let log = EmissionLog::in_memory();
    let sim = start(SimConfig {
        kv_tokens: 300,
        emission_log: Some(log.clone()),
        ..cfg(20.0, 0.0, 0.0)
    })
    .await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    warm_pool(&c, &base, 5).await;
    let url = format!("{base}/v1/chat/completions");
    let body = chat_body(100, 10);

    let streams = futures_util::future::join_all((0..4).map(|_| stream(&c, &url, &body)));
    // Meanwhile, watch /metrics for the state "2 running, 2 waiting, KV 220/300".
    let watch = async {
        let deadline = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < deadline {
            let text = c
                .get(format!("{base}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let running = metric(&text, "vllm:num_requests_running");
            let waiting = metric(&text, "vllm:num_requests_waiting");
            if running == 2.0 && waiting == 2.0 {
                return metric(&text, "vllm:kv_cache_usage_perc");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("never saw 2 running and 2 waiting");
    };
    let (traces, kv) = tokio::join!(streams, watch);
    assert!(
        (kv - 220.0 / 300.0).abs() < 1e-9,
        "KV usage {kv}, expected 220/300"
    );
    for t in &traces {
        assert_eq!(t.status, 200);
        assert_eq!(t.output_times().len(), 10);
    }

    // Server side: each stream's first and last frame times, in order of first frame.
    let mut emitted: Vec<(u64, u64)> = log
        .take()
        .iter()
        .map(|s| (s.t_ns[0], s.t_ns[s.t_ns.len() - 1]))
        .collect();
    assert_eq!(emitted.len(), 4, "every stream logged its frames");
    emitted.sort();
    // The two admitted first need not share a step (the second may arrive just after
    // the first's step began), so each queued request is paired with the early one whose
    // KV it takes: the i-th queued starts only after the i-th early one has finished.
    let (early, late) = emitted.split_at(2);
    let mut early_done: Vec<u64> = early.iter().map(|&(_, last)| last).collect();
    early_done.sort();
    let since_start = |t: u64| (t - emitted[0].0) as f64 / 1e6;
    for (&(first, _), &done) in late.iter().zip(&early_done) {
        println!(
            "queued request: first frame written at {:.1} ms, its slot freed at {:.1} ms \
             (from the first stream's first frame)",
            since_start(first),
            since_start(done)
        );
        assert!(
            first > done,
            "a queued request started before a running one finished"
        );
    }
    // Client side: the early pair's E2E is 10 steps of 20 ms (200 ms); the two queued
    // requests' TTFT is at least that.
    let mut ttfts: Vec<f64> = traces.iter().map(Trace::ttft_ms).collect();
    ttfts.sort_by(f64::total_cmp);
    for ttft in &ttfts[2..] {
        assert!(*ttft >= 190.0, "queued TTFT {ttft} ms; all: {ttfts:?}");
    }

    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&text, "vllm:num_requests_running"), 0.0);
    assert_eq!(metric(&text, "vllm:kv_cache_usage_perc"), 0.0);
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), 40.0);
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), 400.0);
    sim.shutdown().await;
}

/// With room for one sequence, a client that hangs up mid-stream must free the slot:
/// the next request is admitted at once instead of after the abandoned one's 10,000
/// tokens (20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_the_slot() {
    let sim = start(SimConfig {
        max_num_seqs: 1,
        ..cfg(2.0, 0.0, 0.0)
    })
    .await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    let url = format!("{base}/v1/chat/completions");

    let resp = c
        .post(&url)
        .json(&chat_body(5, 10_000))
        .send()
        .await
        .unwrap();
    let mut bytes = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    while events.len() < 4 {
        let chunk = bytes.next().await.unwrap().unwrap();
        buf.extend_from_slice(&chunk);
        take_events(&mut buf, Instant::now(), &mut events);
    }
    drop(bytes); // hang up mid-stream

    let tr = tokio::time::timeout(Duration::from_secs(2), stream(&c, &url, &chat_body(5, 3)))
        .await
        .expect("the next request was not admitted: the abandoned sequence kept the slot");
    assert_eq!(tr.output_times().len(), 3);
    println!("after disconnect: next TTFT {:.1} ms", tr.ttft_ms());
    assert!(tr.ttft_ms() < 500.0);
    sim.shutdown().await;
}

/// Zero step times (the CPU benchmark setting): many streams complete, as fast as the
/// machine allows, without starving the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_step_time_serves_many_streams() {
    let sim = start(cfg(0.0, 0.0, 0.0)).await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    let url = format!("{base}/v1/chat/completions");
    let body = chat_body(16, 100);
    let started = Instant::now();
    let traces = tokio::time::timeout(
        Duration::from_secs(10),
        futures_util::future::join_all((0..32).map(|_| stream(&c, &url, &body))),
    )
    .await
    .expect("zero-step streams did not finish");
    for tr in &traces {
        assert_eq!(tr.output_times().len(), 100);
        assert_eq!(tr.events.last().unwrap().1, "[DONE]");
    }
    println!(
        "32 streams x 100 tokens at zero step time: {:.1} ms",
        ms(started.elapsed())
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_errors() {
    let sim = start(SimConfig {
        kv_tokens: 1000,
        ..cfg(1.0, 0.0, 0.0)
    })
    .await;
    let base = format!("http://{}", sim.addr);
    let c = client();

    // Bad JSON -> 400 with an OpenAI error body.
    let r = c
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "BadRequestError");
    assert_eq!(v["error"]["code"], 400);
    assert!(v["error"]["message"].is_string());

    // Missing messages -> 400.
    let r = c
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Longer than the KV budget -> 400.
    let r = c
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat_body(990, 11))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 1000"));

    // /v1/models lists "sim".
    let v: Value = c
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "sim");
    assert_eq!(v["data"][0]["owned_by"], "tokbench-sim");

    // /tokenize counts words, in vLLM's and llama.cpp's shapes.
    let v: Value = c
        .post(format!("{base}/tokenize"))
        .json(&json!({"model": "sim", "prompt": "one two  three\nfour"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["count"], 4);
    assert_eq!(v["max_model_len"], 1000);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 4);
    let v: Value = c
        .post(format!("{base}/tokenize"))
        .json(&json!({"content": "a b c"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 3);

    // /version, /health, 404.
    let v: Value = c
        .get(format!("{base}/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["version"], "0.0.0-tokbench-sim");
    let r = c.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap().is_empty());
    let r = c.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], 404);

    // Non-streaming chat: one object with usage; max_tokens defaults to 16.
    let v: Value = c
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "a b c"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "m");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 3, "total_tokens": 19, "completion_tokens": 16})
    );

    // Streaming completions: no role chunk; continuous usage on every chunk.
    let tr = stream(
        &c,
        &format!("{base}/v1/completions"),
        &json!({"model": "m", "prompt": "a b", "max_tokens": 3, "stream": true,
                "stream_options": {"include_usage": true, "continuous_usage_stats": true}}),
    )
    .await;
    assert_eq!(tr.events.len(), 5); // 3 tokens + usage + [DONE]
    for i in 0..3 {
        let v = tr.json(i);
        assert_eq!(v["object"], "text_completion");
        assert!(!v["choices"][0]["text"].as_str().unwrap().is_empty());
        assert_eq!(v["usage"]["completion_tokens"], i as u64 + 1);
        assert_eq!(v["usage"]["prompt_tokens"], 2);
    }
    assert_eq!(tr.json(2)["choices"][0]["finish_reason"], "length");
    assert_eq!(tr.json(3)["usage"]["total_tokens"], 5);
    assert_eq!(tr.events[4].1, "[DONE]");
    sim.shutdown().await;
}

/// Dropping the handle stops serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_stops_serving() {
    let sim = start(SimConfig::default()).await;
    let addr = sim.addr;
    drop(sim);
    // The listener goes when the runtime drops the aborted task, which a
    // busy machine can take longer than a fixed pause to get to: wait for
    // refusal, with a deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{addr} still accepts 2 s after the handle was dropped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With an API key, everything under /v1 needs `Authorization: Bearer <key>` and answers
/// 401 with vLLM's body otherwise; /health, /version, /metrics and /tokenize stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_the_v1_routes() {
    let key = "sk-sim-s3cret";
    let config = SimConfig {
        api_key: Some(key.to_owned()),
        ..cfg(1.0, 0.0, 0.0)
    };
    assert!(!format!("{config:?}").contains(key), "Debug shows the key");
    let sim = start(config).await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    let chat = format!("{base}/v1/chat/completions");
    let body = chat_body(5, 3);
    let unauthorized =
        json!({"error": {"message": "Unauthorized", "type": "invalid_request_error", "code": 401}});

    let refused = [
        c.post(&chat).json(&body),
        c.post(&chat)
            .json(&body)
            .header("authorization", "Bearer wrong"),
        c.post(&chat).json(&body).header("authorization", key),
        c.post(&chat)
            .json(&body)
            .header("authorization", format!("Bearer {key}x")),
        c.post(&chat)
            .json(&body)
            .header("authorization", format!("bearer {key}")),
        c.post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": "a", "max_tokens": 1})),
        c.get(format!("{base}/v1/models")),
        // Unknown and wrong-method paths under /v1 too, as vLLM's middleware does.
        c.get(format!("{base}/v1/nope")),
        c.get(&chat),
    ];
    for req in refused {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        assert_eq!(r.json::<Value>().await.unwrap(), unauthorized);
    }

    // The right key streams as usual.
    let r = c
        .post(&chat)
        .json(&body)
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"));
    let r = c
        .get(format!("{base}/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Open without a key.
    for path in ["/health", "/version", "/metrics"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = c
        .post(format!("{base}/tokenize"))
        .json(&json!({"prompt": "a b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    sim.shutdown().await;
}

/// The figures for the record (not a check): concurrency 1, step 5 ms, prefill 10 ms/1k,
/// 500-word prompt, 64 tokens, 20 requests. Run with
/// `cargo test --release --test it sim_timing:: -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints measurements; checks nothing"]
async fn report_single_stream_figures() {
    let sim = start(cfg(5.0, 0.0, 10.0)).await;
    let base = format!("http://{}", sim.addr);
    let c = client();
    warm_pool(&c, &base, 1).await;
    let url = format!("{base}/v1/chat/completions");
    stream(&c, &url, &chat_body(10, 2)).await;
    let mut ttfts = Vec::new();
    let mut gaps = Vec::new();
    for _ in 0..20 {
        let tr = stream(&c, &url, &chat_body(500, 64)).await;
        ttfts.push(tr.ttft_ms());
        gaps.extend(tr.gaps_ms());
    }
    let p90 = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() * 9 / 10]
    };
    println!(
        "FIGURES TTFT median {:.3} ms p90 {:.3} ms (expected 10) | gap median {:.3} ms p90 {:.3} ms (expected 5)",
        median(ttfts.clone()),
        p90(ttfts),
        median(gaps.clone()),
        p90(gaps)
    );
    sim.shutdown().await;
}
