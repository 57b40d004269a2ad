//! Timing error: how late tokbench's real request path sees each chunk, against
//! a paced simulator that records when it wrote every chunk.
//!
//! Run: `cargo bench --bench timing_error` (prints a table; asserts nothing).
//!
//! In one process: the simulator (`--step-ms 20`, nothing else costs time, its
//! emission log on) runs on its own tokio runtime on a thread pinned to core 1;
//! the client is tokbench's own load path (`load::request::execute` with the
//! HTTP client settings of a sweep) on a multi-thread runtime pinned to core 0,
//! as `taskset -c 0 tokbench sweep` would run. Both clocks are CLOCK_MONOTONIC,
//! so the client's recorded figures can be compared with the simulator's
//! write times directly:
//! - lateness: each chunk's arrival (t0 + TTFT + the recorded gaps) minus the
//!   time the simulator handed that chunk to its connection;
//! - TTFT error: the first chunk's lateness, one sample per request;
//! - ITL error: each recorded gap minus the emitted gap (absolute value).
//!
//! Streams are matched by the `X-Request-Id` tokbench sends; chunk k of a
//! stream is frame k of the simulator's response. Each stream first sends one
//! unmeasured warmup request (as a sweep's `--warmup` does), so connections
//! are open when the measured requests go out together.
//!
//! Every case runs twice, one row each: `kernel` (the lean reader's default,
//! arrivals at the kernel's receive time, `--rx-clock kernel`) and `user`
//! (arrivals when the read returned, `--rx-clock user`), so the two clocks
//! are compared on the same machine state. The `starved` case adds a busy
//! loop pinned on the client's core at the same priority for the whole of
//! both its runs, so the client gets about half of its core: the user rows
//! show the lateness that starvation adds, the kernel rows what is left.
//!
//! Two more columns: `rx lag`, how late the client read its sockets in
//! that run (kernel rows only: user-space read time minus the kernel's),
//! and `coalesced`, the share of output reads that delivered more than one
//! chunk (those chunks all get the read's one time, so a client later than
//! a step shows there, and as ITL error, even on the kernel clock).
//! `TTFT-srv` is each request's TTFT minus the simulator's own view of it
//! (its first frame's write time minus the time it had read the request):
//! what the client adds at both ends, the send path included. It is the
//! column `TIMING_ERROR_TX=kernel` changes: every row then starts TTFT at
//! the kernel's transmit time of the request (`--tx-clock kernel`) instead
//! of the user-space time before it was written.
//! With it, `tx shift` is how much later each request left than the
//! user-space t0 would have been (the record's `tx_shift`): what the
//! kernel's send clock takes off TTFT, measured in the same run.
//! `TIMING_ERROR_USER_FIRST=1` runs the user row of each case first. Each
//! case starts with one unmeasured round.
//!
//! The first row, `floor`, is the machine's own: a plain blocking TCP read
//! of one small message per step between two threads pinned the same way,
//! no runtime and no parsing, so whatever lateness it shows no client could
//! beat on this machine.
//!
//! The figures include whatever else the machine is doing: on a shared or
//! virtual machine, run it quiet, or under `chrt -f 20` to keep other
//! processes from preempting the client and simulator threads.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokbench::load::request::{execute, record_id_of_request_id, PreparedRequest, Target};
use tokbench::load::Wire;
use tokbench::protocol::openai::{request_body, Api};
use tokbench::record::{RequestRecord, RxClock, TxClock};
use tokbench::sim::emission::monotonic_ns;
use tokbench::sim::{self, EmissionLog, SimConfig};

const STEP_MS: f64 = 20.0;
const OUTPUT_LEN: u32 = 100;
/// Warmup requests' ids start here.
const WARMUP_IDS: u64 = 1 << 40;

/// One case: `streams` streams each sending `rounds` requests back to back,
/// with or without a busy loop on the client's core.
#[derive(Clone, Copy)]
struct Case {
    streams: usize,
    rounds: usize,
    starved: bool,
}

const CASES: [Case; 4] = [
    Case {
        streams: 1,
        rounds: 10,
        starved: false,
    },
    Case {
        streams: 256,
        rounds: 2,
        starved: false,
    },
    Case {
        streams: 1024,
        rounds: 1,
        starved: false,
    },
    Case {
        streams: 256,
        rounds: 2,
        starved: true,
    },
];

