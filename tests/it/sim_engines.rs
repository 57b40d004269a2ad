//! The simulator's `ollama` and `llamacpp` personalities, read with tokbench's own
//! decoders and probe parsers: their wire shapes, their server-side figures against
//! the client's clock, their slots and Ollama's model load queue.
//!
//! Fast steps (a few ms) keep the whole file well under ten seconds; the timing bounds
//! leave room for a loaded 2-core machine.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokbench::probe::gauges::{self, LlamacppGauges};
use tokbench::probe::prometheus;
use tokbench::protocol::{OllamaDecoder, OpenAiDecoder, StreamEvent};
use tokbench::record::{FinishReason, ServerTimings};
use tokbench::sim::{spawn, SimConfig, SimEngine, SimHandle};

const BUSY_BODY: &str =
    r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#;

fn cfg(engine: SimEngine) -> SimConfig {
    SimConfig {
        engine,
        step_ms: 5.0,
        step_ms_per_seq: 0.5,
        prefill_ms_per_1k: 20.0,
        ..SimConfig::default()
    }
}

async fn start(cfg: SimConfig) -> (SimHandle, String) {
    let sim = spawn("127.0.0.1:0".parse().unwrap(), cfg).await.unwrap();
    let base = format!("http://{}", sim.addr);
    (sim, base)
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A streamed answer decoded as it arrived.
#[derive(Debug)]
struct Decoded {
    status: u16,
    body: String,
    t0: Instant,
    /// When each chunk carrying output arrived.
    outputs: Vec<Instant>,
    end: Instant,
    finish: Option<FinishReason>,
    timings: Option<ServerTimings>,
    usage_completion: Option<u32>,
}

impl Decoded {
    fn ttft_ms(&self) -> f64 {
        ms(self.outputs[0] - self.t0)
    }
    fn e2e_ms(&self) -> f64 {
        ms(self.end - self.t0)
    }
    /// Client-side decode speed after the first token, tok/s.
    fn stream_tok_s(&self) -> f64 {
        let n = self.outputs.len();
        (n - 1) as f64 / (self.outputs[n - 1] - self.outputs[0]).as_secs_f64()
    }
    fn lines(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    fn sse(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
            .collect()
    }
}

enum Dec {
    Ollama(OllamaDecoder),
    OpenAi(OpenAiDecoder),
}

async fn stream(url: String, body: Value, ollama: bool) -> Decoded {
    let mut dec = if ollama {
        Dec::Ollama(OllamaDecoder::new())
    } else {
        Dec::OpenAi(OpenAiDecoder::new())
    };
    let t0 = Instant::now();
    let resp = client().post(url).json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    let mut d = Decoded {
        status,
        body: String::new(),
        t0,
        outputs: vec![],
        end: t0,
        finish: None,
        timings: None,
        usage_completion: None,
    };
    let mut raw = Vec::new();
    let mut events = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.unwrap();
        let now = Instant::now();
        raw.extend_from_slice(&chunk);
        if status != 200 {
            continue;
        }
        events.clear();
        match &mut dec {
            Dec::Ollama(o) => o.feed(&chunk, &mut events).unwrap(),
            Dec::OpenAi(o) => o.feed(&chunk, &mut events).unwrap(),
        }
        for ev in &events {
            match ev {
                StreamEvent::Output { .. } => d.outputs.push(now),
                StreamEvent::Finish(f) => d.finish = Some(*f),
                StreamEvent::Timings(t) => d.timings = Some(*t),
                StreamEvent::Usage {
                    completion_tokens, ..
                } => d.usage_completion = *completion_tokens,
                StreamEvent::Error(e) => panic!("error in stream: {e}"),
                _ => {}
            }
        }
    }
    d.end = Instant::now();
    d.body = String::from_utf8(raw).unwrap();
    d
}

fn generate(base: &str, prompt_words: usize, num_predict: u64) -> (String, Value) {
    (
        format!("{base}/api/generate"),
        json!({"model": "m", "prompt": words(prompt_words), "options": {"num_predict": num_predict}}),
    )
}

fn chat(base: &str, prompt_words: usize, num_predict: u64) -> (String, Value) {
    (
        format!("{base}/api/chat"),
        json!({"model": "m", "messages": [{"role": "user", "content": words(prompt_words)}],
               "options": {"num_predict": num_predict}}),
    )
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// A duration the simulator measured on its own clock against its plan: its
/// steps run to absolute deadlines, so it is never early (1 ms for rounding),
/// but a starved test process can make it late, by up to `late_ms`.
fn on_schedule(measured_ms: f64, planned_ms: f64, late_ms: f64) -> bool {
    (planned_ms - 1.0..=planned_ms + late_ms).contains(&measured_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_streams_parse_and_their_durations_add_up() {
    let (sim, base) = start(cfg(SimEngine::Ollama)).await;
    for (is_chat, (url, body)) in [
        (false, generate(&base, 100, 10)),
        (true, chat(&base, 100, 10)),
    ] {
        let d = stream(url, body, true).await;
        assert_eq!(d.status, 200);
        assert_eq!(d.outputs.len(), 10);
        assert_eq!(d.finish, Some(FinishReason::Length));
        let lines = d.lines();
        assert_eq!(lines.len(), 11);
        if is_chat {
            assert_eq!(lines[0]["message"]["role"], "assistant");
            assert_eq!(lines[0]["message"]["content"], " lorem");
        } else {
            assert_eq!(lines[0]["response"], " lorem");
        }
        assert_eq!(lines[0]["done"], false);
        assert_eq!(lines[0]["model"], "m");
        assert!(lines[0]["created_at"].as_str().unwrap().ends_with('Z'));
        let last = &lines[10];
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "length");
        assert!(
            last.get("load_duration").is_none(),
            "zero load is omitted: {last}"
        );
        let total = last["total_duration"].as_u64().unwrap();
        let prompt = last["prompt_eval_duration"].as_u64().unwrap();
        let eval = last["eval_duration"].as_u64().unwrap();
        assert_eq!(last["eval_count"], 10);
        assert_eq!(last["prompt_eval_count"], 100);
        // Alone on the engine: no slot wait, so the parts make the whole. (Under 1 ms
        // quiet; a starved test process can start the idle engine's step late, which
        // shows as a wait: 3.8 ms seen. A real slot wait is a whole answer, ~57 ms.)
        assert!(
            total >= prompt + eval && total - prompt - eval < 30_000_000,
            "{last}"
        );
        let t = d.timings.unwrap();
        assert_eq!((t.prompt_n, t.predicted_n), (Some(100), Some(10)));
        // Prefill of 100 tokens: 2 ms; ten steps of 5.5 ms decode.
        assert!(close(t.prompt_ms.unwrap(), 2.0, 0.5), "{t:?}");
        assert!(on_schedule(t.predicted_ms.unwrap(), 55.0, 30.0), "{t:?}");
        assert!(f64::from(t.total_ms) <= d.e2e_ms() + 1.0, "{t:?} {d:?}");
    }
    // "stream": false: one object with the whole answer and the same figures.
    let v: Value = client()
        .post(format!("{base}/api/chat"))
        .json(
            &json!({"model": "m", "messages": [{"role": "user", "content": "a b c"}],
                      "stream": false, "options": {"num_predict": 3}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["message"]["content"], " lorem ipsum dolor");
    assert_eq!(
        (v["done"].clone(), v["eval_count"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(v["prompt_eval_count"], 3);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_outputs_stop_at_a_simulated_eos() {
    let (sim, base) = start(SimConfig {
        eos_mean_tokens: 5.0,
        ..cfg(SimEngine::Ollama)
    })
    .await;
    let mut lens = vec![];
    for _ in 0..4 {
        let (url, body) = generate(&base, 5, 200);
        let d = stream(url, body, true).await;
        assert_eq!(d.finish, Some(FinishReason::Stop));
        assert_eq!(d.usage_completion, Some(d.outputs.len() as u32));
        assert_eq!(d.lines().last().unwrap()["done_reason"], "stop");
        lens.push(d.outputs.len());
    }
    assert!(lens.iter().all(|&n| (1..200).contains(&n)), "{lens:?}");
    // The OpenAI endpoint has no ignore_eos either.
    let d = stream(
        format!("{base}/v1/chat/completions"),
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": 200, "ignore_eos": true, "stream": true}),
        false,
    )
    .await;
    assert_eq!(d.status, 200);
    assert_eq!(d.finish, Some(FinishReason::Stop));
    assert!(d.outputs.len() < 200);
    sim.shutdown().await;
}

/// Two requests at once, each with the server's own account of its time:
/// (slot wait, time generating) in ms, ordered by slot wait. Server-side
/// figures only: on a loaded box the client may read two sockets late and in
/// either order, so receipt times cannot tell which answer went first.
async fn two_at_once(base: &str) -> [(f64, f64); 2] {
    let (u1, b1) = generate(base, 10, 20);
    let (u2, b2) = chat(base, 10, 20);
    let (a, b) = tokio::join!(stream(u1, b1, true), stream(u2, b2, true));
    let mut both = [a, b].map(|d| {
        let t = d
            .timings
            .expect("Ollama's final line carries its durations");
        let generating = t.prompt_ms.unwrap() + t.predicted_ms.unwrap();
        // total = load + slot wait + prompt_eval + eval, and load is 0 (warm).
        (
            f64::from(t.total_ms) - f64::from(t.load_ms) - generating,
            generating,
        )
    });
    both.sort_by(|x, y| x.0.total_cmp(&y.0));
    both
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_num_parallel_one_serializes_and_two_does_not() {
    let (sim, base) = start(cfg(SimEngine::Ollama)).await;
    // One slot: the second waits about as long as the first takes (20 tokens,
    // ~110 ms); the first does not wait for anything.
    let [(first_wait, first_gen), (second_wait, _)] = two_at_once(&base).await;
    assert!(
        first_wait < first_gen / 2.0,
        "first waited {first_wait:.1} ms"
    );
    assert!(
        second_wait > 0.8 * first_gen - 5.0,
        "second waited {second_wait:.1} ms for a first answer of {first_gen:.1} ms"
    );
    sim.shutdown().await;

    let (sim, base) = start(SimConfig {
        parallel: Some(2),
        ..cfg(SimEngine::Ollama)
    })
    .await;
    // Two slots: neither waits for the other.
    let [_, (second_wait, first_gen)] = two_at_once(&base).await;
    assert!(
        second_wait < first_gen / 2.0,
        "with two slots one still waited {second_wait:.1} ms ({first_gen:.1} ms answers)"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_cold_start_queues_and_refuses_the_excess() {
    let (sim, base) = start(SimConfig {
        load_ms: 300.0,
        max_queue: 2,
        ..cfg(SimEngine::Ollama)
    })
    .await;
    // Not loaded yet: /api/ps lists nothing.
    let ps = client()
        .get(format!("{base}/api/ps"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(gauges::ollama_ps(&ps), Some(vec![]));

    let all = futures_util::future::join_all((0..6).map(|_| {
        let (url, body) = generate(&base, 10, 5);
        stream(url, body, true)
    }))
    .await;
    let ok: Vec<&Decoded> = all.iter().filter(|d| d.status == 200).collect();
    let busy: Vec<&Decoded> = all.iter().filter(|d| d.status == 503).collect();
    assert_eq!((ok.len(), busy.len()), (2, 4));
    for d in &busy {
        assert_eq!(d.body, BUSY_BODY);
    }
    for d in &ok {
        let t = d.timings.unwrap();
        assert!(t.load_ms >= 250.0 && t.load_ms <= 400.0, "{t:?}");
        assert!(d.ttft_ms() >= 300.0);
        assert!(d.lines().last().unwrap()["load_duration"].as_u64().unwrap() > 0);
    }
    // Loaded now: no load, and /v1 works.
    let (url, body) = generate(&base, 10, 5);
    let d = stream(url, body, true).await;
    assert_eq!(d.timings.unwrap().load_ms, 0.0);
    sim.shutdown().await;

    // On /v1 the same refusal is wrapped OpenAI-style.
    let (sim, base) = start(SimConfig {
        load_ms: 300.0,
        max_queue: 1,
        ..cfg(SimEngine::Ollama)
    })
    .await;
    let v1 = || {
        stream(
            format!("{base}/v1/chat/completions"),
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true}),
            false,
        )
    };
    let (a, b) = tokio::join!(v1(), v1());
    let refused = if a.status == 503 { &a } else { &b };
    assert_eq!(a.status + b.status, 200 + 503);
    let v: Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(
        v,
        json!({"error": {"message": "server busy, please try again.  maximum pending requests exceeded", "type": "api_error"}})
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_ps_reports_the_vram_share_and_it_slows_decode() {
    let (sim, base) = start(SimConfig {
        vram_share: 0.5,
        model_name: "llama-sim:1b".into(),
        ..cfg(SimEngine::Ollama)
    })
    .await;
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            client()
                .get(url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        }
    };
    // As a real Ollama after a start: no model in memory until a request
    // loads one, even with the default load of no time. The restart watch
    // tells a new process by this.
    assert_eq!(gauges::ollama_ps(&get("/api/ps").await), Some(vec![]));
    let version: Value = serde_json::from_slice(&get("/api/version").await).unwrap();
    assert_eq!(version["version"], "0.0.0-tokbench-sim");
    let tags: Value = serde_json::from_slice(&get("/api/tags").await).unwrap();
    assert_eq!(tags["models"][0]["name"], "llama-sim:1b");
    // Half the model on the GPU: steps take twice as long (11 ms instead of 5.5).
    let (url, body) = generate(&base, 10, 10);
    let t = stream(url, body, true).await.timings.unwrap();
    assert!(on_schedule(t.predicted_ms.unwrap(), 110.0, 30.0), "{t:?}");
    // The first request loaded it.
    let models = gauges::ollama_ps(&get("/api/ps").await).unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].name, "llama-sim:1b");
    assert_eq!(models[0].gpu_share(), Some(0.5));
    assert!(models[0].expires_at.is_some());
    sim.shutdown().await;
}

fn llama_chat(
    base: &str,
    max_tokens: u64,
    include_usage: bool,
    ignore_eos: bool,
) -> (String, Value) {
    (
        format!("{base}/v1/chat/completions"),
        json!({"model": "m", "messages": [{"role": "user", "content": words(30)}],
               "max_tokens": max_tokens, "stream": true, "ignore_eos": ignore_eos,
               "stream_options": {"include_usage": include_usage}}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_streams_carry_timings_that_match_the_client() {
    let (sim, base) = start(SimConfig {
        parallel: Some(2),
        ..cfg(SimEngine::Llamacpp)
    })
    .await;
    // 96 tokens (about 530 ms of decode), so a 10% bound leaves room for a ~50 ms
    // stall of the client on a loaded box at either end of the stream.
    let (url, body) = llama_chat(&base, 96, false, true);
    let d = stream(url, body, false).await;
    assert_eq!(d.status, 200);
    let ev = d.sse();
    let role: Value = serde_json::from_str(&ev[0]).unwrap();
    assert_eq!(
        role["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let fin: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert_eq!(d.finish, Some(FinishReason::Length));
    let t = d.timings.unwrap();
    assert_eq!(t.predicted_n, Some(d.outputs.len() as u32));
    assert_eq!(t.predicted_n, Some(96));
    assert_eq!(t.prompt_n, Some(30));
    let server = t.decode_tok_s().unwrap();
    let client_rate = d.stream_tok_s();
    assert!(
        (server / client_rate - 1.0).abs() < 0.1,
        "server {server:.1} tok/s, client {client_rate:.1} tok/s"
    );

    // include_usage: the usage-only chunk carries usage and timings.
    let (url, body) = llama_chat(&base, 8, true, true);
    let d = stream(url, body, false).await;
    let ev = d.sse();
    let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 8);
    assert_eq!(usage["timings"]["predicted_n"], 8);
    assert_eq!(d.usage_completion, Some(8));

    // Completions.
    let d = stream(
        format!("{base}/v1/completions"),
        json!({"prompt": words(4), "max_tokens": 3, "stream": true}),
        false,
    )
    .await;
    assert_eq!(d.outputs.len(), 3);
    assert_eq!(d.timings.unwrap().predicted_n, Some(3));
    assert_eq!(d.usage_completion, Some(3));
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_honours_ignore_eos() {
    let (sim, base) = start(SimConfig {
        eos_mean_tokens: 3.0,
        ..cfg(SimEngine::Llamacpp)
    })
    .await;
    let (url, body) = llama_chat(&base, 40, false, true);
    let d = stream(url, body, false).await;
    assert_eq!(
        (d.outputs.len(), d.finish),
        (40, Some(FinishReason::Length))
    );
    let (url, body) = llama_chat(&base, 40, false, false);
    let d = stream(url, body, false).await;
    assert_eq!(d.finish, Some(FinishReason::Stop));
    assert!(d.outputs.len() < 40);
    assert_eq!(d.timings.unwrap().predicted_n, Some(d.outputs.len() as u32));
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_props_slots_metrics_and_tokenize() {
    let (sim, base) = start(SimConfig {
        parallel: Some(3),
        ..cfg(SimEngine::Llamacpp)
    })
    .await;
    let c = client();
    let get = |path: &str| {
        let req = c.get(format!("{base}{path}"));
        async move { req.send().await.unwrap() }
    };
    assert_eq!(get("/health").await.status(), 200);
    let props: Value = get("/props").await.json().await.unwrap();
    assert_eq!(gauges::llamacpp_total_slots(&props), Some(3));
    assert_eq!(props["build_info"], "b0-tokbench-sim");
    let idle = gauges::llamacpp_slots(&get("/slots").await.bytes().await.unwrap()).unwrap();
    assert_eq!((idle.busy, idle.total), (0, 3));

    // Five answers of 40 tokens (~0.25 s each) on three slots.
    let load = tokio::spawn({
        let base = base.clone();
        async move {
            futures_util::future::join_all((0..5).map(|_| {
                let (url, body) = llama_chat(&base, 40, false, true);
                stream(url, body, false)
            }))
            .await
        }
    });
    // Wait until all five have arrived (two deferred), polling rather than guessing
    // how long five connections take on a loaded box. The state lasts until the first
    // answers end (~250 ms after the third arrives); once they have, processing drops
    // and the state never comes back (the load ending says so at once), so a generous
    // deadline costs a passing run nothing and a loaded box's slow connects no false
    // failure.
    let deadline = Instant::now() + Duration::from_secs(5);
    let g = loop {
        let text = get("/metrics").await.text().await.unwrap();
        let g = LlamacppGauges::from_metrics(&prometheus::parse(&text)).unwrap();
        // Both: two deferred while the engine has not yet filled its third slot
        // is a passing state, not the one to check.
        let settled = g.requests_processing == Some(3.0) && g.requests_deferred == Some(2.0);
        if settled || load.is_finished() || Instant::now() > deadline {
            break g;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(g.requests_processing, Some(3.0));
    assert_eq!(g.requests_deferred, Some(2.0));
    let busy = gauges::llamacpp_slots(&get("/slots").await.bytes().await.unwrap()).unwrap();
    assert_eq!((busy.busy, busy.total), (3, 3));
    let done = load.await.unwrap();
    assert!(done.iter().all(|d| d.outputs.len() == 40));
    let text = get("/metrics").await.text().await.unwrap();
    let g = LlamacppGauges::from_metrics(&prometheus::parse(&text)).unwrap();
    assert_eq!(g.tokens_predicted_total, Some(200.0));
    assert_eq!(g.prompt_tokens_total, Some(150.0));
    assert_eq!(g.requests_processing, Some(0.0));

    let tokens: Value = c
        .post(format!("{base}/tokenize"))
        .json(&json!({"content": "one two three"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tokens["tokens"].as_array().unwrap().len(), 3);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_closes_the_connection_after_a_streamed_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (sim, _) = start(cfg(SimEngine::Llamacpp)).await;
    let body =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true})
            .to_string();
    let mut tcp = tokio::net::TcpStream::connect(sim.addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    // The whole answer comes, then the server closes (EOF), though HTTP/1.1 and no
    // `connection: close` said it would keep the connection.
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
        .await
        .expect("the server kept the connection open")
        .unwrap();
    let text = String::from_utf8(got).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert!(text.contains("data: [DONE]\n\n"), "{text}");
    assert!(
        text.ends_with("0\r\n\r\n"),
        "the chunked body is complete: {text}"
    );

    // Other answers keep the connection: two /health on one connection.
    let mut tcp = tokio::net::TcpStream::connect(sim.addr).await.unwrap();
    for _ in 0..2 {
        tcp.write_all(b"GET /health HTTP/1.1\r\nhost: sim\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0 && buf.starts_with(b"HTTP/1.1 200"));
    }
    sim.shutdown().await;
}

// --- vLLM: prefix cache and KV policy ---------------------------------------------

/// A counter from the simulator's `/metrics` (vLLM names), 0 when absent.
async fn vllm_counter(base: &str, name: &str) -> f64 {
    let text = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A streamed chat request; returns (TTFT ms, output chunks).
async fn vllm_chat(base: &str, prompt: &str, max_tokens: u64) -> (f64, usize) {
    let t0 = Instant::now();
    let resp = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({
            "model": "sim",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": true,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut first = None;
    let mut chunks = 0;
    while let Some(b) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(&b.unwrap()));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            if event.contains("\"content\":\" ") {
                first.get_or_insert_with(Instant::now);
                chunks += 1;
            }
        }
    }
    (ms(first.expect("a token") - t0), chunks)
}

fn vllm_cfg() -> SimConfig {
    SimConfig {
        step_ms: 2.0,
        step_ms_per_seq: 0.0,
        // 64 prompt words prefill in 64 ms.
        prefill_ms_per_1k: 1000.0,
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn vllm_prefix_cache_hits_a_shared_prefix_and_skips_its_prefill() {
    let (sim, base) = start(vllm_cfg()).await;
    let shared = words(64);
    let (ttft_a, _) = vllm_chat(&base, &format!("{shared} first"), 4).await;
    let (ttft_b, n) = vllm_chat(&base, &format!("{shared} second"), 4).await;
    assert_eq!(n, 4);
    let queries = vllm_counter(&base, "vllm:prefix_cache_queries_total").await;
    let hits = vllm_counter(&base, "vllm:prefix_cache_hits_total").await;
    assert_eq!(queries, 130.0);
    // The second prompt's four whole 16-word blocks.
    assert_eq!(hits, 64.0);
    // ~66 ms without the cache, ~3 ms with it.
    assert!(ttft_a > 50.0, "first TTFT {ttft_a:.1} ms");
    assert!(
        ttft_b < ttft_a / 2.0,
        "cached TTFT {ttft_b:.1} ms vs {ttft_a:.1} ms"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn vllm_prefix_cache_never_hits_unique_prompts() {
    let (sim, base) = start(vllm_cfg()).await;
    for i in 0..4 {
        // Unique from the first word, as tokbench's random prompts are.
        let prompt = format!("u{i} {}", words(40));
        vllm_chat(&base, &prompt, 2).await;
    }
    assert_eq!(
        vllm_counter(&base, "vllm:prefix_cache_queries_total").await,
        164.0
    );
    assert_eq!(
        vllm_counter(&base, "vllm:prefix_cache_hits_total").await,
        0.0
    );
    sim.shutdown().await;
}

async fn kv_pressure(policy: tokbench::sim::KvPolicy) -> (f64, Vec<usize>) {
    let (sim, base) = start(SimConfig {
        step_ms: 1.0,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k: 0.0,
        // Each request books up to 10 + 40 = 50: four at once need twice the budget.
        kv_tokens: 100,
        kv_policy: policy,
        ..SimConfig::default()
    })
    .await;
    let reqs = (0..4).map(|i| {
        let base = base.clone();
        async move { vllm_chat(&base, &format!("p{i} {}", words(9)), 40).await.1 }
    });
    let counts = futures_util::future::join_all(reqs).await;
    let preemptions = vllm_counter(&base, "vllm:num_preemptions_total").await;
    sim.shutdown().await;
    (preemptions, counts)
}

#[tokio::test]
async fn vllm_kv_grow_preempts_and_every_request_still_completes() {
    use tokbench::sim::KvPolicy;
    let (preemptions, counts) = kv_pressure(KvPolicy::Grow).await;
    assert!(preemptions > 0.0, "no preemption");
    assert_eq!(counts, vec![40; 4]);
    let (preemptions, counts) = kv_pressure(KvPolicy::Reserve).await;
    assert_eq!(preemptions, 0.0);
    assert_eq!(counts, vec![40; 4]);
}

// --- The engine diagnoses, from the simulator's own counters, through the binary ----

/// Run a sweep with the real binary against `cfg`; returns summary.json's diagnoses
/// (id -> evidence).
async fn sweep_diagnoses(
    name: &str,
    cfg: SimConfig,
    extra: &[&str],
) -> serde_json::Map<String, Value> {
    let summary = sweep_summary(name, cfg, extra).await;
    summary["diagnoses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| Some((d["id"].as_str()?.to_owned(), d["evidence"].clone())))
        .collect()
}

/// A headless sweep of the simulator with `extra` flags: its summary.
async fn sweep_summary(name: &str, cfg: SimConfig, extra: &[&str]) -> Value {
    let (sim, base) = start(cfg).await;
    let dir = std::env::temp_dir().join(format!("tokbench-simdiag-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args: Vec<String> = [
        "sweep",
        "--base-url",
        &base,
        "--no-tui",
        "--seed",
        "7",
        "--warmup",
        "0",
        "--probe-interval",
        "0.1",
        "--result-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::bin())
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("tokbench runs")
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_full_is_diagnosed_at_the_first_level_that_preempts_and_no_prefix_cache() {
    let cfg = SimConfig {
        step_ms: 2.0,
        step_ms_per_seq: 0.0,
        // Two streams of 32 + 64 fit; sixteen do not.
        kv_tokens: 600,
        kv_policy: tokbench::sim::KvPolicy::Grow,
        ..SimConfig::default()
    };
    let extra = [
        "--concurrency",
        "2,16",
        "--num-prompts",
        "96",
        "--random-input-len",
        "32",
        "--random-output-len",
        "64",
    ];
    let d = sweep_diagnoses("kvfull", cfg, &extra).await;
    let kv = d
        .get("kv_cache_full")
        .unwrap_or_else(|| panic!("no kv_cache_full in {d:?}"));
    assert_eq!(kv["concurrency"].as_f64(), Some(16.0), "{kv}");
    assert!(kv["preemptions"].as_f64().unwrap_or(0.0) > 0.0, "{kv}");
    assert!(
        !d.contains_key("prefix_cache"),
        "normal prompts raised {d:?}"
    );
}

/// `--prefix-len 64` before 16-token prompts: four fifths of every prompt
/// is the same text, on purpose, and the cache answers it. That is the
/// workload the user asked for, not prompts that repeat by mistake: no
/// prefix-cache note, and no seed line for the seed the run was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_shared_prefix_is_the_workload_not_a_flaw() {
    let cfg = SimConfig {
        step_ms: 2.0,
        step_ms_per_seq: 0.0,
        ..SimConfig::default()
    };
    let extra = [
        "--concurrency",
        "2",
        "--num-prompts",
        "16",
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--prefix-len",
        "64",
    ];
    let summary = sweep_summary("prefix", cfg, &extra).await;
    let hit = summary["levels"][0]["prefix_cache_hit_rate"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(hit > 0.5, "the cache answered the prefix: {hit}");
    let ids: Vec<&str> = summary["diagnoses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["id"].as_str())
        .collect();
    for id in ["prefix_cache", "seed_repeat", "kv_cache_full"] {
        assert!(!ids.contains(&id), "{id} in {ids:?}");
    }
}
