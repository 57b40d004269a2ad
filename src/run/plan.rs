//! Flags turned into a checked plan: every user mistake is caught here,
//! before anything is sent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use color_eyre::eyre::{bail, eyre, Result, WrapErr};
use reqwest::header::HeaderValue;
use serde_json::{Map, Value};

use super::timing::TimingPlan;
use super::url::{normalize_base_url, with_slash};
use super::Secret;
use crate::analysis::decide::CapacitySlo;
use crate::analysis::goodput::Slo as GoodputSlo;
use crate::analysis::DecisionConfig;
use crate::cli::{Backend, HttpClient, SweepArgs};
use crate::load::driver::{self, FitConfig, LevelPlan, Replay, SearchPlan};
use crate::load::probes::{ProbePlan, MAX_PROBE_RATE};
use crate::load::request::Target;
use crate::report::thresholds::{Checks, Planned};
use crate::workload::{rng, Traffic, MAX_LEN_TOKENS};

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
    /// The user gave `--seed` (on the command line or in a config file):
    /// the run repeats those prompts on purpose.
    pub seed_given: bool,
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
    /// Work between two planned levels: a face over the sweep sets it
    /// (tune's `--reset-cache`); no flag of the sweep does.
    pub between_levels: Option<crate::load::driver::BetweenLevels>,
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
    /// `--gpu-metrics`: the DCGM exporter the GPU figures come from, instead
    /// of nvidia-smi on this host.
    pub gpu_metrics: Option<GpuMetrics>,
    /// Open loop: gamma shape of the request gaps.
    pub burstiness: f64,
    /// `--probe-rate`: probe requests beside the load.
    pub probes: Option<ProbePlan>,
    /// `--replay`: the log, instead of the levels.
    pub replay: Option<Replay>,
    /// `--find-capacity`: the search, instead of the levels.
    pub search: Option<SearchPlan>,
    pub http2: bool,
    /// `--http-client`: whether measured requests may take the lean reader.
    pub http_client: HttpClient,
    /// `--rx-clock`: the clock the lean reader times arrivals by.
    pub rx_clock: crate::record::RxClock,
    /// `--tx-clock`: the clock the lean reader times departures by.
    pub tx_clock: crate::record::TxClock,
    /// `--insecure`: TLS certificates are not checked.
    pub insecure: bool,
    /// `--force`: run even when the open-file limit is too low.
    pub force: bool,
    /// `--cacert`: a PEM file of extra trusted CA certificates.
    pub cacert: Option<PathBuf>,
    /// `--resume DIR`: the run to continue.
    pub resume: Option<PathBuf>,
    /// `--turns`: requests per conversation.
    pub turns: u32,
    /// Profile, range ratio, prompt source, dataset (issue 7).
    pub traffic: Traffic,
    /// `--duration`, `--shard`, `--start-at`, `--level-gap` (issue 13).
    pub timing: TimingPlan,
    /// `--budget`, or the default budget of a sweep given no count: the
    /// levels fitted to it (see `load::driver::FitConfig`); None for a run
    /// of fixed counts or durations, and for open loop, replay and search.
    pub fit: Option<FitConfig>,
    /// `--threshold`: the checks judged at the end, and the planned levels
    /// they may name (checked here, before anything is sent).
    pub thresholds: Checks,
}

/// `--gpu-metrics URL`: a DCGM exporter's page.
#[derive(Clone, Debug)]
pub struct GpuMetrics {
    /// As given: credentials in it are sent (HTTP basic auth).
    pub url: String,
    /// As shown and saved: without credentials.
    pub shown: String,
}

