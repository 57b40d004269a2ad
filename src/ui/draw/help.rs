//! The help overlay (`?`): what each figure means and the keys.

use crate::ui::app::App;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Widget};

const HELP: [(&str, &str); 12] = [
    (
        "TTFT",
        "request sent -> first generated token: prefill + queueing",
    ),
    (
        "ITL",
        "gap between output chunks of a stream, pooled over streams",
    ),
    (
        "bars",
        "one column a second: its p99; │ marks a concurrency change",
    ),
    (
        "p50 p99",
        "median, 99th percentile; queueing shows in p99 first",
    ),
    (
        "tok/s/stream",
        "total output tok/s / streams: what each user gets",
    ),
    (
        "total tok/s",
        "output tokens of all streams per second: capacity",
    ),
    (
        "in flight",
        "requests sent and not yet answered, all levels",
    ),
    (
        "errors",
        "503 queue full, 429 overloaded, timeout, stalled, closed",
    ),
    ("client cpu", "this tokbench process, % of one core"),
    (
        "chart",
        "● level ○ partial ◆ manual ◉ running × p99 TTFT (right)",
    ),
    (
        "capacity",
        "★ highest level meeting the SLO, at or below the knee",
    ),
    (
        "knee",
        "┊ where more streams add little output, p99 TTFT jumps",
    ),
];

const KEYS: [(&str, &str); 6] = [
    ("+ =  -", "one stream more / fewer (switches to MANUAL)"),
    ("]  [", "double / halve the streams (MANUAL)"),
    ("n", "next planned level (a planned one ends as partial)"),
    ("p", "pause / resume sending; requests in flight finish"),
    (
        "q Esc",
        "stop, save all (current level partial), print table",
    ),
    // One line with `?`: at 80x24 the help has no row to spare.
    (
        "?  v",
        "this help (Esc closes it); v: chart vs tok/s per user",
    ),
];

const SAVED_KEYS: [(&str, &str); 4] = [
    ("q Esc", "quit (nothing is sent: a saved run)"),
    ("Tab", "two runs: the table, marks and result of the other"),
    ("v", "chart: tok/s vs streams, or vs tok/s per user"),
    ("?", "this help; Esc closes it"),
];

/// The help's lines that speak of live parts, left out for a saved run.
const LIVE_ONLY: [&str; 4] = ["ITL", "bars", "in flight", "client cpu"];

pub(super) fn help(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let saved = app.is_saved();
    let two = app.other().is_some();
    let help: Vec<(&str, &str)> = HELP
        .iter()
        .copied()
        .filter(|(k, _)| !saved || !LIVE_ONLY.contains(k))
        .map(|(k, what)| match k {
            "chart" if two => (k, "● A ■ B ○ partial ◆ manual  × + p99 TTFT (right)"),
            "chart" if saved => (k, "● level ○ partial ◆ manual  × p99 TTFT (right)"),
            _ => (k, what),
        })
        .collect();
    let keys: Vec<(&str, &str)> = if saved {
        SAVED_KEYS
            .iter()
            .copied()
            .filter(|(k, _)| two || *k != "Tab")
            .collect()
    } else {
        KEYS.to_vec()
    };
    let label_w = help
        .iter()
        .chain(keys.iter())
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<Line<'_>> = Vec::new();
    let shape = format!("figures at {} tokens", app.shown.run.shape());
    lines.push(Line::styled(format!(" {shape}"), p.dim));
    for (k, what) in help {
        lines.push(Line::from(vec![
            Span::styled(format!(" {k:<label_w$}  "), p.strong),
            Span::styled(what, p.text),
        ]));
    }
    lines.push(Line::raw(""));
    for &(k, what) in &keys {
        lines.push(Line::from(vec![
            Span::styled(format!(" {k:<label_w$}  "), p.key),
            Span::styled(what, p.text),
        ]));
    }
    let content_w = lines.iter().map(Line::width).max().unwrap_or(0) as u16 + 1;
    let w = (content_w + 2).min(area.width.saturating_sub(2));
    let h = (lines.len() as u16 + 2).min(area.height.saturating_sub(2));
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    Clear.render(rect, buf);
    // Lines wider than a small screen are cut at the border: this is prose,
    // not figures.
    Paragraph::new(lines)
        .block(
            Block::bordered()
                .border_type(BorderType::Double)
                .border_style(p.title)
                .title(Line::styled(" what the figures mean ", p.title)),
        )
        .render(rect, buf);
}
