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

pub mod fields;
pub mod files;
pub mod metric;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{json, Map, Value};

use crate::analysis::cost::cost;
use crate::analysis::decide::{decide, CapacitySlo, Decision, LevelPoint, DEFAULT_MAX_ERROR_RATE};
use crate::analysis::diagnose::{no_capacity, no_rise, single_round};
use crate::analysis::rounds::rounds_spread;
use crate::record::Mode;
use crate::report::recorder::{level_file_name, rate_label};
use crate::report::schema::{
    self, number, ClientLoad, DiagnosisEntry, LevelFile, MergedFrom, ShardEntry, ShardSection,
    SummaryFile, LATENCY_METRICS, SCHEMA_VERSION,
};
use metric::{merge_metric, MergedMetric, Part};

/// Shards' starts of one level further apart than this get a warning: the
/// levels did not overlap as planned (a late `--start-at`, a skewed clock).
pub const START_SKEW_WARN_S: f64 = 0.250;

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

fn refuse<T>(why: String) -> Result<T, MergeError> {
    Err(MergeError::Refused(why))
}

/// Which of the run's shards an input holds.
#[derive(Clone, Debug, PartialEq)]
struct Holds {
    indexes: Vec<u32>,
    count: u32,
    /// A folder `tokbench merge` wrote.
    merged: bool,
}

/// `shard 2/4`, `shards 0, 1/4`.
fn label(indexes: &[u32], count: u32) -> String {
    match indexes {
        [one] => format!("shard {one}/{count}"),
        many => {
            let list: Vec<String> = many.iter().map(u32::to_string).collect();
            format!("shards {}/{count}", list.join(", "))
        }
    }
}

