//! The latency bars: TTFT | ITL panels, and the client's (and server's)
//! queue bars on a wide screen.

use crate::ui::app::{App, SparkPoint};
use crate::ui::widgets::{figure, fit, Part, Spark};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Widget};

pub(super) fn latency_panels(app: &App, area: Rect, buf: &mut Buffer) {
    // The queue gets its own bars beside the latencies when the screen is
    // wide enough for three panels; the status line always has its count.
    let (left, right) = if area.width >= QUEUE_BARS_MIN_WIDTH {
        let [left, right, queue] = Layout::horizontal([
            Constraint::Ratio(1, 3),
            Constraint::Ratio(1, 3),
            Constraint::Ratio(1, 3),
        ])
        .areas(area);
        queue_panels(app, queue, buf);
        (left, right)
    } else {
        let [left, right] =
            Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(area);
        (left, right)
    };
    let l = &app.latency;
    let p = &app.palette;
    let ttft: fn(&SparkPoint) -> Option<u64> = |pt| pt.ttft_p99_us;
    let itl: fn(&SparkPoint) -> Option<u64> = |pt| pt.itl_p99_us;
    let panels = [
        (left, "TTFT ms", l.ttft_p50_ms, l.ttft_p99_ms, p.ttft, ttft),
        (right, "ITL ms", l.itl_p50_ms, l.itl_p99_ms, p.itl, itl),
    ];
    for (rect, name, p50, p99, style, value) in panels {
        let title_room = rect.width.saturating_sub(4);
        let title = fit(
            vec![
                // Narrow panels keep the figure and drop the unit word.
                Part::text(
                    0,
                    if title_room >= 22 {
                        name
                    } else {
                        name.trim_end_matches(" ms")
                    },
                    p.title,
                ),
                Part::text(1, format!("p50 {}", figure(p50)), p.strong),
                Part::text(0, format!("p99 {}", figure(p99)), p.strong),
            ],
            title_room,
            2,
        );
        let mut block = Block::bordered()
            .border_type(BorderType::Rounded)
            .border_style(p.border)
            .title(Line::from(padded(title)));
        // Under the TTFT bars, where a run has them: what a new user
        // waits for (the probe requests), beside the load's TTFT above.
        let probe = (name == "TTFT ms").then(|| probe_caption(app)).flatten();
        let caption = probe.as_deref().unwrap_or("p99 each second, last minute");
        if rect.width as usize >= caption.chars().count() + 6 && rect.height >= 3 {
            let style = if probe.is_some() { p.strong } else { p.dim };
            block = block.title_bottom(Line::styled(format!(" {caption} "), style).right_aligned());
        }
        let inner = block.inner(rect);
        block.render(rect, buf);
        Spark {
            points: &l.points,
            value,
            style,
            marker_style: p.marker,
            lower: None,
        }
        .render(inner, buf);
    }
}

/// The probes' TTFT of the latest level that sent any:
/// `probe p50 12.3 p99 40.1 (20)`.
fn probe_caption(app: &App) -> Option<String> {
    let (_, tally) = app.probes.as_ref()?;
    let stats = tally.stats()?;
    Some(match stats.ttft {
        Some(t) => format!(
            "probe p50 {} p99 {} ({})",
            figure(Some(t.p50)),
            figure(Some(t.p99)),
            stats.count
        ),
        None => format!("probe: {} sent, {} failed", stats.count, stats.failed),
    })
}

/// Narrower screens show the queue as a count on the status line only.
const QUEUE_BARS_MIN_WIDTH: u16 = 100;

/// Requests waiting for their first token, each second of the last minute:
/// the client's count, and beside it the server's own queue gauge when the
/// probe reads one (vLLM waiting, llama.cpp deferred).
fn queue_panels(app: &App, rect: Rect, buf: &mut Buffer) {
    let client_peak = app
        .latency
        .points
        .iter()
        .filter_map(|pt| pt.waiting)
        .max()
        .unwrap_or(0) as f64;
    // Where the server counts what it runs, each bar's foot is the part
    // in prefill, the rest queued.
    let split = app.latency.points.iter().any(|pt| pt.in_prefill.is_some());
    let lower: Option<fn(&SparkPoint) -> Option<u64>> = split.then_some(|pt| pt.in_prefill);
    if app.server_queue.is_empty() {
        let client: fn(&SparkPoint) -> Option<u64> = |pt| pt.waiting;
        let now = f64::from(app.waiting());
        let peak = client_peak.max(now);
        // Ollama counts nothing it runs: its answers' prefill times split
        // the waiting once the level is over.
        let ollama = crate::engine::Engine::from_name(&app.shown.run.engine)
            == Some(crate::engine::Engine::Ollama);
        let caption = if split {
            "foot: in prefill"
        } else if ollama {
            "split at level end"
        } else {
            "sent, no token yet"
        };
        bars_panel(
            app,
            rect,
            buf,
            "waiting",
            (now, peak),
            client,
            caption,
            lower,
        );
        return;
    }
    let [left, right] =
        Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(rect);
    let client: fn(&SparkPoint) -> Option<u64> = |pt| pt.waiting;
    let caption = if app.queue_disagrees() {
        "≠ server by >2"
    } else if split {
        "foot: in prefill"
    } else {
        "client"
    };
    let now = f64::from(app.waiting());
    bars_panel(
        app,
        left,
        buf,
        "waiting",
        (now, client_peak.max(now)),
        client,
        caption,
        lower,
    );
    let server: fn(&SparkPoint) -> Option<u64> = |pt| pt.server_queue;
    let now = app
        .server_queue
        .values()
        .next_back()
        .copied()
        .unwrap_or(0.0);
    let peak = app.server_queue.values().copied().fold(0.0, f64::max);
    bars_panel(
        app,
        right,
        buf,
        "server queue",
        (now, peak),
        server,
        "server",
        None,
    );
}

/// One bordered bar panel: `name now N max M` on top, a caption below.
#[allow(clippy::too_many_arguments)]
fn bars_panel(
    app: &App,
    rect: Rect,
    buf: &mut Buffer,
    name: &str,
    (now, peak): (f64, f64),
    value: fn(&SparkPoint) -> Option<u64>,
    caption: &str,
    lower: Option<fn(&SparkPoint) -> Option<u64>>,
) {
    let p = &app.palette;
    let title = fit(
        vec![
            Part::text(0, name.to_string(), p.title),
            Part::text(0, format!("{now:.0}"), p.strong),
            Part::text(1, format!("max {peak:.0}"), p.strong),
        ],
        rect.width.saturating_sub(4),
        1,
    );
    let mut block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(title)));
    if usize::from(rect.width) >= caption.chars().count() + 6 && rect.height >= 3 {
        let style = if caption.starts_with('≠') {
            p.bad
        } else {
            p.dim
        };
        block = block.title_bottom(Line::styled(format!(" {caption} "), style).right_aligned());
    }
    let inner = block.inner(rect);
    block.render(rect, buf);
    Spark {
        points: &app.latency.points,
        value,
        style: p.itl,
        marker_style: p.marker,
        lower: lower.map(|value| (value, p.strong)),
    }
    .render(inner, buf);
}

/// A title with a space either side, as borders want it.
pub(super) fn padded(line: Line<'_>) -> Vec<Span<'_>> {
    let mut spans = vec![Span::raw(" ")];
    spans.extend(line.spans);
    spans.push(Span::raw(" "));
    spans
}
