//! The tally: driver events in, finished levels and the run's judgement
//! out (docs/architecture.md section 2, "Tally and recorder"). Pure: it
//! opens no file and reads no clock. The client's own load comes in as a
//! [`ClientReading`] from whoever calls it, so a test feeds made-up events
//! and readings and checks every figure by hand.
//!
//! - [`levels`]: a level's records folded into a [`FinishedLevel`];
//! - [`verdict`]: knee, capacity, cost and diagnoses over the finished
//!   levels.
//!
//! The recorder (`report::recorder`) owns one tally and writes what it
//! makes: request lines, level files and `summary.json`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::resume::PriorRun;
use super::run_info::RunInfo;
use crate::analysis::goodput::Goodput;
use crate::fmt::round3;
use crate::load::driver::{DriverEvent, LevelInfo, Mode, SearchProgress};
use crate::stats::gauges::{cpu_percent, running_count, ClientReading, GaugeSummary, ServerSample};
use crate::stats::occupancy::{Occupancy, RequestSpan, Timeline};
use crate::stats::percentile::percentile_sorted;
use crate::stats::server_account::{account_json, ClientSide, LevelAccount, Snapshot};
use crate::stats::steady::{
    judge, min_completions, SteadyEstimator, STEADY_COMPLETIONS_PER_STREAM, STEADY_RSE,
};
use crate::stats::tally::{Lengths, LevelTally, ServerTimingTally};
use crate::stats::turns::{CacheHits, TurnTally};
use crate::workload::Calibration;

mod fit;
mod levels;
#[cfg(test)]
mod tests;
mod verdict;

use levels::OpenLevel;
pub(crate) use levels::{ClientLoad, FinishedLevel};

/// One stretch of the run against one server configuration.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SeriesInfo {
    pub label: String,
    /// What the probe saw of the server (engine version, slots, model).
    pub server: Value,
}

/// A level just closed: what it made, and its folded records, which only
/// the level file needs (its histograms and samples) and which are
/// dropped once it is written.
pub(crate) struct ClosedLevel {
    pub level: FinishedLevel,
    pub records: LevelTally,
}

pub(crate) struct Tally {
    run: RunInfo,
    open: HashMap<usize, OpenLevel>,
    finished: Vec<FinishedLevel>,
    target_changes: Vec<(f64, u32)>,
    warmup: Option<Value>,
    /// `--resume`: the run continued, whose finished levels still count.
    prior: Option<PriorRun>,
    /// `--find-capacity`: the search's bounds so far.
    search: Option<SearchProgress>,
    /// When each level started (run clock), by index.
    level_starts: BTreeMap<usize, Duration>,
    /// Every series so far, by index: its label and what the probe saw.
    series: BTreeMap<usize, SeriesInfo>,
    steady_per_stream: u32,
    steady_rse: f64,
    /// `tokbench tune`'s section, as its face last set it.
    tune: Option<crate::report::schema::TuneSection>,
    /// The server's account read at level edges: the latest one (the start
    /// of the next level to begin), and each level's start and end.
    account_latest: Option<Arc<Snapshot>>,
    account_edges: BTreeMap<usize, LevelEdgeReads>,
    /// A fitted run's estimate, skipped levels and level ends.
    fit: fit::FitLog,
    /// The series of the level that started last.
    current_series: usize,
}

/// A level's start and end reads of the server's account.
type LevelEdgeReads = (Option<Arc<Snapshot>>, Option<Arc<Snapshot>>);

impl Tally {
    pub(crate) fn new(run: RunInfo, prior: Option<PriorRun>) -> Tally {
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
        Tally {
            run,
            open: HashMap::new(),
            finished: Vec::new(),
            target_changes: Vec::new(),
            warmup: None,
            prior,
            search: None,
            level_starts: BTreeMap::new(),
            series,
            steady_per_stream: STEADY_COMPLETIONS_PER_STREAM,
            steady_rse: STEADY_RSE,
            tune: None,
            account_latest: None,
            account_edges: BTreeMap::new(),
            fit: fit::FitLog::default(),
            current_series: 0,
        }
    }

    pub(crate) fn set_tune(&mut self, tune: crate::report::schema::TuneSection) {
        self.tune = Some(tune);
    }

