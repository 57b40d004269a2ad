//! A sweep from flags to files: validate, look at the server, start the
//! driver, feed the recorder, print. The headless face lives here; the live
//! view plugs into the same pieces.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use color_eyre::eyre::{bail, eyre, Result, WrapErr};
use reqwest::header::HeaderValue;
use serde_json::{Map, Value};

use crate::analysis::decide::CapacitySlo;
use crate::analysis::goodput::Slo as GoodputSlo;
use crate::cli::{Backend, HttpClient, SweepArgs};
use crate::export::Exports;
use crate::load::driver::{
    self, Command, DriverConfig, DriverEvent, LevelPlan, Replay, SearchPlan,
};
use crate::load::h1::Connections;
use crate::load::request::Target;
use crate::load::{BodySpec, Wire};
use crate::probe::client::LagMonitor;
use crate::probe::{self, ServerIdentity};
use crate::protocol::ollama::OllamaApi;
use crate::protocol::openai::Api;
use crate::report::recorder::{Recorder, RunInfo};
use crate::report::resume::PriorRun;
use crate::report::{text, time};
use crate::workload::{rng, Calibration, Traffic, Workload};

/// Exit codes of docs/architecture.md section 5.
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_INTERRUPTED: i32 = 130;

/// A value that never shows in Debug output or logs (the API key).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Flags turned into a checked plan. Every user mistake is caught here,
/// before anything is sent.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    pub base_url: String,
    pub display_target: String,
    pub endpoint_url: reqwest::Url,
    pub backend: Backend,
    pub model: Option<String>,
    /// `--engine`: the user's word over detection.
    pub engine: Option<String>,
    pub levels: Vec<LevelPlan>,
    pub warmup: u32,
    pub input_len: u32,
    pub output_len: u32,
    pub prefix_len: u32,
    pub ignore_eos: bool,
    pub percentiles: Vec<f64>,
    pub seed: u64,
    pub extra_body: Option<Map<String, Value>>,
    pub labels: BTreeMap<String, String>,
    pub api_key: Option<Secret>,
    pub result_dir: Option<PathBuf>,
    pub request_timeout: Duration,
    pub stall_timeout: Duration,
    /// The live view's frame rate.
    pub fps: u32,
    /// Key presses this close together make one change.
    pub settle: Duration,
    /// Steady-state rule for hand-set levels: completions per stream, and
    /// the largest relative standard error of per-second throughput.
    pub steady_completions: u32,
    pub steady_rse: f64,
    /// Headless output even on a terminal.
    pub no_tui: bool,
    /// `--metrics-listen`: where the live Prometheus figures are served.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `--events`: where the JSON lines go.
    pub events: Option<crate::export::events::EventsTo>,
    /// The target is the built-in simulator (demo): the view says so.
    pub simulated: bool,
    /// SLOs, prices and rounds: what turns levels into a decision.
    pub decision: DecisionConfig,
    /// Scrape the server's gauges this often; None: `--no-probe`.
    pub probe_interval: Option<Duration>,
    /// Open loop: gamma shape of the request gaps.
    pub burstiness: f64,
    /// `--replay`: the log, instead of the levels.
    pub replay: Option<Replay>,
    /// `--find-capacity`: the search, instead of the levels.
    pub search: Option<SearchPlan>,
    pub http2: bool,
    /// `--http-client`: whether measured requests may take the lean reader.
    pub http_client: HttpClient,
    /// `--rx-clock`: the clock the lean reader times arrivals by.
    pub rx_clock: crate::record::RxClock,
    /// `--insecure`: TLS certificates are not checked.
    pub insecure: bool,
    /// `--cacert`: a PEM file of extra trusted CA certificates.
    pub cacert: Option<PathBuf>,
    /// `--resume DIR`: the run to continue.
    pub resume: Option<PathBuf>,
    /// `--turns`: requests per conversation.
    pub turns: u32,
    /// Profile, range ratio, prompt source, dataset (issue 7).
    pub traffic: Traffic,
}

pub use crate::analysis::DecisionConfig;
pub use crate::probe::display_url;

