//! `summary.json`, rewritten atomically after every level, with the
//! report pair (`report.md`, `chart.svg`) beside it, best effort until the
//! run's end.

// More of the recorder: the parent's items, private ones included.
use super::*;

impl Recorder {
    /// `summary.json`, and the reports beside it; `at_end`, the run's last
    /// write, says each report it still cannot write.
    pub(super) fn write_summary(&self, at_end: bool) -> Result<()> {
        let tally = &self.tally;
        let run = tally.run();
        let saved = tally.saved_levels();
        let decision = tally.decision();
        let cost = tally.cost(&decision);
        // Kept levels of a resumed run come back as they were read.
        let kept = tally.prior().into_iter().flat_map(|p| {
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
        let diagnoses: Vec<DiagnosisEntry> = tally
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
        let mut traffic = achieved.to_json(&run.profile);
        if let Value::Object(t) = &mut traffic {
            t.insert("range_ratio".into(), json!(run.traffic.range_ratio));
        }
        let mut file = SummaryFile {
            schema_version: Some(SCHEMA_VERSION),
            tokbench_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            run: schema::RunSection {
                ended_at: self.ended_at.clone(),
                ..run.to_section()
            },
            traffic,
            dataset: run
                .traffic
                .dataset
                .as_ref()
                .map_or(Value::Null, |d| d.to_json()),
            levels,
            knee: schema::typed(decision.knee_json()),
            capacity: schema::typed(decision.capacity_json()),
            series: tally.series_entries(),
            capacity_reason: Some(decision.capacity_line()),
            cost: cost.as_ref().and_then(|c| schema::typed(c.to_json())),
            diagnoses,
            rounds: spreads,
            warmup: tally.warmup().cloned().unwrap_or(Value::Null),
            search: tally.search().map(|s| SearchState {
                passing: s.passing,
                failing: s.failing,
                next: s.next,
                done: s.next.is_none(),
            }),
            tune: tally.tune().cloned(),
            fit: tally.fit_section().cloned(),
            resumed: tally.prior().filter(|p| !p.new_series).map(|p| Resumed {
                first_started_at: p.run.get("started_at").cloned().unwrap_or(Value::Null),
                levels_kept: p.levels.len(),
            }),
            target_changes: tally
                .target_changes()
                .iter()
                .map(|(at, c)| TargetChange {
                    at_s: round3(*at),
                    concurrency: *c,
                })
                .collect(),
            thresholds: Vec::new(),
            other: Map::new(),
        };
        // Thresholds are judged once the run is over: mid-run, a level
        // still to come is not a failure.
        if at_end && !run.thresholds.is_empty() {
            file.thresholds = run.thresholds.judge(&file, tally.tune().is_some());
            self.thresholds.replace(file.thresholds.clone());
        }
        let summary = file.to_value();
        crate::report::formats::write_summary_json(&self.dir, &summary)?;
        // The human-readable pair rides with every summary: report.md to
        // paste, chart.svg to look at. Drawn from the summary just saved,
        // they are best effort while the run goes on: a failed rewrite is
        // said once and done again at the end, never the run's end.
        let failed = crate::report::formats::try_run_reports(&self.dir, &summary);
        if at_end {
            for (path, why) in &failed {
                let format = path.extension().and_then(|e| e.to_str()).unwrap_or("md");
                crate::say!(
                    "tokbench: could not write {} ({why}); the results are saved: `tokbench report {} --format {format} -o FILE` draws it",
                    path.display(),
                    self.dir.display()
                );
            }
        } else if let Some((path, why)) = failed.first() {
            if !self.reports_said.replace(true) {
                crate::say!(
                    "tokbench: could not rewrite {} ({why}); it will be written at the end",
                    path.display()
                );
            }
        }
        Ok(())
    }
}
