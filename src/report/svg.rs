//! `tokbench report --format svg`: total output tok/s (left axis) and p99
//! TTFT (right axis) against concurrency on a log2 axis, with the knee, the
//! capacity point and the TTFT SLO marked. Hand-written SVG: a fixed 800x450
//! canvas, generic fonts, every text escaped, so it is well-formed XML that
//! browsers, GitHub and `rsvg-convert` all draw the same.
//!
//! Element ids name the parts (`series-throughput`, `series-p99-ttft`,
//! `axis-x`, `axis-left`, `axis-right`, `knee`, `capacity`, `slo`, `legend`)
//! so tests and stylesheets can find them.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::saved::{SavedLevel, SavedRun};
use super::schema::number;
use crate::stats::percentile::median;

// The chart's parts; label placement and the legend serve the frontier
// chart too (`report::frontier`).
mod area;
mod labels;
mod legend;
mod plot;

pub(in crate::report) use area::{PlotBox, LEFT, LEGEND_ROW};
pub(in crate::report) use labels::{sample_polyline, text_width, Placed, TextBox};
pub(crate) use legend::{draw_common_swatch, lay_out_legend, legend_rows_in, CommonSwatch};
use legend::{draw_legend, legend_items, legend_rows};
use plot::Plot;

pub(crate) const WIDTH: f64 = 800.0;
pub(crate) const HEIGHT: f64 = 450.0;
/// Right margin: room for the p99 TTFT axis.
const RIGHT: f64 = 78.0;

pub(super) const FONT: &str = "Helvetica, Arial, sans-serif";
pub(super) const INK: &str = "#1f2937";
pub(super) const MUTED: &str = "#6b7280";
pub(super) const GRID: &str = "#e5e7eb";
pub(super) const AXIS: &str = "#9ca3af";
pub(super) const THROUGHPUT: &str = "#2563eb";
const TTFT: &str = "#ea580c";
const SLO: &str = "#dc2626";
const KNEE: &str = "#7c3aed";
pub(super) const CAPACITY: &str = "#16a34a";

/// `report --format svg` and a run's `chart.svg`: the throughput chart
/// above the interactivity-throughput frontier, one 800x900 file. Each
/// chart is a nested `<svg>` of its own 800x450 canvas (ids
/// `chart-throughput`, `chart-frontier`), so either can be lifted out whole
/// and the first keeps every id and coordinate it had on its own.
pub(crate) fn render_svg(run: &SavedRun) -> String {
    let mut svg = String::new();
    let title = format!("{} · {}", run.model_name(), run.shape());
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" role="img" aria-labelledby="report-title">"#,
        w = WIDTH,
        h = 2.0 * HEIGHT
    );
    let _ = writeln!(
        svg,
        r#"<title id="report-title">tokbench: {} (throughput by concurrency; per-user speed against throughput)</title>"#,
        esc(&title)
    );
    svg.push_str(&throughput_chart(run, &nested_tag("chart-throughput", 0.0)));
    svg.push_str(&super::frontier::frontier_chart(
        run,
        &nested_tag("chart-frontier", HEIGHT),
    ));
    svg.push_str("</svg>\n");
    svg
}

/// The throughput-by-concurrency chart alone, as a file of its own (the
/// HTML report puts each chart in a figure of its own).
pub(crate) fn render_throughput_svg(run: &SavedRun) -> String {
    throughput_chart(run, &root_tag("chart-title"))
}

/// The opening tag of a standalone 800x450 chart.
pub(super) fn root_tag(title_id: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="{FONT}" role="img" aria-labelledby="{title_id}">"#
    )
}

/// The opening tag of an 800x450 chart placed `y` down a larger file.
fn nested_tag(id: &str, y: f64) -> String {
    format!(
        r#"<svg id="{id}" x="0" y="{y}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">"#
    )
}