impl SweepPlan {
    pub fn from_args(args: &SweepArgs) -> Result<SweepPlan> {
        let raw = args.base_url.as_deref().ok_or_else(|| {
            eyre!("--base-url is required, e.g. --base-url http://127.0.0.1:8000")
        })?;
        let base_url = normalize_base_url(raw)?;
        let path = args
            .endpoint
            .clone()
            .unwrap_or_else(|| args.backend.default_path().to_string());
        let endpoint_url = reqwest::Url::parse(&format!("{base_url}{}", with_slash(&path)))
            .wrap_err_with(|| {
                format!("--endpoint {path} does not make a valid URL with {base_url}")
            })?;

        let open_loop = !args.request_rate.is_empty() || args.replay.is_some();
        let concurrency: Vec<u32> = match args.max_concurrency {
            // Open loop: --max-concurrency caps requests in flight.
            _ if open_loop => vec![args.max_concurrency.unwrap_or(driver::MAX_CONCURRENCY)],
            Some(n) => vec![n],
            None => args.concurrency.clone(),
        };
        let exclusive = [
            ("--request-rate", !args.request_rate.is_empty()),
            ("--replay", args.replay.is_some()),
            ("--find-capacity", args.find_capacity),
        ];
        if let [(a, _), (b, _), ..] = exclusive.iter().filter(|x| x.1).collect::<Vec<_>>()[..] {
            bail!("{a} and {b} are different kinds of run: choose one");
        }
        if let Some(bad) = args.request_rate.iter().find(|r| r.is_nan() || **r <= 0.0) {
            bail!("--request-rate {bad} must be a positive number of requests per second (or inf)");
        }
        if args.turns == 0 || args.turns > 100 {
            bail!("--turns must be between 1 and 100");
        }
        if args.turns > 1 && (open_loop || args.dataset.is_some()) {
            bail!("--turns runs closed-loop conversations of generated prompts: not with --request-rate, --replay or --dataset");
        }
        if !(args.burstiness.is_finite() && args.burstiness > 0.0 && args.burstiness <= 1000.0) {
            bail!("--burstiness must be a positive number (1 is Poisson), e.g. --burstiness 0.5");
        }
        if !(args.replay_speed.is_finite() && args.replay_speed > 0.0 && args.replay_speed <= 1e6) {
            bail!("--replay-speed must be a positive number, e.g. --replay-speed 2");
        }
        if concurrency.is_empty() {
            bail!("--concurrency needs at least one level, e.g. --concurrency 1,4,16");
        }
        if let Some(bad) = concurrency
            .iter()
            .find(|&&c| c == 0 || c > driver::MAX_CONCURRENCY)
        {
            bail!(
                "concurrency {bad} is out of range: use 1 to {}",
                driver::MAX_CONCURRENCY
            );
        }
        if args.num_prompts == Some(0) {
            bail!("--num-prompts must be at least 1");
        }
        let (mut input_len, mut output_len, mut traffic) = traffic_config(args)?;
        if output_len == 0 || output_len > 10_000_000 {
            bail!("--random-output-len must be between 1 and 10,000,000");
        }
        if input_len > 10_000_000 || args.prefix_len > 10_000_000 {
            bail!("--random-input-len and --prefix-len must be at most 10,000,000 tokens");
        }
        if args.rounds == 0 || args.rounds > 100 {
            bail!("--rounds must be between 1 and 100");
        }
        // --dataset: each level sends each usable record once by default.
        let num_prompts = args
            .num_prompts
            .or(traffic.dataset.as_ref().map(|d| d.records.len() as u32));
        let replay = match &args.replay {
            Some(path) => {
                let entries = crate::load::replay::load(path)?;
                Some(Replay {
                    entries: Arc::new(entries),
                    speed: args.replay_speed,
                    max_in_flight: concurrency[0],
                })
            }
            None => None,
        };
        // A replay's lengths are the log's: its medians stand for the run
        // (the warmup, the shape line) unless lengths were given.
        if let Some(replay) = &replay {
            let median = |lens: Vec<u32>| -> Option<u32> {
                let mut lens = lens;
                lens.sort_unstable();
                lens.get(lens.len() / 2).copied()
            };
            let from_log = args.profile.is_none();
            if let Some(m) = median(replay.entries.iter().filter_map(|e| e.input_len).collect())
                .filter(|_| from_log && args.random_input_len.is_none())
            {
                input_len = m;
                traffic.profile = "replay".into();
            }
            if let Some(m) = median(replay.entries.iter().filter_map(|e| e.output_len).collect())
                .filter(|_| from_log && args.random_output_len.is_none())
            {
                output_len = m;
                traffic.profile = "replay".into();
            }
        }
        // Rounds run back to back: 1,1,1,4,4,4,...
        let levels: Vec<LevelPlan> = if let Some(replay) = &replay {
            vec![LevelPlan::closed(
                concurrency[0],
                replay.entries.len() as u32,
            )]
        } else if !args.request_rate.is_empty() {
            args.request_rate
                .iter()
                .flat_map(|&rate| {
                    let step = LevelPlan {
                        concurrency: concurrency[0],
                        num_prompts: num_prompts.unwrap_or_else(|| default_rate_prompts(rate)),
                        rate: Some(rate),
                    };
                    std::iter::repeat_n(step, args.rounds as usize)
                })
                .collect()
        } else {
            concurrency
                .iter()
                .flat_map(|&c| {
                    let step = LevelPlan::closed(
                        c,
                        num_prompts.unwrap_or(c.saturating_mul(args.prompts_per_stream.max(1))),
                    );
                    std::iter::repeat_n(step, args.rounds as usize)
                })
                .collect()
        };
        let decision = decision_config(args)?;

        let mut percentiles = args.percentiles.clone();
        if let Some(bad) = percentiles
            .iter()
            .find(|p| !(p.is_finite() && **p > 0.0 && **p <= 100.0))
        {
            bail!("percentile {bad} is out of range: use numbers in (0, 100], e.g. --percentiles 50,90,99");
        }
        // Capacity and the sweep table read p50 and p99: always keep them.
        percentiles.extend([50.0, 99.0]);
        percentiles.sort_by(f64::total_cmp);
        percentiles.dedup();

        let extra_body = match &args.extra_body {
            None => None,
            Some(raw) => match serde_json::from_str::<Value>(raw) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => bail!("--extra-body must be a JSON object, e.g. '{{\"block_size\":32}}'"),
                Err(e) => bail!("--extra-body is not valid JSON ({e})"),
            },
        };
        let mut labels = BTreeMap::new();
        for label in &args.labels {
            let Some((k, v)) = label.split_once('=') else {
                bail!("--label {label} is not K=V, e.g. --label gpu=h100");
            };
            if k.is_empty() {
                bail!("--label {label} has an empty key");
            }
            labels.insert(k.to_string(), v.to_string());
        }
        for (name, secs) in [
            ("--request-timeout", args.request_timeout),
            ("--stall-timeout", args.stall_timeout),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs < 1e7) {
                bail!("{name} must be a positive number of seconds");
            }
        }
        // Open loop has no first concurrency: two warmup requests calibrate.
        let first = if open_loop {
            2
        } else if args.find_capacity {
            1
        } else {
            concurrency[0]
        };
        let search = args.find_capacity.then(|| SearchPlan {
            max_concurrency: args.max_concurrency.unwrap_or(driver::MAX_CONCURRENCY),
            slo: decision.slo.clone(),
            num_prompts,
            prompts_per_stream: args.prompts_per_stream,
        });
        Ok(SweepPlan {
            display_target: display_url(&base_url),
            base_url,
            endpoint_url,
            backend: args.backend,
            model: args.model.clone(),
            engine: args.engine.clone().filter(|e| !e.trim().is_empty()),
            levels,
            warmup: args.warmup.unwrap_or(first),
            input_len,
            output_len,
            prefix_len: args.prefix_len,
            ignore_eos: !args.no_ignore_eos,
            percentiles,
            seed: args.seed.unwrap_or_else(rng::random_seed),
            extra_body,
            labels,
            api_key: match args.api_key.as_deref().filter(|k| !k.is_empty()) {
                Some(key) if Target::authorization_from_key(key).is_none() => bail!(
                    "the API key has characters an HTTP header cannot carry (a trailing newline?)"
                ),
                key => key.map(|k| Secret(k.to_string())),
            },
            result_dir: args.result_dir.clone(),
            request_timeout: Duration::from_secs_f64(args.request_timeout),
            stall_timeout: Duration::from_secs_f64(args.stall_timeout),
            fps: args.fps.clamp(1, 60),
            settle: if args.settle_s.is_finite() && args.settle_s >= 0.0 {
                Duration::from_secs_f64(args.settle_s.min(60.0))
            } else {
                bail!(
                    "--settle-s {}: give a number of seconds, 0 or more",
                    args.settle_s
                )
            },
            steady_completions: args.steady_completions.max(1),
            steady_rse: if args.steady_rse > 0.0 && args.steady_rse < 1.0 {
                args.steady_rse
            } else {
                bail!(
                    "--steady-rse {}: give a fraction between 0 and 1 (0.05 is ±5%)",
                    args.steady_rse
                )
            },
            // `--events -` takes stdout: no live view then.
            no_tui: args.no_tui || args.events.as_deref() == Some("-"),
            metrics_listen: match args.metrics_listen.as_deref() {
                None => None,
                Some(raw) => Some(raw.trim().parse().map_err(|_| {
                    eyre!("--metrics-listen {raw}: give an address and a port, e.g. 127.0.0.1:9464 (0.0.0.0:9464 for every interface)")
                })?),
            },
            events: match args.events.as_deref() {
                Some("") => bail!("--events needs a file name, or - for stdout"),
                raw => raw.map(crate::export::events::EventsTo::parse),
            },
            simulated: false,
            decision,
            probe_interval: if args.no_probe {
                None
            } else if args.probe_interval.is_finite()
                && args.probe_interval >= 0.05
                && args.probe_interval <= 3600.0
            {
                Some(Duration::from_secs_f64(args.probe_interval))
            } else {
                bail!("--probe-interval must be between 0.05 and 3600 seconds (or use --no-probe)");
            },
            burstiness: args.burstiness,
            replay,
            search,
            http2: args.http2,
            http_client: args.http_client,
            rx_clock: args.rx_clock.clock(),
            insecure: args.insecure,
            cacert: args.cacert.clone(),
            resume: args.resume.clone(),
            turns: args.turns,
            traffic,
        })
    }

    /// The `Authorization` header the API key makes (marked sensitive), if any.
    fn authorization(&self) -> Option<HeaderValue> {
        self.api_key
            .as_ref()
            .and_then(|k| Target::authorization_from_key(k.expose()))
    }

    /// What kind of run this is, saved as `run.kind`.
    pub fn kind(&self) -> &'static str {
        if self.replay.is_some() {
            "replay"
        } else if self.search.is_some() {
            "find-capacity"
        } else if self.levels.iter().any(|l| l.rate.is_some()) {
            "rate"
        } else {
            "sweep"
        }
    }

    fn max_concurrency(&self) -> u32 {
        let planned = self.levels.iter().map(|l| l.concurrency).max().unwrap_or(1);
        self.search
            .as_ref()
            .map_or(planned, |s| s.max_concurrency.max(planned))
    }
}

