//! The built-in simulated inference server: vLLM-like by default, or Ollama-like,
//! llama.cpp-like, SGLang-like or TGI-like ([`SimConfig::engine`]; see `ollama.rs`,
//! `llamacpp.rs`, `sglang.rs` and `tgi.rs` for what those personalities serve).
//!
//! It streams like vLLM's OpenAI server (role-only first chunk, one token per chunk,
//! usage chunk, `[DONE]`) and times tokens with a continuous-batching engine that
//! follows docs/architecture.md section 5: see `engine.rs` for the contract. It serves
//! `/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/tokenize`, `/version`,
//! `/health` and `/metrics` (vLLM's Prometheus names). With [`SimConfig::api_key`] set,
//! everything under `/v1` needs that bearer key, like vLLM's `--api-key`. With
//! `SimConfig::noise` set, the engine's speed drifts as on a noisy or throttling
//! machine (see the field's docs), so that repeated rounds of a level disagree.
//!
//! The `vllm` personality also keeps a prefix cache ([`SimConfig::prefix_block_tokens`])
//! and can book KV as vLLM does, preempting when it runs out ([`SimConfig::kv_policy`]);
//! `/metrics` counts both. Every personality can inject faults per request
//! ([`SimConfig::fail_rate`], `stall_rate`, `disconnect_rate`, `malformed_rate`): a 500,
//! a stream that stops with the connection open, a connection closed mid-stream, or one
//! event of broken JSON. Stream faults strike after the body's second frame; a
//! non-streamed answer (one frame) is served whole.
//!
//! Step boundaries land ~0.1 ms after their deadlines on an idle machine (a timerfd on
//! Linux, see `timer.rs`; tokio's own 1 ms timer made that 1-2 ms).
//!
//! ```no_run
//! # async fn demo() -> color_eyre::Result<()> {
//! let sim = tokbench::sim::spawn("127.0.0.1:0".parse()?, tokbench::sim::SimConfig::default()).await?;
//! println!("http://{}", sim.addr);
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

pub mod emission;
pub(crate) mod engine;
mod http;
mod llamacpp;
pub(crate) mod metrics;
mod noise;
mod ollama;
mod sglang;
mod tgi;
mod timer;
pub(crate) mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use color_eyre::eyre::{bail, WrapErr};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use self::emission::{EmissionLog, StreamEmissions};
pub use self::engine::KvPolicy;
use self::engine::{Limits, Timing};
use self::metrics::Metrics;
use self::noise::Noise;

/// What `GET /version` reports.
pub(crate) const SIM_VERSION: &str = "0.0.0-tokbench-sim";

