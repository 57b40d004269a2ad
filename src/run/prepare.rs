//! Before the load: the result folder, the open-file limit, the server's
//! identity and model, and starting the driver and the probe.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use color_eyre::eyre::{bail, eyre, Result, WrapErr};
use reqwest::header::HeaderValue;
use serde_json::Value;

use super::plan::SweepPlan;
use super::tls::TlsTrust;
use super::url::default_result_dir;
use crate::cli::{Backend, HttpClient};
use crate::load::driver::{self, DriverConfig};
use crate::load::h1::{self, Connections};
use crate::load::probes::{ProbeConfig, ProbePlan};
use crate::load::request::Target;
use crate::load::{BodySpec, Wire};
use crate::probe::{self, ServerIdentity};
use crate::protocol::ollama::OllamaApi;
use crate::protocol::openai::Api;
use crate::report::recorder::RunInfo;
use crate::report::resume::PriorRun;
use crate::report::schema::ShardSection;
use crate::report::time;
use crate::report::timing::RunTiming;
use crate::workload::{Calibration, Workload};

/// Facts about the run that are not flags: who answered, and where files go.
pub struct Prepared {
    pub plan: SweepPlan,
    pub client: reqwest::Client,
    /// `--probe-rate`: the probe requests' own client (its own pool).
    pub probe_client: Option<reqwest::Client>,
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
    pub(crate) fn export_plan(&self) -> crate::export::ExportPlan<'_> {
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
    prepare_continuing(plan, engine_override, None).await
}

/// [`prepare`], continuing the result folder's run in `given` (a tune's
/// next setting: a new series in the same folder) instead of `--resume`'s.
pub(crate) async fn prepare_continuing(
    plan: SweepPlan,
    engine_override: Option<(&str, &str)>,
    given: Option<PriorRun>,
) -> Result<Prepared> {
    let now = SystemTime::now();
    let result_dir = match (&plan.resume, &plan.result_dir) {
        (Some(dir), _) | (None, Some(dir)) => dir.clone(),
        (None, None) => default_result_dir(Path::new("results"), now),
    };
    // Before anything is sent: a hard limit too low for the largest level
    // refuses the run here.
    let need = plan
        .streams_needed()
        .map(|(streams, what)| super::open_files::Need {
            streams,
            what,
            probes: plan.probes.is_some(),
            metrics: plan.metrics_listen.is_some(),
        });
    let open_files = super::open_files::check(need.as_ref(), plan.force)?;
    if let Some(line) = &open_files {
        crate::say!("tokbench: {line}");
    }
    // A full disk or a read-only folder is found before anything is sent.
    probe_writable(&result_dir)?;
    let mut prepared = prepare_target(plan, engine_override, result_dir.clone(), now, given).await;
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
pub(crate) fn probe_writable(dir: &Path) -> Result<()> {
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

async fn prepare_target(
    plan: SweepPlan,
    engine_override: Option<(&str, &str)>,
    result_dir: PathBuf,
    now: SystemTime,
    given: Option<PriorRun>,
) -> Result<Prepared> {
    let mut plan = plan;
    let prior = match (&plan.resume, given) {
        (_, Some(prior)) => {
            continue_plan(&mut plan, &prior);
            Some(prior)
        }
        (Some(dir), None) => {
            if plan.search.is_some() || plan.replay.is_some() {
                bail!("--resume continues a sweep or a rate run; a --find-capacity or --replay run starts again");
            }
            let prior = PriorRun::load(dir)?;
            continue_plan(&mut plan, &prior);
            Some(prior)
        }
        (None, None) => None,
    };
    // The key rides on every request of this client, and this client talks
    // to the target only. Marked sensitive, it never shows in Debug output.
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(auth) = plan.authorization() {
        headers.insert(reqwest::header::AUTHORIZATION, auth);
    }
    let tls = TlsTrust::of(&plan)?;
    // One idle connection kept per stream: no reconnects between requests.
    let builder = load_client(
        &plan,
        &tls,
        headers.clone(),
        plan.max_concurrency() as usize,
    );
    let mut warnings = Vec::new();
    if plan.insecure {
        let warning =
            "--insecure: TLS certificates are NOT checked; the API key could reach an impostor";
        crate::say!("tokbench: WARNING {warning}");
        warnings.push(warning.to_string());
    }
    let client = builder.build().wrap_err("cannot build the HTTP client")?;
    // `--probe-rate`: a client of the probes' own, so that they never wait
    // for one of the load's connections (reqwest's clones share one pool).
    let probe_client = match &plan.probes {
        Some(probes) => Some(
            load_client(&plan, &tls, headers, probe_pool_size(probes))
                .build()
                .wrap_err("cannot build the HTTP client of the probe requests")?,
        ),
        None => None,
    };
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
    // A trace's requests longer than the server's context are clipped (and
    // counted) or refused, before anything is sent.
    if let (Some(replay), Some(context)) = (plan.replay.as_mut(), identity.max_model_len) {
        replay.fit_to_context(context).map_err(|e| eyre!("{e}"))?;
        if replay.clipped > 0 {
            crate::say!(
                "tokbench: {} requests of the trace are longer than the server's context of {context} tokens: clipped to it (--strict-lengths refuses them instead)",
                replay.clipped
            );
        }
    }
    let calibration = first_guess_calibration(&client, &plan, &model).await;
    let timing = run_timing(&client, &plan).await;
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
        seed_given: plan.seed_given,
        started_at: time::iso8601(now),
        date: time::compact(now),
        percentiles: plan.percentiles.clone(),
        prefix_len: plan.prefix_len,
        decision: plan.decision.clone(),
        // What the values alone tell; the face that parsed the flags knows
        // a default given again by hand (`config::Settings::gives_slo`).
        slo_given: plan.decision.slo.set_by_hand(),
        warmup_requests: plan.warmup,
        connect_probe_ms: identity.connect_probe_ms,
        http_client: http_client_label(&plan),
        burstiness: plan.burstiness,
        kind: plan.kind().into(),
        turns: plan.turns,
        traffic: plan.traffic.clone(),
        timing,
        trace: plan.replay.as_ref().map(|r| r.to_json()),
        ramp: plan.replay.as_ref().and_then(|r| r.ramp),
        fit: plan.fit,
        thresholds: plan.thresholds.clone(),
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
        probe_client,
        identity,
        model,
        run,
        result_dir,
        calibration,
        prior,
        warnings,
    })
}

