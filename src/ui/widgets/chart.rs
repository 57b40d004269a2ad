//! The throughput chart on a log2 axis: its points, glyphs and series
//! styles, the axes both live charts share, and the widget.

use super::*;

/// Ticks on the bottom axis at their columns, each label centred under its
/// tick and dropped where it would touch the one before; the first column
/// free after the last label.
pub(super) fn bottom_ticks(
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

/// The value axis's label rows of a plot `gh` rows high: bottom, top, and
/// the middle when there is room, each on the row its fraction of the top
/// maps to (as the points do).
pub(super) fn label_rows(gh: u16) -> Vec<(u16, f64)> {
    let row_of = |frac: f64| cell(1.0 - frac, gh, 4);
    let mut rows = vec![(row_of(0.0), 0.0), (row_of(1.0), 1.0)];
    if gh >= 5 {
        rows.push((row_of(0.5), 0.5));
    }
    rows
}

/// The left axis's labels at `rows`, for a top value `y_top`.
pub(super) fn left_labels(rows: &[(u16, f64)], y_top: f64) -> Vec<(u16, String)> {
    rows.iter().map(|&(r, f)| (r, compact(f * y_top))).collect()
}

/// What an empty chart says, centred in its plot area `graph`.
pub(super) fn waiting_note(buf: &mut Buffer, graph: Rect, p: &Palette) {
    let note = "waiting for the first level";
    if usize::from(graph.width) > note.len() {
        let x = graph.x + (graph.width - note.len() as u16) / 2;
        buf.set_string(x, graph.y + graph.height / 2, note, p.dim);
    }
}

/// The left and bottom axes of a chart whose plot area is `graph`, with
/// the left axis's labels at their rows (offsets from the top).
pub(super) fn left_axis(buf: &mut Buffer, graph: Rect, labels: &[(u16, String)], p: &Palette) {
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
pub(crate) enum PointKind {
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
    pub(crate) fn glyph(self, partial: bool) -> char {
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
    pub(crate) fn glyph_in(self, series: u8, partial: bool) -> char {
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
pub(crate) const P99_GLYPH: char = '×';
pub(crate) const P99_GLYPH_B: char = '+';
/// The capacity point, on the chart and in the level table.
pub(crate) const CAPACITY_GLYPH: char = '★';
/// The knee: a dotted line through the step where more streams stop paying.
pub(crate) const KNEE_GLYPH: char = '┊';
/// A predicted curve in the legend: dashed, as it is drawn.
pub(crate) const PREDICTED_GLYPH: char = '┄';

/// Braille dots a predicted curve's dashes and gaps each take.
const DASH_DOTS: f64 = 3.0;

/// A throughput curve the server's model predicts, never a measurement:
/// drawn dashed beside the measured points, and labelled `predicted`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PredictedCurve {
    /// (streams, output tok/s), by rising streams.
    pub points: Vec<(u32, f64)>,
    /// Whose colour it takes (the series it predicts).
    pub series: u8,
    /// The setting it predicts, where several are drawn (a tune): its end
    /// is marked `LABEL predicted`.
    pub label: Option<String>,
}

/// `line` cut into dashes of [`DASH_DOTS`] braille dots with gaps as long
/// between them, measured in the dots of a `cols` x `rows` area: the dashes
/// to draw, each (from, to), in the same 0..=1 units.
pub(super) fn dashes(line: &[(f64, f64)], cols: u16, rows: u16) -> Vec<((f64, f64), (f64, f64))> {
    let (dots_x, dots_y) = (f64::from(cols) * 2.0, f64::from(rows) * 4.0);
    let mut out = Vec::new();
    // Where along the whole line the pattern stands, in dots, so that a
    // dash carries on across a point.
    let mut walked = 0.0;
    for w in line.windows(2) {
        let (a, b) = (w[0], w[1]);
        let length = ((b.0 - a.0) * dots_x).hypot((b.1 - a.1) * dots_y);
        if length <= 0.0 {
            continue;
        }
        let at = |d: f64| {
            let t = (d / length).clamp(0.0, 1.0);
            (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t)
        };
        let mut d = 0.0;
        while d < length {
            let phase = (walked + d) % (2.0 * DASH_DOTS);
            let (on, left) = if phase < DASH_DOTS {
                (true, DASH_DOTS - phase)
            } else {
                (false, 2.0 * DASH_DOTS - phase)
            };
            let end = (d + left).min(length);
            if on {
                out.push((at(d), at(end)));
            }
            d = end;
        }
        walked += length;
    }
    out
}

/// Each series' points that `keep` keeps, by rising concurrency; the
/// front series last, so that its line is drawn on top where lines cross.
pub(super) fn series_lines(
    points: &[ChartPoint],
    front: u8,
    keep: impl Fn(&ChartPoint) -> bool,
) -> Vec<(u8, Vec<&ChartPoint>)> {
    let mut series: Vec<u8> = points.iter().map(|pt| pt.series).collect();
    series.sort_unstable();
    series.dedup();
    series.sort_by_key(|s| *s == front);
    series
        .into_iter()
        .map(|s| {
            let mut on_line: Vec<&ChartPoint> = points
                .iter()
                .filter(|pt| pt.series == s && keep(pt))
                .collect();
            on_line.sort_by_key(|pt| pt.concurrency);
            (s, on_line)
        })
        .collect()
}

/// A line through `line`'s points (0..=1 on both axes of `area`), in
/// Braille dots of `style`'s colour.
pub(super) fn braille_line(buf: &mut Buffer, area: Rect, line: &[(f64, f64)], style: Style) {
    let color = style.fg.unwrap_or(ratatui::style::Color::Reset);
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
        .render(area, buf);
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ChartPoint {
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
    pub(crate) fn glyph(&self) -> char {
        if self.capacity {
            CAPACITY_GLYPH
        } else {
            self.kind.glyph_in(self.series, self.partial)
        }
    }

    pub(crate) fn style(&self, p: &Palette) -> Style {
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
pub(crate) struct ThroughputChart<'a> {
    pub points: &'a [ChartPoint],
    /// The largest concurrency the axis must hold (the plan's top, or higher).
    pub x_max: u32,
    pub palette: &'a Palette,
    /// The knee step (from, to concurrency): a dotted line between the two,
    /// labelled `knee` where there is room.
    pub knee: Option<(u32, u32)>,
    /// The series drawn on top (the run the table shows).
    pub front: u8,
    /// Curves the server's model predicts, drawn dashed.
    pub predicted: &'a [PredictedCurve],
}

/// A series' colour on the charts and in their legends.
pub(crate) fn series_style(p: &Palette, series: u8) -> Style {
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
pub(super) fn cell(frac: f64, cells: u16, sub: u16) -> u16 {
    if cells == 0 {
        return 0;
    }
    let res = f64::from(u32::from(cells) * u32::from(sub) - 1);
    // `as` saturates; the product above cannot overflow u32 from two u16s.
    let dot = (frac.clamp(0.0, 1.0) * res) as u32;
    (dot / u32::from(sub)).min(u32::from(cells - 1)) as u16
}

impl ThroughputChart<'_> {
    pub(super) fn x_frac(c: u32, kmax: f64) -> f64 {
        f64::from(c.max(1)).log2() / kmax
    }
}

/// Whether the cells of `text` at (x, y) are free: inside `graph` and blank,
/// or holding one of `over` (a mark the text may sit on).
pub(super) fn room_for(
    buf: &Buffer,
    graph: Rect,
    x: u16,
    y: u16,
    text: &str,
    over: &[&str],
) -> bool {
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
        let predicted_top = self
            .predicted
            .iter()
            .flat_map(|c| c.points.iter().map(|pt| pt.1))
            .fold(0.0, f64::max);
        let y_top = nice_ceil(
            self.points
                .iter()
                .map(|p| p.tok_s)
                .fold(predicted_top, f64::max)
                * 1.05,
        );
        let p99_max = self
            .points
            .iter()
            .filter_map(|p| p.p99_ttft_ms)
            .fold(0.0, f64::max);
        let p99_top = (p99_max > 0.0).then(|| nice_ceil(p99_max * 1.05));

        // Rows: graph, then the axis line, then tick labels.
        let gh = area.height - 2;
        let label_rows = label_rows(gh);
        let left_labels = left_labels(&label_rows, y_top);
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

        if self.points.is_empty() && self.predicted.is_empty() {
            waiting_note(buf, graph, p);
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

        // Throughput is the curve the eye should follow: a line through
        // each series' finished, complete levels (the median where a
        // concurrency ran more than once), as `chart.svg` draws it. The
        // running level and partial ones stay loose points: their values
        // are not results yet.
        for (s, by_c) in series_lines(self.points, self.front, |pt| {
            pt.kind != PointKind::Running && !pt.partial
        }) {
            let mut line: Vec<(f64, f64)> = Vec::new();
            for group in by_c.chunk_by(|a, b| a.concurrency == b.concurrency) {
                if let Some(v) = crate::stats::percentile::median(group.iter().map(|pt| pt.tok_s)) {
                    line.push((Self::x_frac(group[0].concurrency, kmax), v / y_top));
                }
            }
            braille_line(buf, graph, &line, series_style(p, s));
        }
        // Predictions under the measured points, dashed so that the eye
        // never takes them for a measured line.
        for curve in self.predicted {
            let line: Vec<(f64, f64)> = curve
                .points
                .iter()
                .map(|&(c, v)| (Self::x_frac(c, kmax), v / y_top))
                .collect();
            let style = series_style(p, curve.series);
            let color = style.fg.unwrap_or(ratatui::style::Color::Reset);
            let pieces = dashes(&line, gw, gh);
            Canvas::default()
                .marker(Marker::Braille)
                .x_bounds([0.0, 1.0])
                .y_bounds([0.0, 1.0])
                .paint(|ctx| {
                    for (from, to) in &pieces {
                        ctx.draw(&CanvasLine {
                            x1: from.0,
                            y1: from.1,
                            x2: to.0,
                            y2: to.1,
                            color,
                        });
                    }
                })
                .render(graph, buf);
        }
        // p99 TTFT is secondary: its marks only, scaled to the right axis,
        // so that no second line competes with the throughput's.
        if let Some(top) = p99_top {
            for pt in self.points {
                let Some(ms) = pt.p99_ttft_ms else { continue };
                let (glyph, style) = if pt.series % 2 == 1 {
                    (P99_GLYPH_B, p.p99_b)
                } else {
                    (P99_GLYPH, p.p99)
                };
                let x = col_of(Self::x_frac(pt.concurrency, kmax));
                buf[(x, row_of_value(ms / top))]
                    .set_char(glyph)
                    .set_style(style);
            }
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
        // Each prediction's word at its far end, above or below it: the
        // setting it predicts where it names one.
        for curve in self.predicted {
            let Some(&(c, v)) = curve.points.last() else {
                continue;
            };
            let named = curve.label.as_ref().map(|l| format!("{l} predicted"));
            let style = series_style(p, curve.series);
            let (x, y) = (col_of(Self::x_frac(c, kmax)), row_of_value(v / y_top));
            let words = named.iter().map(String::as_str).chain(["predicted"]);
            'word: for word in words {
                let w = word.chars().count() as u16;
                let spots = [
                    (x.saturating_sub(w), y.saturating_sub(1)),
                    (x.saturating_sub(w), y + 1),
                    (x.saturating_sub(w / 2), y.saturating_sub(1)),
                    (x.saturating_sub(w / 2), y + 1),
                    (x.saturating_sub(w + 1), y),
                    (x.saturating_sub(w), y.saturating_sub(2)),
                    (x.saturating_sub(w), y + 2),
                ];
                for (lx, ly) in spots {
                    if room_for(buf, graph, lx, ly, word, &[]) {
                        buf.set_string(lx, ly, word, style);
                        break 'word;
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
