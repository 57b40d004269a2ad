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

// ---------------------------------------------------------------- numbers

pub use crate::fmt::{dollars, grouped, percent0 as percent};

/// A rate or a latency for a table cell: one decimal below 100, whole and
/// grouped above (`9.8`, `92.4`, `352`, `1,728`). `-` when unknown.
pub fn figure(x: Option<f64>) -> String {
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
pub fn times(x: f64) -> String {
    if x < 1.095 {
        format!("{x:.2}x")
    } else {
        format!("{x:.1}x")
    }
}

/// Short axis label: `0`, `950`, `2.3k`, `23k`, `1.2M`.
pub fn compact(v: f64) -> String {
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
pub fn clock(secs: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// The smallest 1, 2, 2.5 or 5 times a power of ten at or above `x`
/// (at least 1): axis tops that read well.
pub fn nice_ceil(x: f64) -> f64 {
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
pub struct Part<'a> {
    pub prio: u8,
    pub spans: Vec<Span<'a>>,
}

impl<'a> Part<'a> {
    pub fn new(prio: u8, spans: Vec<Span<'a>>) -> Part<'a> {
        Part { prio, spans }
    }
    pub fn text(prio: u8, text: impl Into<String>, style: Style) -> Part<'a> {
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
pub fn keep_fitting(parts: &[Part<'_>], width: usize, gap: usize) -> Vec<bool> {
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
pub fn fit<'a>(parts: Vec<Part<'a>>, width: u16, gap: usize) -> Line<'a> {
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
pub fn ellipsize(text: &str, width: usize) -> String {
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
pub struct Spark<'a> {
    pub points: &'a [SparkPoint],
    pub value: fn(&SparkPoint) -> Option<u64>,
    pub style: Style,
    pub marker_style: Style,
}

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
            for r in 0..rows {
                let y = area.bottom() - 1 - r as u16;
                let fill = eighths.saturating_sub(r * 8).min(8) as usize;
                if fill > 0 {
                    buf[(x, y)].set_char(BARS[fill]).set_style(self.style);
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

// ---------------------------------------------------------------- chart

/// Ticks on the bottom axis at their columns, each label centred under its
/// tick and dropped where it would touch the one before; the first column
/// free after the last label.
fn bottom_ticks(
    buf: &mut Buffer,
    area: Rect,
    axis_y: u16,
    ticks: impl IntoIterator<Item = (u16, String)>,
    p: &Palette,
) -> u16 {
    let label_y = axis_y + 1;
    let mut next_free = area.x;
    for (col, text) in ticks {
        buf[(col, axis_y)].set_char('┴').set_style(p.border);
        let w = text.len() as u16;
        let start = col
            .saturating_sub(w / 2)
            .max(next_free)
            .min(area.right() - w);
        if start >= next_free {
            buf.set_string(start, label_y, &text, p.dim);
            next_free = start + w + 1;
        }
    }
    next_free
}

/// The left and bottom axes of a chart whose plot area is `graph`, with
/// the left axis's labels at their rows (offsets from the top).
fn left_axis(buf: &mut Buffer, graph: Rect, labels: &[(u16, String)], p: &Palette) {
    let (gx, gy, gw, gh) = (graph.x, graph.y, graph.width, graph.height);
    let axis_y = gy + gh;
    for r in 0..gh {
        buf[(gx - 1, gy + r)].set_char('│').set_style(p.border);
    }
    buf[(gx - 1, axis_y)].set_char('└').set_style(p.border);
    for c in 0..gw {
        buf[(gx + c, axis_y)].set_char('─').set_style(p.border);
    }
    for (r, text) in labels {
        buf[(gx - 1, gy + r)].set_char('┤').set_style(p.border);
        buf.set_string(gx - 1 - text.len() as u16, gy + r, text, p.dim);
    }
}

/// How a point on the chart came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    /// A finished level of the plan.
    Planned,
    /// A finished level set by hand.
    Manual,
    /// The level running now, its value so far.
    Running,
}

impl PointKind {
    /// Filled for a complete level, hollow for a partial one (cut short by
    /// `n` or a concurrency key), so the eye discounts it.
    pub fn glyph(self, partial: bool) -> char {
        match (self, partial) {
            (PointKind::Planned, false) => '●',
            (PointKind::Planned, true) => '○',
            (PointKind::Manual, false) => '◆',
            (PointKind::Manual, true) => '◇',
            (PointKind::Running, _) => '◉',
        }
    }

    /// The glyph in a series: the first run's (and the live run's) as
    /// above; the second run of `tokbench view A B` has squares for its
    /// planned levels, so the two stay apart without colour.
    pub fn glyph_in(self, series: u8, partial: bool) -> char {
        match (series, self, partial) {
            (1, PointKind::Planned, false) => '■',
            (1, PointKind::Planned, true) => '□',
            (2, PointKind::Planned, false) => '▲',
            (2, PointKind::Planned, true) => '△',
            (3, PointKind::Planned, false) => '▼',
            (3, PointKind::Planned, true) => '▽',
            _ => self.glyph(partial),
        }
    }
}

/// The glyph of the p99 TTFT series, by series.
pub const P99_GLYPH: char = '×';
pub const P99_GLYPH_B: char = '+';
/// The capacity point, on the chart and in the level table.
pub const CAPACITY_GLYPH: char = '★';
/// The knee: a dotted line through the step where more streams stop paying.
pub const KNEE_GLYPH: char = '┊';

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChartPoint {
    pub concurrency: u32,
    pub tok_s: f64,
    pub p99_ttft_ms: Option<f64>,
    pub kind: PointKind,
    pub partial: bool,
    /// 0: the live run, or run A of `tokbench view`; 1: run B.
    pub series: u8,
    /// The capacity point (drawn as a star, labelled when there is room).
    pub capacity: bool,
}

impl ChartPoint {
    pub fn glyph(&self) -> char {
        if self.capacity {
            CAPACITY_GLYPH
        } else {
            self.kind.glyph_in(self.series, self.partial)
        }
    }

    pub fn style(&self, p: &Palette) -> Style {
        if self.capacity {
            return p.capacity;
        }
        match (self.kind, self.series) {
            (PointKind::Running, _) => p.running,
            (PointKind::Manual, _) => p.point_manual,
            (PointKind::Planned, 1) => p.point_b,
            (PointKind::Planned, 2) => p.point_c,
            (PointKind::Planned, 3) => p.point_d,
            (PointKind::Planned, _) => p.point_planned,
        }
    }
}

/// Output tok/s against streams on a log2 axis (ticks labelled with the real
/// concurrency: 1, 4, 16, ...), with p99 TTFT on its own scale at the right.
///
/// Not ratatui's `Chart`: it spreads intermediate axis labels over
/// `width / labels` columns instead of placing them at their values, which on
/// a log axis would put "16" visibly off its points.
pub struct ThroughputChart<'a> {
    pub points: &'a [ChartPoint],
    /// The largest concurrency the axis must hold (the plan's top, or higher).
    pub x_max: u32,
    pub palette: &'a Palette,
    /// The knee step (from, to concurrency): a dotted line between the two,
    /// labelled `knee` where there is room.
    pub knee: Option<(u32, u32)>,
    /// The series drawn on top (the run the table shows).
    pub front: u8,
}

/// A series' colour on the charts and in their legends.
pub fn series_style(p: &Palette, series: u8) -> Style {
    match series % 4 {
        0 => p.point_planned,
        1 => p.point_b,
        2 => p.point_c,
        _ => p.point_d,
    }
}

/// Where a fraction of an axis lands, counted in cells from the left (x)
/// or from the top (y, given 1 - fraction): the arithmetic ratatui's canvas
/// uses for its braille dots (`sub` dots a cell), so a glyph sits on its
/// line's end.
fn cell(frac: f64, cells: u16, sub: u16) -> u16 {
    if cells == 0 {
        return 0;
    }
    let res = f64::from(u32::from(cells) * u32::from(sub) - 1);
    // `as` saturates; the product above cannot overflow u32 from two u16s.
    let dot = (frac.clamp(0.0, 1.0) * res) as u32;
    (dot / u32::from(sub)).min(u32::from(cells - 1)) as u16
}

impl ThroughputChart<'_> {
    fn x_frac(c: u32, kmax: f64) -> f64 {
        f64::from(c.max(1)).log2() / kmax
    }
}

/// Whether the cells of `text` at (x, y) are free: inside `graph` and blank,
/// or holding one of `over` (a mark the text may sit on).
fn room_for(buf: &Buffer, graph: Rect, x: u16, y: u16, text: &str, over: &[&str]) -> bool {
    let w = text.chars().count() as u16;
    if x < graph.x || x + w > graph.right() || y < graph.y || y >= graph.bottom() {
        return false;
    }
    (x..x + w).all(|cx| {
        let sym = buf[(cx, y)].symbol();
        sym == " " || over.contains(&sym)
    })
}

impl Widget for ThroughputChart<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < 16 || area.height < 4 {
            return;
        }
        let p = self.palette;
        let y_top = nice_ceil(self.points.iter().map(|p| p.tok_s).fold(0.0, f64::max) * 1.05);
        let p99_max = self
            .points
            .iter()
            .filter_map(|p| p.p99_ttft_ms)
            .fold(0.0, f64::max);
        let p99_top = (p99_max > 0.0).then(|| nice_ceil(p99_max * 1.05));

        // Rows: graph, then the axis line, then tick labels.
        let gh = area.height - 2;
        // Label rows: bottom, top, and the middle when there is room, each
        // on the row its value maps to (as the points do).
        let row_of = |frac: f64| cell(1.0 - frac, gh, 4);
        let mut label_rows: Vec<(u16, f64)> = vec![(row_of(0.0), 0.0), (row_of(1.0), 1.0)];
        if gh >= 5 {
            label_rows.push((row_of(0.5), 0.5));
        }
        let left_labels: Vec<(u16, String)> = label_rows
            .iter()
            .map(|&(r, f)| (r, compact(f * y_top)))
            .collect();
        let right_labels: Vec<(u16, String)> = match p99_top {
            Some(top) => label_rows
                .iter()
                .filter(|(_, f)| *f > 0.0)
                .map(|&(r, f)| (r, compact(f * top)))
                .collect(),
            None => Vec::new(),
        };
        let lw = left_labels.iter().map(|(_, s)| s.len()).max().unwrap_or(1) as u16;
        let rw = right_labels
            .iter()
            .map(|(_, s)| s.len() as u16 + 1)
            .max()
            .unwrap_or(0);
        let gx = area.x + lw + 1;
        let Some(gw) = area.width.checked_sub(lw + 1 + rw).filter(|w| *w >= 8) else {
            return;
        };
        let gy = area.y;
        let axis_y = gy + gh;
        let graph = Rect::new(gx, gy, gw, gh);

        // Axes.
        left_axis(buf, graph, &left_labels, p);
        if !right_labels.is_empty() {
            let rx = gx + gw;
            for r in 0..gh {
                buf[(rx, gy + r)].set_char('│').set_style(p.border);
            }
            buf[(rx, axis_y)].set_char('┘').set_style(p.border);
            for (r, text) in &right_labels {
                buf[(rx, gy + r)].set_char('├').set_style(p.border);
                buf.set_string(rx + 1, gy + r, text, p.p99);
            }
        }

        // The x axis: powers of two, every `step`-th labelled so that
        // labels keep a space between them.
        let kmax = f64::from(self.x_max.max(2)).log2().ceil();
        let powers = kmax as u32;
        let widest = format!("{}", 1u64 << powers).len() as u16;
        let per_power = f64::from(gw) / kmax;
        let step = (1..=powers)
            .find(|s| f64::from(*s) * per_power >= f64::from(widest + 1))
            .unwrap_or(powers.max(1));
        let label_y = axis_y + 1;
        let ticks = (0..=powers).step_by(step as usize).map(|k| {
            (
                gx + cell(f64::from(k) / kmax, gw, 2),
                format!("{}", 1u64 << k),
            )
        });
        let next_free = bottom_ticks(buf, area, axis_y, ticks, p);
        let title = "streams";
        let title_x = area.right().saturating_sub(title.len() as u16);
        if title_x > next_free {
            buf.set_string(title_x, label_y, title, p.dim);
        }

        if self.points.is_empty() {
            let note = "waiting for the first level";
            if usize::from(gw) > note.len() {
                let x = gx + (gw - note.len() as u16) / 2;
                buf.set_string(x, gy + gh / 2, note, p.dim);
            }
            return;
        }

        let col_of = |xf: f64| gx + cell(xf, gw, 2);
        let row_of_value = |yf: f64| gy + cell(1.0 - yf, gh, 4);

        // The knee first: every line and point is drawn over it.
        let knee_col = self.knee.map(|(from, to)| {
            let mid = (f64::from(from.max(1)).log2() + f64::from(to.max(1)).log2()) / 2.0;
            col_of(mid / kmax)
        });
        if let Some(col) = knee_col {
            for r in 0..gh {
                buf[(col, gy + r)].set_char(KNEE_GLYPH).set_style(p.knee);
            }
        }

        // p99 TTFT: a line through each series' levels in concurrency
        // order, scaled to the right axis (drawn into the left axis's units).
        let mut p99_marks: Vec<(f64, f64, u8)> = Vec::new();
        if let Some(top) = p99_top {
            let mut series: Vec<u8> = self.points.iter().map(|pt| pt.series).collect();
            series.sort_unstable();
            series.dedup();
            // The front series last, so its line is on top where they cross.
            series.sort_by_key(|s| *s == self.front);
            for s in series {
                let mut by_c: Vec<&ChartPoint> = self
                    .points
                    .iter()
                    .filter(|pt| pt.series == s && pt.p99_ttft_ms.is_some())
                    .collect();
                by_c.sort_by_key(|pt| pt.concurrency);
                let line: Vec<(f64, f64)> = by_c
                    .iter()
                    .filter_map(|pt| {
                        Some((Self::x_frac(pt.concurrency, kmax), pt.p99_ttft_ms? / top))
                    })
                    .collect();
                let segments: Vec<(f64, f64, f64, f64)> = line
                    .windows(2)
                    .map(|w| (w[0].0, w[0].1, w[1].0, w[1].1))
                    .collect();
                let style = if s % 2 == 1 { p.p99_b } else { p.p99 };
                let color = style.fg.unwrap_or(ratatui::style::Color::Reset);
                Canvas::default()
                    .marker(Marker::Braille)
                    .x_bounds([0.0, 1.0])
                    .y_bounds([0.0, 1.0])
                    .paint(|ctx| {
                        for &(x1, y1, x2, y2) in &segments {
                            ctx.draw(&CanvasLine {
                                x1,
                                y1,
                                x2,
                                y2,
                                color,
                            });
                        }
                    })
                    .render(graph, buf);
                p99_marks.extend(line.iter().map(|&(x, y)| (x, y, s)));
            }
        }
        for &(xf, yf, s) in &p99_marks {
            let (glyph, style) = if s % 2 == 1 {
                (P99_GLYPH_B, p.p99_b)
            } else {
                (P99_GLYPH, p.p99)
            };
            buf[(col_of(xf), row_of_value(yf))]
                .set_char(glyph)
                .set_style(style);
        }
        // Throughput on top: it is what the chart is about. The front
        // series over the other, the running level and the capacity point
        // last, so they are never hidden.
        let mut ordered: Vec<&ChartPoint> = self.points.iter().collect();
        ordered.sort_by_key(|pt| {
            (
                pt.series == self.front,
                pt.kind == PointKind::Running || pt.capacity,
                !pt.partial,
            )
        });
        for pt in &ordered {
            let x = col_of(Self::x_frac(pt.concurrency, kmax));
            let y = row_of_value(pt.tok_s / y_top);
            buf[(x, y)].set_char(pt.glyph()).set_style(pt.style(p));
        }

        // Words last, only on blank cells: a label never hides a point.
        let knee_glyph = KNEE_GLYPH.to_string();
        if let Some(col) = knee_col {
            let word = "knee";
            let w = word.len() as u16;
            // Centred on its line, else just left or right of it; the
            // highest row where it fits.
            let starts = [col.saturating_sub(w / 2), col.saturating_sub(w), col + 1];
            'rows: for y in gy..gy + gh {
                for x in starts {
                    if room_for(buf, graph, x, y, word, &[knee_glyph.as_str()]) {
                        buf.set_string(x, y, word, p.knee);
                        break 'rows;
                    }
                }
            }
        }
        if let Some(cap) = ordered.iter().rev().find(|pt| pt.capacity) {
            let x = col_of(Self::x_frac(cap.concurrency, kmax));
            let y = row_of_value(cap.tok_s / y_top);
            // Left of the star first (the knee, when there is one, is to
            // its right), then right, above, below; the long word before
            // the short, and over the knee's dotted line only as a last resort.
            'words: for over in [&[][..], &[knee_glyph.as_str()][..]] {
                for word in ["capacity", "cap"] {
                    let w = word.len() as u16;
                    let spots = [
                        (x.saturating_sub(w), y),
                        (x + 1, y),
                        (x.saturating_sub(w / 2), y.saturating_sub(1)),
                        (x.saturating_sub(w / 2), y + 1),
                    ];
                    for (lx, ly) in spots {
                        if room_for(buf, graph, lx, ly, word, over) {
                            buf.set_string(lx, ly, word, p.capacity);
                            break 'words;
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- frontier

/// Where a level sits on the frontier: (output tok/s per user, total
/// output tok/s). Per user is total / streams, `per_stream_tok_s` as the
/// level table and `report --format svg` have it (waiting included).
pub fn frontier_xy(pt: &ChartPoint) -> (f64, f64) {
    (pt.tok_s / f64::from(pt.concurrency.max(1)), pt.tok_s)
}

/// The cell of (per user, total) in a graph of `gw` x `gh` cells whose axes
/// run from 0 to `x_top` and `y_top`: the braille arithmetic of the curves
/// (2 dots a cell across, 4 down), so a glyph sits on its line's end.
pub fn frontier_cell(xy: (f64, f64), tops: (f64, f64), gw: u16, gh: u16) -> (u16, u16) {
    let fx = if tops.0 > 0.0 { xy.0 / tops.0 } else { 0.0 };
    let fy = if tops.1 > 0.0 { xy.1 / tops.1 } else { 0.0 };
    (cell(fx, gw, 2), cell(1.0 - fy, gh, 4))
}

/// The interactivity-throughput frontier (`v`): output tok/s per user
/// across, total output tok/s up, both linear from 0; a curve through each
/// series' finished levels in concurrency order, each point labelled with
/// its streams where there is room. The same points as [`ThroughputChart`],
/// drawn against each other instead of against concurrency.
pub struct FrontierChart<'a> {
    pub points: &'a [ChartPoint],
    pub palette: &'a Palette,
    /// The series drawn on top.
    pub front: u8,
    /// `--gpus`: the throughput axis divides by it (per user does not).
    pub gpus: Option<u32>,
}

impl Widget for FrontierChart<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < 16 || area.height < 4 {
            return;
        }
        let p = self.palette;
        let per_gpu = f64::from(self.gpus.filter(|g| *g > 0).unwrap_or(1));
        let xy = |pt: &ChartPoint| {
            let (u, t) = frontier_xy(pt);
            (u, t / per_gpu)
        };
        let xys: Vec<(f64, f64)> = self.points.iter().map(xy).collect();
        let y_top = nice_ceil(xys.iter().map(|v| v.1).fold(0.0, f64::max) * 1.05);
        let x_top = nice_ceil(xys.iter().map(|v| v.0).fold(0.0, f64::max) * 1.05);
        let gh = area.height - 2;
        let row_of = |frac: f64| cell(1.0 - frac, gh, 4);
        let mut label_rows: Vec<(u16, f64)> = vec![(row_of(0.0), 0.0), (row_of(1.0), 1.0)];
        if gh >= 5 {
            label_rows.push((row_of(0.5), 0.5));
        }
        let left_labels: Vec<(u16, String)> = label_rows
            .iter()
            .map(|&(r, f)| (r, compact(f * y_top)))
            .collect();
        let lw = left_labels.iter().map(|(_, s)| s.len()).max().unwrap_or(1) as u16;
        let gx = area.x + lw + 1;
        let Some(gw) = area.width.checked_sub(lw + 2).filter(|w| *w >= 8) else {
            return;
        };
        let gy = area.y;
        let axis_y = gy + gh;
        let graph = Rect::new(gx, gy, gw, gh);
        left_axis(buf, graph, &left_labels, p);
        // x ticks at 0, half and the top, each centred on its column.
        let label_y = axis_y + 1;
        let ticks = [0.0, 0.5, 1.0].map(|frac| (gx + cell(frac, gw, 2), compact(frac * x_top)));
        bottom_ticks(buf, area, axis_y, ticks, p);
        // The axis's name in the first gap between tick labels that holds
        // it with a blank either side (the top label takes the right end).
        let title = "tok/s per user";
        let title_w = title.len() as u16;
        let blank = |x: u16| buf[(x, label_y)].symbol() == " ";
        if let Some(x) = (gx + 1..area.right().saturating_sub(title_w + 1))
            .find(|&x| (x - 1..=x + title_w).all(blank))
        {
            buf.set_string(x, label_y, title, p.dim);
        }
        if self.points.is_empty() {
            let note = "waiting for the first level";
            if usize::from(gw) > note.len() {
                let x = gx + (gw - note.len() as u16) / 2;
                buf.set_string(x, gy + gh / 2, note, p.dim);
            }
            return;
        }
        let tops = (x_top, y_top);
        // Curves: each series' finished, complete levels in concurrency
        // order (the running level's figure is not yet a result); the
        // front series last, so it is on top where they cross.
        let mut series: Vec<u8> = self.points.iter().map(|pt| pt.series).collect();
        series.sort_unstable();
        series.dedup();
        series.sort_by_key(|s| *s == self.front);
        for s in series {
            let mut on_curve: Vec<&ChartPoint> = self
                .points
                .iter()
                .filter(|pt| pt.series == s && !pt.partial && pt.kind != PointKind::Running)
                .collect();
            on_curve.sort_by_key(|pt| pt.concurrency);
            let line: Vec<(f64, f64)> = on_curve
                .iter()
                .map(|pt| {
                    let (u, t) = xy(pt);
                    (u / x_top, t / y_top)
                })
                .collect();
            let color = series_style(p, s)
                .fg
                .unwrap_or(ratatui::style::Color::Reset);
            Canvas::default()
                .marker(Marker::Braille)
                .x_bounds([0.0, 1.0])
                .y_bounds([0.0, 1.0])
                .paint(|ctx| {
                    for w in line.windows(2) {
                        ctx.draw(&CanvasLine {
                            x1: w[0].0,
                            y1: w[0].1,
                            x2: w[1].0,
                            y2: w[1].1,
                            color,
                        });
                    }
                })
                .render(graph, buf);
        }
        let mut ordered: Vec<&ChartPoint> = self.points.iter().collect();
        ordered.sort_by_key(|pt| {
            (
                pt.series == self.front,
                pt.kind == PointKind::Running || pt.capacity,
                !pt.partial,
            )
        });
        let cells: Vec<(u16, u16)> = ordered
            .iter()
            .map(|pt| {
                let (c, r) = frontier_cell(xy(pt), tops, gw, gh);
                (gx + c, gy + r)
            })
            .collect();
        for (pt, &(x, y)) in ordered.iter().zip(&cells) {
            buf[(x, y)].set_char(pt.glyph()).set_style(pt.style(p));
        }
        // Streams beside each point, right of it else left, only on blank
        // (or curve) cells: a label never hides a point. The front series
        // and the capacity first, as the points are drawn last-on-top.
        let braille = |sym: &str| sym.chars().all(|c| ('\u{2800}'..='\u{28ff}').contains(&c));
        for (pt, &(x, y)) in ordered.iter().zip(&cells).rev() {
            let text = pt.concurrency.to_string();
            let w = text.len() as u16;
            for lx in [x + 1, x.saturating_sub(w)] {
                let free = lx >= graph.x
                    && lx + w <= graph.right()
                    && (lx..lx + w).all(|cx| {
                        let sym = buf[(cx, y)].symbol();
                        sym == " " || braille(sym)
                    });
                if free {
                    buf.set_string(lx, y, &text, pt.style(p));
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "widgets_tests.rs"]
mod tests;
