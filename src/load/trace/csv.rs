//! The CSV traces: BurstGPT's (`Timestamp,Model,Request tokens,Response
//! tokens,Total tokens,Log Type`, seconds from the trace's start) and
//! Azure's LLM inference traces (`TIMESTAMP,ContextTokens,GeneratedTokens`,
//! a UTC date and time). Columns are found by their header, in any order;
//! fields hold no commas in either, and quotes around a field are dropped.

use color_eyre::eyre::{bail, eyre, Result};

use super::ReplayEntry;
use crate::workload::MAX_LEN_TOKENS;

/// The columns each format must have.
pub(super) const BURSTGPT: [&str; 4] = ["Timestamp", "Model", "Request tokens", "Response tokens"];
pub(super) const AZURE: [&str; 3] = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];

/// A header name as compared: lower case, spaces and dashes as `_`.
pub(crate) fn normalize(name: &str) -> String {
    name.trim()
        .trim_matches('"')
        .to_lowercase()
        .replace([' ', '-'], "_")
}

pub(super) fn header(line: &str) -> Vec<String> {
    line.trim_start_matches('\u{feff}')
        .split(',')
        .map(normalize)
        .collect()
}

/// The rows of a CSV trace as maps from column to field, with their line
/// numbers, after the header; `need` must all be there.
struct Rows<'a> {
    columns: Vec<String>,
    lines: Vec<(usize, Vec<&'a str>)>,
}

fn rows<'a>(text: &'a str, need: &[&str]) -> Result<Rows<'a>> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, head)) = lines.next() else {
        bail!("the trace is empty");
    };
    let columns = header(head);
    for c in need {
        if !columns.contains(&normalize(c)) {
            bail!("line 1: no \"{c}\" column (the header has {})", head.trim());
        }
    }
    let lines = lines
        .map(|(i, l)| {
            (
                i + 1,
                l.split(',').map(|f| f.trim().trim_matches('"')).collect(),
            )
        })
        .collect();
    Ok(Rows { columns, lines })
}

impl<'a> Rows<'a> {
    fn field(&self, row: &[&'a str], column: &str, n: usize) -> Result<&'a str> {
        let key = normalize(column);
        let at = self
            .columns
            .iter()
            .position(|c| *c == key)
            .ok_or_else(|| eyre!("line {n}: no \"{column}\" column"))?;
        row.get(at).copied().ok_or_else(|| {
            eyre!(
                "line {n}: \"{column}\" is missing (the row has {} fields)",
                row.len()
            )
        })
    }

    /// Whether `row` passes every `--trace-filter`.
    fn keep(&self, row: &[&str], filters: &[(String, String)], n: usize) -> Result<bool> {
        for (column, want) in filters {
            let Some(at) = self.columns.iter().position(|c| c == column) else {
                bail!(
                    "--trace-filter {column}=...: the trace has no such column (it has {})",
                    self.columns.join(", ")
                );
            };
            let value = row.get(at).copied().unwrap_or_default();
            if !value.eq_ignore_ascii_case(want) {
                return Ok(false);
            }
            let _ = n;
        }
        Ok(true)
    }
}

/// A token count field: a whole number, 0 allowed where `zero_ok`.
fn tokens(v: &str, column: &str, n: usize, zero_ok: bool) -> Result<u32> {
    let low = u32::from(!zero_ok);
    v.parse::<u64>()
        .ok()
        .filter(|t| (u64::from(low)..=u64::from(MAX_LEN_TOKENS)).contains(t))
        .map(|t| t as u32)
        .ok_or_else(|| {
            eyre!(
                "line {n}: \"{column}\" must be a whole number from {low} to {} (it is {v:?})",
                crate::fmt::group(f64::from(MAX_LEN_TOKENS), 0)
            )
        })
}

pub(super) fn parse_burstgpt(text: &str, filters: &[(String, String)]) -> Result<Vec<ReplayEntry>> {
    parse_rows(
        text,
        &BURSTGPT,
        filters,
        ["Request tokens", "Response tokens"],
        |ts, n| {
            ts.parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t >= 0.0)
                .ok_or_else(|| eyre!("line {n}: \"Timestamp\" must be seconds >= 0 (it is {ts:?})"))
        },
    )
}

pub(super) fn parse_azure(text: &str, filters: &[(String, String)]) -> Result<Vec<ReplayEntry>> {
    parse_rows(
        text,
        &AZURE,
        filters,
        ["ContextTokens", "GeneratedTokens"],
        |ts, n| {
            utc_seconds(ts).ok_or_else(|| {
            eyre!("line {n}: \"TIMESTAMP\" must be a date and time like 2023-11-16 18:15:46.6805900 (it is {ts:?})")
        })
        },
    )
}

/// The entries of a CSV trace whose columns are `need` (the time first),
/// with the prompt and output token columns `lengths`, its time read by
/// `time`. A failed request may log 0 output tokens: it still asked for one.
fn parse_rows(
    text: &str,
    need: &[&str],
    filters: &[(String, String)],
    lengths: [&str; 2],
    time: impl Fn(&str, usize) -> Result<f64>,
) -> Result<Vec<ReplayEntry>> {
    let rows = rows(text, need)?;
    let mut out = Vec::new();
    for (n, row) in &rows.lines {
        let n = *n;
        if !rows.keep(row, filters, n)? {
            continue;
        }
        let t = time(rows.field(row, need[0], n)?, n)?;
        let [input_col, output_col] = lengths;
        let input = tokens(rows.field(row, input_col, n)?, input_col, n, false)?;
        let output = tokens(rows.field(row, output_col, n)?, output_col, n, true)?;
        out.push(entry(t, input, output.max(1)));
        if out.len() > super::MAX_ENTRIES {
            bail!("the trace has more than {} entries", super::MAX_ENTRIES);
        }
    }
    Ok(out)
}

fn entry(t: f64, input: u32, output: u32) -> ReplayEntry {
    ReplayEntry {
        t,
        input_len: Some(input),
        output_len: Some(output),
        prompt: None,
        blocks: None,
    }
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]` (or with `T`, a trailing `Z`) as seconds
/// since 1970 UTC. Only differences are used, so the zone does not matter.
pub(crate) fn utc_seconds(s: &str) -> Option<f64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let mut hms = time.split(':');
    let (h, mi): (i64, i64) = (hms.next()?.parse().ok()?, hms.next()?.parse().ok()?);
    let sec: f64 = hms.next()?.parse().ok()?;
    if hms.next().is_some()
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0.0..61.0).contains(&sec)
    {
        return None;
    }
    Some((crate::time::days_from_civil(y, m, day) * 86_400 + h * 3600 + mi * 60) as f64 + sec)
}