/// Simulator settings (the `tokbench sim` timing flags).
#[derive(Clone)]
pub struct SimConfig {
    /// Fixed cost of one engine step, ms.
    pub step_ms: f64,
    /// Added step cost per running sequence, ms.
    pub step_ms_per_seq: f64,
    /// Prefill cost per 1000 prompt tokens admitted in a step, ms.
    pub prefill_ms_per_1k: f64,
    /// At most this many sequences run at once; the rest wait (FIFO). The `vllm`
    /// personality's, and `sglang`'s `--max-running-requests` and `tgi`'s batch;
    /// `ollama` and `llamacpp` use [`SimConfig::parallel`].
    pub max_num_seqs: usize,
    /// KV budget in tokens: a sequence reserves `prompt + max_tokens` while it runs,
    /// and a request needing more than all of it is refused with a 400.
    pub kv_tokens: u64,
    /// The model `/v1/models` lists (any name is accepted in requests).
    pub model_name: String,
    /// Like vLLM's `--api-key`: when set, every request under `/v1` must carry
    /// `Authorization: Bearer <key>` or gets a 401. `/health`, `/version`, `/metrics`
    /// and `/tokenize` stay open. Never printed (`Debug` shows it redacted).
    pub api_key: Option<String>,
    /// Injected noise, for a machine that is noisy or throttling: the largest relative
    /// deviation of the engine's speed from the contract, in `[0, 0.9]`; 0 (the default)
    /// is off and keeps docs/architecture.md section 5's timing exactly.
    ///
    /// The engine's busy time (idle time not counted) is cut into periods of
    /// [`SimConfig::noise_period_ms`]; each period gets a speed factor drawn uniformly
    /// from `[1 - noise, 1 + noise]` (from [`SimConfig::noise_seed`] and the period's
    /// index), and every step starting in it takes its contract time times that factor.
    /// TTFT and TPOT scale by the factor and throughput by its inverse. Repeated levels
    /// (`--rounds`) about a period long or shorter see different factors: at 0.3, three
    /// rounds differ by more than 15% in about 4 levels out of 5 (a model of the sweep in tests/it/rounds.rs). A
    /// level spanning many periods averages the factors out, as a long level on a
    /// jittery machine does.
    pub noise: f64,
    /// How long one noise factor lasts, in ms of engine busy time (> 0). Default 1000.
    pub noise_period_ms: f64,
    /// Seed of the noise factors: the same seed and the same steps give the same
    /// timings. Default 0.
    pub noise_seed: u64,
    /// Which server the simulator plays (routes, wire format, queueing). Default
    /// [`SimEngine::Vllm`], the behaviour described above.
    pub engine: SimEngine,
    /// Parallel slots of the `ollama` (`OLLAMA_NUM_PARALLEL`) and `llamacpp` (`-np`)
    /// personalities: at most this many sequences run at once, the rest wait (FIFO,
    /// without limit). `None` (the default) is the engine's own default: 1 for Ollama,
    /// 4 for llama.cpp. The `vllm` personality ignores it ([`SimConfig::max_num_seqs`]).
    pub parallel: Option<usize>,
    /// `ollama` only: how long loading the model takes, ms. The model loads on the first
    /// generation request and again after [`SimConfig::keep_alive_s`] idle; requests
    /// arriving meanwhile wait for it (reported as `load_duration`), at most
    /// [`SimConfig::max_queue`] of them. 0 (the default) is a load that takes no time:
    /// no request waits, but `/api/ps` still lists the model only once a request has
    /// loaded it, as Ollama's does after a start.
    pub load_ms: f64,
    /// `ollama` only: the model is unloaded after this many seconds with no request in
    /// flight (Ollama's `keep_alive`, default 300); negative keeps it loaded forever.
    pub keep_alive_s: f64,
    /// `ollama` only: at most this many requests wait for a model load
    /// (`OLLAMA_MAX_QUEUE`, default 512); the excess gets a 503 with Ollama's body.
    pub max_queue: usize,
    /// `ollama` only: share of the model in GPU memory, in (0, 1] (default 1). `/api/ps`
    /// reports `size_vram = size * share`, and every step takes its contract time
    /// divided by the share (a model partly on the CPU is slower).
    pub vram_share: f64,
    /// `ollama` and `llamacpp`: mean output length at which a simulated end-of-sequence
    /// token ends an answer early (`done_reason`/`finish_reason` `stop`), drawn per
    /// request from a geometric distribution with this mean (at least 1 token),
    /// seeded by [`SimConfig::eos_seed`] and the request's arrival order. 0 (the
    /// default) never ends early. llama.cpp requests with `ignore_eos: true` run to
    /// their `max_tokens`; Ollama has no such switch. The `vllm` personality ignores it.
    pub eos_mean_tokens: f64,
    /// Seed of the EOS draws. Default 0.
    pub eos_seed: u64,
    /// Fault injection, every personality: the probability, in `[0, 1]`, that a
    /// generation request is answered with an HTTP 500 (a JSON error body) instead of
    /// being served. Default 0.
    pub fail_rate: f64,
    /// Probability that a streamed answer stops after its first events while the
    /// connection stays open (the client's stall timeout has to end it). Default 0.
    pub stall_rate: f64,
    /// Probability that the connection is closed in the middle of a streamed answer.
    /// Default 0.
    pub disconnect_rate: f64,
    /// Probability that a streamed answer carries one event of broken JSON in its
    /// middle (the stream then goes on). Default 0.
    pub malformed_rate: f64,
    /// `vllm` only: how KV is booked. [`KvPolicy::Reserve`] (the default) books
    /// `prompt + max_tokens` at admission and never preempts; [`KvPolicy::Grow`] books as
    /// tokens are generated and preempts the newest running sequence when KV runs out
    /// (counted in `vllm:num_preemptions_total`).
    pub kv_policy: KvPolicy,
    /// `vllm` and `sglang`: prefix-cache block size in prompt words (tokens). A prompt
    /// whose first whole blocks equal an earlier prompt's skips their prefill, and
    /// `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` count the
    /// prompt tokens looked up and found (`sglang:cache_hit_rate`, the last prefill
    /// batch's share). The cache holds `kv_tokens / block` blocks
    /// (least recently used evicted). 0 turns it off. Default 16; prompts that share no
    /// whole first block (tokbench's own) never hit.
    pub prefix_block_tokens: u64,
    /// Seed of the fault draws, made per generation request in arrival order (each mode
    /// drawn on its own; when several hit, the first of fail, disconnect, stall,
    /// malformed wins). Default 0.
    pub fault_seed: u64,
    /// `vllm` personality, chat API: the first this many tokens of every answer are
    /// reasoning (`delta.reasoning_content`, as a reasoning model streams them), the rest
    /// content; usage reports them in `completion_tokens_details.reasoning_tokens`. They
    /// are part of the answer's `max_tokens`, as OpenAI counts them: an answer of at most
    /// N tokens is all reasoning. 0 (the default) is an ordinary model.
    pub reasoning_tokens: u64,
    /// `vllm`, `sglang` and `tgi`: record when each frame of a streamed answer was
    /// handed to its connection (see `emission.rs`), to measure a client's timing
    /// error. Default off.
    pub emission_log: Option<EmissionLog>,
    /// `vllm` only, as vLLM's `VLLM_SERVER_DEV_MODE=1`: the development
    /// routes are served, `POST /reset_prefix_cache` among them (it empties
    /// the prefix cache and says so on stderr). Off, they are 404.
    pub dev_mode: bool,
    /// `tgi` only, TGI's `--max-concurrent-requests` (default 128): requests in
    /// flight (queued or running) past this many are refused with a 429 and
    /// TGI's overload body.
    pub max_concurrent_requests: usize,
}

