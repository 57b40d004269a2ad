//! `--replay FILE`: a request log or a published production trace, read into
//! one schedule. The formats, told apart by the file's extension and its
//! first line, or named with `--trace-format`:
//!
//! - `tokbench`: tokbench's own JSONL (`{"t", "input_len", "output_len"}` or
//!   with `"prompt"`; `load::replay`);
//! - `mooncake` and `bailian`: JSONL with `timestamp` (ms), `input_length`,
//!   `output_length` and `hash_ids` (one id per block of prompt tokens: 512 in
//!   Mooncake's traces, 16 in Bailian's; `--trace-block-tokens` overrides);
//! - `burstgpt`: CSV `Timestamp,Model,Request tokens,Response tokens,Total
//!   tokens,Log Type` (seconds);
//! - `azure`: CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (a UTC date and
//!   time).
//!
//! A trace is a schedule: every line is read and checked before anything is
//! sent, and a bad line stops the run naming the file, the line and the field.

mod csv;
mod mooncake;

use std::collections::HashSet;
use std::path::Path;

use color_eyre::eyre::{bail, eyre, Result, WrapErr};

pub use super::replay::ReplayEntry;

/// Most entries a trace may hold (every entry is kept in memory).
pub(crate) const MAX_ENTRIES: usize = super::replay::MAX_ENTRIES;

/// The shapes `--replay` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Tokbench,
    Mooncake,
    Bailian,
    BurstGpt,
    Azure,
}

impl TraceFormat {
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Tokbench => "tokbench",
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::Bailian => "bailian",
            TraceFormat::BurstGpt => "burstgpt",
            TraceFormat::Azure => "azure",
        }
    }

    /// `--trace-format` values.
    pub fn parse(s: &str) -> Option<TraceFormat> {
        [
            TraceFormat::Tokbench,
            TraceFormat::Mooncake,
            TraceFormat::Bailian,
            TraceFormat::BurstGpt,
            TraceFormat::Azure,
        ]
        .into_iter()
        .find(|f| f.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Tokens one hash id stands for, as the trace was published.
    fn block_tokens(self) -> Option<u32> {
        match self {
            TraceFormat::Mooncake => Some(512),
            TraceFormat::Bailian => Some(16),
            _ => None,
        }
    }
}

/// How to read a trace, from the flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceOptions {
    /// `--trace-format`; None: from the extension and the first line.
    pub format: Option<TraceFormat>,
    /// `--trace-block-tokens`: tokens per hash id, over the format's own.
    pub block_tokens: Option<u32>,
    /// `--trace-filter COLUMN=VALUE` (CSV traces): rows whose column has
    /// that value, case-insensitively; all must hold.
    pub filters: Vec<(String, String)>,
    /// `--replay-window START..END`: seconds of the trace's own clock; the
    /// window's start becomes the replay's time 0.
    pub window: Option<(f64, f64)>,
    /// `--replay-max-requests N`: the first N (after the window).
    pub max_requests: Option<usize>,
}

/// A trace read and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    /// Entries in time order, from 0 s.
    pub entries: Vec<ReplayEntry>,
    /// Tokens per hash id, for traces that have them.
    pub block_tokens: Option<u32>,
}

impl Trace {
    /// The trace's own prefix reuse: the share of prompt tokens in blocks an
    /// earlier request of the trace already had. None without hash ids.
    pub fn reuse(&self) -> Option<f64> {
        prefix_reuse(&self.entries, self.block_tokens?)
    }
}

/// Read `path` as `opts` say.
pub(crate) fn load(path: &Path, opts: &TraceOptions) -> Result<Trace> {
    let text = std::fs::read_to_string(path)
        .wrap_err_with(|| format!("cannot read the replay trace {}", path.display()))?;
    let format = match opts.format {
        Some(f) => f,
        None => detect(path, &text).map_err(|e| eyre!("{}: {e}", path.display()))?,
    };
    let (entries, block_tokens) =
        parse(format, &text, opts).map_err(|e| eyre!("{}: {e}", path.display()))?;
    Ok(Trace {
        format,
        entries,
        block_tokens,
    })
}