    pub(crate) fn tune(&self) -> Option<&crate::report::schema::TuneSection> {
        self.tune.as_ref()
    }

    pub(crate) fn run(&self) -> &RunInfo {
        &self.run
    }

    /// A fitted run's `fit` section, once the warmup's estimate was made or
    /// a level was skipped.
    pub(crate) fn fit_section(&self) -> Option<&crate::report::schema::FitSection> {
        self.fit.section()
    }

    /// Why level `index` of a fitted run ended.
    pub(crate) fn end_reason(&self, index: usize) -> Option<&'static str> {
        self.fit.end_reason(index)
    }

    /// Levels whose requests are all back, in the order they finished.
    pub(crate) fn finished(&self) -> &[FinishedLevel] {
        &self.finished
    }

    pub(crate) fn prior(&self) -> Option<&PriorRun> {
        self.prior.as_ref()
    }

    /// The levels a resumed run kept from its folder, (series, figures) in
    /// run order; none for a tune's later setting, whose earlier levels are
    /// other settings' series, not this run's.
    pub(crate) fn kept_levels(&self) -> Vec<(usize, &crate::analysis::decide::LevelPoint)> {
        self.prior
            .iter()
            .filter(|p| !p.new_series)
            .flat_map(|p| p.point_series.iter().copied().zip(&p.points))
            .collect()
    }

    pub(crate) fn warmup(&self) -> Option<&Value> {
        self.warmup.as_ref()
    }

    pub(crate) fn search(&self) -> Option<SearchProgress> {
        self.search
    }

    /// `(run clock s, concurrency)` of every hand-set target change.
    pub(crate) fn target_changes(&self) -> &[(f64, u32)] {
        &self.target_changes
    }

    /// The concurrency of a level still running.
    pub(crate) fn open_concurrency(&self, level: usize) -> Option<u32> {
        self.open.get(&level).map(|l| l.info.concurrency)
    }

    /// When the level after `index` started, if one has.
    pub(crate) fn next_start(&self, index: usize) -> Option<Duration> {
        self.level_starts
            .range(index + 1..)
            .next()
            .map(|(_, at)| *at)
    }

    /// Level indexes of a resumed run go on from the kept ones.
    pub(crate) fn level_offset(&self) -> usize {
        self.prior.as_ref().map_or(0, |p| p.next_level_index)
    }

    /// Take one driver event other than a level's end, which
    /// [`Tally::close_level`] takes. `read_client` is called when a level
    /// starts, for the client's CPU time then.
    pub(crate) fn on_event(
        &mut self,
        event: &DriverEvent,
        read_client: impl FnOnce() -> ClientReading,
    ) {
        match event {
            DriverEvent::LevelStarted(info) => {
                // An edge read just before: this level's start.
                if let Some(start) = self.account_latest.take() {
                    self.account_edges.entry(info.index).or_default().0 = Some(start);
                }
                self.current_series = info.series;
                self.start_level(info, read_client());
            }
            DriverEvent::Fit(event) => {
                // Answers shortened to fit: the run's shape from here on,
                // on every table and file.
                if let Some(output_len) = self.fit.on_event(event, self.current_series) {
                    self.run.output_len = output_len;
                }
            }
            DriverEvent::ServerAccount { closes, snapshot } => {
                if let Some(index) = closes {
                    self.account_edges.entry(*index).or_default().1 = Some(snapshot.clone());
                }
                self.account_latest = Some(snapshot.clone());
            }
            DriverEvent::Record(record) => {
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
            // Never the level's own figures, nor its queue counts.
            DriverEvent::Probe(record) => {
                if let Some(level) = self.open.get_mut(&record.level) {
                    level.probes.add(record);
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
            DriverEvent::Search(progress) => self.search = Some(*progress),
            DriverEvent::TargetReached { index, at } => {
                if let Some(level) = self.open.get_mut(index) {
                    level.steady.start(*at);
                }
            }
            DriverEvent::SeriesStarted { series, .. } => {
                self.current_series = *series;
                self.series.entry(*series).or_insert_with(|| SeriesInfo {
                    label: crate::analysis::series::default_label(*series),
                    server: Value::Null,
                });
            }
            DriverEvent::LevelFinished { .. }
            | DriverEvent::ServerGone { .. }
            | DriverEvent::ServerBack { .. }
            // A confirmed restart's failures come as `restart` records.
            | DriverEvent::RestartSuspected { .. }
            | DriverEvent::PlanDone
            | DriverEvent::WarmupStarted { .. }
            | DriverEvent::Paused(_)
            | DriverEvent::Finished { .. } => {}
        }
    }

    fn start_level(&mut self, info: &LevelInfo, client: ClientReading) {
        self.level_starts.insert(info.index, info.started_at);
        // A hand-set level's steady stretch starts when it fills; any
        // other level's at its start.
        let mut steady = SteadyEstimator::default();
        if info.mode != Mode::Manual {
            steady.start(info.started_at);
        }
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
                running: Vec::new(),
                transition: 0,
                steady,
                probes: Default::default(),
                // Lag before the level is not the level's: this reading's
                // lag samples are dropped.
                cpu_at_start: client.cpu_time,
                wall_at_start: client.wall_time,
                rate_series: info
                    .timeline
                    .map(|_| crate::stats::rate_series::RateSeries::starting_at(info.started_at)),
            },
        );
    }

    /// A scrape of the server's gauges counts for every level running.
    pub(crate) fn on_server_sample(&mut self, sample: &ServerSample) {
        let running = running_count(&sample.gauges);
        for level in self.open.values_mut() {
            level.server.add(sample);
            if let Some(count) = running {
                level.running.push((sample.at, count));
            }
        }
    }

    /// Indexes of the levels still running, in order.
    pub(crate) fn open_levels(&self) -> Vec<usize> {
        let mut open: Vec<usize> = self.open.keys().copied().collect();
        open.sort_unstable();
        open
    }

    /// End a running level: its statistics, steadiness and client load.
    /// `client` is read at its end. None when the level is not running
    /// (announced twice, or never started). The level counts for the
    /// judgement once [`Tally::keep`] takes it back.
    pub(crate) fn close_level(
        &mut self,
        index: usize,
        partial: bool,
        client: ClientReading,
    ) -> Option<ClosedLevel> {
        let open = self.open.remove(&index)?;
        let lateness = open.tally.lateness();
        let open_loop = open.info.mode.is_open_loop();
        let streams = if open_loop { 1 } else { open.info.concurrency };
        let mut stats = open.tally.stats(streams, &self.run.percentiles);
        let mut lag = client.loop_lag_ms;
        lag.sort_by(f64::total_cmp);
        let client_load = ClientLoad {
            cpu_percent: cpu_percent(
                open.cpu_at_start,
                client.cpu_time,
                client.wall_time.saturating_sub(open.wall_at_start),
            ),
            loop_lag_ms_p99: percentile_sorted(&lag, 99.0),
        };
        let goodput = self.run.decision.goodput.as_ref().map(|_| {
            Goodput::from_counts(
                open.good,
                stats.completed + stats.failed,
                Some(stats.duration_s),
            )
        });
        let window_end = self.window_end(&open);
        let occupancy = window_end.and_then(|to| {
            let mut o = open.timeline.occupancy(to)?;
            o.live = open.timeline.live_split(&open.running, to);
            Some(o)
        });
        if open_loop {
            // An open loop has no set concurrency: per-stream figures divide
            // by the mean number in flight (time-weighted), whatever its
            // size; unknown (NaN, saved as null) without one.
            stats.per_stream_tok_s = match occupancy.as_ref().map(Occupancy::in_flight_mean) {
                Some(mean) if mean > 0.0 => stats.output_throughput / mean,
                _ => f64::NAN,
            };
        }
        // A level cut short (a stop closes it with requests still in
        // flight, which come back cancelled or never) lacks those requests'
        // tokens in its last seconds, which would read as throughput
        // falling. Judge it, as the live view judged it while it ran, on the
        // seconds that were whole: those before its longest request.
        let every_request_back = !partial && stats.cancelled == 0;
        let estimate = window_end.and_then(|end| open.steady.estimate(end, every_request_back));
        let steadiness = (open.info.mode == Mode::Manual).then(|| {
            let min = min_completions(
                open.info.rate,
                open.info.concurrency,
                self.steady_per_stream,
            );
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
        let probes = open.probes.stats();
        let server_account = match self.account_edges.remove(&index) {
            Some((Some(start), Some(end))) => {
                // The server counted the level's probes too (every one is
                // back before the edge is read): on the client's side.
                let probe_tokens = probes.map_or((0, 0), |p| (p.input_tokens, p.output_tokens));
                let client = ClientSide {
                    completed: stats.completed as u64,
                    // Requests the server may still have finished.
                    failed: (stats.failed + stats.cancelled) as u64 + u64::from(open.transition),
                    ttft_mean_ms: stats.ttft.as_ref().map(|d| d.mean),
                    ttft_count: stats.ttft.as_ref().map_or(0, |d| d.count as u64),
                    probe_ttft: probes.and_then(|p| p.ttft).map(|t| (t.mean, t.count)),
                    output_tokens: stats.total_output_tokens + probe_tokens.1,
                    input_tokens: stats.total_input_tokens + probe_tokens.0,
                    probes: probes.map_or(0, |p| p.count),
                    shards: self
                        .run
                        .timing
                        .shard
                        .as_ref()
                        .and_then(|s| s.count)
                        .unwrap_or(1),
                };
                Some(account_json(&LevelAccount::between(&start, &end), &client))
            }
            _ => None,
        };
        let level = FinishedLevel {
            server_account,
            occupancy,
            transition: open.transition,
            throughput_rse: estimate.map(|e| e.rse),
            steadiness,
            info: open.info,
            partial,
            stats,
            client: client_load,
            goodput,
            stream_shapes: open.stream_shapes,
            rate_series: open.rate_series.as_ref().map(|series| {
                let ramp = self.run.ramp;
                let rate = move |t: f64| ramp.map_or(0.0, |r| r.rate_at(t));
                series.to_json(
                    self.run.decision.slo.ttft_p99_ms,
                    ramp.is_some().then_some(&rate as &dyn Fn(f64) -> f64),
                )
            }),
            server_timings: open.server_timings.to_json(),
            server: open.server,
            file: None,
            saved: None,
            achieved: open.lengths,
            lateness,
            turns: open.turns.stats(),
            cache_hit_rate: open.cache.rate(),
            probes,
        };
        Some(ClosedLevel {
            level,
            records: open.tally,
        })
    }

    /// Take back a closed level (with its file attached, if it got one):
    /// from now on it counts for the decision and the diagnoses.
    pub(crate) fn keep(&mut self, level: FinishedLevel) -> &FinishedLevel {
        self.finished.push(level);
        let last = self.finished.len() - 1;
        &self.finished[last]
    }

    /// Where a level's measurement window ends: its last answer, or when
    /// the next level started if that came first.
    fn window_end(&self, open: &OpenLevel) -> Option<Duration> {
        let last_end = open.tally.latest_end()?;
        Some(self.next_start(open.info.index).map_or(last_end, |next| {
            next.min(last_end).max(open.info.started_at)
        }))
    }

    /// Name a series before it starts (the live view's `s`, or a restart):
    /// its label and what the probe saw of the server.
    pub(crate) fn set_series(&mut self, index: usize, label: String, server: Value) {
        self.series.insert(index, SeriesInfo { label, server });
    }

    pub(crate) fn series_label(&self, index: usize) -> String {
        self.series.get(&index).map_or_else(
            || crate::analysis::series::default_label(index),
            |s| s.label.clone(),
        )
    }

    /// What the probe saw of a series' server, when it said.
    pub(crate) fn series_server(&self, index: usize) -> Value {
        self.series
            .get(&index)
            .map_or(Value::Null, |s| s.server.clone())
    }

    /// Series indexes with a saved level, in order.
    pub(crate) fn series_indexes(&self) -> Vec<usize> {
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
    pub(crate) fn set_steady_rule(&mut self, per_stream: u32, rse: f64) {
        self.steady_per_stream = per_stream.max(1);
        self.steady_rse = rse;
    }

    /// Levels that had anything to save, in run order.
    pub(crate) fn saved_levels(&self) -> Vec<&FinishedLevel> {
        let mut saved: Vec<&FinishedLevel> =
            self.finished.iter().filter(|l| l.has_answers()).collect();
        saved.sort_by_key(|l| l.info.index);
        saved
    }
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
