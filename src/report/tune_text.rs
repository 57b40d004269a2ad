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
            memory_words(s).unwrap_or_else(dash),
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
    if let Some(memory) = memory_words(s) {
        parts.push(memory);
    }
    format!("{label}: {}", parts.join(" · "))
}

/// A setting's memory in a few words, the same in the table (printed,
/// `report.md`, HTML) and in the live view's row: vLLM's KV cache
/// (`num_gpu_blocks` x `block_size`: `KV 23,296 tok`), llama.cpp's context
/// per slot (`ctx 4,096/slot`), Ollama's share of the model on the CPU
/// (`CPU 12%`, `GPU only`), as `probe::memory` saved them. A warning adds
/// `(warning)`, its words in the notes. None when the server said nothing
/// of its memory that is read here.
pub(crate) fn memory_words(s: &TuneSetting) -> Option<String> {
    let m = &s.memory;
    let count = |k: &str| m.get(k).and_then(serde_json::Value::as_u64);
    let words = if let (Some(blocks), Some(size)) = (count("num_gpu_blocks"), count("block_size")) {
        Some(format!(
            "KV {} tok",
            crate::fmt::grouped(blocks.saturating_mul(size))
        ))
    } else if let Some(ctx) = count("slot_context_tokens") {
        Some(format!("ctx {}/slot", crate::fmt::grouped(ctx)))
    } else if let (Some(size), Some(vram)) = (count("size"), count("size_vram")) {
        (size > 0).then(|| {
            let on_cpu = size.saturating_sub(vram) as f64 / size as f64;
            if on_cpu <= 0.0 {
                "GPU only".to_string()
            } else if on_cpu < 0.005 {
                // Some of it is on the CPU: "0%" would read as none.
                "CPU <1%".to_string()
            } else {
                format!("CPU {}", crate::fmt::percent0(on_cpu))
            }
        })
    } else {
        None
    };
    match (words, &s.memory_warning) {
        (Some(w), Some(_)) => Some(format!("{w} (warning)")),
        (None, Some(_)) => Some("memory warning".into()),
        (words, None) => words,
    }
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

    fn with_memory(memory: serde_json::Value, warning: Option<&str>) -> TuneSetting {
        TuneSetting {
            label: Some("np=1".into()),
            status: Some("finished".into()),
            memory,
            memory_warning: warning.map(str::to_string),
            ..TuneSetting::default()
        }
    }

    /// Each engine's memory as `probe::memory` saves it, in words.
    #[test]
    fn memory_in_words_for_each_engine() {
        use serde_json::json;
        let words = |memory, warning| memory_words(&with_memory(memory, warning));
        // vLLM: 1,456 blocks of 16 tokens = 23,296 tokens of KV.
        let vllm = json!({"num_gpu_blocks": 1456, "block_size": 16, "kv_tokens": 23_296});
        assert_eq!(words(vllm, None).as_deref(), Some("KV 23,296 tok"));
        // The product, not a saved total, is what is shown.
        let no_total = json!({"num_gpu_blocks": 100_000, "block_size": 16, "kv_tokens": null});
        assert_eq!(words(no_total, None).as_deref(), Some("KV 1,600,000 tok"));
        // llama.cpp: each slot's context.
        let llama = json!({"slot_context_tokens": 4096, "total_slots": 4});
        assert_eq!(words(llama, None).as_deref(), Some("ctx 4,096/slot"));
        // Ollama: 0.88 GB of 1 GB in VRAM is 12% on the CPU; all of it, none.
        let spilled = json!({"size": 1_000_000_000u64, "size_vram": 880_000_000u64});
        assert_eq!(
            words(spilled, Some("np=1: 12% of the model on CPU")).as_deref(),
            Some("CPU 12% (warning)")
        );
        let whole = json!({"size": 1_000_000_000u64, "size_vram": 1_000_000_000u64});
        assert_eq!(words(whole, None).as_deref(), Some("GPU only"));
        // A sliver on the CPU is not "0%".
        let sliver = json!({"size": 1_000_000_000u64, "size_vram": 999_000_000u64});
        assert_eq!(words(sliver, None).as_deref(), Some("CPU <1%"));
        // Nothing said, or nothing read: no words.
        assert_eq!(words(serde_json::Value::Null, None), None);
        let unread = json!({"num_gpu_blocks": null, "block_size": null, "kv_tokens": null});
        assert_eq!(words(unread, None), None);
        assert_eq!(words(json!({"size": null, "size_vram": null}), None), None);
        assert_eq!(words(json!({"size": 0, "size_vram": 0}), None), None);
    }

    /// The table's memory column and the live row say the same words.
    #[test]
    fn the_memory_column_and_the_live_row_show_the_words() {
        use serde_json::json;
        let tune = TuneSection {
            settings: vec![
                with_memory(json!({"num_gpu_blocks": 1456, "block_size": 16}), None),
                with_memory(json!({"slot_context_tokens": 4096}), None),
                with_memory(json!({"size": 100, "size_vram": 100}), None),
                with_memory(serde_json::Value::Null, None),
            ],
            ..TuneSection::default()
        };
        let rows = tune_rows(&tune);
        let column: Vec<&str> = rows.iter().map(|r| r[TUNE_COLUMNS - 1].as_str()).collect();
        assert_eq!(
            column,
            ["memory", "KV 23,296 tok", "ctx 4,096/slot", "GPU only", "-"]
        );
        let text = tune_block(&tune);
        assert!(
            text.lines()
                .nth(2)
                .is_some_and(|l| l.ends_with("  KV 23,296 tok")),
            "{text}"
        );
        assert_eq!(
            setting_line(&tune.settings[0]),
            "np=1: no capacity within the SLO · KV 23,296 tok"
        );
    }
}
