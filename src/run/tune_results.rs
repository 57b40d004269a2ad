//! What a tune's result folder says of each setting: its capacity, knee
//! and peak from its series, the rounds' spread at its capacity, and which
//! setting to keep over those measured so far (`crate::tune::recommend`).

use std::path::Path;

use serde_json::Map;

use crate::report::saved::SavedRun;
use crate::report::schema::{TuneRecommendation, TuneSection};
use crate::tune::auto::{AutoGrid, Tried};
use crate::tune::recommend::{recommend, Outcome, SettingResult};

/// Each setting's capacity, knee and peak from the folder, and which one
/// to keep over those measured so far.
pub(super) fn judge(dir: &Path, section: &mut TuneSection) {
    fill_results(dir, section);
    let results = setting_results(dir, section);
    let slo = SavedRun::load(dir)
        .ok()
        .and_then(|r| r.slo_text())
        .unwrap_or_else(|| "the SLO".into());
    section.recommendation = recommend(&results, &slo).map(|r| TuneRecommendation {
        label: Some(r.label),
        reason: Some(r.reason),
        tie_with: r.tie_with,
        other: Map::new(),
    });
}

/// Each setting's capacity, knee and peak, from its series in the folder.
fn fill_results(dir: &Path, section: &mut TuneSection) {
    let Ok(run) = SavedRun::load(dir) else { return };
    let results = run.series_results();
    for s in &mut section.settings {
        let Some(index) = s.series.and_then(|i| usize::try_from(i).ok()) else {
            continue;
        };
        if s.status.as_deref() != Some("finished") && s.status.as_deref() != Some("partial") {
            continue;
        }
        if let Some(entry) = run.series.iter().find(|e| e.index == Some(index as u64)) {
            s.capacity = entry.capacity.clone();
            s.knee = entry.knee.clone();
        }
        s.peak = results
            .iter()
            .find(|r| r.index == index)
            .and_then(|r| r.peak_tok_s)
            .and_then(|p| serde_json::Number::from_f64(crate::fmt::round3(p)));
    }
}

/// The settings of a searched knob as the search judges them: each one's
/// value, its result, and what the server's own account said at its knee
/// (its highest level when it had none): the most requests it ran at
/// once (its `running` gauge, else llama.cpp's busy slots, else the
/// streams the client saw streaming) and its KV cache's fullest.
pub(super) fn tried(dir: &Path, section: &TuneSection, grid: &AutoGrid) -> Vec<Tried> {
    let run = SavedRun::load(dir).ok();
    let results = setting_results(dir, section);
    section
        .settings
        .iter()
        .zip(results)
        .filter_map(|(s, result)| {
            let value = s.values.get(&grid.name)?.as_str()?.parse::<u32>().ok()?;
            let at = s.knee.as_ref().and_then(|k| k.to_concurrency).or_else(|| {
                let series = s.series?;
                let levels = run.as_ref()?.levels.iter();
                levels
                    .filter(|l| l.series as u64 == series && !l.partial)
                    .filter_map(|l| l.concurrency)
                    .max()
            });
            let level = match (&run, s.series, at) {
                (Some(run), Some(series), Some(c)) => run
                    .levels
                    .iter()
                    .find(|l| l.series as u64 == series && !l.partial && l.concurrency == Some(c)),
                _ => None,
            };
            let max_of = |path: &[&str]| {
                let mut v = &serde_json::Value::Object(level?.raw.clone());
                for key in path {
                    v = v.get(key)?;
                }
                v.as_f64()
            };
            let slots_used = max_of(&["server", "running", "max"])
                .or_else(|| max_of(&["server", "slots_busy", "max"]))
                .or_else(|| max_of(&["streaming", "max"]));
            Some(Tried {
                value,
                result,
                slots_used,
                kv_usage: max_of(&["server", "kv_cache_usage", "max"]),
            })
        })
        .collect()
}

/// The settings as the recommendation judges them; the rounds' spread of
/// the throughput at each one's capacity from its levels there.
fn setting_results(dir: &Path, section: &TuneSection) -> Vec<SettingResult> {
    let run = SavedRun::load(dir).ok();
    section
        .settings
        .iter()
        .map(|s| {
            let capacity = s.capacity.as_ref().and_then(|c| c.concurrency);
            let spread = match (&run, s.series, capacity) {
                (Some(run), Some(series), Some(c)) => {
                    let at: Vec<f64> = run
                        .levels
                        .iter()
                        .filter(|l| {
                            l.series as u64 == series
                                && !l.partial
                                && l.is_sweep_point()
                                && l.concurrency == Some(c)
                        })
                        .filter_map(|l| l.output_throughput)
                        .collect();
                    crate::tune::recommend::spread_of(&at)
                }
                _ => None,
            };
            let number = |n: &Option<serde_json::Number>| n.as_ref().and_then(|n| n.as_f64());
            SettingResult {
                label: s.label.clone().unwrap_or_default(),
                values: s
                    .values
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), str::to_string),
                        )
                    })
                    .collect(),
                outcome: match s.status.as_deref() {
                    Some("finished") => Outcome::Finished,
                    Some("partial") => Outcome::Partial(s.reason.clone().unwrap_or_default()),
                    _ => Outcome::Failed(s.reason.clone().unwrap_or_default()),
                },
                capacity,
                tok_s_at_capacity: s
                    .capacity
                    .as_ref()
                    .and_then(|c| number(&c.output_throughput)),
                p99_ttft_at_capacity_ms: s.capacity.as_ref().and_then(|c| number(&c.p99_ttft_ms)),
                peak_tok_s: number(&s.peak),
                spread,
            }
        })
        .collect()
}
