//! Drawing the frontier chart: gridlines and axes, each series' curve and
//! points, their labels placed clear of the data, capacity marks, legend.

use super::*;

pub(super) fn grid_and_axes(svg: &mut String, a: &Axes, gpus: Option<u32>) {
    let _ = writeln!(
        svg,
        r#"<g id="frontier-grid" stroke="{GRID}" stroke-width="1">"#
    );
    for i in 1..=a.y_n {
        let (_, y) = a.px(0.0, a.y_step * i as f64);
        let _ = writeln!(
            svg,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
            a.area.x0, a.area.x1
        );
    }
    for i in 1..=a.x_n {
        let (x, _) = a.px(a.x_step * i as f64, 0.0);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}"/>"#,
            a.area.top, a.area.bottom
        );
    }
    svg.push_str("</g>\n");
    let _ = writeln!(
        svg,
        r#"<g id="frontier-axis-x" class="axis" font-family="{FONT}" font-size="11" fill="{INK}">"#
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{:.1}" y1="{b:.1}" x2="{:.1}" y2="{b:.1}" stroke="{AXIS}"/>"#,
        a.area.x0,
        a.area.x1,
        b = a.area.bottom
    );
    for i in 0..=a.x_n {
        let v = a.x_step * i as f64;
        let (x, _) = a.px(v, 0.0);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{AXIS}"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            a.area.bottom,
            a.area.bottom + 5.0,
            a.area.bottom + 18.0,
            tick_label(v, a.x_step)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" fill="{MUTED}" text-anchor="middle">output tok/s per user (total output tok/s / streams, waiting included)</text></g>"#,
        (a.area.x0 + a.area.x1) / 2.0,
        HEIGHT - 14.0
    );
    let _ = writeln!(
        svg,
        r#"<g id="frontier-axis-y" class="axis" font-family="{FONT}" font-size="11" fill="{INK}">"#
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{AXIS}"/>"#,
        a.area.top,
        a.area.bottom,
        x = a.area.x0
    );
    for i in 0..=a.y_n {
        let v = a.y_step * i as f64;
        let (_, y) = a.px(0.0, v);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            a.area.x0 - 8.0,
            y + 4.0,
            tick_label(v, a.y_step)
        );
    }
    let mid = (a.area.top + a.area.bottom) / 2.0;
    let _ = writeln!(
        svg,
        r#"<text x="20" y="{mid:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 20 {mid:.1})">{}</text></g>"#,
        esc(&throughput_unit(gpus))
    );
}

pub(super) fn draw_curve(svg: &mut String, a: &Axes, curve: &Curve) {
    let color = series_color(curve.series);
    let _ = writeln!(
        svg,
        r#"<g id="frontier-curve-{}" class="frontier-curve"><title>{}</title>"#,
        curve.series,
        esc(&curve.label)
    );
    if curve.vertices.len() > 1 {
        let d: Vec<String> = curve
            .vertices
            .iter()
            .enumerate()
            .map(|(i, (_, u, t))| {
                let (x, y) = a.px(*u, *t);
                format!("{}{x:.1} {y:.1}", if i == 0 { "M" } else { "L" })
            })
            .collect();
        let _ = writeln!(
            svg,
            r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2.5" stroke-linejoin="round" stroke-linecap="round"/>"#,
            d.join(" ")
        );
    }
    svg.push_str("</g>\n");
}

pub(super) fn draw_points(svg: &mut String, a: &Axes, f: &Frontier) {
    let _ = writeln!(svg, r#"<g id="frontier-points">"#);
    let unit = if f.gpus.is_some() {
        "tok/s per GPU"
    } else {
        "tok/s total"
    };
    for p in &f.points {
        let (x, y) = a.px(p.per_user, p.throughput);
        let color = series_color(p.series);
        let label = f
            .curves
            .iter()
            .find(|c| c.series == p.series)
            .map_or("", |c| c.label.as_str());
        let mut tip = format!(
            "{} stream{}{}: {} tok/s per user, {} {unit}",
            p.concurrency,
            if p.concurrency == 1 { "" } else { "s" },
            match p.kind {
                PointKind::Sweep => "",
                PointKind::Manual => " (manual)",
                PointKind::Partial => " (partial)",
            },
            group(p.per_user, 1),
            group(p.throughput, 1)
        );
        if let Some(d) = p.decode {
            let _ = write!(tip, ", decode {} tok/s", group(d, 1));
        }
        if f.curves.len() > 1 {
            let _ = write!(tip, " · {label}");
        }
        let tip = esc(&tip);
        let (class, fill, stroke) = match p.kind {
            PointKind::Sweep => ("point", color, "#ffffff"),
            PointKind::Manual => ("point point-manual", color, "#ffffff"),
            PointKind::Partial => ("point point-partial", "#ffffff", color),
        };
        let _ = writeln!(
            svg,
            r#"<g class="{class} series-{}" data-concurrency="{}">"#,
            p.series, p.concurrency
        );
        if p.kind == PointKind::Manual {
            let r = 6.5;
            let _ = writeln!(
                svg,
                r#"<path d="M{x:.1} {:.1} L{:.1} {y:.1} L{x:.1} {:.1} L{:.1} {y:.1} Z" fill="{fill}" stroke="{stroke}" stroke-width="1.5"><title>{tip}</title></path>"#,
                y - r,
                x + r,
                y + r,
                x - r
            );
        } else {
            let _ = writeln!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="4.5" fill="{fill}" stroke="{stroke}" stroke-width="{}"><title>{tip}</title></circle>"#,
                if p.kind == PointKind::Partial {
                    2.0
                } else {
                    1.5
                }
            );
        }
        svg.push_str("</g>\n");
    }
    svg.push_str("</g>\n");
}