/// The throughput chart, opened with `open` (a root or a nested `<svg>`).
fn throughput_chart(run: &SavedRun, open: &str) -> String {
    let data = ChartData::from_run(run);
    let legend = legend_items(&data);
    let rows = legend_rows(&legend);
    let area = PlotBox::below_legend(rows.len(), RIGHT);
    let mut svg = String::new();
    let title = format!("{} · {}", run.model_name(), run.shape());
    svg.push_str(open);
    svg.push('\n');
    let _ = writeln!(
        svg,
        r#"<title id="chart-title">tokbench: {} (total output tok/s and p99 TTFT by concurrency)</title>"#,
        esc(&title)
    );
    let _ = writeln!(
        svg,
        r##"<rect id="background" x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    );
    // Title and subtitle.
    let _ = writeln!(
        svg,
        r#"<g id="title"><text x="{LEFT}" y="30" font-size="18" font-weight="bold" fill="{INK}">{}</text>"#,
        esc(&title)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="50" font-size="12" fill="{MUTED}">{}</text></g>"#,
        esc(&subtitle(run))
    );
    draw_legend(&mut svg, &rows);

    let Some(plot) = Plot::new(&data, area) else {
        area.draw_empty(&mut svg, "no finished level to plot yet");
        svg.push_str("</svg>\n");
        return svg;
    };
    plot.grid_and_axes(&mut svg, &data);
    plot.knee(&mut svg, &data);
    plot.slo(&mut svg, &data);
    plot.series(&mut svg, &data, Series::Throughput);
    plot.predicted(&mut svg, &data);
    plot.series(&mut svg, &data, Series::P99Ttft);
    plot.labels_and_capacity(&mut svg, &data);
    svg.push_str("</svg>\n");
    svg
}

/// Engine, profile, EOS policy and start date, under the title.
fn subtitle(run: &SavedRun) -> String {
    let mut parts = vec![run.engine_name()];
    if let Some(p) = crate::workload::profile::profile_words(run.run.profile.as_deref()) {
        parts.push(p);
    }
    if let Some(ask) = run.length_ask().filter(|a| a.forced()) {
        parts.push(ask.label_seen(run.short_outputs()));
    }
    if let Some(s) = &run.run.started_at {
        parts.push(s.replace('T', " ").trim_end_matches('Z').to_string() + " UTC");
    }
    parts.push(format!(
        "tokbench {}",
        run.tokbench_version.as_deref().unwrap_or("?")
    ));
    parts.join(" · ")
}

/// How a level's marker is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Sweep,
    Manual,
    Partial,
}

struct Marker {
    concurrency: u32,
    kind: Kind,
    throughput: Option<f64>,
    p99_ttft: Option<f64>,
    label: String,
}

/// What the chart needs from a run, already reduced.
struct ChartData {
    /// Every level with a concurrency, one marker each.
    markers: Vec<Marker>,
    /// The sweep line: per concurrency, the median of its complete planned
    /// and search levels (rounds), as (concurrency, throughput, p99 TTFT).
    line: Vec<(u32, Option<f64>, Option<f64>)>,
    concurrencies: Vec<u32>,
    knee: Option<(u32, u32, String)>,
    capacity: Option<(u32, f64)>,
    slo_ttft_ms: Option<f64>,
    /// The model's output tok/s at the latest series' measured levels
    /// (`model.json`, docs/predict.md): drawn dashed, labelled predicted,
    /// beside the measured line it was fitted to.
    predicted: Vec<(u32, f64)>,
}

