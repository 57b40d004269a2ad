//! The transport options: `--http2` really speaks HTTP/2, and TLS checks
//! certificates unless `--insecure` (said loudly) turns that off; `--cacert`
//! adds a private CA.
//!
//! The TLS test needs `openssl` (a throwaway certificate) and `socat` (TLS in
//! front of the simulator); `.ci/run` installs both.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, bin, paced, read_json, Sim};
use tokbench::sim::{EmissionLog, SimConfig};

fn scratch(name: &str) -> PathBuf {
    support::scratch("transport", name)
}

fn log(out: &Output) -> String {
    support::text(out)
}

/// The simulator at 5 ms a token (long enough that a late wake-up on a
/// busy machine, which the simulator's schedule then catches up, moves TPOT
/// by a few percent, not by a third).
fn start_sim() -> Sim {
    Sim::with(paced(5.0, 0.0))
}

fn sweep(base_url: &str, dir: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .args(["sweep", "--base-url", base_url, "--no-tui", "--no-probe"])
        .args(["--concurrency", "2", "--num-prompts", "6", "--warmup", "1"])
        // 32 tokens: 31 gaps, so one late first read barely moves TPOT.
        .args(["--random-input-len", "16", "--random-output-len", "32"])
        .arg("--result-dir")
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs")
}

