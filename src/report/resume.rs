//! `tokbench sweep --resume DIR`: continue a run from its last finished
//! level. The finished levels are read back from `summary.json` and kept as
//! they were saved; the plan runs on from the first level they do not
//! cover; a run of another target or shape is refused, since its levels
//! would not belong on one chart.

use std::path::Path;

use color_eyre::eyre::{bail, eyre, Result, WrapErr};
use serde_json::Value;

use super::saved::read_summary;
use super::schema::{LevelFile, SeriesEntry};
use crate::analysis::decide::LevelPoint;
use crate::load::driver::LevelPlan;

/// What a resumed run keeps of the one before.
#[derive(Clone, Debug, Default)]
pub struct PriorRun {
    /// Complete level objects, in run order, as summary.json held them.
    pub levels: Vec<Value>,
    /// The same levels as decision points (knee and capacity).
    pub points: Vec<LevelPoint>,
    /// The series of each point, in the same order.
    pub point_series: Vec<usize>,
    /// What the server's gauges showed over each point, in the same order
    /// (the level's saved `server` object: `{"running": {"min", "mean",
    /// "max"}, ...}`), so a kept level names the knee's cause as it did
    /// when it ran.
    pub point_servers: Vec<Value>,
    /// The series the run was in when it stopped; it goes on there.
    pub last_series: usize,
    /// Labels of the series so far.
    pub series_labels: Vec<(usize, String)>,
    /// The first level index free for the new levels.
    pub next_level_index: usize,
    /// The saved `run` object.
    pub run: Value,
    /// Continued by `tune` in a series of its own, not resumed.
    pub new_series: bool,
}

impl PriorRun {
    pub(crate) fn load(dir: &Path) -> Result<PriorRun> {
        // Always the folder's own summary: the new levels are written beside it.
        let (_, text) = read_summary(&dir.join("summary.json"))
            .wrap_err_with(|| format!("--resume {}", dir.display()))?;
        let summary: Value = serde_json::from_str(&text).map_err(|e| {
            eyre!(
                "--resume {}: summary.json is not valid JSON ({e})",
                dir.display()
            )
        })?;
        PriorRun::from_summary(&summary).ok_or_else(|| {
            eyre!(
                "--resume {}: summary.json has no run or levels",
                dir.display()
            )
        })
    }

    pub(crate) fn from_summary(summary: &Value) -> Option<PriorRun> {
        let run = summary.get("run")?.clone();
        let all = summary.get("levels")?.as_array()?;
        let next_level_index = all
            .iter()
            .filter_map(|l| typed(l).level_index)
            .max()
            .map_or(0, |i| i as usize + 1);
        // A cut-short level is measured again; its file stays on disk. A
        // level that does not say (older files) is not kept either.
        let levels: Vec<Value> = all
            .iter()
            .filter(|l| l.get("partial").is_some() && !typed(l).partial)
            .cloned()
            .collect();
        let series_of = |l: &Value| typed(l).series.unwrap_or(0) as usize;
        let mut points = Vec::new();
        let mut point_series = Vec::new();
        let mut point_servers = Vec::new();
        for l in &levels {
            if let Some(point) = point_of(l) {
                points.push(point);
                point_series.push(series_of(l));
                point_servers.push(l.get("server").cloned().unwrap_or(Value::Null));
            }
        }
        let last_series = levels.iter().map(series_of).max().unwrap_or(0);
        let series_labels = SeriesEntry::all_of(summary)
            .into_iter()
            .filter_map(|s| Some((usize::try_from(s.index?).ok()?, s.label?)))
            .collect();
        Some(PriorRun {
            levels,
            points,
            point_series,
            point_servers,
            last_series,
            series_labels,
            next_level_index,
            run,
            new_series: false,
        })
    }

    /// Go on in the folder in a new series named `label` (a tune's next
    /// setting): every step of the plan runs again, against its server.
    pub(crate) fn into_new_series(mut self, label: String) -> PriorRun {
        let next = self
            .point_series
            .iter()
            .copied()
            .chain(self.series_labels.iter().map(|(i, _)| *i))
            .max()
            .map_or(0, |i| i.saturating_add(1));
        self.last_series = next;
        self.series_labels.push((next, label));
        self.new_series = true;
        self
    }

    /// The plan's steps that the kept levels do not already cover, in order.
    /// Each kept level covers one step of its concurrency (or rate) and kind.
    pub(crate) fn remaining(&self, plan: &[LevelPlan]) -> Vec<LevelPlan> {
        // Only the series it stopped in: an earlier series ran its plan
        // against another server configuration.
        let mut unused: Vec<(String, Option<u64>, Option<f64>)> = self
            .levels
            .iter()
            .map(typed)
            .filter(|l| l.series.unwrap_or(0) as usize == self.last_series)
            .map(|l| {
                (
                    l.mode.clone().unwrap_or_default(),
                    l.max_concurrency.map(u64::from),
                    l.request_rate.as_ref().and_then(Value::as_f64),
                )
            })
            .collect();
        plan.iter()
            .filter(|step| {
                let found = unused.iter().position(|(mode, c, rate)| match step.rate {
                    Some(r) => mode == "rate" && rate.is_some_and(|x| (x - r).abs() < 1e-9),
                    None => mode == "planned" && *c == Some(u64::from(step.concurrency)),
                });
                match found {
                    Some(i) => {
                        unused.remove(i);
                        false
                    }
                    None => true,
                }
            })
            .copied()
            .collect()
    }