impl ChartData {
    fn from_run(run: &SavedRun) -> ChartData {
        let mut markers = Vec::new();
        let mut rounds: BTreeMap<u32, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        // Several series: the line runs through the latest one's levels;
        // the others' are points, each named with its series.
        let latest = run.levels.iter().map(|l| l.series).max().unwrap_or(0);
        for level in &run.levels {
            let Some(c) = level.concurrency.filter(|c| *c > 0) else {
                continue;
            };
            // A hand-set level that never settled is no result.
            if level.is_unsteady() {
                continue;
            }
            let kind = if level.series != latest && kind_of(level) == Kind::Sweep {
                Kind::Manual
            } else {
                kind_of(level)
            };
            if kind == Kind::Sweep {
                let entry = rounds.entry(c).or_default();
                entry.0.extend(level.output_throughput);
                entry.1.extend(level.ttft_p99_ms);
            }
            let notes = level.notes();
            markers.push(Marker {
                concurrency: c,
                kind,
                throughput: level.output_throughput,
                p99_ttft: level.ttft_p99_ms,
                label: if notes.is_empty() {
                    format!("{c} streams")
                } else {
                    format!("{c} streams ({})", notes.join(", "))
                },
            });
        }
        let line = rounds
            .iter()
            .map(|(c, (t, p))| (*c, median(t.iter().copied()), median(p.iter().copied())))
            .collect();
        let mut concurrencies: Vec<u32> = markers.iter().map(|m| m.concurrency).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        let knee = run.knee.as_ref().and_then(|k| {
            Some((
                k.from_concurrency.filter(|c| *c > 0)?,
                k.to_concurrency.filter(|c| *c > 0)?,
                run.knee_text(),
            ))
        });
        let capacity = run.capacity.as_ref().and_then(|cap| {
            let c = cap.concurrency.filter(|c| *c > 0)?;
            let t = number(&cap.output_throughput)
                .or_else(|| rounds.get(&c).and_then(|(t, _)| median(t.iter().copied())))?;
            Some((c, t))
        });
        let predicted = run
            .source
            .parent()
            .map(|dir| super::model_file::predicted_line(dir, latest as u64, &concurrencies))
            .unwrap_or_default();
        ChartData {
            markers,
            line,
            concurrencies,
            knee,
            capacity,
            slo_ttft_ms: run.slo.ttft_p99_ms.filter(|s| *s > 0.0),
            predicted,
        }
    }

    fn has(&self, kind: Kind) -> bool {
        self.markers.iter().any(|m| m.kind == kind)
    }
}

fn kind_of(level: &SavedLevel) -> Kind {
    if level.partial {
        Kind::Partial
    } else if level.is_manual() || !level.is_sweep_point() {
        Kind::Manual
    } else {
        Kind::Sweep
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Series {
    Throughput,
    P99Ttft,
}

impl Series {
    fn id(self) -> &'static str {
        match self {
            Series::Throughput => "series-throughput",
            Series::P99Ttft => "series-p99-ttft",
        }
    }
    fn color(self) -> &'static str {
        match self {
            Series::Throughput => THROUGHPUT,
            Series::P99Ttft => TTFT,
        }
    }
    fn value(self, m: &Marker) -> Option<f64> {
        match self {
            Series::Throughput => m.throughput,
            Series::P99Ttft => m.p99_ttft,
        }
    }
    fn describe(self, v: f64) -> String {
        match self {
            Series::Throughput => format!("{} tok/s total output", group(v, 1)),
            Series::P99Ttft => format!("p99 TTFT {} ms", group(v, 1)),
        }
    }
}

/// One level's marker: a circle (throughput) or a square (TTFT); a diamond
/// for a manual level; hollow for a partial one.
fn marker(svg: &mut String, series: Series, kind: Kind, x: f64, y: f64, tip: &str) {
    let color = series.color();
    let (fill, stroke, width) = match kind {
        Kind::Partial => ("#ffffff", color, 2.0),
        _ => (color, "#ffffff", 1.5),
    };
    let class = match kind {
        Kind::Sweep => "point",
        Kind::Manual => "point point-manual",
        Kind::Partial => "point point-partial",
    };
    let tip = esc(tip);
    match (kind, series) {
        (Kind::Manual, _) => {
            let r = 6.5;
            let _ = writeln!(
                svg,
                r#"<path class="{class}" d="M{x:.1} {:.1} L{:.1} {y:.1} L{x:.1} {:.1} L{:.1} {y:.1} Z" fill="{fill}" stroke="{stroke}" stroke-width="{width}"><title>{tip}</title></path>"#,
                y - r,
                x + r,
                y + r,
                x - r
            );
        }
        (_, Series::Throughput) => {
            let _ = writeln!(
                svg,
                r#"<circle class="{class}" cx="{x:.1}" cy="{y:.1}" r="4.5" fill="{fill}" stroke="{stroke}" stroke-width="{width}"><title>{tip}</title></circle>"#
            );
        }
        (_, Series::P99Ttft) => {
            let s = 8.0;
            let _ = writeln!(
                svg,
                r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{s}" height="{s}" fill="{fill}" stroke="{stroke}" stroke-width="{width}"><title>{tip}</title></rect>"#,
                x - s / 2.0,
                y - s / 2.0
            );
        }
    }
}

