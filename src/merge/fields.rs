//! The shard keys a merge reads and writes beside the typed ones, in one
//! place: `run.merged` (a merged folder's shards) and a merged level's
//! `shards`. They live in the schema structs' maps of other keys
//! (`RunSection::other`, `LevelFile::stats`), so the recorder, which
//! builds those structs field by field, needs no field it never fills.

use crate::report::schema::{typed, LevelFile, MergedFrom, RunSection, ShardEntry};

/// `run.merged`: present in folders `tokbench merge` wrote.
pub(crate) fn run_merged(run: &RunSection) -> Option<MergedFrom> {
    typed(run.other.get("merged").cloned()?)
}

pub(crate) fn set_run_merged(run: &mut RunSection, merged: &MergedFrom) {
    if let Ok(v) = serde_json::to_value(merged) {
        run.other.insert("merged".into(), v);
    }
}

/// A merged level's `shards`.
pub(crate) fn level_shards(level: &LevelFile) -> Option<Vec<ShardEntry>> {
    typed(level.stats.get("shards").cloned()?)
}

/// A level's `started_unix_s`, when finite.
pub(crate) fn started_unix_s(level: &LevelFile) -> Option<f64> {
    level.started_unix_s.filter(|t| t.is_finite())
}

/// Writes a merged level's `shards`.
pub(crate) fn set_level_shards(level: &mut LevelFile, shards: &[ShardEntry]) {
    if let Ok(v) = serde_json::to_value(shards) {
        level.stats.insert("shards".into(), v);
    }
}
