//! `tokbench report --format csv`: one row per level, vLLM's key names as the
//! header, so spreadsheets and the scripts users already have line up.

use serde_json::Value;

use super::saved::SavedRun;

/// Identity and throughput columns, in this order, before the latency ones.
const LEAD: &[&str] = &[
    "date",
    "backend",
    "model_id",
    "engine",
    "profile",
    "input_len_target",
    "output_len_target",
    "max_concurrency",
    "mode",
    "partial",
    "num_prompts",
    "completed",
    "failed",
    "duration",
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
    "request_goodput",
    "per_stream_tok_s",
    "stream_decode_tok_s",
    "total_input_tokens",
    "total_output_tokens",
];

/// Latency families, each as mean, median, std and every saved percentile.
const METRICS: &[&str] = &["ttft", "tpot", "itl", "e2el", "ttfb"];

/// Trailing columns.
const TAIL: &[&str] = &["errors", "token_count_source", "file"];

/// Header plus one row per level, in run order.
pub(crate) fn render_csv(run: &SavedRun) -> String {
    let columns = columns(run);
    let mut out = String::new();
    push_row(&mut out, columns.iter().map(|c| quote(c)));
    for level in &run.levels {
        push_row(
            &mut out,
            columns.iter().map(|c| quote(&field(level.raw.get(c)))),
        );
    }
    out
}

/// The header: fixed columns plus the percentile columns any level carries.
fn columns(run: &SavedRun) -> Vec<String> {
    let mut percentiles: Vec<(f64, String)> = Vec::new();
    for level in &run.levels {
        for key in level.raw.keys() {
            let Some(rest) = key.strip_prefix('p') else {
                continue;
            };
            let Some((label, metric)) = rest.split_once('_') else {
                continue;
            };
            let known = METRICS.iter().any(|m| metric == format!("{m}_ms"));
            let Ok(p) = label.parse::<f64>() else {
                continue;
            };
            if known && !percentiles.iter().any(|(_, l)| l == label) {
                percentiles.push((p, label.to_string()));
            }
        }
    }
    percentiles.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut columns: Vec<String> = LEAD.iter().map(|s| s.to_string()).collect();
    for m in METRICS {
        columns.push(format!("mean_{m}_ms"));
        columns.push(format!("median_{m}_ms"));
        columns.push(format!("std_{m}_ms"));
        for (_, label) in &percentiles {
            columns.push(format!("p{label}_{m}_ms"));
        }
    }
    columns.extend(TAIL.iter().map(|s| s.to_string()));
    columns
}

/// A JSON value as a CSV field: numbers as written, null as empty, an
/// `errors` object as `class=count;...`, anything else as compact JSON.
fn field(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Object(map)) if map.values().all(Value::is_number) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";"),
        Some(other) => other.to_string(),
    }
}

/// RFC 4180: quote a field holding a comma, a quote, a line break or edge
/// spaces, doubling the quotes inside.
pub(crate) fn quote(s: &str) -> String {
    let needs = s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ');
    if needs {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn push_row(out: &mut String, fields: impl Iterator<Item = String>) {
    let row: Vec<String> = fields.collect();
    out.push_str(&row.join(","));
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_follows_rfc_4180() {
        assert_eq!(quote("sim"), "sim");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quote("two\nlines"), "\"two\nlines\"");
        assert_eq!(quote(" pad"), "\" pad\"");
    }

    #[test]
    fn fields() {
        assert_eq!(field(None), "");
        assert_eq!(field(Some(&serde_json::json!(null))), "");
        assert_eq!(field(Some(&serde_json::json!(1.5))), "1.5");
        assert_eq!(
            field(Some(&serde_json::json!({"timeout": 2, "http_500": 1}))),
            "http_500=1;timeout=2"
        );
    }
}