    /// Refuse to continue a run of another target or traffic shape.
    pub(crate) fn check_same(&self, now: &Value) -> Result<()> {
        let keys = [
            "target",
            "model",
            "backend",
            "profile",
            "input_len",
            "output_len",
            "prefix_len",
            "ignore_eos",
            "kind",
        ];
        let differ: Vec<String> = keys
            .iter()
            .filter_map(|k| {
                let (a, b) = (self.run.get(*k), now.get(*k));
                // A key the older file lacks is not a difference.
                (a.is_some() && a != b).then(|| {
                    format!(
                        "{k} {} now {}",
                        show(a.unwrap_or(&Value::Null)),
                        show(b.unwrap_or(&Value::Null))
                    )
                })
            })
            .collect();
        if !differ.is_empty() {
            bail!(
                "--resume: the saved run was different ({}): give the flags of the first run, or start a new one",
                differ.join("; ")
            );
        }
        Ok(())
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A saved level object, typed; a level whose keys have unexpected types
/// reads as one that says nothing.
fn typed(level: &Value) -> LevelFile {
    serde_json::from_value(level.clone()).unwrap_or_default()
}

/// A saved level object as a decision point.
fn point_of(level: &Value) -> Option<LevelPoint> {
    typed(level).point()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn level(index: u64, c: u64, partial: bool) -> Value {
        json!({"level_index": index, "max_concurrency": c, "mode": "planned", "partial": partial,
               "output_throughput": 100.0 * c as f64, "per_stream_tok_s": 100.0,
               "median_ttft_ms": 10.0, "p99_ttft_ms": 20.0, "completed": 10, "failed": 0})
    }

    /// A level that never said its throughput is no point at all (not a
    /// zero one); with it, its other figures come from the file.
    #[test]
    fn a_saved_level_without_throughput_is_no_point() {
        let mut l = level(0, 4, false);
        assert_eq!(
            point_of(&l).map(|p| (p.concurrency, p.figures.output_throughput)),
            Some((4, 400.0))
        );
        assert_eq!(
            point_of(&l).map(|p| p.figures.p99_ttft_ms),
            Some(Some(20.0))
        );
        l.as_object_mut().unwrap().remove("output_throughput");
        assert!(point_of(&l).is_none());
    }

    fn summary() -> Value {
        json!({"run": {"target": "http://h:1", "model": "m", "input_len": 128, "output_len": 128},
               "levels": [level(0, 1, false), level(1, 1, false), level(2, 4, false), level(3, 16, true)]})
    }

    #[test]
    fn keeps_complete_levels_and_plans_the_rest() {
        let prior = PriorRun::from_summary(&summary()).expect("prior");
        assert_eq!(prior.levels.len(), 3, "the partial level is measured again");
        assert_eq!(prior.next_level_index, 4);
        assert_eq!(prior.points.len(), 3);
        assert_eq!(prior.points[2].figures.output_throughput, 400.0);
        // Plan 1,1,4,4,16,16 (two rounds): 1,1,4 done -> 4,16,16 left.
        let plan: Vec<LevelPlan> = [1, 1, 4, 4, 16, 16]
            .iter()
            .map(|&c| LevelPlan::closed(c, 10))
            .collect();
        let left: Vec<u32> = prior
            .remaining(&plan)
            .iter()
            .map(|l| l.concurrency)
            .collect();
        assert_eq!(left, vec![4, 16, 16]);
    }

    /// A run of two series resumes in the second: only its levels count
    /// against the plan, and the labels come back.
    #[test]
    fn resumes_in_the_series_it_stopped_in() {
        let mut second = level(2, 1, false);
        second["series"] = json!(1);
        let summary = json!({"run": {"target": "http://h:1"},
            "levels": [level(0, 1, false), level(1, 4, false), second],
            "series": [{"index": 0, "label": "series 1"}, {"index": 1, "label": "slots 2 → 4"}]});
        let prior = PriorRun::from_summary(&summary).expect("prior");
        assert_eq!(prior.last_series, 1);
        assert_eq!(prior.point_series, vec![0, 0, 1]);
        assert_eq!(prior.series_labels[1], (1, "slots 2 → 4".to_string()));
        let plan: Vec<LevelPlan> = [1, 4].iter().map(|&c| LevelPlan::closed(c, 10)).collect();
        let left: Vec<u32> = prior
            .remaining(&plan)
            .iter()
            .map(|l| l.concurrency)
            .collect();
        assert_eq!(left, vec![4], "series 1's c=4 does not cover series 2's");
    }

    #[test]
    fn refuses_another_target_or_shape() {
        let prior = PriorRun::from_summary(&summary()).expect("prior");
        let same = json!({"target": "http://h:1", "model": "m", "input_len": 128, "output_len": 128, "kind": "sweep"});
        assert!(
            prior.check_same(&same).is_ok(),
            "a key the old file lacks is no difference"
        );
        let other =
            json!({"target": "http://h:2", "model": "m", "input_len": 128, "output_len": 256});
        let err = prior.check_same(&other).expect_err("differs").to_string();
        assert_eq!(
            err,
            "--resume: the saved run was different (target http://h:1 now http://h:2; output_len 128 now 256): \
             give the flags of the first run, or start a new one"
        );
    }
}