impl GpuMetrics {
    fn parse(raw: &str) -> Result<GpuMetrics> {
        // A refused URL is echoed, its credentials not.
        let shown = crate::redact::url(raw);
        let url = reqwest::Url::parse(raw.trim()).map_err(|e| {
            eyre!("--gpu-metrics {shown} is not a URL ({e}); write it like http://gpu-node:9400/metrics")
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            bail!("--gpu-metrics {shown} must start with http:// or https://");
        }
        Ok(GpuMetrics {
            url: url.to_string(),
            shown,
        })
    }
}

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
                let shown = crate::redact::base_url(&base_url);
                format!("--endpoint {path} does not make a valid URL with {shown}")
            })?;

        let open_loop =
            !args.request_rate.is_empty() || args.replay.is_some() || args.ramp.is_some();
        let concurrency: Vec<u32> = match args.max_concurrency {
            // Open loop: --max-concurrency caps requests in flight.
            _ if open_loop => vec![args.max_concurrency.unwrap_or(driver::MAX_CONCURRENCY)],
            Some(n) => vec![n],
            None => args.concurrency.clone(),
        };
        let exclusive = [
            ("--request-rate", !args.request_rate.is_empty()),
            ("--replay", args.replay.is_some()),
            ("--ramp", args.ramp.is_some()),
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
        if output_len == 0 || output_len > MAX_LEN_TOKENS {
            bail!(
                "--random-output-len must be between 1 and {}",
                crate::fmt::group(f64::from(MAX_LEN_TOKENS), 0)
            );
        }
        if input_len > MAX_LEN_TOKENS || args.prefix_len > MAX_LEN_TOKENS {
            bail!(
                "--random-input-len and --prefix-len must be at most {} tokens",
                crate::fmt::group(f64::from(MAX_LEN_TOKENS), 0)
            );
        }
        if args.rounds == 0 || args.rounds > 100 {
            bail!("--rounds must be between 1 and 100");
        }
        let per_stream = args
            .prompts_per_stream
            .unwrap_or(DEFAULT_PROMPTS_PER_STREAM);
        // --dataset: each level sends each usable record once by default.
        let num_prompts = args
            .num_prompts
            .or(traffic.dataset.as_ref().map(|d| d.records.len() as u32));
        let trace_flags = [
            ("--trace-format", args.trace_format.is_some()),
            ("--trace-block-tokens", args.trace_block_tokens.is_some()),
            ("--trace-filter", !args.trace_filter.is_empty()),
            ("--replay-window", args.replay_window.is_some()),
            ("--replay-max-requests", args.replay_max_requests.is_some()),
            ("--strict-lengths", args.strict_lengths),
        ];
        if let (None, Some((flag, _))) = (&args.replay, trace_flags.iter().find(|f| f.1)) {
            bail!("{flag} reads a --replay trace: give one with --replay FILE");
        }
        let ramp = ramp_of(args)?;
        let replay = match &args.replay {
            None if ramp.is_some() => ramp.map(|r| Replay::of_ramp(r, concurrency[0])),
            Some(path) => {
                let opts = crate::load::trace::TraceOptions {
                    format: args
                        .trace_format
                        .as_deref()
                        .and_then(crate::load::trace::TraceFormat::parse),
                    block_tokens: args.trace_block_tokens,
                    filters: args.trace_filter.clone(),
                    window: args.replay_window,
                    max_requests: args
                        .replay_max_requests
                        .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                };
                let trace = crate::load::trace::load(path, &opts)?;
                let reuse = trace.reuse();
                let mut replay = Replay::new(trace.entries, args.replay_speed, concurrency[0]);
                replay.format = trace.format;
                replay.block_tokens = trace.block_tokens;
                replay.reuse = reuse;
                replay.strict_lengths = args.strict_lengths;
                Some(replay)
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
                    let step = match num_prompts {
                        Some(n) => LevelPlan::closed(c, n),
                        None => LevelPlan::per_stream(c, per_stream),
                    };
                    std::iter::repeat_n(step, args.rounds as usize)
                })
                .collect()
        };
        let decision = decision_config(args)?;
        let timing = TimingPlan::from_args(args, SystemTime::now()).map_err(|e| eyre!(e))?;
        let fit = fit_of(args, &timing)?;
        let levels = timing.shard_levels(
            levels,
            num_prompts.is_some(),
            per_stream,
            default_rate_prompts,
        );

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
        } else if let Some(shard) = timing.shard {
            // Every shard warms its own connections and calibrates its own
            // prompts, even one with no part in the first level.
            shard.share(concurrency[0]).max(1)
        } else {
            concurrency[0]
        };
        let search = args.find_capacity.then(|| SearchPlan {
            max_concurrency: args.max_concurrency.unwrap_or(driver::MAX_CONCURRENCY),
            slo: decision.slo.clone(),
            num_prompts,
            prompts_per_stream: per_stream,
        });
        let mut plan = SweepPlan {
            display_target: crate::redact::base_url(&base_url),
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
            seed_given: args.seed.is_some(),
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
            between_levels: None,
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
            gpu_metrics: match args.gpu_metrics.as_deref() {
                None => None,
                Some(_) if args.no_probe => bail!(
                    "--gpu-metrics is read by the probe, which --no-probe turns off: leave one out"
                ),
                Some(raw) => Some(GpuMetrics::parse(raw)?),
            },
            burstiness: args.burstiness,
            probes: probe_plan(args)?,
            replay,
            search,
            http2: args.http2,
            http_client: args.http_client,
            rx_clock: args.rx_clock.clock(),
            tx_clock: args.tx_clock.clock(),
            insecure: args.insecure,
            force: args.force,
            cacert: args.cacert.clone(),
            resume: args.resume.clone(),
            turns: args.turns,
            traffic,
            timing,
            fit,
            thresholds: Checks::default(),
        };
        plan.thresholds = Checks::parse(&args.check.thresholds, plan.planned_levels())?;
        Ok(plan)
    }

    /// The `Authorization` header the API key makes (marked sensitive), if any.
    pub(crate) fn authorization(&self) -> Option<HeaderValue> {
        self.api_key
            .as_ref()
            .and_then(|k| Target::authorization_from_key(k.expose()))
    }

    /// What kind of run this is, saved as `run.kind`.
    /// The levels `--threshold ...@N` may name.
    fn planned_levels(&self) -> Planned {
        match self.kind() {
            "ramp" => Planned::Unfixed("--ramp"),
            "replay" => Planned::Unfixed("--replay"),
            "find-capacity" => Planned::Unfixed("--find-capacity"),
            "rate" => Planned::Rate(self.levels.iter().filter_map(|l| l.rate).collect()),
            _ => Planned::Concurrency(self.levels.iter().map(|l| l.concurrency).collect()),
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        if self.replay.as_ref().is_some_and(|r| r.ramp.is_some()) {
            "ramp"
        } else if self.replay.is_some() {
            "replay"
        } else if self.search.is_some() {
            "find-capacity"
        } else if self.levels.iter().any(|l| l.rate.is_some()) {
            "rate"
        } else {
            "sweep"
        }
    }

    /// The largest number of streams a level will surely hold open, and
    /// the level in words: a closed-loop level's streams; the search's top
    /// and an open-loop level's cap only where one was given (the default,
    /// 4096, is a ceiling, not a need: a search stops where the SLO fails).
    pub(crate) fn streams_needed(&self) -> Option<(u32, String)> {
        let open_loop = self.replay.is_some();
        let levels = self.levels.iter().filter_map(|l| {
            if open_loop || l.rate.is_some() {
                (l.concurrency < crate::load::driver::MAX_CONCURRENCY).then(|| {
                    (
                        l.concurrency,
                        format!("the cap of {} requests in flight", l.concurrency),
                    )
                })
            } else {
                Some((l.concurrency, format!("level {}", l.concurrency)))
            }
        });
        let search = self
            .search
            .as_ref()
            .filter(|s| s.max_concurrency < crate::load::driver::MAX_CONCURRENCY)
            .map(|s| {
                (
                    s.max_concurrency,
                    format!("the search's top of {} streams", s.max_concurrency),
                )
            });
        levels.chain(search).max_by_key(|(n, _)| *n)
    }

    pub(crate) fn max_concurrency(&self) -> u32 {
        let planned = self.levels.iter().map(|l| l.concurrency).max().unwrap_or(1);
        self.search
            .as_ref()
            .map_or(planned, |s| s.max_concurrency.max(planned))
    }
}

