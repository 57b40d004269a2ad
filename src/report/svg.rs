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

use super::saved::{median, trim_num, SavedLevel, SavedRun};

pub const WIDTH: f64 = 800.0;
pub const HEIGHT: f64 = 450.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 78.0;
const BOTTOM: f64 = 58.0;
/// Top of the plot area under a one-row legend.
const TOP_ONE_ROW: f64 = 96.0;
const LEGEND_ROW: f64 = 20.0;

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
pub fn render_svg(run: &SavedRun) -> String {
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
pub fn render_throughput_svg(run: &SavedRun) -> String {
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
    let top = TOP_ONE_ROW + LEGEND_ROW * (rows.len().max(1) - 1) as f64;
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

    let Some(plot) = Plot::new(&data, top) else {
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{top}" width="{}" height="{}" fill="none" stroke="{GRID}"/>"#,
            WIDTH - LEFT - RIGHT,
            HEIGHT - BOTTOM - top
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="14" fill="{MUTED}" text-anchor="middle">no finished level to plot yet</text>"#,
            WIDTH / 2.0,
            (top + HEIGHT - BOTTOM) / 2.0
        );
        svg.push_str("</svg>\n");
        return svg;
    };
    plot.grid_and_axes(&mut svg, &data);
    plot.knee(&mut svg, &data);
    plot.slo(&mut svg, &data);
    plot.series(&mut svg, &data, Series::Throughput);
    plot.series(&mut svg, &data, Series::P99Ttft);
    plot.labels_and_capacity(&mut svg, &data);
    svg.push_str("</svg>\n");
    svg
}

