//! Checks for the ways a benchmark measures the wrong thing (DESIGN.md
//! section 1). Each returns a diagnosis only when it fires.

use serde_json::{json, Value};

use crate::stats::summary::LevelStats;

/// Prompt lengths further than this from the target make levels incomparable.
pub const INPUT_LEN_TOLERANCE: f64 = 0.05;

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    pub id: &'static str,
    pub message: String,
    pub evidence: Value,
}

impl Diagnosis {
    pub fn to_json(&self) -> Value {
        json!({"id": self.id, "message": self.message, "evidence": self.evidence})
    }
}

/// A finished level as the checks see it.
pub struct LevelView<'a> {
    pub concurrency: u32,
    pub stats: &'a LevelStats,
}

/// Run every check over the levels of a run.
pub fn diagnose(levels: &[LevelView<'_>], input_target: u32, output_target: u32) -> Vec<Diagnosis> {
    [
        input_len_off_target(levels, input_target),
        short_outputs(levels, output_target),
        failures(levels),
        single_level(levels),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The server saw prompts of a different length than asked for.
pub fn input_len_off_target(levels: &[LevelView<'_>], target: u32) -> Option<Diagnosis> {
    if target == 0 {
        return None;
    }
    let (mut sum, mut n, mut min, mut max) = (0.0, 0usize, f64::INFINITY, 0.0f64);
    for level in levels {
        if let Some(len) = &level.stats.input_len {
            sum += len.mean * level.stats.completed as f64;
            n += level.stats.completed;
            min = min.min(len.min);
            max = max.max(len.max);
        }
    }
    if n == 0 {
        return None;
    }
    let mean = sum / n as f64;
    let off = (mean - target as f64) / target as f64;
    (off.abs() > INPUT_LEN_TOLERANCE).then(|| Diagnosis {
        id: "input_len_off_target",
        message: format!(
            "prompts reached the model at {mean:.0} tokens on average, {:+.0}% off the {target} asked for: \
             compare only with runs of the same measured length",
            off * 100.0
        ),
        evidence: json!({"target": target, "mean": mean, "min": min, "max": max}),
    })
}

/// Answers ended before the requested length (EOS without ignore_eos, or a server limit).
pub fn short_outputs(levels: &[LevelView<'_>], target: u32) -> Option<Diagnosis> {
    let short: usize = levels.iter().map(|l| l.stats.short_outputs).sum();
    if short == 0 {
        return None;
    }
    let completed: usize = levels.iter().map(|l| l.stats.completed).sum();
    let (mut sum, mut n) = (0.0, 0usize);
    for level in levels {
        if let Some(len) = &level.stats.output_len {
            sum += len.mean * level.stats.completed as f64;
            n += level.stats.completed;
        }
    }
    let mean = if n > 0 { sum / n as f64 } else { 0.0 };
    Some(Diagnosis {
        id: "short_outputs",
        message: format!(
            "{short} of {completed} answers ended before {target} tokens (mean {mean:.0}): \
             numbers at different output lengths are not comparable; use ignore_eos where the server supports it"
        ),
        evidence: json!({"short": short, "completed": completed, "mean_output_len": mean, "target": target}),
    })
}

/// Some requests failed; say how, by class.
pub fn failures(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
    let mut by_class = std::collections::BTreeMap::<String, usize>::new();
    for level in levels {
        for (class, count) in &level.stats.errors {
            *by_class.entry(class.clone()).or_default() += count;
        }
    }
    let failed: usize = by_class.values().sum();
    if failed == 0 {
        return None;
    }
    let total: usize = levels
        .iter()
        .map(|l| l.stats.completed + l.stats.failed)
        .sum();
    let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} x{n}")).collect();
    Some(Diagnosis {
        id: "failures",
        message: format!(
            "{failed} of {total} requests failed ({})",
            classes.join(", ")
        ),
        evidence: json!({"failed": failed, "total": total, "by_class": by_class}),
    })
}

/// One concurrency says nothing about capacity.
pub fn single_level(levels: &[LevelView<'_>]) -> Option<Diagnosis> {
    let mut distinct: Vec<u32> = levels.iter().map(|l| l.concurrency).collect();
    distinct.sort_unstable();
    distinct.dedup();
    (distinct.len() == 1).then(|| Diagnosis {
        id: "single_level",
        message: format!(
            "only concurrency {} was measured: that says nothing about capacity; sweep several levels",
            distinct[0]
        ),
        evidence: json!({"concurrency": distinct[0]}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{level_stats, MinMeanMax};

    fn stats_with(completed: usize, input_mean: f64, short: usize) -> LevelStats {
        let mut s = level_stats(&[], 1, &[50.0]);
        s.completed = completed;
        s.input_len = Some(MinMeanMax {
            min: input_mean - 1.0,
            mean: input_mean,
            max: input_mean + 1.0,
        });
        s.output_len = Some(MinMeanMax {
            min: 10.0,
            mean: 50.0,
            max: 64.0,
        });
        s.short_outputs = short;
        s
    }

    #[test]
    fn input_length_fires_only_past_five_percent() {
        // 10 requests at mean 1060 and 10 at 1090: pooled mean 1075, 4.98% over 1024 -> quiet.
        let a = stats_with(10, 1060.0, 0);
        let b = stats_with(10, 1090.0, 0);
        let levels = [
            LevelView {
                concurrency: 1,
                stats: &a,
            },
            LevelView {
                concurrency: 4,
                stats: &b,
            },
        ];
        assert!(input_len_off_target(&levels, 1024).is_none());
        // 1076 is 5.08% over 1024 -> fires, and says +5%.
        let c = stats_with(10, 1076.0, 0);
        let d = input_len_off_target(
            &[LevelView {
                concurrency: 1,
                stats: &c,
            }],
            1024,
        )
        .expect("fires");
        assert_eq!(d.id, "input_len_off_target");
        assert!(d.message.contains("+5%"), "{}", d.message);
    }

    #[test]
    fn short_outputs_and_single_level() {
        let a = stats_with(20, 128.0, 3);
        let levels = [LevelView {
            concurrency: 4,
            stats: &a,
        }];
        let d = short_outputs(&levels, 64).expect("fires");
        assert!(
            d.message
                .starts_with("3 of 20 answers ended before 64 tokens (mean 50)"),
            "{}",
            d.message
        );
        assert_eq!(single_level(&levels).map(|d| d.id), Some("single_level"));
        let b = stats_with(20, 128.0, 0);
        let two = [
            LevelView {
                concurrency: 4,
                stats: &b,
            },
            LevelView {
                concurrency: 8,
                stats: &b,
            },
        ];
        assert!(short_outputs(&two, 64).is_none());
        assert!(single_level(&two).is_none());
    }

    #[test]
    fn failures_sum_classes_over_levels() {
        let mut a = stats_with(8, 10.0, 0);
        a.failed = 2;
        a.errors.insert("http_503".into(), 2);
        let mut b = stats_with(9, 10.0, 0);
        b.failed = 1;
        b.errors.insert("http_503".into(), 1);
        let levels = [
            LevelView {
                concurrency: 1,
                stats: &a,
            },
            LevelView {
                concurrency: 2,
                stats: &b,
            },
        ];
        let d = failures(&levels).expect("fires");
        assert_eq!(d.message, "3 of 20 requests failed (http_503 x3)");
    }
}