/// Requests of an open-loop level without --num-prompts: 30 seconds' worth
/// (at least 10), or vLLM's 1000 when they all go at once.
fn default_rate_prompts(rate: f64) -> u32 {
    if rate.is_finite() {
        (rate * 30.0).ceil().clamp(10.0, 100_000.0) as u32
    } else {
        1000
    }
}

/// The traffic shape from the flags: `(input_len, output_len, traffic)`.
/// A `--dataset` is read here, and its unusable lines are reported on
/// stderr (they are saved in summary.json too).
fn traffic_config(args: &SweepArgs) -> Result<(u32, u32, Traffic)> {
    use crate::workload::{corpus::Corpus, profile, Dataset, PromptSource};
    let (input_len, output_len, mut name) =
        profile::resolve_lengths(args.profile, args.random_input_len, args.random_output_len);
    let r = args.random_range_ratio;
    if !(r.is_finite() && (0.0..1.0).contains(&r)) {
        bail!("--random-range-ratio must be at least 0 and below 1, e.g. 0.5 (lengths drawn in [L/2, 3L/2])");
    }
    let source = match (args.prompt_source, &args.corpus) {
        (PromptSource::Random | PromptSource::Corpus, Some(_)) => PromptSource::Corpus,
        (PromptSource::Corpus, None) => {
            bail!("--prompt-source corpus needs a text file: --corpus FILE")
        }
        (PromptSource::Prose, Some(_)) => {
            bail!("--corpus goes with --prompt-source corpus, not prose")
        }
        (source, None) => source,
    };
    let corpus = match &args.corpus {
        Some(path) => Some(Arc::new(Corpus::load(path).map_err(|e| eyre!(e))?)),
        None => None,
    };
    let dataset = match &args.dataset {
        Some(path) => {
            if args.corpus.is_some() || args.prompt_source != PromptSource::Random {
                bail!(
                    "--dataset prompts are sent as given: leave out --prompt-source and --corpus"
                );
            }
            if args.prefix_len > 0 {
                bail!("--prefix-len does not go with --dataset (its prompts are sent as given)");
            }
            if args.replay.is_some() {
                bail!("--dataset and --replay are different kinds of run: choose one");
            }
            let dataset = Dataset::load(path).map_err(|e| eyre!(e))?;
            for skipped in dataset.skipped.iter().take(20) {
                eprintln!(
                    "tokbench: dataset line {}: {}",
                    skipped.line, skipped.reason
                );
            }
            if dataset.skipped.len() > 20 {
                eprintln!(
                    "tokbench: dataset: {} more lines skipped (all listed in summary.json)",
                    dataset.skipped.len() - 20
                );
            }
            if !dataset.skipped.is_empty() {
                eprintln!(
                    "tokbench: dataset {}: {} usable requests, {} lines skipped",
                    dataset.name,
                    dataset.records.len(),
                    dataset.skipped.len()
                );
            }
            name = "dataset".into();
            Some(Arc::new(dataset))
        }
        None => None,
    };
    Ok((
        input_len,
        output_len,
        Traffic {
            profile: name,
            range_ratio: r,
            source,
            corpus,
            dataset,
            output_len_explicit: args.random_output_len.is_some(),
            save_prompts: args.save_prompts,
        },
    ))
}