/// What the file is, from its extension and its first non-empty line.
pub(crate) fn detect(path: &Path, text: &str) -> Result<TraceFormat> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    let Some(first) = first else {
        bail!("the replay trace is empty");
    };
    let first = first.trim_start_matches('\u{feff}');
    if first.starts_with('{') {
        let value: serde_json::Value =
            serde_json::from_str(first).map_err(|e| eyre!("line 1: not valid JSON ({e})"))?;
        if value.get("hash_ids").is_some() || value.get("input_length").is_some() {
            let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase());
            let bailian = name.is_some_and(|n| n.contains("bailian") || n.contains("qwen"));
            return Ok(if bailian {
                TraceFormat::Bailian
            } else {
                TraceFormat::Mooncake
            });
        }
        if value.get("t").is_some() {
            return Ok(TraceFormat::Tokbench);
        }
        bail!(
            "line 1 is JSON of no known trace: expected tokbench's {{\"t\", \"input_len\", \"output_len\"}} \
             or Mooncake's {{\"timestamp\", \"input_length\", \"output_length\", \"hash_ids\"}} (or name it with --trace-format)"
        );
    }
    let header = csv::header(first);
    if csv::BURSTGPT
        .iter()
        .all(|c| header.contains(&csv::normalize(c)))
    {
        return Ok(TraceFormat::BurstGpt);
    }
    if csv::AZURE
        .iter()
        .all(|c| header.contains(&csv::normalize(c)))
    {
        return Ok(TraceFormat::Azure);
    }
    bail!(
        "line 1 is no known trace header: expected JSONL (tokbench's or Mooncake's), BurstGPT's CSV \
         ({}) or Azure's CSV ({}) (or name it with --trace-format)",
        csv::BURSTGPT.join(","),
        csv::AZURE.join(",")
    )
}

/// Entries of `text` read as `format`, in time order from 0, windowed and
/// cut as `opts` say; and the block size that applies.
pub(crate) fn parse(
    format: TraceFormat,
    text: &str,
    opts: &TraceOptions,
) -> Result<(Vec<ReplayEntry>, Option<u32>)> {
    if !opts.filters.is_empty() && !matches!(format, TraceFormat::BurstGpt | TraceFormat::Azure) {
        bail!(
            "--trace-filter picks rows of a CSV trace (BurstGPT, Azure); this one is {}",
            format.name()
        );
    }
    let mut entries = match format {
        TraceFormat::Tokbench => super::replay::parse(text)?,
        TraceFormat::Mooncake | TraceFormat::Bailian => mooncake::parse(text)?,
        TraceFormat::BurstGpt => csv::parse_burstgpt(text, &opts.filters)?,
        TraceFormat::Azure => csv::parse_azure(text, &opts.filters)?,
    };
    if entries.is_empty() {
        bail!("the replay trace has no entries");
    }
    entries.sort_by(|a, b| a.t.total_cmp(&b.t));
    let entries = cut(entries, opts)?;
    let block_tokens = opts
        .block_tokens
        .or(format.block_tokens())
        .filter(|_| entries.iter().any(|e| e.blocks.is_some()));
    Ok((entries, block_tokens))
}

/// Time from the first entry, the window's slice, the first N.
fn cut(entries: Vec<ReplayEntry>, opts: &TraceOptions) -> Result<Vec<ReplayEntry>> {
    let origin = entries.first().map_or(0.0, |e| e.t);
    let (from, to) = opts.window.unwrap_or((0.0, f64::INFINITY));
    let mut kept: Vec<ReplayEntry> = entries
        .into_iter()
        .filter(|e| {
            let t = e.t - origin;
            t >= from && t < to
        })
        .map(|mut e| {
            e.t = (e.t - origin - from).max(0.0);
            e
        })
        .collect();
    if let Some(n) = opts.max_requests {
        kept.truncate(n);
    }
    if kept.is_empty() {
        bail!(
            "the replay window {from}..{to} s holds no request of the trace (its requests start at 0 s)"
        );
    }
    Ok(kept)
}

