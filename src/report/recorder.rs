//! The recorder turns driver events into result files (docs/architecture.md section 5):
//! a level file the moment a level ends, `summary.json` rewritten after every
//! level, `requests.jsonl` flushed at least once a second. Both the headless
//! runner and the live view feed it the same events, so results are the same
//! whichever face the run has.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr};
use serde_json::{json, Map, Value};

use super::atomic::write_atomic;
use super::resume::PriorRun;
use super::schema::{
    self, ClientLoad as ClientLoadJson, DiagnosisEntry, LevelFile, RequestLine, Resumed,
    RunSection, RunSlo, SearchState, SummaryFile, TargetChange, SCHEMA_VERSION,
};
use crate::analysis::cost::{cost, Cost};
use crate::analysis::decide::{decide, Decision, LevelPoint};
use crate::analysis::diagnose::{
    diagnose_run, ClientLevelLoad, DiagnoseInput, Diagnosis, LevelView, StreamShape,
};
use crate::analysis::engine_checks::{engine_diagnoses, EngineInput, ServerView};
use crate::analysis::goodput::{Goodput, Slo as GoodputSlo};
use crate::analysis::rounds::rounds_spread;
use crate::analysis::DecisionConfig;
use crate::load::driver::{DriverEvent, LevelInfo, Mode, SearchProgress};
use crate::probe::client::{cpu_percent, process_cpu_time, LagMonitor};
use crate::probe::live::{GaugeSummary, ServerSample};
use crate::record::{Outcome, RequestRecord, ServerTimings};
use crate::stats::hdr::Samples;
use crate::stats::lateness::Lateness;
use crate::stats::occupancy::{Occupancy, RequestSpan, Timeline};
use crate::stats::percentile::percentile_sorted;
use crate::stats::steady::{
    judge, Steadiness, SteadyEstimator, STEADY_COMPLETIONS_PER_STREAM, STEADY_RSE,
};
use crate::stats::summary::LevelStats;
use crate::stats::tally::{Lengths, LevelTally, ServerTimingTally};
use crate::stats::turns::{CacheHits, TurnStats, TurnTally};
use crate::workload::Calibration;

/// Answers kept per level for the buffered-stream check: it looks at the
/// medians of their shape, which the first ten thousand settle.
const STREAM_SHAPES_KEPT: usize = 10_000;

/// How often `requests.jsonl` reaches the disk at the least.
const JSONL_FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What identifies a run; saved in `summary.json` and in every level file.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// Server root, with any credentials removed.
    pub target: String,
    pub engine: String,
    pub engine_version: Option<String>,
    pub model: String,
    pub backend: String,
    pub profile: String,
    pub input_len: u32,
    pub output_len: u32,
    pub ignore_eos: bool,
    pub extra_body: Option<Value>,
    pub labels: BTreeMap<String, String>,
    pub seed: u64,
    /// ISO 8601 UTC.
    pub started_at: String,
    /// vLLM's `date` format (`20261129-191400`).
    pub date: String,
    pub percentiles: Vec<f64>,
    /// `--prefix-len`: shared prefix tokens before each prompt (0: none).
    pub prefix_len: u32,
    /// SLOs, prices and rounds.
    pub decision: DecisionConfig,
    /// Warmup requests sent before the first level.
    pub warmup_requests: u32,
    /// Median connect + first byte of a tiny request before the run, ms.
    pub connect_probe_ms: Option<f64>,
    /// What read the measured streams: `lean-http1` (src/load/h1.rs),
    /// `reqwest-http1` or `reqwest-http2`.
    pub http_client: &'static str,
    /// Profile, range ratio, prompt source, dataset (issue 7).
    pub traffic: crate::workload::Traffic,
    /// Open loop: gamma shape of the request gaps (1 when closed loop).
    pub burstiness: f64,
    /// `--find-capacity`, `--request-rate`, `--replay`, or "sweep".
    pub kind: String,
    /// `--turns`: requests per conversation (1: single requests).
    pub turns: u32,
    /// `--duration`, `--shard`, `--start-at` (issue 13).
    pub timing: crate::report::timing::RunTiming,
}

impl RunInfo {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.to_section()).unwrap_or(Value::Null)
    }

    /// summary.json's `run` (`report::schema::RunSection`).
    pub fn to_section(&self) -> RunSection {
        let slo = &self.decision.slo;
        RunSection {
            target: Some(self.target.clone()),
            engine: Some(self.engine.clone()),
            engine_version: self.engine_version.clone(),
            model: Some(self.model.clone()),
            backend: Some(self.backend.clone()),
            profile: Some(self.profile.clone()),
            input_len: Some(self.input_len),
            output_len: Some(self.output_len),
            ignore_eos: Some(self.ignore_eos),
            extra_body: self.extra_body.clone(),
            labels: Some(
                self.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                    .collect(),
            ),
            seed: Some(self.seed),
            started_at: Some(self.started_at.clone()),
            warmup_requests: Some(self.warmup_requests),
            prefix_len: Some(self.prefix_len),
            rounds: Some(self.decision.rounds),
            gpus: self.decision.gpus,
            connect_probe_ms: self.connect_probe_ms.map(round3),
            http_client: Some(self.http_client.to_string()),
            kind: Some(self.kind.clone()),
            turns: Some(self.turns),
            burstiness: Some(self.burstiness),
            slo: Some(RunSlo {
                ttft_p99_ms: slo.ttft_p99_ms,
                min_stream_tok_s: slo.min_stream_tok_s,
                tpot_p99_ms: slo.tpot_p99_ms,
                max_error_rate: Some(slo.max_error_rate),
            }),
            goodput_slo: self.decision.goodput.as_ref().map(GoodputSlo::to_json),
            shard: self.timing.shard.clone(),
            duration_target: self.timing.duration_s(),
            start_at: self.timing.start_at_text(),
            level_gap_s: self.timing.level_gap_s(),
            // Traffic shape: range_ratio, prompt_source, corpus, dataset, save_prompts.
            other: match self.traffic.run_json() {
                Value::Object(traffic) => traffic,
                _ => Map::new(),
            },
        }
    }
}

