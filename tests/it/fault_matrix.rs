//! The fault matrix: full short sweeps with the real binary against a raw-TCP
//! fault server that writes exact bytes (status line, headers, chunked or
//! close-delimited SSE), one fault per request. Every fault must end as a
//! request counted in its error class, the sweep must go on to its next level,
//! and every result file (level files, `summary.json`, `requests.jsonl`) must
//! be written.
//!
//! Faults hit every other request (the others are answered normally), so no
//! sweep here is one where every request fails; that case has its own test
//! (the run stops early with a clear message).
//!
//! Timeouts are short (`--stall-timeout 0.3`), so the whole file runs in a few
//! seconds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};

/// Tokens every request asks for (`--random-output-len`).
const OUTPUT_LEN: u32 = 4;
/// Longest a fault server holds a connection the client forgot.
const HOLD_MAX: Duration = Duration::from_secs(10);
/// Longest one sweep may take before the test kills it and fails.
const SWEEP_DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// The fault server.

/// What the server does with one `POST /v1/chat/completions`.
#[derive(Clone, Debug)]
enum Fault {
    /// A normal answer: role chunk, `OUTPUT_LEN` tokens, `finish_reason`,
    /// usage, `[DONE]`.
    Ok,
    /// A normal answer whose headers come after this delay.
    SlowHeaders(Duration),
    /// The headers at once, then the body after this delay: a request that
    /// waits for a slot after its server answered the head.
    SlowFirstBytes(Duration),
    /// The status line at once, then each header line after this delay.
    TrickleHeaders(Duration),
    /// `finish_reason` and usage, but no `[DONE]`.
    NoDone,
    /// Two tokens, then a clean end of the chunked body: no `finish_reason`, no `[DONE]`.
    Truncated,
    /// Close-delimited body (no length, not chunked): two tokens, then FIN.
    TruncatedEof,
    /// Two tokens, then FIN in the middle of the chunked body (no last chunk).
    CutChunked,
    /// Two tokens, then RST (SO_LINGER 0 and close).
    Reset,
    /// Headers and one token, then nothing until the client hangs up.
    Stall,
    /// Headers, then an SSE comment every 100 ms: never stalled, never done.
    Trickle,
    /// Reads the request and never answers.
    Silent,
    /// A normal stream with these raw bytes put in after the first token.
    Inject(Vec<u8>),
    /// One event whose content is this many bytes, then a normal end.
    HugeContent(usize),
    /// One `data:` line that never ends, 1 MiB at a time, until the client
    /// hangs up (at most `ENDLESS_CAP`).
    EndlessLine,
    /// A non-2xx answer.
    Http {
        status: u16,
        body: &'static str,
        retry_after: Option<u32>,
    },
    /// A 500 that promises a body it never finishes.
    HttpHangingBody,
    /// "Kill" the server: stop listening (connections are refused) and close
    /// every other connection, wait this long, listen again on the same port,
    /// then answer this request normally (it stands in for a client still
    /// busy when the server comes back, which keeps the sweep in its level).
    Outage(Duration),
}

/// The most an endless line writes before giving up on the client.
const ENDLESS_CAP: u64 = 256 << 20;

type Plan = dyn Fn(usize) -> Fault + Send + Sync;

struct Shared {
    addr: SocketAddr,
    plan: Box<Plan>,
    /// Chat requests received so far (the plan's index).
    chat_requests: AtomicUsize,
    /// Bytes of the longest endless line written.
    endless_written: AtomicU64,
    /// Stop signal and task of the accept loop, while listening.
    accept: Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
    /// Every connection's task, so an outage can kill them.
    connections: Mutex<Vec<AbortHandle>>,
}

struct FaultServer {
    shared: Arc<Shared>,
}

impl FaultServer {
    /// Listen on 127.0.0.1 (a free port); `plan` picks the fault of the n-th
    /// chat request (0-based, in arrival order).
    async fn start(plan: impl Fn(usize) -> Fault + Send + Sync + 'static) -> FaultServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let shared = Arc::new(Shared {
            addr: listener.local_addr().expect("addr"),
            plan: Box::new(plan),
            chat_requests: AtomicUsize::new(0),
            endless_written: AtomicU64::new(0),
            accept: Mutex::new(None),
            connections: Mutex::new(Vec::new()),
        });
        start_accepting(&shared, listener);
        FaultServer { shared }
    }

    fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    fn chat_requests(&self) -> usize {
        self.shared.chat_requests.load(Ordering::SeqCst)
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        if let Some((stop, _)) = self.shared.accept.lock().unwrap().take() {
            let _ = stop.send(());
        }
    }
}