fn main() {
    let fd_limit = raise_fd_limit();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = cores >= 2;
    if !pinned {
        eprintln!("note: one core only: client and simulator are not pinned apart");
    }

    let log = EmissionLog::in_memory();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sim_log = log.clone();
    let sim_thread = std::thread::spawn(move || {
        if pinned {
            pin_to_core(1);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("simulator runtime");
        rt.block_on(async move {
            let cfg = SimConfig {
                step_ms: STEP_MS,
                step_ms_per_seq: 0.0,
                prefill_ms_per_1k: 0.0,
                max_num_seqs: 4096,
                kv_tokens: 1_000_000_000,
                emission_log: Some(sim_log),
                ..SimConfig::default()
            };
            let sim = sim::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), cfg)
                .await
                .expect("simulator starts");
            addr_tx.send(sim.addr).expect("main thread waits");
            let _ = stop_rx.await;
            sim.shutdown().await;
        });
    });
    let addr: SocketAddr = addr_rx.recv().expect("simulator address");

    if pinned {
        pin_to_core(0);
    }
    // Like `tokbench`'s own runtime: workers = the cores this thread may use.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("client runtime");

    println!(
        "timing error of tokbench's request path against the simulator at --step-ms {STEP_MS} \
         (ms; client on core 0, simulator on core 1; {OUTPUT_LEN} tokens per request)"
    );
    println!("send clock (TTFT's start): {}", tx_clock().as_str());
    println!(
        "{:>13} {:>6} {:>7} {:>8} | {:>21} | {:>21} | {:>21} | {:>21} | {:>9} | {:>21} | {:>21}",
        "case",
        "clock",
        "streams",
        "chunks",
        "TTFT err p50/p99/max",
        "ITL err p50/p99/max",
        "lateness p50/p99/max",
        "rx lag p50/p99/max",
        "coalesced",
        "TTFT-srv p50/p99/max",
        "tx shift p50/p99/max"
    );
    println!(
        "{:>13} {:>6} {:>7} {:>8} | {:>21} | {:>21} | {:>21}",
        "floor",
        "",
        "",
        FLOOR_MESSAGES,
        "",
        "",
        floor_lateness(pinned)
    );
    let mut next_id = 0u64;
    for case in cases() {
        let name = if case.starved {
            format!("{} starved", case.streams)
        } else {
            case.streams.to_string()
        };
        if case.streams as u64 + 64 > fd_limit {
            println!("{name:>13} skipped: the open-file limit ({fd_limit}) is too low for it");
            continue;
        }
        // The busy loop runs through both clocks' runs of the case.
        let hog = case.starved.then(|| Hog::start(pinned));
        // TIMING_ERROR_USER_FIRST=1 swaps the order, to tell a clock's
        // effect from the machine's drift between the two runs.
        let clocks = if std::env::var_os("TIMING_ERROR_USER_FIRST").is_some() {
            [RxClock::User, RxClock::Kernel]
        } else {
            [RxClock::Kernel, RxClock::User]
        };
        // One unmeasured round first, on the first clock: the first run of
        // a case was seen to be the worse one whichever its clock (the
        // simulator and the allocator growing to the case's size), which
        // would be charged to that clock.
        let warm = Case { rounds: 1, ..case };
        let _ = rt.block_on(run_level(addr, warm, clocks[0], next_id));
        next_id += case.streams as u64;
        std::thread::sleep(Duration::from_millis(300));
        let _ = log.take();
        for clock in clocks {
            let first_id = next_id;
            next_id += (case.streams * case.rounds) as u64;
            let records = rt.block_on(run_level(addr, case, clock, first_id));
            // A stream's times reach the log when the simulator sees its body end,
            // a moment after the client has read the last chunk.
            std::thread::sleep(Duration::from_millis(300));
            let emitted: HashMap<u64, (u64, Vec<u64>)> = log
                .take()
                .into_iter()
                .filter_map(|s| {
                    Some((record_id_of_request_id(&s.request)?, (s.arrived_ns, s.t_ns)))
                })
                .collect();
            report(&name, clock, &records, &emitted);
        }
        drop(hog);
    }
    let _ = stop_tx.send(());
    sim_thread.join().expect("simulator thread");
}

