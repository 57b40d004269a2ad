//! The throughput chart's canvas: scales from data to pixels, gridlines and
//! axes, the knee and SLO marks, the series, and their labels placed clear
//! of the data.

use super::*;

/// Scales from data to the canvas.
pub(super) struct Plot {
    pub(super) area: PlotBox,
    /// log2 domain of the x axis.
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) intervals: usize,
    pub(super) left_step: f64,
    pub(super) right_step: f64,
}

impl Plot {
    pub(super) fn new(data: &ChartData, area: PlotBox) -> Option<Plot> {
        let first = *data.concurrencies.first()?;
        let last = *data.concurrencies.last()?;
        let (lo, hi) = if first == last {
            (f64::from(first).log2() - 1.0, f64::from(last).log2() + 1.0)
        } else {
            (f64::from(first).log2() - 0.4, f64::from(last).log2() + 0.4)
        };
        let max_left = data
            .markers
            .iter()
            .filter_map(|m| m.throughput)
            .chain(data.capacity.map(|c| c.1))
            .fold(0.0, f64::max);
        let max_right = data
            .markers
            .iter()
            .filter_map(|m| m.p99_ttft)
            .chain(data.slo_ttft_ms)
            .fold(0.0, f64::max);
        let (intervals, left_step, right_step) = shared_ticks(max_left, max_right);
        Some(Plot {
            area,
            lo,
            hi,
            intervals,
            left_step,
            right_step,
        })
    }

    pub(super) fn x(&self, c: u32) -> f64 {
        let t = (f64::from(c.max(1)).log2() - self.lo) / (self.hi - self.lo);
        self.area.x0 + t * (self.area.x1 - self.area.x0)
    }

    pub(super) fn y(&self, v: f64, step: f64) -> f64 {
        let top_value = step * self.intervals as f64;
        let t = (v / top_value).clamp(0.0, 1.0);
        self.area.bottom - t * (self.area.bottom - self.area.top)
    }

    pub(super) fn y_left(&self, v: f64) -> f64 {
        self.y(v, self.left_step)
    }

    pub(super) fn y_right(&self, v: f64) -> f64 {
        self.y(v, self.right_step)
    }