fn start_accepting(shared: &Arc<Shared>, listener: TcpListener) {
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let s = shared.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => break,
                accepted = listener.accept() => {
                    if let Ok((socket, _)) = accepted {
                        let task = tokio::spawn(serve(s.clone(), socket));
                        s.connections.lock().unwrap().push(task.abort_handle());
                    }
                }
            }
        }
        // The listener drops here: from now on connections are refused.
    });
    *shared.accept.lock().unwrap() = Some((stop_tx, task));
}

/// Stop listening and close every other connection (what a killed server
/// does), wait `gap`, listen again on the same address.
async fn outage(shared: &Arc<Shared>, gap: Duration) {
    let running = shared.accept.lock().unwrap().take();
    if let Some((stop, task)) = running {
        let _ = stop.send(());
        let _ = task.await;
    }
    let me = tokio::task::id();
    for connection in shared.connections.lock().unwrap().drain(..) {
        if connection.id() != me {
            connection.abort();
        }
    }
    tokio::time::sleep(gap).await;
    // Tokio (mio) sets SO_REUSEADDR, so the port is free again at once.
    let listener = TcpListener::bind(shared.addr).await.expect("rebind");
    start_accepting(shared, listener);
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

async fn read_request(socket: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Some(Request { method, path, body })
}

/// How an answer is framed: OpenAI SSE (`/v1/chat/completions`) or Ollama
/// NDJSON (`/api/generate`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    Sse,
    Ndjson,
}

impl Wire {
    fn content_type(self) -> &'static str {
        match self {
            Wire::Sse => "text/event-stream",
            Wire::Ndjson => "application/x-ndjson",
        }
    }

    /// Status line and headers of a chunked 200.
    fn head(self) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
            self.content_type()
        )
    }

    /// What comes before the first token (the role-only chunk), if anything.
    fn opening(self) -> Vec<u8> {
        match self {
            Wire::Sse => event(
                r#"{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            ),
            Wire::Ndjson => Vec::new(),
        }
    }

    /// The start of a token-carrying object, up to the text's opening quote.
    fn token_prefix(self) -> &'static [u8] {
        match self {
            Wire::Sse => {
                br#"data: {"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":""#
            }
            Wire::Ndjson => br#"{"model":"fault","response":""#,
        }
    }

    /// The end of a token-carrying object, from the text's closing quote.
    fn token_suffix(self) -> &'static [u8] {
        match self {
            Wire::Sse => b"\"}}]}\n\n",
            Wire::Ndjson => b"\",\"done\":false}\n",
        }
    }

    fn token_with(self, text: &[u8]) -> Vec<u8> {
        let mut out = self.token_prefix().to_vec();
        out.extend_from_slice(text);
        out.extend_from_slice(self.token_suffix());
        out
    }

    fn token(self) -> Vec<u8> {
        self.token_with(b"tok ")
    }

    /// The end of a normal answer: finish reason and counts (and `[DONE]`).
    fn closing(self, tokens: u32, done: bool) -> Vec<Vec<u8>> {
        match self {
            Wire::Sse => {
                let mut out = vec![
                    event(
                        r#"{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
                    ),
                    event(&format!(
                        r#"{{"id":"f","object":"chat.completion.chunk","choices":[],"usage":{{"prompt_tokens":16,"completion_tokens":{tokens},"total_tokens":{}}}}}"#,
                        16 + tokens
                    )),
                ];
                if done {
                    out.push(b"data: [DONE]\n\n".to_vec());
                }
                out
            }
            Wire::Ndjson => vec![format!(
                "{{\"model\":\"fault\",\"response\":\"\",\"done\":true,\"done_reason\":\"length\",\"prompt_eval_count\":16,\"eval_count\":{tokens}}}\n"
            )
            .into_bytes()],
        }
    }

    /// A whole normal body after the headers: `first` as the first token
    /// (then `tokens - 1` plain ones), the closing, the last chunk.
    fn body_with(self, first: Vec<u8>, tokens: u32, done: bool) -> Vec<u8> {
        let mut pieces = vec![self.opening(), first];
        pieces.extend((1..tokens).map(|_| self.token()));
        pieces.extend(self.closing(tokens, done));
        let mut out = chunks(&pieces);
        out.extend_from_slice(LAST_CHUNK);
        out
    }

    fn body(self, tokens: u32, done: bool) -> Vec<u8> {
        self.body_with(self.token(), tokens, done)
    }

    /// Headers, the opening and two tokens, as chunks: a stream under way.
    fn two_tokens(self) -> Vec<u8> {
        let mut out = self.head().into_bytes();
        out.extend(chunks(&[self.opening(), self.token(), self.token()]));
        out
    }
}