/// Points every few pixels along each curve and around each marker: what
/// labels keep clear of.
pub(super) fn obstacles(f: &Frontier, a: &Axes) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    for curve in &f.curves {
        let line: Vec<(f64, f64)> = curve
            .vertices
            .iter()
            .map(|(_, u, t)| a.px(*u, *t))
            .collect();
        sample_polyline(&line, &mut pts);
    }
    for p in &f.points {
        let (x, y) = a.px(p.per_user, p.throughput);
        for (dx, dy) in [(0.0, 0.0), (-5.0, 0.0), (5.0, 0.0), (0.0, -5.0), (0.0, 5.0)] {
            pts.push((x + dx, y + dy));
        }
    }
    // The capacity rings (radius 10): a label inside one reads as the ring's.
    for (_, u, t) in f.curves.iter().filter_map(|c| c.capacity) {
        let (x, y) = a.px(u, t);
        for k in 0..16 {
            let angle = f64::from(k) * std::f64::consts::PI / 8.0;
            for r in [6.0, 11.0] {
                pts.push((x + r * angle.cos(), y + r * angle.sin()));
            }
        }
    }
    pts
}

/// Each curve vertex (and each partial level) labelled with its streams.
pub(super) fn vertex_labels(
    svg: &mut String,
    a: &Axes,
    f: &Frontier,
    obstacles: &[(f64, f64)],
    placed: &mut Vec<TextBox>,
) {
    let mut spots: Vec<(usize, u32, f64, f64)> = Vec::new();
    for curve in &f.curves {
        for &(c, u, t) in &curve.vertices {
            spots.push((curve.series, c, u, t));
        }
    }
    for p in f.points.iter().filter(|p| p.kind == PointKind::Partial) {
        spots.push((p.series, p.concurrency, p.per_user, p.throughput));
    }
    let _ = writeln!(
        svg,
        r##"<g id="frontier-labels" font-family="{FONT}" font-size="11" stroke="#ffffff" stroke-width="3" paint-order="stroke">"##
    );
    // Two series through the same spot at the same streams (as when a
    // setting only matters at higher load): one label, in ink, says it for
    // both.
    let near = |c: u32, (x, y): (f64, f64), (c2, u2, t2): (u32, f64, f64)| {
        let (x2, y2) = a.px(u2, t2);
        c == c2 && (x2 - x).hypot(y2 - y) < 4.0
    };
    let mut labelled: Vec<(u32, f64, f64)> = Vec::new();
    for &(series, c, u, t) in &spots {
        let (x, y) = a.px(u, t);
        if labelled.iter().any(|&v| near(c, (x, y), v)) {
            continue;
        }
        labelled.push((c, u, t));
        let shared = spots
            .iter()
            .filter(|&&(_, c2, u2, t2)| near(c, (x, y), (c2, u2, t2)))
            .count()
            > 1;
        let color = if shared { INK } else { series_color(series) };
        let text = c.to_string();
        // Clear of the capacity's ring where it has one.
        let ringed = f
            .curves
            .iter()
            .any(|cv| cv.series == series && cv.capacity.is_some_and(|cap| cap.0 == c));
        let d = if ringed { 8.0 } else { 0.0 };
        let candidates = [
            (x + 8.0 + d, y - 6.0 - d, "start"),
            (x - 8.0 - d, y - 6.0 - d, "end"),
            (x + 8.0 + d, y + 14.0 + d, "start"),
            (x - 8.0 - d, y + 14.0 + d, "end"),
            (x, y - 10.0 - d, "middle"),
            (x, y + 18.0 + d, "middle"),
            (x + 10.0 + d, y + 4.0, "start"),
            (x - 10.0 - d, y + 4.0, "end"),
        ];
        let spot = a
            .area
            .place(2.0, &text, 11.0, false, &candidates, obstacles, placed);
        let (lx, ly, anchor) = (spot.x, spot.y, spot.anchor);
        let _ = writeln!(
            svg,
            r#"<text class="point-label" x="{lx:.1}" y="{ly:.1}" text-anchor="{anchor}" fill="{color}">{text}</text>"#
        );
    }
    svg.push_str("</g>\n");
}