/// A plan that continues `prior`'s folder: its prompts follow from the
/// first part's seed but never repeat its prompts (a server's prefix cache
/// would answer them), and it runs only the steps not yet finished.
fn continue_plan(plan: &mut SweepPlan, prior: &PriorRun) {
    if let Some(seed) = prior.run.get("seed").and_then(Value::as_u64) {
        plan.seed =
            seed.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(prior.next_level_index as u64));
    }
    plan.levels = prior.remaining(&plan.levels);
}

/// What the result files say of the run's timing and shard; a shard's
/// clock offset is measured here, against the server's root.
async fn run_timing(client: &reqwest::Client, plan: &SweepPlan) -> RunTiming {
    let timing = &plan.timing;
    let shard = match timing.shard {
        Some(shard) => {
            let offset = super::clock::measure(client, &format!("{}/", plan.base_url)).await;
            Some(ShardSection {
                index: Some(shard.index),
                count: Some(shard.count),
                host: super::timing::host_name(),
                clock_offset_ms: offset.map(|o| o.offset_ms),
                clock_offset_error_ms: offset.map(|o| o.error_ms),
            })
        }
        None => None,
    };
    RunTiming {
        shard,
        duration: timing.duration,
        start_at: timing.start_at,
        level_gap: (timing.start_at.is_some() && timing.duration.is_some())
            .then_some(timing.level_gap),
        origin: Default::default(),
    }
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
        Backend::TgiGenerate => Wire::Tgi,
    }
}

/// The reqwest client of measured requests: the key on every request, no
/// proxy, `max_idle` idle connections kept, HTTP/2 only with `--http2`.
fn load_client(
    plan: &SweepPlan,
    tls: &TlsTrust,
    headers: reqwest::header::HeaderMap,
    max_idle: usize,
) -> reqwest::ClientBuilder {
    let builder = tls
        .apply(reqwest::Client::builder())
        .default_headers(headers)
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(h1::CONNECT_TIMEOUT)
        .pool_max_idle_per_host(max_idle)
        .pool_idle_timeout(h1::IDLE_TIMEOUT);
    if plan.http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    }
}

/// Idle connections the probes keep: about those a second of them holds
/// in flight, so a steady rate seldom opens a new one.
fn probe_pool_size(probes: &ProbePlan) -> usize {
    (probes.rate.ceil() as usize).clamp(2, 256)
}

