//! The notes audit: each traffic mode run once, short, on the simulator,
//! and what it printed read against what it asked for
//! (`support::audit`): no note about an asked length where none was asked,
//! no `ignore_eos` where the server cannot honour it, no `level k/n` with
//! k past n, every table row with its series, rate levels whose streams
//! are counted. A restart with two series is audited in
//! `tuning::ollama_restart_starts_a_second_series`, which already drives
//! one in the live view.

use std::path::{Path, PathBuf};
use std::process::Output;

use tokbench::sim::{SimConfig, SimEngine, SimHandle};

use crate::support::audit::{assert_true_to_the_run, contradictions, Asked};
use crate::support::{self, bin, paced, text, tokbench_async};

fn scratch(name: &str) -> PathBuf {
    support::scratch_path("audit", name)
}

fn fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

/// One run of `tokbench sweep` against `sim` into `dir`, headless; it must
/// succeed. What it printed, stdout and stderr together.
async fn sweep(sim: &SimHandle, dir: &Path, extra: &[&str]) -> String {
    let mut args: Vec<String> = [
        "sweep",
        "--base-url",
        &format!("http://{}", sim.addr),
        "--no-tui",
        "--warmup",
        "1",
        "--result-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = tokbench_async(args).await;
    assert!(out.status.success(), "tokbench {extra:?}: {}", text(&out));
    printed(&out)
}

fn printed(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A token every 2 ms, no prefill cost: short runs whatever the shape.
fn quick() -> SimConfig {
    paced(2.0, 0.0)
}

const LENGTHS: [&str; 4] = ["--random-input-len", "32", "--random-output-len", "16"];

const SHORT: [&str; 6] = [
    "--random-input-len",
    "32",
    "--random-output-len",
    "16",
    "--concurrency",
    "1,2",
];

/// One sweep of `flags` against a fresh simulator of `config`, what it
/// printed audited against `asked`; the simulator and the folder gone after.
async fn audit_sweep(what: &str, name: &str, config: SimConfig, flags: &[&str], asked: Asked) {
    let sim = support::start_sim(config).await;
    let dir = scratch(name);
    let out = sweep(&sim, &dir, flags).await;
    assert_true_to_the_run(what, &out, &asked);
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lengths() {
    let flags = [&SHORT[..], &["--num-prompts", "6"]].concat();
    audit_sweep("fixed lengths", "fixed", quick(), &flags, Asked::fixed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset() {
    let dataset = fixture("datasets/requests.jsonl");
    let flags = [
        "--dataset",
        &dataset,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "4",
    ];
    let asked = Asked {
        one_prompt_length: false,
        one_answer_length: false,
        ..Asked::fixed()
    };
    audit_sweep("--dataset", "dataset", quick(), &flags, asked).await;
}

/// A log of mixed lengths replayed: no one length was asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_mixed_lengths() {
    let sim = support::start_sim(quick()).await;
    let dir = scratch("replay");
    std::fs::create_dir_all(&dir).expect("scratch");
    let log = dir.join("log.jsonl");
    let lines: Vec<String> = [(0.0, 64, 16), (0.05, 20, 8), (0.1, 40, 24)]
        .iter()
        .map(|(t, input, output)| {
            format!(r#"{{"t": {t}, "input_len": {input}, "output_len": {output}}}"#)
        })
        .collect();
    std::fs::write(&log, lines.join("\n")).expect("log");
    let results = dir.join("results");
    // Lengths typed too, as a user switching a sweep to a replay would
    // leave them: the log's lengths are the ones sent, not these.
    let out = sweep(
        &sim,
        &results,
        &[
            "--replay",
            &log.display().to_string(),
            "--random-input-len",
            "64",
            "--random-output-len",
            "16",
        ],
    )
    .await;
    let asked = Asked {
        one_prompt_length: false,
        one_answer_length: false,
        replay: true,
        ..Asked::fixed()
    };
    assert_true_to_the_run("--replay of a mixed-length log", &out, &asked);
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mooncake_trace() {
    let trace = fixture("traces/mooncake_small.jsonl");
    let flags = [
        "--replay",
        &trace,
        "--trace-format",
        "mooncake",
        "--trace-block-tokens",
        "16",
    ];
    let asked = Asked {
        one_prompt_length: false,
        one_answer_length: false,
        replay: true,
        repeats_by_design: true,
        ..Asked::fixed()
    };
    audit_sweep("a Mooncake trace", "mooncake", quick(), &flags, asked).await;
}

/// Each turn re-sends the conversation: the prompt grows, by design.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns() {
    let flags = [&SHORT[..], &["--num-prompts", "8", "--turns", "4"]].concat();
    let asked = Asked {
        one_prompt_length: false,
        repeats_by_design: true,
        ..Asked::fixed()
    };
    audit_sweep("--turns 4", "turns", quick(), &flags, asked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prefix() {
    let flags = [&SHORT[..], &["--num-prompts", "6", "--prefix-len", "16"]].concat();
    let asked = Asked {
        repeats_by_design: true,
        ..Asked::fixed()
    };
    audit_sweep("--prefix-len", "prefix", quick(), &flags, asked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop() {
    let flags = [
        &LENGTHS[..],
        &["--request-rate", "20,40", "--num-prompts", "20"],
    ]
    .concat();
    audit_sweep("--request-rate", "open", quick(), &flags, Asked::fixed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ramp() {
    let ramp = [
        "--ramp",
        "linear",
        "--ramp-from",
        "2",
        "--ramp-to",
        "10",
        "--ramp-duration",
        "3",
    ];
    let flags = [&LENGTHS[..], &ramp[..]].concat();
    audit_sweep("--ramp", "ramp", quick(), &flags, Asked::fixed()).await;
}

/// 8 batch slots: the search doubles past them, then bisects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_search() {
    let eight_slots = SimConfig {
        max_num_seqs: 8,
        ..quick()
    };
    let flags = [
        &LENGTHS[..],
        &["--find-capacity", "--prompts-per-stream", "2"],
    ]
    .concat();
    audit_sweep(
        "--find-capacity",
        "search",
        eight_slots,
        &flags,
        Asked::fixed(),
    )
    .await;
}

/// Ollama ends answers at its own end of sequence: it cannot be told
/// `ignore_eos`, through its own API or its OpenAI one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_with_its_end_of_sequence() {
    let sim = support::start_sim(SimConfig {
        engine: SimEngine::Ollama,
        parallel: Some(2),
        eos_mean_tokens: 8.0,
        load_ms: 0.0,
        ..quick()
    })
    .await;
    for backend in ["openai-chat", "ollama-chat"] {
        let dir = scratch(&format!("ollama-{backend}"));
        let out = sweep(
            &sim,
            &dir,
            &[
                &SHORT[..],
                &[
                    "--num-prompts",
                    "6",
                    "--backend",
                    backend,
                    "--model",
                    "llama3.2:1b",
                ],
            ]
            .concat(),
        )
        .await;
        let asked = Asked {
            ignore_eos_honoured: false,
            ..Asked::fixed()
        };
        assert_true_to_the_run(&format!("Ollama, {backend}"), &out, &asked);
        let _ = std::fs::remove_dir_all(&dir);
    }
    sim.shutdown().await;
}

/// Two settings of a tune: two series in one folder, and its tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tune_of_two_settings() {
    let dir = scratch("tune");
    let cmd = format!(
        "{} sim --port {{port}} --engine ollama --parallel {{np}} --step-ms 2",
        bin()
    );
    let args: Vec<String> = [
        "tune",
        "--serve-cmd",
        &cmd,
        "--grid",
        "np=1,2",
        "--concurrency",
        "1,2",
        "--num-prompts",
        "6",
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--warmup",
        "1",
        "--no-tui",
        "--result-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokbench_async(args).await;
    assert!(out.status.success(), "{}", text(&out));
    let asked = Asked {
        ignore_eos_honoured: false,
        series: &["np=1", "np=2"],
        ..Asked::fixed()
    };
    assert_true_to_the_run("tune np=1,2", &printed(&out), &asked);
    let report = tokbench_async(vec!["report".into(), dir.display().to_string()]).await;
    assert!(report.status.success(), "{}", text(&report));
    assert_true_to_the_run("report of the tune", &printed(&report), &asked);
    let _ = std::fs::remove_dir_all(&dir);
}

// The audit's own rules, on lines tokbench printed before they were true.

const TABLE: &str = "tokbench sweep, in 32 / out 64  (m)
 streams  tok/s/stream  total tok/s  TTFT p50 ms  TTFT p99 ms  failed  note
       1         408.3        408.3          3.5          3.8       0
       2         326.0        651.9          5.3          7.2       0
capacity: 2 streams: the highest level meeting the SLO; 100% of the peak 652 tok/s at 2 streams
";

#[test]
fn the_audit_passes_a_run_told_in_its_own_words() {
    assert_eq!(contradictions(TABLE, &Asked::fixed()), Vec::<String>::new());
}

#[test]
fn the_audit_names_each_contradiction() {
    let nothing_asked = Asked {
        one_prompt_length: false,
        one_answer_length: false,
        ignore_eos_honoured: false,
        repeats_by_design: true,
        ..Asked::fixed()
    };
    let cases = [
        (
            "note: prompts reached the model at 34 tokens on average, -47% off the 64 asked for",
            "prompt-length",
        ),
        (
            "note: 0 of 3 answers ended before 16 tokens (mean 13)",
            "answer-length",
        ),
        ("in 32 / out 64, profile custom, ignore_eos", "ignore_eos"),
        (
            "the prefix cache answered 98% of prompt tokens: prompts repeat, and TTFT reads lower",
            "on purpose",
        ),
        ("level 8/6 concurrency 20", "level 8 of 6"),
    ];
    for (line, caught) in cases {
        let found = contradictions(line, &nothing_asked);
        assert!(
            found.iter().any(|f| f.contains(caught)),
            "{line}: {found:?}"
        );
    }
    assert!(contradictions("level 6/6 concurrency 20", &nothing_asked).is_empty());
}

#[test]
fn the_audit_reads_tables_by_their_columns() {
    // Each line whole: a `\` continuation would eat the right alignment.
    let open = [
        " streams  tok/s/stream  total tok/s  TTFT p50 ms  TTFT p99 ms  failed  note",
        "      ~0          52.0         52.0          3.5          3.8       0  rate 2/s",
        "      ~3          40.0         40.0          3.5          3.8       0  replay",
    ]
    .join("\n");
    let found = contradictions(&open, &Asked::fixed());
    assert_eq!(found.len(), 3, "{found:?}");

    let two = Asked {
        series: &["series 1", "series 2"],
        ..Asked::fixed()
    };
    assert_eq!(contradictions(TABLE, &two).len(), 2, "two rows unlabelled");
    let by_heading = [
        " streams  tok/s/stream  total tok/s  TTFT p50 ms  TTFT p99 ms  failed  note",
        "series 1 (np=1)",
        "       1         408.3        408.3          3.5          3.8       0",
        "series 2 (np=2)",
        "       1         410.3        410.3          3.5          3.8       0",
    ]
    .join("\n");
    assert_eq!(contradictions(&by_heading, &two), Vec::<String>::new());

    let wrong_peak = TABLE.replace("peak 652", "peak 640");
    assert!(contradictions(&wrong_peak, &Asked::fixed())
        .iter()
        .any(|f| f.contains("not the table's")));
}
