//! Secrets stay secret: the API key (`--api-key` or `OPENAI_API_KEY`) and
//! credentials in `--base-url` never reach a result file, stdout, stderr, an
//! error line or the live view's screen. The real binary against the
//! simulator (or a tiny key-echoing server) on loopback.
//!
//! The live-view case needs tmux, like tests/it/tui.rs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokbench::sim::SimConfig;

use crate::support::{self, bin, paced, text, Sim, Tmux};

/// Distinctive strings: none may show up anywhere.
const KEY: &str = "SECRET-XYZ-h1k-9f4c2a7e51";
const WRONG_KEY: &str = "SECRET-XYZ-wrong-h1k-33d0b6";
const USER: &str = "tokuser-h1k";
const PASS: &str = "pass-h1k-7Qz2x";

fn scratch(name: &str) -> PathBuf {
    support::scratch("secrets", name)
}

/// The simulator, short requests: 16 tokens at 1 ms a step.
fn start_sim(api_key: Option<&str>) -> Sim {
    Sim::with(SimConfig {
        api_key: api_key.map(str::to_owned),
        ..paced(1.0, 1.0)
    })
}

/// A short headless sweep; `OPENAI_API_KEY` is cleared unless `env_key`.
fn sweep(base_url: &str, dir: &Path, key_flag: Option<&str>, env_key: Option<&str>) -> Output {
    sweep_warmup(base_url, dir, key_flag, env_key, "1")
}

/// `sweep` with `warmup` requests first (0: failures land in the files).
fn sweep_warmup(
    base_url: &str,
    dir: &Path,
    key_flag: Option<&str>,
    env_key: Option<&str>,
    warmup: &str,
) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args([
        "sweep",
        "--no-tui",
        "--base-url",
        base_url,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "4",
        "--warmup",
        warmup,
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--seed",
        "5",
        "--probe-interval",
        "0.2",
        "--result-dir",
    ])
    .arg(dir)
    .env_remove("OPENAI_API_KEY");
    if let Some(k) = key_flag {
        cmd.args(["--api-key", k]);
    }
    if let Some(k) = env_key {
        cmd.env("OPENAI_API_KEY", k);
    }
    cmd.output().expect("tokbench runs")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// None of `needles` in stdout, stderr or any file under `dir`; returns
/// how many files were checked.
fn assert_clean(what: &str, out: &Output, dir: &Path, needles: &[&str]) -> usize {
    let mut files = Vec::new();
    walk(dir, &mut files);
    for needle in needles {
        assert!(
            !contains(&out.stdout, needle),
            "{what}: stdout holds {needle}:\n{}",
            text(out)
        );
        assert!(
            !contains(&out.stderr, needle),
            "{what}: stderr holds {needle}:\n{}",
            text(out)
        );
        for f in &files {
            let bytes = std::fs::read(f).expect("result file");
            assert!(
                !contains(&bytes, needle),
                "{what}: {} holds {needle}",
                f.display()
            );
        }
    }
    files.len()
}

