//! Which setting to keep, and by how much: a pure judgement over each
//! setting's series, worked out the same for every engine.

use crate::fmt::threshold;

/// How a setting's series ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    Finished,
    /// Cut short (its server died, `n`, a stop): never recommended.
    Partial(String),
    /// Never ran (the server did not start or was never ready).
    Failed(String),
}

/// What one setting measured, in grid order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SettingResult {
    pub label: String,
    pub values: Vec<(String, String)>,
    pub outcome: Outcome,
    /// Streams at the SLO (the series' capacity).
    pub capacity: Option<u32>,
    /// The capacity is the knee's alone: no SLO was given and no level of
    /// the setting reached the default reading speed (`capacity.rule`
    /// `knee_fallback`).
    pub by_knee: bool,
    pub tok_s_at_capacity: Option<f64>,
    pub p99_ttft_at_capacity_ms: Option<f64>,
    pub peak_tok_s: Option<f64>,
    /// Relative spread of the throughput at capacity over the rounds
    /// (half the range over the mean); `None` with one round.
    pub spread: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Recommendation {
    pub label: String,
    pub reason: String,
    /// Settings within noise of the one kept.
    pub tie_with: Vec<String>,
}

/// The setting to keep: the most streams within the SLO, then the most
/// output tok/s there. A rival whose throughput at the same capacity is
/// within the rounds' spread is a tie, and the tie keeps the smaller
/// (earlier in the grid). `slo` is the SLO in words, `reading_speed` its
/// decode term (tok/s per stream).
///
/// A capacity the knee judged alone ([`SettingResult::by_knee`]) counts
/// only where no setting has one within the SLO: a setting that reaches
/// the reading speed serves its users as asked, one that does not never
/// does, whatever its streams. Then the settings are ranked the same way
/// by their knee capacities, and the sentence says so.
pub(crate) fn recommend(
    results: &[SettingResult],
    slo: &str,
    reading_speed: Option<f64>,
) -> Option<Recommendation> {
    let speed = reading_speed.map_or_else(
        || "the reading speed".into(),
        |v| format!("{} tok/s per stream", threshold(v)),
    );
    recommend_with(
        results,
        slo,
        (
            &format!("no setting reaches {speed}"),
            &format!("reaches {speed} at no level"),
        ),
    )
}

/// Where the user's own SLO failed at every level of every setting:
/// the settings ranked by the capacities their knees give
/// ([`SettingResult::by_knee`] on each), then by tok/s there, the sentence
/// saying that no setting meets the SLO.
pub(crate) fn recommend_past_slo(results: &[SettingResult], slo: &str) -> Option<Recommendation> {
    recommend_with(
        results,
        slo,
        (
            &format!("no setting meets your SLO, {slo}"),
            "meets your SLO at no level",
        ),
    )
}

