//! Plain-text output of the headless mode: a vLLM-style block per level and
//! the sweep table at the end. Pure functions returning strings.

use std::fmt::Write;

use super::recorder::{rate_label, FinishedLevel, RunInfo};
use crate::analysis::decide::LevelPoint;
use crate::load::driver::Mode;
use crate::stats::percentile::percentile_label;
use crate::stats::summary::Distribution;

/// `in 1024 / out 1024, profile balanced, ignore_eos`: written next to every table of numbers.
pub(crate) fn shape_line(run: &RunInfo) -> String {
    shape_line_seen(run, 0)
}

/// `shape_line` once answers are in: `short` of them ended before the
/// length they asked for (`engine::LengthAsk::label_seen`).
pub(crate) fn shape_line_seen(run: &RunInfo, short: u64) -> String {
    let shape = match &run.traffic.dataset {
        Some(d) => format!(
            "dataset {}, out {} unless the record says",
            d.name, run.output_len
        ),
        None => {
            let profile = crate::workload::profile::profile_words(Some(&run.traffic.profile));
            format!(
                "in {} / out {}{}",
                run.input_len,
                run.output_len,
                profile.map(|p| format!(", {p}")).unwrap_or_default()
            )
        }
    };
    format!("{shape}, {}", run.length_ask().label_seen(short))
}

