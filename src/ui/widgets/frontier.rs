//! The frontier chart: output tok/s per user against total output tok/s.

use super::*;

/// Where a level sits on the frontier: (output tok/s per user, total
/// output tok/s). Per user is total / streams, `per_stream_tok_s` as the
/// level table and `report --format svg` have it (waiting included).
pub(crate) fn frontier_xy(pt: &ChartPoint) -> (f64, f64) {
    (pt.tok_s / f64::from(pt.concurrency.max(1)), pt.tok_s)
}

/// The cell of (per user, total) in a graph of `gw` x `gh` cells whose axes
/// run from 0 to `x_top` and `y_top`: the braille arithmetic of the curves
/// (2 dots a cell across, 4 down), so a glyph sits on its line's end.
pub(crate) fn frontier_cell(xy: (f64, f64), tops: (f64, f64), gw: u16, gh: u16) -> (u16, u16) {
    let fx = if tops.0 > 0.0 { xy.0 / tops.0 } else { 0.0 };
    let fy = if tops.1 > 0.0 { xy.1 / tops.1 } else { 0.0 };
    (cell(fx, gw, 2), cell(1.0 - fy, gh, 4))
}

/// The interactivity-throughput frontier (`v`): output tok/s per user
/// across, total output tok/s up, both linear from 0; a curve through each
/// series' finished levels in concurrency order, each point labelled with
/// its streams where there is room. The same points as [`ThroughputChart`],
/// drawn against each other instead of against concurrency.
pub(crate) struct FrontierChart<'a> {
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
        let left_labels = left_labels(&label_rows(gh), y_top);
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
            waiting_note(buf, graph, p);
            return;
        }
        let tops = (x_top, y_top);
        // Curves: each series' finished, complete levels in concurrency
        // order (the running level's figure is not yet a result); the
        // front series last, so it is on top where they cross.
        let finished = |pt: &ChartPoint| !pt.partial && pt.kind != PointKind::Running;
        for (s, on_curve) in series_lines(self.points, self.front, finished) {
            let line: Vec<(f64, f64)> = on_curve
                .iter()
                .map(|pt| {
                    let (u, t) = xy(pt);
                    (u / x_top, t / y_top)
                })
                .collect();
            braille_line(buf, graph, &line, series_style(p, s));
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