/// [`recommend`], a ranking by the knee's capacities said with `knee_why`,
/// and a setting judged by its knee beside one kept within the SLO with
/// `misses`.
fn recommend_with(
    results: &[SettingResult],
    slo: &str,
    (knee_why, misses): (&str, &str),
) -> Option<Recommendation> {
    let finished = || {
        results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.outcome == Outcome::Finished && r.capacity.is_some())
    };
    let by_knee = finished().all(|(_, r)| r.by_knee);
    let eligible: Vec<(usize, &SettingResult)> =
        finished().filter(|(_, r)| r.by_knee == by_knee).collect();
    let score = |r: &SettingResult| (r.capacity.unwrap_or(0), r.tok_s_at_capacity.unwrap_or(0.0));
    let &(best_at, best) = eligible.iter().max_by(|a, b| {
        let (ca, ta) = score(a.1);
        let (cb, tb) = score(b.1);
        // Equal scores keep the earlier (smaller) setting.
        ca.cmp(&cb).then(ta.total_cmp(&tb)).then(b.0.cmp(&a.0))
    })?;
    let rounds_known = eligible.iter().all(|(_, r)| r.spread.is_some());
    let noise_of = |a: &SettingResult, b: &SettingResult| match (a.spread, b.spread) {
        (Some(x), Some(y)) => Some(x.max(y)),
        _ => None,
    };
    let within_noise = |r: &SettingResult| {
        let (Some(noise), Some(tb), Some(tr)) = (
            noise_of(best, r),
            best.tok_s_at_capacity,
            r.tok_s_at_capacity,
        ) else {
            return false;
        };
        r.capacity == best.capacity && tb > 0.0 && (tb - tr).abs() / tb <= noise
    };
    let mut ties: Vec<(usize, &SettingResult)> = eligible
        .iter()
        .copied()
        .filter(|(i, r)| *i != best_at && within_noise(r))
        .collect();
    // A tie keeps the smaller: the earliest of the tied in grid order.
    let mut kept_at = best_at;
    if let Some(&(first, _)) = ties.iter().min_by_key(|(i, _)| *i) {
        if first < best_at {
            kept_at = first;
        }
    }
    let kept = &results[kept_at];
    if kept_at != best_at {
        ties.retain(|(i, _)| *i != kept_at);
        ties.push((best_at, best));
        ties.sort_by_key(|(i, _)| *i);
    }
    let capacity = kept.capacity.unwrap_or(0);
    let mut reason = if by_knee {
        format!(
            "keep {}: capacity {}{} (capacity by the knee: {knee_why})",
            kept.label,
            streams(capacity),
            kept.tok_s_at_capacity
                .map_or_else(String::new, |t| format!(", {} tok/s", tok(t)))
        )
    } else {
        format!(
            "keep {}: capacity {} within {slo}{}",
            kept.label,
            streams(capacity),
            kept.tok_s_at_capacity
                .map_or_else(String::new, |t| format!(" ({} tok/s)", tok(t)))
        )
    };
    let mut others: Vec<String> = Vec::new();
    if !ties.is_empty() {
        let noise = ties
            .iter()
            .filter_map(|(_, r)| noise_of(kept, r))
            .fold(0.0_f64, f64::max);
        let names: Vec<&str> = std::iter::once(kept.label.as_str())
            .chain(ties.iter().map(|(_, r)| r.label.as_str()))
            .collect();
        others.push(format!(
            "{} are within noise (±{}%): keep the smaller",
            and_list(&names),
            spread_percent(noise)
        ));
    }
    for (i, r) in results.iter().enumerate() {
        if i == kept_at || ties.iter().any(|(j, _)| *j == i) {
            continue;
        }
        others.push(match &r.outcome {
            Outcome::Partial(why) => {
                format!("{} did not finish ({why}), so it is not judged", r.label)
            }
            Outcome::Failed(why) => format!("{} did not run ({why})", r.label),
            // A knee capacity beside a kept one within the SLO: never
            // compared by streams (see above).
            Outcome::Finished if r.by_knee && !by_knee => format!(
                "{} {misses} (by the knee alone it holds {})",
                r.label,
                streams(r.capacity.unwrap_or(0))
            ),
            Outcome::Finished => compare(r, kept),
        });
    }
    for o in others {
        reason.push_str("; ");
        reason.push_str(&o);
    }
    if let Some(edge) = edge_note(results, kept_at) {
        reason.push_str("; ");
        reason.push_str(&edge);
    }
    if !rounds_known {
        reason.push_str("; this rests on one round (--rounds 3 measures the noise)");
    }
    Some(Recommendation {
        label: kept.label.clone(),
        reason,
        tie_with: ties.iter().map(|(_, r)| r.label.clone()).collect(),
    })
}

/// A finished rival against the setting kept, in a clause.
fn compare(r: &SettingResult, kept: &SettingResult) -> String {
    match (r.capacity, kept.capacity) {
        (None, _) => format!("{} meets the SLO at no level", r.label),
        (Some(c), Some(k)) if c < k => format!("{} holds {}", r.label, streams(c)),
        (Some(c), _) => {
            // The same capacity (a tie would have been said): by throughput.
            let (Some(t), Some(k)) = (r.tok_s_at_capacity, kept.tok_s_at_capacity) else {
                return format!("{} holds {}", r.label, streams(c));
            };
            let peak = match (r.peak_tok_s, kept.peak_tok_s) {
                // Said only when it rounds to a whole percent or more.
                (Some(p), Some(q)) if q > 0.0 && (p - q) / q >= 0.005 => {
                    format!(" (it adds {}% peak throughput)", pct((p - q) / q))
                }
                _ => String::new(),
            };
            if k > 0.0 && (k - t) / k < 0.005 {
                // Under a whole percent: no "0% less".
                format!(
                    "{} holds {} too and serves as much there{peak}",
                    r.label,
                    streams(c)
                )
            } else if k > 0.0 && t < k {
                format!(
                    "{} holds {} too but serves {}% less there{peak}",
                    r.label,
                    streams(c),
                    pct((k - t) / k)
                )
            } else {
                format!("{} holds {}{peak}", r.label, streams(c))
            }
        }
    }
}