/// The block `vllm bench serve` prints, plus tokbench's own lines.
pub(crate) fn level_block(level: &FinishedLevel, run: &RunInfo) -> String {
    let s = &level.stats;
    let mut out = String::new();
    let what = match (level.info.mode, level.info.rate) {
        (Mode::Rate, Some(rate)) => format!("rate {} req/s", rate_label(rate)),
        (Mode::Replay, _) => match run.ramp {
            Some(r) => format!("ramp {} -> {} req/s", rate_label(r.from), rate_label(r.to)),
            None => "replay".to_string(),
        },
        _ => format!("concurrency {}", level.info.concurrency),
    };
    let mode = mode_word(level, run);
    let mut tags = Vec::new();
    if !what.starts_with(mode) {
        tags.push(mode);
    }
    if level.partial {
        tags.push("partial");
    }
    let title = if tags.is_empty() {
        format!(" {what} ")
    } else {
        format!(" {what} ({}) ", tags.join(", "))
    };
    let _ = writeln!(out, "{:=^50}", title);
    let line = |out: &mut String, label: &str, value: String| {
        let _ = writeln!(out, "{label:<40} {value:<10}");
    };
    line(&mut out, "Successful requests:", s.completed.to_string());
    line(&mut out, "Failed requests:", s.failed.to_string());
    if s.cancelled > 0 {
        line(&mut out, "Cancelled requests:", s.cancelled.to_string());
    }
    if !level.turns.is_empty() {
        let _ = writeln!(out, "{:-^50}", "By turn");
        for t in &level.turns {
            line(
                &mut out,
                &format!(
                    "Turn {} ({} done) TTFT p50 / p99 (ms):",
                    t.turn, t.completed
                ),
                format!("{} / {}", opt2(t.p50_ttft_ms), opt2(t.p99_ttft_ms)),
            );
            if let Some(rate) = t.cache_hit_rate {
                line(
                    &mut out,
                    &format!("Turn {} prefix cache hits:", t.turn),
                    format!(
                        "{:.1}% of {:.0} prompt tokens",
                        rate * 100.0,
                        t.mean_input_tokens
                    ),
                );
            }
        }
    } else if let Some(rate) = level.cache_hit_rate {
        line(
            &mut out,
            "Prefix cache hits:",
            format!("{:.1}% of prompt tokens", rate * 100.0),
        );
    }
    if let Some(late) = &level.lateness {
        line(
            &mut out,
            "Sent late (> 5 ms after schedule):",
            format!("{} of {}", late.late, late.scheduled),
        );
        line(
            &mut out,
            "Send lateness p99 / max (ms):",
            format!("{:.2} / {:.2}", late.p99_ms, late.max_ms),
        );
        if let Some(warning) = late.warning() {
            let _ = writeln!(
                out,
                "  {warning} (latencies count from the intended send time)"
            );
        }
    }
    // An open loop has no concurrency of its own (its cap is internal):
    // the mean number in flight stands for it.
    let concurrency = if level.info.mode.is_open_loop() {
        ("Mean requests in flight:", in_flight(level))
    } else {
        (
            "Maximum request concurrency:",
            level.info.concurrency.to_string(),
        )
    };
    let rows = [
        concurrency,
        ("Benchmark duration (s):", format!("{:.2}", s.duration_s)),
        ("Total input tokens:", s.total_input_tokens.to_string()),
        ("Total generated tokens:", s.total_output_tokens.to_string()),
        (
            "Request throughput (req/s):",
            format!("{:.2}", s.request_throughput),
        ),
        (
            "Output token throughput (tok/s):",
            format!("{:.2}", s.output_throughput),
        ),
        (
            "Total Token throughput (tok/s):",
            format!("{:.2}", s.total_token_throughput),
        ),
        (
            "Per-stream output (tok/s):",
            opt2(Some(s.per_stream_tok_s).filter(|v| v.is_finite())),
        ),
        ("Stream decode speed (tok/s):", opt2(s.stream_decode_tok_s)),
    ];
    for (label, value) in rows {
        line(&mut out, label, value);
    }
    if let Some(text) = goodput_words(level, run) {
        let _ = writeln!(out, "{text}");
    }
    // What the server itself says of its decode speed, beside the client's.
    if let Some(v) = level
        .server_timings
        .get("decode_tok_s_median")
        .and_then(|v| v.as_f64())
    {
        line(&mut out, "Server decode speed (tok/s):", format!("{v:.2}"));
    }
    // A replayed trace: its own prefix reuse beside the cache's hit rate.
    if let Some(trace) = run.trace.as_ref().filter(|_| level.info.timeline.is_some()) {
        let pct =
            |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{:.1}%", v * 100.0));
        line(
            &mut out,
            "Trace prefix reuse / cache hits:",
            format!(
                "{} / {}",
                pct(trace.get("reuse").and_then(|v| v.as_f64())),
                pct(level.cache_hit_rate)
            ),
        );
        if let Some(n) = trace
            .get("clipped")
            .and_then(|v| v.as_u64())
            .filter(|n| *n > 0)
        {
            line(&mut out, "Clipped to the context:", n.to_string());
        }
    }
    // A level on its own timeline: where p99 TTFT first failed.
    if let Some(series) = level.rate_series.as_ref() {
        let text = crate::stats::rate_series::broke_text(series)
            .unwrap_or_else(|| "never: p99 TTFT held every second".into());
        line(&mut out, "First failed:", text);
    }
    // The client's waiting, split by the server's own prefill times.
    if let Some(o) = level.occupancy.as_ref() {
        if let (Some(queued), Some(prefill)) = (o.queued_mean(), o.in_prefill_mean) {
            line(&mut out, "Queued (mean requests):", format!("{queued:.2}"));
            line(
                &mut out,
                "In prefill (mean requests):",
                format!("{prefill:.2}"),
            );
        }
        // The same split as the live view read it each second.
        if let Some(live) = o.live {
            line(
                &mut out,
                "Split by its running count:",
                format!(
                    "in prefill {:.2}, queued {:.2} (mean of {} scrapes)",
                    live.in_prefill_mean, live.queued_mean, live.scrapes
                ),
            );
        }
    }
    let mut sections: Vec<(&str, &str, &Option<Distribution>)> =
        vec![("Time to First Token", "TTFT", &s.ttft)];
    // Reasoning models: the first content token, when reasoning came first.
    if s.ttfc.is_some() {
        sections.push(("Time to First Content token", "TTFC", &s.ttfc));
    }
    sections.extend([
        ("Time per Output Token (excl. 1st token)", "TPOT", &s.tpot),
        ("Inter-token Latency", "ITL", &s.itl),
        ("End-to-end Latency", "E2EL", &s.e2el),
    ]);
    for (heading, short, dist) in sections {
        let _ = writeln!(out, "{:-^50}", heading);
        match dist {
            Some(d) => {
                line(
                    &mut out,
                    &format!("Mean {short} (ms):"),
                    format!("{:.2}", d.mean),
                );
                line(
                    &mut out,
                    &format!("Median {short} (ms):"),
                    format!("{:.2}", d.median),
                );
                for &(p, v) in &d.percentiles {
                    line(
                        &mut out,
                        &format!("P{} {short} (ms):", percentile_label(p)),
                        format!("{v:.2}"),
                    );
                }
            }
            None => line(&mut out, &format!("{short}:"), "no samples".into()),
        }
    }
    // Connecting as a share of TTFT, when it is a noticeable one.
    if let Some(note) = s.connect.as_ref().and_then(|c| c.note()) {
        let _ = writeln!(out, "{note}");
    }
    if let Some(p) = &level.probes {
        let _ = writeln!(out, "{}", probe_line(p));
    }
    if !s.errors.is_empty() {
        let _ = writeln!(out, "{:-^50}", "Errors");
        for (class, n) in &s.errors {
            line(&mut out, &format!("{class}:"), n.to_string());
        }
    }
    // The server's own account, beside the client's figures above.
    let account = level
        .server_account
        .as_ref()
        .and_then(|a| a.get("lines"))
        .and_then(|l| l.as_array());
    if let Some(lines) = account.filter(|l| !l.is_empty()) {
        let _ = writeln!(out, "{:-^50}", "The server's own account");
        for l in lines.iter().filter_map(|l| l.as_str()) {
            let _ = writeln!(out, "{l}");
        }
    }
    let _ = writeln!(out, "{}", "=".repeat(50));
    let _ = writeln!(out, "{}", shape_line_seen(run, s.short_outputs as u64));
    out
}

