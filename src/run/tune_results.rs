//! What a tune's result folder says of each setting: its capacity, knee
//! and peak from its series, the rounds' spread at its capacity, and which
//! setting to keep over those measured so far (`crate::tune::recommend`).

use std::path::Path;

use serde_json::Map;

use crate::report::saved::SavedRun;
use crate::report::schema::{TuneRecommendation, TuneSection};
use crate::tune::auto::{AutoGrid, Tried};
use crate::tune::recommend::{recommend, recommend_past_slo, Outcome, SettingResult};

/// Each setting's capacity, knee and peak from the folder, and which one
/// to keep over those measured so far.
pub(super) fn judge(dir: &Path, section: &mut TuneSection) {
    fill_results(dir, section);
    let results = setting_results(dir, section);
    let saved = SavedRun::load(dir).ok();
    let slo = saved
        .as_ref()
        .and_then(|r| r.slo_text())
        .unwrap_or_else(|| "the SLO".into());
    let reading_speed = saved.as_ref().and_then(|r| r.slo.min_stream_tok_s);
    // The user's own SLO failed at every level of every setting: still an
    // answer, by the capacities the knees give, said as such.
    let given = saved.as_ref().is_none_or(|r| r.slo.given != Some(false));
    let recommendation = recommend(&results, &slo, reading_speed).or_else(|| {
        let by_knee = knee_results(saved.as_ref()?, section, &results);
        given.then(|| recommend_past_slo(&by_knee, &slo)).flatten()
    });
    section.recommendation = recommendation.map(|r| TuneRecommendation {
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

/// The finished settings that met no level of the SLO, each with the
/// capacity its knee gives (the level before the knee; the top level where
/// there was none) and the tok/s there, for [`recommend_past_slo`].
fn knee_results(
    run: &SavedRun,
    section: &TuneSection,
    results: &[SettingResult],
) -> Vec<SettingResult> {
    section
        .settings
        .iter()
        .zip(results)
        .filter(|(_, r)| r.outcome == Outcome::Finished && r.capacity.is_none())
        .filter_map(|(s, r)| {
            let series = s.series?;
            let whole = || {
                run.levels
                    .iter()
                    .filter(move |l| l.series as u64 == series && !l.partial && l.is_sweep_point())
            };
            let at = s
                .knee
                .as_ref()
                .and_then(|k| k.from_concurrency)
                .or_else(|| whole().filter_map(|l| l.concurrency).max())?;
            let tok_s = whole()
                .filter(|l| l.concurrency == Some(at))
                .filter_map(|l| l.output_throughput)
                .reduce(f64::max);
            Some(SettingResult {
                capacity: Some(at),
                by_knee: true,
                tok_s_at_capacity: tok_s,
                p99_ttft_at_capacity_ms: None,
                ..r.clone()
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
                by_knee: s.capacity.as_ref().is_some_and(|c| c.by_knee()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::decide::{decide_judged, CapacitySlo, Figures, LevelPoint};
    use crate::record::Mode;
    use crate::report::schema::{self, Capacity};

    /// One setting of a tune with no SLO given, judged from its levels as
    /// the sweep judges them and read back from its saved capacity:
    /// `(streams, total tok/s, p99 TTFT ms)`, every answer decoding at 12
    /// tok/s, under the default 20.
    fn setting(np: u32, levels: &[(u32, f64, f64)]) -> SettingResult {
        let points: Vec<LevelPoint> = levels
            .iter()
            .map(|&(c, total, p99)| LevelPoint {
                concurrency: c,
                kind: Mode::Planned,
                partial: false,
                figures: Figures {
                    output_throughput: total,
                    per_stream_tok_s: total / f64::from(c),
                    stream_decode_tok_s: Some(12.0),
                    p50_ttft_ms: Some(p99),
                    p99_ttft_ms: Some(p99),
                    ..Figures::default()
                },
            })
            .collect();
        let decision = decide_judged(&points, &CapacitySlo::default(), false);
        let saved: Option<Capacity> = schema::typed(decision.capacity_json());
        let number = |n: &Option<serde_json::Number>| n.as_ref().and_then(|n| n.as_f64());
        SettingResult {
            label: format!("np={np}"),
            values: vec![("np".into(), np.to_string())],
            outcome: Outcome::Finished,
            capacity: saved.as_ref().and_then(|c| c.concurrency),
            by_knee: saved.as_ref().is_some_and(Capacity::by_knee),
            tok_s_at_capacity: saved.as_ref().and_then(|c| number(&c.output_throughput)),
            p99_ttft_at_capacity_ms: saved.as_ref().and_then(|c| number(&c.p99_ttft_ms)),
            peak_tok_s: levels.iter().map(|l| l.1).reduce(f64::max),
            spread: None,
        }
    }

    /// An Ollama box whose answers decode at 12 tok/s, no SLO given:
    /// - np=1 serves 12 tok/s at 1, 2 and 4 streams while p99 TTFT grows 3x
    ///   a level: the knee is 1 -> 2 (+0%, 3.0x), capacity 1 stream;
    /// - np=2 serves 12, 24, 24: 1 -> 2 doubles, 2 -> 4 adds 0% while p99
    ///   TTFT grows 1,100 / 110 = 10x: the knee is 2 -> 4, capacity 2
    ///   streams at 24 tok/s.
    ///
    /// No level reaches 20 tok/s per stream, so both are judged by the
    /// knee, and np=2 is kept.
    #[test]
    fn without_an_slo_the_knee_capacities_pick_the_setting() {
        let np1 = setting(1, &[(1, 12.0, 100.0), (2, 12.0, 300.0), (4, 12.0, 900.0)]);
        let np2 = setting(2, &[(1, 12.0, 100.0), (2, 24.0, 110.0), (4, 24.0, 1100.0)]);
        assert_eq!((np1.capacity, np1.by_knee), (Some(1), true));
        assert_eq!((np2.capacity, np2.by_knee), (Some(2), true));
        let rec = recommend(
            &[np1, np2],
            "decode >= 20 tok/s per stream, errors < 1%",
            Some(20.0),
        )
        .expect("a setting to keep");
        assert_eq!(rec.label, "np=2");
        assert_eq!(
            rec.reason,
            "keep np=2: capacity 2 streams, 24 tok/s (capacity by the knee: no setting reaches \
             20 tok/s per stream); np=1 holds 1 stream; np=2 is the largest tried and still \
             gains: try 4; this rests on one round (--rounds 3 measures the noise)"
        );
    }

    /// The higher peak is not the higher capacity where the knees differ:
    /// - np=8 serves 12, 24, 26, 40 tok/s at 1, 2, 4, 8 streams; 2 -> 4
    ///   adds 26 / 24 - 1 = 8.3% while p99 TTFT grows 330 / 110 = 3.0x:
    ///   the knee is 2 -> 4 (the first such step), capacity 2, peak 40;
    /// - np=4 serves 12, 24, 36, 37: 2 -> 4 adds 50%, 4 -> 8 adds 2.8%
    ///   while p99 TTFT grows 390 / 130 = 3.0x: capacity 4, peak 37.
    ///
    /// np=4 is kept for its 4 streams, though np=8 peaks higher.
    #[test]
    fn a_higher_peak_with_a_lower_knee_is_not_kept() {
        let np4 = setting(
            4,
            &[
                (1, 12.0, 100.0),
                (2, 24.0, 110.0),
                (4, 36.0, 130.0),
                (8, 37.0, 390.0),
            ],
        );
        let np8 = setting(
            8,
            &[
                (1, 12.0, 100.0),
                (2, 24.0, 110.0),
                (4, 26.0, 330.0),
                (8, 40.0, 400.0),
            ],
        );
        assert_eq!((np4.capacity, np4.peak_tok_s), (Some(4), Some(37.0)));
        assert_eq!((np8.capacity, np8.peak_tok_s), (Some(2), Some(40.0)));
        let rec = recommend(
            &[np4, np8],
            "decode >= 20 tok/s per stream, errors < 1%",
            Some(20.0),
        )
        .expect("a setting to keep");
        assert_eq!(rec.label, "np=4");
        assert_eq!(
            rec.reason,
            "keep np=4: capacity 4 streams, 36 tok/s (capacity by the knee: no setting reaches \
             20 tok/s per stream); np=8 holds 2 streams; this rests on one round (--rounds 3 \
             measures the noise)"
        );
    }

    /// A setting within the SLO is kept over one the knee judged alone,
    /// whatever their streams: np=1 reaches 20 tok/s at 1 stream, np=4
    /// never does but holds 4 by its knee.
    #[test]
    fn a_capacity_within_the_slo_beats_a_knee_capacity() {
        let within = SettingResult {
            by_knee: false,
            capacity: Some(1),
            tok_s_at_capacity: Some(25.0),
            ..setting(1, &[(1, 25.0, 100.0)])
        };
        let knee = setting(
            4,
            &[
                (1, 12.0, 100.0),
                (2, 24.0, 110.0),
                (4, 36.0, 130.0),
                (8, 37.0, 390.0),
            ],
        );
        let rec = recommend(
            &[within, knee],
            "decode >= 20 tok/s per stream, errors < 1%",
            Some(20.0),
        )
        .expect("a setting to keep");
        assert_eq!(rec.label, "np=1");
        assert_eq!(
            rec.reason,
            "keep np=1: capacity 1 stream within decode >= 20 tok/s per stream, errors < 1% \
             (25 tok/s); np=4 reaches 20 tok/s per stream at no level (by the knee alone it \
             holds 4 streams); this rests on one round (--rounds 3 measures the noise)"
        );
    }
}