async fn run_level(
    addr: SocketAddr,
    case: Case,
    clock: RxClock,
    first_id: u64,
) -> Vec<(RequestRecord, Instant)> {
    let (concurrency, rounds) = (case.streams, case.rounds);
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(concurrency)
        .pool_idle_timeout(Duration::from_secs(90))
        .http1_only()
        .build()
        .expect("client");
    let url: reqwest::Url = format!("http://{addr}/v1/chat/completions")
        .parse()
        .expect("url");
    let target = Target {
        client,
        // The lean HTTP/1.1 client, as a sweep on plain HTTP uses.
        h1: tokbench::load::h1::Connections::for_url(&url, None, concurrency)
            .map(|c| Arc::new(c.with_rx_clock(clock).with_tx_clock(tx_clock()))),
        wire: Wire::OpenAi(Api::Chat),
        url,
        authorization: None,
        request_timeout: Duration::from_secs(600),
        stall_timeout: Duration::from_secs(60),
    };
    let (_cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let run_start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for stream in 0..concurrency {
        let target = target.clone();
        let cancel = cancel_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(rounds);
            // Round 0 is the warmup, as in a sweep: it opens the connection
            // and is not measured (its ids are out of the measured range).
            for round in 0..=rounds {
                let id = match round {
                    0 => WARMUP_IDS + first_id + stream as u64,
                    _ => first_id + ((round - 1) * concurrency + stream) as u64,
                };
                let prompt = format!("request {id} please say something");
                let body = request_body(Api::Chat, "sim", &prompt, OUTPUT_LEN, true, None);
                let request = PreparedRequest {
                    id,
                    level: 0,
                    body: body.into(),
                    input_tokens_target: 4,
                    max_tokens: OUTPUT_LEN,
                    scheduled: None,
                    turn: None,
                    probe: false,
                };
                let record = execute(&target, request, run_start, cancel.clone()).await;
                if round > 0 {
                    out.push((record, run_start));
                }
            }
            out
        }));
    }
    let mut records = Vec::new();
    for t in tasks {
        records.extend(t.await.expect("load task"));
    }
    records
}

/// Monotonic nanoseconds of an `Instant` (both are CLOCK_MONOTONIC on Linux):
/// the offset is read from the tightest of a few back-to-back pairs.
fn instant_to_ns() -> impl Fn(Instant) -> i128 {
    let mut best: Option<(Instant, u64, Duration)> = None;
    for _ in 0..50 {
        let a = Instant::now();
        let ns = monotonic_ns();
        let b = Instant::now();
        let width = b - a;
        if best.is_none_or(|(_, _, w)| width < w) {
            best = Some((a + width / 2, ns, width));
        }
    }
    let (base, base_ns, _) = best.expect("sampled");
    move |t: Instant| {
        if t >= base {
            base_ns as i128 + (t - base).as_nanos() as i128
        } else {
            base_ns as i128 - (base - t).as_nanos() as i128
        }
    }
}

/// `TIMING_ERROR_TX=kernel`: TTFT starts at the kernel's transmit time.
fn tx_clock() -> TxClock {
    match std::env::var("TIMING_ERROR_TX").as_deref() {
        Ok("kernel") => TxClock::Kernel,
        _ => TxClock::User,
    }
}

