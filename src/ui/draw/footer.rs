//! The bottom lines: counters (completed, errors, rates, server gauges)
//! and the footer of keys and pending changes.

use crate::ui::app::{App, Phase, OWN_COLUMN};
use crate::ui::widgets::{ellipsize, fit, grouped, Part};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

pub(super) fn counter_lines(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let c = &app.shown.counters;
    let count_style = |n: u64| if n > 0 { p.bad } else { p.dim };
    let mut parts = vec![
        Part::new(
            0,
            vec![
                Span::styled(" ok ", p.text),
                Span::styled(grouped(c.ok), p.good),
            ],
        ),
        Part::new(
            0,
            vec![
                Span::styled("failed ", p.text),
                Span::styled(grouped(c.failed), count_style(c.failed)),
            ],
        ),
    ];
    let names = ["503", "429", "timeout", "stalled", "closed"];
    // 503, 429 and timeouts also as a rate over the last seconds: a total
    // says what happened, a rate says whether it is still happening.
    let rates = app.failure_rates();
    for (i, (key, name)) in OWN_COLUMN.iter().zip(names).enumerate() {
        let n = c.class(key);
        let rate = rates
            .get(i)
            .copied()
            .flatten()
            .map_or_else(String::new, |r| format!(" {}/s", rate_figure(r)));
        let text = if name.starts_with(|ch: char| ch.is_ascii_digit()) {
            format!("{name} ×{}{rate}", grouped(n))
        } else {
            format!("{name} {}{rate}", grouped(n))
        };
        // 503 and 429 stay longest: they say the server's queue is full.
        let prio = if name.len() == 3 { 1 } else { 2 };
        parts.push(Part::text(prio, text, count_style(n)));
    }
    let other = c.other();
    if other > 0 {
        parts.push(Part::text(2, format!("other {}", grouped(other)), p.bad));
    }
    if c.cancelled > 0 {
        parts.push(Part::text(
            3,
            format!("cancelled {}", grouped(c.cancelled)),
            p.dim,
        ));
    }
    if let Some(text) = server_text(app) {
        parts.push(Part::text(3, text, p.dim));
    }
    if !app.is_saved() {
        let cpu = app
            .client_cpu
            .map_or_else(|| "-".to_string(), |v| format!("{v:.0}%"));
        parts.push(Part::text(3, format!("client cpu {cpu}"), p.dim));
        // Beside it, how late the client read its sockets (kernel clock only).
        if let Some(lag) = app.client_rx_lag_p99() {
            parts.push(Part::text(3, format!("rx lag p99 {lag:.1} ms"), p.dim));
        }
    }
    fit(parts, area.width, 2).render(Rect::new(area.x, area.y, area.width, 1), buf);
    if area.height >= 2 {
        let line = match &c.last_error {
            Some(e) => {
                let label = " last error: ";
                let room = usize::from(area.width).saturating_sub(label.len() + 1);
                Line::from(vec![
                    Span::styled(label, p.text),
                    Span::styled(ellipsize(e, room), p.bad),
                ])
            }
            None => match last_account(app) {
                // No error to show: the server's own account of the last level.
                Some(text) => {
                    let room = usize::from(area.width).saturating_sub(2);
                    Line::styled(format!(" {}", ellipsize(&text, room)), p.dim)
                }
                None => Line::styled(" no errors", p.dim),
            },
        };
        line.render(Rect::new(area.x, area.y + 1, area.width, 1), buf);
    }
}

/// The last finished level's account: the server's TTFT beside the
/// client's, and its waiting split by the server's prefill times.
/// `c4 server's own TTFT mean: client 14 ms, server 13 ms (...) · queued 2.1, in prefill 0.4`.
pub(super) fn last_account(app: &App) -> Option<String> {
    let level = app
        .shown
        .levels
        .iter()
        .rev()
        .filter(|l| l.info.series == app.series && !l.is_running() && !l.is_partial())
        .find(|l| l.account_line.is_some() || l.in_prefill_mean.is_some())?;
    // The level's line, its subject said once: "c8 server's own TTFT mean: client ...".
    let mut parts: Vec<String> = level
        .account_line
        .iter()
        .map(|l| l.strip_prefix("TTFT mean: ").unwrap_or(l).to_string())
        .collect();
    if let (Some(waiting), Some(prefill)) = (level.waiting_mean, level.in_prefill_mean) {
        parts.push(format!(
            "queued {:.1}, in prefill {prefill:.1}",
            (waiting - prefill).max(0.0)
        ));
    }
    let subject = if level.account_line.is_some() {
        "server's own TTFT mean"
    } else {
        "server's own"
    };
    Some(format!(
        "c{} {subject}: {}",
        level.info.concurrency,
        parts.join(" · ")
    ))
}

/// A per-second rate: one decimal under 10, whole above.
fn rate_figure(r: f64) -> String {
    if r < 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.0}")
    }
}