/// Each series' capacity: a ring on its point and a label saying it.
pub(super) fn capacities(
    svg: &mut String,
    a: &Axes,
    f: &Frontier,
    obstacles: &[(f64, f64)],
    placed: &mut Vec<TextBox>,
) {
    let many = f.curves.iter().filter(|c| c.capacity.is_some()).count() > 1;
    let unit = if f.gpus.is_some() {
        "tok/s per GPU"
    } else {
        "tok/s"
    };
    for curve in &f.curves {
        let Some((c, u, t)) = curve.capacity else {
            continue;
        };
        let (x, y) = a.px(u, t);
        let mut label = format!(
            "capacity: {c} stream{}, {} {unit}, {} per user",
            if c == 1 { "" } else { "s" },
            group(t, 0),
            group(u, 1)
        );
        if many {
            label = format!("{} · {label}", curve.label);
        }
        let _ = writeln!(
            svg,
            r#"<g id="frontier-capacity-{}" class="marker-capacity"><title>{}</title>"#,
            curve.series,
            esc(&label)
        );
        let _ = writeln!(
            svg,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="10" fill="none" stroke="{CAPACITY}" stroke-width="2.5"/>"#
        );
        let candidates = [
            (x + 16.0, y + 4.0, "start"),
            (x - 16.0, y + 4.0, "end"),
            (x + 10.0, y - 15.0, "start"),
            (x - 10.0, y - 15.0, "end"),
            (x + 10.0, y + 26.0, "start"),
            (x - 10.0, y + 26.0, "end"),
            (x, y - 18.0, "middle"),
            (x, y + 30.0, "middle"),
        ];
        let spot = a
            .area
            .place(2.0, &label, 12.0, true, &candidates, obstacles, placed);
        let (lx, ly, anchor) = (spot.x, spot.y, spot.anchor);
        let _ = writeln!(
            svg,
            r##"<text x="{lx:.1}" y="{ly:.1}" font-family="{FONT}" font-size="12" font-weight="bold" fill="{CAPACITY}" text-anchor="{anchor}" stroke="#ffffff" stroke-width="4" paint-order="stroke">{}</text></g>"##,
            esc(&label)
        );
    }
}

/// A legend entry's swatch.
#[derive(Clone)]
pub(super) enum Swatch {
    /// A series: its line and dot in its colour.
    Series(usize),
    Ring,
    Diamond,
    Hollow,
}

pub(super) fn legend_items(f: &Frontier) -> Vec<(Swatch, String)> {
    let mut items: Vec<(Swatch, String)> = if f.curves.len() > 1 {
        f.curves
            .iter()
            .map(|c| (Swatch::Series(c.series), c.label.clone()))
            .collect()
    } else {
        vec![(Swatch::Series(0), "levels, by streams".into())]
    };
    if f.curves.iter().any(|c| c.capacity.is_some()) {
        items.push((Swatch::Ring, "capacity under the SLO".into()));
    }
    if f.has(PointKind::Manual) {
        items.push((Swatch::Diamond, "manual level".into()));
    }
    if f.has(PointKind::Partial) {
        items.push((Swatch::Hollow, "partial level".into()));
    }
    items
}

pub(super) fn legend_rows(items: &[(Swatch, String)]) -> Vec<Vec<(Swatch, String)>> {
    legend_rows_in(items, WIDTH - LEFT - RIGHT)
}

pub(super) fn draw_legend(svg: &mut String, rows: &[Vec<(Swatch, String)>]) {
    let _ = writeln!(
        svg,
        r#"<g id="frontier-legend" font-family="{FONT}" font-size="12" fill="{INK}">"#
    );
    lay_out_legend(svg, rows, |svg, swatch, x, mid| {
        let sx = x + 14.0;
        match swatch {
            Swatch::Series(s) => {
                let color = series_color(*s);
                let _ = writeln!(
                    svg,
                    r##"<line x1="{x:.1}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="{color}" stroke-width="2.5"/><circle cx="{sx:.1}" cy="{mid:.1}" r="4.5" fill="{color}" stroke="#ffffff" stroke-width="1.5"/>"##,
                    x + 28.0
                );
            }
            Swatch::Ring => draw_common_swatch(svg, CommonSwatch::Ring, sx, mid),
            Swatch::Diamond => draw_common_swatch(svg, CommonSwatch::Diamond, sx, mid),
            Swatch::Hollow => draw_common_swatch(svg, CommonSwatch::Hollow, sx, mid),
        }
    });
    svg.push_str("</g>\n");
}
