//! The recorder turns driver events into result files (docs/architecture.md section 5):
//! a level file the moment a level ends, `summary.json` rewritten after every
//! level, `requests.jsonl` flushed at least once a second. Both the headless
//! runner and the live view feed it the same events, so results are the same
//! whichever face the run has.
//!
//! - [`levels`]: a level's records folded into a [`FinishedLevel`] (pure);
//! - [`verdict`]: knee, capacity, cost and diagnoses over the finished
//!   levels (pure);
//! - [`level_out`]: the level file's object, its name, and its streamed
//!   writing;
//! - [`summary`]: writes `summary.json`;
//! - [`run_info`]: what identifies a run.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr};
use serde_json::{json, Map, Value};

use super::atomic::{write_atomic, write_atomic_with};
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
use crate::record::{Outcome, RequestRecord, ServerTimings};
use crate::stats::gauges::{cpu_percent, level_gpu_json, ClientMeter, GaugeSummary, ServerSample};
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

mod level_out;
mod levels;
mod run_info;
mod summary;
mod verdict;

use level_out::{histograms, write_level_file};
pub use level_out::{level_file_base, level_file_name, rate_label};
use levels::OpenLevel;
pub use levels::{ClientLoad, FinishedLevel};
pub use run_info::RunInfo;

/// Answers kept per level for the buffered-stream check: it looks at the
/// medians of their shape, which the first ten thousand settle.
const STREAM_SHAPES_KEPT: usize = 10_000;

/// How often `requests.jsonl` reaches the disk at the least.
const JSONL_FLUSH_EVERY: Duration = Duration::from_secs(1);

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
    meter: ClientMeter,
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
    pub fn create(dir: &Path, run: RunInfo, meter: ClientMeter) -> Result<Recorder> {
        Recorder::open(dir, run, meter, None)
    }

    /// Create the files, or with a prior run (`--resume`) continue them:
    /// requests.jsonl is appended to and the kept levels lead the summary.
    pub fn open(
        dir: &Path,
        run: RunInfo,
        meter: ClientMeter,
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
            meter,
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
                // Lag before the level is not the level's.
                let cpu_at_start = (self.meter)().cpu_time;
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
                        cpu_at_start,
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
        let reading = (self.meter)();
        let mut lag = reading.loop_lag_ms;
        lag.sort_by(f64::total_cmp);
        let client = ClientLoad {
            cpu_percent: cpu_percent(
                open.cpu_at_start,
                reading.cpu_time,
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
            file.histograms = Some(histograms(&open.tally)?);
            write_level_file(&path, &file, &open.tally)
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
