//! The gate's verdict as text (after the side-by-side tables) and as a
//! Markdown table for a pull-request comment, both written from
//! [`CompareVerdict`].

use std::fmt::Write as _;

use super::verdict::{change_text, level_text, value_text, CompareVerdict};

/// The verdict lines and the gate's headline.
pub(crate) fn verdict_text(v: &CompareVerdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(out, "regression gate: {}", v.against());
    if let Some(unlike) = &v.unlike_shapes {
        let _ = writeln!(
            out,
            "  note: this verdict compares unlike runs (--force): {unlike}"
        );
    }
    for f in &v.figures {
        let _ = writeln!(out, "  {}", f.line);
    }
    if v.unmatched_levels > 0 {
        let _ = writeln!(
            out,
            "  not judged: {} level(s) only one run has",
            v.unmatched_levels
        );
    }
    let _ = writeln!(out, "gate: {}", v.headline());
    out
}

/// `| figure | level | baseline | new | change | verdict |`, a `run` column
/// after `level` where more than one run is judged, under a pass/fail header.
pub(crate) fn verdict_markdown(v: &CompareVerdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### tokbench compare: {}", v.headline());
    let _ = writeln!(out);
    let runs: Vec<String> = v
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let role = if i == 0 { " (baseline)" } else { "" };
            format!("{}{role} `{}`", r.name, r.source.replace('`', "'"))
        })
        .collect();
    let _ = writeln!(out, "{}; {}.", v.against(), runs.join(", "));
    if let Some(unlike) = &v.unlike_shapes {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "**This verdict compares unlike runs** (`--force`): {}.",
            cell(unlike)
        );
    }
    if v.unmatched_levels > 0 {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Not judged: {} level(s) only one run has.",
            v.unmatched_levels
        );
    }
    if v.figures.is_empty() {
        return out;
    }
    let several = v.runs.len() > 2;
    let _ = writeln!(out);
    let (run_head, run_rule) = if several {
        (" run |", "---|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        out,
        "| figure | level |{run_head} baseline | new | change | verdict |"
    );
    let _ = writeln!(out, "|---|---|{run_rule}---:|---:|---:|---|");
    for f in &v.figures {
        let level = level_text(f.series.as_deref(), f.concurrency);
        let run = if several {
            format!(" {} |", f.run)
        } else {
            String::new()
        };
        let verdict = match f.verdict {
            super::gate::Verdict::Regression => "**regression**".to_string(),
            other => other.words().to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} |{run} {} | {} | {} | {verdict}: {} |",
            f.figure.words(),
            if level.is_empty() {
                "-".into()
            } else {
                cell(&level)
            },
            value_text(f.figure, f.baseline),
            value_text(f.figure, f.new),
            change_text(f.change_pct),
            cell(&f.reason),
        );
    }
    out
}

/// Text safe inside a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
