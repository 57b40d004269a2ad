//! `tokbench merge DIR... -o OUT`: the shards of one run (`sweep --shard
//! I/N`), each a result folder, made into one normal result folder that
//! `report`, `view` and `compare` read unchanged (issue 13, part 4).
//!
//! [`merge`] is the whole rule set, a pure function: the shards' parsed
//! files in, the merged files out, no I/O (`files` reads and writes them).
//! What it does with each figure (docs/architecture.md, `merge`'s contract):
//!
//! - counts and tokens are sums; errors are summed per class;
//! - throughputs are over the union's duration: from the earliest level
//!   start to the latest level end of any shard, on the server's clock. A
//!   shard's level starts at `started_unix_s + clock_offset_ms / 1000` (its
//!   wall clock at the level's start plus the server's clock minus its own,
//!   from the `Date` header) and ends `duration` seconds later (first
//!   dispatch to last completion, on its monotonic clock). The offset is
//!   applied only when it is larger than its own uncertainty
//!   (`clock_offset_error_ms`, ±500 ms for a whole-second `Date`): within
//!   it, the hosts' own clocks (NTP) are the better estimate, and an
//!   unknown offset counts as 0;
//! - percentiles are of the union: numpy-linear over every value when every
//!   shard kept its samples of the metric, else the merged HDR histogram's
//!   (within 0.1%); ITL always the histogram's; means and standard
//!   deviations exact (`metric`);
//! - `per_stream_tok_s` = merged output throughput / the shards' summed
//!   concurrency; `stream_decode_tok_s` = 1000 / the merged median TPOT;
//!   input and output lengths: min of mins, max of maxes, mean weighted by
//!   completed requests; goodput from the summed good requests;
//! - what cannot be merged truthfully is left out (null), never averaged:
//!   the client's CPU and loop lag (per shard, in `shards`), the server
//!   probe's gauges, read lag, occupancy, send lateness, turns, cache hit
//!   rate, GPU energy, throughput RSE, the level's length distributions;
//! - knee, capacity, rounds and cost are recomputed by `analysis` from the
//!   merged levels.
//!
//! It refuses (one line, exit 2) shards of different runs or shard counts,
//! a shard given twice, a missing shard (unless `allow_missing`), levels
//! that are not in every shard, and level files without histograms. It
//! warns when one level's shards started more than 250 ms apart.

pub(crate) mod fields;
pub mod files;
mod identity;
mod level;
pub(crate) mod metric;
mod summary;

pub(crate) use identity::keep_common_levels;
use identity::*;
use level::*;
pub(crate) use summary::clock_correction_s;
use summary::*;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{json, Map, Value};

use crate::analysis::cost::cost;
use crate::analysis::decide::{decide_judged, CapacitySlo, Decision, LevelPoint};
use crate::analysis::diagnose::{no_capacity, no_rise, single_round};
use crate::analysis::rounds::rounds_spread;
use crate::fmt::round3;
use crate::record::Mode;
use crate::report::recorder::{level_file_base, level_file_name};
use crate::report::schema::{
    self, number, ClientLoad, DiagnosisEntry, LevelFile, MergedFrom, RunSlo, SeriesEntry,
    ShardEntry, ShardSection, SummaryFile, LATENCY_METRICS, SCHEMA_VERSION,
};
use metric::{merge_metric, MergedMetric, Part};

/// Shards' starts of one level further apart than this get a warning: the
/// levels did not overlap as planned (a late `--start-at`, a skewed clock).
pub(crate) const START_SKEW_WARN_S: f64 = 0.250;

/// One shard's result folder, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardRun {
    /// The folder as given, for messages.
    pub name: String,
    pub summary: SummaryFile,
    /// The level files (with histograms and samples), in run order, each
    /// with `file` set to its file name.
    pub levels: Vec<LevelFile>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MergeOptions {
    /// Merge the shards given even when some of the run's are missing.
    pub allow_missing: bool,
}