/// The kept setting is the grid's last and did better than the one
/// before it: the grid may end too soon.
fn edge_note(results: &[SettingResult], kept_at: usize) -> Option<String> {
    if results.len() < 2 || kept_at + 1 != results.len() {
        return None;
    }
    let kept = &results[kept_at];
    let before = &results[kept_at - 1];
    let gains = match (kept.capacity, before.capacity) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => true,
        _ => false,
    };
    if !gains {
        return None;
    }
    let next = match kept.values.as_slice() {
        [(_, v)] => v
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(2))
            .map(|n| format!(": try {n}")),
        _ => None,
    };
    Some(format!(
        "{} is the largest tried and still gains{}",
        kept.label,
        next.unwrap_or_else(|| ": try a larger one".into())
    ))
}

/// The rounds' spread of one figure: half its range over its mean
/// (400 and 420 tok/s: 10 / 410 = 2.4%); `None` for fewer than two rounds.
pub(crate) fn spread_of(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        });
    (mean > 0.0).then(|| (hi - lo) / 2.0 / mean)
}

fn streams(n: u32) -> String {
    if n == 1 {
        "1 stream".into()
    } else {
        format!("{n} streams")
    }
}

fn tok(t: f64) -> String {
    format!("{t:.0}")
}

fn pct(share: f64) -> String {
    format!("{:.0}", share * 100.0)
}

/// A measured spread as a percentage: whole from 1% up, one decimal
/// under it (`0.1888` -> `19`, `0.004` -> `0.4`).
fn spread_percent(share: f64) -> String {
    let p = share * 100.0;
    if p >= 1.0 {
        format!("{p:.0}")
    } else {
        threshold((p * 10.0).round() / 10.0)
    }
}

