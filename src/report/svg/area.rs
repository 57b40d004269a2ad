//! The plot area both charts (throughput and frontier) draw in: inside the
//! canvas's margins, below the heading and the legend's rows.

use std::fmt::Write;

use super::{GRID, HEIGHT, MUTED, WIDTH};

/// Left margin: room for the left axis's labels and title.
pub(in crate::report) const LEFT: f64 = 78.0;
/// Bottom margin: room for the x axis's labels and title.
const BOTTOM: f64 = 58.0;
/// Where the plot starts under a one-row legend.
const TOP_ONE_ROW: f64 = 96.0;
/// Each further legend row pushes the plot down this much.
pub(in crate::report) const LEGEND_ROW: f64 = 20.0;

/// A chart's plot area, in canvas pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::report) struct PlotBox {
    pub x0: f64,
    pub x1: f64,
    pub top: f64,
    pub bottom: f64,
}

impl PlotBox {
    /// The area of a chart whose legend takes `legend_rows` rows and whose
    /// right margin is `right` (the throughput chart has an axis there).
    pub(in crate::report) fn below_legend(legend_rows: usize, right: f64) -> PlotBox {
        PlotBox {
            x0: LEFT,
            x1: WIDTH - right,
            top: TOP_ONE_ROW + LEGEND_ROW * (legend_rows.max(1) - 1) as f64,
            bottom: HEIGHT - BOTTOM,
        }
    }

    /// A chart with nothing to plot: the area's outline, and why in its middle.
    pub(in crate::report) fn draw_empty(&self, svg: &mut String, why: &str) {
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="{GRID}"/>"#,
            self.x0,
            self.top,
            self.x1 - self.x0,
            self.bottom - self.top
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-family="{}" font-size="14" fill="{MUTED}" text-anchor="middle">{why}</text>"#,
            (self.x0 + self.x1) / 2.0,
            (self.top + self.bottom) / 2.0,
            super::FONT
        );
    }
}
