//! Command-line definitions only (docs/architecture.md section 5). No behaviour lives here.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "tokbench",
    version,
    about = "Load-test an LLM inference server across a concurrency sweep and see what it really serves",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

mod compare;
mod examples;
pub use compare::{CompareArgs, CompareFormat, DEFAULT_REGRESSION_PCT};
pub use examples::*;
mod predict;
mod thresholds;
pub use predict::{PredictArgs, TunePredictArgs, EXAMPLES_PREDICT};
pub use thresholds::ThresholdArgs;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a concurrency sweep against a server.
    #[command(after_help = EXAMPLES_SWEEP)]
    Sweep(Box<SweepArgs>),
    /// Start the built-in simulated server (vLLM-like) in the foreground.
    #[command(after_help = EXAMPLES_SIM)]
    Sim(Box<SimArgs>),
    /// Tune a server setting: start the server at each --grid setting, sweep it, stop it, and say which setting to keep.
    #[command(after_help = EXAMPLES_TUNE)]
    Tune(Box<TuneArgs>),
    /// Run a short sweep against the built-in simulator, in-process. Results go under ./results/.
    // Its own simulator is the target: the target flags are not offered
    // (and refused if given, `run::checks::demo_args`).
    #[command(after_help = EXAMPLES_DEMO,
        mut_arg("base_url", |a| a.hide(true)), mut_arg("model", |a| a.hide(true)),
        mut_arg("api_key", |a| a.hide(true)), mut_arg("gpu_metrics", |a| a.hide(true)))]
    Demo(Box<SweepArgs>),
    /// Turn a result folder into a report: Markdown, CSV, JSON, an SVG chart, one HTML page or llm-d's Benchmark Report.
    #[command(after_help = EXAMPLES_REPORT)]
    Report(ReportArgs),
    /// Compare result folders (or summary.json files) side by side; with --fail-on-regression, a regression gate (exit 99).
    #[command(after_help = EXAMPLES_COMPARE)]
    Compare(CompareArgs),
    /// Open a finished run (or two, overlaid) in the live view's screen; sends no load.
    #[command(after_help = EXAMPLES_VIEW)]
    View(ViewArgs),
    /// Merge the shards of one run (sweep --shard I/N, one folder each) into one result folder.
    #[command(after_help = EXAMPLES_MERGE)]
    Merge(MergeArgs),
    /// Predict settings, streams and lengths not measured, from a model fitted to a finished run (its model.json).
    #[command(after_help = EXAMPLES_PREDICT)]
    Predict(Box<PredictArgs>),
    /// Print a shell completion script: `tokbench completions bash > ~/.local/share/bash-completion/completions/tokbench`.
    #[command(after_help = EXAMPLES_COMPLETIONS)]
    Completions(CompletionsArgs),
    /// Print the manual page (roff): `tokbench man | man -l -`, or `tokbench man sweep` for one subcommand's.
    #[command(after_help = EXAMPLES_MAN)]
    Man(ManArgs),
}

/// What `tokbench tune` does when a setting's server does not start or is never ready.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnFail {
    /// Stop the tune (what was measured is saved).
    Stop,
    /// Record the setting as failed and go on to the next.
    Skip,
}

#[derive(Args, Debug, Clone)]
pub struct TuneArgs {
    /// The server command: `{name}` is filled from --grid, `{port}` with the port tokbench picks (e.g. 'llama-server -m m.gguf --port {port} -np {np}'). Split into words by shell rules and run without a shell.
    #[arg(long, value_name = "CMD")]
    pub serve_cmd: String,

    /// Environment for the server, templated the same way (e.g. OLLAMA_NUM_PARALLEL={np}); repeatable. Values of names with KEY, TOKEN or SECRET are never shown or saved.
    #[arg(long, value_name = "NAME=VALUE")]
    pub serve_env: Vec<String>,

    /// A server setting's values: NAME=V1,V2,...; several grids make every combination.
    #[arg(long, value_name = "NAME=V1,V2,...", required = true)]
    pub grid: Vec<String>,

    /// Walk these grids together (np,ctx: the i-th values of each, not every combination); repeatable.
    #[arg(long, value_name = "A,B")]
    pub grid_link: Vec<String>,

    /// Run the server command with `sh -c` (pipes, `&&`); grid values are then shell text.
    #[arg(long)]
    pub serve_shell: bool,

    /// The port the server listens on, instead of a free one tokbench picks.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub serve_port: Option<u16>,

    /// Seconds to wait for each setting's server to be ready.
    #[arg(long, value_name = "S", default_value_t = 600.0)]
    pub ready_timeout: f64,

    /// Seconds between SIGTERM and SIGKILL when a server is stopped.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub stop_grace: f64,