fn holds(run: &ShardRun) -> Result<Holds, MergeError> {
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
fn show(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}

/// The run settings every shard of one run shares: what was sent, to
/// whom, and the seed the shards' prompts derive from.
type RunCheck = (&'static str, fn(&schema::RunSection) -> Value);

fn identity_checks() -> Vec<RunCheck> {
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
fn level_key(level: &LevelFile, position: usize) -> u64 {
    level.level_index.unwrap_or(position as u64)
}

/// `sweep-c4.json`, or the level's number when the file is not named.
fn level_name(level: &LevelFile, key: u64) -> String {
    level
        .file
        .clone()
        .unwrap_or_else(|| format!("level {}", key + 1))
}

/// The percentiles the shards saved, from the first level's `p{P}_ttft_ms`
/// keys (`--percentiles` is not in summary.json; its keys are).
fn saved_percentiles(level: &LevelFile) -> Vec<f64> {
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
pub fn keep_common_levels(runs: &mut [ShardRun]) {
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

/// `sweep-c{C}[-s{S}][-manual][-partial]`, `sweep-rate{R}...`,
/// `sweep-replay`: the recorder's names, at the merged concurrency or rate.
fn file_base(level: &LevelFile) -> String {
    let mode = level.mode_or_planned();
    let rate = level.request_rate.as_ref().and_then(Value::as_f64);
    let mut name = match (mode, rate) {
        ("replay", _) => "sweep-replay".to_string(),
        ("rate" | "manual", Some(r)) => format!("sweep-rate{}", rate_label(r)),
        _ => format!("sweep-c{}", level.max_concurrency.unwrap_or(0)),
    };
    if let Some(s) = level.series.filter(|s| *s > 0) {
        name.push_str(&format!("-s{}", s + 1));
    }
    if mode == "manual" {
        name.push_str("-manual");
    }
    if level.partial {
        name.push_str("-partial");
    }
    name
}

fn sum<I: IntoIterator<Item = Option<u64>>>(values: I) -> Option<u64> {
    values.into_iter().fold(None, |acc, v| match (acc, v) {
        (a, None) => a,
        (None, Some(v)) => Some(v),
        (Some(a), Some(v)) => Some(a + v),
    })
}

fn finite(x: f64) -> Option<f64> {
    Some(x).filter(|x| x.is_finite())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// `{min, mean, max}` of lengths over the union: the mean weighted by
/// each shard's completed requests (the values it averaged).
fn merge_lengths(parts: &[(&LevelFile, Option<&Value>)]) -> Option<Value> {
    let (mut min, mut max, mut weighted, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0u64);
    for (level, len) in parts {
        let Some(len) = len else { continue };
        let completed = level.completed.unwrap_or(0);
        if completed == 0 {
            continue;
        }
        let get = |k: &str| len.get(k).and_then(Value::as_f64);
        let (Some(lo), Some(mean), Some(hi)) = (get("min"), get("mean"), get("max")) else {
            return None;
        };
        min = min.min(lo);
        max = max.max(hi);
        weighted += mean * completed as f64;
        n += completed;
    }
    (n > 0).then(|| json!({"min": min, "mean": weighted / n as f64, "max": max}))
}

/// The same value in every part, or None.
fn agreed<T: PartialEq + Clone>(values: impl IntoIterator<Item = Option<T>>) -> Option<T> {
    let mut it = values.into_iter();
    let first = it.next()??;
    it.all(|v| v.as_ref() == Some(&first)).then_some(first)
}

fn merge_level(
    key: u64,
    parts: &[(&ShardRun, &Holds, &LevelFile)],
    percentiles: &[f64],
) -> Result<(LevelFile, Vec<String>), MergeError> {
    let (base_run, _, base) = parts[0];
    let shown = level_name(base, key);
    let mut warnings = Vec::new();
    // The plan of the level: the same in every shard.
    for (run, _, level) in &parts[1..] {
        let plan = |l: &LevelFile| {
            (
                l.mode_or_planned().to_string(),
                l.series.unwrap_or(0),
                l.duration_target.map(f64::to_bits),
                l.request_rate.as_ref().map(Value::is_number),
            )
        };
        if plan(level) != plan(base) {
            return refuse(format!(
                "level {} differs between {} ({}) and {} ({}): mode, series, duration target or loop kind; they are not shards of one run",
                key + 1,
                base_run.name,
                shown,
                run.name,
                level_name(level, key)
            ));
        }
    }
    for (run, _, level) in parts {
        if level.histograms.is_none() {
            return refuse(format!(
                "{}/{} has no histograms: an older tokbench wrote it (level files carry them since issue 13), and it cannot be merged exactly",
                run.name,
                level_name(level, key)
            ));
        }
        if fields::started_unix_s(level).is_none() {
            return refuse(format!(
                "{}/{} has no started_unix_s: an older tokbench wrote it, and its level cannot be placed on the other shards' clock",
                run.name,
                level_name(level, key)
            ));
        }
    }

    // The union's window on one clock.
    let offset_s = |run: &ShardRun, level: &LevelFile| {
        level
            .shard
            .as_ref()
            .or(run.summary.run.shard.as_ref())
            .map_or(0.0, clock_correction_s)
    };
    let mut starts: Vec<(f64, &Holds)> = Vec::new();
    let (mut first_start, mut last_end) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut run_start = f64::INFINITY;
    for (run, h, level) in parts {
        let Some(t) = fields::started_unix_s(level) else {
            continue;
        };
        let start = t + offset_s(run, level);
        starts.push((start, *h));
        if let Some(at) = level.started_at_s {
            run_start = run_start.min(start - at);
        }
        let answered = level.completed.unwrap_or(0) + level.failed.unwrap_or(0);
        if let Some(d) = level.duration.filter(|d| d.is_finite() && *d >= 0.0) {
            if answered > 0 {
                first_start = first_start.min(start);
                last_end = last_end.max(start + d);
            }
        }
    }
    let level_start = starts.iter().map(|s| s.0).reduce(f64::min);
    if let (Some(lo), Some(late)) = (
        level_start,
        starts.iter().max_by(|a, b| a.0.total_cmp(&b.0)),
    ) {
        let skew = late.0 - lo;
        if skew > START_SKEW_WARN_S {
            warnings.push(format!(
                "level {} ({} streams in all): the shards' starts differ by {:.0} ms, more than {:.0} ms ({} started last): its throughput is over the union's {:.3} s",
                key + 1,
                parts
                    .iter()
                    .filter_map(|p| p.2.max_concurrency)
                    .sum::<u32>(),
                skew * 1000.0,
                START_SKEW_WARN_S * 1000.0,
                label(&late.1.indexes, late.1.count),
                (last_end - first_start).max(0.0)
            ));
        }
    }
    let duration = (last_end >= first_start).then_some(last_end - first_start);

    let completed = sum(parts.iter().map(|p| p.2.completed));
    let failed = sum(parts.iter().map(|p| p.2.failed));
    let input_tokens = sum(parts.iter().map(|p| p.2.total_input_tokens));
    let output_tokens = sum(parts.iter().map(|p| p.2.total_output_tokens));
    let concurrency: u32 = parts.iter().filter_map(|p| p.2.max_concurrency).sum();
    let rate = |amount: Option<u64>| {
        let d = duration?;
        let a = amount? as f64;
        Some(if d > 0.0 { a / d } else { 0.0 })
    };
    let output_throughput = rate(output_tokens);
    let request_rate = if parts
        .iter()
        .all(|p| p.2.request_rate.as_ref().is_some_and(Value::is_number))
    {
        let total: f64 = parts
            .iter()
            .filter_map(|p| p.2.request_rate.as_ref().and_then(Value::as_f64))
            .sum();
        Some(json!(total))
    } else {
        base.request_rate.clone()
    };

    // Latencies.
    let named: Vec<String> = parts
        .iter()
        .map(|(run, _, l)| format!("{}/{}", run.name, level_name(l, key)))
        .collect();
    let metric_parts: Vec<Part<'_>> = parts
        .iter()
        .zip(&named)
        .map(|((_, _, level), name)| Part { name, level })
        .collect();
    let mut stats = Map::new();
    let mut histograms = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let mut merged: BTreeMap<&str, MergedMetric> = BTreeMap::new();
    // Which percentiles are numpy-linear over every value and which are
    // the merged histogram's (within 0.1%): a reader can tell.
    let mut source = Map::new();
    for metric in LATENCY_METRICS {
        let m = merge_metric(metric, &metric_parts, percentiles)?;
        if m.count == 0 {
            // ttfc's keys only when some request reasoned first.
            if metric != "ttfc" {
                MergedMetric::insert_nulls(metric, percentiles, &mut stats);
            }
            continue;
        }
        m.insert_keys(metric, &mut stats);
        source.insert(
            metric.into(),
            json!(if m.exact { "samples" } else { "histogram" }),
        );
        histograms.insert(format!("{metric}_ms"), m.histogram.to_base64()?);
        if let Some(values) = &m.samples {
            samples.insert(format!("{metric}_ms"), values.clone());
        }
        merged.insert(metric, m);
    }
    stats.insert("percentiles_from".into(), Value::Object(source));
    let stream_decode_tok_s = merged
        .get("tpot")
        .and_then(|m| m.median)
        .filter(|t| *t > 0.0)
        .and_then(|t| finite(1000.0 / t));

    let errors = parts.iter().try_fold(BTreeMap::new(), |mut acc, p| {
        for (class, n) in p.2.errors.as_ref()? {
            *acc.entry(class.clone()).or_insert(0) += n;
        }
        Some(acc)
    });
    let goodput = parts
        .iter()
        .map(|p| p.2.goodput.as_ref()?.get("good")?.as_u64())
        .collect::<Option<Vec<u64>>>()
        .map(|good| good.iter().sum::<u64>());
    let answered = completed.unwrap_or(0) + failed.unwrap_or(0);
    let goodput_rate = goodput.and_then(|g| rate(Some(g)));
    let lengths = |pick: fn(&LevelFile) -> Option<&Value>| {
        merge_lengths(&parts.iter().map(|p| (p.2, pick(p.2))).collect::<Vec<_>>())
    };
    let rx = |k: &str| {
        sum(parts
            .iter()
            .map(|p| p.2.rx_clock.as_ref().and_then(|r| r.get(k)?.as_u64())))
    };
    let mean_of = |tokens: Option<u64>| {
        let c = completed.filter(|c| *c > 0)?;
        Some(round3(tokens? as f64 / c as f64))
    };
    let mut traffic = json!({
        "profile": base.profile,
        "input_mean": mean_of(input_tokens),
        "output_mean": mean_of(output_tokens),
    });
    if let (Value::Object(t), Some(r)) = (
        &mut traffic,
        base.traffic.as_ref().and_then(|t| t.get("range_ratio")),
    ) {
        t.insert("range_ratio".into(), r.clone());
    }

    let mut shards: Vec<ShardEntry> = Vec::new();
    for (run, h, level) in parts {
        if let Some(inner) = fields::level_shards(level).filter(|_| h.merged) {
            shards.extend(inner);
            continue;
        }
        let shard = level
            .shard
            .clone()
            .or_else(|| run.summary.run.shard.clone());
        shards.push(ShardEntry {
            index: h.indexes[0],
            host: shard.as_ref().and_then(|s| s.host.clone()),
            completed: level.completed,
            clock_offset_ms: shard.as_ref().and_then(|s| s.clock_offset_ms),
            clock_offset_error_ms: shard.and_then(|s| s.clock_offset_error_ms),
            client: level.client.clone().filter(|c| *c != ClientLoad::default()),
        });
    }
    shards.sort_by_key(|s| s.index);

    let mut level = LevelFile {
        schema_version: Some(SCHEMA_VERSION),
        date: base.date.clone(),
        backend: base.backend.clone(),
        model_id: base.model_id.clone(),
        num_prompts: sum(parts.iter().map(|p| p.2.num_prompts)),
        max_concurrency: Some(concurrency),
        request_rate,
        burstiness: base.burstiness,
        duration,
        completed,
        failed,
        total_input_tokens: input_tokens,
        total_output_tokens: output_tokens,
        request_throughput: rate(completed),
        output_throughput,
        total_token_throughput: rate(sum([input_tokens, output_tokens])),
        request_goodput: goodput_rate.map(round3),
        mode: base.mode.clone(),
        partial: parts.iter().any(|p| p.2.partial),
        level_index: base.level_index,
        started_at_s: level_start
            .filter(|_| run_start.is_finite())
            .map(|s| round3(s - run_start)),
        series: base.series,
        series_label: base.series_label.clone(),
        transition_requests: sum(parts.iter().map(|p| p.2.transition_requests)),
        steady: agreed(parts.iter().map(|p| p.2.steady)),
        steady_reason: None,
        cancelled: sum(parts.iter().map(|p| p.2.cancelled)),
        short_outputs: sum(parts.iter().map(|p| p.2.short_outputs)),
        per_stream_tok_s: output_throughput
            .filter(|_| concurrency > 0)
            .map(|t| t / f64::from(concurrency)),
        stream_decode_tok_s,
        errors,
        token_count_source: agreed(parts.iter().map(|p| p.2.token_count_source.clone())),
        input_len: lengths(|l| l.input_len.as_ref()),
        output_len: lengths(|l| l.output_len.as_ref()),
        rx_clock: match (rx("kernel"), rx("user")) {
            (None, None) => None,
            (k, u) => Some(json!({"kernel": k.unwrap_or(0), "user": u.unwrap_or(0)})),
        },
        goodput: goodput.map(|good| {
            json!({
                "good": good,
                "share": if answered > 0 { round4(good as f64 / answered as f64) } else { 0.0 },
                "rate_per_s": goodput_rate.map(round4),
            })
        }),
        traffic: Some(traffic),
        engine: base.engine.clone(),
        engine_version: base.engine_version.clone(),
        profile: base.profile.clone(),
        input_len_target: base.input_len_target,
        output_len_target: base.output_len_target,
        ignore_eos: base.ignore_eos,
        extra_body: base.extra_body.clone(),
        labels: base.labels.clone(),
        histograms: Some(histograms),
        samples: Some(samples),
        stats,
        ..LevelFile::default()
    };
    level.started_unix_s = level_start;
    level.duration_target = base.duration_target;
    // The union's last answer is the latest shard's.
    level.drain_overrun_s = parts
        .iter()
        .filter_map(|p| p.2.drain_overrun_s)
        .reduce(f64::max);
    fields::set_level_shards(&mut level, &shards);
    Ok((level, warnings))
}

/// Seconds to add to a shard's wall clock to read the server's: its
/// `clock_offset_ms` (server minus host), when that is larger than the
/// offset's own uncertainty; 0 otherwise. A `Date` header has whole
/// seconds, so an offset of -300 +- 500 ms says the clocks agree as far as
/// it can tell, and shifting by it would scatter synchronized hosts.
pub fn clock_correction_s(shard: &ShardSection) -> f64 {
    let Some(offset) = shard.clock_offset_ms.filter(|o| o.is_finite()) else {
        return 0.0;
    };
    let error = shard
        .clock_offset_error_ms
        .filter(|e| e.is_finite() && *e >= 0.0)
        .unwrap_or(0.0);
    if offset.abs() > error {
        offset / 1000.0
    } else {
        0.0
    }
}

/// The decision math's view of a merged level.
fn point(level: &LevelFile) -> LevelPoint {
    let total = level.completed.unwrap_or(0) + level.failed.unwrap_or(0);
    LevelPoint {
        concurrency: level.max_concurrency.unwrap_or(0),
        kind: Mode::parse(level.mode_or_planned()).unwrap_or(Mode::Planned),
        partial: level.partial,
        output_throughput: level.output_throughput.unwrap_or(0.0),
        per_stream_tok_s: level.per_stream_tok_s.unwrap_or(0.0),
        stream_decode_tok_s: level.stream_decode_tok_s,
        p50_ttft_ms: level.stat("median_ttft_ms"),
        p99_ttft_ms: level.percentile("ttft", "99"),
        p99_tpot_ms: level.percentile("tpot", "99"),
        error_rate: if total > 0 {
            level.failed.unwrap_or(0) as f64 / total as f64
        } else {
            0.0
        },
    }
}

fn slo_of(run: &schema::RunSection) -> CapacitySlo {
    let slo = run.slo.clone().unwrap_or_default();
    CapacitySlo {
        ttft_p99_ms: slo.ttft_p99_ms,
        min_stream_tok_s: slo.min_stream_tok_s,
        tpot_p99_ms: slo.tpot_p99_ms,
        max_error_rate: slo.max_error_rate.unwrap_or(DEFAULT_MAX_ERROR_RATE),
    }
}

fn decision_of(levels: &[(String, LevelFile)], series: u64, slo: &CapacitySlo) -> Decision {
    let points: Vec<LevelPoint> = levels
        .iter()
        .filter(|(_, l)| l.series.unwrap_or(0) == series && l.steady != Some(false))
        .map(|(_, l)| point(l))
        .collect();
    decide(&points, slo)
}

fn diagnosis(id: &str, message: String, evidence: Value) -> DiagnosisEntry {
    DiagnosisEntry {
        id: id.into(),
        message,
        evidence,
    }
}

fn merged_summary(
    runs: &[ShardRun],
    held: &[(usize, Holds)],
    levels: &[(String, LevelFile)],
    missing: &[u32],
    warnings: &[String],
) -> SummaryFile {
    let (first_i, first) = (&held[0].0, &held[0].1);
    let base = &runs[*first_i].summary;
    let mut run = base.run.clone();
    let mut indexes: Vec<u32> = held
        .iter()
        .flat_map(|(_, h)| h.indexes.iter().copied())
        .collect();
    indexes.sort_unstable();
    // A merged folder is no one shard: `run.shard` gives way to
    // `run.merged`, which says which shards it holds.
    run.shard = None;
    fields::set_run_merged(
        &mut run,
        &MergedFrom {
            merged_from: Some(indexes.len() as u32),
            count: Some(first.count),
            indexes: Some(indexes.clone()),
            missing: Some(missing.to_vec()),
            other: Map::new(),
        },
    );
    // The earliest shard's start (RFC 3339 UTC strings sort as times).
    run.started_at = held
        .iter()
        .filter_map(|(i, _)| runs[*i].summary.run.started_at.clone())
        .min();

    let slo = slo_of(&run);
    let latest = levels
        .iter()
        .map(|(_, l)| l.series.unwrap_or(0))
        .max()
        .unwrap_or(0);
    let decision = decision_of(levels, latest, &slo);
    let all_points: Vec<LevelPoint> = levels.iter().map(|(_, l)| point(l)).collect();
    let rounds: Vec<Value> = rounds_spread(&all_points)
        .iter()
        .map(|s| s.to_json())
        .collect();

    // Cost: the price the shards were given (in shard 0's cost object),
    // at the merged capacity. The utilization is not saved on its own:
    // cost per million at full use over the effective one gives it back.
    let cost_json = base.cost.as_ref().and_then(|c| {
        let price = number(&c.gpu_price_per_hour)?;
        let capacity = decision.capacity.as_ref().ok()?;
        let utilization = match (
            number(&c.cost_per_m_output),
            number(&c.effective_cost_per_m),
        ) {
            (Some(full), Some(effective)) if effective > 0.0 => Some(full / effective),
            _ => None,
        };
        let figured = cost(
            capacity.output_throughput,
            price,
            number(&c.api_price_per_m),
            utilization,
        );
        schema::typed(figured.to_json())
    });

    let mut diagnoses: Vec<DiagnosisEntry> = [
        run.rounds.and_then(single_round),
        no_rise(&decision),
        no_capacity(&decision),
    ]
    .into_iter()
    .flatten()
    .map(|d| diagnosis(d.id, d.message, d.evidence))
    .collect();
    if !missing.is_empty() {
        diagnoses.push(diagnosis(
            "shards_missing",
            format!(
                "merged without {} (--allow-missing): counts and throughputs are of the {} shards given",
                label(missing, first.count),
                first.count as usize - missing.len()
            ),
            json!({"missing": missing, "count": first.count}),
        ));
    }
    let skews: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("starts differ"))
        .collect();
    if let Some(w) = skews.first() {
        diagnoses.push(diagnosis(
            "shard_start_skew",
            (*w).clone(),
            json!({"levels": skews.len(), "threshold_ms": START_SKEW_WARN_S * 1000.0}),
        ));
    }

    let series: Vec<Value> = levels
        .iter()
        .map(|(_, l)| l.series.unwrap_or(0))
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .map(|index| {
            let d = decision_of(levels, index, &slo);
            let shard0 = base
                .series
                .iter()
                .find(|s| s.get("index").and_then(Value::as_u64) == Some(index));
            let label = levels
                .iter()
                .find(|(_, l)| l.series.unwrap_or(0) == index)
                .and_then(|(_, l)| l.series_label.clone());
            json!({
                "index": index,
                "label": label,
                "server": shard0.and_then(|s| s.get("server")).cloned().unwrap_or(Value::Null),
                "knee": d.knee_json(),
                "capacity": d.capacity_json(),
            })
        })
        .collect();

    let (mut completed, mut input, mut output) = (0u64, 0u64, 0u64);
    for (_, l) in levels {
        completed += l.completed.unwrap_or(0);
        input += l.total_input_tokens.unwrap_or(0);
        output += l.total_output_tokens.unwrap_or(0);
    }
    let mean = |t: u64| (completed > 0).then(|| round3(t as f64 / completed as f64));
    let mut traffic = json!({
        "profile": run.profile,
        "input_mean": mean(input),
        "output_mean": mean(output),
    });
    if let (Value::Object(t), Some(r)) = (&mut traffic, base.traffic.get("range_ratio")) {
        t.insert("range_ratio".into(), r.clone());
    }

    let mut other = Map::new();
    other.insert(
        "merge".into(),
        json!({
            "inputs": held.iter().map(|(i, _)| runs[*i].name.clone()).collect::<Vec<_>>(),
            "missing": missing,
            "warnings": warnings,
        }),
    );
    SummaryFile {
        schema_version: Some(SCHEMA_VERSION),
        tokbench_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        run,
        traffic,
        dataset: base.dataset.clone(),
        levels: levels
            .iter()
            .map(|(name, l)| LevelFile {
                histograms: None,
                samples: None,
                file: Some(name.clone()),
                ..l.clone()
            })
            .collect(),
        knee: schema::typed(decision.knee_json()),
        capacity: schema::typed(decision.capacity_json()),
        series,
        capacity_reason: Some(decision.capacity_line()),
        cost: cost_json,
        diagnoses,
        rounds,
        warmup: Value::Null,
        search: None,
        resumed: None,
        target_changes: Vec::new(),
        other,
    }
}