/// `probe: TTFT p50 12.3 ms p99 40.1 ms, E2EL p50 15.0 ms p99 44.2 ms (20
/// sent, 0 failed)`: the level's probe requests, apart from its figures.
fn probe_line(p: &crate::stats::probes::ProbeStats) -> String {
    let pair = |name: &str, l: Option<crate::stats::probes::ProbeLatency>| match l {
        Some(l) => format!("{name} p50 {:.1} ms p99 {:.1} ms", l.p50, l.p99),
        None => format!("{name} none"),
    };
    format!(
        "probe: {}, {} ({} sent, {} failed)",
        pair("TTFT", p.ttft),
        pair("E2EL", p.e2el),
        p.count,
        p.failed
    )
}

/// `replay`, `ramp` (a ramp is replayed on its own schedule), `rate`...:
/// the kind of a level as a user asked for it.
fn mode_word(level: &FinishedLevel, run: &RunInfo) -> &'static str {
    match level.info.mode {
        Mode::Replay if run.ramp.is_some() => "ramp",
        mode => mode.as_str(),
    }
}

/// `~0.42`, `~3.5`, `~12`: an open-loop level's mean requests in flight
/// (time-weighted), or `-` where it is not known.
fn in_flight(level: &FinishedLevel) -> String {
    match level.occupancy.as_ref().map(|o| o.in_flight_mean()) {
        Some(m) if m > 0.0 && m < 0.995 => format!("~{m:.2}"),
        Some(m) if m > 0.0 && m < 9.95 => format!("~{m:.1}"),
        Some(m) if m > 0.0 => format!("~{m:.0}"),
        _ => "-".into(),
    }
}

/// `goodput 3.2 req/s (81% of requests within TTFT<=500 ms)`: only where
/// `--goodput` was given.
fn goodput_words(level: &FinishedLevel, run: &RunInfo) -> Option<String> {
    let slo = run.decision.goodput.as_ref()?;
    let g = level.goodput.as_ref()?;
    Some(crate::analysis::goodput::goodput_text(
        g.rate_per_s,
        Some(g.share),
        slo,
    ))
}