/// The share of prompt tokens a prefix cache large enough could answer, in
/// time order: a block counts when the whole prefix up to it (its id and
/// every id before it) came in an earlier request. Bailian's ids hash each
/// block's own content, so the same id after another prefix is no hit, as
/// on a real server. A block is `block_tokens` tokens, the last of a prompt
/// what is left of its length.
pub(crate) fn prefix_reuse(entries: &[ReplayEntry], block_tokens: u32) -> Option<f64> {
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut reused, mut total) = (0u64, 0u64);
    for e in entries {
        let Some(blocks) = &e.blocks else { continue };
        let input = e.input_len.unwrap_or(blocks.len() as u32 * block_tokens);
        let mut chain = 0xcbf2_9ce4_8422_2325u64;
        let mut leading = true;
        for (id, tokens) in block_spans(blocks, block_tokens, input) {
            chain = (chain ^ id).wrapping_mul(0x0100_0000_01b3).rotate_left(17);
            total += u64::from(tokens);
            let had = !seen.insert(chain);
            leading &= had;
            if leading {
                reused += u64::from(tokens);
            }
        }
    }
    (total > 0).then(|| reused as f64 / total as f64)
}

/// Each block of a prompt of `input` tokens with its token count: full
/// blocks, the last one short when the length ends inside it; blocks past
/// the length are dropped.
pub(crate) fn block_spans(
    blocks: &[u64],
    block_tokens: u32,
    input: u32,
) -> impl Iterator<Item = (u64, u32)> + '_ {
    let block = block_tokens.max(1);
    blocks.iter().enumerate().filter_map(move |(i, &id)| {
        let start = (i as u64) * u64::from(block);
        let left = u64::from(input).checked_sub(start)?;
        (left > 0).then(|| (id, left.min(u64::from(block)) as u32))
    })
}

/// `--replay-window START..END` in seconds; END may be left out (`60..`).
pub fn parse_window(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s.split_once("..").ok_or_else(|| {
        format!("--replay-window {s}: expected START..END in seconds, e.g. 60..120")
    })?;
    let num = |v: &str, what: &str| -> Result<f64, String> {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("--replay-window {s}: {what} must be seconds >= 0"))
    };
    let from = if a.trim().is_empty() {
        0.0
    } else {
        num(a, "START")?
    };
    let to = if b.trim().is_empty() {
        f64::INFINITY
    } else {
        num(b, "END")?
    };
    if to <= from {
        return Err(format!("--replay-window {s}: END must be after START"));
    }
    Ok((from, to))
}

/// `--trace-filter COLUMN=VALUE`.
pub fn parse_filter(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
            Ok((csv::normalize(k), v.trim().to_string()))
        }
        _ => Err(format!(
            "--trace-filter {s}: expected COLUMN=VALUE, e.g. --trace-filter model=ChatGPT"
        )),
    }
}

/// How many entries are longer than a context of `context` tokens (prompt
/// plus output), and the first of them (its position in the schedule).
pub(crate) fn over_context(entries: &[ReplayEntry], context: u32) -> (usize, Option<usize>) {
    let mut first = None;
    let mut n = 0;
    for (i, e) in entries.iter().enumerate() {
        let (Some(input), output) = (e.input_len, e.output_len.unwrap_or(1)) else {
            continue;
        };
        if u64::from(input) + u64::from(output) > u64::from(context) {
            n += 1;
            first.get_or_insert(i);
        }
    }
    (n, first)
}

/// An entry cut to a context of `context` tokens: its output kept (at most
/// half the context), its prompt shortened to what is left.
pub(crate) fn clip(entry: &mut ReplayEntry, context: u32) {
    let context = context.max(2);
    let output = entry.output_len.unwrap_or(1).clamp(1, context / 2);
    if let Some(input) = entry.input_len {
        if u64::from(input) + u64::from(entry.output_len.unwrap_or(1)) > u64::from(context) {
            entry.input_len = Some(input.min(context - output));
            entry.output_len = Some(output);
        }
    }
}

#[cfg(test)]
mod tests;
