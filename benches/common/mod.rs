//! What the process benches (`client_cpu`, `memory`) share: the binary under
//! test, pinning to a core with `taskset`, and the simulator at zero step
//! time they both load.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The build under test: this one, or `TOKBENCH_BIN` (an A/B of two commits).
pub fn bin() -> String {
    std::env::var("TOKBENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tokbench").to_owned())
}

/// Whether client and simulator can each have a core of their own.
pub fn can_pin() -> bool {
    let taskset = Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let pin = taskset && std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    if !pin {
        eprintln!("note: taskset or a second core is missing: client and simulator are not pinned");
    }
    pin
}

/// `tokbench ARGS...`, on `core` when given, with no terminal attached.
pub fn command(core: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = match core {
        Some(core) => {
            let mut c = Command::new("taskset");
            c.args(["-c", core, &bin()]);
            c
        }
        None => Command::new(bin()),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The simulator at zero step time (one token per SSE chunk, as fast as it
/// can write them), with room for every stream; its base URL once it listens.
pub fn instant_simulator(core: Option<&str>) -> (Child, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let port_arg = port.to_string();
    let sim = command(
        core,
        &[
            "sim",
            "--port",
            &port_arg,
            "--step-ms",
            "0",
            "--step-ms-per-seq",
            "0",
            "--prefill-ms-per-1k",
            "0",
            "--max-num-seqs",
            "4096",
            "--kv-tokens",
            "1000000000",
        ],
    )
    .spawn()
    .expect("spawn the simulator");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "simulator did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (sim, format!("http://127.0.0.1:{port}"))
}