/// The lean client (src/load/h1.rs) for measured requests over plain HTTP/1.1, unless
/// `--http2` or `--http-client reqwest` asks otherwise. A key that is not visible
/// ASCII stays with reqwest, which sends its bytes as given; so do https:// and URLs
/// with credentials ([`Connections::for_url`] declines those).
pub(super) fn lean_connections(
    plan: &SweepPlan,
    authorization: Option<&HeaderValue>,
) -> Option<Connections> {
    if plan.http2 || plan.http_client == HttpClient::Reqwest {
        return None;
    }
    let auth = match authorization {
        Some(a) => Some(a.to_str().ok()?),
        None => None,
    };
    Connections::for_url(&plan.endpoint_url, auth, plan.max_concurrency() as usize)
        .map(|c| c.with_rx_clock(plan.rx_clock).with_tx_clock(plan.tx_clock))
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

/// The probe requests' target: the same endpoint and timeouts as the
/// load's, through connections of their own (a second lean pool, or the
/// probes' own reqwest client).
fn probe_config(prepared: &Prepared, authorization: Option<HeaderValue>) -> Option<ProbeConfig> {
    let plan = &prepared.plan;
    let probes = plan.probes?;
    let client = prepared.probe_client.clone()?;
    let h1 = lean_connections(plan, authorization.as_ref()).map(|c| {
        // Sized for the probes, not the load's concurrency.
        Arc::new(c.with_max_idle(probe_pool_size(&probes)))
    });
    Some(ProbeConfig {
        plan: probes,
        target: Arc::new(target_of(plan, client, h1, authorization)),
    })
}

/// The plan's endpoint, wire and timeouts, through `client` or `h1`. The
/// client already sends the key on every request; `authorization` is what
/// error messages are cleaned of (a server may quote it).
fn target_of(
    plan: &SweepPlan,
    client: reqwest::Client,
    h1: Option<Arc<Connections>>,
    authorization: Option<HeaderValue>,
) -> Target {
    Target {
        client,
        h1,
        wire: wire_of(plan.backend),
        url: plan.endpoint_url.clone(),
        authorization,
        request_timeout: plan.request_timeout,
        stall_timeout: plan.stall_timeout,
    }
}

/// Start the driver for a prepared run.
pub(crate) fn start_driver(
    prepared: &Prepared,
    run_start: Instant,
    watch_server: bool,
) -> driver::DriverHandle {
    let plan = &prepared.plan;
    // The wall clock at `run_start`, from one reading of each clock: level
    // starts on the wall clock (`started_unix_s`) and `--start-at` as an
    // offset into the run both follow from it.
    let wall_origin = SystemTime::now()
        .checked_sub(run_start.elapsed())
        .unwrap_or_else(SystemTime::now);
    let _ = prepared.run.timing.origin.set(wall_origin);
    let start_offset = plan
        .timing
        .start_at
        .map(|at| at.duration_since(wall_origin).unwrap_or(Duration::ZERO));
    let authorization = plan.authorization();
    let h1 = lean_connections(plan, authorization.as_ref()).map(Arc::new);
    let probes = probe_config(prepared, authorization.clone());
    let target = target_of(plan, prepared.client.clone(), h1, authorization);
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
                if let Some(shard) = plan.timing.shard {
                    workload = workload.with_shard(
                        shard.index,
                        shard.count,
                        plan.timing.draw_seed(plan.seed),
                    );
                }
                workload.calibration = prepared.calibration;
                workload
            },
            seed: plan.timing.draw_seed(plan.seed),
            burstiness: plan.burstiness,
            replay: plan.replay.clone(),
            search: plan.search.clone(),
            turns: plan.turns,
            watch_server,
            // Only the watch compares marks: a headless run stops on an outage.
            marks: watch_server.then(|| {
                probe::marks::reader(
                    prepared.client.clone(),
                    plan.base_url.clone(),
                    prepared.identity.engine_kind(),
                )
            }),
            first_series: prepared.prior.as_ref().map_or(0, |p| p.last_series),
            duration: plan.timing.duration,
            start_at: start_offset,
            level_gap: plan.timing.level_gap,
            between_levels: plan.between_levels.clone(),
            edges: edges_of(prepared),
            probes,
            fit: plan.fit,
        },
        run_start,
    )
}

/// Start the server probe for a prepared run, unless `--no-probe`. The
/// receiver never yields when there is nothing to scrape.
pub(crate) fn start_probe(
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
    let gpu = match &prepared.plan.gpu_metrics {
        // A DCGM exporter, wherever it runs; one line if it cannot be read.
        Some(dcgm) => match dcgm_client(&prepared.plan) {
            Ok(client) => probe::dcgm::spawn(
                client,
                dcgm.url.clone(),
                dcgm.shown.clone(),
                interval,
                run_start,
                |line| crate::say!("tokbench: {line}"),
            ),
            Err(e) => {
                crate::say!(
                    "tokbench: --gpu-metrics {}: {}; the run goes on without GPU figures",
                    dcgm.shown,
                    super::one_line(&e)
                );
                tokio::sync::mpsc::unbounded_channel().1
            }
        },
        // GPU gauges when tokbench runs on the GPU host; silent without nvidia-smi.
        None => {
            probe::gpu::spawn_gpu_probe(probe::gpu::DEFAULT_PROGRAM.into(), interval, run_start)
        }
    };
    merge_samples(http, gpu)
}

/// The client that reads `--gpu-metrics`: the run's TLS trust (a private CA
/// of the cluster), but never the target's client, which sends the API key
/// with every request.
fn dcgm_client(plan: &SweepPlan) -> Result<reqwest::Client> {
    TlsTrust::of(plan)?
        .apply(reqwest::Client::builder())
        .no_proxy()
        .connect_timeout(h1::CONNECT_TIMEOUT)
        .build()
        .wrap_err("cannot build the HTTP client")
}

/// The server's own account at each level's edge, where the probe runs and
/// the engine's `/metrics` has one.
fn edges_of(prepared: &Prepared) -> Option<crate::load::driver::LevelEdges> {
    prepared.plan.probe_interval?;
    probe::account::edges(
        prepared.client.clone(),
        prepared.plan.base_url.clone(),
        prepared.identity.engine_kind(),
    )
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
