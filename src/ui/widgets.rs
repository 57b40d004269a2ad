//! The view's own pieces: number formats that never need cutting, a line
//! that drops its least useful parts to fit, latency bars with
//! concurrency-change markers, and the throughput chart on a log2 axis.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::canvas::{Canvas, Line as CanvasLine};
use ratatui::widgets::Widget;

use super::app::SparkPoint;
use super::theme::Palette;

// The two live charts, one file each; the number formats, the fitting line
// and the sparkline are here.
mod chart;
mod frontier;

use chart::{
    bottom_ticks, braille_line, cell, label_rows, left_axis, left_labels, series_lines,
    waiting_note,
};
pub(crate) use chart::{
    series_style, ChartPoint, PointKind, PredictedCurve, ThroughputChart, CAPACITY_GLYPH,
    KNEE_GLYPH, P99_GLYPH, P99_GLYPH_B, PREDICTED_GLYPH,
};
pub(crate) use frontier::FrontierChart;

// ---------------------------------------------------------------- numbers

pub(crate) use crate::fmt::{dollars, grouped, percent0 as percent};

/// A rate or a latency for a table cell: one decimal below 100, whole and
/// grouped above (`9.8`, `92.4`, `352`, `1,728`). `-` when unknown.
pub(crate) fn figure(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() && v >= 0.0 => {
            if v < 100.0 {
                format!("{v:.1}")
            } else {
                grouped(v.round() as u64)
            }
        }
        _ => "-".into(),
    }
}

/// A ratio: `2.0x`; two decimals near 1, where one would say `1.0x`.
pub(crate) fn times(x: f64) -> String {
    if x < 1.095 {
        format!("{x:.2}x")
    } else {
        format!("{x:.1}x")
    }
}

/// Short axis label: `0`, `950`, `2.3k`, `23k`, `1.2M`.
pub(crate) fn compact(v: f64) -> String {
    if !v.is_finite() || v <= 0.0 {
        return "0".into();
    }
    let scaled = |x: f64, unit: &str| {
        if x < 10.0 {
            let s = format!("{x:.1}");
            format!("{}{unit}", s.trim_end_matches(".0"))
        } else {
            format!("{:.0}{unit}", x)
        }
    };
    if v < 1000.0 {
        if v < 10.0 && v.fract() != 0.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        }
    } else if v < 1e6 {
        scaled(v / 1e3, "k")
    } else {
        scaled(v / 1e6, "M")
    }
}

/// `hh:mm:ss`.
pub(crate) fn clock(secs: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// The smallest 1, 2, 2.5 or 5 times a power of ten at or above `x`
/// (at least 1): axis tops that read well.
pub(crate) fn nice_ceil(x: f64) -> f64 {
    if !x.is_finite() || x <= 1.0 {
        return 1.0;
    }
    let base = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * base >= x * (1.0 - 1e-12) {
            return m * base;
        }
    }
    10.0 * base
}

// ---------------------------------------------------------------- fitting

/// A part of a line and how much it matters: 0 is kept longest.
pub(crate) struct Part<'a> {
    pub prio: u8,
    pub spans: Vec<Span<'a>>,
}

impl<'a> Part<'a> {
    pub(crate) fn new(prio: u8, spans: Vec<Span<'a>>) -> Part<'a> {
        Part { prio, spans }
    }
    pub(crate) fn text(prio: u8, text: impl Into<String>, style: Style) -> Part<'a> {
        Part {
            prio,
            spans: vec![Span::styled(text.into(), style)],
        }
    }
    fn width(&self) -> usize {
        self.spans.iter().map(Span::width).sum()
    }
}

/// Which parts fit in `width` with `gap` columns between them: the least
/// important parts (highest `prio`, the rightmost first on a tie) go first.
/// Whole parts are dropped, never cut, so no number is ever cut in half.
pub(crate) fn keep_fitting(parts: &[Part<'_>], width: usize, gap: usize) -> Vec<bool> {
    let mut keep = vec![true; parts.len()];
    let total = |keep: &[bool]| -> usize {
        let kept: Vec<usize> = parts
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(p, _)| p.width())
            .collect();
        kept.iter().sum::<usize>() + gap * kept.len().saturating_sub(1)
    };
    while total(&keep) > width {
        let drop = parts
            .iter()
            .enumerate()
            .filter(|(i, _)| keep[*i])
            .max_by_key(|(i, p)| (p.prio, *i))
            .map(|(i, _)| i);
        match drop {
            Some(i) => keep[i] = false,
            None => break,
        }
    }
    keep
}

