//! GPU gauges with a fake `nvidia-smi`: a shell script that prints two
//! canned lines when asked the query tokbench asks.
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokbench::probe::gpu::{read_gpus, read_gpus_within, spawn_gpu_probe};

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