fn decision_config(args: &SweepArgs) -> Result<DecisionConfig> {
    let positive = |name: &str, v: Option<f64>| -> Result<Option<f64>> {
        match v {
            Some(x) if !(x.is_finite() && x > 0.0) => bail!("{name} must be a positive number"),
            other => Ok(other),
        }
    };
    let slo = CapacitySlo {
        ttft_p99_ms: positive("--slo-ttft-p99-ms", args.slo_ttft_p99_ms)?,
        min_stream_tok_s: positive(
            "--slo-min-stream-tok-s",
            Some(args.slo_min_stream_tok_s).filter(|v| *v != 0.0),
        )?,
        tpot_p99_ms: positive("--slo-tpot-p99-ms", args.slo_tpot_p99_ms)?,
        ..CapacitySlo::default()
    };
    let goodput = if args.goodput.is_empty() {
        None
    } else {
        Some(GoodputSlo::parse(&args.goodput).map_err(|e| eyre!("--goodput: {e}"))?)
    };
    let utilization = positive("--utilization", args.utilization)?;
    if utilization.is_some_and(|u| u > 1.0) {
        bail!("--utilization is a share of hours: use a number in (0, 1], e.g. 0.72");
    }
    if args.api_price_per_m.is_some() && args.gpu_price_per_hour.is_none() {
        bail!("--api-price-per-m needs --gpu-price-per-hour to compare against");
    }
    Ok(DecisionConfig {
        slo,
        goodput,
        gpu_price_per_hour: positive("--gpu-price-per-hour", args.gpu_price_per_hour)?,
        api_price_per_m: positive("--api-price-per-m", args.api_price_per_m)?,
        utilization,
        rounds: args.rounds,
        gpus: args.gpus,
    })
}

/// `http://host:8000/` and `http://host:8000/v1` both mean the root `http://host:8000`.
pub fn normalize_base_url(raw: &str) -> Result<String> {
    let trimmed = raw.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    // A refused URL is echoed, its credentials not.
    let shown = without_userinfo(raw);
    let url = reqwest::Url::parse(trimmed).map_err(|e| {
        eyre!("--base-url {shown} is not a URL ({e}); write it like http://127.0.0.1:8000")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("--base-url {shown} must start with http:// or https://");
    }
    Ok(trimmed.to_string())
}

/// `raw` with any `user:password@` before the host replaced by `***@`; by
/// text, as `raw` may not parse as a URL.
fn without_userinfo(raw: &str) -> String {
    let start = raw.find("://").map_or(0, |i| i + 3);
    let end = raw[start..]
        .find(['/', '?', '#'])
        .map_or(raw.len(), |i| start + i);
    match raw[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &raw[..start], &raw[start + at..]),
        None => raw.to_string(),
    }
}

/// The URL without credentials, for screens and files.
fn with_slash(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// `results/20261129-191400`, or with `-2`, `-3`, ... when that exists.
pub fn default_result_dir(root: &Path, now: SystemTime) -> PathBuf {
    let stamp = time::compact(now);
    let mut dir = root.join(&stamp);
    let mut n = 2;
    while dir.exists() {
        dir = root.join(format!("{stamp}-{n}"));
        n += 1;
    }
    dir
}

/// Facts about the run that are not flags: who answered, and where files go.
pub struct Prepared {
    pub plan: SweepPlan,
    pub client: reqwest::Client,
    pub identity: ServerIdentity,
    pub model: String,
    pub run: RunInfo,
    pub result_dir: PathBuf,
    /// Prompt-length model before warmup: the server's `/tokenize` when it has one.
    pub calibration: Calibration,
    /// `--resume`: the levels kept from the run continued.
    pub prior: Option<PriorRun>,
    /// Warnings printed while preparing (open-file limit, --insecure), for
    /// the events too.
    pub warnings: Vec<String>,
}

impl Prepared {
    /// What the exporters (`--metrics-listen`, `--events`) need of the run.
    pub fn export_plan(&self) -> crate::export::ExportPlan<'_> {
        crate::export::ExportPlan {
            metrics_listen: self.plan.metrics_listen,
            events: self.plan.events.as_ref(),
            target: &self.plan.display_target,
            model: &self.model,
            run_id: self
                .result_dir
                .file_name()
                .and_then(|n| n.to_str())
                .map_or_else(|| self.run.date.clone(), str::to_string),
            level_offset: self.prior.as_ref().map_or(0, |p| p.next_level_index),
            levels: &self.plan.levels,
            search: self.plan.search.is_some(),
            warnings: &self.warnings,
        }
    }
}

/// Look at the server and settle model and identity. Errors here mean the
/// run cannot start (exit 1).
pub async fn prepare(plan: SweepPlan, engine_override: Option<(&str, &str)>) -> Result<Prepared> {
    let now = SystemTime::now();
    let result_dir = match (&plan.resume, &plan.result_dir) {
        (Some(dir), _) | (None, Some(dir)) => dir.clone(),
        (None, None) => default_result_dir(Path::new("results"), now),
    };
    // A full disk or a read-only folder is found before anything is sent.
    probe_writable(&result_dir)?;
    let open_files = raise_open_file_limit(plan.max_concurrency());
    if let Some(warning) = &open_files {
        eprintln!("tokbench: {warning}");
    }
    let mut prepared = prepare_target(plan, engine_override, result_dir.clone(), now).await;
    if let Ok(prepared) = &mut prepared {
        prepared.warnings.extend(open_files);
    }
    if prepared.is_err() {
        // Nothing was measured: leave no empty folder behind.
        let _ = std::fs::remove_dir(&result_dir);
    }
    prepared
}