/// The parts that fit, joined by `gap` spaces.
pub(crate) fn fit<'a>(parts: Vec<Part<'a>>, width: u16, gap: usize) -> Line<'a> {
    let keep = keep_fitting(&parts, usize::from(width), gap);
    let mut spans = Vec::new();
    for (part, _) in parts.into_iter().zip(&keep).filter(|(_, k)| **k) {
        if !spans.is_empty() {
            spans.push(Span::raw(" ".repeat(gap)));
        }
        spans.extend(part.spans);
    }
    Line::from(spans)
}

/// `text` cut to `width` columns with an ellipsis. For names only (URLs,
/// models), never for numbers.
pub(crate) fn ellipsize(text: &str, width: usize) -> String {
    let char_width = |c: char| {
        let mut bytes = [0u8; 4];
        Span::raw(&*c.encode_utf8(&mut bytes)).width()
    };
    let total = Span::raw(text).width();
    if total <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

// ---------------------------------------------------------------- sparkline

const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Per-second latency bars, newest at the right edge, one column a second,
/// scaled to the largest value shown. A second in which the concurrency
/// target changed gets a `│` marker in its column, so a latency step can be
/// matched to the keypress that caused it.
///
/// `lower`, where given, is a part of each bar drawn at its foot in its own
/// style (the waiting's in-prefill part under its queued part): cells whose
/// middle lies within it take `lower`'s style.
pub(crate) struct Spark<'a> {
    pub points: &'a [SparkPoint],
    pub value: SparkValue,
    pub style: Style,
    pub marker_style: Style,
    pub lower: Option<(SparkValue, Style)>,
}

/// What a bar of a point shows.
pub(crate) type SparkValue = fn(&SparkPoint) -> Option<u64>;

impl Widget for Spark<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.is_empty() {
            return;
        }
        let n = self.points.len().min(usize::from(area.width));
        let shown = &self.points[self.points.len() - n..];
        let max = shown
            .iter()
            .filter_map(self.value)
            .max()
            .unwrap_or(0)
            .max(1);
        let rows = u64::from(area.height);
        let left = area.right() - n as u16;
        for (i, p) in shown.iter().enumerate() {
            let x = left + i as u16;
            let eighths = (self.value)(p).map_or(0, |v| {
                // Any sample shows at least a sliver: "no data" stays blank.
                ((v as f64 / max as f64 * (rows * 8) as f64).round() as u64).max(1)
            });
            let lower = self.lower.map(|(value, style)| {
                let part = value(p).unwrap_or(0).min((self.value)(p).unwrap_or(0));
                let eighths = (part as f64 / max as f64 * (rows * 8) as f64).round() as u64;
                (eighths, style)
            });
            for r in 0..rows {
                let y = area.bottom() - 1 - r as u16;
                let fill = eighths.saturating_sub(r * 8).min(8) as usize;
                if fill > 0 {
                    let style = match lower {
                        Some((under, style)) if r * 8 + 4 < under => style,
                        _ => self.style,
                    };
                    buf[(x, y)].set_char(BARS[fill]).set_style(style);
                }
            }
            if p.marker {
                // Mark the empty cells above the bar; a full column (or a
                // one-row panel) gives up its top cell to the marker.
                let full_rows = eighths / 8;
                let top_filled = full_rows + u64::from(eighths % 8 > 0);
                let mut marked = false;
                for r in top_filled..rows {
                    let y = area.bottom() - 1 - r as u16;
                    buf[(x, y)].set_char('│').set_style(self.marker_style);
                    marked = true;
                }
                if !marked {
                    buf[(x, area.top())]
                        .set_char('│')
                        .set_style(self.marker_style);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "widgets_tests.rs"]
mod tests;
