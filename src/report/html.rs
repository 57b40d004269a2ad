//! `tokbench report --format html`: one self-contained page (inline CSS, the
//! chart inline as SVG, no external assets) with the title, the chart, the
//! sweep table and the verdicts.

use std::fmt::Write;

use super::formats::{fixed1, level_marks};
use super::frontier::render_frontier_svg;
use super::saved::SavedRun;
use super::svg::{esc, render_throughput_svg};

const STYLE: &str = "\
body{margin:0;background:#f9fafb;color:#1f2937;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
main{max-width:860px;margin:0 auto;padding:24px 16px 48px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:16px;margin:28px 0 8px}
.meta{color:#6b7280;font-size:13px;margin:0 0 16px}
.meta code,td code{font-size:12px}
figure{margin:0;background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:8px}
figure svg{display:block;max-width:100%;height:auto}
table{border-collapse:collapse;width:100%;background:#fff;font-size:14px;font-variant-numeric:tabular-nums}
th,td{padding:6px 8px;border-bottom:1px solid #e5e7eb;text-align:right;white-space:nowrap}
th{background:#f3f4f6;font-weight:600;white-space:normal;vertical-align:bottom;font-size:13px}
.scroll{overflow-x:auto}
td.note,th.note{text-align:left;color:#6b7280}
tr.capacity td{background:#ecfdf5;font-weight:600}
dl{display:grid;grid-template-columns:max-content 1fr;gap:6px 16px;margin:0}
dt{font-weight:600}
dd{margin:0}
ul{margin:0;padding-left:20px}
footer{margin-top:32px;color:#9ca3af;font-size:12px}
";

pub(crate) fn render_html(run: &SavedRun) -> String {
    let title = format!(
        "tokbench: {} on {}, {}{}",
        run.model_name(),
        run.engine_name(),
        run.shape(),
        crate::workload::profile::profile_words(run.run.profile.as_deref())
            .map(|p| format!(", {p}"))
            .unwrap_or_default()
    );
    let mut h = String::new();
    let _ = writeln!(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>");
    let _ = writeln!(h, "<meta charset=\"utf-8\">");
    let _ = writeln!(
        h,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    );
    let _ = writeln!(h, "<title>{}</title>", esc(&title));
    let _ = writeln!(h, "<style>\n{STYLE}</style>\n</head>\n<body>\n<main>");
    let _ = writeln!(h, "<h1>{}</h1>", esc(&title));
    let _ = writeln!(h, "<p class=\"meta\">{}</p>", meta(run));
    if let Some(tune) = &run.tune {
        tune_section(&mut h, tune);
    }
    let _ = writeln!(h, "<figure>\n{}</figure>", render_throughput_svg(run));
    // The frontier: what each user gets against what the server gives.
    let _ = writeln!(
        h,
        "<h2>Interactivity against throughput</h2>\n<figure>\n{}</figure>",
        render_frontier_svg(run)
    );

    let _ = writeln!(
        h,
        "<h2>Sweep</h2>\n<div class=\"scroll\">\n<table>\n<thead><tr>"
    );
    let gpus = run.run.gpus.filter(|g| *g > 0);
    let per_gpu_head = gpus.map(|n| format!("output tok/s per GPU ({n})"));
    for head in [
        "streams",
        "per-stream tok/s",
        "stream decode tok/s",
        "total output tok/s",
    ]
    .into_iter()
    .chain(per_gpu_head.as_deref())
    .chain(["TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "failed"])
    {
        let _ = write!(h, "<th>{}</th>", esc(head));
    }
    let _ = writeln!(h, "<th class=\"note\">note</th></tr></thead>\n<tbody>");
    if run.levels.is_empty() {
        let _ = writeln!(
            h,
            "<tr><td colspan=\"{}\" class=\"note\">no finished level</td></tr>",
            9 + usize::from(gpus.is_some())
        );
    }
    for level in &run.levels {
        let marks = level_marks(run, level);
        let class = if marks.capacity {
            " class=\"capacity\""
        } else {
            ""
        };
        let mut cells = vec![
            super::formats::streams_cell(level),
            fixed1(level.per_stream_tok_s),
            fixed1(level.stream_decode_tok_s),
            fixed1(level.output_throughput),
        ];
        if let Some(n) = gpus {
            cells.push(fixed1(level.output_throughput.map(|t| t / f64::from(n))));
        }
        cells.extend([
            fixed1(level.ttft_p50_ms),
            fixed1(level.ttft_p99_ms),
            fixed1(level.tpot_p50_ms),
            level.failed.map_or_else(|| "-".into(), |f| f.to_string()),
        ]);
        let _ = write!(h, "<tr{class}>");
        for c in cells {
            let _ = write!(h, "<td>{}</td>", esc(&c));
        }
        let _ = writeln!(
            h,
            "<td class=\"note\">{}</td></tr>",
            esc(&marks.notes.join(", "))
        );
    }
    let _ = writeln!(h, "</tbody>\n</table>\n</div>");

    let _ = writeln!(h, "<h2>Verdict</h2>\n<dl>");
    let _ = writeln!(h, "<dt>Capacity</dt><dd>{}</dd>", esc(&run.capacity_text()));
    let _ = writeln!(h, "<dt>Knee</dt><dd>{}</dd>", esc(&run.knee_text()));
    let cost = run.cost_text();
    let _ = writeln!(h, "<dt>Cost</dt><dd>{}</dd>", esc(&cost));
    if let Some(slo) = run.slo_text() {
        let _ = writeln!(h, "<dt>SLO</dt><dd>{}</dd>", esc(&slo));
    }
    let _ = writeln!(h, "</dl>\n<h2>Diagnoses</h2>\n<ul>");
    if run.diagnoses.is_empty() {
        let _ = writeln!(h, "<li>none fired</li>");
    }
    for d in &run.diagnoses {
        let _ = writeln!(h, "<li title=\"{}\">{}</li>", esc(&d.id), esc(&d.message));
    }
    let _ = writeln!(
        h,
        "</ul>\n<footer>tokbench {} · from {}</footer>\n</main>\n</body>\n</html>",
        esc(run.tokbench_version.as_deref().unwrap_or("?")),
        esc(&run.source.display().to_string())
    );
    h
}

fn meta(run: &SavedRun) -> String {
    run.meta_parts(|v| format!("<code>{}</code>", esc(v)), esc)
        .join(" · ")
}

/// A tune: which setting to keep, its table and what is said under it.
fn tune_section(h: &mut String, tune: &super::schema::TuneSection) {
    use super::tune_text::{tune_notes, tune_rows, tune_sentence};
    let _ = writeln!(h, "<h2>Tune: which setting to keep</h2>");
    let _ = writeln!(h, "<p><strong>{}</strong></p>", esc(&tune_sentence(tune)));
    let _ = writeln!(h, "<div class=\"scroll\">\n<table>");
    for (i, row) in tune_rows(tune).iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        let cells: String = row
            .iter()
            .map(|c| format!("<{cell}>{}</{cell}>", esc(c)))
            .collect();
        let _ = writeln!(h, "<tr>{cells}</tr>");
    }
    let _ = writeln!(h, "</table>\n</div>");
    for note in tune_notes(tune) {
        let _ = writeln!(h, "<p class=\"meta\">{}</p>", esc(&note));
    }
}