/// Create the result folder and write (and sync) a probe file in it, so a
/// full disk or a read-only folder fails in one line before any load.
pub fn probe_writable(dir: &Path) -> Result<()> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)
        .wrap_err_with(|| format!("cannot create the result folder {}", dir.display()))?;
    let probe = dir.join(".tokbench-write-probe");
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&probe)?;
        // Room for a few level files: a nearly full disk fails here too.
        file.write_all(&[b' '; 256 * 1024])?;
        file.sync_all()
    })();
    let _ = std::fs::remove_file(&probe);
    result.wrap_err_with(|| {
        format!(
            "cannot write in the result folder {} (full disk or no permission?); choose another with --result-dir",
            dir.display()
        )
    })
}

/// Lift the soft open-file limit to the hard one: every stream holds a
/// socket. A warning when the streams asked for still cannot fit.
pub fn raise_open_file_limit(streams: u32) -> Option<String> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit only read and write the struct given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
        // Sockets plus room for files, the terminal and the probe.
        let needed = u64::from(streams) + 64;
        if limit.rlim_cur < needed {
            return Some(format!(
                "the open-file limit ({}) is too low for {streams} streams: requests may fail with 'too many open files'; raise it (ulimit -n {needed}, or the hard limit in /etc/security/limits.conf)",
                limit.rlim_cur
            ));
        }
        None
    }
    #[cfg(not(unix))]
    {
        let _ = streams;
        None
    }
}

async fn prepare_target(
    plan: SweepPlan,
    engine_override: Option<(&str, &str)>,
    result_dir: PathBuf,
    now: SystemTime,
) -> Result<Prepared> {
    let mut plan = plan;
    let prior = match &plan.resume {
        Some(dir) => {
            if plan.search.is_some() || plan.replay.is_some() {
                bail!("--resume continues a sweep or a rate run; a --find-capacity or --replay run starts again");
            }
            let prior = PriorRun::load(dir)?;
            // Prompts follow from the first part's seed but never repeat its
            // prompts: a server's prefix cache would answer them.
            if let Some(seed) = prior.run.get("seed").and_then(Value::as_u64) {
                plan.seed = seed.wrapping_add(
                    0x9E37_79B9_7F4A_7C15u64.wrapping_mul(prior.next_level_index as u64),
                );
            }
            plan.levels = prior.remaining(&plan.levels);
            Some(prior)
        }
        None => None,
    };
    // The key rides on every request of this client, and this client talks
    // to the target only. Marked sensitive, it never shows in Debug output.
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(auth) = plan.authorization() {
        headers.insert(reqwest::header::AUTHORIZATION, auth);
    }
    let tls = TlsTrust::of(&plan)?;
    let mut builder = tls
        .apply(reqwest::Client::builder())
        .default_headers(headers)
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        // One idle connection kept per stream: no reconnects between requests.
        .pool_max_idle_per_host(plan.max_concurrency() as usize)
        .pool_idle_timeout(Duration::from_secs(90));
    builder = if plan.http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    let mut warnings = Vec::new();
    if plan.insecure {
        let warning =
            "--insecure: TLS certificates are NOT checked; the API key could reach an impostor";
        eprintln!("tokbench: WARNING {warning}");
        warnings.push(warning.to_string());
    }
    let client = builder.build().wrap_err("cannot build the HTTP client")?;
    // The connect probe opens a fresh connection per sample, under the same trust.
    let fresh_connections = tls
        .apply(reqwest::Client::builder())
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(0)
        .build()
        .wrap_err("cannot build the HTTP client")?;
    let mut identity = probe::preflight(&client, &fresh_connections, &plan.base_url).await?;
    if let Some((engine, version)) = engine_override {
        identity.engine = engine.to_string();
        identity.engine_version = Some(version.to_string());
    }
    if let Some(engine) = &plan.engine {
        identity.engine = engine.trim().to_ascii_lowercase();
    }
    let model = match &plan.model {
        Some(m) => m.clone(),
        None => identity.models.first().cloned().ok_or_else(|| {
            eyre!(
                "{} lists no models at /v1/models: name one with --model",
                plan.display_target
            )
        })?,
    };
    let calibration = first_guess_calibration(&client, &plan, &model).await;
    let run = RunInfo {
        target: plan.display_target.clone(),
        engine: identity.engine.clone(),
        engine_version: identity.engine_version.clone(),
        model: model.clone(),
        backend: plan.backend.as_str().into(),
        profile: plan.traffic.profile.clone(),
        input_len: plan.input_len,
        output_len: plan.output_len,
        ignore_eos: plan.ignore_eos,
        extra_body: plan.extra_body.clone().map(Value::Object),
        labels: plan.labels.clone(),
        seed: plan.seed,
        started_at: time::iso8601(now),
        date: time::compact(now),
        percentiles: plan.percentiles.clone(),
        prefix_len: plan.prefix_len,
        decision: plan.decision.clone(),
        warmup_requests: plan.warmup,
        connect_probe_ms: identity.connect_probe_ms,
        http_client: http_client_label(&plan),
        burstiness: plan.burstiness,
        kind: plan.kind().into(),
        turns: plan.turns,
        traffic: plan.traffic.clone(),
    };
    if let Some(prior) = &prior {
        prior.check_same(&run.to_json())?;
        if plan.levels.is_empty() {
            bail!(
                "--resume {}: every level of this plan is already finished there; nothing to run",
                result_dir.display()
            );
        }
    }
    Ok(Prepared {
        plan,
        client,
        identity,
        model,
        run,
        result_dir,
        calibration,
        prior,
        warnings,
    })
}