    /// When a setting's server does not start or is never ready: stop, or skip to the next setting.
    #[arg(long, value_enum, default_value = "stop")]
    pub on_fail: OnFail,
    /// Empty the server's prefix cache before each level after the first,
    /// where the engine offers it: vLLM `POST /reset_prefix_cache` (tune
    /// sets VLLM_SERVER_DEV_MODE=1 for a vLLM command), SGLang
    /// `POST /flush_cache`. Other engines: the result says none was reset.
    #[arg(long)]
    pub reset_cache: bool,
    #[command(flatten)]
    pub predict: TunePredictArgs,

    #[command(flatten)]
    pub sweep: SweepArgs,
}

#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug, Clone)]
pub struct ManArgs {
    /// A subcommand's page (tokbench-sweep(1), ...) instead of tokbench(1).
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ViewArgs {
    /// A result folder (or its summary.json); a second one is overlaid for comparison. With --follow, several shard folders of one run are followed merged.
    #[arg(required = true, num_args = 1.., value_name = "DIR")]
    pub runs: Vec<std::path::PathBuf>,

    /// Watch a run in progress from its files (read-only): the screen follows summary.json and requests.jsonl.
    #[arg(long)]
    pub follow: bool,
}

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shard folders (or their summary.json), one per shard; a folder merge wrote counts as the shards it holds.
    #[arg(required = true, num_args = 1.., value_name = "DIR")]
    pub dirs: Vec<std::path::PathBuf>,

    /// The merged result folder to write (new, or without a summary.json).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: std::path::PathBuf,

    /// Merge the shards given even when some of the run's are missing (the merged folder records which).
    #[arg(long)]
    pub allow_missing: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Md,
    Csv,
    Json,
    Svg,
    Html,
    /// llm-d Benchmark Report v0.2.1: a JSON array, one report per level.
    Br,
    /// JUnit XML for CI: a test case per --threshold and per level judged against the --slo-* given.
    Junit,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A result folder (with summary.json) or a summary.json file.
    pub dir: std::path::PathBuf,

    #[arg(long, value_enum, default_value = "md")]
    pub format: ReportFormat,

    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    /// GPUs serving the target: svg and html also give throughput per GPU (overrides the run's own `--gpus`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,
}

/// Wire format used to talk to the server.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// OpenAI `/v1/chat/completions` (SSE).
    OpenaiChat,
    /// OpenAI `/v1/completions` (SSE).
    OpenaiCompletions,
    /// Ollama native `/api/generate` (NDJSON, server durations per request).
    OllamaGenerate,
    /// Ollama native `/api/chat` (NDJSON, server durations per request).
    OllamaChat,
    /// TGI native `/generate_stream` (SSE token events, the server's own token count).
    TgiGenerate,
}

