//! The legend rows over both charts: swatches, widths and wrapping.

use super::*;

/// A legend entry: what its swatch looks like and its words.
#[derive(Clone, Copy)]
pub(super) enum Swatch {
    Line(&'static str, bool),
    Band,
    Ring,
    Dashed,
    Diamond,
    Hollow,
}

pub(super) fn legend_items(data: &ChartData) -> Vec<(Swatch, &'static str)> {
    let mut items = vec![
        (Swatch::Line(THROUGHPUT, true), "total output tok/s (left)"),
        (Swatch::Line(TTFT, false), "p99 TTFT ms (right)"),
    ];
    if data.knee.is_some() {
        items.push((Swatch::Band, "knee"));
    }
    if data.capacity.is_some() {
        items.push((Swatch::Ring, "capacity"));
    }
    if data.slo_ttft_ms.is_some() {
        items.push((Swatch::Dashed, "TTFT SLO"));
    }
    if data.has(Kind::Manual) {
        items.push((Swatch::Diamond, "manual level"));
    }
    if data.has(Kind::Partial) {
        items.push((Swatch::Hollow, "partial level"));
    }
    items
}

/// Approximate width of a legend entry at 12px: swatch, gap, text, spacing.
pub(super) fn legend_item_width(text: &str) -> f64 {
    28.0 + 6.0 + text_width(text, 12.0, false) + 22.0
}

/// Legend entries in rows that fit `room` pixels, in order. Shared by the
/// throughput chart and the frontier, whose swatches differ.
pub(crate) fn legend_rows_in<S: Clone, T: AsRef<str> + Clone>(
    items: &[(S, T)],
    room: f64,
) -> Vec<Vec<(S, T)>> {
    let mut rows: Vec<Vec<(S, T)>> = vec![Vec::new()];
    let mut used = 0.0;
    for item in items {
        let w = legend_item_width(item.1.as_ref());
        if used + w > room && rows.last().is_some_and(|r| !r.is_empty()) {
            rows.push(Vec::new());
            used = 0.0;
        }
        if let Some(row) = rows.last_mut() {
            row.push(item.clone());
        }
        used += w;
    }
    rows
}

/// The swatches both charts' legends draw the same way.
#[derive(Clone, Copy)]
pub(crate) enum CommonSwatch {
    /// The capacity ring.
    Ring,
    /// A manual (or other series') level.
    Diamond,
    /// A partial level.
    Hollow,
}

/// One of the common swatches centred on (`sx`, `mid`).
pub(crate) fn draw_common_swatch(svg: &mut String, swatch: CommonSwatch, sx: f64, mid: f64) {
    match swatch {
        CommonSwatch::Ring => {
            let _ = writeln!(
                svg,
                r#"<circle cx="{sx:.1}" cy="{mid:.1}" r="6.5" fill="none" stroke="{CAPACITY}" stroke-width="2.5"/>"#
            );
        }
        CommonSwatch::Diamond => {
            let r = 6.0;
            let _ = writeln!(
                svg,
                r#"<path d="M{sx:.1} {:.1} L{:.1} {mid:.1} L{sx:.1} {:.1} L{:.1} {mid:.1} Z" fill="{MUTED}"/>"#,
                mid - r,
                sx + r,
                mid + r,
                sx - r
            );
        }
        CommonSwatch::Hollow => {
            let _ = writeln!(
                svg,
                r##"<circle cx="{sx:.1}" cy="{mid:.1}" r="4.5" fill="#ffffff" stroke="{MUTED}" stroke-width="2"/>"##
            );
        }
    }
}

/// A legend entry's words after its swatch at `x`.
fn legend_text(svg: &mut String, x: f64, y: f64, text: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
        x + 34.0,
        esc(text)
    );
}

pub(super) fn legend_rows(items: &[(Swatch, &'static str)]) -> Vec<Vec<(Swatch, &'static str)>> {
    legend_rows_in(items, WIDTH - LEFT - RIGHT + 40.0)
}

/// A legend's rows, left to right from the plot's left edge: each entry's
/// swatch, drawn by `swatch` at the entry's left `x` and its row's middle,
/// then its words. Both charts lay their legends out with it.
pub(crate) fn lay_out_legend<S, T: AsRef<str>>(
    svg: &mut String,
    rows: &[Vec<(S, T)>],
    mut swatch: impl FnMut(&mut String, &S, f64, f64),
) {
    for (r, row) in rows.iter().enumerate() {
        let y = 72.0 + LEGEND_ROW * r as f64;
        let mut x = LEFT;
        for (s, text) in row {
            swatch(svg, s, x, y - 4.0);
            legend_text(svg, x, y, text.as_ref());
            x += legend_item_width(text.as_ref());
        }
    }
}

pub(super) fn draw_legend(svg: &mut String, rows: &[Vec<(Swatch, &'static str)>]) {
    let _ = writeln!(svg, r#"<g id="legend" font-size="12" fill="{INK}">"#);
    lay_out_legend(svg, rows, |svg, swatch, x, mid| {
        let sx = x + 14.0;
        match *swatch {
            Swatch::Line(color, circle) => {
                let _ = writeln!(
                    svg,
                    r#"<line x1="{x:.1}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="{color}" stroke-width="2.5"/>"#,
                    x + 28.0
                );
                if circle {
                    let _ = writeln!(
                        svg,
                        r##"<circle cx="{sx:.1}" cy="{mid:.1}" r="4.5" fill="{color}" stroke="#ffffff" stroke-width="1.5"/>"##
                    );
                } else {
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{:.1}" y="{:.1}" width="8" height="8" fill="{color}" stroke="#ffffff" stroke-width="1.5"/>"##,
                        sx - 4.0,
                        mid - 4.0
                    );
                }
            }
            Swatch::Band => {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{:.1}" width="28" height="14" fill="{KNEE}" fill-opacity="0.12" stroke="{KNEE}" stroke-opacity="0.45" stroke-dasharray="4 3"/>"#,
                    mid - 7.0
                );
            }
            Swatch::Ring => draw_common_swatch(svg, CommonSwatch::Ring, sx, mid),
            Swatch::Dashed => {
                let _ = writeln!(
                    svg,
                    r#"<line x1="{x:.1}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="{SLO}" stroke-width="1.5" stroke-dasharray="7 4"/>"#,
                    x + 28.0
                );
            }
            Swatch::Diamond => draw_common_swatch(svg, CommonSwatch::Diamond, sx, mid),
            Swatch::Hollow => draw_common_swatch(svg, CommonSwatch::Hollow, sx, mid),
        }
    });
    svg.push_str("</g>\n");
}
