//! GPU gauges with a fake `nvidia-smi` (a shell script that prints two
//! canned lines when asked the query tokbench asks), and with a fake DCGM
//! exporter (`--gpu-metrics`: a loopback HTTP server that serves
//! tests/fixtures/dcgm/dcgm_exporter_2gpu.prom, its energy counters
//! advanced by a fixed amount on every scrape).
#![cfg(unix)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokbench::probe::gpu::{read_gpus, read_gpus_within, spawn_gpu_probe};

use crate::support::{paced, read_json, scratch, stderr, stdout, text, tokbench, Sim};

/// The fake tool answers only the exact query; anything else exits 9.
const FAKE: &str = r#"#!/bin/sh
case "$*" in
  "--query-gpu=utilization.gpu,memory.used,memory.total,power.draw,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader,nounits") ;;
  *) exit 9 ;;
esac
echo "90, 60000, 81559, 310.25, 1500, 1980, 74"
echo "70, 40000, 81559, 289.75, 1900, 1980, 66"
"#;

const FAILING: &str = "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n";

const HANGING: &str = "#!/bin/sh\nexec sleep 30\n";

/// All scripts are written once, before any test runs one: a script still
/// open for writing in a forked child cannot be executed (ETXTBSY).
fn scripts() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("tokbench-gpu-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for (name, body) in [
            ("nvidia-smi", FAKE),
            ("failing-smi", FAILING),
            ("hanging-smi", HANGING),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, body).expect("write script");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("chmod script");
        }
        dir
    })
}

fn script(name: &str) -> String {
    scripts().join(name).to_string_lossy().into_owned()
}

fn close(a: Option<&f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[tokio::test]
async fn fake_nvidia_smi_reads_two_gpus() {
    let readings = read_gpus(&script("nvidia-smi"))
        .await
        .expect("the fake answers");
    assert_eq!(readings.len(), 2);
    assert_eq!(readings[0].power_w, Some(310.25));
    assert_eq!(readings[1].sm_clock_mhz, Some(1900.0));
    assert_eq!(readings[1].temperature_c, Some(66.0));
}

#[tokio::test]
async fn probe_sends_aggregate_gauges_until_dropped() {
    let mut rx = spawn_gpu_probe(
        script("nvidia-smi"),
        Duration::from_millis(50),
        Instant::now(),
    );
    for _ in 0..2 {
        let sample = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a sample in time")
            .expect("the probe is running");
        let g = &sample.gauges;
        assert!(close(g.get("gpu_count"), 2.0));
        assert!(close(g.get("gpu_util_pct"), 80.0));
        assert!(close(g.get("gpu_mem_used_mib"), 100_000.0));
        assert!(close(g.get("gpu_power_w"), 600.0));
        // Both busy; the lesser ratio is GPU 0's.
        assert!(close(g.get("gpu_sm_clock_ratio"), 1500.0 / 1980.0));
        assert!(close(g.get("gpu_temp_c"), 74.0));
    }
    drop(rx);
}

#[tokio::test]
async fn absent_or_failing_tool_means_no_gpu_and_a_silent_probe() {
    let missing = scripts().join("no-such-smi").to_string_lossy().into_owned();
    assert_eq!(read_gpus(&missing).await, None);
    assert_eq!(read_gpus(&script("failing-smi")).await, None);
    for program in [missing, script("failing-smi")] {
        let mut rx = spawn_gpu_probe(program, Duration::from_millis(50), Instant::now());
        let ended = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the probe ends by itself");
        assert!(ended.is_none(), "nothing is sent");
    }
}

#[tokio::test]
async fn a_hanging_tool_is_killed_at_the_time_limit() {
    let started = Instant::now();
    let got = read_gpus_within(&script("hanging-smi"), Duration::from_millis(200)).await;
    assert_eq!(got, None);
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
}

// ---------------------------------------------------------------------------
// A DCGM exporter of our own.

/// Each GPU's energy counter grows by this much per scrape, mJ: 250 J, so
/// 500 J a scrape for the fixture's two GPUs.
const MJ_PER_SCRAPE: u64 = 250_000;
const J_PER_SCRAPE_ALL_GPUS: f64 = 2.0 * MJ_PER_SCRAPE as f64 / 1000.0;

/// What the fake answers.
#[derive(Clone, Copy)]
enum Page {
    /// The fixture, energy counters advanced by [`MJ_PER_SCRAPE`] per scrape.
    Dcgm,
    /// A web page, as a wrong port or path would give.
    Html,
}

/// A loopback HTTP server answering every GET with `page`, one answer per
/// connection. It counts its scrapes and keeps the `Authorization` headers
/// it got. Its thread lives as long as the test process.
struct FakeExporter {
    addr: SocketAddr,
    scrapes: Arc<AtomicU64>,
    authorization: Arc<Mutex<Vec<String>>>,
}

impl FakeExporter {
    fn start(page: Page) -> FakeExporter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let scrapes = Arc::new(AtomicU64::new(0));
        let authorization = Arc::new(Mutex::new(Vec::new()));
        let fixture = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/dcgm/dcgm_exporter_2gpu.prom"
        ))
        .expect("the DCGM fixture");
        let (count, auth) = (scrapes.clone(), authorization.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let body = match page {
                    Page::Dcgm => advanced(&fixture, n * MJ_PER_SCRAPE),
                    Page::Html => "<!DOCTYPE html>\n<html><body>Grafana</body></html>\n".into(),
                };
                answer(stream, &body, &auth);
            }
        });
        FakeExporter {
            addr,
            scrapes,
            authorization,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }
}