/// The server's own gauges in one short phrase, in the order a person reads
/// them: what runs, what waits, how full the cache is.
pub(super) fn server_text(app: &App) -> Option<String> {
    if app.server_missing {
        return Some("no server metrics".into());
    }
    let g = app.server.as_ref()?;
    let mut words = Vec::new();
    let int = |v: f64| format!("{v:.0}");
    if let Some(v) = g.get("running") {
        words.push(format!("running {}", int(*v)));
    }
    if let Some(v) = g.get("waiting") {
        words.push(format!("waiting {}", int(*v)));
    }
    if let Some(v) = g.get("kv_cache_usage") {
        words.push(format!("KV {:.0}%", v * 100.0));
    }
    if let Some(v) = g.get("preemptions").filter(|v| **v > 0.0) {
        words.push(format!("preempt {}", int(*v)));
    }
    if let (Some(b), Some(t)) = (g.get("slots_busy"), g.get("slots_total")) {
        words.push(format!("slots {}/{}", int(*b), int(*t)));
    } else if let Some(v) = g.get("processing") {
        words.push(format!("processing {}", int(*v)));
    }
    if let Some(v) = g.get("deferred") {
        words.push(format!("deferred {}", int(*v)));
    }
    if let Some(v) = g.get("gpu_share") {
        words.push(format!("on GPU {:.0}%", v * 100.0));
    }
    if let Some(v) = g.get("gpu_util_pct") {
        words.push(format!("GPU {:.0}%", v));
    }
    if let Some(v) = g.get("gpu_power_w") {
        words.push(format!("{:.0} W", v));
    }
    // The GPUs' own energy counters (a DCGM exporter), since the probe's
    // first reading: what the run has cost so far.
    if let Some(j) = g.get(crate::stats::gauges::ENERGY_J) {
        let wh = j / 3600.0;
        words.push(if wh < 1000.0 {
            format!("{wh:.1} Wh so far")
        } else {
            format!("{:.2} kWh so far", wh / 1000.0)
        });
    }
    (!words.is_empty()).then(|| format!("server: {}", words.join(" ")))
}

pub(super) fn footer_line(app: &App, area: Rect) -> Line<'static> {
    let p = &app.palette;
    let key = |k: &str, what: &str, prio: u8| {
        Part::new(
            prio,
            vec![
                Span::styled(k.to_string(), p.key),
                Span::styled(format!(" {what}"), p.dim),
            ],
        )
    };
    let mut parts = Vec::new();
    if let Some(prompt) = &app.prompt {
        // The `s` prompt takes the whole line.
        let mut spans = vec![
            Span::styled(" new series label: ", p.strong),
            Span::styled(
                prompt.text.clone(),
                p.text.add_modifier(Modifier::UNDERLINED),
            ),
            Span::styled("▏", p.key),
        ];
        match &prompt.error {
            Some(e) => spans.push(Span::styled(format!("  {e}"), p.bad)),
            None => spans.push(Span::styled("  Enter accepts, Esc cancels", p.dim)),
        }
        return Line::from(spans);
    }
    if let Some(note) = app.status() {
        parts.push(Part::text(0, note.to_string(), p.strong));
    }
    match &app.phase {
        _ if app.is_saved() => {
            parts.push(key("q", "quit", 0));
            if app.saved.as_ref().is_some_and(|s| s.other.is_some()) {
                let other = if app.shown.label == 'A' { 'B' } else { 'A' };
                parts.push(key("Tab", &format!("table of run {other}"), 0));
            }
            parts.push(key("?", "help", 1));
            parts.push(Part::text(
                2,
                format!("results: {}", app.shown.run.result_dir),
                p.dim,
            ));
        }
        Phase::Finished { error: Some(e), .. } => {
            parts.push(Part::text(0, format!("run failed: {e}"), p.bad));
            parts.push(key("q", "quit", 0));
        }
        Phase::Finished { .. } if app.tune.is_some() => {
            parts.push(Part::text(0, "tune finished — q to quit", p.strong));
            parts.push(Part::text(
                1,
                format!("results: {}", app.shown.run.result_dir),
                p.dim,
            ));
            parts.push(key("?", "help", 2));
        }
        Phase::Finished { .. } => {
            parts.push(Part::text(0, "sweep finished — q to quit", p.strong));
            parts.push(key("s", "new series (or restart the server)", 1));
            parts.push(Part::text(
                1,
                format!("results: {}", app.shown.run.result_dir),
                p.dim,
            ));
            parts.push(key("?", "help", 2));
        }
        _ if app.quitting => {
            parts.push(Part::text(
                0,
                "stopping: cancelling requests in flight, saving results…",
                p.strong,
            ));
        }
        Phase::Starting if app.tune.is_some() => {
            parts.push(key("n", "skip this setting", 0));
            parts.push(key("q", "stop & save", 0));
        }
        _ => {
            parts.push(key("+ - ] [", "concurrency", 0));
            if app.tune.is_some() {
                parts.push(key("n", "next setting", 1));
            } else {
                parts.push(key("n", "next level", 1));
                parts.push(key("s", "series", 2));
            }
            parts.push(key("p", if app.paused { "resume" } else { "pause" }, 1));
            parts.push(key("q", "quit & save", 0));
            parts.push(key("?", "help", 2));
        }
    }
    let mut line = fit(parts, area.width.saturating_sub(1), 2);
    line.spans.insert(0, Span::raw(" "));
    line
}
