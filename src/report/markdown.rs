//! `tokbench report --format md`: the sweep as a Markdown table with the
//! verdicts under it, ready to paste into a GitHub issue or a chat.

use std::fmt::Write;

use super::formats::{fixed1, level_marks, streams_cell};
use serde_json::Value;

use super::saved::{SavedLevel, SavedRun};
use crate::analysis::goodput::Slo;

/// The whole Markdown report.
pub(crate) fn render_markdown(run: &SavedRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## tokbench: {} on {}, {}{}",
        cell(run.model_name()),
        cell(&run.engine_name()),
        run.shape(),
        crate::workload::profile::profile_words(run.run.profile.as_deref())
            .map(|p| format!(", {}", cell(&p)))
            .unwrap_or_default()
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", meta_line(run));
    let _ = writeln!(out);
    out.push_str(&table(run));
    let _ = writeln!(out);
    // Several series: each one's result, and the latest against the first.
    let series = run.series_results();
    if series.len() > 1 {
        for line in crate::analysis::series::series_lines(&series) {
            let _ = writeln!(out, "- **Series:** {}", cell(&line));
        }
    }
    if let Some(tune) = &run.tune {
        let _ = writeln!(out, "**Tune: which setting to keep**");
        let _ = writeln!(out);
        let _ = writeln!(out, "```text");
        out.push_str(&super::tune_text::tune_block(tune));
        let _ = writeln!(out, "```");
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "- **Capacity:** {}", cell(&run.capacity_text()));
    let _ = writeln!(out, "- **Knee:** {}", cell(&run.knee_text()));
    let cost = run.cost_text();
    let _ = writeln!(out, "- **Cost:** {}", cell(&cost));
    if let Some(slo) = run.slo_text() {
        let _ = writeln!(out, "- **SLO:** {slo}");
    }
    if let Some(slo) = goodput_slo(run) {
        let _ = writeln!(
            out,
            "- **Goodput:** requests per second within {} (share of requests)",
            slo.words()
        );
    }
    for line in connect_lines(run) {
        let _ = writeln!(out, "- **Connecting:** {}", cell(&line));
    }
    let thresholds: Vec<super::schema::ThresholdEntry> = run
        .raw
        .get("thresholds")
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default();
    if !thresholds.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "**Thresholds**");
        let _ = writeln!(out);
        for entry in &thresholds {
            let label = run.tune.as_ref().and_then(|t| {
                t.settings
                    .iter()
                    .find(|s| s.series.is_some() && s.series == entry.series)
                    .and_then(|s| s.label.as_deref())
            });
            let _ = writeln!(out, "- `{}`", super::thresholds::line(entry, label));
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "**Diagnoses**");
    let _ = writeln!(out);
    if run.diagnoses.is_empty() {
        let _ = writeln!(out, "- none fired");
    }
    for d in &run.diagnoses {
        let _ = writeln!(out, "- {}", cell(&d.message));
    }
    out
}

/// The levels whose connect p99 was over a tenth of their TTFT p99, as the
/// level block said it while the run went on.
fn connect_lines(run: &SavedRun) -> Vec<String> {
    run.levels
        .iter()
        .filter_map(|level| {
            let p99 = |key: &str| level.raw.get(key)?.get("p99")?.as_f64();
            let connect = p99("connect_ms")?;
            let ttft = level.ttft_p99_ms.filter(|t| *t > 0.0)?;
            let share = connect / ttft;
            (share > crate::stats::connect::CONNECT_SHARE_NOTE).then(|| {
                let after = p99("ttft_after_connect_ms")
                    .map(|a| format!("; TTFT after connect p99 {a:.2} ms"))
                    .unwrap_or_default();
                format!(
                    "{} streams: connect p99 {connect:.2} ms, {:.0}% of TTFT p99 {ttft:.2} ms{after}. Warmed keep-alive connections are the usual cure.",
                    streams_cell(level),
                    share * 100.0
                )
            })
        })
        .collect()
}

/// Target, backend, EOS policy, start time, labels, version: one line.
fn meta_line(run: &SavedRun) -> String {
    let mut parts = run.meta_parts(code, cell);
    parts.push(format!(
        "tokbench {}",
        run.tokbench_version.as_deref().unwrap_or("?")
    ));
    parts.join(" · ")
}

/// `--goodput`'s SLOs, where the run was given them.
fn goodput_slo(run: &SavedRun) -> Option<Slo> {
    run.run.goodput_slo.as_ref().and_then(Slo::from_json)
}

/// `3.2 (81%)`: a level's goodput rate and share, `-` where not saved.
fn goodput_cell(level: &SavedLevel) -> String {
    let g = level.raw.get("goodput");
    let share = g.and_then(|g| g.get("share")).and_then(Value::as_f64);
    let rate = g
        .and_then(|g| g.get("rate_per_s"))
        .and_then(Value::as_f64)
        .or_else(|| level.raw.get("request_goodput").and_then(Value::as_f64));
    match (rate, share) {
        (Some(r), Some(s)) => format!("{r:.1} ({:.0}%)", s * 100.0),
        (Some(r), None) => format!("{r:.1}"),
        (None, Some(s)) => format!("({:.0}%)", s * 100.0),
        (None, None) => "-".into(),
    }
}