/// The sweep table: what the user came for. `series_label` names a
/// series; a run of several, or a series named apart from its number,
/// labels every row with its own.
///
/// `kept`: the levels a resumed run kept from its folder (series, figures),
/// listed first and marked `kept`, so the table holds every level the
/// capacity and the knee were judged on.
pub(crate) fn sweep_table(
    levels: &[FinishedLevel],
    kept: &[(usize, &LevelPoint)],
    run: &RunInfo,
    series_label: &dyn Fn(usize) -> String,
) -> String {
    let mut out = String::new();
    let short: usize = levels.iter().map(|l| l.stats.short_outputs).sum();
    let _ = writeln!(
        out,
        "tokbench sweep, {}  ({})",
        shape_line_seen(run, short as u64),
        run.model
    );
    let goodput = run.decision.goodput.as_ref();
    let _ = writeln!(
        out,
        "{:>8} {:>13} {:>12} {:>12} {:>12} {:>7}{}  note",
        "streams",
        "tok/s/stream",
        "total tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "failed",
        if goodput.is_some() {
            format!(" {:>14}", "goodput req/s")
        } else {
            String::new()
        }
    );
    let mut saved: Vec<&FinishedLevel> = levels.iter().filter(|l| l.file.is_some()).collect();
    saved.sort_by_key(|l| l.info.index);
    // Rows of several series each say theirs; so do the rows of one series
    // named apart from its number (a tune's setting, `np=2`): the folder
    // holds others, and the table alone would not say which this is.
    let series: Vec<usize> = kept
        .iter()
        .map(|(s, _)| *s)
        .chain(saved.iter().map(|l| l.info.series))
        .collect();
    let several = series.iter().any(|s| *s != series[0])
        || series
            .iter()
            .any(|s| series_label(*s) != crate::analysis::series::default_label(*s));
    for (index, point) in kept {
        let f = &point.figures;
        let mut note = vec!["kept".to_string()];
        if point.partial {
            note.push("partial".into());
        }
        if several {
            note.push(series_label(*index));
        }
        let _ = writeln!(
            out,
            "{:>8} {:>13} {:>12.1} {:>12} {:>12} {:>7}{}  {}",
            point.concurrency,
            opt1(Some(f.per_stream_tok_s).filter(|v| v.is_finite())),
            f.output_throughput,
            opt1(f.p50_ttft_ms),
            opt1(f.p99_ttft_ms),
            "-",
            if goodput.is_some() {
                format!(" {:>14}", "-")
            } else {
                String::new()
            },
            note.join(", ")
        );
    }
    for level in saved {
        let s = &level.stats;
        let ttft = |p: f64| s.ttft.as_ref().and_then(|d| d.percentile(p));
        let mut note = Vec::new();
        match (level.info.mode, level.info.rate) {
            (Mode::Planned, _) => {}
            (Mode::Rate, Some(r)) => note.push(format!("rate {}/s", rate_label(r))),
            _ => note.push(mode_word(level, run).to_string()),
        }
        if level.partial {
            note.push("partial".into());
        }
        if several {
            note.push(series_label(level.info.series));
        }
        // Open loop: the mean number in flight stands for the concurrency.
        let streams = if level.info.mode.is_open_loop() {
            in_flight(level)
        } else {
            level.info.concurrency.to_string()
        };
        let per_stream = Some(s.per_stream_tok_s).filter(|v| v.is_finite());
        let good = match (goodput, level.goodput.as_ref()) {
            (Some(_), Some(g)) => format!(
                " {:>14}",
                g.rate_per_s.map_or_else(
                    || format!("({:.0}%)", g.share * 100.0),
                    |r| format!("{r:.1} ({:.0}%)", g.share * 100.0)
                )
            ),
            (Some(_), None) => format!(" {:>14}", "-"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{:>8} {:>13} {:>12.1} {:>12} {:>12} {:>7}{}  {}",
            streams,
            opt1(per_stream),
            s.output_throughput,
            opt1(ttft(50.0)),
            opt1(ttft(99.0)),
            s.failed,
            good,
            note.join(", ")
        );
    }
    if let Some(slo) = goodput {
        let _ = writeln!(
            out,
            "goodput: requests per second within {} (share of requests)",
            slo.words()
        );
    }
    out
}

fn opt1(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn opt2(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}
