//! `--replay FILE`: a request log sent on its own timeline. One JSON object
//! per line: `{"t": seconds_from_start, "input_len": N, "output_len": M}`,
//! or with `"prompt": "..."` instead of `input_len`. A log is a schedule, so
//! a bad line stops the run before anything is sent, naming the line.

use color_eyre::eyre::{bail, eyre, Result};
use serde_json::Value;

use crate::workload::length_field;

/// Most entries a log may hold (every entry is kept in memory).
pub(crate) const MAX_ENTRIES: usize = 10_000_000;

#[derive(Clone, Debug, PartialEq)]
pub struct ReplayEntry {
    /// Seconds from the log's start.
    pub t: f64,
    pub input_len: Option<u32>,
    pub output_len: Option<u32>,
    pub prompt: Option<String>,
    /// A trace's hash ids (`load::trace`): one per block of prompt tokens;
    /// two entries sharing a leading run of ids share that prompt prefix.
    pub blocks: Option<Vec<u64>>,
}

/// Entries in time order (a log need not be sorted).
pub(crate) fn parse(text: &str) -> Result<Vec<ReplayEntry>> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let n = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line)
            .map_err(|e| eyre!("replay line {n}: not valid JSON ({e})"))?;
        let Value::Object(map) = value else {
            bail!("replay line {n}: not a JSON object");
        };
        let t = match map.get("t").and_then(Value::as_f64) {
            Some(t) if t.is_finite() && t >= 0.0 => t,
            _ => bail!("replay line {n}: \"t\" must be a number of seconds >= 0"),
        };
        let length = |key: &str| -> Result<Option<u32>> {
            length_field(map.get(key))
                .map_err(|must| eyre!("replay line {n}: \"{key}\" must be {must}"))
        };
        let prompt = match map.get("prompt") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) if !p.trim().is_empty() => Some(p.clone()),
            Some(_) => bail!("replay line {n}: \"prompt\" must be a non-empty string"),
        };
        entries.push(ReplayEntry {
            t,
            input_len: length("input_len")?,
            output_len: length("output_len")?,
            prompt,
            blocks: None,
        });
        if entries.len() > MAX_ENTRIES {
            bail!("replay log has more than {MAX_ENTRIES} entries");
        }
    }
    if entries.is_empty() {
        bail!("replay log has no entries");
    }
    entries.sort_by(|a, b| a.t.total_cmp(&b.t));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lengths_and_prompts_in_time_order() {
        let log = "{\"t\": 1.5, \"input_len\": 100, \"output_len\": 20}\n\n{\"t\": 0, \"prompt\": \"hi there\", \"output_len\": 5}\n";
        let entries = parse(log).expect("parses");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].t, 0.0);
        assert_eq!(entries[0].prompt.as_deref(), Some("hi there"));
        assert_eq!(entries[1].input_len, Some(100));
        assert_eq!(entries[1].output_len, Some(20));
    }

    #[test]
    fn bad_lines_are_named() {
        let err = |log: &str| parse(log).expect_err("rejects").to_string();
        assert_eq!(
            err("{\"t\": 0}\n{\"t\": -1}"),
            "replay line 2: \"t\" must be a number of seconds >= 0"
        );
        assert!(err("{\"t\": 0}\nnope").starts_with("replay line 2: not valid JSON"));
        assert!(err("{\"t\": 0, \"output_len\": 0}").contains("\"output_len\" must be"));
        assert_eq!(err("\n\n"), "replay log has no entries");
    }
}
