//! Mooncake's and Bailian's JSONL traces: one request a line,
//! `{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [..]}`.
//! Other keys (`chat_id`, `turn`, ...) are left alone.

use color_eyre::eyre::{bail, eyre, Result};
use serde_json::Value;

use super::ReplayEntry;
use crate::workload::length_field;

pub(super) fn parse(text: &str) -> Result<Vec<ReplayEntry>> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let n = index + 1;
        let line = line.trim().trim_start_matches('\u{feff}');
        if line.is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| eyre!("line {n}: not valid JSON ({e})"))?;
        let Value::Object(map) = value else {
            bail!("line {n}: not a JSON object");
        };
        let t = match map.get("timestamp").and_then(Value::as_f64) {
            Some(ms) if ms.is_finite() && ms >= 0.0 => ms / 1000.0,
            _ => bail!("line {n}: \"timestamp\" must be milliseconds >= 0"),
        };
        let length = |key: &str| -> Result<Option<u32>> {
            length_field(map.get(key)).map_err(|must| eyre!("line {n}: \"{key}\" must be {must}"))
        };
        let input_len = length("input_length")?
            .ok_or_else(|| eyre!("line {n}: \"input_length\" is missing"))?;
        let output_len = length("output_length")?
            .ok_or_else(|| eyre!("line {n}: \"output_length\" is missing"))?;
        let blocks = match map.get("hash_ids") {
            None | Some(Value::Null) => None,
            Some(Value::Array(ids)) => Some(
                ids.iter()
                    .map(|id| id.as_u64())
                    .collect::<Option<Vec<u64>>>()
                    .ok_or_else(|| {
                        eyre!("line {n}: \"hash_ids\" must be a list of whole numbers >= 0")
                    })?,
            ),
            Some(_) => bail!("line {n}: \"hash_ids\" must be a list of whole numbers >= 0"),
        };
        entries.push(ReplayEntry {
            t,
            input_len: Some(input_len),
            output_len: Some(output_len),
            prompt: None,
            blocks,
        });
        if entries.len() > super::MAX_ENTRIES {
            bail!("the trace has more than {} entries", super::MAX_ENTRIES);
        }
    }
    Ok(entries)
}