/// What the client cost while a level ran.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientLoad {
    pub cpu_percent: Option<f64>,
    pub loop_lag_ms_p99: Option<f64>,
}

/// A level whose requests are all back.
#[derive(Clone, Debug)]
pub struct FinishedLevel {
    pub info: LevelInfo,
    pub partial: bool,
    pub stats: LevelStats,
    pub client: ClientLoad,
    /// Requests meeting every `--goodput` SLO, when given.
    pub goodput: Option<Goodput>,
    /// How each completed answer arrived, for the buffered-stream check.
    pub stream_shapes: Vec<StreamShape>,
    /// What the server itself reported per request (medians), when it did.
    pub server_timings: Value,
    /// The server's gauges while the level ran (min/mean/max each).
    pub server: GaugeSummary,
    /// The level file, when the level had anything to save.
    pub file: Option<PathBuf>,
    /// What that file holds, for the consumers that repeat it (`--events`'
    /// `level_finished`): the same object, never a rebuilt copy.
    pub saved: Option<Value>,
    /// Input and output tokens of its completed requests (the `traffic` key).
    pub achieved: Lengths,
    /// Open loop: how late requests went out against their schedule.
    pub lateness: Option<Lateness>,
    /// `--turns`: TTFT and prefix-cache hits turn by turn.
    pub turns: Vec<TurnStats>,
    /// Prompt tokens the server's prefix cache answered, where it said.
    pub cache_hit_rate: Option<f64>,
    /// Requests waiting for a first token and streaming, over the level.
    pub occupancy: Option<Occupancy>,
    /// Records of the level left out of its statistics as transition.
    pub transition: u32,
    /// Relative standard error of its per-second output throughput.
    pub throughput_rse: Option<f64>,
    /// Hand-set levels: whether they measured a steady state.
    pub steadiness: Option<Steadiness>,
}

impl FinishedLevel {
    /// A hand-set level left before it settled: listed, never a result.
    pub fn is_unsteady(&self) -> bool {
        self.steadiness.as_ref().is_some_and(|s| !s.steady)
    }
}

impl FinishedLevel {
    /// The level as the decision math sees it.
    pub fn point(&self) -> Option<LevelPoint> {
        Some(LevelPoint::from_stats(
            self.info.concurrency,
            self.info.mode,
            self.partial,
            &self.stats,
        ))
    }
}

/// A level still running: its records are folded as they come back and
/// not kept (docs/architecture.md, "Flat memory"), so a level of a million
/// requests holds what a level of a thousand does.
struct OpenLevel {
    info: LevelInfo,
    server: GaugeSummary,
    /// Its records, transition ones left out, folded.
    tally: LevelTally,
    lengths: Lengths,
    turns: TurnTally,
    cache: CacheHits,
    server_timings: ServerTimingTally,
    /// The first answers' shapes, for the buffered-stream check.
    stream_shapes: Vec<StreamShape>,
    /// `--goodput`: completed requests meeting every SLO.
    good: usize,
    /// Waiting and streaming over the level, every level's requests counted.
    timeline: Timeline,
    transition: u32,
    steady: SteadyEstimator,
    cpu_at_start: Duration,
    wall_start: Instant,
}

impl OpenLevel {
    /// Count one of the level's own records (not a transition one).
    fn fold(&mut self, r: &RequestRecord, goodput: Option<&GoodputSlo>) {
        self.tally.add(r);
        self.lengths.add(r);
        self.turns.add(r);
        self.cache.add(r);
        self.server_timings.add(r);
        if self.stream_shapes.len() < STREAM_SHAPES_KEPT {
            self.stream_shapes.extend(StreamShape::from_record(r));
        }
        if goodput.is_some_and(|slo| slo.is_good(r)) {
            self.good += 1;
        }
    }
}

/// A level file's `histograms` (every latency metric with a value) and
/// `samples` (the per-request ones still held exactly), by metric key.
type Distributions = (BTreeMap<String, String>, BTreeMap<String, Vec<f64>>);

fn distributions(tally: &LevelTally) -> Result<Distributions> {
    let mut histograms = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for (key, set) in tally.metric_sets() {
        if set.is_empty() {
            continue;
        }
        histograms.insert(key.to_string(), set.histogram().to_base64()?);
        if key != "itl_ms" {
            if let Some(values) = Samples::exact_values(set) {
                samples.insert(key.to_string(), values);
            }
        }
    }
    Ok((histograms, samples))
}

pub struct Recorder {
    dir: PathBuf,
    run: RunInfo,
    open: HashMap<usize, OpenLevel>,
    finished: Vec<FinishedLevel>,
    jsonl: BufWriter<File>,
    last_flush: Instant,
    name_uses: HashMap<String, u32>,
    target_changes: Vec<(f64, u32)>,
    warmup: Option<Value>,
    lag: LagMonitor,
    /// `--resume`: the run continued, whose finished levels stay in the summary.
    prior: Option<PriorRun>,
    /// `--find-capacity`: the search's bounds so far.
    search: Option<SearchProgress>,
    /// When each level started (run clock), by index.
    level_starts: BTreeMap<usize, Duration>,
    /// Every series so far, by index: its label and what the probe saw.
    series: BTreeMap<usize, SeriesInfo>,
    steady_per_stream: u32,
    steady_rse: f64,
}

/// One stretch of the run against one server configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesInfo {
    pub label: String,
    /// What the probe saw of the server (engine version, slots, model).
    pub server: Value,
}

impl Recorder {
    /// Create the result folder and its files. Fails (before any load is
    /// sent) when the folder cannot be written.
    pub fn create(dir: &Path, run: RunInfo, lag: LagMonitor) -> Result<Recorder> {
        Recorder::open(dir, run, lag, None)
    }