/// The server a simulator plays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SimEngine {
    /// vLLM's OpenAI server (the default).
    #[default]
    Vllm,
    /// Ollama: `/api/generate`, `/api/chat` (NDJSON), `/api/ps`, `/api/version`,
    /// `/api/tags`, `/v1/chat/completions`.
    Ollama,
    /// llama.cpp's `llama-server`: `/v1/chat/completions`, `/v1/completions` with
    /// `timings`, `/health`, `/props`, `/slots`, `/tokenize`, `/metrics`.
    Llamacpp,
    /// SGLang: the OpenAI routes, `/get_server_info`, `/get_model_info`,
    /// `/flush_cache`, `/health`, `/metrics` (`sglang:` names).
    Sglang,
    /// Hugging Face text-generation-inference: `/generate_stream`,
    /// `/v1/chat/completions`, `/info`, `/health`, `/metrics` (`tgi_` names), a
    /// concurrency cap answered with 429.
    Tgi,
}

impl SimEngine {
    /// Every personality (`engine::Engine::played_by` names what each plays).
    #[cfg(test)]
    pub(crate) const ALL: [SimEngine; 5] = [
        SimEngine::Vllm,
        SimEngine::Ollama,
        SimEngine::Llamacpp,
        SimEngine::Sglang,
        SimEngine::Tgi,
    ];

    /// The engine's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SimEngine::Vllm => "vllm",
            SimEngine::Ollama => "ollama",
            SimEngine::Llamacpp => "llamacpp",
            SimEngine::Sglang => "sglang",
            SimEngine::Tgi => "tgi",
        }
    }
}

impl std::str::FromStr for SimEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "vllm" => Ok(SimEngine::Vllm),
            "ollama" => Ok(SimEngine::Ollama),
            "llamacpp" | "llama.cpp" | "llama-cpp" => Ok(SimEngine::Llamacpp),
            "sglang" => Ok(SimEngine::Sglang),
            "tgi" | "text-generation-inference" => Ok(SimEngine::Tgi),
            other => Err(format!(
                "unknown simulator engine {other:?} (vllm, ollama, llamacpp, sglang or tgi)"
            )),
        }
    }
}

