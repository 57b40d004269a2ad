//! The recorder writes what the tally makes (docs/architecture.md section
//! 5): a level file the moment a level ends, `summary.json` rewritten after
//! every level, `requests.jsonl` flushed at least once a second. Both the
//! headless runner and the live view feed it the same events, so results
//! are the same whichever face the run has. What the files say is worked
//! out by the pure [`Tally`] it owns; the recorder only names, writes and
//! flushes.
//!
//! - [`level_out`]: the level file's object, its name, and its streamed
//!   writing;
//! - [`summary`]: writes `summary.json`.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr};
use serde_json::{json, Map, Value};

use super::atomic::write_atomic_with;
use super::resume::PriorRun;
use super::schema::{
    self, ClientLoad as ClientLoadJson, DiagnosisEntry, LevelFile, RequestLine, Resumed,
    SearchState, SummaryFile, TargetChange, SCHEMA_VERSION,
};
use super::tally::{ClosedLevel, Tally};
use crate::analysis::goodput::Goodput;
use crate::analysis::rounds::rounds_spread;
use crate::fmt::{round3, round4};
use crate::load::driver::{DriverEvent, Mode};
use crate::record::{Outcome, RequestRecord, ServerTimings, TxClock};
use crate::stats::gauges::{level_gpu_json, ClientMeter, ServerSample};
use crate::stats::hdr::Samples;
use crate::stats::tally::{Lengths, LevelTally};
use crate::stats::turns::TurnStats;

mod level_out;
mod summary;

pub(crate) use super::run_info::RunInfo;
pub(crate) use super::tally::FinishedLevel;
use level_out::{histograms, write_level_file};
pub(crate) use level_out::{level_file_base, level_file_name, rate_label};

/// How often `requests.jsonl` reaches the disk at the least.
const JSONL_FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct Recorder {
    dir: PathBuf,
    tally: Tally,
    jsonl: BufWriter<File>,
    /// `probes.jsonl`, the probe requests' lines (`--probe-rate`), opened
    /// with the first probe: a run without probes has no such file.
    probes_jsonl: Option<BufWriter<File>>,
    /// Continuing a run (`--resume`): its files are appended to.
    append: bool,
    last_flush: Instant,
    name_uses: HashMap<String, u32>,
    meter: ClientMeter,
    /// `run.ended_at`, set when the books close: the mark that tells a
    /// reader (`view --follow`) the run is over.
    ended_at: Option<String>,
    /// A report (`chart.svg`, `report.md`) could not be rewritten during
    /// the run, and that was said: once is enough, the end writes it.
    reports_said: std::cell::Cell<bool>,
    /// `--threshold`s as judged by the last summary at the run's end.
    thresholds: std::cell::RefCell<Vec<schema::ThresholdEntry>>,
}

impl Recorder {
    /// Create the result folder and its files. Fails (before any load is
    /// sent) when the folder cannot be written.
    #[cfg(test)]
    pub(crate) fn create(dir: &Path, run: RunInfo, meter: ClientMeter) -> Result<Recorder> {
        Recorder::open(dir, run, meter, None)
    }

