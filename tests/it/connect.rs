//! Connect time apart from TTFT (issue 32 item 3), against a loopback
//! stand-in: a proxy in front of the simulator that holds each accepted
//! connection for `HOLD` before it forwards a byte, and logs how long it
//! really held it. The kernel completes a TCP handshake before `accept`, so
//! that hold is not connect time: it lands in TTFT after connect, on the
//! first request of each connection only; a reused keep-alive connection
//! records a connect of 0. A full accept queue is connect time: the second
//! stand-in listens with a backlog of 1 and accepts slowly, so some SYNs
//! are dropped and the client's handshake waits for their retransmission,
//! and the level block then gives connecting's share of TTFT.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{bin, paced, read_json, scratch, text, Sim};

const HOLD: Duration = Duration::from_millis(50);

/// Copy one way until either side ends, then end both.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// The stand-in's address and the log of each connection's real hold.
fn stand_in(upstream: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<Duration>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&held);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { break };
            let accepted = Instant::now();
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                std::thread::sleep(HOLD);
                let Ok(server) = TcpStream::connect(upstream) else {
                    return;
                };
                log.lock().expect("log").push(accepted.elapsed());
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    return;
                };
                std::thread::spawn(move || pipe(c2, s2));
                pipe(server, client);
            });
        }
    });
    (addr, held)
}

#[test]
fn an_accept_hold_is_ttft_after_connect_and_reused_connections_connect_in_zero() {
    let sim = Sim::with(paced(5.0, 0.0));
    let (addr, held) = stand_in(sim.addr());
    let dir = scratch("connect", "held");
    let out = Command::new(bin())
        .args(["sweep", "--base-url", &format!("http://{addr}")])
        .args(["--no-tui", "--no-probe", "--warmup", "0"])
        .args(["--concurrency", "2", "--num-prompts", "8"])
        .args(["--random-input-len", "16", "--random-output-len", "4"])
        .arg("--result-dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "sweep: {}", text(&out));
    let min_held_ms = held
        .lock()
        .expect("log")
        .iter()
        .map(|d| d.as_secs_f64() * 1000.0)
        .fold(f64::INFINITY, f64::min);
    assert!(min_held_ms >= 50.0, "held {min_held_ms} ms");

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 8);
    let (mut fresh, mut reused) = (Vec::new(), Vec::new());
    for line in &lines {
        let connect = line["connect_ms"].as_f64().expect("the lean reader knows");
        let ttft = line["ttft_ms"].as_f64().expect("a TTFT");
        if connect > 0.0 {
            // The handshake is done before the stand-in even accepts: the
            // connect is well under the hold it logged.
            assert!(connect < min_held_ms, "connect {connect} ms: {line}");
            fresh.push(ttft - connect);
        } else {
            reused.push(ttft);
        }
    }
    // Two streams open two connections; the other requests reuse them.
    assert!(fresh.len() >= 2, "fresh: {fresh:?}");
    assert!(reused.len() >= 4, "reused: {reused:?}");
    // The hold is the server's wait as the client sees it: in TTFT after
    // connect, on the first request of a connection only.
    for after in &fresh {
        assert!(*after >= min_held_ms * 0.95, "after connect {after} ms");
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(
        mean(&reused) < mean(&fresh),
        "reused {reused:?} fresh {fresh:?}"
    );

    let level = read_json(&dir.join("sweep-c2.json"));
    // More than half reused: the median connect is 0.
    assert_eq!(level["connect_ms"]["p50"].as_f64(), Some(0.0), "{level}");
    let p99 = level["connect_ms"]["p99"].as_f64().expect("connect p99");
    assert!(p99 > 0.0 && p99 < min_held_ms, "connect p99 {p99}");
    let after_p99 = level["ttft_after_connect_ms"]["p99"]
        .as_f64()
        .expect("TTFT after connect p99");
    assert!(
        after_p99 >= min_held_ms * 0.95,
        "after connect p99 {after_p99}"
    );
}

/// A stand-in with a short accept queue (a backlog of 1) that accepts one
/// connection every `hold`, each forwarded to `upstream` at once: what a
/// one-core server behind a burst of new connections looks like. Linux
/// queues two; a third SYN is dropped and sent again by the client after
/// its retransmission timeout (1 s), so that connect waits.
#[cfg(target_os = "linux")]
fn slow_acceptor(upstream: SocketAddr, hold: Duration) -> SocketAddr {
    use std::os::fd::AsRawFd;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    // Listening again sets the backlog anew.
    let rc = unsafe { libc::listen(listener.as_raw_fd(), 1) };
    assert_eq!(rc, 0, "listen");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || loop {
        std::thread::sleep(hold);
        let Ok((client, _)) = listener.accept() else {
            break;
        };
        std::thread::spawn(move || {
            let Ok(server) = TcpStream::connect(upstream) else {
                return;
            };
            let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                return;
            };
            std::thread::spawn(move || pipe(c2, s2));
            pipe(server, client);
        });
    });
    addr
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_accept_queue_is_connect_time_and_the_level_block_gives_its_share() {
    let sim = Sim::with(paced(5.0, 0.0));
    let hold = Duration::from_millis(100);
    let addr = slow_acceptor(sim.addr(), hold);
    let dir = scratch("connect", "queue");
    let out = Command::new(bin())
        .args(["sweep", "--base-url", &format!("http://{addr}")])
        .args(["--no-tui", "--no-probe", "--warmup", "0"])
        .args(["--concurrency", "6", "--num-prompts", "12"])
        .args(["--random-input-len", "16", "--random-output-len", "4"])
        .arg("--result-dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs");
    let printed = text(&out);
    assert!(out.status.success(), "sweep: {printed}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let connects: Vec<f64> = lines
        .iter()
        .map(|l| l["connect_ms"].as_f64().expect("the lean reader knows"))
        .collect();
    // Six connections at once into a queue of two that drains one per
    // hold: some handshakes waited on a dropped SYN, far longer than the
    // stand-in's hold; the six reused connections connect in 0.
    let slowest = connects.iter().copied().fold(0.0, f64::max);
    let hold_ms = hold.as_secs_f64() * 1000.0;
    assert!(slowest > 2.0 * hold_ms, "connects {connects:?}");
    assert!(
        connects.iter().filter(|c| **c == 0.0).count() >= 6,
        "{connects:?}"
    );
    for line in &lines {
        let (connect, ttft) = (line["connect_ms"].as_f64(), line["ttft_ms"].as_f64());
        assert!(connect <= ttft, "the connect is inside TTFT: {line}");
    }
    let level = read_json(&dir.join("sweep-c6.json"));
    let p99 = level["connect_ms"]["p99"].as_f64().expect("connect p99");
    let ttft_p99 = level["p99_ttft_ms"].as_f64().expect("TTFT p99");
    assert!(
        p99 > 0.1 * ttft_p99,
        "connect p99 {p99} of TTFT p99 {ttft_p99}"
    );
    assert!(printed.contains("Connecting was "), "{printed}");
    assert!(
        printed.contains("Warmed keep-alive connections are the usual cure"),
        "{printed}"
    );
    // The run's report says it too, from the saved level.
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(
        report.contains("**Connecting:** 6 streams: connect p99 "),
        "{report}"
    );
}