/// The merged folder's files.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub summary: SummaryFile,
    /// `(file name, level file)` in run order.
    pub levels: Vec<(String, LevelFile)>,
    /// Warnings, also recorded in `summary.json` (`merge.warnings`).
    pub warnings: Vec<String>,
    /// The inputs in merged order: index into the given runs, and the
    /// shard index to stamp on their requests.jsonl lines (None for a
    /// merged input, whose lines carry theirs).
    pub order: Vec<(usize, Option<u32>)>,
}

/// Why nothing was merged.
#[derive(Debug)]
pub enum MergeError {
    /// The inputs are not shards of one run: one line, exit 2.
    Refused(String),
    /// A file is broken (a histogram that does not decode): exit 1.
    Broken(color_eyre::Report),
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeError::Refused(why) => write!(f, "refused: {why}"),
            MergeError::Broken(e) => {
                let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
                write!(f, "{}", chain.join(": "))
            }
        }
    }
}

impl From<color_eyre::Report> for MergeError {
    fn from(e: color_eyre::Report) -> Self {
        MergeError::Broken(e)
    }
}

/// Merges the shards of one run.
pub fn merge(runs: &[ShardRun], options: MergeOptions) -> Result<Merged, MergeError> {
    if runs.is_empty() {
        return refuse("no shard folder given".into());
    }
    let mut held: Vec<(usize, Holds)> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        held.push((i, holds(run)?));
    }
    held.sort_by_key(|(_, h)| h.indexes.iter().min().copied());
    let (first_i, first) = (held[0].0, held[0].1.clone());
    let base = &runs[first_i];

    // One run: the same shard count, every shard once, the same settings.
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, h) in &held {
        if h.count != first.count {
            return refuse(format!(
                "shard counts differ: {} is {}, {} is {}",
                base.name,
                label(&first.indexes, first.count),
                runs[*i].name,
                label(&h.indexes, h.count)
            ));
        }
        for &index in &h.indexes {
            if let Some(other) = seen.insert(index, *i) {
                return refuse(format!(
                    "shard {index}/{} given twice: {} and {}",
                    h.count, runs[other].name, runs[*i].name
                ));
            }
        }
    }
    for (what, get) in identity_checks() {
        let want = get(&base.summary.run);
        for (i, _) in &held[1..] {
            let got = get(&runs[*i].summary.run);
            if got != want {
                return refuse(format!(
                    "{} and {} differ in {what} ({} vs {}): they are not shards of one run",
                    base.name,
                    runs[*i].name,
                    show(&want),
                    show(&got)
                ));
            }
        }
    }
    let missing: Vec<u32> = (0..first.count).filter(|i| !seen.contains_key(i)).collect();
    let mut warnings = Vec::new();
    if let Some(&m) = missing.first() {
        let present = first.count as usize - missing.len();
        if !options.allow_missing {
            let others = if missing.len() > 1 {
                format!(" (and {} more)", missing.len() - 1)
            } else {
                String::new()
            };
            return refuse(format!(
                "shard {m}/{}{others} missing: give every shard's folder, or --allow-missing to merge the {present} given",
                first.count
            ));
        }
        warnings.push(format!(
            "merging {present} of {} shards: {} missing (--allow-missing); counts and throughputs are of the shards given",
            first.count,
            label(&missing, first.count)
        ));
    }

    // Levels: every shard must have run every level.
    let keyed: Vec<BTreeMap<u64, &LevelFile>> = held
        .iter()
        .map(|(i, _)| {
            runs[*i]
                .levels
                .iter()
                .enumerate()
                .map(|(p, l)| (level_key(l, p), l))
                .collect()
        })
        .collect();
    let all_keys: BTreeSet<u64> = keyed.iter().flat_map(|m| m.keys().copied()).collect();
    for key in &all_keys {
        let (have, lack): (Vec<usize>, Vec<usize>) =
            (0..held.len()).partition(|&j| keyed[j].contains_key(key));
        if !lack.is_empty() && !idle_where_absent(*key, &have, &lack, &held, &keyed) {
            let name = keyed[have[0]]
                .get(key)
                .map_or_else(String::new, |l| format!(" ({})", level_name(l, *key)));
            let names = |js: &[usize]| {
                let mut ix: Vec<u32> = js
                    .iter()
                    .flat_map(|&j| held[j].1.indexes.iter().copied())
                    .collect();
                ix.sort_unstable();
                label(&ix, first.count)
            };
            return refuse(format!(
                "level {}{name} is in {} but not in {}: the shards ran different levels",
                key + 1,
                names(&have),
                names(&lack)
            ));
        }
    }
    let percentiles = held
        .iter()
        .find_map(|(i, _)| runs[*i].levels.first())
        .map_or_else(Vec::new, saved_percentiles);

    let one_level = |key: u64| {
        let parts: Vec<(&ShardRun, &Holds, &LevelFile)> = held
            .iter()
            .zip(&keyed)
            .filter_map(|((i, h), m)| Some((&runs[*i], h, *m.get(&key)?)))
            .collect();
        merge_level(key, &parts, &percentiles)
    };
    let keys: Vec<u64> = all_keys.iter().copied().collect();
    let mut levels: Vec<(String, LevelFile)> = Vec::new();
    let mut bases: BTreeMap<String, u32> = BTreeMap::new();
    for result in in_parallel(&keys, one_level) {
        let (level, mut level_warnings) = result?;
        warnings.append(&mut level_warnings);
        let base_name = file_base(&level);
        let nth = bases.entry(base_name.clone()).or_insert(0);
        *nth += 1;
        levels.push((level_file_name(&base_name, *nth), level));
    }

    let summary = merged_summary(runs, &held, &levels, &missing, &warnings);
    Ok(Merged {
        summary,
        levels,
        warnings,
        order: held
            .iter()
            .map(|(i, h)| (*i, (!h.merged).then(|| h.indexes[0])))
            .collect(),
    })
}