/// Tokens per word of our prompt text by the server's own tokenizer, from a
/// sample that is not used later. The chat template's share is unknown until
/// the warmup requests report their real prompt length.
async fn first_guess_calibration(
    client: &reqwest::Client,
    plan: &SweepPlan,
    model: &str,
) -> Calibration {
    let words = (plan.input_len as usize).clamp(32, 512);
    let sample = Workload::new(plan.seed ^ 0x5eed, plan.input_len, plan.output_len)
        .with_traffic(&plan.traffic)
        .prompt_of_words(words);
    match probe::tokenize_count(client, &plan.base_url, model, &sample.text).await {
        Some(tokens) if tokens > 0 => Calibration {
            tokens_per_word: tokens as f64 / words as f64,
            overhead_tokens: 0.0,
            slope_from_tokenizer: true,
        },
        _ => Calibration::default(),
    }
}

fn wire_of(backend: Backend) -> Wire {
    match backend {
        Backend::OpenaiChat => Wire::OpenAi(Api::Chat),
        Backend::OpenaiCompletions => Wire::OpenAi(Api::Completions),
        Backend::OllamaGenerate => Wire::Ollama(OllamaApi::Generate),
        Backend::OllamaChat => Wire::Ollama(OllamaApi::Chat),
    }
}

/// Which TLS certificates every client of a run accepts: the Mozilla roots, plus
/// `--cacert`'s, or anything at all under `--insecure`.
struct TlsTrust {
    insecure: bool,
    extra_roots: Vec<reqwest::Certificate>,
}

impl TlsTrust {
    fn of(plan: &SweepPlan) -> Result<TlsTrust> {
        let extra_roots = match &plan.cacert {
            Some(path) => {
                let pem = std::fs::read(path)
                    .wrap_err_with(|| format!("cannot read --cacert {}", path.display()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                    eyre!(
                        "--cacert {}: not a PEM certificate file ({})",
                        path.display(),
                        innermost(&e)
                    )
                })?;
                if certs.is_empty() {
                    bail!(
                        "--cacert {}: no certificate in it (expected PEM, -----BEGIN CERTIFICATE-----)",
                        path.display()
                    );
                }
                // PEM armour around bytes that are not X.509 passes the parse above and
                // fails only when a client is built, in words about a "peer" certificate:
                // try each one here, so the error names the file and the certificate.
                let count = certs.len();
                for (index, cert) in certs.iter().enumerate() {
                    if let Err(e) = reqwest::Client::builder()
                        .add_root_certificate(cert.clone())
                        .build()
                    {
                        bail!(
                            "--cacert {}: certificate {} of {count} is not a valid X.509 certificate ({})",
                            path.display(),
                            index + 1,
                            innermost(&e)
                        );
                    }
                }
                certs
            }
            None => Vec::new(),
        };
        Ok(TlsTrust {
            insecure: plan.insecure,
            extra_roots,
        })
    }

    fn apply(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        for cert in &self.extra_roots {
            builder = builder.add_root_certificate(cert.clone());
        }
        builder.danger_accept_invalid_certs(self.insecure)
    }
}

/// The most specific message in an error's chain (reqwest's own says only
/// "builder error").
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

/// The lean client (src/load/h1.rs) for measured requests over plain HTTP/1.1, unless
/// `--http2` or `--http-client reqwest` asks otherwise. A key that is not visible
/// ASCII stays with reqwest, which sends its bytes as given; so do https:// and URLs
/// with credentials ([`Connections::for_url`] declines those).
fn lean_connections(plan: &SweepPlan, authorization: Option<&HeaderValue>) -> Option<Connections> {
    if plan.http2 || plan.http_client == HttpClient::Reqwest {
        return None;
    }
    let auth = match authorization {
        Some(a) => Some(a.to_str().ok()?),
        None => None,
    };
    Connections::for_url(&plan.endpoint_url, auth, plan.max_concurrency() as usize)
        .map(|c| c.with_rx_clock(plan.rx_clock))
}

/// `run.http_client`: which client [`start_driver`] gives the measured requests.
fn http_client_label(plan: &SweepPlan) -> &'static str {
    if lean_connections(plan, plan.authorization().as_ref()).is_some() {
        "lean-http1"
    } else if plan.http2 {
        "reqwest-http2"
    } else {
        "reqwest-http1"
    }
}

/// Start the driver for a prepared run.
pub fn start_driver(
    prepared: &Prepared,
    run_start: Instant,
    watch_server: bool,
) -> driver::DriverHandle {
    let plan = &prepared.plan;
    let authorization = plan.authorization();
    let h1 = lean_connections(plan, authorization.as_ref()).map(Arc::new);
    let target = Target {
        client: prepared.client.clone(),
        h1,
        wire: wire_of(plan.backend),
        url: plan.endpoint_url.clone(),
        // The prepared client already sends the key on every request; here
        // it is what error messages are cleaned of (a server may quote it).
        authorization,
        request_timeout: plan.request_timeout,
        stall_timeout: plan.stall_timeout,
    };
    driver::spawn(
        DriverConfig {
            plan: plan.levels.clone(),
            warmup: plan.warmup,
            target: Arc::new(target),
            body: BodySpec {
                wire: wire_of(plan.backend),
                model: prepared.model.clone(),
                ignore_eos: plan.ignore_eos,
                extra_body: plan.extra_body.clone(),
            },
            workload: {
                let mut workload = Workload::new(plan.seed, plan.input_len, plan.output_len)
                    .with_shared_prefix(plan.prefix_len)
                    .with_traffic(&plan.traffic);
                workload.calibration = prepared.calibration;
                workload
            },
            seed: plan.seed,
            burstiness: plan.burstiness,
            replay: plan.replay.clone(),
            search: plan.search.clone(),
            turns: plan.turns,
            watch_server,
            first_series: prepared.prior.as_ref().map_or(0, |p| p.last_series),
        },
        run_start,
    )
}

/// Start the server probe for a prepared run, unless `--no-probe`. The
/// receiver never yields when there is nothing to scrape.
pub fn start_probe(
    prepared: &Prepared,
    run_start: Instant,
) -> tokio::sync::mpsc::UnboundedReceiver<probe::live::ServerSample> {
    let Some(interval) = prepared.plan.probe_interval else {
        return tokio::sync::mpsc::unbounded_channel().1;
    };
    let http = probe::live::spawn(
        prepared.client.clone(),
        prepared.plan.base_url.clone(),
        prepared.identity.engine_kind(),
        interval,
        run_start,
    );
    // GPU gauges when tokbench runs on the GPU host; silent without nvidia-smi.
    let gpu = probe::gpu::spawn_gpu_probe(probe::gpu::DEFAULT_PROGRAM.into(), interval, run_start);
    merge_samples(http, gpu)
}

