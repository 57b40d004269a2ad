//! Each subcommand's `--help` ends with examples. A test parses each and
//! puts it through its command's own checks (`tests/it/help_checks.rs`),
//! so an example is a command that works.

/// `tokbench sweep --help` ends with these; a test parses each.
pub const EXAMPLES_SWEEP: &str = "Examples:
  tokbench sweep --base-url http://127.0.0.1:8000 --concurrency 1,4,16,64
  tokbench sweep --base-url http://127.0.0.1:11434 --backend ollama-generate --concurrency 1,2,4
  tokbench sweep --base-url http://127.0.0.1:8000 --find-capacity --slo-ttft-p99-ms 500
  tokbench sweep --base-url http://127.0.0.1:8000 --concurrency 1,4,16 --num-prompts 64 --threshold 'ttft_p99_ms<500@16' --threshold 'capacity>=4'

Exit codes: 0 finished, every --threshold held; 1 could not start or failed to measure; 99 measured, but a --threshold failed; 130 interrupted, results saved.";

/// `tokbench sim --help` ends with these; a test parses each.
pub const EXAMPLES_SIM: &str = "Examples:
  tokbench sim --port 8000
  tokbench sim --port 8080 --engine llamacpp --max-num-seqs 4";

/// `tokbench tune --help` ends with these; a test parses each.
pub const EXAMPLES_TUNE: &str = "Examples:
  tokbench tune --serve-cmd 'llama-server -m model.gguf --port {port} -np {np} --metrics' --grid np=1,2,4,8 --concurrency 1,4,16
  tokbench tune --serve-cmd 'ollama serve' --serve-port 11434 --serve-env 'OLLAMA_HOST=127.0.0.1:11434' --serve-env 'OLLAMA_NUM_PARALLEL={np}' --grid np=1,2,4 --backend ollama-generate --concurrency 1,4

Exit codes: 0 finished, every --threshold held by the setting to keep; 1 could not start or failed to measure; 99 the setting to keep failed a --threshold (every setting's verdicts are in summary.json); 130 interrupted, results saved.";

/// `tokbench demo --help` ends with these; a test parses each.
pub const EXAMPLES_DEMO: &str = "Examples:
  tokbench demo
  tokbench demo --concurrency 1,8,32 --no-tui

Exit codes: 0 finished, every --threshold held; 1 could not start or failed to measure; 99 measured, but a --threshold failed; 130 interrupted, results saved.";

/// `tokbench report --help` ends with these; a test parses each.
pub const EXAMPLES_REPORT: &str = "Examples:
  tokbench report results/20261201-100000
  tokbench report results/20261201-100000 --format html -o report.html";

/// `tokbench compare --help` ends with these; a test parses each.
pub const EXAMPLES_COMPARE: &str = "Examples:
  tokbench compare results/before results/after
  tokbench compare results/np1 results/np2 results/np4 --force
  tokbench compare results/main results/pr --fail-on-regression 5 --format markdown";

/// `tokbench view --help` ends with these; a test parses each.
pub const EXAMPLES_VIEW: &str = "Examples:
  tokbench view results/20261201-100000
  tokbench view results/h100-run --follow";

/// `tokbench merge --help` ends with these; a test parses each.
pub const EXAMPLES_MERGE: &str = "Examples:
  tokbench merge results/run-a/shard-0 results/run-a/shard-1 -o results/run-a/merged";

/// `tokbench completions --help` ends with these; a test parses each.
pub const EXAMPLES_COMPLETIONS: &str = "Examples:
  tokbench completions bash > ~/.local/share/bash-completion/completions/tokbench
  tokbench completions zsh > ~/.zfunc/_tokbench";

/// `tokbench man --help` ends with these; a test parses each.
pub const EXAMPLES_MAN: &str = "Examples:
  tokbench man | man -l -
  tokbench man sweep | man -l -";

/// Every subcommand's examples, for the tests that parse and check them.
pub const ALL_EXAMPLES: [&str; 11] = [
    EXAMPLES_SWEEP,
    EXAMPLES_SIM,
    EXAMPLES_TUNE,
    EXAMPLES_DEMO,
    EXAMPLES_REPORT,
    EXAMPLES_COMPARE,
    EXAMPLES_VIEW,
    EXAMPLES_MERGE,
    EXAMPLES_COMPLETIONS,
    EXAMPLES_MAN,
    super::predict::EXAMPLES_PREDICT,
];
