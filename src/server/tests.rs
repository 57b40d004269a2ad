//! The server process: start, ready, stop, no orphans. Each test waits for
//! a state (a group gone, a status seen), never for a fixed time.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::RwLock;

use super::*;

/// `kill_all` kills every registered group, other tests' too: its test
/// takes this for writing, every other test that starts a process for reading.
static SERIAL: RwLock<()> = RwLock::const_new(());

fn log_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tokbench-server-{}-{name}.log", std::process::id()))
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| (*s).to_owned()).collect()
}

/// A free port no other test of this binary was given: bind(0) may hand
/// out a port again once it is let go, before the first test listens on it.
fn unique_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = free_loopback_port().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

fn spec(name: &str, shell: bool, w: &[&str]) -> ServerSpec {
    ServerSpec {
        words: words(w),
        shell,
        env: Vec::new(),
        log_path: log_path(name),
        port: unique_port(),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// `kill(-pgid, 0)` fails with ESRCH.
fn gone(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Wait (bounded, for a failing test to end) until `done`.
async fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[test]
fn split_words_follows_shell_rules() {
    assert_eq!(
        split_words(r#"vllm serve "my model" --x 'a b' c\ d"#).unwrap(),
        words(&["vllm", "serve", "my model", "--x", "a b", "c d"])
    );
    // A grid value filled in stays one word: no shell runs it.
    assert_eq!(
        split_words("srv --v a;b --w $(x) --z 'p q;$(rm -rf x)'").unwrap(),
        words(&["srv", "--v", "a;b", "--w", "$(x)", "--z", "p q;$(rm -rf x)"])
    );
    let e = split_words("srv --name 'unclosed").unwrap_err().to_string();
    assert!(e.contains("quote is not closed"), "{e}");
    assert!(!e.contains('\n') && !e.contains("unclosed"), "{e}");
}

#[test]
fn engine_hint_reads_the_program() {
    let cases: &[(&[&str], EngineHint)] = &[
        (&["vllm", "serve", "m"], EngineHint::Vllm),
        (&["/opt/venv/bin/vllm", "serve", "m"], EngineHint::Vllm),
        (
            &["python", "-m", "vllm.entrypoints.openai.api_server"],
            EngineHint::Vllm,
        ),
        (
            &["python3", "-m", "sglang.launch_server", "--model-path", "m"],
            EngineHint::Sglang,
        ),
        (&["sglang", "serve"], EngineHint::Sglang),
        (
            &["./build/bin/llama-server", "-m", "x.gguf"],
            EngineHint::Llamacpp,
        ),
        (&["python", "-m", "llama_cpp.server"], EngineHint::Llamacpp),
        (
            &["text-generation-launcher", "--model-id", "m"],
            EngineHint::Tgi,
        ),
        (&["ollama", "serve"], EngineHint::Ollama),
        (&["env", "A=1", "ollama", "serve"], EngineHint::Ollama),
        (&["tokbench", "sim", "--port", "9"], EngineHint::Vllm),
        (
            &["./target/debug/tokbench", "sim", "--engine", "ollama"],
            EngineHint::Ollama,
        ),
        (
            &["tokbench", "sim", "--engine=llamacpp"],
            EngineHint::Llamacpp,
        ),
        (&["tokbench", "run", "--url", "x"], EngineHint::Unknown),
        (&["my-server", "--port", "1"], EngineHint::Unknown),
        (&[], EngineHint::Unknown),
        // A shell line: one word holding the whole command.
        (
            &["CUDA_VISIBLE_DEVICES=0 exec vllm serve m"],
            EngineHint::Vllm,
        ),
        (&["cd /srv && ./llama-server -c 4096"], EngineHint::Llamacpp),
    ];
    for (w, want) in cases {
        assert_eq!(EngineHint::of_words(&words(w)), *want, "{w:?}");
    }
}

#[tokio::test]
async fn start_and_stop_leave_no_process_of_the_group() {
    let _serial = SERIAL.read().await;
    let spec = spec("stop", true, &["sleep 300 & sleep 300"]);
    let p = ServerProcess::start(&spec).unwrap();
    let pgid = p.pgid;
    assert!(!gone(pgid));
    let how = p.stop(Duration::from_secs(10)).await.unwrap();
    assert!(how.starts_with("stopped by SIGTERM in "), "{how}");
    assert!(gone(pgid), "group {pgid} is left");
    assert!(spec.log_path.exists());
    assert!(!GROUPS.lock().unwrap().contains(&pgid));
}

#[tokio::test]
async fn a_server_that_ignores_sigterm_is_killed_after_the_grace() {
    let _serial = SERIAL.read().await;
    // The shell says when its trap is set, so the SIGTERM surely finds it.
    let spec = spec(
        "grace",
        true,
        &["trap '' TERM; echo trapped; sleep 300 & wait; sleep 300"],
    );
    let p = ServerProcess::start(&spec).unwrap();
    let pgid = p.pgid;
    assert!(wait_for(|| p.log_tail().as_deref() == Some("trapped")).await);
    let how = p.stop(Duration::from_millis(300)).await.unwrap();
    assert_eq!(how, "killed after the 0.3 s grace");
    assert!(gone(pgid), "group {pgid} is left");
}

#[tokio::test]
async fn drop_without_stop_kills_the_group() {
    let _serial = SERIAL.read().await;
    let spec = spec("drop", true, &["sleep 300 & sleep 300"]);
    let p = ServerProcess::start(&spec).unwrap();
    let pgid = p.pgid;
    drop(p);
    assert!(
        wait_for(|| {
            reap_group(pgid);
            gone(pgid)
        })
        .await,
        "group {pgid} is left"
    );
    assert!(!GROUPS.lock().unwrap().contains(&pgid));
}

#[tokio::test]
async fn kill_all_kills_every_registered_group() {
    let _serial = SERIAL.write().await;
    let mut a = ServerProcess::start(&spec("all-a", false, &["sleep", "300"])).unwrap();
    let mut b = ServerProcess::start(&spec("all-b", true, &["sleep 300 & sleep 300"])).unwrap();
    kill_all();
    assert!(wait_for(|| a.exited().is_some() && b.exited().is_some()).await);
    assert_eq!(a.exited().as_deref(), Some("killed by signal 9"));
    assert_eq!(b.exited().as_deref(), Some("killed by signal 9"));
    let (pa, pb) = (a.pgid, b.pgid);
    let how = a.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(how, "had already killed by signal 9");
    b.stop(Duration::from_secs(5)).await.unwrap();
    assert!(gone(pa) && gone(pb));
}

#[tokio::test]
async fn exit_before_ready_names_the_status_and_the_log_line() {
    let _serial = SERIAL.read().await;
    let mut spec = spec("boom", true, &["echo starting; echo boom >&2; exit 3"]);
    spec.env = vec![("SECRET_KEY".to_owned(), "sk-very-secret".to_owned())];
    let mut p = ServerProcess::start(&spec).unwrap();
    let e = p
        .wait_ready(&client(), None, Duration::from_secs(60))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "the server exited with status 3 before it was ready; its log's last line: `boom`"
    );
    p.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn the_log_tail_blanks_secrets_and_escapes() {
    let _serial = SERIAL.read().await;
    let mut spec = spec(
        "tail",
        true,
        &[r"printf 'one\n\033[32mkey sk-very-secret ok\033[0m\r\n\n  \n'; exit 1"],
    );
    spec.env = vec![("KEY".to_owned(), "sk-very-secret".to_owned())];
    let mut p = ServerProcess::start(&spec).unwrap();
    assert!(wait_for(|| p.exited().is_some()).await);
    assert_eq!(p.log_tail().as_deref(), Some("key <redacted> ok"));
    p.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn not_ready_in_time_says_so_and_the_server_still_stops() {
    let _serial = SERIAL.read().await;
    let spec = spec("timeout", false, &["sleep", "300"]);
    let mut p = ServerProcess::start(&spec).unwrap();
    let e = p
        .wait_ready(&client(), None, Duration::from_secs(1))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "the server was not ready within 1 s (see {}); raise --ready-timeout",
            spec.log_path.display()
        )
    );
    let pgid = p.pgid;
    p.stop(Duration::from_secs(5)).await.unwrap();
    assert!(gone(pgid));
}

#[tokio::test]
async fn a_port_in_use_is_refused_before_spawning() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut spec = spec("in-use", true, &["echo ran"]);
    spec.port = port;
    let _ = std::fs::remove_file(&spec.log_path);
    let e = ServerProcess::start(&spec).err().unwrap().to_string();
    assert_eq!(
        e,
        format!(
            "port 127.0.0.1:{port} is already in use: another server is listening there; \
             stop it or choose --serve-port"
        )
    );
    // Refused before the log was made, so before any spawn.
    assert!(!spec.log_path.exists());
}

#[test]
fn a_missing_program_is_one_line() {
    let spec = spec("missing", false, &["tokbench-no-such-program", "--x"]);
    let e = ServerProcess::start(&spec).err().unwrap().to_string();
    assert_eq!(
        e,
        "cannot start the server command `tokbench-no-such-program`: No such file or directory"
    );
}

/// A loopback HTTP/1.1 server answering `answer(method, path)` on `port`,
/// one request per connection.
async fn fake(
    port: u16,
    answer: impl Fn(&str, &str) -> (u16, String) + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as much body as it announces.
                let body_at = loop {
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let text = String::from_utf8_lossy(&head[..body_at]).to_lowercase();
                let want = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                while head.len() - body_at < want {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head[..body_at]).into_owned();
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or("").to_owned();
                let path = parts.next().unwrap_or("").to_owned();
                let (status, body) = answer(&method, &path);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes()).await;
            });
        }
    })
}

