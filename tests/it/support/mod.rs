//! What the integration tests share: the binary under test, scratch
//! folders, the simulator (on the test's runtime or on one of its own), and
//! a tmux server to drive the live view. Each test module takes what it
//! needs (`use crate::support::...`).

pub mod audit;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokbench::load::request::record_id_of_request_id;
use tokbench::sim::{self, SimConfig, SimHandle, StreamEmissions};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tokbench")
}

/// Runs the binary under test to its end, stdin closed.
pub fn tokbench<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs")
}

/// `tokbench` off the async runtime, so a simulator on the same runtime
/// keeps serving while the binary runs.
pub async fn tokbench_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || tokbench(&args))
        .await
        .expect("join")
}

/// A path under the temp dir, named by the test file and case, with nothing
/// there: tokbench makes the folder.
pub fn scratch_path(file: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokbench-{file}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A fresh, empty folder under the temp dir, named by the test file and case.
pub fn scratch(file: &str, name: &str) -> PathBuf {
    let dir = scratch_path(file, name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The simulator on the test's own runtime, on a free loopback port.
pub async fn start_sim(config: SimConfig) -> SimHandle {
    sim::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .expect("simulator starts")
}

pub fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// A finished process's status and output, for assertion messages.
/// A simulator paced by a fixed step and a prefill cost only (no per-sequence
/// cost): the timing the tests work out by hand.
pub fn paced(step_ms: f64, prefill_ms_per_1k: f64) -> SimConfig {
    SimConfig {
        step_ms,
        step_ms_per_seq: 0.0,
        prefill_ms_per_1k,
        ..SimConfig::default()
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One measured request of a run beside what the simulator's emission log says
/// it did (matched by the id tokbench sends), in ms.
pub struct AgainstServer {
    pub concurrency: u64,
    pub client_ttft_ms: f64,
    /// First frame handed to the connection minus the request reaching its handler.
    pub server_ttft_ms: f64,
    /// |client TPOT minus the mean gap between the first and last frames written|.
    pub tpot_abs_err_ms: f64,
    /// The mean gap between the first and last frames written.
    pub server_tpot_ms: f64,
}

impl AgainstServer {
    /// The client's TTFT error: never negative on one clock (the client starts
    /// before the server sees the request and reads after the frame is handed over).
    pub fn ttft_err_ms(&self) -> f64 {
        self.client_ttft_ms - self.server_ttft_ms
    }
}

pub fn against_server(run_dir: &Path, streams: &[StreamEmissions]) -> Vec<AgainstServer> {
    let server: HashMap<u64, &StreamEmissions> = streams
        .iter()
        .filter(|s| s.t_ns.len() > 1)
        .filter_map(|s| Some((record_id_of_request_id(&s.request)?, s)))
        .collect();
    let jsonl = std::fs::read_to_string(run_dir.join("requests.jsonl")).expect("requests.jsonl");
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = Vec::new();
    for line in jsonl.lines() {
        let r: Value = serde_json::from_str(line).expect("a JSON line");
        let Some(s) = r["id"].as_u64().and_then(|id| server.get(&id)) else {
            continue;
        };
        let (Some(ttft), Some(tpot)) = (r["ttft_ms"].as_f64(), r["tpot_ms"].as_f64()) else {
            continue;
        };
        let (first, last) = (s.t_ns[0], s.t_ns[s.t_ns.len() - 1]);
        let gaps = (s.t_ns.len() - 1) as f64;
        out.push(AgainstServer {
            concurrency: r["concurrency"].as_u64().unwrap_or(0),
            client_ttft_ms: ttft,
            server_ttft_ms: ms(first - s.arrived_ns),
            tpot_abs_err_ms: (tpot - ms(last - first) / gaps).abs(),
            server_tpot_ms: ms(last - first) / gaps,
        });
    }
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The simulator on a runtime of its own, so the test body can block on
/// child processes; shut down on drop.
pub struct Sim {
    runtime: tokio::runtime::Runtime,
    handle: Option<SimHandle>,
}

impl Sim {
    pub fn with(config: SimConfig) -> Sim {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let handle = runtime
            .block_on(sim::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), config))
            .expect("simulator starts");
        Sim {
            runtime,
            handle: Some(handle),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.handle.as_ref().map(|h| h.addr).expect("running")
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.runtime.block_on(handle.shutdown());
        }
    }
}

/// A tmux server of our own (`-L` socket), killed on drop whatever happened.
pub struct Tmux {
    socket: String,
    /// The socket file, which `kill-server` leaves behind.
    socket_path: Option<PathBuf>,
}

impl Tmux {
    /// A detached session of `width` x `height` running `command`. Fails
    /// naming tmux when it is not installed.
    pub fn start(name: &str, width: u16, height: u16, command: &str) -> Tmux {
        match Command::new("tmux").arg("-V").output() {
            Ok(out) if out.status.success() => {}
            _ => panic!(
                "tmux is not installed: this test runs the live view inside tmux \
                 (apt-get install tmux, or run .ci/run which installs it)"
            ),
        }
        let mut tmux = Tmux {
            socket: format!("tokbench-test-{}-{name}", std::process::id()),
            socket_path: None,
        };
        let out = tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            command,
        ]);
        assert!(out.status.success(), "tmux new-session: {}", text(&out));
        let path = tmux.run(&["display-message", "-p", "#{socket_path}"]);
        let path = String::from_utf8_lossy(&path.stdout).trim().to_string();
        tmux.socket_path = (!path.is_empty()).then(|| PathBuf::from(path));
        tmux
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    /// What the pane shows now.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p"]).stdout).into_owned()
    }

    /// The pane with its scrollback.
    pub fn screen_with_history(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-S", "-"]).stdout).into_owned()
    }

    /// Whether the pane is on the alternate screen (the live view is up).
    pub fn alternate_on(&self) -> bool {
        let out = self.run(&["display-message", "-p", "#{alternate_on}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Type `keys` literally.
    pub fn keys(&self, keys: &str) {
        let out = self.run(&["send-keys", "-l", keys]);
        assert!(out.status.success(), "send-keys: {}", text(&out));
    }

    /// Poll until `want` holds for the screen; the time it took.
    pub fn wait_for(&self, what: &str, limit: Duration, want: impl Fn(&str) -> bool) -> Duration {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if want(&screen) {
                return started.elapsed();
            }
            if started.elapsed() > limit {
                panic!("{what}: not seen within {limit:?}; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A Python that has the `jsonschema` package, or a panic naming it and
/// what the test validates with it.
pub fn python_with_jsonschema(validates: &str) -> &'static str {
    for python in ["python3", "/usr/bin/python3"] {
        let ok = Command::new(python)
            .args(["-c", "import jsonschema"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return python;
        }
    }
    panic!(
        "python3 with the jsonschema package is not installed: this test validates {validates} \
         with it (apt-get install python3-jsonschema, or run .ci/run which installs it)"
    );
}