/// The fixture with every energy counter `plus` mJ higher.
fn advanced(fixture: &str, plus: u64) -> String {
    fixture
        .lines()
        .map(|line| match line.rsplit_once(' ') {
            Some((series, value)) if line.starts_with("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") => {
                let mj: u64 = value.parse().expect("a whole number of mJ");
                format!("{series} {}\n", mj + plus)
            }
            _ => format!("{line}\n"),
        })
        .collect()
}

/// Read one request head, keep its Authorization, answer `body`, close.
fn answer(mut stream: TcpStream, body: &str, auth: &Mutex<Vec<String>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("authorization") {
                if let Ok(mut seen) = auth.lock() {
                    seen.push(value.trim().to_string());
                }
            }
        }
    }
    let kind = if body.starts_with('<') {
        "text/html"
    } else {
        "text/plain; version=0.0.4"
    };
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A short headless sweep against the simulator, the probe every 0.1 s,
/// with `--gpu-metrics url`; its result folder.
fn sweep_with_gpu_metrics(
    name: &str,
    url: &str,
    concurrency: &str,
    extra: &[&str],
) -> (PathBuf, std::process::Output) {
    // 5 ms a step and 64 tokens: a request takes about 0.32 s, so the
    // c=1 level (8 requests one after another) runs about 2.6 s and the
    // c=2 level about 1.3 s: many scrapes each, more on a slow box.
    let sim = Sim::with(paced(5.0, 0.0));
    let dir = scratch("gpu", name);
    let d = dir.display().to_string();
    let base = sim.url();
    let mut args = vec![
        "sweep",
        "--base-url",
        &base,
        "--gpu-metrics",
        url,
        "--probe-interval",
        "0.1",
        "--concurrency",
        concurrency,
        "--num-prompts",
        "8",
        "--random-input-len",
        "32",
        "--random-output-len",
        "64",
        "--warmup",
        "1",
        "--seed",
        "5",
        "--no-tui",
        "--result-dir",
        &d,
    ];
    args.extend(extra);
    let out = tokbench(&args);
    (dir, out)
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {v}"))
}

