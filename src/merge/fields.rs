//! The shard keys a merge reads, in one place: `run.shard`, a level's
//! `shard`, `started_unix_s` and `duration_target` (issue 13).
//!
//! They are read from the schema structs' maps of other keys
//! (`RunSection::other`, `LevelFile::stats`) rather than typed fields,
//! because adding fields to those structs means editing the recorder that
//! builds them, which this module does not own. When the recorder gains
//! typed fields for them, these accessors are the only lines to change.

use serde_json::Value;

use crate::report::schema::{typed, LevelFile, RunSection, ShardEntry, ShardInfo};

/// `run.shard`.
pub fn run_shard(run: &RunSection) -> Option<ShardInfo> {
    typed(run.other.get("shard").cloned()?)
}

/// Sets (or with `None` removes) `run.shard`.
pub fn set_run_shard(run: &mut RunSection, shard: Option<&ShardInfo>) {
    match shard.and_then(|s| serde_json::to_value(s).ok()) {
        Some(v) => run.other.insert("shard".into(), v),
        None => run.other.remove("shard"),
    };
}

/// A level's `shard`.
pub fn level_shard(level: &LevelFile) -> Option<ShardInfo> {
    typed(level.stats.get("shard").cloned()?)
}

/// A level's `started_unix_s`: wall clock at its first dispatch, Unix s.
pub fn started_unix_s(level: &LevelFile) -> Option<f64> {
    level
        .stats
        .get("started_unix_s")
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite())
}

/// A level's `duration_target` as written (seconds, or null).
pub fn duration_target(level: &LevelFile) -> Option<Value> {
    level
        .stats
        .get("duration_target")
        .filter(|v| !v.is_null())
        .cloned()
}

/// A merged level's `shards`.
pub fn level_shards(level: &LevelFile) -> Option<Vec<ShardEntry>> {
    typed(level.stats.get("shards").cloned()?)
}

/// Writes the keys a merged level carries beside the typed ones.
pub fn set_merged_level_keys(
    level: &mut LevelFile,
    started_unix_s: Option<f64>,
    duration_target: Option<Value>,
    shards: &[ShardEntry],
) {
    level.stats.remove("shard");
    if let Some(t) = started_unix_s.and_then(serde_json::Number::from_f64) {
        level
            .stats
            .insert("started_unix_s".into(), Value::Number(t));
    }
    if let Some(d) = duration_target {
        level.stats.insert("duration_target".into(), d);
    }
    if let Ok(v) = serde_json::to_value(shards) {
        level.stats.insert("shards".into(), v);
    }
}