    /// Create the files, or with a prior run (`--resume`) continue them:
    /// requests.jsonl is appended to and the kept levels lead the summary.
    pub(crate) fn open(
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
        let append = prior.is_some();
        // Before the load: the descriptors its result files will need when
        // the load has taken every other one.
        super::atomic::hold_descriptor_reserve();
        let recorder = Recorder {
            dir: dir.to_path_buf(),
            tally: Tally::new(run, prior),
            jsonl: BufWriter::new(file),
            probes_jsonl: None,
            append,
            last_flush: Instant::now(),
            name_uses: HashMap::new(),
            meter,
            ended_at: None,
            reports_said: std::cell::Cell::new(false),
            thresholds: std::cell::RefCell::new(Vec::new()),
        };
        recorder.write_summary(false)?;
        Ok(recorder)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn run(&self) -> &RunInfo {
        self.tally.run()
    }

    /// The levels and the judgement so far.
    pub(crate) fn tally(&self) -> &Tally {
        &self.tally
    }

    /// The `--threshold`s as the run's end judged them (empty before it,
    /// and without thresholds).
    pub(crate) fn thresholds(&self) -> Vec<schema::ThresholdEntry> {
        self.thresholds.borrow().clone()
    }

    /// Levels whose requests are all back, in the order they finished.
    pub(crate) fn finished(&self) -> &[FinishedLevel] {
        self.tally.finished()
    }

    /// Take one driver event. Returns the level it finished, if it finished one.
    pub(crate) fn on_event(&mut self, event: &DriverEvent) -> Result<Option<&FinishedLevel>> {
        match event {
            DriverEvent::Record(record) => self.write_request_line(record)?,
            DriverEvent::Probe(record) => self.write_probe_line(record)?,
            DriverEvent::LevelFinished { index, partial } => {
                return self.finish_level(*index, *partial).map(Some);
            }
            _ => {}
        }
        self.tally.on_event(event, &mut self.meter);
        if self.last_flush.elapsed() >= JSONL_FLUSH_EVERY {
            self.flush_requests()?;
        }
        Ok(None)
    }

    /// A scrape of the server's gauges counts for every level running.
    pub(crate) fn on_server_sample(&mut self, sample: &ServerSample) {
        self.tally.on_server_sample(sample);
    }

    /// A tune's section, written with every summary from now on.
    pub(crate) fn set_tune(&mut self, tune: super::schema::TuneSection) {
        self.tally.set_tune(tune);
    }

    /// Name a series before it starts (the live view's `s`, or a restart).
    pub(crate) fn set_series(&mut self, index: usize, label: String, server: Value) {
        self.tally.set_series(index, label, server);
    }

    /// How a hand-set level is judged steady (`--steady-completions`,
    /// `--steady-rse`).
    pub(crate) fn set_steady_rule(&mut self, per_stream: u32, rse: f64) {
        self.tally.set_steady_rule(per_stream, rse);
    }

    /// Close the books: levels still open are saved as partial, every file
    /// flushed, and the last summary says the run ended (`run.ended_at`).
    /// A tune's setting does not: the tune goes on in the same folder, and
    /// marks it when its last setting is done (`run::tune`).
    pub(crate) fn finish(&mut self) -> Result<()> {
        for index in self.tally.open_levels() {
            self.finish_level(index, true)?;
        }
        self.flush_requests()?;
        if self.tally.tune().is_none() {
            self.ended_at = Some(crate::time::iso8601(std::time::SystemTime::now()));
        }
        self.write_summary(true)
    }

    /// Flush `requests.jsonl` when a second has passed since the last flush:
    /// called on the faces' clock ticks, so slow requests still reach the
    /// disk within about a second of finishing.
    pub(crate) fn flush_if_due(&mut self) -> Result<()> {
        if self.last_flush.elapsed() >= JSONL_FLUSH_EVERY {
            self.flush_requests()?;
        }
        Ok(())
    }

    pub(crate) fn flush_requests(&mut self) -> Result<()> {
        self.last_flush = Instant::now();
        if let Some(probes) = &mut self.probes_jsonl {
            probes.flush().wrap_err_with(|| {
                format!("cannot write {}", self.dir.join("probes.jsonl").display())
            })?;
        }
        self.jsonl
            .flush()
            .wrap_err_with(|| format!("cannot write {}", self.dir.join("requests.jsonl").display()))
    }

    fn write_request_line(&mut self, r: &RequestRecord) -> Result<()> {
        let line = self.request_line(r);
        serde_json::to_writer(&mut self.jsonl, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.jsonl.write_all(b"\n"))
            .wrap_err_with(|| format!("cannot write {}", self.dir.join("requests.jsonl").display()))
    }

    /// A probe request's line, in `probes.jsonl` (never `requests.jsonl`,
    /// whose lines are the levels' own requests): the same keys, its id the
    /// probe's number (`tokbench-probe-...-<id>` on the wire).
    fn write_probe_line(&mut self, r: &RequestRecord) -> Result<()> {
        let path = self.dir.join("probes.jsonl");
        let line = self.request_line(r);
        let writer = match &mut self.probes_jsonl {
            Some(writer) => writer,
            None => {
                let file = super::atomic::with_descriptor_reserve(|| {
                    fs::OpenOptions::new()
                        .create(true)
                        .write(true)
                        .append(self.append)
                        .truncate(!self.append)
                        .open(&path)
                })
                .wrap_err_with(|| format!("cannot write {}", path.display()))?;
                self.probes_jsonl.insert(BufWriter::new(file))
            }
        };
        serde_json::to_writer(&mut *writer, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| writer.write_all(b"\n"))
            .wrap_err_with(|| format!("cannot write {}", path.display()))
    }

    fn request_line(&self, r: &RequestRecord) -> RequestLine {
        let ms = |d: Option<Duration>| d.map(|d| round3(d.as_secs_f64() * 1000.0));
        let concurrency = self.tally.open_concurrency(r.level);
        let error = match r.outcome {
            Outcome::Ok => None,
            Outcome::Failed(class) => Some(class.key()),
            Outcome::Cancelled => Some("cancelled".into()),
        };
        RequestLine {
            id: Some(r.id),
            level: Some((r.level + self.tally.level_offset()) as u64),
            concurrency,
            start_s: Some(round3(r.start.as_secs_f64())),
            end_s: Some(round3(r.end.as_secs_f64())),
            ttfb_ms: ms(r.ttfb),
            connect_ms: ms(r.connect),
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
            // Only a kernel send time is written: default files keep their keys.
            tx_clock: (r.tx_clock == TxClock::Kernel).then(|| r.tx_clock.as_str().to_string()),
            tx_shift_ms: if r.tx_clock == TxClock::Kernel {
                ms(r.tx_shift)
            } else {
                None
            },
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
        }
    }

    fn finish_level(&mut self, index: usize, partial: bool) -> Result<&FinishedLevel> {
        let reading = (self.meter)();
        let Some(ClosedLevel { mut level, records }) =
            self.tally.close_level(index, partial, reading)
        else {
            // Announced twice or never started: nothing new to save.
            return self
                .tally
                .finished()
                .iter()
                .find(|f| f.info.index == index)
                .ok_or_else(|| color_eyre::eyre::eyre!("level {index} was never started"));
        };
        if level.has_answers() {
            let name = self.next_level_file_name(&level);
            let path = self.dir.join(&name);
            let mut file = self.level_file(&level, records.records());
            let body = file.to_value();
            // Only the file carries the histograms and samples: they are
            // for merges, and would make every copy in memory grow with
            // the level.
            file.histograms = Some(histograms(&records)?);
            write_level_file(&path, &file, &records)
                .wrap_err_with(|| format!("cannot write {}", path.display()))?;
            level.file = Some(path);
            level.saved = Some(body);
        }
        self.tally.keep(level);
        self.flush_requests()?;
        self.write_summary(false)?;
        self.tally
            .finished()
            .last()
            .ok_or_else(|| color_eyre::eyre::eyre!("level {index} was not kept"))
    }

    fn next_level_file_name(&mut self, level: &FinishedLevel) -> String {
        let info = &level.info;
        let base = level_file_base(
            info.mode,
            self.run().ramp.is_some(),
            info.rate,
            info.concurrency,
            info.series,
            level.partial,
        );
        let uses = self.name_uses.entry(base.clone()).or_insert(0);
        *uses += 1;
        // A resumed run's folder already holds the first names.
        while self.dir.join(level_file_name(&base, *uses)).exists() {
            *uses += 1;
        }
        level_file_name(&base, *uses)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_the_contract() {
        // (streams, mode, rate, partial, nth of its base name): the name.
        let cases = [
            (16, Mode::Planned, None, false, 1, "sweep-c16.json"),
            (
                16,
                Mode::Manual,
                None,
                true,
                1,
                "sweep-c16-manual-partial.json",
            ),
            (4, Mode::Planned, None, false, 2, "sweep-c4-r2.json"),
            (4, Mode::Manual, None, false, 3, "sweep-c4-manual-r3.json"),
            (
                4096,
                Mode::Rate,
                Some(2.5),
                true,
                1,
                "sweep-rate2.5-partial.json",
            ),
            (64, Mode::Rate, Some(10.0), false, 2, "sweep-rate10-r2.json"),
            (64, Mode::Replay, None, false, 1, "sweep-replay.json"),
            (48, Mode::Search, None, false, 1, "sweep-c48.json"),
        ];
        for (streams, mode, rate, partial, nth, name) in cases {
            let base = level_file_base(mode, false, rate, streams, 0, partial);
            assert_eq!(level_file_name(&base, nth), name);
        }
        // A later series says so; series 0 is the first and says nothing.
        let base = level_file_base(Mode::Manual, false, Some(4.0), 8, 2, false);
        assert_eq!(level_file_name(&base, 1), "sweep-rate4-s3-manual.json");
        let base = level_file_base(Mode::Planned, false, None, 8, 1, true);
        assert_eq!(level_file_name(&base, 2), "sweep-c8-s2-partial-r2.json");
        // A merged level's series comes from a file: the largest saturates.
        let base = level_file_base(Mode::Planned, false, None, 8, usize::MAX, false);
        assert_eq!(base, format!("sweep-c8-s{}", usize::MAX));
        // A ramp is a replay of its own schedule, named for what it is.
        let base = level_file_base(Mode::Replay, true, None, 64, 0, false);
        assert_eq!(level_file_name(&base, 1), "sweep-ramp.json");
        assert_eq!(rate_label(f64::INFINITY), "inf");
        assert_eq!(rate_label(1.0 / 3.0), "0.333");
    }
}