/// One tick count for both axes, so their gridlines are the same lines, and
/// for each a round step that wastes the least height over its data.
fn shared_ticks(max_left: f64, max_right: f64) -> (usize, f64, f64) {
    // Headroom over the highest point so markers and labels clear the frame.
    let need = |m: f64| if m > 0.0 { m * 1.08 } else { 1.0 };
    let (l, r) = (need(max_left), need(max_right));
    let mut best = (5, nice(l / 5.0), nice(r / 5.0));
    let mut best_cost = f64::INFINITY;
    for n in 4..=6 {
        let (sl, sr) = (nice(l / n as f64), nice(r / n as f64));
        let cost = (sl * n as f64) / l + (sr * n as f64) / r;
        if cost < best_cost - 1e-9 {
            best_cost = cost;
            best = (n, sl, sr);
        }
    }
    best
}

/// The smallest round step (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k) >= raw.
pub(super) fn nice(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * mag >= raw * (1.0 - 1e-9) {
            return m * mag;
        }
    }
    10.0 * mag
}

/// A tick value with as many decimals as the step needs.
pub(super) fn tick_label(v: f64, step: f64) -> String {
    let decimals = (0..=4)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(4);
    group(v, decimals as usize)
}

pub(crate) use crate::fmt::group;

/// Text and attribute values safe in XML.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TTFT SLO's line and its title read as the user set it: 40.5 ms
    /// stays 40.5 (the label once rounded it to 41), 2500 is 2,500.
    #[test]
    fn the_slo_marker_reads_as_set() {
        for (slo, words) in [(40.5, "40.5"), (2500.0, "2,500")] {
            let run = SavedRun::from_value(
                serde_json::json!({
                    "levels": [{"max_concurrency": 1, "output_throughput": 90.0, "p99_ttft_ms": 30.0,
                                "mode": "planned", "partial": false},
                               {"max_concurrency": 4, "output_throughput": 300.0, "p99_ttft_ms": 60.0,
                                "mode": "planned", "partial": false}],
                    "run": {"slo": {"ttft_p99_ms": slo}}
                }),
                std::path::Path::new("slo.json"),
            )
            .expect("reads");
            let svg = render_throughput_svg(&run);
            assert!(
                svg.contains(&format!("<title>p99 TTFT SLO: {words} ms</title>")),
                "{svg}"
            );
            assert!(svg.contains(&format!(">p99 TTFT SLO {words} ms<")), "{svg}");
        }
    }

    #[test]
    fn nice_steps_and_labels() {
        assert_eq!(nice(360.0), 400.0);
        assert_eq!(nice(0.23), 0.25);
        assert_eq!(nice(1.0), 1.0);
        assert_eq!(tick_label(2500.0, 500.0), "2,500");
        assert_eq!(tick_label(0.5, 0.25), "0.50");
        assert_eq!(group(1795.6, 1), "1,795.6");
        assert_eq!(group(-1234567.0, 0), "-1,234,567");
        assert_eq!(group(999.0, 0), "999");
    }

    #[test]
    fn both_axes_share_their_gridlines_and_clear_the_data() {
        let (n, l, r) = shared_ticks(1801.5, 2480.4);
        assert!(l * n as f64 >= 1801.5 * 1.08);
        assert!(r * n as f64 >= 2480.4 * 1.08);
        assert!((4..=6).contains(&n));
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(esc("x\u{1}y"), "x y");
    }
}