fn report(
    name: &str,
    clock: RxClock,
    records: &[(RequestRecord, Instant)],
    emitted: &HashMap<u64, (u64, Vec<u64>)>,
) {
    let to_ns = instant_to_ns();
    let mut ttft_err = Vec::new();
    let mut itl_err = Vec::new();
    let mut lateness = Vec::new();
    let mut over_server = Vec::new();
    let mut unmatched = 0;
    let mut failed = 0;
    for (r, run_start) in records {
        let Some(ttft) = r.ttft.filter(|_| r.is_ok()) else {
            failed += 1;
            continue;
        };
        let Some((arrived, frames)) = emitted.get(&r.id) else {
            unmatched += 1;
            continue;
        };
        if frames.len() != r.itl_ms.len() + 1 {
            unmatched += 1;
            continue;
        }
        let t0 = to_ns(*run_start + r.start);
        let mut arrival = t0 as f64 + ttft.as_nanos() as f64;
        let first = (arrival - frames[0] as f64) / 1e6;
        ttft_err.push(first);
        lateness.push(first);
        let server_ttft = frames[0] as f64 - *arrived as f64;
        over_server.push((ttft.as_nanos() as f64 - server_ttft) / 1e6);
        for (k, gap_ms) in r.itl_ms.iter().enumerate() {
            arrival += gap_ms * 1e6;
            let late = (arrival - frames[k + 1] as f64) / 1e6;
            lateness.push(late);
            let emitted_gap = (frames[k + 1] - frames[k]) as f64 / 1e6;
            itl_err.push((gap_ms - emitted_gap).abs());
        }
    }
    let cell = |v: &mut Vec<f64>| -> String {
        if v.is_empty() {
            return "-".into();
        }
        v.sort_by(f64::total_cmp);
        let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        format!("{:.3}/{:.3}/{:.3}", p(0.5), p(0.99), v[v.len() - 1])
    };
    if std::env::var_os("TIMING_ERROR_DEBUG").is_some() {
        debug_by_rank(records, emitted, &to_ns);
    }
    let chunks = lateness.len();
    // How late the client read (kernel runs only: user-space read time
    // minus the kernel's), and the share of output reads that carried more
    // than one chunk (each of those chunks got the read's one time).
    let mut rx_lag: Vec<f64> = records
        .iter()
        .flat_map(|(r, _)| r.rx_lag_ms.iter().map(|&v| f64::from(v)))
        .collect();
    let (coalesced, reads) = records.iter().fold((0u64, 0u64), |(c, n), (r, _)| {
        (
            c + u64::from(r.coalesced_reads),
            n + u64::from(r.output_reads),
        )
    });
    let coalesced = if reads > 0 {
        format!("{:.2}%", coalesced as f64 * 100.0 / reads as f64)
    } else {
        "-".into()
    };
    let clock_used = records
        .iter()
        .filter(|(r, _)| r.is_ok() && r.rx_clock != clock)
        .count();
    let mut tx_shift: Vec<f64> = records
        .iter()
        .filter_map(|(r, _)| Some(r.tx_shift?.as_secs_f64() * 1000.0))
        .collect();
    let tx_fell_back = records
        .iter()
        .filter(|(r, _)| r.is_ok() && r.tx_clock != tx_clock())
        .count();
    println!(
        "{:>13} {:>6} {:>7} {:>8} | {:>21} | {:>21} | {:>21} | {:>21} | {:>9} | {:>21} | {:>21}",
        name,
        clock.as_str(),
        records.len(),
        chunks,
        cell(&mut ttft_err),
        cell(&mut itl_err),
        cell(&mut lateness),
        cell(&mut rx_lag),
        coalesced,
        cell(&mut over_server),
        cell(&mut tx_shift)
    );
    if tx_fell_back > 0 {
        println!("       ({tx_fell_back} requests did not get the asked send clock)");
    }
    if unmatched + failed > 0 {
        println!("       ({failed} requests failed, {unmatched} not matched to the emission log)");
    }
    if clock_used > 0 {
        println!("       ({clock_used} requests fell back to the other clock)");
    }
}

/// `CASES`, or `TIMING_ERROR_LEVELS=256x1,1024x1,256x2s` (streams x rounds,
/// `s`: starved).
fn cases() -> Vec<Case> {
    let Ok(text) = std::env::var("TIMING_ERROR_LEVELS") else {
        return CASES.to_vec();
    };
    text.split(',')
        .map(|level| {
            let level = level.trim();
            let (level, starved) = match level.strip_suffix('s') {
                Some(l) => (l, true),
                None => (level, false),
            };
            let (c, r) = level.split_once('x').unwrap_or((level, "1"));
            let parse = |v: &str| {
                v.parse()
                    .expect("TIMING_ERROR_LEVELS: streams x rounds [s]")
            };
            Case {
                streams: parse(c),
                rounds: parse(r),
                starved,
            }
        })
        .collect()
}

