//! What the server says of itself, read into the verdict: the knee's cause
//! from its own running and waiting gauges, and its slot count from its
//! own busy slots where the client's streaming count undercounts.

use tokbench::sim::{EmissionLog, SimConfig, SimEngine};

use crate::support::{against_server, paced, read_json, scratch, stderr, tokbench, Sim};

fn sweep(sim: &Sim, name: &str, extra: &[&str]) -> serde_json::Value {
    sweep_in(sim, name, extra).0
}

/// [`sweep`], and the folder its results are in.
fn sweep_in(sim: &Sim, name: &str, extra: &[&str]) -> (serde_json::Value, std::path::PathBuf) {
    let dir = scratch("server_account", name);
    let d = dir.display().to_string();
    let url = sim.url();
    let mut args = vec![
        "sweep",
        "--base-url",
        &url,
        "--probe-interval",
        "0.1",
        "--warmup",
        "1",
        "--seed",
        "3",
        "--no-tui",
        "--result-dir",
        &d,
    ];
    args.extend(extra);
    let out = tokbench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    (read_json(&dir.join("summary.json")), dir)
}

/// vLLM at `--max-num-seqs 2` from 2 to 4 streams: the server's gauges
/// say running 2 both times while 2 wait, so the knee names the batch cap,
/// not the client's guess "KV cache or batch full".
#[test]
fn the_knee_at_the_batch_cap_is_told_by_the_servers_gauges() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 2,
        ..paced(5.0, 0.0)
    });
    let summary = sweep(
        &sim,
        "batch-cap",
        &[
            "--concurrency",
            "1,2,4",
            "--num-prompts",
            "24",
            "--random-input-len",
            "32",
            "--random-output-len",
            "48",
        ],
    );
    let knee = &summary["knee"];
    assert_eq!(
        (
            knee["from_concurrency"].as_u64(),
            knee["to_concurrency"].as_u64()
        ),
        (Some(2), Some(4)),
        "{summary}"
    );
    let reason = knee["reason"].as_str().unwrap_or_default();
    // 2 wait while both run; 3 in the instant a new request arrives
    // before the next step admits the one that waited.
    let waiting = reason
        .split_once("the server runs 2 at a time while up to ")
        .and_then(|(_, rest)| rest.strip_suffix(" wait (the batch cap; KV 0%)"))
        .and_then(|n| n.parse::<u32>().ok());
    assert!(matches!(waiting, Some(2 | 3)), "{reason}");
    assert!(!reason.contains("KV cache or batch full"), "{reason}");
}

/// llama.cpp with 2 slots and a prefill four times its decode: a request
/// in prefill holds a slot with no token yet, so the client sees about one
/// streaming; the server's busy slots say 2, and the diagnosis says 2. Its
/// waiting splits into queued and in prefill as the simulator's log says.
#[test]
fn a_long_prefill_still_gives_the_true_slot_count() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        engine: SimEngine::Llamacpp,
        parallel: Some(2),
        emission_log: Some(log.clone()),
        ..paced(4.0, 400.0)
    });
    let (summary, dir) = sweep_in(
        &sim,
        "prefill",
        &[
            "--concurrency",
            "2,4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "1024",
            "--random-output-len",
            "16",
        ],
    );
    let diagnoses = summary["diagnoses"].as_array().cloned().unwrap_or_default();
    let slot = diagnoses
        .iter()
        .find(|d| d["id"] == "slot_queueing")
        .unwrap_or_else(|| panic!("no slot diagnosis: {summary}"));
    let message = slot["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the server runs about 2 at a time")
            && message.contains("the server's own gauges: 2 running of 2 slots"),
        "{message}"
    );
    assert_eq!(slot["evidence"]["server_running"], 2.0, "{slot}");
    // Its knee is the batch cap too, with llama.cpp's flag. At 8 streams
    // 6 wait while both slots run, 7 in the instant between one leaving
    // and the next entering: the most over the scrapes is one of them.
    let reason = summary["knee"]["reason"].as_str().unwrap_or_default();
    let waiting = reason
        .split_once("the server runs 2 at a time while up to ")
        .and_then(|(_, rest)| rest.strip_suffix(" wait (the batch cap, -np 2)"))
        .and_then(|n| n.parse::<u32>().ok());
    assert!(matches!(waiting, Some(6 | 7)), "{reason}");
    let streams = log.take();
    for c in [2, 4, 8] {
        waiting_split_matches_the_log(&dir, &streams, c, 4.0);
    }
}