    pub(super) fn grid_and_axes(&self, svg: &mut String, data: &ChartData) {
        let _ = writeln!(svg, r#"<g id="grid" stroke="{GRID}" stroke-width="1">"#);
        for i in 1..=self.intervals {
            let y = self.y_left(self.left_step * i as f64);
            let _ = writeln!(
                svg,
                r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
                self.area.x0, self.area.x1
            );
        }
        for &c in &data.concurrencies {
            let x = self.x(c);
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke-dasharray="2 4"/>"#,
                self.area.top, self.area.bottom
            );
        }
        svg.push_str("</g>\n");

        // x axis: a tick and a label at every measured concurrency.
        let _ = writeln!(
            svg,
            r#"<g id="axis-x" class="axis" font-size="11" fill="{INK}">"#
        );
        let _ = writeln!(
            svg,
            r#"<line x1="{:.1}" y1="{b:.1}" x2="{:.1}" y2="{b:.1}" stroke="{AXIS}" stroke-width="1"/>"#,
            self.area.x0,
            self.area.x1,
            b = self.area.bottom
        );
        let mut last_label: Option<f64> = None;
        for &c in &data.concurrencies {
            let x = self.x(c);
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{AXIS}"/>"#,
                self.area.bottom,
                self.area.bottom + 5.0
            );
            let room = 7.0 * c.to_string().len() as f64 + 8.0;
            if last_label.is_none_or(|l| x - l >= room) {
                let _ = writeln!(
                    svg,
                    r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{c}</text>"#,
                    self.area.bottom + 18.0
                );
                last_label = Some(x);
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="12" fill="{MUTED}" text-anchor="middle">concurrency (streams in flight, log2 scale)</text>"#,
            (self.area.x0 + self.area.x1) / 2.0,
            HEIGHT - 14.0
        );
        svg.push_str("</g>\n");

        // Left axis: throughput; right axis: p99 TTFT. Shared gridlines.
        for (id, step, x, anchor, dx, color, title, rotate_x) in [
            (
                "axis-left",
                self.left_step,
                self.area.x0,
                "end",
                -8.0,
                THROUGHPUT,
                "total output throughput (tok/s)",
                20.0,
            ),
            (
                "axis-right",
                self.right_step,
                self.area.x1,
                "start",
                8.0,
                TTFT,
                "p99 TTFT (ms)",
                WIDTH - 16.0,
            ),
        ] {
            let _ = writeln!(
                svg,
                r#"<g id="{id}" class="axis" font-size="11" fill="{color}">"#
            );
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{AXIS}" stroke-width="1"/>"#,
                self.area.top, self.area.bottom
            );
            for i in 0..=self.intervals {
                let v = step * i as f64;
                let y = self.y(v, step);
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
                    x + dx,
                    y + 4.0,
                    tick_label(v, step)
                );
            }
            let mid = (self.area.top + self.area.bottom) / 2.0;
            let angle = if id == "axis-left" { -90 } else { 90 };
            let _ = writeln!(
                svg,
                r#"<text x="{rotate_x:.1}" y="{mid:.1}" font-size="12" text-anchor="middle" transform="rotate({angle} {rotate_x:.1} {mid:.1})">{}</text>"#,
                esc(title)
            );
            svg.push_str("</g>\n");
        }
    }

    pub(super) fn knee(&self, svg: &mut String, data: &ChartData) {
        let Some((from, to, reason)) = &data.knee else {
            return;
        };
        let (a, b) = (self.x(*from), self.x(*to));
        let (a, b) = (a.min(b), a.max(b));
        let _ = writeln!(
            svg,
            r#"<g id="knee" class="marker-knee"><title>knee: {}</title>"#,
            esc(reason)
        );
        let _ = writeln!(
            svg,
            r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{KNEE}" fill-opacity="0.08"/>"#,
            self.area.top,
            (b - a).max(2.0),
            self.area.bottom - self.area.top
        );
        for x in [a, b] {
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{KNEE}" stroke-opacity="0.45" stroke-dasharray="4 3"/>"#,
                self.area.top, self.area.bottom
            );
        }
        svg.push_str("</g>\n");
    }

    pub(super) fn slo(&self, svg: &mut String, data: &ChartData) {
        let Some(slo) = data.slo_ttft_ms else {
            return;
        };
        let y = self.y_right(slo);
        let _ = writeln!(
            svg,
            r#"<g id="slo" class="marker-slo"><title>p99 TTFT SLO: {} ms</title>"#,
            crate::fmt::threshold(slo)
        );
        let _ = writeln!(
            svg,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{SLO}" stroke-width="1.5" stroke-dasharray="7 4"/>"#,
            self.area.x0, self.area.x1
        );
        svg.push_str("</g>\n");
    }

    pub(super) fn series(&self, svg: &mut String, data: &ChartData, series: Series) {
        let color = series.color();
        let y = |v: f64| match series {
            Series::Throughput => self.y_left(v),
            Series::P99Ttft => self.y_right(v),
        };
        let _ = writeln!(
            svg,
            r#"<g id="{id}" class="series {id}">"#,
            id = series.id()
        );
        let points: Vec<(f64, f64)> = data
            .line
            .iter()
            .filter_map(|(c, t, p)| {
                let v = match series {
                    Series::Throughput => *t,
                    Series::P99Ttft => *p,
                }?;
                Some((self.x(*c), y(v)))
            })
            .collect();
        if points.len() > 1 {
            let _ = writeln!(
                svg,
                r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2.5" stroke-linejoin="round" stroke-linecap="round"/>"#,
                path_data(&points)
            );
        }
        for m in &data.markers {
            let Some(v) = series.value(m) else {
                continue;
            };
            let (cx, cy) = (self.x(m.concurrency), y(v));
            let tip = format!("{}: {}", m.label, series.describe(v));
            marker(svg, series, m.kind, cx, cy, &tip);
        }
        svg.push_str("</g>\n");
    }

    /// The model's throughput at the measured levels, dashed, with the
    /// word `predicted` at its end: never a measured figure's mark.
    pub(super) fn predicted(&self, svg: &mut String, data: &ChartData) {
        if data.predicted.len() < 2 {
            return;
        }
        let points: Vec<(f64, f64)> = data
            .predicted
            .iter()
            .map(|(c, t)| (self.x(*c), self.y_left(*t)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<g id="predicted" class="series predicted"><title>predicted by the model fitted to this run (model.json), not measured</title>"#
        );
        let _ = writeln!(
            svg,
            r#"<path d="{}" fill="none" stroke="{THROUGHPUT}" stroke-width="1.5" stroke-opacity="0.8" stroke-dasharray="6 4"/>"#,
            path_data(&points)
        );
        if let Some((x, y)) = points.last() {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="{THROUGHPUT}">predicted</text>"#,
                x - 4.0,
                y + 16.0
            );
        }
        svg.push_str("</g>\n");
    }

    /// Everything drawn on each series' path, for labels to keep clear of:
    /// points every few pixels along both lines, and every marker.
    pub(super) fn obstacles(&self, data: &ChartData) -> Vec<(f64, f64)> {
        let mut pts = Vec::new();
        for series in [Series::Throughput, Series::P99Ttft] {
            let line: Vec<(f64, f64)> = data
                .line
                .iter()
                .filter_map(|(c, t, p)| {
                    let y = match series {
                        Series::Throughput => self.y_left((*t)?),
                        Series::P99Ttft => self.y_right((*p)?),
                    };
                    Some((self.x(*c), y))
                })
                .collect();
            sample_polyline(&line, &mut pts);
            for m in &data.markers {
                if let Some(v) = series.value(m) {
                    let y = match series {
                        Series::Throughput => self.y_left(v),
                        Series::P99Ttft => self.y_right(v),
                    };
                    let x = self.x(m.concurrency);
                    for (dx, dy) in [(0.0, 0.0), (-5.0, 0.0), (5.0, 0.0), (0.0, -5.0), (0.0, 5.0)] {
                        pts.push((x + dx, y + dy));
                    }
                }
            }
        }
        pts
    }

    /// The SLO's and the capacity's labels, placed clear of the lines, and
    /// the capacity marker itself.
    pub(super) fn labels_and_capacity(&self, svg: &mut String, data: &ChartData) {
        let points = self.obstacles(data);
        let mut boxes = Vec::new();
        if let Some((from, to, _)) = &data.knee {
            // "knee" over "64→128", at the top of the band or, when a line
            // passes there, at its foot.
            let mid = (self.x(*from) + self.x(*to)) / 2.0;
            let sub = format!("{from}→{to}");
            let at = |y: f64| {
                [
                    TextBox::new(mid, y, "middle", "knee", 12.0, true),
                    TextBox::new(mid, y + 13.0, "middle", &sub, 10.0, false),
                ]
            };
            let hits = |pair: &[TextBox; 2]| {
                points
                    .iter()
                    .filter(|p| pair.iter().any(|b| b.grown(2.0).contains(**p)))
                    .count()
            };
            let top = at(self.area.top + 16.0);
            let foot = at(self.area.bottom - 20.0);
            let (y, pair) = if hits(&foot) < hits(&top) {
                (self.area.bottom - 20.0, foot)
            } else {
                (self.area.top + 16.0, top)
            };
            let _ = writeln!(
                svg,
                r##"<g id="knee-label" class="marker-knee" fill="{KNEE}" text-anchor="middle" stroke="#ffffff" stroke-width="3" paint-order="stroke"><text x="{mid:.1}" y="{y:.1}" font-size="12" font-weight="bold">knee</text><text x="{mid:.1}" y="{:.1}" font-size="10">{}</text></g>"##,
                y + 13.0,
                esc(&sub)
            );
            boxes.extend(pair);
        }
        if let Some(slo) = data.slo_ttft_ms {
            let y = self.y_right(slo);
            // As the user set it (40.5 stays 40.5), as the sentences say it.
            let text = format!("p99 TTFT SLO {} ms", crate::fmt::threshold(slo));
            let candidates = [
                (self.area.x0 + 6.0, y - 6.0, "start"),
                (self.area.x1 - 6.0, y - 6.0, "end"),
                (self.area.x0 + 6.0, y + 15.0, "start"),
                (self.area.x1 - 6.0, y + 15.0, "end"),
            ];
            let Placed { x, y, anchor, .. } =
                self.area
                    .place(3.0, &text, 11.0, false, &candidates, &points, &mut boxes);
            let _ = writeln!(
                svg,
                r##"<g id="slo-label" class="marker-slo"><text x="{x:.1}" y="{y:.1}" font-size="11" fill="{SLO}" text-anchor="{anchor}" stroke="#ffffff" stroke-width="3" paint-order="stroke">{}</text></g>"##,
                esc(&text)
            );
        }
        let Some((c, t)) = data.capacity else {
            return;
        };
        let (x, y) = (self.x(c), self.y_left(t));
        let _ = writeln!(
            svg,
            r#"<g id="capacity" class="marker-capacity"><title>capacity: {c} streams, {} tok/s</title>"#,
            group(t, 0)
        );
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{CAPACITY}" stroke-width="1.5" stroke-dasharray="3 3"/>"#,
            (y + 11.0).min(self.area.bottom),
            self.area.bottom
        );
        let _ = writeln!(
            svg,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="10" fill="none" stroke="{CAPACITY}" stroke-width="2.5"/>"#
        );
        let label = format!(
            "capacity: {c} stream{}, {} tok/s",
            if c == 1 { "" } else { "s" },
            group(t, 0)
        );
        let candidates = [
            (x - 16.0, y + 4.0, "end"),
            (x + 16.0, y + 4.0, "start"),
            (x - 10.0, y - 15.0, "end"),
            (x + 10.0, y - 15.0, "start"),
            (x - 10.0, y + 26.0, "end"),
            (x + 10.0, y + 26.0, "start"),
            (x, y - 18.0, "middle"),
            (x, y + 30.0, "middle"),
        ];
        let Placed {
            x: lx,
            y: ly,
            anchor,
            ..
        } = self
            .area
            .place(3.0, &label, 12.0, true, &candidates, &points, &mut boxes);
        let _ = writeln!(
            svg,
            r##"<text x="{lx:.1}" y="{ly:.1}" font-size="12" font-weight="bold" fill="{CAPACITY}" text-anchor="{anchor}" stroke="#ffffff" stroke-width="4" paint-order="stroke">{}</text></g>"##,
            esc(&label)
        );
    }
}

/// An SVG path's `d` through points in order: a move, then lines.
fn path_data(points: &[(f64, f64)]) -> String {
    points
        .iter()
        .enumerate()
        .map(|(i, (x, y))| format!("{}{x:.1} {y:.1}", if i == 0 { "M" } else { "L" }))
        .collect::<Vec<_>>()
        .join(" ")
}