/// Engine, profile, EOS policy and start date, under the title.
fn subtitle(run: &SavedRun) -> String {
    let mut parts = vec![run.engine_name()];
    if let Some(p) = &run.profile {
        parts.push(format!("profile {p}"));
    }
    if run.ignore_eos == Some(true) {
        parts.push("ignore_eos".into());
    }
    if let Some(s) = &run.started_at {
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
            .map(|(c, (t, p))| (*c, median(t), median(p)))
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
            let t = cap
                .output_throughput
                .or_else(|| rounds.get(&c).and_then(|(t, _)| median(t)))?;
            Some((c, t))
        });
        ChartData {
            markers,
            line,
            concurrencies,
            knee,
            capacity,
            slo_ttft_ms: run.slo.ttft_p99_ms.filter(|s| *s > 0.0),
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

/// Scales from data to the canvas.
struct Plot {
    x0: f64,
    x1: f64,
    top: f64,
    bottom: f64,
    /// log2 domain of the x axis.
    lo: f64,
    hi: f64,
    intervals: usize,
    left_step: f64,
    right_step: f64,
}

impl Plot {
    fn new(data: &ChartData, top: f64) -> Option<Plot> {
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
            x0: LEFT,
            x1: WIDTH - RIGHT,
            top,
            bottom: HEIGHT - BOTTOM,
            lo,
            hi,
            intervals,
            left_step,
            right_step,
        })
    }

    fn x(&self, c: u32) -> f64 {
        let t = (f64::from(c.max(1)).log2() - self.lo) / (self.hi - self.lo);
        self.x0 + t * (self.x1 - self.x0)
    }

    fn y(&self, v: f64, step: f64) -> f64 {
        let top_value = step * self.intervals as f64;
        let t = (v / top_value).clamp(0.0, 1.0);
        self.bottom - t * (self.bottom - self.top)
    }

    fn y_left(&self, v: f64) -> f64 {
        self.y(v, self.left_step)
    }

    fn y_right(&self, v: f64) -> f64 {
        self.y(v, self.right_step)
    }

    fn grid_and_axes(&self, svg: &mut String, data: &ChartData) {
        let _ = writeln!(svg, r#"<g id="grid" stroke="{GRID}" stroke-width="1">"#);
        for i in 1..=self.intervals {
            let y = self.y_left(self.left_step * i as f64);
            let _ = writeln!(
                svg,
                r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
                self.x0, self.x1
            );
        }
        for &c in &data.concurrencies {
            let x = self.x(c);
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke-dasharray="2 4"/>"#,
                self.top, self.bottom
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
            self.x0,
            self.x1,
            b = self.bottom
        );
        let mut last_label: Option<f64> = None;
        for &c in &data.concurrencies {
            let x = self.x(c);
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{AXIS}"/>"#,
                self.bottom,
                self.bottom + 5.0
            );
            let room = 7.0 * c.to_string().len() as f64 + 8.0;
            if last_label.is_none_or(|l| x - l >= room) {
                let _ = writeln!(
                    svg,
                    r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{c}</text>"#,
                    self.bottom + 18.0
                );
                last_label = Some(x);
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="12" fill="{MUTED}" text-anchor="middle">concurrency (streams in flight, log2 scale)</text>"#,
            (self.x0 + self.x1) / 2.0,
            HEIGHT - 14.0
        );
        svg.push_str("</g>\n");

        // Left axis: throughput; right axis: p99 TTFT. Shared gridlines.
        for (id, step, x, anchor, dx, color, title, rotate_x) in [
            (
                "axis-left",
                self.left_step,
                self.x0,
                "end",
                -8.0,
                THROUGHPUT,
                "total output throughput (tok/s)",
                20.0,
            ),
            (
                "axis-right",
                self.right_step,
                self.x1,
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
                self.top, self.bottom
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
            let mid = (self.top + self.bottom) / 2.0;
            let angle = if id == "axis-left" { -90 } else { 90 };
            let _ = writeln!(
                svg,
                r#"<text x="{rotate_x:.1}" y="{mid:.1}" font-size="12" text-anchor="middle" transform="rotate({angle} {rotate_x:.1} {mid:.1})">{}</text>"#,
                esc(title)
            );
            svg.push_str("</g>\n");
        }
    }

    fn knee(&self, svg: &mut String, data: &ChartData) {
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
            self.top,
            (b - a).max(2.0),
            self.bottom - self.top
        );
        for x in [a, b] {
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{KNEE}" stroke-opacity="0.45" stroke-dasharray="4 3"/>"#,
                self.top, self.bottom
            );
        }
        svg.push_str("</g>\n");
    }

    fn slo(&self, svg: &mut String, data: &ChartData) {
        let Some(slo) = data.slo_ttft_ms else {
            return;
        };
        let y = self.y_right(slo);
        let _ = writeln!(
            svg,
            r#"<g id="slo" class="marker-slo"><title>p99 TTFT SLO: {} ms</title>"#,
            trim_num(slo)
        );
        let _ = writeln!(
            svg,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{SLO}" stroke-width="1.5" stroke-dasharray="7 4"/>"#,
            self.x0, self.x1
        );
        svg.push_str("</g>\n");
    }

    fn series(&self, svg: &mut String, data: &ChartData, series: Series) {
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
            let d: Vec<String> = points
                .iter()
                .enumerate()
                .map(|(i, (x, y))| format!("{}{x:.1} {y:.1}", if i == 0 { "M" } else { "L" }))
                .collect();
            let _ = writeln!(
                svg,
                r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2.5" stroke-linejoin="round" stroke-linecap="round"/>"#,
                d.join(" ")
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

    /// Everything drawn on each series' path, for labels to keep clear of:
    /// points every few pixels along both lines, and every marker.
    fn obstacles(&self, data: &ChartData) -> Vec<(f64, f64)> {
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

    /// Of some candidate spots, the first one whose text box stays inside
    /// the plot and covers the fewest obstacle points and boxes.
    fn place(
        &self,
        text: &str,
        size: f64,
        bold: bool,
        candidates: &[(f64, f64, &'static str)],
        points: &[(f64, f64)],
        boxes: &[TextBox],
    ) -> Spot {
        let plot = PlotBox {
            x0: self.x0,
            x1: self.x1,
            top: self.top,
            bottom: self.bottom,
        };
        let (x, y, anchor, b) =
            place_label(&plot, 3.0, text, size, bold, candidates, points, boxes);
        Spot { x, y, anchor, b }
    }

    /// The SLO's and the capacity's labels, placed clear of the lines, and
    /// the capacity marker itself.
    fn labels_and_capacity(&self, svg: &mut String, data: &ChartData) {
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
            let top = at(self.top + 16.0);
            let foot = at(self.bottom - 20.0);
            let (y, pair) = if hits(&foot) < hits(&top) {
                (self.bottom - 20.0, foot)
            } else {
                (self.top + 16.0, top)
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
            let text = format!("p99 TTFT SLO {} ms", group(slo, 0));
            let candidates = [
                (self.x0 + 6.0, y - 6.0, "start"),
                (self.x1 - 6.0, y - 6.0, "end"),
                (self.x0 + 6.0, y + 15.0, "start"),
                (self.x1 - 6.0, y + 15.0, "end"),
            ];
            let Spot { x, y, anchor, b } =
                self.place(&text, 11.0, false, &candidates, &points, &boxes);
            boxes.push(b);
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
            (y + 11.0).min(self.bottom),
            self.bottom
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
        let Spot {
            x: lx,
            y: ly,
            anchor,
            ..
        } = self.place(&label, 12.0, true, &candidates, &points, &boxes);
        let _ = writeln!(
            svg,
            r##"<text x="{lx:.1}" y="{ly:.1}" font-size="12" font-weight="bold" fill="{CAPACITY}" text-anchor="{anchor}" stroke="#ffffff" stroke-width="4" paint-order="stroke">{}</text></g>"##,
            esc(&label)
        );
    }
}

/// A label's chosen spot: where its text is anchored, and the box it covers.
struct Spot {
    x: f64,
    y: f64,
    anchor: &'static str,
    b: TextBox,
}

/// Points every 3 px along a polyline, so labels can keep clear of it.
pub(super) fn sample_polyline(line: &[(f64, f64)], out: &mut Vec<(f64, f64)>) {
    for w in line.windows(2) {
        let ((ax, ay), (bx, by)) = (w[0], w[1]);
        let steps = ((bx - ax).hypot(by - ay) / 3.0).ceil().max(1.0) as usize;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            out.push((ax + t * (bx - ax), ay + t * (by - ay)));
        }
    }
}

/// A placed label: where its text is anchored, how, and the box it covers.
pub(super) type Placed = (f64, f64, &'static str, TextBox);

/// A chart's plot area, for placing labels inside it.
pub(super) struct PlotBox {
    pub x0: f64,
    pub x1: f64,
    pub top: f64,
    pub bottom: f64,
}

/// Of some candidate spots for `text`, the first whose box stays inside
/// `plot` and covers the fewest obstacle points (within `clearance`) and
/// placed boxes; the plot's top left when none is given. Both SVG charts
/// place their labels with it.
#[allow(clippy::too_many_arguments)]
pub(super) fn place_label(
    plot: &PlotBox,
    clearance: f64,
    text: &str,
    size: f64,
    bold: bool,
    candidates: &[(f64, f64, &'static str)],
    points: &[(f64, f64)],
    placed: &[TextBox],
) -> Placed {
    let mut best: Option<(f64, Placed)> = None;
    for &(x, y, anchor) in candidates {
        let b = TextBox::new(x, y, anchor, text, size, bold);
        let mut cost = points
            .iter()
            .filter(|p| b.grown(clearance).contains(**p))
            .count() as f64;
        cost += 50.0 * placed.iter().filter(|o| o.overlaps(&b)).count() as f64;
        if b.x0 < plot.x0 + 2.0
            || b.x1 > plot.x1 - 2.0
            || b.y0 < plot.top + 2.0
            || b.y1 > plot.bottom - 2.0
        {
            cost += 1000.0;
        }
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, (x, y, anchor, b)));
        }
    }
    best.map(|(_, spot)| spot).unwrap_or_else(|| {
        (
            plot.x0,
            plot.top,
            "start",
            TextBox::new(plot.x0, plot.top, "start", text, size, bold),
        )
    })
}

/// Where a line of text lies, from an estimate of its width.
#[derive(Clone, Copy, Debug)]
pub(super) struct TextBox {
    pub(super) x0: f64,
    pub(super) y0: f64,
    pub(super) x1: f64,
    pub(super) y1: f64,
}

impl TextBox {
    pub(super) fn new(
        x: f64,
        baseline: f64,
        anchor: &str,
        text: &str,
        size: f64,
        bold: bool,
    ) -> TextBox {
        let w = text_width(text, size, bold);
        let x0 = match anchor {
            "end" => x - w,
            "middle" => x - w / 2.0,
            _ => x,
        };
        TextBox {
            x0,
            y0: baseline - size * 0.78,
            x1: x0 + w,
            y1: baseline + size * 0.22,
        }
    }
    pub(super) fn grown(&self, by: f64) -> TextBox {
        TextBox {
            x0: self.x0 - by,
            y0: self.y0 - by,
            x1: self.x1 + by,
            y1: self.y1 + by,
        }
    }
    pub(super) fn contains(&self, (x, y): (f64, f64)) -> bool {
        x >= self.x0 && x <= self.x1 && y >= self.y0 && y <= self.y1
    }
    pub(super) fn overlaps(&self, o: &TextBox) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

/// Width of a line of text in a Helvetica-like sans-serif, from rough
/// per-character widths in em: close enough to place labels and legends.
pub(super) fn text_width(text: &str, size: f64, bold: bool) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '|' | '.' | ',' | ':' | ';' | '\'' | '!' => 0.24,
            ' ' => 0.28,
            'f' | 't' | 'r' | '/' | '(' | ')' | '-' | '[' | ']' | 'I' => 0.34,
            'm' | 'w' | 'M' | 'W' => 0.85,
            '0'..='9' => 0.556,
            'A'..='Z' => 0.68,
            c if c.is_ascii() => 0.53,
            _ => 0.7,
        })
        .sum();
    em * size * if bold { 1.08 } else { 1.0 }
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

/// A legend entry: what its swatch looks like and its words.
#[derive(Clone, Copy)]
enum Swatch {
    Line(&'static str, bool),
    Band,
    Ring,
    Dashed,
    Diamond,
    Hollow,
}

fn legend_items(data: &ChartData) -> Vec<(Swatch, &'static str)> {
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
pub(crate) fn legend_item_width(text: &str) -> f64 {
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
pub(crate) fn legend_text(svg: &mut String, x: f64, y: f64, text: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
        x + 34.0,
        esc(text)
    );
}

fn legend_rows(items: &[(Swatch, &'static str)]) -> Vec<Vec<(Swatch, &'static str)>> {
    legend_rows_in(items, WIDTH - LEFT - RIGHT + 40.0)
}

fn draw_legend(svg: &mut String, rows: &[Vec<(Swatch, &'static str)>]) {
    let _ = writeln!(svg, r#"<g id="legend" font-size="12" fill="{INK}">"#);
    for (r, row) in rows.iter().enumerate() {
        let y = 72.0 + LEGEND_ROW * r as f64;
        let mut x = LEFT;
        for &(swatch, text) in row {
            let (sx, mid) = (x + 14.0, y - 4.0);
            match swatch {
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
            legend_text(svg, x, y, text);
            x += legend_item_width(text);
        }
    }
    svg.push_str("</g>\n");
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

pub use crate::fmt::group;

/// Text and attribute values safe in XML.
pub fn esc(s: &str) -> String {
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
