//! Probe requests (`--probe-rate`): a steady trickle beside the load, on
//! connections of their own, that measures what a new user would wait for
//! and is counted in none of the level's own figures.

use std::collections::HashMap;

use tokbench::load::request::{probe_id_of_request_id, record_id_of_request_id};
use tokbench::sim::{EmissionLog, SimConfig, StreamEmissions};

use crate::support::{median, paced, read_json, scratch, stderr, tokbench, Sim};

const STEP_MS: f64 = 5.0;

/// The shortest time a load request (not a probe) spent in the server, by
/// its log: how long a probe held behind the load's cap would wait at least.
fn shortest_load_request_ms(streams: &[StreamEmissions]) -> f64 {
    streams
        .iter()
        .filter(|s| record_id_of_request_id(&s.request).is_some())
        .filter_map(|s| Some((s.t_ns.last()? - s.arrived_ns) as f64 / 1e6))
        .fold(f64::INFINITY, f64::min)
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// vLLM at `--max-num-seqs 2`: at 1 stream a probe finds a free slot, at
/// 4 streams two requests always wait and a probe queues behind them. The
/// probes are never held by the client (their own pool, no cap): they go
/// out on schedule, their TTFT is the server's queue as its emission log
/// says, and the levels' own figures hold the load's requests only, the
/// server's request count check included.
#[test]
fn probes_feel_the_servers_queue_and_leave_the_levels_alone() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        max_num_seqs: 2,
        emission_log: Some(log.clone()),
        ..paced(STEP_MS, 0.0)
    });
    let dir = scratch("probes", "queue");
    let (url, d) = (sim.url(), dir.display().to_string());
    let out = tokbench([
        "sweep",
        "--base-url",
        &url,
        "--concurrency",
        "1,4",
        "--num-prompts",
        "16",
        "--random-input-len",
        "32",
        "--random-output-len",
        "32",
        "--probe-rate",
        "20",
        "--probe-interval",
        "0.1",
        "--warmup",
        "1",
        "--seed",
        "5",
        "--no-tui",
        "--result-dir",
        &d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string() + &stderr(&out);
    assert!(
        printed.contains("probe: TTFT p50 "),
        "the level block has its probe line: {printed}"
    );

    // The log's probes, by their number: the server's own side of each.
    let streams = log.take();
    let by_probe: HashMap<u64, &StreamEmissions> = streams
        .iter()
        .filter_map(|s| Some((probe_id_of_request_id(&s.request)?, s)))
        .collect();
    // A probe held behind the load's cap would wait for a load request to
    // end: at least the shortest load request's time in the server, by the
    // log. Lateness is bounded against that, not against a fixed time a
    // loaded box's timer could miss.
    let load_hold_ms = shortest_load_request_ms(&streams);
    assert!(
        load_hold_ms.is_finite() && load_hold_ms >= 16.0 * STEP_MS,
        "the log has the load's requests: shortest {load_hold_ms} ms"
    );
    let probes = lines(&dir.join("probes.jsonl"));
    let requests = lines(&dir.join("requests.jsonl"));
    // Load requests only in requests.jsonl: 16 a level.
    assert_eq!(requests.len(), 32, "requests.jsonl holds the load only");

    let mut server_p50 = HashMap::new();
    for c in [1u64, 4] {
        let level = read_json(&dir.join(format!("sweep-c{c}.json")));
        // The level's own figures: its 16 requests, no probe among them.
        assert_eq!(level["completed"], 16, "c{c}: {level}");
        assert_eq!(level["num_prompts"], 16, "c{c}");
        let probe = &level["probe"];
        let count = probe["count"].as_u64().expect("probe count");
        assert!(
            count >= 5,
            "c{c}: a level of a second or more has probes: {probe}"
        );
        assert_eq!(probe["failed"], 0, "c{c}: {probe}");
        // Never held by the client: well inside the time a held probe
        // would wait for a load request to end.
        let lateness = probe["send_lateness_p99_ms"].as_f64().expect("lateness");
        assert!(
            lateness < load_hold_ms / 4.0,
            "c{c}: probes went out late (a load request holds {load_hold_ms} ms): {probe}"
        );
        eprintln!("c{c}: {count} probes, send lateness p99 {lateness} ms");

        let mine: Vec<&serde_json::Value> =
            probes.iter().filter(|p| p["concurrency"] == c).collect();
        assert_eq!(mine.len() as u64, count, "c{c}: each probe has its line");
        let mut server_ttfts = Vec::new();
        for p in &mine {
            let id = p["id"].as_u64().expect("id");
            let s = by_probe
                .get(&id)
                .unwrap_or_else(|| panic!("probe {id} not in the log"));
            let server_ms = (s.t_ns[0] - s.arrived_ns) as f64 / 1e6;
            let client_ms = p["ttft_ms"].as_f64().expect("ttft");
            // t0 is the schedule, which is at or before the request reached
            // the server; the first token reached the client after it left.
            assert!(
                client_ms + 0.001 >= server_ms,
                "c{c}: probe {id}: client TTFT {client_ms} under the server's {server_ms}"
            );
            assert!(
                p["send_lag_ms"].as_f64().expect("send lag") < load_hold_ms / 2.0,
                "{p}"
            );
            server_ttfts.push(server_ms);
        }
        server_p50.insert(c, median(&server_ttfts));

        // The server counted the probes too: the check adds them, and
        // does not take them for another client's requests.
        let account = &level["server_account"];
        assert_eq!(account["other_traffic"], false, "c{c}: {account}");
        assert_eq!(
            account["requests"].as_f64(),
            Some((16 + count) as f64),
            "c{c}: the server finished the load's and the probes': {account}"
        );
        // The server's TTFT mean holds the probes; the client's beside it
        // is over the same requests, and on one clock no shorter.
        let ttft_line = account["lines"][0].as_str().unwrap_or_default();
        let gap: f64 = ttft_line
            .strip_suffix(" ms outside the engine")
            .and_then(|l| l.rsplit(": ").next())
            .and_then(|g| g.parse().ok())
            .unwrap_or_else(|| panic!("c{c}: no gap read: {ttft_line}"));
        assert!(
            ttft_line.contains("(requests and probes)") && gap >= 0.0,
            "c{c}: {ttft_line}"
        );
        eprintln!("c{c}: {ttft_line}");
        let said = account["lines"].to_string();
        assert!(
            said.contains(&format!(
                "this client 16 and {count} probes: no other traffic"
            )),
            "c{c}: {said}"
        );
    }
    // At 4 streams a probe waits for a slot behind two others: by the
    // log's own times, far longer than at 1 stream, where it had a slot at
    // once (the load's requests hold a slot for 32 steps).
    let (calm, queued) = (server_p50[&1], server_p50[&4]);
    eprintln!("probe TTFT p50, server side: c1 {calm:.1} ms, c4 {queued:.1} ms");
    assert!(
        queued > calm + 10.0 * STEP_MS,
        "probes did not feel the queue: c1 {calm} ms, c4 {queued} ms"
    );
    let client_p50 = |c: u64| {
        read_json(&dir.join(format!("sweep-c{c}.json")))["probe"]["ttft"]["p50"]
            .as_f64()
            .expect("probe ttft p50")
    };
    eprintln!(
        "probe TTFT p50, client: c1 {:.1} ms, c4 {:.1} ms",
        client_p50(1),
        client_p50(4)
    );
    assert!(
        client_p50(4) >= queued,
        "the client's p50 at least the server's"
    );
}

/// Bad probe settings are refused in one line, before anything is sent.
#[test]
fn bad_probe_settings_are_one_line_errors() {
    for (flags, says) in [
        (&["--probe-rate", "0"][..], "--probe-rate 0 must be"),
        (&["--probe-rate=-2"][..], "--probe-rate -2 must be"),
        (&["--probe-rate", "NaN"][..], "--probe-rate NaN must be"),
        (
            &["--probe-rate", "1e9"][..],
            "--probe-rate 1000000000 must be",
        ),
        (
            &["--probe-rate", "2", "--probe-input-len", "0"][..],
            "--probe-input-len 0 must be",
        ),
        (
            &["--probe-rate", "2", "--probe-output-len", "0"][..],
            "--probe-output-len 0 must be",
        ),
    ] {
        let mut args = vec!["sweep", "--base-url", "http://127.0.0.1:9", "--no-tui"];
        args.extend(flags);
        let out = tokbench(&args);
        assert!(!out.status.success(), "{flags:?} was taken");
        let err = stderr(&out);
        assert!(err.contains(says), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{flags:?}: one line: {err}");
    }
}

/// Under open loop with its cap full (`--request-rate` well past what two
/// streams finish, `--max-concurrency 2`), the load's requests wait in the
/// client for a free stream; the probes do not wait with them: they go out
/// on schedule, far inside the time a load request holds its stream by the
/// log, and are counted in none of the level's figures.
#[test]
fn probes_are_not_held_by_a_full_open_loop_cap() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(log.clone()),
        ..paced(STEP_MS, 0.0)
    });
    let dir = scratch("probes", "open-loop");
    let (url, d) = (sim.url(), dir.display().to_string());
    let out = tokbench([
        "sweep",
        "--base-url",
        &url,
        "--request-rate",
        "40",
        "--max-concurrency",
        "2",
        "--num-prompts",
        "24",
        "--random-input-len",
        "32",
        "--random-output-len",
        "32",
        "--probe-rate",
        "20",
        "--warmup",
        "0",
        "--seed",
        "5",
        "--no-tui",
        "--result-dir",
        &d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let streams = log.take();
    let load_hold_ms = shortest_load_request_ms(&streams);
    assert!(load_hold_ms >= 16.0 * STEP_MS, "shortest {load_hold_ms} ms");
    let level = read_json(&dir.join("sweep-rate40.json"));
    assert_eq!(level["completed"], 24, "{level}");
    // The cap was full: the load's requests went out late by the client's
    // own account, by more than a load request's time at the p99.
    let load_lateness = level["send_lateness"]["p99_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("send lateness: {level}"));
    assert!(
        load_lateness > load_hold_ms,
        "the cap was not full: load lateness p99 {load_lateness} ms: {level}"
    );
    let probe = &level["probe"];
    let count = probe["count"].as_u64().expect("probe count");
    assert!(count >= 5, "{probe}");
    let lateness = probe["send_lateness_p99_ms"].as_f64().expect("lateness");
    eprintln!(
        "open loop, cap full: load send lateness p99 {load_lateness} ms, probes' {lateness} ms ({count} probes; a load request holds {load_hold_ms:.1} ms)"
    );
    assert!(
        lateness < load_hold_ms / 4.0,
        "probes held with the load: {probe}"
    );
    let probes = lines(&dir.join("probes.jsonl"));
    assert_eq!(probes.len() as u64, count);
    assert_eq!(lines(&dir.join("requests.jsonl")).len(), 24);
}