/// A busy loop on the client's core, at the client's priority (a thread of
/// this process): the scheduler then gives the client about half the core.
/// Stops when dropped.
struct Hog {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Hog {
    fn start(pinned: bool) -> Hog {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            if pinned {
                pin_to_core(0);
            }
            let mut x = 0u64;
            while !flag.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
        Hog {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Messages of the floor row: one every step, 5 s in all.
const FLOOR_MESSAGES: usize = 250;

/// The machine's own floor: a plain blocking loopback TCP connection, the
/// writer thread on the simulator's core and the reader on the client's, one
/// 8-byte message (its write time) every step. No runtime, no parsing: the
/// lateness of its reads (p50/p99/max) is what any client on this machine
/// would see at least, the kernel's and the (virtual) machine's wake-up time.
fn floor_lateness(pinned: bool) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let writer = std::thread::spawn(move || {
        if pinned {
            pin_to_core(1);
        }
        let (mut socket, _) = listener.accept().expect("accept");
        let _ = socket.set_nodelay(true);
        let start = Instant::now();
        for k in 1..=FLOOR_MESSAGES {
            let due = start + Duration::from_secs_f64(STEP_MS / 1000.0 * k as f64);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            socket
                .write_all(&monotonic_ns().to_le_bytes())
                .expect("write");
        }
    });
    let mut socket = std::net::TcpStream::connect(addr).expect("connect");
    let mut late = Vec::with_capacity(FLOOR_MESSAGES);
    let mut message = [0u8; 8];
    for _ in 0..FLOOR_MESSAGES {
        socket.read_exact(&mut message).expect("read");
        let now = monotonic_ns();
        late.push(now.saturating_sub(u64::from_le_bytes(message)) as f64 / 1e6);
    }
    writer.join().expect("writer");
    late.sort_by(f64::total_cmp);
    let p = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
    format!("{:.3}/{:.3}/{:.3}", p(0.5), p(0.99), late[late.len() - 1])
}

/// Pin the calling thread (and the threads it starts later) to one core.
fn pin_to_core(core: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it
    // and sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "note: could not pin to core {core}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Raise the open-file limit to its hard limit (1,024 streams need more than the
/// usual soft 1,024). Returns the limit in force.
fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
        lim.rlim_cur as u64
    }
}

/// Lateness by the chunk's rank among the frames the simulator emitted in the
/// same step (debugging: a client backlog shows as lateness growing with rank).
fn debug_by_rank(
    records: &[(RequestRecord, Instant)],
    emitted: &HashMap<u64, (u64, Vec<u64>)>,
    to_ns: &impl Fn(Instant) -> i128,
) {
    let mut all: Vec<(u64, f64)> = Vec::new();
    for (r, run_start) in records {
        let (Some(ttft), Some((_, frames))) = (r.ttft, emitted.get(&r.id)) else {
            continue;
        };
        if frames.len() != r.itl_ms.len() + 1 {
            continue;
        }
        let mut arrival = to_ns(*run_start + r.start) as f64 + ttft.as_nanos() as f64;
        all.push((frames[0], (arrival - frames[0] as f64) / 1e6));
        for (k, gap) in r.itl_ms.iter().enumerate() {
            arrival += gap * 1e6;
            all.push((frames[k + 1], (arrival - frames[k + 1] as f64) / 1e6));
        }
    }
    all.sort_by_key(|a| a.0);
    let mut worst: Vec<(f64, u64)> = all.iter().map(|&(t, late)| (late, t)).collect();
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    let t_first = all.first().map_or(0, |a| a.0);
    for (late, t) in worst.iter().take(12) {
        eprintln!(
            "  late {late:.3} ms at {:.3} ms (emission gap before it {:.3} ms)",
            (t - t_first) as f64 / 1e6,
            all.iter()
                .rev()
                .find(|a| a.0 < *t)
                .map_or(0.0, |a| (t - a.0) as f64 / 1e6)
        );
    }
    // Steps: emissions more than 5 ms apart start a new one.
    let mut by_rank: Vec<Vec<f64>> = vec![Vec::new(); 8];
    let mut spreads = Vec::new();
    let mut start = 0;
    for i in 1..=all.len() {
        if i == all.len() || all[i].0 - all[i - 1].0 > 5_000_000 {
            let n = i - start;
            spreads.push((all[i - 1].0 - all[start].0) as f64 / 1e6);
            for (j, (_, late)) in all[start..i].iter().enumerate() {
                by_rank[j * 8 / n.max(1)].push(*late);
            }
            start = i;
        }
    }
    spreads.sort_by(f64::total_cmp);
    eprintln!(
        "  steps {}, emission spread within a step p50 {:.3} max {:.3} ms",
        spreads.len(),
        spreads[spreads.len() / 2],
        spreads[spreads.len() - 1]
    );
    for (i, v) in by_rank.iter_mut().enumerate() {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            continue;
        }
        eprintln!(
            "  rank octile {i}: lateness p50 {:.3} p99 {:.3} max {:.3}",
            v[v.len() / 2],
            v[(v.len() - 1) * 99 / 100],
            v[v.len() - 1]
        );
    }
}