impl std::fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let SimConfig {
            step_ms,
            step_ms_per_seq,
            prefill_ms_per_1k,
            max_num_seqs,
            kv_tokens,
            model_name,
            api_key,
            noise,
            noise_period_ms,
            noise_seed,
            engine,
            parallel,
            load_ms,
            keep_alive_s,
            max_queue,
            vram_share,
            eos_mean_tokens,
            eos_seed,
            fail_rate,
            stall_rate,
            disconnect_rate,
            malformed_rate,
            fault_seed,
            kv_policy,
            prefix_block_tokens,
            reasoning_tokens,
            emission_log,
            dev_mode,
            max_concurrent_requests,
        } = self;
        f.debug_struct("SimConfig")
            .field("step_ms", step_ms)
            .field("step_ms_per_seq", step_ms_per_seq)
            .field("prefill_ms_per_1k", prefill_ms_per_1k)
            .field("max_num_seqs", max_num_seqs)
            .field("kv_tokens", kv_tokens)
            .field("model_name", model_name)
            .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
            .field("noise", noise)
            .field("noise_period_ms", noise_period_ms)
            .field("noise_seed", noise_seed)
            .field("engine", engine)
            .field("parallel", parallel)
            .field("load_ms", load_ms)
            .field("keep_alive_s", keep_alive_s)
            .field("max_queue", max_queue)
            .field("vram_share", vram_share)
            .field("eos_mean_tokens", eos_mean_tokens)
            .field("eos_seed", eos_seed)
            .field("fail_rate", fail_rate)
            .field("stall_rate", stall_rate)
            .field("disconnect_rate", disconnect_rate)
            .field("malformed_rate", malformed_rate)
            .field("fault_seed", fault_seed)
            .field("kv_policy", kv_policy)
            .field("prefix_block_tokens", prefix_block_tokens)
            .field("reasoning_tokens", reasoning_tokens)
            .field("emission_log", emission_log)
            .field("dev_mode", dev_mode)
            .field("max_concurrent_requests", max_concurrent_requests)
            .finish()
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            step_ms: 10.5,
            step_ms_per_seq: 0.35,
            prefill_ms_per_1k: 20.0,
            max_num_seqs: 256,
            kv_tokens: 200_000,
            model_name: "sim".to_owned(),
            api_key: None,
            noise: 0.0,
            noise_period_ms: 1000.0,
            noise_seed: 0,
            engine: SimEngine::Vllm,
            parallel: None,
            load_ms: 0.0,
            keep_alive_s: 300.0,
            max_queue: 512,
            vram_share: 1.0,
            eos_mean_tokens: 0.0,
            eos_seed: 0,
            fail_rate: 0.0,
            stall_rate: 0.0,
            disconnect_rate: 0.0,
            malformed_rate: 0.0,
            fault_seed: 0,
            kv_policy: KvPolicy::Reserve,
            prefix_block_tokens: 16,
            reasoning_tokens: 0,
            emission_log: None,
            dev_mode: false,
            max_concurrent_requests: 128,
        }
    }
}

impl SimConfig {
    /// Reject settings the engine cannot run with.
    pub fn validate(&self) -> color_eyre::Result<()> {
        for (name, v) in [
            ("step-ms", self.step_ms),
            ("step-ms-per-seq", self.step_ms_per_seq),
            ("prefill-ms-per-1k", self.prefill_ms_per_1k),
        ] {
            // Also bounds a step at about 11 days, well inside Duration's range.
            if !v.is_finite() || !(0.0..=1e9).contains(&v) {
                bail!("--{name} must be a finite number of milliseconds, 0 or more (got {v})");
            }
        }
        if self.max_num_seqs == 0 {
            bail!("--max-num-seqs must be at least 1");
        }
        if self.kv_tokens < 2 {
            bail!("--kv-tokens must be at least 2 (one prompt and one output token)");
        }
        if !(0.0..=0.9).contains(&self.noise) {
            bail!(
                "--noise must be between 0 and 0.9 (a share of the step time, got {})",
                self.noise
            );
        }
        // NaN fails both comparisons.
        if !(self.noise_period_ms > 0.0 && self.noise_period_ms <= 1e9) {
            bail!(
                "--noise-period-ms must be a finite number of milliseconds above 0 (got {})",
                self.noise_period_ms
            );
        }
        if self.max_queue == 0 {
            bail!("--max-queue must be at least 1");
        }
        if self.max_concurrent_requests == 0 {
            bail!("--max-concurrent-requests must be at least 1");
        }
        if self.parallel == Some(0) {
            bail!("--parallel (--num-parallel) must be at least 1");
        }
        if !self.load_ms.is_finite() || !(0.0..=1e9).contains(&self.load_ms) {
            bail!(
                "--load-ms must be a finite number of milliseconds, 0 or more (got {})",
                self.load_ms
            );
        }
        if self.keep_alive_s.is_nan() {
            bail!("--keep-alive-s must be a number of seconds (negative: forever)");
        }
        if !(self.vram_share > 0.0 && self.vram_share <= 1.0) {
            bail!(
                "--vram-share must be above 0 and at most 1 (got {})",
                self.vram_share
            );
        }
        if !self.eos_mean_tokens.is_finite() || self.eos_mean_tokens < 0.0 {
            bail!(
                "--eos-mean-tokens must be a number of tokens, 0 (never) or more (got {})",
                self.eos_mean_tokens
            );
        }
        for (name, v) in [
            ("fail-rate", self.fail_rate),
            ("stall-rate", self.stall_rate),
            ("disconnect-rate", self.disconnect_rate),
            ("malformed-rate", self.malformed_rate),
        ] {
            // NaN fails the range check.
            if !(0.0..=1.0).contains(&v) {
                bail!("--{name} must be a probability between 0 and 1 (got {v})");
            }
        }
        if self.api_key.as_deref().is_some_and(str::is_empty) {
            bail!("--api-key must not be empty");
        }
        Ok(())
    }