/// Requests of an open-loop level without --num-prompts: 30 seconds' worth
/// (at least 10), or vLLM's 1000 when they all go at once.
/// `--probe-rate`, `--probe-input-len`, `--probe-output-len`; None without
/// a rate. A length of 0 is refused with or without a rate: it is never
/// what was meant.
fn probe_plan(args: &SweepArgs) -> Result<Option<ProbePlan>> {
    for (flag, len) in [
        ("--probe-input-len", args.probe_input_len),
        ("--probe-output-len", args.probe_output_len),
    ] {
        if len == 0 || len > MAX_LEN_TOKENS {
            bail!("{flag} {len} must be between 1 and {MAX_LEN_TOKENS} tokens");
        }
    }
    let Some(rate) = args.probe_rate else {
        return Ok(None);
    };
    if !(rate.is_finite() && rate > 0.0 && rate <= MAX_PROBE_RATE) {
        bail!(
            "--probe-rate {rate} must be a number of probe requests per second above 0 and at most {MAX_PROBE_RATE}, e.g. --probe-rate 2"
        );
    }
    Ok(Some(ProbePlan {
        rate,
        input_len: args.probe_input_len,
        output_len: args.probe_output_len,
    }))
}

/// Requests a stream without `--prompts-per-stream`: a fixed plan's count,
/// a fitted one's cap.
pub(crate) const DEFAULT_PROMPTS_PER_STREAM: u32 = 10;

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
                crate::say!(
                    "tokbench: dataset line {}: {}",
                    skipped.line,
                    skipped.reason
                );
            }
            if dataset.skipped.len() > 20 {
                crate::say!(
                    "tokbench: dataset: {} more lines skipped (all listed in summary.json)",
                    dataset.skipped.len() - 20
                );
            }
            if !dataset.skipped.is_empty() {
                crate::say!(
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
        // The parser's messages name the flag themselves.
        Some(GoodputSlo::parse(&args.goodput).map_err(|e| eyre!("{e}"))?)
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

/// `--budget`, checked, or the default budget where the sweep names no
/// count (`--num-prompts`, `--prompts-per-stream`), duration or budget. A budget fits closed-loop levels of generated
/// prompts: every other kind of run is refused with one, and runs as
/// before without one.
fn fit_of(args: &SweepArgs, timing: &TimingPlan) -> Result<Option<FitConfig>> {
    use crate::analysis::fit::{flag_words, DEFAULT_BUDGET, MIN_BUDGET};
    let given = match args.budget.as_deref() {
        Some(raw) => {
            Some(crate::run::timing::parse_duration("--budget", raw).map_err(|e| eyre!(e))?)
        }
        None => None,
    };
    let counts = [
        ("--num-prompts", args.num_prompts.is_some()),
        ("--duration", args.duration.is_some()),
    ];
    let other_kinds = [
        ("--request-rate", !args.request_rate.is_empty()),
        ("--replay", args.replay.is_some()),
        ("--ramp", args.ramp.is_some()),
        ("--find-capacity", args.find_capacity),
        ("--max-concurrency", args.max_concurrency.is_some()),
        ("--dataset", args.dataset.is_some()),
        ("--turns", args.turns > 1),
        ("--shard", timing.shard.is_some()),
        ("--start-at", timing.start_at.is_some()),
    ];
    let Some(budget) = given else {
        // --prompts-per-stream alone asks for those counts; with a budget
        // it is the most a fitted level sends.
        let fixed = args.prompts_per_stream.is_some()
            || counts.iter().chain(&other_kinds).any(|(_, set)| *set);
        return Ok((!fixed).then(|| fit_config(args, DEFAULT_BUDGET, true)));
    };
    if let Some((flag, _)) = counts.iter().find(|(_, set)| *set) {
        bail!("--budget and {flag} both set how long each level runs: choose one");
    }
    if let Some((flag, _)) = other_kinds.iter().find(|(_, set)| *set) {
        bail!("--budget fits a sweep of closed-loop levels (--concurrency): not with {flag}");
    }
    if budget < MIN_BUDGET {
        bail!(
            "--budget {} is too short: a warmup and one level of the shortest answers need at least {}",
            flag_words(budget),
            flag_words(MIN_BUDGET)
        );
    }
    Ok(Some(fit_config(args, budget, false)))
}

fn fit_config(args: &SweepArgs, budget: std::time::Duration, default: bool) -> FitConfig {
    FitConfig {
        budget,
        default_budget: default,
        tune_share: false,
        per_stream: args.steady_completions.max(1),
        max_rse: args.steady_rse,
    }
}

/// `--ramp KIND --ramp-from R0 --ramp-to R1 --ramp-duration S`, all four
/// or none.
fn ramp_of(args: &SweepArgs) -> Result<Option<crate::load::ramp::Ramp>> {
    use crate::load::ramp::{Ramp, RampKind};
    let parts = (
        args.ramp.as_deref(),
        args.ramp_from,
        args.ramp_to,
        args.ramp_duration,
    );
    match parts {
        (None, None, None, None) => Ok(None),
        (Some(kind), Some(from), Some(to), Some(duration)) => {
            let kind = RampKind::parse(kind)
                .ok_or_else(|| eyre!("--ramp {kind}: expected linear or exponential"))?;
            Ramp::new(kind, from, to, duration)
                .map(Some)
                .map_err(|e| eyre!("{e}"))
        }
        _ => bail!(
            "a ramp needs all four of --ramp linear|exponential, --ramp-from R, --ramp-to R and --ramp-duration S"
        ),
    }
}
