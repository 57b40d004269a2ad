//! What a run tells the tools around it while it runs: live Prometheus
//! figures (`--metrics-listen`, [`metrics`]) and a JSON line per event for
//! scripts (`--events`, [`events`]).
//!
//! Both faces (headless, live view) feed [`Exports`] exactly where they feed
//! the recorder, with the same driver events, so what a script or a
//! Prometheus sees does not depend on the face.

pub(crate) mod events;
pub mod metrics;

use std::collections::BTreeSet;

use color_eyre::eyre::Result;
use serde_json::{json, Map, Value};

use crate::fmt::round3;
use crate::load::driver::LevelPlan;
use crate::load::driver::{DriverEvent, DriverHandle};
use crate::report::recorder::{FinishedLevel, Recorder};

use events::{EventLog, EventsTo};
use metrics::MetricsExporter;

/// The run's exporters; each one absent unless its flag was given.
pub(crate) struct Exports {
    metrics: Option<MetricsExporter>,
    events: Option<EventLog>,
    /// Level indexes whose `level_finished` went out.
    finished: BTreeSet<usize>,
    /// A resumed run's levels go on from the kept ones (as in the files).
    level_offset: usize,
    /// `run_finished` went out: nothing follows it.
    done: bool,
}

/// What the exporters need of a prepared run. `run` builds it, so this
/// module imports nothing above it (docs/architecture.md).
pub(crate) struct ExportPlan<'a> {
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub events: Option<&'a EventsTo>,
    /// The display target: credentials already removed.
    pub target: &'a str,
    pub model: &'a str,
    /// The result folder's name, unique per run (folders never clash).
    pub run_id: String,
    /// A resumed run's levels go on from the kept ones.
    pub level_offset: usize,
    pub levels: &'a [LevelPlan],
    /// `--find-capacity`: levels are the search's, not the plan's.
    pub search: bool,
    pub warnings: &'a [String],
}

impl Exports {
    /// No exporter: what tests and `view` use.
    pub(crate) fn none() -> Exports {
        Exports {
            metrics: None,
            events: None,
            finished: BTreeSet::new(),
            level_offset: 0,
            done: false,
        }
    }

    /// Bind the metrics listener and create the events file: both fail here,
    /// in one line, before any load is sent.
    pub(crate) fn open(plan: &ExportPlan<'_>) -> Result<Exports> {
        let level_offset = plan.level_offset;
        let metrics = match plan.metrics_listen {
            Some(addr) => Some(MetricsExporter::start(
                addr,
                vec![
                    ("target".into(), plan.target.to_string()),
                    ("model".into(), plan.model.to_string()),
                    ("run_id".into(), plan.run_id.clone()),
                ],
                level_offset,
            )?),
            None => None,
        };
        let events = match plan.events {
            Some(to) => Some(EventLog::create(to)?),
            None => None,
        };
        Ok(Exports {
            metrics,
            events,
            level_offset,
            ..Exports::none()
        })
    }

    /// `--events -`: stdout carries the events, so the plain output goes to stderr.
    pub(crate) fn events_on_stdout(&self) -> bool {
        self.events
            .as_ref()
            .is_some_and(|e| *e.to() == EventsTo::Stdout)
    }