/// One chunk of a chunked body.
fn chunk(data: &[u8]) -> Vec<u8> {
    assert!(!data.is_empty(), "an empty chunk ends the body");
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// The non-empty pieces, each as one chunk.
fn chunks(pieces: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces.iter().filter(|p| !p.is_empty()) {
        out.extend_from_slice(&chunk(p));
    }
    out
}

fn event(json: &str) -> Vec<u8> {
    format!("data: {json}\n\n").into_bytes()
}

const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Wait until the client hangs up (or `HOLD_MAX`), writing nothing.
async fn hold(socket: &mut TcpStream) {
    let mut buf = [0u8; 256];
    let _ = tokio::time::timeout(HOLD_MAX, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
}

async fn answer_simple(socket: &mut TcpStream, status: &str, body: &str) {
    let text = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(text.as_bytes()).await;
    let _ = socket.shutdown().await;
}

async fn serve(shared: Arc<Shared>, mut socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let wire = match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/v1/models") => {
            return answer_simple(
                &mut socket,
                "200 OK",
                r#"{"object":"list","data":[{"id":"fault","object":"model"}]}"#,
            )
            .await
        }
        ("POST", "/v1/chat/completions") => Wire::Sse,
        ("POST", "/api/generate") => Wire::Ndjson,
        _ => return answer_simple(&mut socket, "404 Not Found", r#"{"detail":"Not Found"}"#).await,
    };
    let index = shared.chat_requests.fetch_add(1, Ordering::SeqCst);
    let tokens = serde_json::from_slice::<Value>(&request.body)
        .ok()
        .and_then(|v| {
            v["max_tokens"]
                .as_u64()
                .or_else(|| v["options"]["num_predict"].as_u64())
        })
        .map_or(OUTPUT_LEN, |n| n as u32);
    let fault = (shared.plan)(index);
    // Write errors mean the client hung up: nothing more to do either way.
    let _ = answer(&shared, &mut socket, wire, fault, tokens).await;
}

async fn answer(
    shared: &Arc<Shared>,
    socket: &mut TcpStream,
    wire: Wire,
    fault: Fault,
    tokens: u32,
) -> std::io::Result<()> {
    match fault {
        Fault::Ok => {
            socket.write_all(wire.head().as_bytes()).await?;
            socket.write_all(&wire.body(tokens, true)).await?;
        }
        Fault::SlowHeaders(delay) => {
            tokio::time::sleep(delay).await;
            socket.write_all(wire.head().as_bytes()).await?;
            socket.write_all(&wire.body(tokens, true)).await?;
        }
        Fault::SlowFirstBytes(delay) => {
            socket.write_all(wire.head().as_bytes()).await?;
            socket.flush().await?;
            tokio::time::sleep(delay).await;
            socket.write_all(&wire.body(tokens, true)).await?;
        }
        Fault::TrickleHeaders(delay) => {
            let head = wire.head();
            let mut lines = head.split_inclusive("\r\n");
            socket.write_all(lines.next().unwrap().as_bytes()).await?;
            for line in lines {
                tokio::time::sleep(delay).await;
                socket.write_all(line.as_bytes()).await?;
            }
            socket.write_all(&wire.body(tokens, true)).await?;
        }
        Fault::NoDone => {
            socket.write_all(wire.head().as_bytes()).await?;
            socket.write_all(&wire.body(tokens, false)).await?;
        }
        Fault::Truncated => {
            let mut out = wire.two_tokens();
            out.extend_from_slice(LAST_CHUNK);
            socket.write_all(&out).await?;
        }
        Fault::TruncatedEof => {
            let mut out = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {}\r\nconnection: close\r\n\r\n",
                wire.content_type()
            )
            .into_bytes();
            out.extend(wire.opening());
            out.extend(wire.token());
            out.extend(wire.token());
            socket.write_all(&out).await?;
        }
        Fault::CutChunked => {
            socket.write_all(&wire.two_tokens()).await?;
            socket.flush().await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Fault::Reset => {
            socket.write_all(&wire.two_tokens()).await?;
            socket.flush().await?;
            // Let the tokens arrive first, so the reset is mid-stream.
            tokio::time::sleep(Duration::from_millis(20)).await;
            socket.set_zero_linger()?;
            return Ok(()); // dropped by the caller: RST
        }
        Fault::Stall => {
            let mut out = wire.head().into_bytes();
            out.extend(chunks(&[wire.opening(), wire.token()]));
            socket.write_all(&out).await?;
            hold(socket).await;
            return Ok(());
        }
        Fault::Trickle => {
            assert_eq!(wire, Wire::Sse, "NDJSON has no comments");
            let mut out = wire.head().into_bytes();
            out.extend(chunks(&[wire.opening()]));
            socket.write_all(&out).await?;
            let (mut reader, mut writer) = socket.split();
            let mut buf = [0u8; 64];
            let started = Instant::now();
            while started.elapsed() < HOLD_MAX {
                tokio::select! {
                    r = reader.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {
                        writer.write_all(&chunk(b": ping\n\n")).await?;
                    }
                }
            }
            return Ok(());
        }
        Fault::Silent => {
            hold(socket).await;
            return Ok(());
        }
        Fault::Inject(bytes) => {
            // A token, the bytes, then the rest of a normal answer.
            let mut pieces = vec![wire.opening(), wire.token(), bytes];
            pieces.extend((1..tokens).map(|_| wire.token()));
            pieces.extend(wire.closing(tokens, true));
            let mut out = wire.head().into_bytes();
            out.extend(chunks(&pieces));
            out.extend_from_slice(LAST_CHUNK);
            socket.write_all(&out).await?;
        }
        Fault::HugeContent(len) => {
            let mut out = wire.head().into_bytes();
            // One chunk of the chunked body carries the whole object.
            out.extend(wire.body_with(wire.token_with(&vec![b'a'; len]), tokens, true));
            socket.write_all(&out).await?;
        }
        Fault::EndlessLine => {
            let mut out = wire.head().into_bytes();
            out.extend(chunks(&[wire.opening(), wire.token_prefix().to_vec()]));
            socket.write_all(&out).await?;
            let piece = chunk(&vec![b'a'; 1 << 20]);
            let mut written = 0u64;
            let result = async {
                while written < ENDLESS_CAP {
                    socket.write_all(&piece).await?;
                    written += piece.len() as u64;
                }
                Ok::<(), std::io::Error>(())
            }
            .await;
            shared.endless_written.fetch_max(written, Ordering::SeqCst);
            return result;
        }
        Fault::Http {
            status,
            body,
            retry_after,
        } => {
            let reason = match status {
                429 => "Too Many Requests",
                503 => "Service Unavailable",
                _ => "Internal Server Error",
            };
            let mut text = format!(
                "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            if let Some(s) = retry_after {
                text.push_str(&format!("retry-after: {s}\r\n"));
            }
            text.push_str("\r\n");
            text.push_str(body);
            socket.write_all(text.as_bytes()).await?;
        }
        Fault::HttpHangingBody => {
            socket
                .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n{\"error\":")
                .await?;
            hold(socket).await;
            return Ok(());
        }
        Fault::Outage(gap) => {
            outage(shared, gap).await;
            socket.write_all(wire.head().as_bytes()).await?;
            socket.write_all(&wire.body(tokens, true)).await?;
        }
    }
    socket.flush().await?;
    socket.shutdown().await
}

// ---------------------------------------------------------------------------
// Running the binary.

struct SweepRun {
    name: String,
    /// The scratch folder: logs, and the result folder `dir` inside it.
    scratch: PathBuf,
    dir: PathBuf,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl SweepRun {
    fn log(&self) -> String {
        format!(
            "{}: exit {:?} after {:.2?}\nstdout:\n{}\nstderr:\n{}",
            self.name, self.code, self.elapsed, self.stdout, self.stderr
        )
    }

    fn level(&self, concurrency: u32) -> Value {
        read_json(
            &self.dir.join(format!("sweep-c{concurrency}.json")),
            &self.log(),
        )
    }

    fn summary(&self) -> Value {
        read_json(&self.dir.join("summary.json"), &self.log())
    }

    fn requests(&self) -> Vec<Value> {
        let path = self.dir.join("requests.jsonl");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}\n{}", path.display(), self.log()));
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The error classes of the requests with `class` (or all failed ones).
    fn messages_of(&self, class: &str) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r["error"] == class)
            .map(|r| r["error_message"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

impl Drop for SweepRun {
    fn drop(&mut self) {
        // FAULT_MATRIX_KEEP=1 keeps every run's results to look at.
        if !std::thread::panicking() && std::env::var_os("FAULT_MATRIX_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

fn read_json(path: &Path, log: &str) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}\n{log}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}\n{log}", path.display()))
}

/// Run `tokbench sweep --no-tui` against `url` with `levels` of `num_prompts`
/// each, plus `extra` flags; kill it (and fail) past `SWEEP_DEADLINE`.
async fn sweep(name: &str, url: &str, levels: &str, num_prompts: u32, extra: &[&str]) -> SweepRun {
    let dir = std::env::temp_dir().join(format!("tokbench-matrix-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let results = dir.join("results");
    let mut args: Vec<String> = [
        "sweep",
        "--no-tui",
        "--no-probe",
        "--base-url",
        url,
        "--concurrency",
        levels,
        "--num-prompts",
        &num_prompts.to_string(),
        "--warmup",
        "0",
        "--random-input-len",
        "16",
        "--random-output-len",
        &OUTPUT_LEN.to_string(),
        "--seed",
        "7",
        "--result-dir",
        &results.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Short timeouts unless the case names its own.
    for (flag, default) in [("--stall-timeout", "0.3"), ("--request-timeout", "5")] {
        if !extra.contains(&flag) {
            args.extend([flag.to_string(), default.to_string()]);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let name = name.to_string();
    let log_dir = dir.clone();
    tokio::task::spawn_blocking(move || {
        let out = std::fs::File::create(log_dir.join("stdout")).expect("stdout file");
        let err = std::fs::File::create(log_dir.join("stderr")).expect("stderr file");
        let started = Instant::now();
        let mut child = Command::new(crate::support::bin())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("tokbench starts");
        let code = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status.code();
            }
            if started.elapsed() > SWEEP_DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = started.elapsed();
        let run = SweepRun {
            name,
            scratch: log_dir.clone(),
            dir: results,
            code,
            stdout: std::fs::read_to_string(log_dir.join("stdout")).unwrap_or_default(),
            stderr: std::fs::read_to_string(log_dir.join("stderr")).unwrap_or_default(),
            elapsed,
        };
        assert!(
            elapsed < SWEEP_DEADLINE,
            "hung: killed after {elapsed:.1?}\n{}",
            run.log()
        );
        run
    })
    .await
    .expect("join")
}

/// Exit 0; a level file per level with every request accounted for; a
/// summary listing the levels; one `requests.jsonl` line per request. Returns
/// the error counts of each level.
fn survived(run: &SweepRun, levels: &[u32], num_prompts: u64) -> Vec<BTreeMap<String, u64>> {
    let log = run.log();
    assert_eq!(run.code, Some(0), "{log}");
    let summary = run.summary();
    let saved: Vec<u64> = summary["levels"]
        .as_array()
        .unwrap_or_else(|| panic!("summary has no levels\n{log}"))
        .iter()
        .map(|l| l["max_concurrency"].as_u64().unwrap_or(0))
        .collect();
    let wanted: Vec<u64> = levels.iter().map(|&c| u64::from(c)).collect();
    assert_eq!(saved, wanted, "summary levels\n{log}");
    let requests = run.requests();
    assert_eq!(
        requests.len() as u64,
        num_prompts * levels.len() as u64,
        "requests.jsonl lines\n{log}"
    );
    for r in &requests {
        let message = r["error_message"].as_str().unwrap_or("");
        assert!(
            message.len() <= 300 && !message.contains('\n'),
            "error message is not one short line: {message:?}"
        );
    }
    levels
        .iter()
        .map(|&c| {
            let level = run.level(c);
            let completed = level["completed"].as_u64().unwrap_or(0);
            let failed = level["failed"].as_u64().unwrap_or(0);
            assert_eq!(
                completed + failed,
                num_prompts,
                "c{c}: completed {completed} + failed {failed}\n{level}\n{log}"
            );
            assert_eq!(level["partial"], false, "c{c}\n{log}");
            let errors: BTreeMap<String, u64> = level["errors"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(
                errors.values().sum::<u64>(),
                failed,
                "c{c}: errors {errors:?} vs failed {failed}\n{log}"
            );
            errors
        })
        .collect()
}

const LEVELS: [u32; 2] = [2, 4];
/// Flags for the cases that move megabytes: on a busy machine a debug build
/// can take longer than 0.3 s between two reads of them, which is no stall.
const BIG: &[&str] = &["--stall-timeout", "5"];
const PROMPTS: u32 = 6;

/// Every other request gets `fault`, the rest are answered normally.
fn alternate(fault: Fault) -> impl Fn(usize) -> Fault + Send + Sync + 'static {
    move |i| if i % 2 == 1 { fault.clone() } else { Fault::Ok }
}

/// A sweep at `LEVELS` where every other request meets `fault`: it survives,
/// and exactly those requests land in `class`. Returns the run for more checks.
async fn one_class(name: &str, fault: Fault, class: &str, extra: &[&str]) -> SweepRun {
    let server = FaultServer::start(alternate(fault)).await;
    let run = sweep(name, &server.url(), "2,4", PROMPTS, extra).await;
    let per_level = survived(&run, &LEVELS, u64::from(PROMPTS));
    for (c, errors) in LEVELS.iter().zip(&per_level) {
        let expected = BTreeMap::from([(class.to_string(), u64::from(PROMPTS) / 2)]);
        assert_eq!(errors, &expected, "c{c}\n{}", run.log());
    }
    assert_eq!(
        server.chat_requests(),
        (PROMPTS as usize) * LEVELS.len(),
        "a request was sent twice\n{}",
        run.log()
    );
    run
}

/// A sweep where every other request meets `fault` and still succeeds.
async fn all_ok(name: &str, fault: Fault, extra: &[&str]) -> SweepRun {
    let server = FaultServer::start(alternate(fault)).await;
    let run = sweep(name, &server.url(), "2,4", PROMPTS, extra).await;
    let per_level = survived(&run, &LEVELS, u64::from(PROMPTS));
    for (c, errors) in LEVELS.iter().zip(&per_level) {
        assert!(errors.is_empty(), "c{c}: {errors:?}\n{}", run.log());
    }
    run
}

fn assert_messages(run: &SweepRun, class: &str, needle: &str) {
    let messages = run.messages_of(class);
    assert!(
        !messages.is_empty(),
        "no {class} in requests.jsonl\n{}",
        run.log()
    );
    for m in &messages {
        assert!(
            m.to_lowercase().contains(&needle.to_lowercase()),
            "{class} message {m:?} does not say {needle:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The matrix.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_mid_sweep_then_the_server_comes_back() {
    // The second request takes the server down while the first one waits
    // for its headers: that one's connection closes before any byte (sent
    // once more, refused), and the rest of level 1 is refused at once. The
    // server listens again after 200 ms; the request that took it down then
    // gets its answer and level 2 runs on the restarted server.
    let server = FaultServer::start(|i| match i {
        0 => Fault::SlowHeaders(Duration::from_millis(30)),
        1 => Fault::Outage(Duration::from_millis(200)),
        _ => Fault::Ok,
    })
    .await;
    let run = sweep("refused", &server.url(), "2,4", PROMPTS, &[]).await;
    let per_level = survived(&run, &LEVELS, u64::from(PROMPTS));
    let refused = per_level[0].get("connect_refused").copied().unwrap_or(0);
    assert!(
        refused >= 1,
        "no connect_refused in level 1: {per_level:?}\n{}",
        run.log()
    );
    assert_eq!(
        per_level[0].keys().collect::<Vec<_>>(),
        ["connect_refused"],
        "{}",
        run.log()
    );
    assert!(
        per_level[1].is_empty(),
        "level 2 after the restart: {per_level:?}"
    );
    assert_messages(&run, "connect_refused", "connection refused");
    for m in run.messages_of("connect_refused") {
        assert_eq!(m.to_lowercase().matches("refused").count(), 1, "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_reset_mid_stream() {
    let run = one_class("reset", Fault::Reset, "connection_closed", &[]).await;
    assert_messages(&run, "connection_closed", "connection closed");
    // The tokens that came before the reset are not lost from the record.
    for r in run
        .requests()
        .iter()
        .filter(|r| r["error"] == "connection_closed")
    {
        assert_eq!(r["chunks"], 2, "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_closed_inside_a_chunked_body() {
    let run = one_class("cut", Fault::CutChunked, "connection_closed", &[]).await;
    assert_messages(&run, "connection_closed", "connection closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_stalled_past_the_stall_timeout() {
    let run = one_class("stall", Fault::Stall, "stalled", &[]).await;
    assert_messages(&run, "stalled", "--stall-timeout");
    for r in run.requests().iter().filter(|r| r["error"] == "stalled") {
        // Given up on after ~0.3 s, not the 5 s request timeout.
        let took = r["end_s"].as_f64().unwrap() - r["start_s"].as_f64().unwrap();
        assert!((0.25..2.0).contains(&took), "stalled after {took} s: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_stream_past_a_shorter_request_timeout() {
    // The request timeout comes first: the class is timeout, not stalled.
    let run = one_class(
        "stall-timeout",
        Fault::Stall,
        "timeout",
        &["--stall-timeout", "5", "--request-timeout", "0.4"],
    )
    .await;
    assert_messages(&run, "timeout", "--request-timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_comments_forever_hit_the_request_timeout() {
    // Comments every 100 ms keep the stall timer from firing; only the whole
    // request's limit ends it.
    let run = one_class(
        "trickle",
        Fault::Trickle,
        "timeout",
        &["--request-timeout", "0.6"],
    )
    .await;
    assert_messages(&run, "timeout", "--request-timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_in_a_chunk() {
    let bad = event(r#"{"choices":[{"index":0,"delta":{"content":"x"}}]"#);
    let run = one_class("json", Fault::Inject(bad), "malformed_stream", &[]).await;
    assert_messages(&run, "malformed_stream", "not valid JSON");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_chunk() {
    let mut bad = br#"data: {"choices":[{"index":0,"delta":{"content":""#.to_vec();
    bad.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    bad.extend_from_slice(b"\"}}]}\n\n");
    let run = one_class("utf8", Fault::Inject(bad), "malformed_stream", &[]).await;
    assert_messages(&run, "malformed_stream", "UTF-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_line_of_ten_megabytes() {
    // Under the 16 MiB event cap: read whole, then refused as not JSON, with
    // a message that quotes only a snippet.
    let mut bad = b"data: ".to_vec();
    bad.resize(10 << 20, b'#');
    bad.extend_from_slice(b"\n\n");
    let run = one_class("garbage", Fault::Inject(bad), "malformed_stream", BIG).await;
    assert_messages(&run, "malformed_stream", "not valid JSON");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_ten_megabyte_chunk_is_an_answer() {
    let run = all_ok("huge", Fault::HugeContent(10 << 20), BIG).await;
    assert!(run
        .requests()
        .iter()
        .all(|r| r["output_tokens"] == OUTPUT_LEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_is_cut_at_the_cap_and_memory_stays_bounded() {
    let server = FaultServer::start(alternate(Fault::EndlessLine)).await;
    let run = sweep("endless", &server.url(), "2,4", PROMPTS, BIG).await;
    let per_level = survived(&run, &LEVELS, u64::from(PROMPTS));
    for errors in &per_level {
        assert_eq!(
            errors,
            &BTreeMap::from([("malformed_stream".to_string(), u64::from(PROMPTS) / 2)]),
            "{}",
            run.log()
        );
    }
    assert_messages(&run, "malformed_stream", "larger than");
    // The client hung up near the 16 MiB cap (plus socket buffers), long
    // before the server's own 256 MiB limit.
    let written = server.shared.endless_written.load(Ordering::SeqCst);
    assert!(
        written < 64 << 20,
        "the client read {written} bytes of one line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_done_and_no_finish_reason_is_truncated() {
    let run = one_class("truncated", Fault::Truncated, "truncated", &[]).await;
    assert_messages(&run, "truncated", "without a finish reason");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_delimited_body_cut_short_is_truncated() {
    // No length and no chunking: the end of the body is the connection's
    // FIN, a clean end as far as HTTP knows. The missing finish reason says
    // the answer was cut.
    let run = one_class("eof", Fault::TruncatedEof, "truncated", &[]).await;
    assert_messages(&run, "truncated", "without a finish reason");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_reason_without_done_is_ok() {
    let run = all_ok("nodone", Fault::NoDone, &[]).await;
    assert!(run
        .requests()
        .iter()
        .all(|r| r["finish_reason"] == "length"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_frame_inside_a_200_stream() {
    let frame = event(r#"{"error":{"message":"KV cache exhausted","type":"server_error"}}"#);
    let run = one_class("frame", Fault::Inject(frame), "stream_error", &[]).await;
    assert_messages(&run, "stream_error", "KV cache exhausted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_with_and_without_bodies() {
    // Odd requests cycle through six error answers; 12 requests in all, so
    // each answer comes exactly once.
    let answers = [
        (
            500,
            r#"{"error":{"message":"boom: engine crashed","type":"server_error","code":500}}"#,
            None,
        ),
        (500, "", None),
        (
            503,
            r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#,
            Some(1),
        ),
        (503, "", Some(1)),
        (
            429,
            r#"{"error":"Model is overloaded","error_type":"overloaded"}"#,
            Some(2),
        ),
        (429, "", Some(2)),
    ];
    let server = FaultServer::start(move |i| {
        if i % 2 == 0 {
            return Fault::Ok;
        }
        let (status, body, retry_after) = answers[(i / 2) % answers.len()];
        Fault::Http {
            status,
            body,
            retry_after,
        }
    })
    .await;
    let run = sweep("http", &server.url(), "2,4", PROMPTS, &[]).await;
    let per_level = survived(&run, &LEVELS, u64::from(PROMPTS));
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    for errors in &per_level {
        for (k, v) in errors {
            *total.entry(k.clone()).or_default() += v;
        }
    }
    let expected = BTreeMap::from([
        ("http_429".to_string(), 2),
        ("http_500".to_string(), 2),
        ("http_503".to_string(), 2),
    ]);
    assert_eq!(total, expected, "{}", run.log());
    let mut messages: Vec<String> = run
        .requests()
        .iter()
        .filter_map(|r| r["error_message"].as_str().map(str::to_string))
        .collect();
    messages.sort();
    assert_eq!(
        messages,
        [
            "HTTP 429",
            "HTTP 500",
            "HTTP 503",
            "Model is overloaded",
            "boom: engine crashed",
            "server busy, please try again.  maximum pending requests exceeded",
        ],
        "{}",
        run.log()
    );
    // Retry-After is not acted on (closed loop: the next request goes out at
    // once); the sweep did not wait the 1-2 s the server asked for.
    assert!(run.elapsed < Duration::from_secs(5), "{}", run.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_error_whose_body_never_ends() {
    // The status is known at the headers; reading the body for a message is
    // bounded by the stall timeout.
    let run = one_class("hang-body", Fault::HttpHangingBody, "http_500", &[]).await;
    assert_messages(&run, "http_500", "HTTP 500, error body cut short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_but_never_answered() {
    // No response byte at all: the stall timeout guards a stream once its
    // headers have come; before them only the request timeout applies.
    let run = one_class(
        "silent",
        Fault::Silent,
        "timeout",
        &["--request-timeout", "0.6"],
    )
    .await;
    assert_messages(&run, "timeout", "--request-timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_the_first_token_past_the_stall_timeout_succeeds() {
    // The head at once, then 0.6 s of silence before the body: past the
    // 0.3 s stall timeout. A request queued for a slot after its server
    // sent the head (vLLM and Ollama may) is waiting, not stalled: only
    // --request-timeout bounds it, and every request succeeds.
    all_ok(
        "slow-first-bytes",
        Fault::SlowFirstBytes(Duration::from_millis(600)),
        &["--request-timeout", "5"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_shorter_than_the_stall_timeout_succeed() {
    all_ok(
        "slow-headers",
        Fault::SlowHeaders(Duration::from_millis(150)),
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_trickling_in_past_the_stall_timeout() {
    // Five header lines 100 ms apart: the headers are done after 0.5 s, past
    // the 0.3 s stall timeout. Waiting for headers is waiting for the server
    // (a queue, a model load), bounded by --request-timeout only, so these
    // succeed (see accepted_but_never_answered).
    all_ok(
        "trickle-headers",
        Fault::TrickleHeaders(Duration::from_millis(100)),
        &["--request-timeout", "2"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_trickling_in_past_the_request_timeout() {
    let run = one_class(
        "trickle-headers-timeout",
        Fault::TrickleHeaders(Duration::from_millis(100)),
        "timeout",
        &["--request-timeout", "0.35"],
    )
    .await;
    assert_messages(&run, "timeout", "--request-timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_ndjson_faults_land_in_the_same_classes() {
    let ollama = ["--backend", "ollama-generate", "--stall-timeout", "0.3"];
    let ollama_big = ["--backend", "ollama-generate", "--stall-timeout", "5"];
    let mut bad_utf8 = br#"{"model":"fault","response":""#.to_vec();
    bad_utf8.extend_from_slice(&[0xff, 0xfe]);
    bad_utf8.extend_from_slice(b"\",\"done\":false}\n");
    let cases = [
        ("nd-truncated", Fault::Truncated, "truncated"),
        ("nd-reset", Fault::Reset, "connection_closed"),
        ("nd-stall", Fault::Stall, "stalled"),
        (
            "nd-json",
            Fault::Inject(b"{\"model\":\"fault\",\"response\":\"x\"\n".to_vec()),
            "malformed_stream",
        ),
        ("nd-utf8", Fault::Inject(bad_utf8), "malformed_stream"),
        (
            "nd-busy",
            Fault::Http {
                status: 503,
                body: r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#,
                retry_after: None,
            },
            "http_503",
        ),
    ];
    for (name, fault, class) in cases {
        one_class(name, fault, class, &ollama).await;
    }
    one_class(
        "nd-endless",
        Fault::EndlessLine,
        "malformed_stream",
        &ollama_big,
    )
    .await;
    all_ok("nd-huge", Fault::HugeContent(10 << 20), &ollama_big).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_where_every_request_fails_stops_early() {
    let server = FaultServer::start(|_| Fault::Http {
        status: 500,
        body: r#"{"error":{"message":"boom","type":"server_error"}}"#,
        retry_after: None,
    })
    .await;
    let run = sweep("all-fail", &server.url(), "1,2,4,8", 8, &[]).await;
    let log = run.log();
    assert_eq!(run.code, Some(1), "{log}");
    assert!(run.elapsed < Duration::from_secs(5), "{log}");
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.to_lowercase().contains("every request failed"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    // What ran is saved: a file for the first level, the summary, the requests.
    let files: Vec<String> = std::fs::read_dir(&run.dir)
        .unwrap_or_else(|e| panic!("{e}\n{log}"))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().any(|f| f.starts_with("sweep-c1")),
        "{files:?}\n{log}"
    );
    assert!(
        files.iter().any(|f| f == "summary.json"),
        "{files:?}\n{log}"
    );
    assert!(
        files.iter().any(|f| f == "requests.jsonl"),
        "{files:?}\n{log}"
    );
    assert!(!run.requests().is_empty(), "{log}");
    // And it stopped early: not every level ran.
    assert!(
        !files.iter().any(|f| f.starts_with("sweep-c8")),
        "ground through every level: {files:?}\n{log}"
    );
}