    fn timing(&self) -> Timing {
        // Ollama with part of the model in system memory: every step is slower.
        let slow = match self.engine {
            SimEngine::Ollama => 1.0 / self.vram_share,
            _ => 1.0,
        };
        Timing {
            step_ms: self.step_ms * slow,
            step_ms_per_seq: self.step_ms_per_seq * slow,
            prefill_ms_per_1k: self.prefill_ms_per_1k * slow,
        }
    }

    /// Sequences that run at once: vLLM's `max_num_seqs` (SGLang's
    /// `--max-running-requests`, TGI's batch), the others' slots.
    pub(crate) fn slots(&self) -> usize {
        match self.engine {
            SimEngine::Vllm | SimEngine::Sglang | SimEngine::Tgi => self.max_num_seqs,
            SimEngine::Ollama => self.parallel.unwrap_or(1),
            SimEngine::Llamacpp => self.parallel.unwrap_or(4),
        }
    }

    fn noise(&self) -> Noise {
        Noise::new(self.noise, self.noise_period_ms, self.noise_seed)
    }

    fn limits(&self) -> Limits {
        let vllm = self.engine == SimEngine::Vllm;
        // SGLang's RadixAttention caches prefixes by default, as vLLM does.
        let prefix_cache = vllm || self.engine == SimEngine::Sglang;
        Limits {
            max_num_seqs: self.slots(),
            kv_tokens: self.kv_tokens,
            kv_policy: if vllm {
                self.kv_policy
            } else {
                KvPolicy::Reserve
            },
            prefix_block_tokens: if prefix_cache {
                self.prefix_block_tokens
            } else {
                0
            },
        }
    }
}

/// A running simulator. Dropping it (or calling [`SimHandle::shutdown`]) stops serving:
/// the listener closes and open connections, streams included, are dropped.
pub struct SimHandle {
    /// The bound address (the real port when bound to port 0).
    pub addr: SocketAddr,
    /// Dropping the sender is the shutdown signal every task watches.
    shutdown: Option<watch::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// Stop serving and wait until the listener and the engine have stopped.
    pub async fn shutdown(mut self) {
        self.shutdown.take();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        // Dropping the sender wakes every `changed()` with an error: all tasks exit.
        self.shutdown.take();
    }
}

/// Bind and serve in background tasks on the current tokio runtime.
/// `127.0.0.1:0` picks a free port; read it from [`SimHandle::addr`].
pub async fn spawn(bind: SocketAddr, cfg: SimConfig) -> color_eyre::Result<SimHandle> {
    cfg.validate()?;
    let listener = TcpListener::bind(bind)
        .await
        .wrap_err_with(|| format!("could not listen on {bind}"))?;
    let addr = listener
        .local_addr()
        .wrap_err("could not read the bound address")?;
    let (shutdown_tx, shutdown_rx) = watch::channel(());
    let metrics = Arc::new(Metrics::default());
    let (sub_tx, sub_rx) = mpsc::unbounded_channel();
    let engine = tokio::spawn(engine::run(
        cfg.timing(),
        cfg.limits(),
        cfg.noise(),
        sub_rx,
        Arc::clone(&metrics),
        shutdown_rx.clone(),
    ));
    let state = Arc::new(http::AppState::new(cfg, sub_tx, metrics));
    let server = tokio::spawn(http::serve(listener, state, shutdown_rx));
    Ok(SimHandle {
        addr,
        shutdown: Some(shutdown_tx),
        tasks: vec![server, engine],
    })
}

