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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::gate::Gate;
    use crate::report::saved::SavedRun;
    use serde_json::json;
    use std::path::Path;

    fn run(name: &str, tok: f64, tpot: f64) -> SavedRun {
        SavedRun::from_value(
            json!({"run": {"model": "m", "input_len": 64, "output_len": 16},
                   "levels": [{"max_concurrency": 4, "output_throughput": tok,
                               "p99_tpot_ms": tpot, "mode": "planned", "partial": false}]}),
            Path::new(name),
        )
        .expect("summary")
    }

    /// Three runs, B and C each against A: the lines and the table name the
    /// run; the text says each verdict, the Markdown marks the regression.
    #[test]
    fn several_runs_are_each_judged_against_the_first() {
        // A 400 tok/s, TPOT 10 ms. B: 380 (-5%, within 5%), TPOT 10.4 (+4%).
        // C: 300 (-25%, beyond), TPOT 8 (-20%: better beyond 5%).
        let runs = [
            run("a", 400.0, 10.0),
            run("b", 380.0, 10.4),
            run("c", 300.0, 8.0),
        ];
        let gate = Gate::of(&runs, 5.0);
        let v = CompareVerdict::of(&runs, &gate, true, None);
        let text = verdict_text(&v);
        assert_eq!(
            text,
            "\nregression gate: B, C against A (the baseline), threshold 5%\n\
             \x20 within noise: B output tok/s at 4 streams: 400.0 -> 380.0 (-5.0%), within 5%\n\
             \x20 within noise: B p99 TPOT ms at 4 streams: 10.0 -> 10.4 (+4.0%), within 5%\n\
             \x20 regression: C output tok/s at 4 streams: 400.0 -> 300.0 (-25.0%), beyond 5%\n\
             \x20 improvement: C p99 TPOT ms at 4 streams: 10.0 -> 8.00 (-20.0%), beyond 5%\n\
             gate: FAIL: 1 worse beyond the noise, 1 better, 2 within noise\n"
        );
        let md = verdict_markdown(&v);
        assert!(
            md.starts_with("### tokbench compare: FAIL: 1 worse beyond the noise"),
            "{md}"
        );
        assert!(
            md.contains("| figure | level | run | baseline | new | change | verdict |\n|---|---|---|---:|---:|---:|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| output tok/s | 4 streams | C | 400.0 | 300.0 | -25.0% | **regression**: beyond 5% |\n"),
            "{md}"
        );
        // The typed verdict reads back as written.
        let json = serde_json::to_string(&v).expect("json");
        let back: CompareVerdict = serde_json::from_str(&json).expect("reads");
        assert_eq!(back, v);
    }

    /// Not gated: said so in the header, and no pass or fail.
    #[test]
    fn without_the_flag_the_verdict_is_not_a_gate() {
        let runs = [run("a", 400.0, 10.0), run("b", 300.0, 10.0)];
        let v = CompareVerdict::of(&runs, &Gate::of(&runs, 5.0), false, None);
        assert_eq!(v.passed, None);
        let md = verdict_markdown(&v);
        assert!(
            md.starts_with("### tokbench compare: not gated (no --fail-on-regression): 1 worse"),
            "{md}"
        );
        // Nothing in common: said, not a silent pass.
        let other = SavedRun::from_value(
            json!({"run": {"model": "m", "input_len": 64, "output_len": 16},
                   "levels": [{"max_concurrency": 8, "output_throughput": 1.0}]}),
            Path::new("c"),
        )
        .expect("summary");
        let runs = [run("a", 400.0, 10.0), other];
        let v = CompareVerdict::of(&runs, &Gate::of(&runs, 5.0), true, None);
        assert_eq!(
            verdict_text(&v).lines().last(),
            Some("gate: pass, with nothing judged: no figure is in both runs")
        );
        assert!(verdict_text(&v).contains("not judged: 2 level(s) only one run has"));
    }

    /// Capacities judged by different SLOs: the line says so.
    #[test]
    fn capacities_under_other_slos_are_said_to_be() {
        let with_slo = |name: &str, cap: u32, ttft: Option<f64>| {
            SavedRun::from_value(
                json!({"run": {"model": "m", "input_len": 64, "output_len": 16,
                               "slo": {"ttft_p99_ms": ttft}},
                       "levels": [], "capacity": {"concurrency": cap}}),
                Path::new(name),
            )
            .expect("summary")
        };
        let runs = [
            with_slo("a", 8, Some(500.0)),
            with_slo("b", 4, Some(2000.0)),
        ];
        let v = CompareVerdict::of(&runs, &Gate::of(&runs, 5.0), true, None);
        assert_eq!(
            v.figures.first().map(|f| f.line.as_str()),
            Some(
                "regression: capacity (streams): 8 -> 4 (-50.0%), beyond 5%; the runs' SLOs \
                 differ, so their capacities were judged by different rules"
            )
        );
        let runs = [with_slo("a", 8, Some(500.0)), with_slo("b", 4, Some(500.0))];
        let v = CompareVerdict::of(&runs, &Gate::of(&runs, 5.0), true, None);
        assert!(v.figures.iter().all(|f| !f.line.contains("SLOs")), "{v:?}");
    }
}
