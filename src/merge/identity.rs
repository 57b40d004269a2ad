//! Which folders are shards of one run, and which levels they share:
//! the refusals' rules.

// More of the merge: the parent's items, private ones included.
use super::*;

pub(super) fn refuse<T>(why: String) -> Result<T, MergeError> {
    Err(MergeError::Refused(why))
}

/// Which of the run's shards an input holds.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Holds {
    pub(super) indexes: Vec<u32>,
    pub(super) count: u32,
    /// A folder `tokbench merge` wrote.
    pub(super) merged: bool,
}

/// `shard 2/4`, `shards 0, 1/4`.
pub(super) fn label(indexes: &[u32], count: u32) -> String {
    match indexes {
        [one] => format!("shard {one}/{count}"),
        many => {
            let list: Vec<String> = many.iter().map(u32::to_string).collect();
            format!("shards {}/{count}", list.join(", "))
        }
    }
}

pub(super) fn holds(run: &ShardRun) -> Result<Holds, MergeError> {
    let (count, indexes, merged) = match (&run.summary.run.shard, fields::run_merged(&run.summary.run)) {
        (Some(shard), _) => (
            shard.count,
            shard.index.map(|i| vec![i]).unwrap_or_default(),
            false,
        ),
        (None, Some(m)) => (m.count, m.indexes.unwrap_or_default(), true),
        (None, None) => {
            return refuse(format!(
                "{} is not a shard: its summary.json has no run.shard (run each part with sweep --shard I/N)",
                run.name
            ))
        }
    };
    let Some(count) = count.filter(|c| *c > 0) else {
        return refuse(format!("{}: run.shard has no shard count", run.name));
    };
    if indexes.is_empty() {
        return refuse(format!("{}: run.shard has no shard index", run.name));
    }
    if let Some(bad) = indexes.iter().find(|i| **i >= count) {
        return refuse(format!(
            "{}: shard index {bad} is out of range for {count} shards",
            run.name
        ));
    }
    Ok(Holds {
        indexes,
        count,
        merged,
    })
}

/// A value for a refusal: `"sim"`, `1024`, `null`.
pub(super) fn show(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}

/// The run settings every shard of one run shares: what was sent, to
/// whom, and the seed the shards' prompts derive from.
pub(super) type RunCheck = (&'static str, fn(&schema::RunSection) -> Value);

pub(super) fn identity_checks() -> Vec<RunCheck> {
    fn other(r: &schema::RunSection, key: &str) -> Value {
        r.other.get(key).cloned().unwrap_or(Value::Null)
    }
    vec![
        ("target", |r| json!(r.target)),
        ("model", |r| json!(r.model)),
        ("backend", |r| json!(r.backend)),
        ("input length", |r| json!(r.input_len)),
        ("output length", |r| json!(r.output_len)),
        ("profile", |r| json!(r.profile)),
        ("range ratio", |r| other(r, "range_ratio")),
        ("prompt source", |r| other(r, "prompt_source")),
        ("dataset", |r| other(r, "dataset")),
        ("prefix length", |r| json!(r.prefix_len)),
        ("ignore_eos", |r| json!(r.ignore_eos)),
        ("extra body", |r| json!(r.extra_body)),
        ("seed", |r| json!(r.seed)),
        ("run kind", |r| json!(r.kind)),
        ("turns", |r| json!(r.turns)),
    ]
}

/// A level's place in the run: its `level_index`, else its position.
pub(super) fn level_key(level: &LevelFile, position: usize) -> u64 {
    level.level_index.unwrap_or(position as u64)
}

/// `sweep-c4.json`, or the level's number when the file is not named.
pub(super) fn level_name(level: &LevelFile, key: u64) -> String {
    level
        .file
        .clone()
        .unwrap_or_else(|| format!("level {}", key + 1))
}

/// The percentiles the shards saved, from the first level's `p{P}_ttft_ms`
/// keys (`--percentiles` is not in summary.json; its keys are).
pub(super) fn saved_percentiles(level: &LevelFile) -> Vec<f64> {
    let mut ps: Vec<f64> = level
        .stats
        .keys()
        .filter_map(|k| k.strip_prefix('p')?.strip_suffix("_ttft_ms")?.parse().ok())
        .filter(|p: &f64| (0.0..=100.0).contains(p))
        .collect();
    ps.sort_by(f64::total_cmp);
    ps.dedup();
    ps
}

/// Keeps, in every run, only the levels every run has reached (by level
/// index: it has that level or a later one; a shard with no part of a
/// level writes no file for it): what `view --follow` merges while shards
/// are mid-run.
pub(crate) fn keep_common_levels(runs: &mut [ShardRun]) {
    let keys: Vec<BTreeSet<u64>> = runs
        .iter()
        .map(|r| {
            r.levels
                .iter()
                .enumerate()
                .map(|(i, l)| level_key(l, i))
                .collect()
        })
        .collect();
    // The newest level every run has reached.
    let Some(reached) = keys
        .iter()
        .map(|s| s.iter().next_back().copied())
        .min()
        .flatten()
    else {
        for run in runs {
            run.levels.clear();
        }
        return;
    };
    let common: BTreeSet<u64> = keys
        .iter()
        .flatten()
        .copied()
        .filter(|k| *k <= reached)
        .collect();
    for run in runs {
        let mut i = 0;
        run.levels.retain(|l| {
            let keep = common.contains(&level_key(l, i));
            i += 1;
            keep
        });
    }
}