impl Backend {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Backend::OpenaiChat => "openai-chat",
            Backend::OpenaiCompletions => "openai-completions",
            Backend::OllamaGenerate => "ollama-generate",
            Backend::OllamaChat => "ollama-chat",
            Backend::TgiGenerate => "tgi-generate",
        }
    }
    pub(crate) fn default_path(self) -> &'static str {
        match self {
            Backend::OpenaiChat => "/v1/chat/completions",
            Backend::OpenaiCompletions => "/v1/completions",
            Backend::OllamaGenerate => "/api/generate",
            Backend::OllamaChat => "/api/chat",
            Backend::TgiGenerate => "/generate_stream",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Read flags from a TOML file: each key is a flag's long name (`concurrency = [1, 4, 16]`); flags on the command line override it. A run's own config.toml repeats it.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// Print the effective settings (file and flags together) as TOML and exit without sending anything.
    #[arg(long)]
    pub print_config: bool,

    /// Server root, e.g. http://127.0.0.1:8000 (no /v1: the backend appends its path).
    #[arg(help_heading = "Target", long, value_name = "URL")]
    pub base_url: Option<String>,

    /// Model name; defaults to the first model the server lists.
    #[arg(help_heading = "Target", long)]
    pub model: Option<String>,

    #[arg(
        help_heading = "Target",
        long,
        value_enum,
        default_value = "openai-chat"
    )]
    pub backend: Backend,

    /// The engine's name (vllm, sglang, llamacpp, ollama, tgi, ...), overriding detection.
    #[arg(help_heading = "Target", long, value_name = "NAME")]
    pub engine: Option<String>,

    /// Request path overriding the backend's default (e.g. /v1/chat/completions).
    #[arg(help_heading = "Target", long, value_name = "PATH")]
    pub endpoint: Option<String>,

    /// API key sent as `Authorization: Bearer` to the target only; never printed or saved.
    #[arg(
        help_heading = "Target",
        long,
        env = "OPENAI_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,

    /// Seconds between scrapes of the server's own gauges (/metrics, /slots, /api/ps).
    #[arg(help_heading = "Target", long, value_name = "S", default_value_t = 1.0)]
    pub probe_interval: f64,

    /// Do not scrape the server's gauges.
    #[arg(help_heading = "Target", long)]
    pub no_probe: bool,

    /// Read the GPUs from a DCGM exporter's Prometheus page (e.g. http://gpu-node:9400/metrics) every --probe-interval, instead of nvidia-smi on this host: utilization, memory, power, clocks, temperature, and energy from the GPUs' own counters. Credentials in the URL are sent, never shown or saved.
    #[arg(help_heading = "Target", long, value_name = "URL")]
    pub gpu_metrics: Option<String>,

    /// Prompt length in server tokens (chat template included), calibrated on the server's own count [default: 1024, or the --profile's].
    #[arg(help_heading = "Workload", long, value_name = "N")]
    pub random_input_len: Option<u32>,

    /// Output length in tokens (max_tokens; with ignore_eos the server generates exactly this many) [default: 1024, or the --profile's].
    #[arg(help_heading = "Workload", long, value_name = "N")]
    pub random_output_len: Option<u32>,

    // Traffic shape (issue 7): length presets, length spread, prompt text.
    /// Length preset: balanced 1024/1024, prefill-heavy 4000/50, decode-heavy 200/2000, chat 512/256 (in/out); --random-input-len/--random-output-len override its values.
    #[arg(help_heading = "Workload", long, value_enum, value_name = "NAME")]
    pub profile: Option<crate::workload::Profile>,

    /// Draw each request's input and output length uniformly in [L(1-R), L(1+R)] (vLLM's meaning), 0 <= R < 1.
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "R",
        default_value_t = 0.0
    )]
    pub random_range_ratio: f64,

    /// Prompt text: random common words, generated English prose, or passages of --corpus; each prompt still opens with a unique nonce.
    #[arg(
        help_heading = "Workload",
        long,
        value_enum,
        value_name = "SOURCE",
        default_value = "random"
    )]
    pub prompt_source: crate::workload::PromptSource,

    /// A text file to cut prompts from (implies --prompt-source corpus).
    #[arg(help_heading = "Workload", long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,

    /// Requests from a file: JSONL ({"prompt": ...} or {"messages": [...]}, optional "output_len") or ShareGPT JSON; each level sends each record once.
    #[arg(help_heading = "Workload", long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,

    /// Save each request's prompt text in requests.jsonl (never saved otherwise).
    #[arg(help_heading = "Workload", long)]
    pub save_prompts: bool,

    /// Put the same N-token text before every prompt (vLLM's random-prefix-len), to measure a prefix cache on purpose.
    #[arg(help_heading = "Workload", long, value_name = "N", default_value_t = 0)]
    pub prefix_len: u32,

    /// Do not send ignore_eos: outputs may end early and then are not comparable.
    #[arg(help_heading = "Workload", long)]
    pub no_ignore_eos: bool,

    /// Seed for prompts (random when absent; always recorded).
    #[arg(help_heading = "Workload", long)]
    pub seed: Option<u64>,

    /// JSON object merged into every request body, e.g. '{"block_size":32,"threshold":0.95}'.
    #[arg(help_heading = "Workload", long, value_name = "JSON")]
    pub extra_body: Option<String>,

    /// Multi-turn conversations of K turns: each turn re-sends the history plus a new user message (prefix caches on purpose).
    #[arg(help_heading = "Workload", long, value_name = "K", default_value_t = 1)]
    pub turns: u32,

    /// Concurrency levels of the sweep, in order.
    #[arg(
        help_heading = "Levels",
        long,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "1,4,16,32,64,128"
    )]
    pub concurrency: Vec<u32>,

    /// At most N requests in flight (vLLM's meaning): one closed-loop level of N, replacing --concurrency.
    #[arg(help_heading = "Levels", long, value_name = "N")]
    pub max_concurrency: Option<u32>,

    /// Requests per level (default: 10 x the level's concurrency).
    #[arg(help_heading = "Levels", long, value_name = "N")]
    pub num_prompts: Option<u32>,

    /// Each level sends for this long (30, 30s, 2m, 1.5m, 1h) after it starts, then waits for its requests in flight, which still count; instead of --num-prompts.
    #[arg(help_heading = "Levels", long, value_name = "S")]
    pub duration: Option<String>,

    /// Fit the sweep to this much time (15m, 1h, 90s), warmup included: each level ends once steady (at most --prompts-per-stream requests a stream), levels past the knee are skipped, and answers are shortened only if the first two levels could not fit otherwise. Without --num-prompts, --duration or --budget, a sweep is fitted to 20m.
    #[arg(help_heading = "Levels", long, value_name = "DURATION")]
    pub budget: Option<String>,

    /// With --start-at and --duration: time between a level's end of dispatch and the next level's start, for its requests to come back (the next level starts on time even if they have not) [default: 5s].
    #[arg(help_heading = "Levels", long, value_name = "S")]
    pub level_gap: Option<String>,

    /// Without --num-prompts, each level sends this many requests per stream of its concurrency [default: 10]; given, the counts are fixed (no default budget), else it is the most a fitted level sends.
    #[arg(help_heading = "Levels", long, value_name = "N")]
    pub prompts_per_stream: Option<u32>,

    /// Warmup requests sent first and discarded (default: the first level's concurrency).
    #[arg(help_heading = "Levels", long, value_name = "N")]
    pub warmup: Option<u32>,

    /// Repeat every level this many times back to back; the spread between rounds is checked.
    #[arg(help_heading = "Levels", long, value_name = "N", default_value_t = 1)]
    pub rounds: u32,

    /// A hand-set level is steady after this many completed requests per stream ...
    #[arg(help_heading = "Levels", long, value_name = "K", default_value_t = 2)]
    pub steady_completions: u32,

    /// ... and once its per-second throughput's relative standard error is below this (0.05: ±5%).
    #[arg(
        help_heading = "Levels",
        long,
        value_name = "R",
        default_value_t = 0.05
    )]
    pub steady_rse: f64,

    /// Give up on a request after this many seconds in total.
    #[arg(
        help_heading = "Levels",
        long,
        value_name = "S",
        default_value_t = 600.0
    )]
    pub request_timeout: f64,

    /// Give up on a stream that, once its body has begun, sends nothing for this many seconds (the wait for the first bytes, a queue or a prefill, is bounded by --request-timeout only).
    #[arg(
        help_heading = "Levels",
        long,
        value_name = "S",
        default_value_t = 60.0
    )]
    pub stall_timeout: f64,

    /// Probe requests per second beside the load, evenly spaced, on their own connections: what a new user would wait for (reported apart, per level).
    #[arg(help_heading = "Levels", long, value_name = "R")]
    pub probe_rate: Option<f64>,

    /// Prompt length of each probe request, in tokens.
    #[arg(help_heading = "Levels", long, value_name = "N", default_value_t = 32)]
    pub probe_input_len: u32,

    /// Output tokens each probe request asks for.
    #[arg(help_heading = "Levels", long, value_name = "N", default_value_t = 1)]
    pub probe_output_len: u32,

    /// Search for the capacity under the SLOs (double from 1, then bisect to 10%) instead of a fixed sweep.
    #[arg(help_heading = "Levels", long)]
    pub find_capacity: bool,

    /// Continue the run saved in DIR from its last finished level, with the same flags.
    #[arg(help_heading = "Levels", long, value_name = "DIR")]
    pub resume: Option<PathBuf>,

    /// Open loop: requests per second (a list sweeps rates), Poisson by default; --max-concurrency caps requests in flight.
    #[arg(
        help_heading = "Open loop and replay",
        long,
        value_delimiter = ',',
        value_name = "R"
    )]
    pub request_rate: Vec<f64>,

    /// Open loop: gamma shape of the gaps between requests (vLLM's meaning): 1 Poisson, <1 burstier, >1 more even.
    #[arg(
        help_heading = "Open loop and replay",
        long,
        value_name = "SHAPE",
        default_value_t = 1.0
    )]
    pub burstiness: f64,

    /// Send a request log or a production trace on its own timeline: tokbench JSONL ({"t": s, "input_len": N, "output_len": M}), Mooncake or Bailian JSONL (hash_ids become shared prompt prefixes), BurstGPT or Azure CSV.
    #[arg(help_heading = "Open loop and replay", long, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// Replay faster (2.0) or slower (0.5) than recorded.
    #[arg(
        help_heading = "Open loop and replay",
        long,
        value_name = "X",
        default_value_t = 1.0
    )]
    pub replay_speed: f64,

    /// The --replay file's shape, instead of telling it from its extension and first line.
    #[arg(help_heading = "Open loop and replay", long, value_name = "FORMAT", value_parser = ["tokbench", "mooncake", "bailian", "burstgpt", "azure"])]
    pub trace_format: Option<String>,

    /// Prompt tokens one hash id stands for (Mooncake 512, Bailian 16).
    #[arg(help_heading = "Open loop and replay", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub trace_block_tokens: Option<u32>,

    /// Replay only the CSV trace's rows whose COLUMN has VALUE (repeat for more), e.g. model=ChatGPT.
    #[arg(help_heading = "Open loop and replay", long, value_name = "COLUMN=VALUE", value_parser = parse_trace_filter)]
    pub trace_filter: Vec<(String, String)>,

    /// Replay only the trace's requests from START to END seconds of its own clock (END may be left out).
    #[arg(help_heading = "Open loop and replay", long, value_name = "START..END", value_parser = parse_replay_window)]
    pub replay_window: Option<(f64, f64)>,

    /// Replay only the first N requests (after --replay-window).
    #[arg(help_heading = "Open loop and replay", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub replay_max_requests: Option<u64>,

    /// Refuse a trace with requests longer than the server's context, instead of clipping them.
    #[arg(help_heading = "Open loop and replay", long)]
    pub strict_lengths: bool,

    /// Open loop: one level whose offered rate changes continuously from --ramp-from to --ramp-to over --ramp-duration, linearly or exponentially.
    #[arg(help_heading = "Open loop and replay", long, value_name = "KIND", value_parser = ["linear", "exponential"])]
    pub ramp: Option<String>,

    /// The ramp's first rate, requests per second.
    #[arg(help_heading = "Open loop and replay", long, value_name = "R")]
    pub ramp_from: Option<f64>,

    /// The ramp's last rate, requests per second.
    #[arg(help_heading = "Open loop and replay", long, value_name = "R")]
    pub ramp_to: Option<f64>,

    /// The ramp's length in seconds.
    #[arg(help_heading = "Open loop and replay", long, value_name = "S")]
    pub ramp_duration: Option<f64>,

    /// Capacity SLO: p99 time to first token, ms.
    #[arg(help_heading = "SLO and cost", long, value_name = "MS")]
    pub slo_ttft_p99_ms: Option<f64>,

    /// Capacity SLO: an answer's decode speed (1000 / median TPOT) at least this (reading speed).
    #[arg(
        help_heading = "SLO and cost",
        long,
        value_name = "TOK_S",
        default_value_t = 20.0
    )]
    pub slo_min_stream_tok_s: f64,

    /// Capacity SLO: p99 time per output token, ms.
    #[arg(help_heading = "SLO and cost", long, value_name = "MS")]
    pub slo_tpot_p99_ms: Option<f64>,

    /// Goodput SLOs, vLLM's syntax: --goodput ttft:500 tpot:50 e2el:30000 (ms).
    #[arg(help_heading = "SLO and cost", long, value_name = "METRIC:MS", num_args = 1..)]
    pub goodput: Vec<String>,

    /// GPU price per hour, for the cost of a million output tokens at capacity.
    #[arg(help_heading = "SLO and cost", long, value_name = "USD")]
    pub gpu_price_per_hour: Option<f64>,

    /// GPUs serving the target: recorded with the run; its charts also give throughput per GPU.
    #[arg(help_heading = "SLO and cost", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,

    /// API price per million output tokens to compare against.
    #[arg(help_heading = "SLO and cost", long, value_name = "USD")]
    pub api_price_per_m: Option<f64>,

    /// Share of hours the GPU is busy (0-1], for the effective cost.
    #[arg(help_heading = "SLO and cost", long, value_name = "SHARE")]
    pub utilization: Option<f64>,

    #[command(flatten)]
    pub check: ThresholdArgs,

    /// Percentiles saved for every latency metric (50 and 99 are always included).
    #[arg(
        help_heading = "Output",
        long,
        alias = "metric-percentiles",
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "50,90,99"
    )]
    pub percentiles: Vec<f64>,

    /// Free-form label saved with the result (repeatable), e.g. --label gpu=h100.
    #[arg(help_heading = "Output", long = "label", value_name = "K=V")]
    pub labels: Vec<String>,

    /// Folder for the result files (default: `results/<UTC timestamp>/`).
    #[arg(help_heading = "Output", long, value_name = "DIR")]
    pub result_dir: Option<PathBuf>,

    /// Serve live figures in the Prometheus text format at http://ADDR/metrics while the run runs, e.g. 127.0.0.1:9464.
    #[arg(help_heading = "Output", long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,

    /// Write one JSON object per line for scripts (run_started, level_finished, ...) to FILE; `-` for stdout (the plain output then goes to stderr).
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    pub events: Option<String>,

    /// Plain progress and tables instead of the live view (automatic when stdout is not a terminal).
    #[arg(help_heading = "Live view", long)]
    pub no_tui: bool,

    /// Frames per second of the live view.
    #[arg(
        help_heading = "Live view",
        long,
        value_name = "N",
        default_value_t = 10
    )]
    pub fps: u32,

    /// Live view: concurrency (or rate) keys pressed within this many seconds of each other make one change.
    #[arg(
        help_heading = "Live view",
        long,
        value_name = "S",
        default_value_t = 1.0
    )]
    pub settle_s: f64,

    /// This process is shard I of N, I counted from 0: each level's concurrency (or rate, or --num-prompts) is the run's total split across the N shards, the remainder to the lowest indexes. auto/N reads JOB_COMPLETION_INDEX (a Kubernetes Indexed Job), else RANK.
    #[arg(help_heading = "Shards", long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Start level 1 at this wall-clock time (RFC 3339 like 2026-12-01T13:00:00Z, or Unix seconds), after the warmup; with --duration, level k (from 0) starts at TIME + k x (duration + --level-gap), so shards on several machines step together.
    #[arg(help_heading = "Shards", long, value_name = "TIME")]
    pub start_at: Option<String>,

    /// Speak HTTP/2 (prior knowledge: the server must speak it) instead of HTTP/1.1 keep-alive.
    #[arg(help_heading = "Network and TLS", long)]
    pub http2: bool,

    /// Client for measured requests: auto (tokbench's lean HTTP/1.1 reader on plain http://, reqwest otherwise) or reqwest (always).
    #[arg(help_heading = "Network and TLS", long, value_enum, value_name = "CLIENT", default_value_t = HttpClient::Auto)]
    pub http_client: HttpClient,

    /// Clock of chunk arrivals: kernel (the kernel's receive time of each read, where the lean HTTP/1.1 reader runs on Linux; reqwest's paths fall back to user) or user (when the read returned, the old behaviour). Each request records the clock it got.
    #[arg(help_heading = "Network and TLS", long, value_enum, value_name = "CLOCK", default_value_t = RxClockArg::Kernel)]
    pub rx_clock: RxClockArg,

    /// Clock of each request's start (t0 of TTFB, TTFT, E2EL) on closed-loop sends: user (taken just before the request is written, the default) or kernel (the kernel's transmit time of its last byte, SO_TIMESTAMPING, where the lean HTTP/1.1 reader runs on Linux; its measured gain is a few microseconds, see docs/performance.md).
    #[arg(help_heading = "Network and TLS", long, value_enum, value_name = "CLOCK", default_value_t = TxClockArg::User)]
    pub tx_clock: TxClockArg,

    /// Accept any TLS certificate (self-signed, wrong host). Insecure: the key could reach an impostor.
    #[arg(help_heading = "Network and TLS", long)]
    pub insecure: bool,

    /// Run even when the hard open-file limit is too low for the largest level (requests that find no descriptor are counted as client_fd_limit).
    #[arg(help_heading = "Network and TLS", long)]
    pub force: bool,

    /// Also trust the CA certificates in this PEM file (a private CA), with every check kept.
    #[arg(help_heading = "Network and TLS", long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
}