    /// Create the files, or with a prior run (`--resume`) continue them:
    /// requests.jsonl is appended to and the kept levels lead the summary.
    pub fn open(
        dir: &Path,
        run: RunInfo,
        lag: LagMonitor,
        prior: Option<PriorRun>,
    ) -> Result<Recorder> {
        fs::create_dir_all(dir)
            .wrap_err_with(|| format!("cannot create the result folder {}", dir.display()))?;
        let jsonl_path = dir.join("requests.jsonl");
        let file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(prior.is_some())
            .truncate(prior.is_none())
            .open(&jsonl_path)
            .wrap_err_with(|| format!("cannot write {}", jsonl_path.display()))?;
        let series = prior
            .iter()
            .flat_map(|p| p.series_labels.iter())
            .map(|(index, label)| {
                (
                    *index,
                    SeriesInfo {
                        label: label.clone(),
                        server: Value::Null,
                    },
                )
            })
            .collect();
        let recorder = Recorder {
            prior,
            search: None,
            dir: dir.to_path_buf(),
            run,
            open: HashMap::new(),
            finished: Vec::new(),
            jsonl: BufWriter::new(file),
            last_flush: Instant::now(),
            name_uses: HashMap::new(),
            target_changes: Vec::new(),
            warmup: None,
            lag,
            level_starts: BTreeMap::new(),
            series,
            steady_per_stream: STEADY_COMPLETIONS_PER_STREAM,
            steady_rse: STEADY_RSE,
        };
        recorder.write_summary()?;
        Ok(recorder)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn run(&self) -> &RunInfo {
        &self.run
    }

    /// Levels whose requests are all back, in the order they finished.
    pub fn finished(&self) -> &[FinishedLevel] {
        &self.finished
    }

    /// Take one driver event. Returns the level it finished, if it finished one.
    pub fn on_event(&mut self, event: &DriverEvent) -> Result<Option<&FinishedLevel>> {
        match event {
            DriverEvent::LevelStarted(info) => {
                let _ = self.lag.take();
                self.level_starts.insert(info.index, info.started_at);
                self.open.insert(
                    info.index,
                    OpenLevel {
                        info: info.clone(),
                        server: GaugeSummary::default(),
                        tally: LevelTally::new(),
                        lengths: Lengths::default(),
                        turns: TurnTally::default(),
                        cache: CacheHits::default(),
                        server_timings: ServerTimingTally::default(),
                        stream_shapes: Vec::new(),
                        good: 0,
                        timeline: Timeline::starting_at(info.started_at),
                        transition: 0,
                        steady: {
                            // A hand-set level's steady stretch starts when
                            // it fills; any other level's at its start.
                            let mut steady = SteadyEstimator::default();
                            if info.mode != Mode::Manual {
                                steady.start(info.started_at);
                            }
                            steady
                        },
                        cpu_at_start: process_cpu_time(),
                        wall_start: Instant::now(),
                    },
                );
            }
            DriverEvent::Record(record) => {
                self.write_request_line(record)?;
                // A level's queue counts include requests of its neighbours.
                let span = RequestSpan::of(record);
                for level in self.open.values_mut() {
                    level.timeline.add(span);
                }
                if let (true, Some(ttft)) = (record.is_ok(), record.ttft) {
                    for (index, level) in self.open.iter_mut() {
                        level.steady.add(
                            record.start,
                            record.start + ttft,
                            record.end,
                            record.output_tokens,
                            *index == record.level && !record.transition,
                        );
                    }
                }
                let goodput = self.run.decision.goodput.as_ref();
                if let Some(level) = self.open.get_mut(&record.level) {
                    if record.transition {
                        level.transition += 1;
                    } else {
                        level.fold(record, goodput);
                    }
                }
            }
            DriverEvent::TargetChanged { at, target } => {
                self.target_changes.push((at.as_secs_f64(), *target));
            }
            DriverEvent::WarmupFinished {
                ok,
                failed,
                calibration,
                reported_prompt_tokens,
            } => {
                self.warmup = Some(warmup_json(
                    *ok,
                    *failed,
                    calibration,
                    reported_prompt_tokens,
                ));
            }
            DriverEvent::LevelFinished { index, partial } => {
                return self.finish_level(*index, *partial).map(Some);
            }
            DriverEvent::Search(progress) => self.search = Some(*progress),
            DriverEvent::TargetReached { index, at } => {
                if let Some(level) = self.open.get_mut(index) {
                    level.steady.start(*at);
                }
            }
            DriverEvent::SeriesStarted { series, .. } => {
                self.series.entry(*series).or_insert_with(|| SeriesInfo {
                    label: format!("series {}", series + 1),
                    server: Value::Null,
                });
            }
            DriverEvent::ServerGone { .. }
            | DriverEvent::ServerBack { .. }
            | DriverEvent::PlanDone => {}
            DriverEvent::WarmupStarted { .. }
            | DriverEvent::Paused(_)
            | DriverEvent::Finished { .. } => {}
        }
        if self.last_flush.elapsed() >= JSONL_FLUSH_EVERY {
            self.flush_requests()?;
        }
        Ok(None)
    }

    /// A scrape of the server's gauges counts for every level running.
    pub fn on_server_sample(&mut self, sample: &ServerSample) {
        for level in self.open.values_mut() {
            level.server.add(sample);
        }
    }

    /// Close the books: levels still open are saved as partial, every file flushed.
    pub fn finish(&mut self) -> Result<()> {
        let mut still_open: Vec<usize> = self.open.keys().copied().collect();
        still_open.sort_unstable();
        for index in still_open {
            self.finish_level(index, true)?;
        }
        self.flush_requests()?;
        self.write_summary()
    }

    /// Flush `requests.jsonl` when a second has passed since the last flush:
    /// called on the faces' clock ticks, so slow requests still reach the
    /// disk within about a second of finishing.
    pub fn flush_if_due(&mut self) -> Result<()> {
        if self.last_flush.elapsed() >= JSONL_FLUSH_EVERY {
            self.flush_requests()?;
        }
        Ok(())
    }

    pub fn flush_requests(&mut self) -> Result<()> {
        self.last_flush = Instant::now();
        self.jsonl
            .flush()
            .wrap_err_with(|| format!("cannot write {}", self.dir.join("requests.jsonl").display()))
    }

    fn write_request_line(&mut self, r: &RequestRecord) -> Result<()> {
        let ms = |d: Option<Duration>| d.map(|d| round3(d.as_secs_f64() * 1000.0));
        let concurrency = self.open.get(&r.level).map(|l| l.info.concurrency);
        let error = match r.outcome {
            Outcome::Ok => None,
            Outcome::Failed(class) => Some(class.key()),
            Outcome::Cancelled => Some("cancelled".into()),
        };
        let line = RequestLine {
            id: Some(r.id),
            level: Some((r.level + self.level_offset()) as u64),
            concurrency,
            start_s: Some(round3(r.start.as_secs_f64())),
            end_s: Some(round3(r.end.as_secs_f64())),
            ttfb_ms: ms(r.ttfb),
            ttft_ms: ms(r.ttft),
            e2el_ms: ms(r.e2el),
            tpot_ms: ms(r.tpot),
            input_tokens: Some(u64::from(r.input_tokens())),
            input_tokens_reported: r.input_tokens_reported.map(u64::from),
            output_tokens: Some(u64::from(r.output_tokens)),
            output_tokens_requested: Some(u64::from(r.output_tokens_requested)),
            token_source: Some(r.token_source.as_str().to_string()),
            chunks: Some(u64::from(r.chunks)),
            output_reads: Some(u64::from(r.output_reads)),
            coalesced_reads: Some(u64::from(r.coalesced_reads)),
            rx_clock: Some(r.rx_clock.as_str().to_string()),
            rx_lag_ms_max: r
                .rx_lag_ms
                .iter()
                .copied()
                .fold(None, |m: Option<f32>, v| Some(m.map_or(v, |m| m.max(v))))
                .map(|v| round3(f64::from(v))),
            retries: Some(u64::from(r.retries)),
            finish_reason: r.finish_reason.map(|f| f.as_str().to_string()),
            error,
            error_message: r.error_message.clone(),
            server_timings: r.server_timings.map(server_timings_json),
            send_lag_ms: ms(r.send_lag),
            turn: r.turn.map(u64::from),
            ttfc_ms: ms(r.ttfc),
            reasoning_tokens: r.reasoning_tokens.map(u64::from),
            cached_tokens: r.cached_tokens.map(u64::from),
            transition: r.transition,
            // `--save-prompts` only: prompt text never reaches a file otherwise.
            prompt: r.prompt.clone(),
            other: Map::new(),
        };
        serde_json::to_writer(&mut self.jsonl, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.jsonl.write_all(b"\n"))
            .wrap_err_with(|| format!("cannot write {}", self.dir.join("requests.jsonl").display()))
    }

    fn finish_level(&mut self, index: usize, partial: bool) -> Result<&FinishedLevel> {
        let open = match self.open.remove(&index) {
            Some(open) => open,
            None => {
                // Announced twice or never started: nothing new to save.
                return self
                    .finished
                    .iter()
                    .find(|f| f.info.index == index)
                    .ok_or_else(|| color_eyre::eyre::eyre!("level {index} was never started"));
            }
        };
        let lateness = open.tally.lateness();
        // An open loop has no set concurrency: per-stream figures divide by
        // the mean number in flight instead of the cap.
        let streams = match &lateness {
            Some(l) if open.info.mode.is_open_loop() => l.mean_in_flight.round().max(1.0) as u32,
            _ => open.info.concurrency,
        };
        let stats = open.tally.stats(streams, &self.run.percentiles);
        let mut lag = self.lag.take();
        lag.sort_by(f64::total_cmp);
        let client = ClientLoad {
            cpu_percent: cpu_percent(
                open.cpu_at_start,
                process_cpu_time(),
                open.wall_start.elapsed(),
            ),
            loop_lag_ms_p99: percentile_sorted(&lag, 99.0),
        };
        let goodput = self.run.decision.goodput.as_ref().map(|_| {
            Goodput::from_counts(open.good, stats.completed + stats.failed, stats.duration_s)
        });
        let occupancy = self
            .window_end(&open)
            .and_then(|to| open.timeline.occupancy(to));
        let window_end = self.window_end(&open);
        let estimate = window_end.and_then(|end| open.steady.estimate(end, true));
        let steadiness = (open.info.mode == Mode::Manual).then(|| {
            let min = match open.info.rate {
                // Two seconds of arrivals at the level's rate.
                Some(rate) => (2.0 * rate).ceil().max(2.0) as u32,
                None => open.info.concurrency.saturating_mul(self.steady_per_stream),
            };
            let lasted = window_end
                .unwrap_or(open.info.started_at)
                .saturating_sub(open.info.started_at);
            judge(
                estimate,
                open.steady.completions,
                min,
                self.steady_rse,
                lasted,
            )
        });
        let mut level = FinishedLevel {
            occupancy,
            transition: open.transition,
            throughput_rse: estimate.map(|e| e.rse),
            steadiness,
            info: open.info,
            partial,
            stats,
            client,
            goodput,
            stream_shapes: open.stream_shapes,
            server_timings: open.server_timings.to_json(),
            server: open.server,
            file: None,
            saved: None,
            achieved: open.lengths,
            lateness,
            turns: open.turns.stats(),
            cache_hit_rate: open.cache.rate(),
        };
        // A hand-set level left before any request of its own came back
        // is still saved: it says it was too short.
        if level.stats.completed + level.stats.failed > 0 || level.transition > 0 {
            let name = self.next_level_file_name(&level);
            let path = self.dir.join(&name);
            let num_prompts = open.tally.records();
            let mut file = self.level_file(&level, num_prompts);
            let body = file.to_value();
            // Only the file carries the histograms and samples: they are
            // for merges, and would make every copy in memory grow with
            // the level.
            let (histograms, samples) = distributions(&open.tally)?;
            file.histograms = Some(histograms);
            file.samples = Some(samples);
            write_atomic(&path, &pretty(&file.to_value()))
                .wrap_err_with(|| format!("cannot write {}", path.display()))?;
            level.file = Some(path);
            level.saved = Some(body);
        }
        self.finished.push(level);
        self.flush_requests()?;
        self.write_summary()?;
        self.finished
            .last()
            .ok_or_else(|| color_eyre::eyre::eyre!("level {index} was not kept"))
    }

    /// Where a level's measurement window ends: its last answer, or when
    /// the next level started if that came first.
    fn window_end(&self, open: &OpenLevel) -> Option<Duration> {
        let last_end = open.tally.latest_end()?;
        let next_start = self
            .level_starts
            .range(open.info.index + 1..)
            .next()
            .map(|(_, at)| *at);
        Some(next_start.map_or(last_end, |next| {
            next.min(last_end).max(open.info.started_at)
        }))
    }

    /// Name a series before it starts (the live view's `s`, or a restart):
    /// its label and what the probe saw of the server.
    pub fn set_series(&mut self, index: usize, label: String, server: Value) {
        self.series.insert(index, SeriesInfo { label, server });
    }

    pub fn series_label(&self, index: usize) -> String {
        self.series
            .get(&index)
            .map_or_else(|| format!("series {}", index + 1), |s| s.label.clone())
    }

    /// Series indexes with a saved level, in order.
    pub fn series_indexes(&self) -> Vec<usize> {
        let mut indexes: Vec<usize> = self
            .prior_series()
            .into_iter()
            .chain(self.saved_levels().iter().map(|l| l.info.series))
            .chain(self.series.keys().copied())
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
    }

    fn prior_series(&self) -> Vec<usize> {
        self.prior
            .iter()
            .flat_map(|p| p.point_series.iter().copied())
            .collect()
    }

    /// How a hand-set level is judged steady (`--steady-completions`,
    /// `--steady-rse`).
    pub fn set_steady_rule(&mut self, per_stream: u32, rse: f64) {
        self.steady_per_stream = per_stream.max(1);
        self.steady_rse = rse;
    }

    fn next_level_file_name(&mut self, level: &FinishedLevel) -> String {
        let base = level_file_base(&level.info, level.partial);
        let uses = self.name_uses.entry(base.clone()).or_insert(0);
        *uses += 1;
        // A resumed run's folder already holds the first names.
        while self.dir.join(level_file_name(&base, *uses)).exists() {
            *uses += 1;
        }
        level_file_name(&base, *uses)
    }

    /// Level indexes of a resumed run go on from the kept ones.
    fn level_offset(&self) -> usize {
        self.prior.as_ref().map_or(0, |p| p.next_level_index)
    }

    /// The level file (`report::schema::LevelFile`), as written.
    fn level_file(&self, level: &FinishedLevel, num_prompts: usize) -> LevelFile {
        let stats = &level.stats;
        let finite = |x: f64| Some(x).filter(|x| x.is_finite());
        // vLLM writes "inf" for a closed loop; an open loop's rate is a number.
        let (request_rate, burstiness) = match level.info.rate {
            Some(rate) if rate.is_finite() => (json!(rate), Some(self.run.burstiness)),
            _ => (json!("inf"), None),
        };
        // What the requests really had: profile, means and spread of the lengths.
        let mut traffic = level.achieved.to_json(&self.run.profile);
        if let Value::Object(t) = &mut traffic {
            t.insert("range_ratio".into(), json!(self.run.traffic.range_ratio));
        }
        let goodput = level.goodput.as_ref();
        LevelFile {
            schema_version: Some(SCHEMA_VERSION),
            date: Some(self.run.date.clone()),
            backend: Some(self.run.backend.clone()),
            model_id: Some(self.run.model.clone()),
            num_prompts: Some(num_prompts as u64),
            max_concurrency: Some(level.info.concurrency),
            request_rate: Some(request_rate),
            burstiness,
            duration: finite(stats.duration_s),
            completed: Some(stats.completed as u64),
            failed: Some(stats.failed as u64),
            total_input_tokens: Some(stats.total_input_tokens),
            total_output_tokens: Some(stats.total_output_tokens),
            request_throughput: finite(stats.request_throughput),
            output_throughput: finite(stats.output_throughput),
            total_token_throughput: finite(stats.total_token_throughput),
            // vLLM's `request_goodput` is a rate; the whole count rides beside it.
            request_goodput: goodput.map(|g| round3(g.rate_per_s)),
            mode: Some(level.info.mode.as_str().to_string()),
            partial: level.partial,
            level_index: Some((level.info.index + self.level_offset()) as u64),
            started_at_s: Some(round3(level.info.started_at.as_secs_f64())),
            duration_target: self.run.timing.duration_target(level.info.mode),
            started_unix_s: self.run.timing.started_unix_s(level.info.started_at),
            drain_overrun_s: self.run.timing.drain_overrun_s(
                level.info.started_at
                    + Duration::try_from_secs_f64(stats.duration_s).unwrap_or_default(),
                self.level_starts
                    .range(level.info.index + 1..)
                    .next()
                    .map(|(_, at)| *at),
            ),
            shard: self.run.timing.shard.clone(),
            series: Some(level.info.series as u64),
            series_label: Some(self.series_label(level.info.series)),
            transition_requests: Some(level.transition as u64),
            throughput_rse: level
                .throughput_rse
                .map(|r| (r * 10_000.0).round() / 10_000.0),
            steady: level.steadiness.as_ref().map(|s| s.steady),
            steady_reason: level.steadiness.as_ref().map(|s| json!(s.reason)),
            cancelled: Some(stats.cancelled as u64),
            short_outputs: Some(stats.short_outputs as u64),
            per_stream_tok_s: finite(stats.per_stream_tok_s),
            stream_decode_tok_s: stats.stream_decode_tok_s.and_then(finite),
            errors: Some(
                stats
                    .errors
                    .iter()
                    .map(|(k, v)| (k.clone(), *v as u64))
                    .collect(),
            ),
            token_count_source: stats.token_count_source.map(|s| s.as_str().to_string()),
            input_len: stats.input_len.map(|m| m.to_json()),
            output_len: stats.output_len.map(|m| m.to_json()),
            client_rx_lag_ms: stats.client_rx_lag.map(|l| l.to_json()),
            rx_clock: Some(json!({"kernel": stats.rx_kernel, "user": stats.rx_user})),
            client: Some(ClientLoadJson {
                cpu_percent: level.client.cpu_percent.map(round3),
                loop_lag_ms_p99: level.client.loop_lag_ms_p99.map(round3),
            }),
            // The server's own gauges over the level; empty without a probe.
            server: Some(level.server.to_json()),
            // What the server said of each request (llama.cpp timings, Ollama
            // durations), beside what the client measured.
            server_timings: Some(level.server_timings.clone()),
            goodput: goodput.map(Goodput::to_json),
            waiting: level.occupancy.as_ref().map(|o| o.waiting_json()),
            streaming: level.occupancy.as_ref().map(|o| o.streaming_json()),
            send_lateness: level.lateness.as_ref().map(|l| l.to_json()),
            turns: (!level.turns.is_empty())
                .then(|| level.turns.iter().map(TurnStats::to_json).collect()),
            prefix_cache_hit_rate: level
                .cache_hit_rate
                .map(|rate| (rate * 10_000.0).round() / 10_000.0),
            replay_timeline_s: level.info.timeline.map(|t| round3(t.as_secs_f64())),
            // Power and energy per million output tokens, on a GPU host.
            gpu: crate::probe::gpu::level_gpu_json(
                &level.server,
                stats.duration_s,
                stats.total_output_tokens,
            ),
            traffic: Some(traffic),
            engine: Some(self.run.engine.clone()),
            engine_version: self.run.engine_version.clone(),
            profile: Some(self.run.profile.clone()),
            input_len_target: Some(self.run.input_len),
            output_len_target: Some(self.run.output_len),
            ignore_eos: Some(self.run.ignore_eos),
            extra_body: self.run.extra_body.clone(),
            labels: match json!(self.run.labels) {
                Value::Object(m) => Some(m),
                _ => None,
            },
            histograms: None,
            samples: None,
            file: None,
            stats: stats.latency_json(&self.run.percentiles),
        }
    }

    /// Knee and capacity over the levels finished so far (partial and manual
    /// ones are left out by the decision rules themselves).
    pub fn decision(&self) -> Decision {
        let latest = self.series_indexes().last().copied().unwrap_or(0);
        self.decision_of(latest)
    }

    /// Knee and capacity of one series' levels.
    pub fn decision_of(&self, series: usize) -> Decision {
        let kept = self.prior.iter().flat_map(|p| {
            p.points
                .iter()
                .zip(&p.point_series)
                .filter(|(_, s)| **s == series)
                .map(|(point, _)| point.clone())
        });
        let mut points: Vec<LevelPoint> = kept
            .chain(
                self.saved_levels()
                    .iter()
                    .filter(|l| l.info.series == series)
                    .filter_map(|l| l.point()),
            )
            .collect();
        // The search's failing bound failed the SLO or bought no throughput:
        // probes from there on are past the capacity, whatever their SLO says.
        if let Some(failing) = self.search.and_then(|s| s.failing) {
            points.retain(|p| p.concurrency < failing);
        }
        decide(&points, &self.run.decision.slo)
    }

    /// Cost at capacity, when a GPU price was given and a capacity is known.
    pub fn cost(&self, decision: &Decision) -> Option<Cost> {
        let price = self.run.decision.gpu_price_per_hour?;
        let capacity = decision.capacity.as_ref().ok()?;
        Some(cost(
            capacity.output_throughput,
            price,
            self.run.decision.api_price_per_m,
            self.run.decision.utilization,
        ))
    }

    /// Levels with a file, in run order.
    fn saved_levels(&self) -> Vec<&FinishedLevel> {
        let mut saved: Vec<&FinishedLevel> =
            self.finished.iter().filter(|l| l.file.is_some()).collect();
        saved.sort_by_key(|l| l.info.index);
        saved
    }

    /// Every check that fires over the run so far. Level checks look at the
    /// complete levels, or at all saved ones when none is complete.
    pub fn diagnoses(&self) -> Vec<Diagnosis> {
        self.diagnoses_for(&self.decision())
    }

    /// `diagnoses` with a decision already at hand.
    pub fn diagnoses_for(&self, decision: &Decision) -> Vec<Diagnosis> {
        // The latest series' levels: another series ran against another
        // server configuration.
        let latest = self.series_indexes().last().copied().unwrap_or(0);
        let saved: Vec<&FinishedLevel> = self
            .saved_levels()
            .into_iter()
            .filter(|l| l.info.series == latest && !l.is_unsteady())
            .collect();
        let complete: Vec<&FinishedLevel> = saved.iter().copied().filter(|l| !l.partial).collect();
        let basis = if complete.is_empty() {
            saved.clone()
        } else {
            complete
        };
        let views: Vec<LevelView<'_>> = basis
            .iter()
            .map(|l| LevelView {
                concurrency: l.info.concurrency,
                stats: &l.stats,
            })
            .collect();
        let loads: Vec<ClientLevelLoad> = saved
            .iter()
            .map(|l| ClientLevelLoad {
                concurrency: l.info.concurrency,
                cpu_percent: l.client.cpu_percent,
                loop_lag_ms_p99: l.client.loop_lag_ms_p99,
            })
            .collect();
        let shapes: Vec<StreamShape> = basis
            .iter()
            .flat_map(|l| l.stream_shapes.iter().copied())
            .collect();
        let points: Vec<LevelPoint> = saved.iter().filter_map(|l| l.point()).collect();
        let spreads = rounds_spread(&points);
        let mut diagnoses = diagnose_run(&DiagnoseInput {
            levels: &views,
            input_target: self.run.input_len + self.run.prefix_len,
            output_target: self.run.output_len,
            warmup_requests: Some(self.run.warmup_requests),
            connect_probe_ms: self.run.connect_probe_ms,
            client_loads: &loads,
            stream_shapes: &shapes,
            rounds: self.run.decision.rounds,
            spreads: &spreads,
            decision: Some(decision),
        });
        let servers: Vec<ServerView> = basis.iter().map(|l| server_view(l)).collect();
        let template_share = self.warmup.as_ref().and_then(|w| {
            let overhead = w.get("template_overhead_tokens")?.as_f64()?;
            (self.run.input_len > 0).then(|| overhead / f64::from(self.run.input_len))
        });
        let engine_found = engine_diagnoses(&EngineInput {
            engine: &self.run.engine,
            levels: &servers,
            template_share,
        });
        // An open-loop run sets no concurrency: the sweep checks do not apply.
        if matches!(self.run.kind.as_str(), "rate" | "replay") {
            diagnoses.retain(|d| !matches!(d.id, "single_level" | "no_rise" | "no_capacity"));
        }
        if let Some(warning) = saved
            .iter()
            .filter_map(|l| l.lateness.as_ref())
            .find_map(|l| l.warning())
        {
            diagnoses.push(Diagnosis {
                id: "client_lagging",
                message: format!(
                    "{warning}: the schedule slipped (a full --max-concurrency cap or a busy client); \
                     latencies count from the intended send time"
                ),
                evidence: json!({}),
            });
        }
        // The slot check says what no_rise says, with the slots counted.
        if engine_found.iter().any(|d| d.id == "slot_queueing") {
            diagnoses.retain(|d| d.id != "no_rise");
        }
        diagnoses.extend(engine_found);
        diagnoses
    }

    /// `summary.json`'s `series`: each series' label, what the probe saw of
    /// the server, and its knee and capacity.
    fn series_json(&self) -> Value {
        Value::Array(
            self.series_indexes()
                .into_iter()
                .map(|index| {
                    let decision = self.decision_of(index);
                    json!({
                        "index": index,
                        "label": self.series_label(index),
                        "server": self.series.get(&index).map_or(Value::Null, |s| s.server.clone()),
                        "knee": decision.knee_json(),
                        "capacity": decision.capacity_json(),
                    })
                })
                .collect(),
        )
    }

    fn write_summary(&self) -> Result<()> {
        let saved = self.saved_levels();
        let decision = self.decision();
        let cost = self.cost(&decision);
        // Kept levels of a resumed run come back as they were read.
        let kept = self.prior.iter().flat_map(|p| {
            p.levels
                .iter()
                .map(|v| serde_json::from_value::<LevelFile>(v.clone()).unwrap_or_default())
        });
        let levels: Vec<LevelFile> = kept
            .chain(saved.iter().map(|l| {
                let mut level =
                    self.level_file(l, l.stats.completed + l.stats.failed + l.stats.cancelled);
                level.file = l
                    .file
                    .as_ref()
                    .and_then(|f| f.file_name())
                    .and_then(|n| n.to_str())
                    .map(str::to_string);
                level
            }))
            .collect();
        let diagnoses: Vec<DiagnosisEntry> = self
            .diagnoses_for(&decision)
            .iter()
            .map(|d| DiagnosisEntry {
                id: d.id.to_string(),
                message: d.message.clone(),
                evidence: d.evidence.clone(),
            })
            .collect();
        let spreads: Vec<Value> =
            rounds_spread(&saved.iter().filter_map(|l| l.point()).collect::<Vec<_>>())
                .iter()
                .map(|s| s.to_json())
                .collect();
        let mut achieved = Lengths::default();
        for level in &saved {
            achieved.absorb(&level.achieved);
        }
        let mut traffic = achieved.to_json(&self.run.profile);
        if let Value::Object(t) = &mut traffic {
            t.insert("range_ratio".into(), json!(self.run.traffic.range_ratio));
        }
        let summary = SummaryFile {
            schema_version: Some(SCHEMA_VERSION),
            tokbench_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            run: self.run.to_section(),
            traffic,
            dataset: self
                .run
                .traffic
                .dataset
                .as_ref()
                .map_or(Value::Null, |d| d.to_json()),
            levels,
            knee: schema::typed(decision.knee_json()),
            capacity: schema::typed(decision.capacity_json()),
            series: match self.series_json() {
                Value::Array(a) => a,
                _ => Vec::new(),
            },
            capacity_reason: Some(decision.capacity_line()),
            cost: cost.as_ref().and_then(|c| schema::typed(c.to_json())),
            diagnoses,
            rounds: spreads,
            warmup: self.warmup.clone().unwrap_or(Value::Null),
            search: self.search.map(|s| SearchState {
                passing: s.passing,
                failing: s.failing,
                next: s.next,
                done: s.next.is_none(),
            }),
            resumed: self.prior.as_ref().map(|p| Resumed {
                first_started_at: p.run.get("started_at").cloned().unwrap_or(Value::Null),
                levels_kept: p.levels.len(),
            }),
            target_changes: self
                .target_changes
                .iter()
                .map(|(at, c)| TargetChange {
                    at_s: round3(*at),
                    concurrency: *c,
                })
                .collect(),
            other: Map::new(),
        }
        .to_value();
        let path = self.dir.join("summary.json");
        write_atomic(&path, &pretty(&summary))
            .wrap_err_with(|| format!("cannot write {}", path.display()))?;
        // The human-readable pair rides with every summary: report.md to paste,
        // chart.svg to look at. A failure here is as fatal as summary.json's.
        crate::report::formats::write_run_reports_from(&self.dir, &summary)
            .wrap_err_with(|| format!("cannot write the reports in {}", self.dir.display()))
    }
}

/// What a finished level saw of the server, for the engine checks.
fn server_view(l: &FinishedLevel) -> ServerView {
    let error = |key: &str| l.stats.errors.get(key).copied().unwrap_or(0);
    let preemptions = match (
        l.server.min("preemptions_total"),
        l.server.max("preemptions_total"),
    ) {
        (Some(lo), Some(hi)) => Some(hi - lo),
        _ => None,
    };
    ServerView {
        concurrency: l.info.concurrency,
        output_throughput: l.stats.output_throughput,
        p99_ttft_ms: l.stats.ttft.as_ref().and_then(|d| d.percentile(99.0)),
        gpu_share_min: l.server.min("gpu_share"),
        waiting_max: l.server.max("waiting"),
        kv_cache_usage_max: l.server.max("kv_cache_usage"),
        preemptions,
        prefix_cache_hit_rate_mean: l.server.mean("prefix_cache_hit_rate"),
        load_ms_max: l.server_timings.get("load_ms_max").and_then(Value::as_f64),
        slot_wait_ms_median: l
            .server_timings
            .get("slot_wait_ms_median")
            .and_then(Value::as_f64),
        http_503: error("http_503"),
        http_429: error("http_429"),
        streaming_mean: l.occupancy.map(|o| o.streaming_mean),
    }
}

/// A request's server-side timings, with what follows from them.
fn server_timings_json(t: ServerTimings) -> Value {
    json!({
        "prompt_n": t.prompt_n,
        "prompt_ms": t.prompt_ms,
        "predicted_n": t.predicted_n,
        "predicted_ms": t.predicted_ms,
        "load_ms": (t.load_ms > 0.0).then_some(f64::from(t.load_ms)),
        "total_ms": (t.total_ms > 0.0).then_some(f64::from(t.total_ms)),
        "server_decode_tok_s": t.decode_tok_s().map(round3),
        "server_prefill_tok_s": t.prefill_tok_s().map(round3),
        "slot_wait_ms": t.slot_wait_ms().map(round3),
    })
}

fn warmup_json(ok: usize, failed: usize, c: &Calibration, reported: &[u32]) -> Value {
    json!({
        "ok": ok,
        "failed": failed,
        "tokens_per_word": round3(c.tokens_per_word),
        "template_overhead_tokens": round3(c.overhead_tokens),
        "reported_prompt_tokens": reported,
    })
}

/// `sweep-c{C}[-manual][-partial]` (open loop: `sweep-rate{R}`, a replay
/// `sweep-replay`): a level file's name before its round suffix.
pub fn level_file_base(info: &LevelInfo, partial: bool) -> String {
    let mut name = match (info.mode, info.rate) {
        (Mode::Replay, _) => "sweep-replay".to_string(),
        (Mode::Rate | Mode::Manual, Some(rate)) => format!("sweep-rate{}", rate_label(rate)),
        _ => format!("sweep-c{}", info.concurrency),
    };
    if info.series > 0 {
        name.push_str(&format!("-s{}", info.series + 1));
    }
    if info.mode == Mode::Manual {
        name.push_str("-manual");
    }
    if partial {
        name.push_str("-partial");
    }
    name
}

/// A rate as a file name and label: `2`, `2.5`, `0.333`, `inf`.
pub fn rate_label(rate: f64) -> String {
    if !rate.is_finite() {
        return "inf".into();
    }
    let text = format!("{:.3}", rate);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The first level of a kind keeps the base name; the second gets `-r2`, and so on.
pub fn level_file_name(base: &str, nth: u32) -> String {
    if nth <= 1 {
        format!("{base}.json")
    } else {
        format!("{base}-r{nth}.json")
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(v).unwrap_or_else(|_| b"{}".to_vec());
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_the_contract() {
        assert_eq!(
            level_file_name(&level_file_base(&info(16, Mode::Planned, None), false), 1),
            "sweep-c16.json"
        );
        assert_eq!(
            level_file_name(&level_file_base(&info(16, Mode::Manual, None), true), 1),
            "sweep-c16-manual-partial.json"
        );
        assert_eq!(
            level_file_name(&level_file_base(&info(4, Mode::Planned, None), false), 2),
            "sweep-c4-r2.json"
        );
        assert_eq!(
            level_file_name(&level_file_base(&info(4, Mode::Manual, None), false), 3),
            "sweep-c4-manual-r3.json"
        );
        assert_eq!(
            level_file_name(
                &level_file_base(&info(4096, Mode::Rate, Some(2.5)), true),
                1
            ),
            "sweep-rate2.5-partial.json"
        );
        assert_eq!(
            level_file_name(
                &level_file_base(&info(64, Mode::Rate, Some(10.0)), false),
                2
            ),
            "sweep-rate10-r2.json"
        );
        assert_eq!(
            level_file_name(&level_file_base(&info(64, Mode::Replay, None), false), 1),
            "sweep-replay.json"
        );
        assert_eq!(
            level_file_name(&level_file_base(&info(48, Mode::Search, None), false), 1),
            "sweep-c48.json"
        );
        assert_eq!(rate_label(f64::INFINITY), "inf");
        assert_eq!(rate_label(1.0 / 3.0), "0.333");
    }

    fn info(concurrency: u32, mode: Mode, rate: Option<f64>) -> LevelInfo {
        LevelInfo {
            index: 0,
            concurrency,
            mode,
            num_prompts: None,
            plan_index: None,
            started_at: Duration::ZERO,
            rate,
            timeline: None,
            series: 0,
        }
    }
}