fn summary(dir: &Path) -> Value {
    let path = dir.join("summary.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("summary.json parses")
}

#[test]
fn api_key_flag_is_never_printed_or_saved() {
    let sim = start_sim(Some(KEY));
    let dir = scratch("flag");
    let out = sweep(&format!("http://{}", sim.addr()), &dir, Some(KEY), None);
    assert!(out.status.success(), "{}", text(&out));
    let n = assert_clean("--api-key", &out, &dir, &[KEY]);
    assert!(n >= 3, "only {n} result files");
    assert_eq!(
        summary(&dir)["run"]["target"],
        format!("http://{}", sim.addr())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn api_key_from_the_environment_is_never_printed_or_saved() {
    let sim = start_sim(Some(KEY));
    let dir = scratch("env");
    let out = sweep(&format!("http://{}", sim.addr()), &dir, None, Some(KEY));
    assert!(out.status.success(), "{}", text(&out));
    assert_clean("OPENAI_API_KEY", &out, &dir, &[KEY]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn credentials_in_the_base_url_are_stripped_everywhere() {
    let sim = start_sim(None);
    let dir = scratch("userinfo");
    let url = format!("http://{USER}:{PASS}@{}", sim.addr());
    let out = sweep(&url, &dir, None, None);
    assert!(out.status.success(), "{}", text(&out));
    assert_clean("user:pass@ URL", &out, &dir, &[PASS, USER]);
    assert_eq!(
        summary(&dir)["run"]["target"],
        format!("http://{}", sim.addr()),
        "the recorded target has no credentials"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The run's config.toml (issue 14) records every setting but the key and
/// the URL's credentials; `--print-config` prints neither. The walk of
/// `assert_clean` covers config.toml only if it exists, so that is checked.
#[test]
fn the_runs_config_toml_and_print_config_hold_no_secrets() {
    // No key demanded: with user:pass@ in the URL the client sends Basic
    // auth, and this test is about what is written, not what is accepted.
    let sim = start_sim(None);
    let dir = scratch("config");
    let url = format!("http://{USER}:{PASS}@{}", sim.addr());
    let out = sweep(&url, &dir, Some(KEY), None);
    assert!(out.status.success(), "{}", text(&out));
    let config = std::fs::read_to_string(dir.join("config.toml")).expect("config.toml written");
    assert!(
        config.contains(&format!("base-url = \"http://{}\"", sim.addr())),
        "{config}"
    );
    assert_clean("config.toml", &out, &dir, &[KEY, PASS, USER]);

    let printed = Command::new(bin())
        .args([
            "sweep",
            "--base-url",
            &url,
            "--api-key",
            KEY,
            "--print-config",
        ])
        .env("OPENAI_API_KEY", WRONG_KEY)
        .output()
        .expect("tokbench runs");
    assert!(printed.status.success(), "{}", text(&printed));
    assert!(text(&printed).contains("base-url = "), "{}", text(&printed));
    assert_clean(
        "--print-config",
        &printed,
        &dir,
        &[KEY, WRONG_KEY, PASS, USER],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server refusing the URL's credentials: the 401 line names the URL
/// without them.
#[test]
fn a_refused_login_in_the_url_is_not_echoed() {
    let sim = start_sim(Some(KEY));
    let dir = scratch("userinfo-401");
    let url = format!("http://{USER}:{PASS}@{}", sim.addr());
    let out = sweep(&url, &dir, None, None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("answered HTTP 401"), "{}", text(&out));
    assert_clean("401 with user:pass@", &out, &dir, &[PASS, USER]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_key_fails_without_echoing_either_key() {
    let sim = start_sim(Some(KEY));
    let dir = scratch("wrong");
    let out = sweep(
        &format!("http://{}", sim.addr()),
        &dir,
        Some(WRONG_KEY),
        None,
    );
    assert!(
        !out.status.success(),
        "a rejected key must fail the run:\n{}",
        text(&out)
    );
    let all = text(&out);
    assert!(
        all.contains("401") || all.contains("nauthorized"),
        "the error names the rejection:\n{all}"
    );
    assert_clean("wrong key", &out, &dir, &[WRONG_KEY, KEY]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn credentials_never_echo_on_a_refused_connection() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = scratch("refused");
    let url = format!("http://{USER}:{PASS}@127.0.0.1:{port}");
    let out = sweep(&url, &dir, Some(KEY), None);
    assert!(!out.status.success(), "{}", text(&out));
    assert_clean("refused", &out, &dir, &[PASS, USER, KEY]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_refused_base_url_is_echoed_without_its_credentials() {
    let dir = scratch("bad-url");
    for url in [
        format!("ftp://{USER}:{PASS}@127.0.0.1:1"),
        format!("http://{USER}:{PASS}@127.0.0.1:99999"),
        format!("{USER}:{PASS}@127.0.0.1:8000"),
    ] {
        let out = sweep(&url, &dir.join("r"), None, None);
        assert!(!out.status.success(), "{url}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--base-url"),
            "{url}: the error names the flag: {}",
            text(&out)
        );
        assert_clean(&url, &out, &dir, &[PASS, USER]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that lists one model, then rejects every other request with 401
/// and quotes the bearer token it got in the error message, as some proxies
/// do ("Received API Key = ..."), after `pad` characters of text (to push
/// the key across the message's 200-character cap).
fn key_echoing_server(pad: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !contains(&req, "\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&req);
                let token = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("authorization")
                            .then(|| value.trim().trim_start_matches("Bearer ").to_owned())
                    })
                    .unwrap_or_default();
                let (status, body) = if head.starts_with("GET /v1/models") {
                    (
                        "200 OK",
                        r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#.to_owned(),
                    )
                } else {
                    let padding = "x".repeat(pad);
                    (
                        "401 Unauthorized",
                        format!(
                            "{{\"error\":{{\"message\":\"{padding}Authentication Error, \
                             Received API Key = {token}\",\"type\":\"auth_error\"}}}}"
                        ),
                    )
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes());
            });
        }
    });
    addr
}

/// The server's words are kept (they say what went wrong), the key is not:
/// neither whole nor the part left where the message's cap cuts it.
#[test]
fn a_server_quoting_the_key_back_does_not_leak_it() {
    let prefix = "Authentication Error, Received API Key = ".len();
    // 0: the whole key in the message; 190 - prefix: the 200-character cap
    // cuts the key after 10 characters.
    for pad in [0, 190 - prefix] {
        let addr = key_echoing_server(pad);
        let dir = scratch(&format!("echo-{pad}"));
        let out = sweep_warmup(&format!("http://{addr}"), &dir, Some(WRONG_KEY), None, "0");
        assert!(!out.status.success(), "{}", text(&out));
        let all = text(&out);
        assert!(all.contains("Received API Key = <redacted>"), "{all}");
        let files = assert_clean("echoed key", &out, &dir, &[WRONG_KEY, &WRONG_KEY[..10]]);
        assert!(files >= 2, "the failed requests are saved ({files} files)");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// ---------------------------------------------------------------------------
// The live view, in tmux.

#[test]
fn the_live_view_never_shows_the_key() {
    let sim = start_sim(Some(KEY));
    let dir = scratch("tui");
    let results = dir.join("results");
    let command = format!(
        "env -u OPENAI_API_KEY TERM=xterm-256color {bin} sweep --base-url http://{addr} \
         --api-key {KEY} --concurrency 1,2 --num-prompts 24 --warmup 1 \
         --random-input-len 16 --random-output-len 48 --seed 5 --result-dir {dir}; \
         echo TOKBENCH_EXIT=$?; sleep 60",
        bin = bin(),
        addr = sim.addr(),
        dir = results.display(),
    );
    let tmux = Tmux::start("secrets-tui", 120, 40, &command);
    let started = Instant::now();
    let mut frames = 0;
    let mut live_frames = 0;
    loop {
        let screen = tmux.screen();
        frames += 1;
        assert!(!screen.contains(KEY), "the key on screen:\n{screen}");
        if screen.contains("output tok/s") {
            live_frames += 1;
        }
        if screen.contains("sweep finished") || screen.contains("TOKBENCH_EXIT=") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the sweep did not finish; the screen:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        live_frames >= 2,
        "saw the live view in {live_frames} of {frames} captures"
    );
    let _ = tmux.run(&["send-keys", "-l", "q"]);
    let started = Instant::now();
    let end = loop {
        let screen = tmux.screen_with_history();
        if screen.contains("TOKBENCH_EXIT=") {
            break screen;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no exit; the screen:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(end.contains("TOKBENCH_EXIT=0"), "{end}");
    assert!(!end.contains(KEY), "the key in the final output:\n{end}");
    let mut files = Vec::new();
    walk(&results, &mut files);
    assert!(!files.is_empty(), "no result files");
    for f in &files {
        let bytes = std::fs::read(f).expect("result file");
        assert!(!contains(&bytes, KEY), "{} holds the key", f.display());
    }
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}