/// Ollama with 2 parallel slots and a long prefill: Ollama tells no slots
/// and no queue, so the client's streaming count alone would say about one
/// slot; with its prefill times, streaming plus in prefill says 2, and the
/// waiting splits into queued and in prefill as the simulator's log says.
#[test]
fn ollamas_prefill_times_give_its_slots_and_its_queue() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        engine: SimEngine::Ollama,
        parallel: Some(2),
        emission_log: Some(log.clone()),
        ..paced(4.0, 400.0)
    });
    let (summary, dir) = sweep_in(
        &sim,
        "ollama-prefill",
        &[
            "--backend",
            "ollama-generate",
            "--concurrency",
            "2,4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "1024",
            "--random-output-len",
            "16",
        ],
    );
    let diagnoses = summary["diagnoses"].as_array().cloned().unwrap_or_default();
    let slot = diagnoses
        .iter()
        .find(|d| d["id"] == "slot_queueing")
        .unwrap_or_else(|| panic!("no slot diagnosis: {summary}"));
    let message = slot["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("requests are waiting for a slot: OLLAMA_NUM_PARALLEL is probably about 2; effective parallel slots about 2 (slots in use ~2: requests streaming or in prefill at once"),
        "{message}"
    );
    let streams = log.take();
    for c in [2, 4, 8] {
        waiting_split_matches_the_log(&dir, &streams, c, 4.0);
    }
}

/// A level's waiting, split by the server's prefill times, against what the
/// simulator logged of the same requests: when each reached the server,
/// got its slot (admission) and had its first token handed over. On one
/// clock, per request: the server's prefill (`prompt_ms`) is at most the
/// log's slot-to-first-token time, and short of it by the first step's
/// decode (`step_ms`) and the engine's wake-up; the client's queued time
/// (its TTFT less that prefill) is the log's arrival-to-slot time, plus
/// the client's own overhead (its TTFT less the log's), plus that same
/// rest of the first step. The level's means are those times over its
/// duration, to a millisecond's grid per request.
fn waiting_split_matches_the_log(
    dir: &std::path::Path,
    streams: &[tokbench::sim::StreamEmissions],
    concurrency: u64,
    step_ms: f64,
) {
    use std::collections::HashMap;
    let by_id: HashMap<u64, &tokbench::sim::StreamEmissions> = streams
        .iter()
        .filter_map(|s| {
            Some((
                tokbench::load::request::record_id_of_request_id(&s.request)?,
                s,
            ))
        })
        .collect();
    let level = read_json(&dir.join(format!("sweep-c{concurrency}.json")));
    let duration_ms = level["duration"].as_f64().expect("duration") * 1000.0;
    let jsonl = std::fs::read_to_string(dir.join("requests.jsonl")).expect("requests.jsonl");
    let ms = |ns: u64| ns as f64 / 1e6;
    let (mut n, mut prompt, mut slot_to_first, mut queue, mut overhead) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for line in jsonl.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        if r["concurrency"].as_u64() != Some(concurrency) {
            continue;
        }
        let s = by_id
            .get(&r["id"].as_u64().expect("id"))
            .unwrap_or_else(|| panic!("request {} not in the log", r["id"]));
        let admitted = s.admitted_ns.expect("the simulator logs each admission");
        let first = s.t_ns[0];
        n += 1.0;
        prompt += r["server_timings"]["prompt_ms"]
            .as_f64()
            .expect("prompt_ms");
        slot_to_first += ms(first - admitted);
        queue += ms(admitted - s.arrived_ns);
        overhead += r["ttft_ms"].as_f64().expect("ttft") - ms(first - s.arrived_ns);
    }
    assert_eq!(
        n, 16.0,
        "c{concurrency}: every request of the level in the log"
    );
    let waiting = &level["waiting"];
    let in_prefill = waiting["in_prefill_mean"]
        .as_f64()
        .expect("in_prefill_mean")
        * duration_ms;
    let queued = waiting["queued_mean"].as_f64().expect("queued_mean") * duration_ms;
    let grid = n * 1.0;
    // What a loaded box may add to a step, on average per request.
    let late = n * 5.0;
    eprintln!(
        "c{concurrency}: in prefill {in_prefill:.0} ms (server said {prompt:.0}, log slot-to-first {slot_to_first:.0}), \
         queued {queued:.0} ms (log arrival-to-slot {queue:.0}, client overhead {overhead:.1}), over {duration_ms:.0} ms"
    );
    assert!(
        (in_prefill - prompt).abs() <= grid,
        "c{concurrency}: {in_prefill} vs {prompt}"
    );
    assert!(
        prompt <= slot_to_first + 0.01 && slot_to_first - prompt <= n * step_ms + late,
        "c{concurrency}: the server's prefill {prompt} against the log's {slot_to_first}"
    );
    let rest_of_step = slot_to_first - prompt;
    assert!(
        queued >= queue - grid && queued <= queue + overhead + rest_of_step + grid,
        "c{concurrency}: queued {queued} against the log's {queue} (+{overhead} +{rest_of_step})"
    );
}

