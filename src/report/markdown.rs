//! `tokbench report --format md`: the sweep as a Markdown table with the
//! verdicts under it, ready to paste into a GitHub issue or a chat.

use std::fmt::Write;

use super::formats::{fixed1, level_marks};
use super::saved::SavedRun;

/// The whole Markdown report.
pub(crate) fn render_markdown(run: &SavedRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## tokbench: {} on {}, {}, profile {}",
        cell(run.model_name()),
        cell(&run.engine_name()),
        run.shape(),
        cell(run.run.profile.as_deref().unwrap_or("?"))
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

/// Target, backend, EOS policy, start time, labels, version: one line.
fn meta_line(run: &SavedRun) -> String {
    let mut parts = run.meta_parts(code, cell);
    parts.push(format!(
        "tokbench {}",
        run.tokbench_version.as_deref().unwrap_or("?")
    ));
    parts.join(" · ")
}

fn table(run: &SavedRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| streams | per-stream tok/s | stream decode tok/s | total output tok/s | \
         TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | failed | note |"
    );
    let _ = writeln!(out, "|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    if run.levels.is_empty() {
        let _ = writeln!(out, "| - | - | - | - | - | - | - | - | no finished level |");
    }
    for level in &run.levels {
        let marks = level_marks(run, level);
        let streams = level
            .concurrency
            .map_or_else(|| "-".into(), |c| c.to_string());
        let streams = if marks.capacity {
            format!("**{streams}**")
        } else {
            streams
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            streams,
            fixed1(level.per_stream_tok_s),
            fixed1(level.stream_decode_tok_s),
            fixed1(level.output_throughput),
            fixed1(level.ttft_p50_ms),
            fixed1(level.ttft_p99_ms),
            fixed1(level.tpot_p50_ms),
            level.failed.map_or_else(|| "-".into(), |f| f.to_string()),
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