/// The level files' `gpu` block against what the fake exporter served:
/// power and utilisation exactly the fixture's; the energy from the
/// counters, a whole number of scrapes' worth; energy per million tokens
/// from it. The URL's credentials reach the exporter and nothing else.
#[test]
fn a_dcgm_exporter_gives_each_level_its_power_and_exact_energy() {
    let fake = FakeExporter::start(Page::Dcgm);
    let url = format!("http://dcgm:s3cret@{}/metrics", fake.addr);
    let (dir, out) = sweep_with_gpu_metrics(
        "dcgm",
        &url,
        "1,2",
        &["--api-key", "sk-not-for-the-exporter"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(!stderr(&out).contains("--gpu-metrics"), "{}", text(&out));
    let served = fake.scrapes.load(Ordering::SeqCst);
    for name in ["sweep-c1.json", "sweep-c2.json"] {
        let level = read_json(&dir.join(name));
        let gpu = &level["gpu"];
        // 301.5 + 298.5 W, every scrape.
        assert_eq!(num(gpu, "power_w_mean"), 600.0, "{name}: {gpu}");
        // (90 + 70) / 2
        assert_eq!(num(gpu, "util_pct_mean"), 80.0, "{name}: {gpu}");
        assert_eq!(gpu["energy_from"], "counter", "{name}: {gpu}");
        assert_eq!(gpu["energy_counter_reset"], false, "{name}: {gpu}");
        // GPU 0 at its software power cap on every page.
        assert_eq!(gpu["clock_events"], serde_json::json!(["power_cap"]));
        // The counters' growth between the level's first and last sample:
        // 500 J per scrape in between, so a whole number of scrapes, at
        // least one and no more than the fake served.
        let counter_j = num(gpu, "energy_counter_j");
        let scrapes = counter_j / J_PER_SCRAPE_ALL_GPUS;
        assert_eq!(scrapes, scrapes.round(), "{name}: {counter_j} J");
        assert!(
            scrapes >= 1.0 && scrapes < served as f64,
            "{name}: {scrapes} of {served} scrapes"
        );
        // The level's energy: the counters' mean power over their span,
        // over the level's duration; per million output tokens from it.
        let span = num(gpu, "energy_counter_span_s");
        let duration = num(&level, "duration");
        assert!(
            span > 0.0 && span <= duration + 1e-3,
            "{name}: span {span} of {duration} s"
        );
        let energy = num(gpu, "energy_j");
        let want = counter_j / span * duration;
        assert!(
            (energy - want).abs() <= 1e-3 * want,
            "{name}: {energy} J, want {want}"
        );
        let tokens = num(&level, "total_output_tokens");
        let per_m = num(gpu, "energy_j_per_m_output_tokens");
        let want = energy / tokens * 1e6;
        assert!(
            (per_m - want).abs() <= 1e-3 * want,
            "{name}: {per_m} J/M, want {want}"
        );
        // The server block has the gauges, not the running totals.
        assert_eq!(level["server"]["gpu_count"]["max"], 2.0, "{name}");
        assert_eq!(level["server"]["gpu_mem_total_mib"]["max"], 163_118.0);
        assert!(level["server"].get("gpu_energy_j").is_none(), "{name}");
    }
    // The gpu block as the level schema names it.
    crate::schema::validate(&dir);
    // The exporter got the URL's login, never the target's key.
    let seen = fake
        .authorization
        .lock()
        .map(|a| a.clone())
        .unwrap_or_default();
    assert!(
        !seen.is_empty(),
        "no Authorization header reached the exporter"
    );
    assert!(
        seen.iter().all(|a| a == "Basic ZGNnbTpzM2NyZXQ="),
        "{seen:?}"
    );
    // The saved settings name the exporter without the password.
    let config = std::fs::read_to_string(dir.join("config.toml")).expect("config.toml");
    assert!(
        config.contains(&format!("gpu-metrics = \"{}\"", fake.url())),
        "{config}"
    );
    for file in ["config.toml", "summary.json", "sweep-c1.json"] {
        let saved = std::fs::read_to_string(dir.join(file)).expect("a result file");
        assert!(!saved.contains("s3cret"), "{file} holds the password");
    }
    assert!(!text(&out).contains("s3cret"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An exporter URL that answers HTML, or nothing: one line on stderr, the
/// run goes on without GPU figures and succeeds.
#[test]
fn a_wrong_gpu_metrics_url_is_one_line_and_the_run_goes_on() {
    let html = FakeExporter::start(Page::Html);
    // A port nothing listens on: bound, then let go.
    let refused = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        drop(listener);
        format!("http://{addr}/metrics")
    };
    for (name, url, why) in [
        ("html", html.url(), "no DCGM metrics there (answered HTML)"),
        (
            "refused",
            refused,
            "no answer (connection refused or host unreachable)",
        ),
    ] {
        let (dir, out) = sweep_with_gpu_metrics(name, &url, "1", &[]);
        assert!(out.status.success(), "{name}: {}", text(&out));
        let err = stderr(&out);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("--gpu-metrics"))
            .collect();
        assert_eq!(
            lines,
            [format!(
                "tokbench: --gpu-metrics {url}: {why}; the run goes on without GPU figures"
            )],
            "{name}: {err}"
        );
        let level = read_json(&dir.join("sweep-c1.json"));
        assert!(level["gpu"].is_null(), "{name}: {}", level["gpu"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--print-config` names the exporter without its password, and a URL
/// that is none is refused without echoing one.
#[test]
fn print_config_and_refusals_hold_no_exporter_password() {
    let printed = tokbench([
        "sweep",
        "--base-url",
        "http://127.0.0.1:9",
        "--gpu-metrics",
        "http://dcgm:s3cret@gpu-node:9400/metrics",
        "--print-config",
    ]);
    assert!(printed.status.success(), "{}", text(&printed));
    assert!(
        stdout(&printed).contains("gpu-metrics = \"http://gpu-node:9400/metrics\""),
        "{}",
        text(&printed)
    );
    assert!(!text(&printed).contains("s3cret"), "{}", text(&printed));
    for (bad, says) in [
        (
            "ftp://dcgm:s3cret@gpu-node/metrics",
            "must start with http://",
        ),
        ("dcgm:s3cret@gpu-node:9400", "must start with http://"),
        ("http://dcgm:s3/cret@gpu-node:99999/metrics", "is not a URL"),
    ] {
        let out = tokbench([
            "sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--gpu-metrics",
            bad,
            "--print-config",
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(stderr(&out).contains(says), "{}", text(&out));
        assert!(!text(&out).contains("s3cret"), "{}", text(&out));
    }
}