/// The bytes tokbench opens a connection with under `--http2`: the HTTP/2
/// client preface, not an HTTP/1.1 request line.
#[test]
fn http2_sends_the_http2_preface() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("a connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut first = [0u8; 24];
        stream.read_exact(&mut first).expect("24 bytes");
        first
    });
    let dir = scratch("h2-preface");
    let mut child = Command::new(bin())
        .args([
            "sweep",
            "--base-url",
            &format!("http://{addr}"),
            "--no-tui",
            "--http2",
        ])
        .arg("--result-dir")
        .arg(dir.join("r"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let first = reader.join().expect("reader");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(&first, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--http2` and `--http-client reqwest` both move the measured requests off the
/// lean HTTP/1.1 reader onto reqwest; the figures stay the same: each
/// client's median TPOT within 10% of what the simulator logged it wrote
/// (the mean gap between each answer's first and last frames) in the same
/// run. reqwest's clock is user space, so a first chunk read late shortens
/// TPOT by its lateness over 31 gaps; a fixed band around the step failed
/// under two busy loops (4.34 ms against a 5 ms step).
#[test]
fn a_sweep_over_http2_or_reqwest_measures_like_the_lean_reader() {
    let emissions = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(emissions.clone()),
        ..paced(5.0, 0.0)
    });
    let dir = scratch("h2-run");
    let url = format!("http://{}", sim.addr());
    for (name, extra, recorded) in [
        ("lean", &[][..], "lean-http1"),
        ("h2", &["--http2"][..], "reqwest-http2"),
        (
            "reqwest",
            &["--http-client", "reqwest"][..],
            "reqwest-http1",
        ),
    ] {
        let _ = emissions.take();
        let out = sweep(&url, &dir.join(name), extra);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", log(&out));
        let summary = read_json(&dir.join(name).join("summary.json"));
        assert_eq!(summary["run"]["http_client"], recorded, "{name}");
        let level = read_json(&dir.join(name).join("sweep-c2.json"));
        assert_eq!(level["completed"], 6, "{name}: {level}");
        let tpot = level["median_tpot_ms"].as_f64().expect("tpot");
        let pairs = support::against_server(&dir.join(name), &emissions.take());
        assert_eq!(pairs.len(), 6, "{name}: every request in the emission log");
        let server: Vec<f64> = pairs.iter().map(|p| p.server_tpot_ms).collect();
        let server = support::median(&server);
        let ratio = tpot / server;
        assert!(
            (0.9..1.1).contains(&ratio),
            "{name}: TPOT {tpot} ms, the simulator's gaps {server} ms (x{ratio:.3})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn need(tool: &str) {
    let found = Command::new(tool)
        .arg(if tool == "socat" { "-V" } else { "version" })
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is not installed: this test needs it (apt-get install {tool}, or run .ci/run which installs it)"
    );
}

/// socat terminating TLS in front of the simulator, with a certificate for
/// 127.0.0.1 from a throwaway private CA (`ca`); killed on drop.
struct TlsFront {
    child: Child,
    port: u16,
    ca: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", log(&out));
}

impl TlsFront {
    fn start(dir: &Path, backend: SocketAddr) -> TlsFront {
        need("openssl");
        need("socat");
        std::fs::create_dir_all(dir).expect("scratch dir");
        let new_key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca_args = vec![
            "req",
            "-x509",
            "-days",
            "1",
            "-subj",
            "/CN=tokbench test CA",
        ];
        ca_args.extend(new_key);
        ca_args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        ca_args.extend(["-addext", "keyUsage=critical,keyCertSign"]);
        ca_args.extend(["-keyout", "ca-key.pem", "-out", "ca.pem"]);
        openssl(&ca_args, dir);
        let mut csr_args = vec!["req", "-subj", "/CN=localhost"];
        csr_args.extend(new_key);
        csr_args.extend(["-keyout", "key.pem", "-out", "leaf.csr"]);
        openssl(&csr_args, dir);
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )
        .expect("ext file");
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "leaf.ext",
                "-out",
                "cert.pem",
            ],
            dir,
        );
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("socat")
            .arg(format!(
                "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
                cert.display(),
                key.display()
            ))
            .arg(format!("TCP:{backend}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat starts");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "socat did not listen"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        TlsFront {
            child,
            port,
            ca: dir.join("ca.pem"),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn tls_checks_certificates_unless_insecure() {
    let sim = start_sim();
    let dir = scratch("tls");
    let front = TlsFront::start(&dir.join("pki"), sim.addr());
    let url = format!("https://127.0.0.1:{}", front.port);

    // A certificate from an unknown CA is refused, in one line, before any load.
    let out = sweep(&url, &dir.join("checked"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", log(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    // --insecure: the run goes through TLS, and says what it gave up.
    let results = dir.join("insecure");
    let out = sweep(&url, &results, &["--insecure"]);
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WARNING --insecure"), "{stderr}");
    let level = read_json(&results.join("sweep-c2.json"));
    assert_eq!(level["completed"], 6, "{level}");
    let summary = read_json(&results.join("summary.json"));
    assert_eq!(summary["run"]["target"], url.as_str());
    // The connect probe trusts what the run trusts (it once failed its handshakes).
    assert!(summary["run"]["connect_probe_ms"].is_number(), "{summary}");
    assert_eq!(summary["run"]["http_client"], "reqwest-http1");

    // --cacert: the private CA is trusted, every check kept, nothing to warn about.
    let results = dir.join("cacert");
    let ca = front.ca.display().to_string();
    let out = sweep(&url, &results, &["--cacert", &ca]);
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("WARNING"), "{stderr}");
    let level = read_json(&results.join("sweep-c2.json"));
    assert_eq!(level["completed"], 6, "{level}");
    let summary = read_json(&results.join("summary.json"));
    assert!(summary["run"]["connect_probe_ms"].is_number(), "{summary}");

    // A --cacert that is not a certificate file, or PEM armour around bytes that are
    // not X.509: one line naming the flag, before any load.
    let not_x509 = dir.join("pki").join("not-x509.pem");
    std::fs::write(
        &not_x509,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    for (bad, says) in [
        (dir.join("pki").join("leaf.ext"), "no certificate in it"),
        (
            not_x509,
            "certificate 1 of 1 is not a valid X.509 certificate",
        ),
    ] {
        let cacert = bad.display().to_string();
        let out = sweep(&url, &dir.join("bad-ca"), &["--cacert", &cacert]);
        assert_eq!(out.status.code(), Some(1), "{}", log(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--cacert") && stderr.contains(says),
            "{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    drop(front);
    let _ = std::fs::remove_dir_all(&dir);
}