/// One stream of samples from two probes; ends when both have.
fn merge_samples(
    mut a: tokio::sync::mpsc::UnboundedReceiver<probe::live::ServerSample>,
    mut b: tokio::sync::mpsc::UnboundedReceiver<probe::live::ServerSample>,
) -> tokio::sync::mpsc::UnboundedReceiver<probe::live::ServerSample> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut a_open, mut b_open) = (true, true);
        while a_open || b_open {
            let sample = tokio::select! {
                s = a.recv(), if a_open => s.or_else(|| { a_open = false; None }),
                s = b.recv(), if b_open => s.or_else(|| { b_open = false; None }),
            };
            if let Some(sample) = sample {
                if tx.send(sample).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP.
pub async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        // SIGHUP is the SSH session dropping: save, as for Ctrl-C.
        if let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
                _ = hup.recv() => {},
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The headless face: progress on stderr, a block per level and the final
/// table on stdout (on stderr when `--events -` takes stdout). Returns the
/// exit code.
pub async fn run_headless(prepared: Prepared) -> Result<i32> {
    let mut exports = Exports::open(&prepared.export_plan())?;
    let result = headless(prepared, &mut exports).await;
    if let Err(e) = &result {
        exports.failed(&one_line(e), EXIT_FAILED);
    }
    result
}

/// An error and its causes on one line, as main prints it.
pub fn one_line(e: &color_eyre::eyre::Report) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

async fn headless(prepared: Prepared, exports: &mut Exports) -> Result<i32> {
    let mut out: Box<dyn Write> = if exports.events_on_stdout() {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let lag = LagMonitor::start();
    let mut recorder = Recorder::open(
        &prepared.result_dir,
        prepared.run.clone(),
        lag,
        prepared.prior.clone(),
    )?;
    exports.run_started(&prepared.export_plan(), &recorder)?;
    let run_start = Instant::now();
    let mut driver = start_driver(&prepared, run_start, false);
    exports.attach(&driver);
    let mut server_samples = start_probe(&prepared, run_start);
    let progress = Progress::new(prepared.plan.levels.len());
    eprintln!(
        "tokbench: {} ({}), model {}, {}; results in {}",
        prepared.plan.display_target,
        match prepared.identity.engine_version.as_deref() {
            Some(version) => format!("{} {version}", prepared.identity.engine),
            None => prepared.identity.engine.clone(),
        },
        prepared.model,
        text::shape_line(&prepared.run),
        recorder.dir().display()
    );
    if let Some(addr) = exports.metrics_addr() {
        eprintln!("tokbench: live metrics at http://{addr}/metrics");
    }

    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut interrupt = std::pin::pin!(interrupted());
    let mut was_interrupted = false;
    let mut state = ProgressState::default();
    let mut run_error = None;
    loop {
        tokio::select! {
            event = driver.events.recv() => {
                let Some(event) = event else { break };
                state.observe(&event);
                let finished = recorder.on_event(&event)?.map(|l| l.info.index);
                exports.on_event(&event, finished, &recorder)?;
                if let Some(level) = finished
                    .and_then(|i| recorder.finished().iter().rev().find(|l| l.info.index == i))
                    .filter(|l| l.file.is_some())
                {
                    progress.clear();
                    let _ = write!(out, "{}", text::level_block(level, &prepared.run));
                    let _ = out.flush();
                }
                match event {
                    DriverEvent::Finished { error, .. } => {
                        run_error = error;
                        break;
                    }
                    DriverEvent::WarmupFinished { ok, failed, calibration, .. } => {
                        progress.clear();
                        eprintln!(
                            "tokbench: warmup done ({ok} ok, {failed} failed); prompts calibrated at {:.2} tokens/word + {:.0} template tokens",
                            calibration.tokens_per_word, calibration.overhead_tokens
                        );
                    }
                    _ => {}
                }
            }
            Some(sample) = server_samples.recv() => recorder.on_server_sample(&sample),
            _ = ticker.tick() => {
                recorder.flush_if_due()?;
                progress.show(&state, driver.in_flight.load(Ordering::Relaxed), run_start.elapsed());
            }
            _ = &mut interrupt, if !was_interrupted => {
                was_interrupted = true;
                progress.clear();
                eprintln!("tokbench: interrupted, saving what was measured");
                let _ = driver.commands.send(Command::Stop);
            }
        }
    }
    progress.clear();
    recorder.finish()?;
    if let Some(error) = run_error {
        eprintln!("tokbench: {error}");
        exports
            .finish(&recorder, EXIT_FAILED, Some(&error), was_interrupted)
            .await?;
        return Ok(EXIT_FAILED);
    }
    let _ = writeln!(out);
    print_results(&recorder, &mut out);
    let code = if was_interrupted {
        EXIT_INTERRUPTED
    } else {
        EXIT_OK
    };
    exports
        .finish(&recorder, code, None, was_interrupted)
        .await?;
    Ok(code)
}

/// The closing lines every face prints after the run: the sweep table, the
/// capacity, the knee, the cost verdict, the notes and the result folder.
/// A closed stdout is not the run's failure: the files hold the same.
pub fn print_results(recorder: &Recorder, out: &mut dyn Write) {
    let _ = write!(
        out,
        "{}",
        text::sweep_table(recorder.finished(), recorder.run())
    );
    let decision = recorder.decision();
    let _ = writeln!(out, "{}", decision.capacity_line());
    if let Some(knee) = &decision.knee {
        let _ = writeln!(out, "knee: {}", knee.reason);
    }
    if let Some(cost) = recorder.cost(&decision) {
        let _ = writeln!(out, "cost: {}", cost.verdict);
    }
    for diagnosis in recorder.diagnoses_for(&decision) {
        let _ = writeln!(out, "note: {}", diagnosis.message);
    }
    let _ = writeln!(out, "results: {}", recorder.dir().display());
    let _ = out.flush();
}

/// What the progress line shows, folded from driver events.
#[derive(Default)]
struct ProgressState {
    level: Option<(usize, u32, Option<u32>)>,
    plan_position: Option<usize>,
    done_in_level: u32,
    failed_total: u64,
    warmup: bool,
}

impl ProgressState {
    fn observe(&mut self, event: &DriverEvent) {
        match event {
            DriverEvent::WarmupStarted { .. } => self.warmup = true,
            DriverEvent::WarmupFinished { .. } => self.warmup = false,
            DriverEvent::LevelStarted(info) => {
                self.level = Some((info.index, info.concurrency, info.num_prompts));
                self.plan_position = info.plan_index;
                self.done_in_level = 0;
            }
            DriverEvent::Record(r) => {
                if self.level.is_some_and(|(i, _, _)| i == r.level) {
                    self.done_in_level += 1;
                }
                if r.is_failed() {
                    self.failed_total += 1;
                }
            }
            _ => {}
        }
    }
}

/// The one-line progress display on stderr: rewritten in place on a
/// terminal, a line every few seconds otherwise.
struct Progress {
    levels: usize,
    tty: bool,
    last_plain: std::cell::Cell<Option<Instant>>,
}

impl Progress {
    fn new(levels: usize) -> Progress {
        Progress {
            levels,
            tty: std::io::stderr().is_terminal(),
            last_plain: std::cell::Cell::new(None),
        }
    }

    fn show(&self, state: &ProgressState, in_flight: u32, elapsed: Duration) {
        let line = if state.warmup {
            format!("warmup: {in_flight} in flight")
        } else if let Some((_, concurrency, total)) = state.level {
            let position = state
                .plan_position
                .map_or_else(String::new, |p| format!("level {}/{} ", p + 1, self.levels));
            let total = total.map_or_else(|| "-".into(), |t| t.to_string());
            format!(
                "{position}concurrency {concurrency}: {}/{total} done, {in_flight} in flight, {} failed",
                state.done_in_level, state.failed_total
            )
        } else {
            return;
        };
        let clock = format!("[{:>4.0}s] ", elapsed.as_secs_f64());
        if self.tty {
            eprint!("\r\x1b[2K{clock}{line}");
        } else if self
            .last_plain
            .get()
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5))
        {
            self.last_plain.set(Some(Instant::now()));
            eprintln!("{clock}{line}");
        }
    }

    fn clear(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(args: &[&str]) -> Result<SweepPlan> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(
            ["tokbench", "sweep", "--base-url", "http://127.0.0.1:9"]
                .iter()
                .chain(args),
        )
        .map_err(|e| eyre!("{e}"))?;
        match cli.command {
            crate::cli::Command::Sweep(sweep) => SweepPlan::from_args(&sweep),
            _ => bail!("not a sweep"),
        }
    }

    #[test]
    fn a_replay_takes_its_lengths_from_the_log_unless_given() {
        let dir = std::env::temp_dir().join(format!("tokbench-replay-len-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("log.jsonl");
        // Input lengths 10, 30, 20 (median 20); outputs 5 and 7 (median of two: the upper, 7).
        std::fs::write(
            &log,
            "{\"t\":0,\"input_len\":10,\"output_len\":5}\n{\"t\":1,\"input_len\":30}\n{\"t\":2,\"input_len\":20,\"output_len\":7}\n",
        )
        .expect("write");
        let path = log.display().to_string();
        let plan = plan_of(&["--replay", &path]).expect("plan");
        assert_eq!((plan.input_len, plan.output_len), (20, 7));
        assert_eq!(plan.traffic.profile, "replay");
        assert_eq!(plan.levels.len(), 1);
        assert_eq!(plan.levels[0].num_prompts, 3);
        let plan = plan_of(&["--replay", &path, "--random-output-len", "64"]).expect("plan");
        assert_eq!((plan.input_len, plan.output_len), (20, 64));
        let err = plan_of(&["--replay", &path, "--request-rate", "2"]).expect_err("exclusive");
        assert!(err.to_string().contains("choose one"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn base_url_forms() {
        assert_eq!(
            normalize_base_url("http://h:8000/").ok().as_deref(),
            Some("http://h:8000")
        );
        assert_eq!(
            normalize_base_url("http://h:8000/v1").ok().as_deref(),
            Some("http://h:8000")
        );
        assert!(normalize_base_url("h:8000").is_err());
        assert!(normalize_base_url("not a url").is_err());
        assert_eq!(display_url("http://user:secret@h:8000"), "http://h:8000");
    }

    #[test]
    fn result_dirs_never_clash() {
        let root = std::env::temp_dir().join(format!("tokbench-dirs-{}", std::process::id()));
        let now = SystemTime::UNIX_EPOCH;
        let first = default_result_dir(&root, now);
        assert!(first.ends_with("19700101-000000"));
        std::fs::create_dir_all(&first).expect("mkdir");
        let second = default_result_dir(&root, now);
        assert!(second.ends_with("19700101-000000-2"));
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn measured_requests_take_the_lean_client_only_where_it_applies() {
        let lean = |args: &[&str], url: Option<&str>, key: Option<&str>| {
            let mut plan = plan_of(args).expect("plan");
            if let Some(url) = url {
                plan.endpoint_url = url.parse().expect("url");
            }
            let auth = key.and_then(Target::authorization_from_key);
            lean_connections(&plan, auth.as_ref()).is_some()
        };
        assert!(lean(&[], None, None));
        assert!(lean(&["--http-client", "auto"], None, Some("sk-visible")));
        assert!(!lean(&["--http-client", "reqwest"], None, None));
        assert!(!lean(&["--http2"], None, None));
        assert!(!lean(&[], Some("https://h/v1/chat/completions"), None));
        assert!(!lean(&[], Some("http://u:p@h/v1/chat/completions"), None));
        // Valid in a header, but not visible ASCII: reqwest sends it as given.
        assert!(!lean(&[], None, Some("s\u{e9}same")));
    }
}