#[tokio::test]
async fn ready_once_health_answers_200_and_the_model_is_listed() {
    let _serial = SERIAL.read().await;
    let spec = spec("ready", false, &["sleep", "300"]);
    // The process only has to exist: readiness is asked over HTTP on its
    // port, where the fake listens (bound after start, which refuses a
    // port in use).
    let mut p = ServerProcess::start(&spec).unwrap();
    let healths = Arc::new(AtomicUsize::new(0));
    let seen = healths.clone();
    let server = fake(spec.port, move |method, path| match (method, path) {
        ("GET", "/health") => {
            // llama.cpp's way: 503 while the model loads.
            if seen.fetch_add(1, Ordering::SeqCst) < 2 {
                (503, r#"{"error":"Loading model"}"#.to_owned())
            } else {
                (200, r#"{"status":"ok"}"#.to_owned())
            }
        }
        ("GET", "/v1/models") => (200, r#"{"object":"list","data":[{"id":"m1"}]}"#.to_owned()),
        _ => (404, "{}".to_owned()),
    })
    .await;
    let ready = p
        .wait_ready(&client(), Some("m1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(ready.engine, EngineHint::Unknown);
    assert_eq!(ready.model.as_deref(), Some("m1"));
    assert!(healths.load(Ordering::SeqCst) >= 3);
    assert!(ready.ready_s > 0.0);

    // The same server, asked for a model it does not list: not ready, and
    // the timeout says what it lists.
    p.hint = EngineHint::Llamacpp;
    let e = p
        .wait_ready(&client(), Some("other"), Duration::from_secs(1))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/v1/models lists `m1`, not `other`") && e.ends_with("raise --ready-timeout"),
        "{e}"
    );
    server.abort();
    p.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn an_unknown_server_answering_api_version_is_ollama_and_is_warmed() {
    let _serial = SERIAL.read().await;
    let spec = spec("ollama", false, &["sleep", "300"]);
    let mut p = ServerProcess::start(&spec).unwrap();
    let warmed = Arc::new(AtomicUsize::new(0));
    let seen = warmed.clone();
    let server = fake(spec.port, move |method, path| match (method, path) {
        ("GET", "/api/version") => (200, r#"{"version":"0.5.7"}"#.to_owned()),
        ("GET", "/api/tags") => (
            200,
            r#"{"models":[{"name":"qwen2.5:0.5b"},{"name":"b"}]}"#.to_owned(),
        ),
        ("POST", "/api/generate") => {
            seen.fetch_add(1, Ordering::SeqCst);
            (200, r#"{"done":true,"done_reason":"load"}"#.to_owned())
        }
        _ => (404, "404 page not found".to_owned()),
    })
    .await;
    let ready = p
        .wait_ready(&client(), None, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(ready.engine, EngineHint::Ollama);
    assert_eq!(ready.model.as_deref(), Some("qwen2.5:0.5b"));
    assert_eq!(warmed.load(Ordering::SeqCst), 1);
    server.abort();
    p.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn ollama_without_the_model_fails_at_once() {
    let _serial = SERIAL.read().await;
    let spec = spec("ollama-404", false, &["sleep", "300"]);
    let mut p = ServerProcess::start(&spec).unwrap();
    p.hint = EngineHint::Ollama;
    let server = fake(spec.port, |method, path| match (method, path) {
        ("GET", "/api/version") => (200, r#"{"version":"0.5.7"}"#.to_owned()),
        ("POST", "/api/generate") => (404, r#"{"error":"model 'nope' not found"}"#.to_owned()),
        _ => (404, "404 page not found".to_owned()),
    })
    .await;
    let e = p
        .wait_ready(&client(), Some("nope"), Duration::from_secs(60))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "the server answered 404 to loading `nope`: model 'nope' not found"
    );
    server.abort();
    p.stop(Duration::from_secs(5)).await.unwrap();
}
