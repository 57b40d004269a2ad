//! `tokbench report --format csv`: one row per level, vLLM's key names as the
//! header, so spreadsheets and the scripts users already have line up.

use serde_json::Value;

use super::saved::SavedRun;
use super::schema::LATENCY_METRICS;

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
            let known = LATENCY_METRICS.iter().any(|m| metric == format!("{m}_ms"));
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
    // Several series (a tune's settings, servers compared by hand): which
    // one each row is, only then, so other runs' columns stay as they were.
    let first_series = run.levels.first().map(|l| l.series);
    if run.levels.iter().any(|l| Some(l.series) != first_series) {
        let after = columns
            .iter()
            .position(|c| c == "max_concurrency")
            .map_or(0, |i| i + 1);
        columns.insert(after, "series_label".into());
    }
    // Each latency family as mean, median, std and every saved percentile.
    // TTFC only where a level has it (a reasoning model's run), so other
    // runs' columns stay as they always were.
    let reasoned = run
        .levels
        .iter()
        .any(|l| l.raw.contains_key("mean_ttfc_ms"));
    for m in LATENCY_METRICS.iter().filter(|m| **m != "ttfc" || reasoned) {
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
    fn a_reasoning_run_gets_its_ttfc_columns() {
        let run = |level: serde_json::Value| {
            SavedRun::from_value(
                serde_json::json!({"levels": [level]}),
                std::path::Path::new("r/summary.json"),
            )
            .expect("reads")
        };
        let plain = run(
            serde_json::json!({"max_concurrency": 1, "mean_ttft_ms": 10.0,
                                           "p99_ttft_ms": 12.0}),
        );
        let header = render_csv(&plain);
        let header = header.lines().next().expect("a header");
        assert!(header.contains(",p99_ttft_ms,"), "{header}");
        assert!(!header.contains("ttfc"), "{header}");
        let reasoned = run(
            serde_json::json!({"max_concurrency": 1, "mean_ttft_ms": 10.0,
                                              "p99_ttft_ms": 12.0, "mean_ttfc_ms": 80.5,
                                              "p99_ttfc_ms": 95.0}),
        );
        let text = render_csv(&reasoned);
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
        let row: Vec<&str> = lines.next().expect("a row").split(',').collect();
        let at = |name: &str| header.iter().position(|c| *c == name).expect(name);
        assert_eq!(row[at("mean_ttfc_ms")], "80.5");
        assert_eq!(row[at("p99_ttfc_ms")], "95.0");
        // After the other families, before the trailing columns.
        assert!(at("p99_ttfb_ms") < at("mean_ttfc_ms") && at("mean_ttfc_ms") < at("errors"));
    }

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