fn table(run: &SavedRun) -> String {
    let mut out = String::new();
    let goodput = goodput_slo(run).is_some();
    let _ = writeln!(
        out,
        "| streams | per-stream tok/s | stream decode tok/s | total output tok/s | \
         TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | failed |{} note |",
        if goodput { " goodput req/s |" } else { "" }
    );
    let _ = writeln!(
        out,
        "|--:|--:|--:|--:|--:|--:|--:|--:|{}---|",
        if goodput { "--:|" } else { "" }
    );
    if run.levels.is_empty() {
        let _ = writeln!(
            out,
            "| - | - | - | - | - | - | - | - |{} no finished level |",
            if goodput { " - |" } else { "" }
        );
    }
    for level in &run.levels {
        let marks = level_marks(run, level);
        let streams = streams_cell(level);
        let streams = if marks.capacity {
            format!("**{streams}**")
        } else {
            streams
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |{} {} |",
            streams,
            fixed1(level.per_stream_tok_s),
            fixed1(level.stream_decode_tok_s),
            fixed1(level.output_throughput),
            fixed1(level.ttft_p50_ms),
            fixed1(level.ttft_p99_ms),
            fixed1(level.tpot_p50_ms),
            level.failed.map_or_else(|| "-".into(), |f| f.to_string()),
            if goodput {
                format!(" {} |", goodput_cell(level))
            } else {
                String::new()
            },
            cell(&marks.notes.join(", "))
        );
    }
    out
}

/// Text safe inside a table cell or a bullet: no pipes, no line breaks.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Inline code, falling back to plain text when the value holds a backtick.
fn code(s: &str) -> String {
    if s.contains('`') {
        cell(s)
    } else {
        format!("`{}`", cell(s))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    /// Connecting named where its p99 is over a tenth of TTFT p99: at 4
    /// streams 30 of 200 ms is 15% (named, with TTFT after connect p99
    /// 175 ms); at 8 streams 10 of 200 ms is 5% (not named).
    #[test]
    fn a_level_whose_connect_is_a_tenth_of_ttft_is_named() {
        let level = |c: u32, connect: f64| {
            json!({"max_concurrency": c, "mode": "planned", "partial": false,
                   "output_throughput": 100.0, "p99_ttft_ms": 200.0,
                   "connect_ms": {"p50": 1.0, "p99": connect, "mean": 2.0},
                   "ttft_after_connect_ms": {"p50": 100.0, "p99": 175.0, "mean": 110.0}})
        };
        let run = SavedRun::from_value(
            json!({"run": {"model": "m", "input_len": 64, "output_len": 16},
                   "levels": [level(4, 30.0), level(8, 10.0)]}),
            Path::new("s.json"),
        )
        .expect("summary");
        assert_eq!(
            connect_lines(&run),
            vec!["4 streams: connect p99 30.00 ms, 15% of TTFT p99 200.00 ms; TTFT after connect p99 175.00 ms. Warmed keep-alive connections are the usual cure."]
        );
    }

    /// A saved ramp: its row reads `ramp` with the mean in flight as its
    /// streams, and a `--goodput` run's table has the goodput column and
    /// its SLOs in words; a run without `--goodput` has neither.
    #[test]
    fn saved_rows_keep_their_context() {
        let summary = |goodput_slo: serde_json::Value| {
            json!({"run": {"model": "m", "input_len": 64, "output_len": 16, "kind": "ramp",
                           "profile": "custom", "goodput_slo": goodput_slo},
                   "levels": [{"max_concurrency": 4096, "mode": "replay", "partial": false,
                               "output_throughput": 177.3, "per_stream_tok_s": 84.4,
                               "waiting": {"mean": 0.1}, "streaming": {"mean": 2.0},
                               "goodput": {"good": 80, "share": 0.81, "rate_per_s": 3.2}}]})
        };
        let run = SavedRun::from_value(
            summary(json!({"ttft_ms": 500.0, "tpot_ms": 50.0, "e2el_ms": null})),
            Path::new("s.json"),
        )
        .expect("summary");
        let md = render_markdown(&run);
        let row = md
            .lines()
            .find(|l| l.starts_with("| ~"))
            .unwrap_or_else(|| panic!("{md}"));
        assert_eq!(
            row,
            "| ~2.1 | 84.4 | - | 177.3 | - | - | - | - | 3.2 (81%) | ramp |"
        );
        assert!(md.contains("| goodput req/s | note |"), "{md}");
        assert!(
            md.contains("- **Goodput:** requests per second within TTFT<=500 ms, TPOT<=50 ms"),
            "{md}"
        );
        assert!(!md.contains("profile"), "{md}");
        let plain =
            SavedRun::from_value(summary(json!(null)), Path::new("s.json")).expect("summary");
        assert!(!render_markdown(&plain).to_lowercase().contains("goodput"));
    }
}
