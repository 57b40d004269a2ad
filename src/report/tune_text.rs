//! A tune's table and its recommendation, as text: what `tokbench tune`
//! prints at the end and what `report.md` shows under its own heading.

use super::schema::{number, TuneSection, TuneSetting};

/// The table's columns.
pub(crate) const TUNE_COLUMNS: usize = 9;

/// The table: its header, then one row per setting.
pub(crate) fn tune_rows(tune: &TuneSection) -> Vec<[String; TUNE_COLUMNS]> {
    let mut rows: Vec<[String; TUNE_COLUMNS]> = vec![[
        "setting".into(),
        "status".into(),
        "ready".into(),
        "capacity".into(),
        "tok/s there".into(),
        "p99 TTFT there".into(),
        "peak tok/s".into(),
        "knee".into(),
        "memory".into(),
    ]];
    for s in &tune.settings {
        let capacity = s.capacity.as_ref();
        let dash = || "-".to_string();
        rows.push([
            s.label.clone().unwrap_or_else(dash),
            s.status.clone().unwrap_or_else(dash),
            number(&s.ready_s).map_or_else(dash, |r| format!("{r:.1} s")),
            capacity
                .and_then(|c| c.concurrency)
                .map_or_else(dash, |c| c.to_string()),
            capacity
                .and_then(|c| number(&c.output_throughput))
                .map_or_else(dash, |t| format!("{t:.0}")),
            capacity
                .and_then(|c| number(&c.p99_ttft_ms))
                .map_or_else(dash, |t| format!("{t:.0} ms")),
            number(&s.peak).map_or_else(dash, |t| format!("{t:.0}")),
            s.knee
                .as_ref()
                .and_then(|k| k.from_concurrency.zip(k.to_concurrency))
                .map_or_else(dash, |(a, b)| format!("{a} -> {b}")),
            if s.memory_warning.is_some() {
                "WARNING".into()
            } else {
                dash()
            },
        ]);
    }
    rows
}

/// What is said under the table: why a setting is partial or failed, its
/// memory warning, what was done to its caches.
pub(crate) fn tune_notes(tune: &TuneSection) -> Vec<String> {
    let mut notes = Vec::new();
    for s in &tune.settings {
        if let (Some(label), Some(why)) = (&s.label, &s.reason) {
            notes.push(format!("{label}: {why}"));
        }
        if let Some(w) = &s.memory_warning {
            notes.push(format!("warning: {w}"));
        }
        if let (Some(label), Some(caches)) = (&s.label, &s.caches) {
            notes.push(format!("{label}: caches {caches}"));
        }
    }
    notes
}

/// The sentence: which setting to keep, or why none is.
pub(crate) fn tune_sentence(tune: &TuneSection) -> String {
    match tune.recommendation.as_ref().and_then(|r| r.reason.as_ref()) {
        Some(reason) => reason.clone(),
        None => "no setting to keep: none finished with a capacity within the SLO".into(),
    }
}

/// One line per setting, then the sentence.
pub(crate) fn tune_block(tune: &TuneSection) -> String {
    let rows = tune_rows(tune);
    let widths: Vec<usize> = (0..TUNE_COLUMNS)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::from("tune: each setting as its own series\n");
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str("  ");
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for note in tune_notes(tune) {
        out.push_str(&format!("  {note}\n"));
    }
    out.push_str(&tune_sentence(tune));
    out.push('\n');
    if let Some(caches) = &tune.caches {
        out.push_str(&format!("caches: {caches}\n"));
    }
    out
}

/// One setting in a line for the live view's result panel:
/// `np=1: capacity 1 · 91 tok/s · peak 92 · ready 0.3 s`.
pub(crate) fn setting_line(s: &TuneSetting) -> String {
    let label = s.label.as_deref().unwrap_or("-");
    let mut parts: Vec<String> = Vec::new();
    match s.status.as_deref() {
        Some("finished") => match s.capacity.as_ref().and_then(|c| c.concurrency) {
            Some(c) => {
                let mut there = format!("capacity {c}");
                if let Some(t) = s
                    .capacity
                    .as_ref()
                    .and_then(|c| number(&c.output_throughput))
                {
                    there.push_str(&format!(" · {t:.0} tok/s"));
                }
                parts.push(there);
            }
            None => parts.push("no capacity within the SLO".into()),
        },
        Some("running") | None => parts.push("running".into()),
        Some(status) => parts.push(match &s.reason {
            Some(why) => format!("{status} ({why})"),
            None => status.to_string(),
        }),
    }
    if let Some(peak) = number(&s.peak) {
        parts.push(format!("peak {peak:.0}"));
    }
    if let Some(ready) = number(&s.ready_s) {
        parts.push(format!("ready {ready:.1} s"));
    }
    if s.memory_warning.is_some() {
        parts.push("memory warning".into());
    }
    format!("{label}: {}", parts.join(" · "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::schema::{Capacity, TuneRecommendation, TuneSetting};

    #[test]
    fn a_table_row_per_setting_and_the_sentence() {
        let tune = TuneSection {
            settings: vec![
                TuneSetting {
                    label: Some("np=1".into()),
                    status: Some("finished".into()),
                    ready_s: serde_json::Number::from_f64(0.31),
                    capacity: Some(Capacity {
                        concurrency: Some(1),
                        output_throughput: serde_json::Number::from_f64(98.4),
                        p99_ttft_ms: serde_json::Number::from_f64(40.0),
                        ..Capacity::default()
                    }),
                    peak: serde_json::Number::from_f64(120.0),
                    ..TuneSetting::default()
                },
                TuneSetting {
                    label: Some("np=2".into()),
                    status: Some("failed".into()),
                    reason: Some("the server exited with status 2 before it was ready".into()),
                    ..TuneSetting::default()
                },
            ],
            recommendation: Some(TuneRecommendation {
                label: Some("np=1".into()),
                reason: Some("keep np=1: capacity 1 stream".into()),
                ..TuneRecommendation::default()
            }),
            ..TuneSection::default()
        };
        let text = tune_block(&tune);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "tune: each setting as its own series");
        assert!(lines[1].starts_with("  setting  status"), "{text}");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["np=1", "finished", "0.3", "s", "1", "98", "40", "ms", "120", "-", "-"]
        );
        assert!(lines[3].starts_with("  np=2     failed"), "{text}");
        assert_eq!(
            lines[4],
            "  np=2: the server exited with status 2 before it was ready"
        );
        assert_eq!(lines[5], "keep np=1: capacity 1 stream");
        assert_eq!(
            setting_line(&tune.settings[0]),
            "np=1: capacity 1 · 98 tok/s · peak 120 · ready 0.3 s"
        );
        assert_eq!(
            setting_line(&tune.settings[1]),
            "np=2: failed (the server exited with status 2 before it was ready)"
        );
        let partial = TuneSetting {
            label: Some("np=4".into()),
            status: Some("partial".into()),
            reason: Some("skipped (n)".into()),
            ready_s: serde_json::Number::from_f64(2.04),
            memory_warning: Some("np=4: 23% of the model on CPU".into()),
            ..TuneSetting::default()
        };
        assert_eq!(
            setting_line(&partial),
            "np=4: partial (skipped (n)) · ready 2.0 s · memory warning"
        );
    }
}