    pub(crate) fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(MetricsExporter::addr)
    }

    /// The run is about to send load: `run_started`, and warnings found
    /// while preparing it.
    pub(crate) fn run_started(
        &mut self,
        prepared: &ExportPlan<'_>,
        recorder: &Recorder,
    ) -> Result<()> {
        if let Some(metrics) = &self.metrics {
            // A planned sweep's levels are known: run order is plan order
            // unless a search or a hand steers it.
            if !prepared.search {
                metrics.expect_levels(0..prepared.levels.len());
            }
        }
        let Some(events) = &mut self.events else {
            return Ok(());
        };
        let plan: Vec<Value> = prepared
            .levels
            .iter()
            .map(|l| json!({"concurrency": l.concurrency, "num_prompts": l.num_prompts, "rate": l.rate}))
            .collect();
        events.emit(
            "run_started",
            fields(json!({
                "tokbench_version": env!("CARGO_PKG_VERSION"),
                "run_id": prepared.run_id.clone(),
                "result_dir": recorder.dir().display().to_string(),
                "metrics_listen": self.metrics.as_ref().map(|m| m.addr().to_string()),
                "run": recorder.run().to_json(),
                "plan": plan,
            })),
        )?;
        for warning in prepared.warnings {
            events.emit("warning", fields(json!({"message": warning})))?;
        }
        Ok(())
    }

    /// Read the queue gauges from this driver.
    pub(crate) fn attach(&self, driver: &DriverHandle) {
        if let Some(metrics) = &self.metrics {
            metrics.attach(driver.in_flight.clone(), driver.streaming.clone());
        }
    }

    /// One driver event, after the recorder took it; `finished_level`: the
    /// index of the level the recorder finished on it, if it did.
    pub(crate) fn on_event(
        &mut self,
        event: &DriverEvent,
        finished_level: Option<usize>,
        recorder: &Recorder,
    ) -> Result<()> {
        if let Some(metrics) = &self.metrics {
            metrics.on_event(event);
        }
        if self.events.is_none() {
            return Ok(());
        }
        match event {
            DriverEvent::LevelStarted(info) => {
                let f = fields(json!({
                    "level_index": info.index + self.level_offset,
                    "concurrency": info.concurrency,
                    "mode": info.mode.as_str(),
                    "num_prompts": info.num_prompts,
                    "rate": info.rate,
                    "plan_index": info.plan_index,
                    "series": info.series,
                    "started_at_s": round3(info.started_at.as_secs_f64()),
                }));
                self.emit("level_started", f)?;
            }
            DriverEvent::LevelFinished { .. } => {
                let Some(index) = finished_level.filter(|i| !self.finished.contains(i)) else {
                    return Ok(());
                };
                if let Some(level) = recorder
                    .finished()
                    .iter()
                    .rev()
                    .find(|l| l.info.index == index)
                {
                    self.level_finished(level)?;
                }
            }
            DriverEvent::WarmupFinished { ok, failed, .. } if *failed > 0 => {
                self.emit(
                    "warning",
                    fields(json!({"message": format!("{failed} of {} warmup requests failed", ok + failed)})),
                )?;
            }
            DriverEvent::ServerGone { since } => {
                self.emit(
                    "warning",
                    fields(json!({
                        "message": "the server stopped answering: every request fails to connect",
                        "since_s": round3(since.as_secs_f64()),
                    })),
                )?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The end: levels the recorder closed at its finish, the run's
    /// diagnoses, `error` when the run failed, and `run_finished`. Then the
    /// metrics wait for the scraper's last visit, unless a signal wants the
    /// process gone.
    pub(crate) async fn finish(
        &mut self,
        recorder: &Recorder,
        exit_code: i32,
        error: Option<&str>,
        signalled: bool,
    ) -> Result<()> {
        if self.events.is_some() && !self.done {
            self.done = true;
            let left: Vec<&FinishedLevel> = recorder
                .finished()
                .iter()
                .filter(|l| !self.finished.contains(&l.info.index))
                .collect();
            for level in left {
                self.level_finished(level)?;
            }
            // The run's diagnoses as summary.json has them: told at the end,
            // since a check that fires on the first level (single_level) may
            // not hold for the run.
            for diagnosis in recorder.tally().diagnoses() {
                let mut f = Map::new();
                if let Value::Object(d) = diagnosis.to_json() {
                    f.extend(d);
                }
                self.emit("diagnosis", f)?;
            }
            if let Some(error) = error {
                self.emit("error", fields(json!({"message": error})))?;
            }
            // Each `--threshold` as summary.json has it.
            for entry in recorder.thresholds() {
                let mut f = Map::new();
                if let Ok(Value::Object(t)) = serde_json::to_value(&entry) {
                    f.extend(t);
                }
                self.emit("threshold", f)?;
            }
            let decision = recorder.tally().decision();
            let saved = recorder
                .finished()
                .iter()
                .filter(|l| l.file.is_some())
                .count();
            self.emit(
                "run_finished",
                fields(json!({
                    "exit_code": exit_code,
                    "capacity": decision.capacity_json(),
                    "knee": decision.knee_json(),
                    "capacity_reason": decision.capacity_line(),
                    "levels_saved": saved,
                    "result_dir": recorder.dir().display().to_string(),
                })),
            )?;
        }
        if let (Some(metrics), false) = (&self.metrics, signalled) {
            metrics.wait_for_final_scrape().await;
        }
        Ok(())
    }

    /// An error that ends the run before [`Exports::finish`] can be reached
    /// (the face's own failure): `error`, then `run_finished` with exit 1.
    pub(crate) fn failed(&mut self, message: &str, exit_code: i32) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        // The run is already failing; an events file that cannot be written
        // either adds nothing to the error the user will see.
        let _ = self.emit("error", fields(json!({"message": message})));
        let _ = self.emit(
            "run_finished",
            fields(json!({"exit_code": exit_code, "capacity": null, "knee": null})),
        );
    }

    fn level_finished(&mut self, level: &FinishedLevel) -> Result<()> {
        self.finished.insert(level.info.index);
        let file = level
            .file
            .as_ref()
            .and_then(|f| f.file_name())
            .and_then(|n| n.to_str());
        let f = fields(json!({
            "level_index": level.info.index + self.level_offset,
            "concurrency": level.info.concurrency,
            "partial": level.partial,
            "file": file,
            // The level file's own object; null when the level had nothing to save.
            "level": level.saved,
        }));
        self.emit("level_finished", f)
    }

    fn emit(&mut self, kind: &str, fields: Map<String, Value>) -> Result<()> {
        match &mut self.events {
            Some(events) => events.emit(kind, fields),
            None => Ok(()),
        }
    }
}

fn fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::load::driver::{LevelInfo, Mode};
    use crate::probe::client::{meter, LagMonitor};
    use crate::record::RequestRecord;
    use crate::report::recorder::RunInfo;

    /// A level the driver never announced finished (the recorder closes it
    /// as partial at its finish) is still told, before `run_finished`, and
    /// `run_finished` is told once whatever follows.
    #[test]
    fn levels_the_recorder_closes_at_its_finish_are_told_before_the_end() {
        let dir = std::env::temp_dir().join(format!("tokbench-exports-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let events_path = dir.join("events.jsonl");
        let mut recorder = Recorder::create(&dir, RunInfo::example(), meter(LagMonitor::default()))
            .expect("recorder");
        let mut exports = Exports {
            events: Some(EventLog::create(&EventsTo::File(events_path.clone())).expect("log")),
            ..Exports::none()
        };
        let started = DriverEvent::LevelStarted(LevelInfo {
            num_prompts: Some(10),
            plan_index: Some(0),
            ..LevelInfo::new(0, 2, Mode::Planned, Duration::ZERO)
        });
        let mut record = RequestRecord::empty(1, 0);
        record.output_tokens = 4;
        record.ttft = Some(Duration::from_millis(5));
        record.e2el = Some(Duration::from_millis(20));
        record.end = Duration::from_millis(20);
        for event in [started, DriverEvent::Record(record)] {
            let finished = recorder
                .on_event(&event)
                .expect("event")
                .map(|l| l.info.index);
            exports
                .on_event(&event, finished, &recorder)
                .expect("export");
        }
        recorder.finish().expect("finish");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(exports.finish(&recorder, 130, None, true))
            .expect("exports finish");
        exports.failed("late", 1);

        let text = std::fs::read_to_string(&events_path).expect("events");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let kinds: Vec<&str> = lines.iter().filter_map(|e| e["event"].as_str()).collect();
        let at = |k: &str| kinds.iter().position(|x| *x == k);
        assert!(at("level_started") < at("level_finished"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
        assert_eq!(kinds.iter().filter(|k| **k == "run_finished").count(), 1);
        let finished = &lines[at("level_finished").expect("told")];
        assert_eq!(finished["partial"], true);
        assert_eq!(finished["file"], "sweep-c2-partial.json");
        let mut file: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("sweep-c2-partial.json")).expect("level file"),
        )
        .expect("json");
        // The event is the file without what only merges read.
        let merge_keys = file.as_object_mut().expect("object");
        assert!(merge_keys.remove("histograms").is_some());
        assert!(merge_keys.remove("samples").is_some());
        assert_eq!(finished["level"], file);
        assert_eq!(lines.last().map(|e| &e["exit_code"]), Some(&json!(130)));
        std::fs::remove_dir_all(&dir).ok();
    }
}