fn and_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO: &str = "p99 TTFT 2 s";

    fn r(np: u32, capacity: Option<u32>, tok: f64, spread: Option<f64>) -> SettingResult {
        SettingResult {
            label: format!("np={np}"),
            values: vec![("np".into(), np.to_string())],
            outcome: Outcome::Finished,
            capacity,
            by_knee: false,
            tok_s_at_capacity: Some(tok),
            p99_ttft_at_capacity_ms: Some(100.0),
            peak_tok_s: Some(tok),
            spread,
        }
    }

    /// np=4 holds 4 streams at 400 tok/s; np=1 and np=2 hold fewer; np=8
    /// holds 4 as well but serves 300 (25% less, outside a 2% spread).
    #[test]
    fn a_clear_winner_says_why() {
        let results = [
            r(1, Some(1), 100.0, Some(0.02)),
            r(2, Some(2), 200.0, Some(0.02)),
            r(4, Some(4), 400.0, Some(0.02)),
            r(8, Some(4), 300.0, Some(0.02)),
        ];
        let rec = recommend(&results, SLO, Some(20.0)).unwrap();
        assert_eq!(rec.label, "np=4");
        assert!(rec.tie_with.is_empty());
        assert_eq!(
            rec.reason,
            "keep np=4: capacity 4 streams within p99 TTFT 2 s (400 tok/s); np=1 holds 1 stream; \
             np=2 holds 2 streams; np=8 holds 4 streams too but serves 25% less there"
        );
    }

    /// np=4 at 400 and np=8 at 410 tok/s, both 4 streams, spread ±4%:
    /// (410 - 400) / 410 = 2.4% < 4%, a tie, and the smaller is kept.
    #[test]
    fn a_tie_within_the_rounds_spread_keeps_the_smaller() {
        let results = [
            r(2, Some(2), 200.0, Some(0.01)),
            r(4, Some(4), 400.0, Some(0.04)),
            r(8, Some(4), 410.0, Some(0.03)),
        ];
        let rec = recommend(&results, SLO, Some(20.0)).unwrap();
        assert_eq!(rec.label, "np=4");
        assert_eq!(rec.tie_with, vec!["np=8"]);
        assert_eq!(
            rec.reason,
            "keep np=4: capacity 4 streams within p99 TTFT 2 s (400 tok/s); \
             np=4 and np=8 are within noise (±4%): keep the smaller; np=2 holds 2 streams"
        );
        // Outside the spread (±1% each) np=8 wins outright:
        // (410 - 400) / 410 = 2.4% > 1%.
        let apart = [
            r(4, Some(4), 400.0, Some(0.01)),
            r(8, Some(4), 410.0, Some(0.01)),
        ];
        let rec = recommend(&apart, SLO, Some(20.0)).unwrap();
        assert_eq!(rec.label, "np=8");
        assert!(rec.tie_with.is_empty());
    }

    /// The last setting of the grid holds more than the one before it.
    #[test]
    fn a_winner_at_the_grids_edge_says_try_more() {
        let results = [
            r(1, Some(1), 100.0, Some(0.02)),
            r(2, Some(2), 190.0, Some(0.02)),
            r(4, Some(4), 380.0, Some(0.02)),
        ];
        let rec = recommend(&results, SLO, Some(20.0)).unwrap();
        assert_eq!(
            rec.reason,
            "keep np=4: capacity 4 streams within p99 TTFT 2 s (380 tok/s); np=1 holds 1 stream; \
             np=2 holds 2 streams; np=4 is the largest tried and still gains: try 8"
        );
    }

    /// With one round there is no spread: no tie is claimed, and the
    /// sentence says what it rests on.
    #[test]
    fn one_round_says_so() {
        let results = [r(4, Some(4), 400.0, None), r(8, Some(4), 401.0, None)];
        let rec = recommend(&results, SLO, Some(20.0)).unwrap();
        assert_eq!(rec.label, "np=8");
        assert_eq!(
            rec.reason,
            "keep np=8: capacity 4 streams within p99 TTFT 2 s (401 tok/s); np=4 holds 4 streams too \
             and serves as much there; this rests on one round (--rounds 3 measures the noise)"
        );
    }

    #[test]
    fn a_measured_spread_is_said_in_whole_percent() {
        assert_eq!(spread_percent(0.1888), "19");
        assert_eq!(spread_percent(0.04), "4");
        assert_eq!(spread_percent(0.004), "0.4");
        assert_eq!(spread_percent(0.0), "0");
    }

    #[test]
    fn spread_is_half_the_range_over_the_mean() {
        let s = spread_of(&[400.0, 420.0]).unwrap();
        assert!((s - 10.0 / 410.0).abs() < 1e-12);
        assert_eq!(spread_of(&[400.0]), None);
    }

    /// A cut-short setting is never kept, even with the best figures.
    #[test]
    fn a_partial_setting_is_never_recommended() {
        let mut cut = r(8, Some(8), 800.0, None);
        cut.outcome = Outcome::Partial("its server exited mid-level".into());
        let results = [r(4, Some(4), 400.0, None), cut];
        let rec = recommend(&results, SLO, Some(20.0)).unwrap();
        assert_eq!(rec.label, "np=4");
        assert!(rec
            .reason
            .contains("np=8 did not finish (its server exited mid-level), so it is not judged"));
        let none = [SettingResult {
            capacity: None,
            ..r(1, None, 0.0, None)
        }];
        assert!(recommend(&none, SLO, Some(20.0)).is_none());
    }

    /// The user's own SLO met at no level of any setting: np=1's knee gives
    /// 1 stream at 12 tok/s, np=2's 2 at 24: np=2 is kept, and the sentence
    /// says by which rule, naming the SLO that no setting met.
    #[test]
    fn past_your_slo_the_knee_capacities_still_pick_a_setting() {
        let knee = |np: u32, capacity: u32, tok: f64| SettingResult {
            by_knee: true,
            ..r(np, Some(capacity), tok, None)
        };
        let rec = recommend_past_slo(&[knee(1, 1, 12.0), knee(2, 2, 24.0)], SLO)
            .expect("a setting to keep");
        assert_eq!(rec.label, "np=2");
        assert_eq!(
            rec.reason,
            "keep np=2: capacity 2 streams, 24 tok/s (capacity by the knee: no setting meets \
             your SLO, p99 TTFT 2 s); np=1 holds 1 stream; np=2 is the largest tried and still \
             gains: try 4; this rests on one round (--rounds 3 measures the noise)"
        );
        assert!(recommend_past_slo(&[], SLO).is_none());
    }
}