/// A level file's `server_account`, and a number in it.
fn account(dir: &std::path::Path, concurrency: u32) -> serde_json::Value {
    read_json(&dir.join(format!("sweep-c{concurrency}.json")))["server_account"].clone()
}

/// The vLLM simulator's own histograms are filled from the frame times of
/// its emission log, so what tokbench reads of them over a level is what
/// the log says of that level's requests: the server's TTFT mean to the
/// microsecond (a mean is exact from a histogram's sum and count), the
/// client's gap to it the log's own, never negative on one clock, and the
/// request and token counts the client's.
#[test]
fn the_servers_own_ttft_and_counts_are_its_emission_logs() {
    let log = EmissionLog::in_memory();
    let sim = Sim::with(SimConfig {
        emission_log: Some(log.clone()),
        ..paced(4.0, 10.0)
    });
    let dir = scratch("server_account", "emission");
    let d = dir.display().to_string();
    let url = sim.url();
    let out = tokbench([
        "sweep",
        "--base-url",
        &url,
        "--probe-interval",
        "0.1",
        "--warmup",
        "1",
        "--seed",
        "3",
        "--no-tui",
        "--result-dir",
        &d,
        "--concurrency",
        "1,4",
        "--num-prompts",
        "8",
        "--random-input-len",
        "200",
        "--random-output-len",
        "16",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let measured = against_server(&dir, &log.take());
    assert_eq!(measured.len(), 16, "every request matched to its stream");
    for c in [1u32, 4] {
        let acc = account(&dir, c);
        let mine: Vec<_> = measured
            .iter()
            .filter(|r| r.concurrency == u64::from(c))
            .collect();
        let n = mine.len() as f64;
        let log_server = mine.iter().map(|r| r.server_ttft_ms).sum::<f64>() / n;
        let log_client = mine.iter().map(|r| r.client_ttft_ms).sum::<f64>() / n;
        let server = acc["ttft_ms"]["mean"].as_f64().expect("server TTFT mean");
        eprintln!(
            "c{c}: server TTFT mean {server:.3} ms (log {log_server:.3}), client {log_client:.3}: \
             {:.3} ms outside the engine",
            log_client - server
        );
        assert_eq!(acc["ttft_ms"]["count"], 8.0, "{acc}");
        // Rounded to 3 places in the file; summed in nanoseconds by the server.
        assert!(
            (server - log_server).abs() < 0.002,
            "{server} vs {log_server}"
        );
        assert!(
            log_client >= server,
            "one clock: the client's TTFT includes the server's"
        );
        // The p50 is bounded by the buckets either side of the log's median.
        let p50 = &acc["ttft_ms"]["p50"];
        let (from, to) = (
            p50["from_ms"].as_f64().expect("from"),
            p50["to_ms"].as_f64().expect("to"),
        );
        let mut ttfts: Vec<f64> = mine.iter().map(|r| r.server_ttft_ms).collect();
        ttfts.sort_by(f64::total_cmp);
        assert!(
            ttfts[3] > from - 1e-9 && ttfts[3] <= to + 1e-9,
            "log median {} outside the bucket {from}..{to}",
            ttfts[3]
        );
        assert_eq!(acc["requests"], 8.0, "{acc}");
        assert_eq!(acc["other_traffic"], false, "{acc}");
        assert_eq!(acc["generation_tokens"], 8.0 * 16.0, "{acc}");
        let lines: Vec<&str> = acc["lines"]
            .as_array()
            .map(|a| a.iter().filter_map(|l| l.as_str()).collect())
            .unwrap_or_default();
        assert!(
            lines.iter().any(|l| l.starts_with("TTFT mean: client ")
                && l.contains(" ms (queue ")
                && l.ends_with(" ms outside the engine")),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"requests: the server counted 8, this client 8: no other traffic"),
            "{lines:?}"
        );
    }
}

/// A second client sends three requests to the same server while the
/// first level runs: the server counts three more than tokbench there, and
/// the level says another client is using the server. The others do not.
#[test]
fn a_second_client_during_a_level_fires_the_count_check() {
    let sim = Sim::with(paced(5.0, 0.0));
    let url = sim.url();
    let dir = scratch("server_account", "second-client");
    let d = dir.display().to_string();
    let args: Vec<String> = [
        "sweep",
        "--base-url",
        &url,
        "--probe-interval",
        "0.1",
        "--warmup",
        "1",
        "--seed",
        "3",
        "--no-tui",
        "--result-dir",
        &d,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "24",
        "--random-input-len",
        "32",
        "--random-output-len",
        "32",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let sweep = std::thread::spawn(move || tokbench(&args));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::new();
        // The first level has begun once the server finished the warmup and
        // two more.
        let finished = |text: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with("vllm:request_success_total{"))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        loop {
            let text = match client.get(format!("{url}/metrics")).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if finished(&text) >= 3.0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let one = || {
            let client = client.clone();
            let url = url.clone();
            async move {
                let body = serde_json::json!({
                    "model": "sim", "prompt": "another client", "max_tokens": 4, "stream": true
                });
                let r = client
                    .post(format!("{url}/v1/completions"))
                    .json(&body)
                    .send()
                    .await
                    .expect("the second client is answered");
                assert!(r.status().is_success());
                r.bytes().await.expect("its stream ends")
            }
        };
        futures_util::future::join_all([one(), one(), one()]).await;
    });
    let out = sweep.join().expect("the sweep thread");
    assert!(out.status.success(), "{}", stderr(&out));
    let (first, second) = (account(&dir, 1), account(&dir, 2));
    eprintln!("c1: {}\nc2: {}", first["lines"], second["lines"]);
    assert_eq!(first["requests"], 24.0 + 3.0, "{first}");
    assert_eq!(first["other_traffic"], true, "{first}");
    assert!(
        first["lines"].as_array().is_some_and(|l| l.iter().any(|l| l
            == "the server finished 27 requests during this level, this client 24 (0 failed): another client is using the server, and its figures include that load")),
        "{first}"
    );
    assert_eq!(second["requests"], 24.0, "{second}");
    assert_eq!(second["other_traffic"], false, "{second}");
}