/// Serve until Ctrl-C (for `tokbench sim` in the foreground); prints one line with the URL.
pub async fn run_forever(bind: SocketAddr, cfg: SimConfig) -> color_eyre::Result<()> {
    let sim = spawn(bind, cfg.clone()).await?;
    // Says whether a key is required, never the key.
    let auth = if cfg.api_key.is_some() {
        ", API key required"
    } else {
        ""
    };
    let noise = if cfg.noise > 0.0 {
        format!(
            ", noise {} per {} ms (seed {})",
            cfg.noise, cfg.noise_period_ms, cfg.noise_seed
        )
    } else {
        String::new()
    };
    match cfg.engine {
        SimEngine::Vllm => println!(
            "tokbench sim (vLLM-like, model {:?}, step {} ms + {} ms/seq, prefill {} ms/1k, \
             max-num-seqs {}, kv {} tokens{noise}{auth}) listening on http://{}",
            cfg.model_name,
            cfg.step_ms,
            cfg.step_ms_per_seq,
            cfg.prefill_ms_per_1k,
            cfg.max_num_seqs,
            cfg.kv_tokens,
            sim.addr
        ),
        SimEngine::Sglang => println!(
            "tokbench sim (SGLang-like, model {:?}, step {} ms + {} ms/seq, prefill {} ms/1k, \
             max-running-requests {}, kv {} tokens{noise}{auth}) listening on http://{}",
            cfg.model_name,
            cfg.step_ms,
            cfg.step_ms_per_seq,
            cfg.prefill_ms_per_1k,
            cfg.max_num_seqs,
            cfg.kv_tokens,
            sim.addr
        ),
        SimEngine::Tgi => println!(
            "tokbench sim (TGI-like, model {:?}, step {} ms + {} ms/seq, prefill {} ms/1k, \
             max-concurrent-requests {}, batch of {}, max-total-tokens {}{noise}) listening \
             on http://{}",
            cfg.model_name,
            cfg.step_ms,
            cfg.step_ms_per_seq,
            cfg.prefill_ms_per_1k,
            cfg.max_concurrent_requests,
            cfg.max_num_seqs,
            cfg.kv_tokens,
            sim.addr
        ),
        engine => {
            let eos = if cfg.eos_mean_tokens > 0.0 {
                format!(", EOS after ~{} tokens", cfg.eos_mean_tokens)
            } else {
                String::new()
            };
            let extra = if engine == SimEngine::Ollama {
                format!(
                    ", load {} ms, keep-alive {} s, max-queue {}, vram share {}",
                    cfg.load_ms, cfg.keep_alive_s, cfg.max_queue, cfg.vram_share
                )
            } else {
                String::new()
            };
            println!(
                "tokbench sim ({}-like, model {:?}, step {} ms + {} ms/seq, prefill {} ms/1k, \
                 {} parallel slots{extra}{eos}{noise}{auth}) listening on http://{}",
                engine.name(),
                cfg.model_name,
                cfg.step_ms,
                cfg.step_ms_per_seq,
                cfg.prefill_ms_per_1k,
                cfg.slots(),
                sim.addr
            );
        }
    }
    let signal = tokio::signal::ctrl_c().await;
    sim.shutdown().await;
    signal.wrap_err("could not listen for Ctrl-C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_is_validated_and_never_shown() {
        let mut cfg = SimConfig {
            api_key: Some(String::new()),
            ..SimConfig::default()
        };
        assert!(cfg.validate().is_err());
        cfg.api_key = Some("k-123".to_owned());
        assert!(cfg.validate().is_ok());
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("k-123"), "{shown}");
        assert!(shown.contains("<redacted>"));
        assert!(format!("{:?}", SimConfig::default()).contains("api_key: None"));
    }

    #[test]
    fn noise_settings_are_validated() {
        let with = |noise, noise_period_ms| SimConfig {
            noise,
            noise_period_ms,
            ..SimConfig::default()
        };
        assert!(with(0.0, 1000.0).validate().is_ok());
        assert!(with(0.9, 0.5).validate().is_ok());
        for (noise, period) in [
            (-0.1, 200.0),
            (0.95, 200.0),
            (f64::NAN, 200.0),
            (0.3, 0.0),
            (0.3, -5.0),
            (0.3, f64::INFINITY),
        ] {
            assert!(with(noise, period).validate().is_err(), "{noise} {period}");
        }
        // Off by default: the engine gets the contract's timing.
        assert!(SimConfig::default().noise().is_off());
        assert!(!with(0.3, 200.0).noise().is_off());
    }
}