/// `--http-client`: which client reads the measured streams.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum HttpClient {
    /// The lean HTTP/1.1 reader (src/load/h1.rs) wherever it applies: plain http://,
    /// no --http2, no credentials in the URL, a visible-ASCII key.
    Auto,
    /// reqwest for every request: the escape hatch if a server and the lean reader
    /// disagree.
    Reqwest,
}

/// `--rx-clock`: which clock times the chunks' arrivals.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum RxClockArg {
    /// The kernel's receive time (SO_TIMESTAMPNS) where available, else user.
    Kernel,
    /// The user-space time each read returned.
    User,
}

impl RxClockArg {
    pub(crate) fn clock(self) -> crate::record::RxClock {
        match self {
            RxClockArg::Kernel => crate::record::RxClock::Kernel,
            RxClockArg::User => crate::record::RxClock::User,
        }
    }
}

/// `--tx-clock`: which clock times the requests' departures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum TxClockArg {
    /// The user-space time just before the request is written.
    User,
    /// The kernel's transmit time (SO_TIMESTAMPING) where available, else user.
    Kernel,
}

impl TxClockArg {
    pub(crate) fn clock(self) -> crate::record::TxClock {
        match self {
            TxClockArg::Kernel => crate::record::TxClock::Kernel,
            TxClockArg::User => crate::record::TxClock::User,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum SimEngine {
    /// Continuous batching like vLLM: /v1/*, /tokenize, /version, /metrics.
    Vllm,
    /// Ollama: /api/generate, /api/chat (NDJSON), /api/ps, /v1/*; slots, model loads, no ignore_eos.
    Ollama,
    /// llama.cpp's llama-server: -np slots, timings, /props, /slots, /metrics.
    Llamacpp,
    /// SGLang: /v1/*, /get_server_info, /flush_cache, /metrics (sglang: names); --max-running-requests.
    Sglang,
    /// TGI: /generate_stream, /v1/chat/completions, /info, /metrics (tgi_ names); 429 past --max-concurrent-requests.
    Tgi,
}

#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,

    #[arg(long, default_value_t = 8000)]
    pub port: u16,

    #[arg(long, value_enum, default_value = "vllm")]
    pub engine: SimEngine,

    /// Require `Authorization: Bearer KEY` on /v1/* (401 otherwise), as vLLM's --api-key.
    #[arg(long, value_name = "KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    #[command(flatten)]
    pub timing: SimTimingArgs,
}

/// The simulator's defaults, which `tokbench sim` shows and takes: one
/// source for the flags and for the simulators the demo and tests start.
fn sim_default() -> crate::sim::SimConfig {
    crate::sim::SimConfig::default()
}

/// The simulator's timing model (docs/architecture.md section 5).
#[derive(Args, Debug, Clone)]
pub struct SimTimingArgs {
    /// Fixed cost of one engine step, ms.
    #[arg(long, value_name = "MS", default_value_t = sim_default().step_ms)]
    pub step_ms: f64,

    /// Added step cost per running sequence, ms.
    #[arg(long, value_name = "MS", default_value_t = sim_default().step_ms_per_seq)]
    pub step_ms_per_seq: f64,

    /// Prefill cost per 1000 prompt tokens admitted in a step, ms.
    #[arg(long = "prefill-ms-per-1k", value_name = "MS", default_value_t = sim_default().prefill_ms_per_1k)]
    pub prefill_ms_per_1k: f64,

    /// Most sequences running at once; the rest wait (SGLang's name: --max-running-requests).
    #[arg(long, alias = "max-running-requests", value_name = "N", default_value_t = sim_default().max_num_seqs)]
    pub max_num_seqs: usize,

    /// KV-cache size in tokens; a sequence reserves prompt + max_tokens when admitted.
    #[arg(long, value_name = "N", default_value_t = sim_default().kv_tokens)]
    pub kv_tokens: u64,

    /// A noisy or throttling machine: each period's steps run at a speed factor drawn in [1-X, 1+X].
    #[arg(long, value_name = "X", default_value_t = sim_default().noise)]
    pub noise: f64,

    /// How long one noise factor lasts, in engine busy time.
    #[arg(long, value_name = "MS", default_value_t = sim_default().noise_period_ms)]
    pub noise_period_ms: f64,

    /// Seed of the noise factors.
    #[arg(long, value_name = "N", default_value_t = sim_default().noise_seed)]
    pub noise_seed: u64,

    /// Parallel slots of the ollama/llamacpp personalities (default 1 for Ollama, 4 for llama.cpp).
    #[arg(long, alias = "num-parallel", value_name = "N")]
    pub parallel: Option<usize>,

    /// Ollama: a model load of this many ms on the first request and after --keep-alive-s idle.
    #[arg(long, value_name = "MS", default_value_t = sim_default().load_ms)]
    pub load_ms: f64,

    /// Ollama: unload the model after this many idle seconds (negative: never).
    #[arg(long, value_name = "S", default_value_t = sim_default().keep_alive_s)]
    pub keep_alive_s: f64,

    /// Ollama: requests waiting for a model load beyond this get its exact 503.
    #[arg(long, value_name = "N", default_value_t = sim_default().max_queue)]
    pub max_queue: usize,

    /// TGI: requests in flight (queued or running) past this many get TGI's 429.
    #[arg(long, value_name = "N", default_value_t = sim_default().max_concurrent_requests)]
    pub max_concurrent_requests: usize,

    /// Ollama: share of the model in GPU memory (0-1]; decode slows in proportion.
    #[arg(long, value_name = "SHARE", default_value_t = sim_default().vram_share)]
    pub vram_share: f64,

    /// Ollama/llamacpp: answers end at a simulated EOS after this many tokens on average (0: never).
    #[arg(long, value_name = "N", default_value_t = sim_default().eos_mean_tokens)]
    pub eos_mean_tokens: f64,

    /// Seed of the simulated EOS draws.
    #[arg(long, value_name = "N", default_value_t = sim_default().eos_seed)]
    pub eos_seed: u64,

    /// vLLM: `reserve` books prompt + max_tokens at admission; `grow` books as tokens come and preempts when KV runs out.
    #[arg(long, value_name = "POLICY", default_value = "reserve")]
    pub kv_policy: String,

    /// vLLM and SGLang: prefix-cache block size in words (0: no prefix cache).
    #[arg(long, value_name = "N", default_value_t = sim_default().prefix_block_tokens)]
    pub prefix_block_tokens: u64,

    /// Fault injection: chance per request of an HTTP 500 instead of an answer.
    #[arg(long, value_name = "P", default_value_t = sim_default().fail_rate)]
    pub fail_rate: f64,

    /// Fault injection: chance per request that the stream stops mid-way, connection left open.
    #[arg(long, value_name = "P", default_value_t = sim_default().stall_rate)]
    pub stall_rate: f64,

    /// Fault injection: chance per request that the connection drops mid-stream.
    #[arg(long, value_name = "P", default_value_t = sim_default().disconnect_rate)]
    pub disconnect_rate: f64,

    /// Fault injection: chance per request of one broken-JSON chunk mid-stream.
    #[arg(long, value_name = "P", default_value_t = sim_default().malformed_rate)]
    pub malformed_rate: f64,

    /// Seed of the fault draws.
    #[arg(long, value_name = "N", default_value_t = sim_default().fault_seed)]
    pub fault_seed: u64,

    /// vLLM chat API: the first N tokens of every answer are reasoning (`delta.reasoning_content`), then content.
    #[arg(long, value_name = "N", default_value_t = sim_default().reasoning_tokens)]
    pub reasoning_tokens: u64,

    /// vLLM, SGLang, TGI: write when each streamed frame went to its connection (JSONL, CLOCK_MONOTONIC ns, keyed by X-Request-Id).
    #[arg(long, value_name = "FILE")]
    pub emission_log: Option<PathBuf>,
}

impl SimTimingArgs {
    /// The simulator these flags describe; the settings they leave out
    /// (engine, key, emission log) are the defaults.
    pub fn config(&self) -> color_eyre::Result<crate::sim::SimConfig> {
        let kv_policy = self
            .kv_policy
            .parse()
            .map_err(|_| color_eyre::eyre::eyre!("--kv-policy must be reserve or grow"))?;
        Ok(crate::sim::SimConfig {
            kv_policy,
            step_ms: self.step_ms,
            step_ms_per_seq: self.step_ms_per_seq,
            prefill_ms_per_1k: self.prefill_ms_per_1k,
            max_num_seqs: self.max_num_seqs,
            kv_tokens: self.kv_tokens,
            noise: self.noise,
            noise_period_ms: self.noise_period_ms,
            noise_seed: self.noise_seed,
            parallel: self.parallel,
            load_ms: self.load_ms,
            keep_alive_s: self.keep_alive_s,
            max_queue: self.max_queue,
            max_concurrent_requests: self.max_concurrent_requests,
            vram_share: self.vram_share,
            eos_mean_tokens: self.eos_mean_tokens,
            eos_seed: self.eos_seed,
            prefix_block_tokens: self.prefix_block_tokens,
            fail_rate: self.fail_rate,
            stall_rate: self.stall_rate,
            disconnect_rate: self.disconnect_rate,
            malformed_rate: self.malformed_rate,
            fault_seed: self.fault_seed,
            reasoning_tokens: self.reasoning_tokens,
            ..sim_default()
        })
    }
}

fn parse_trace_filter(s: &str) -> Result<(String, String), String> {
    crate::load::trace::parse_filter(s)
}

fn parse_replay_window(s: &str) -> Result<(f64, f64), String> {
    crate::load::trace::parse_window(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim_flags(args: &[&str]) -> SimTimingArgs {
        let cli = Cli::try_parse_from(["tokbench", "sim"].iter().chain(args)).expect("parses");
        match cli.command {
            Command::Sim(sim) => sim.timing,
            _ => unreachable!("parsed as sim"),
        }
    }

    /// `tokbench sim` without flags is the simulator the demo and the tests
    /// start: every setting, compared through `Debug`, which lists them all.
    #[test]
    fn the_sim_flags_default_to_the_simulators_defaults() {
        assert_eq!(
            format!("{:?}", sim_flags(&[]).config().expect("valid")),
            format!("{:?}", crate::sim::SimConfig::default())
        );
    }

    /// Every timing flag, each at a value of its own, reaches its own
    /// setting: the expected simulator is written out by hand, so two flags
    /// wired to each other's setting (both 0 by default) fail.
    #[test]
    fn each_sim_flag_reaches_its_own_setting() {
        let flags = [
            "--step-ms=1.5",
            "--step-ms-per-seq=2.5",
            "--prefill-ms-per-1k=3.5",
            "--max-num-seqs=4",
            "--kv-tokens=5",
            "--noise=0.25",
            "--noise-period-ms=7.5",
            "--noise-seed=8",
            "--parallel=9",
            "--load-ms=10.5",
            "--keep-alive-s=11.5",
            "--max-queue=12",
            "--vram-share=0.75",
            "--eos-mean-tokens=14.5",
            "--eos-seed=15",
            "--kv-policy=grow",
            "--prefix-block-tokens=17",
            "--fail-rate=0.125",
            "--stall-rate=0.25",
            "--disconnect-rate=0.375",
            "--malformed-rate=0.5",
            "--fault-seed=22",
            "--reasoning-tokens=23",
            "--max-concurrent-requests=24",
        ];
        let expected = crate::sim::SimConfig {
            step_ms: 1.5,
            step_ms_per_seq: 2.5,
            prefill_ms_per_1k: 3.5,
            max_num_seqs: 4,
            kv_tokens: 5,
            noise: 0.25,
            noise_period_ms: 7.5,
            noise_seed: 8,
            parallel: Some(9),
            load_ms: 10.5,
            keep_alive_s: 11.5,
            max_queue: 12,
            vram_share: 0.75,
            eos_mean_tokens: 14.5,
            eos_seed: 15,
            kv_policy: crate::sim::KvPolicy::Grow,
            prefix_block_tokens: 17,
            fail_rate: 0.125,
            stall_rate: 0.25,
            disconnect_rate: 0.375,
            malformed_rate: 0.5,
            fault_seed: 22,
            reasoning_tokens: 23,
            max_concurrent_requests: 24,
            ..crate::sim::SimConfig::default()
        };
        assert_eq!(
            format!("{:?}", sim_flags(&flags).config().expect("valid")),
            format!("{expected:?}")
        );
        // SGLang's name for the slot setting is the same setting.
        assert_eq!(
            sim_flags(&["--max-running-requests", "6"])
                .config()
                .expect("valid")
                .max_num_seqs,
            6
        );
        let bad = sim_flags(&["--kv-policy", "shrink"])
            .config()
            .expect_err("refused");
        assert_eq!(bad.to_string(), "--kv-policy must be reserve or grow");
    }
}