/// Whether the inputs without level `key` simply had no part of it: a
/// closed-loop level of C streams over N shards gives shard i none when
/// C < N and i >= C (the remainder goes to the lowest indexes), and such a
/// shard writes no file for it. C is the streams of the shards that ran it.
fn idle_where_absent(
    key: u64,
    have: &[usize],
    lack: &[usize],
    held: &[(usize, Holds)],
    keyed: &[BTreeMap<u64, &LevelFile>],
) -> bool {
    let levels: Vec<&LevelFile> = have
        .iter()
        .filter_map(|&j| keyed[j].get(&key).copied())
        .collect();
    let closed = levels
        .iter()
        .all(|l| !l.request_rate.as_ref().is_some_and(Value::is_number));
    let streams: u32 = levels.iter().filter_map(|l| l.max_concurrency).sum();
    let count = held.first().map_or(0, |h| h.1.count);
    closed
        && streams < count
        && lack
            .iter()
            .all(|&j| held[j].1.indexes.iter().all(|&i| i >= streams))
}

type LevelResult = Result<(LevelFile, Vec<String>), MergeError>;

/// `work` of every key, in the keys' order, the keys spread over the
/// machine's cores: levels merge independently, and decoding, adding and
/// sorting them is the merge's whole cost (100 shards x 10 levels is about
/// 0.7 s on one core). No I/O happens here either.
fn in_parallel(keys: &[u64], work: impl Fn(u64) -> LevelResult + Sync) -> Vec<LevelResult> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(keys.len());
    if threads <= 1 {
        return keys.iter().map(|&k| work(k)).collect();
    }
    // Thread t takes keys t, t + threads, ...: later levels (more streams,
    // more values) are spread rather than bunched on one thread.
    let work = &work;
    let mut slots: Vec<Option<LevelResult>> = (0..keys.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..keys.len())
                        .step_by(threads)
                        .map(|i| (i, work(keys[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in handles {
            // A thread that panicked (a bug) leaves its slots empty: those
            // levels become errors below, not a panic of the merge.
            if let Ok(done) = handle.join() {
                for (i, result) in done {
                    slots[i] = Some(result);
                }
            }
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.unwrap_or_else(|| {
                Err(MergeError::Broken(color_eyre::eyre::eyre!(
                    "a level's merge stopped on an internal error"
                )))
            })
        })
        .collect()
}
