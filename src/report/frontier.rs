//! The interactivity-throughput frontier (issue 14 item 6): what one user
//! gets (output tok/s per stream) against what the server gives in all
//! (output tok/s, or per GPU with `--gpus`), one point per level labelled
//! with its concurrency, one curve per series, each series' capacity ringed.
//! The chart vLLM's `bench sweep plot_pareto` and the per-GPU leaderboards
//! draw, from a tokbench summary.
//!
//! The per-user axis is `per_stream_tok_s` (output throughput / streams),
//! the same figure `plot_pareto` calls tokens/s/user, so one summary gives
//! the same point in both tools. It counts a user's waiting: a server that
//! queues requests (Ollama with one slot) keeps its decode speed while what
//! each user gets falls as 1/streams, and only this axis shows it. The
//! decode speed (`stream_decode_tok_s`, what the reading-speed SLO checks)
//! is in each point's tooltip.
//!
//! Only closed-loop levels (planned, search, manual) are points: an
//! open-loop level's `max_concurrency` is a cap, not its number of users.
//! Levels saved `steady: false` are never points.
//!
//! The data and the mapping to the canvas are pure functions
//! ([`frontier_of`], [`Axes::px`]); the drawing only writes what they give.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::saved::{SavedLevel, SavedRun};
use super::schema::number;
use super::svg::{
    draw_common_swatch, esc, group, lay_out_legend, legend_rows_in, nice, sample_polyline,
    tick_label, CommonSwatch, PlotBox, TextBox, AXIS, CAPACITY, FONT, GRID, HEIGHT, INK, LEFT,
    MUTED, WIDTH,
};
use crate::stats::percentile::median;

// The drawing, apart from the data and its mapping to the canvas.
mod draw;

use draw::{
    capacities, draw_curve, draw_legend, draw_points, grid_and_axes, legend_items, legend_rows,
    obstacles, vertex_labels,
};

/// Right margin: the frontier has no right axis.
const RIGHT: f64 = 30.0;

/// A colour per series, in series order; more series than this repeat.
/// Green is the capacity's and stays out of the list.
const SERIES_COLORS: [&str; 6] = [
    "#2563eb", "#db2777", "#0d9488", "#d97706", "#7c3aed", "#475569",
];

/// How a level's marker is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PointKind {
    /// A planned or search level that ran to the end.
    Sweep,
    /// A level set by hand that settled.
    Manual,
    /// Cut short: drawn hollow, left off the curve.
    Partial,
}

/// One level on the frontier.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FrontierPoint {
    /// Position of its series among the run's series (0, 1, ...): its colour.
    pub series: usize,
    pub concurrency: u32,
    /// Output tok/s per stream.
    pub per_user: f64,
    /// Output tok/s, divided by the GPUs when they are known.
    pub throughput: f64,
    /// 1000 / median TPOT, for the tooltip.
    pub decode: Option<f64>,
    pub kind: PointKind,
}

/// One series' curve: its complete levels, the median of its rounds at
/// each concurrency, in concurrency order (so the curve reads as the load
/// rising, and shows it when more streams buy less).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Curve {
    pub series: usize,
    pub label: String,
    /// (concurrency, per-user tok/s, throughput).
    pub vertices: Vec<(u32, f64, f64)>,
    /// This series' capacity under the SLO: (concurrency, per-user, throughput).
    pub capacity: Option<(u32, f64, f64)>,
}

/// What the chart draws, already reduced.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Frontier {
    pub points: Vec<FrontierPoint>,
    pub curves: Vec<Curve>,
    /// The divisor of the throughput axis, when given.
    pub gpus: Option<u32>,
}

impl Frontier {
    fn has(&self, kind: PointKind) -> bool {
        self.points.iter().any(|p| p.kind == kind)
    }
}

/// Whether a level is a point of the frontier: closed loop, with a
/// concurrency, a throughput and a per-stream figure, and not unsteady.
fn on_frontier(level: &SavedLevel) -> bool {
    matches!(level.mode.as_str(), "planned" | "search" | "manual")
        && level.concurrency.is_some_and(|c| c > 0)
        && level.output_throughput.is_some()
        && level.per_stream_tok_s.is_some()
        && !level.is_unsteady()
}

/// The frontier of a run: its points, a curve per series with the series'
/// capacity, throughput divided by `gpus` when given (else by the run's own).
pub(crate) fn frontier_of(run: &SavedRun, gpus: Option<u32>) -> Frontier {
    let gpus = gpus.or(run.run.gpus).filter(|g| *g > 0);
    let per_gpu = |t: f64| t / f64::from(gpus.unwrap_or(1));
    // Series in the order of their indexes; a colour each.
    let mut indexes: Vec<usize> = run.levels.iter().map(|l| l.series).collect();
    indexes.sort_unstable();
    indexes.dedup();
    let position = |s: usize| indexes.iter().position(|i| *i == s).unwrap_or(0);
    let mut points = Vec::new();
    // Per series, per concurrency: per-user and throughput of complete levels.
    type Rounds = BTreeMap<u32, (Vec<f64>, Vec<f64>)>;
    let mut rounds: BTreeMap<usize, Rounds> = BTreeMap::new();
    // The same, of the levels the decision judges (planned and search, not
    // by hand): where the capacity sits.
    let mut sweep_rounds: BTreeMap<usize, Rounds> = BTreeMap::new();
    let mut labels: BTreeMap<usize, String> = BTreeMap::new();
    for level in run.levels.iter().filter(|l| on_frontier(l)) {
        let (Some(c), Some(t), Some(u)) = (
            level.concurrency,
            level.output_throughput,
            level.per_stream_tok_s,
        ) else {
            continue;
        };
        let kind = if level.partial {
            PointKind::Partial
        } else if level.is_manual() {
            PointKind::Manual
        } else {
            PointKind::Sweep
        };
        let add_to = |rounds: &mut BTreeMap<usize, Rounds>| {
            let entry = rounds
                .entry(level.series)
                .or_default()
                .entry(c)
                .or_default();
            entry.0.push(u);
            entry.1.push(per_gpu(t));
        };
        if kind != PointKind::Partial {
            add_to(&mut rounds);
        }
        if kind == PointKind::Sweep {
            add_to(&mut sweep_rounds);
        }
        if let Some(label) = &level.series_label {
            labels.entry(level.series).or_insert_with(|| label.clone());
        }
        points.push(FrontierPoint {
            series: position(level.series),
            concurrency: c,
            per_user: u,
            throughput: per_gpu(t),
            decode: level.stream_decode_tok_s,
            kind,
        });
    }
    let capacities = series_capacities(run);
    let latest = indexes.last().copied().unwrap_or(0);
    let medians = |rounds: &BTreeMap<usize, Rounds>, s: usize| -> Vec<(u32, f64, f64)> {
        rounds
            .get(&s)
            .map(|r| {
                r.iter()
                    .filter_map(|(c, (u, t))| {
                        Some((*c, median(u.iter().copied())?, median(t.iter().copied())?))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let curves = indexes
        .iter()
        .map(|&s| {
            let vertices = medians(&rounds, s);
            // The summary's top-level capacity is the latest series'.
            let saved = capacities.get(&s).copied().or_else(|| {
                let cap = run.capacity.as_ref().filter(|_| s == latest)?;
                Some((
                    cap.concurrency.filter(|c| *c > 0)?,
                    number(&cap.per_stream_tok_s),
                    number(&cap.output_throughput),
                ))
            });
            // The figures the decision saved with it; an older summary that
            // saved only its streams gets the median of the decision's own
            // levels at that concurrency (planned and search, whole: a level
            // by hand at the same streams does not move it).
            let judged = medians(&sweep_rounds, s);
            let capacity = saved.and_then(|(c, u, t)| match (u, t) {
                (Some(u), Some(t)) => Some((c, u, per_gpu(t))),
                _ => judged.iter().find(|v| v.0 == c).copied(),
            });
            Curve {
                series: position(s),
                label: labels
                    .get(&s)
                    .cloned()
                    .unwrap_or_else(|| crate::analysis::series::default_label(s)),
                vertices,
                capacity,
            }
        })
        .collect();
    Frontier {
        points,
        curves,
        gpus,
    }
}

/// Each series' capacity from `summary.json`'s `series` list, by index:
/// (concurrency, per-stream tok/s, output tok/s) as saved.
fn series_capacities(run: &SavedRun) -> BTreeMap<usize, (u32, Option<f64>, Option<f64>)> {
    run.series
        .iter()
        .filter_map(|s| {
            let index = usize::try_from(s.index?).ok()?;
            let cap = s.capacity.as_ref()?;
            let concurrency = cap.concurrency.filter(|c| *c > 0)?;
            Some((
                index,
                (
                    concurrency,
                    number(&cap.per_stream_tok_s),
                    number(&cap.output_throughput),
                ),
            ))
        })
        .collect()
}

/// A linear axis from 0: a round step and how many of them reach past the
/// largest value with some headroom, so markers and labels clear the frame.
pub(crate) fn linear_ticks(max: f64) -> (f64, usize) {
    let need = if max.is_finite() && max > 0.0 {
        max * 1.08
    } else {
        1.0
    };
    let step = nice(need / 5.0);
    let n = ((need / step) - 1e-9).ceil().max(1.0) as usize;
    (step, n)
}

/// Scales from data to the canvas: both axes linear from 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::report) struct Axes {
    pub area: PlotBox,
    pub x_step: f64,
    pub x_n: usize,
    pub y_step: f64,
    pub y_n: usize,
}

impl Axes {
    /// Axes holding every point and capacity of `f`, over `area`.
    pub(in crate::report) fn of(f: &Frontier, area: PlotBox) -> Axes {
        let capacities = f.curves.iter().filter_map(|c| c.capacity);
        let max_x = f
            .points
            .iter()
            .map(|p| p.per_user)
            .chain(capacities.clone().map(|c| c.1))
            .fold(0.0, f64::max);
        let max_y = f
            .points
            .iter()
            .map(|p| p.throughput)
            .chain(capacities.map(|c| c.2))
            .fold(0.0, f64::max);
        let (x_step, x_n) = linear_ticks(max_x);
        let (y_step, y_n) = linear_ticks(max_y);
        Axes {
            area,
            x_step,
            x_n,
            y_step,
            y_n,
        }
    }

    /// Canvas position of (per-user tok/s, throughput), clamped to the plot.
    pub(crate) fn px(&self, per_user: f64, throughput: f64) -> (f64, f64) {
        let xt = (per_user / (self.x_step * self.x_n as f64)).clamp(0.0, 1.0);
        let yt = (throughput / (self.y_step * self.y_n as f64)).clamp(0.0, 1.0);
        (
            self.area.x0 + xt * (self.area.x1 - self.area.x0),
            self.area.bottom - yt * (self.area.bottom - self.area.top),
        )
    }
}

/// `report --format svg` on its own: the frontier as a standalone file.
pub(crate) fn render_frontier_svg(run: &SavedRun) -> String {
    frontier_chart(run, &super::svg::root_tag("frontier-title"))
}

/// The frontier chart, opened with `open` (a root or a nested `<svg>`).
pub(crate) fn frontier_chart(run: &SavedRun, open: &str) -> String {
    let f = frontier_of(run, None);
    let legend = legend_items(&f);
    let rows = legend_rows(&legend);
    let area = PlotBox::below_legend(rows.len(), RIGHT);
    let mut svg = String::new();
    svg.push_str(open);
    svg.push('\n');
    let unit = throughput_unit(f.gpus);
    let _ = writeln!(
        svg,
        r#"<title id="frontier-title">tokbench: {} · {} (output tok/s per user against {unit})</title>"#,
        esc(run.model_name()),
        esc(&run.shape())
    );
    let _ = writeln!(
        svg,
        r##"<rect id="frontier-background" x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff" font-family="{FONT}"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<g id="frontier-heading" font-family="{FONT}"><text x="{LEFT}" y="30" font-size="18" font-weight="bold" fill="{INK}">Interactivity against throughput · {}</text>"#,
        esc(&run.shape())
    );
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="50" font-size="12" fill="{MUTED}">each point a level, labelled with its streams · a curve per series · up and to the right is better</text></g>"#
    );
    draw_legend(&mut svg, &rows);
    if f.points.is_empty() {
        area.draw_empty(&mut svg, "no finished closed-loop level to plot yet");
        svg.push_str("</svg>\n");
        return svg;
    }
    let axes = Axes::of(&f, area);
    grid_and_axes(&mut svg, &axes, f.gpus);
    let mut placed = Vec::new();
    let obstacles = obstacles(&f, &axes);
    for curve in &f.curves {
        draw_curve(&mut svg, &axes, curve);
    }
    draw_points(&mut svg, &axes, &f);
    vertex_labels(&mut svg, &axes, &f, &obstacles, &mut placed);
    capacities(&mut svg, &axes, &f, &obstacles, &mut placed);
    svg.push_str("</svg>\n");
    svg
}

/// The throughput axis's words: `total output tok/s` or `output tok/s per GPU`.
fn throughput_unit(gpus: Option<u32>) -> String {
    match gpus {
        Some(n) => format!(
            "output tok/s per GPU (total / {n} GPU{})",
            if n == 1 { "" } else { "s" }
        ),
        None => "total output tok/s".into(),
    }
}

fn series_color(series: usize) -> &'static str {
    SERIES_COLORS[series % SERIES_COLORS.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::path::Path;

    fn run(v: Value) -> SavedRun {
        SavedRun::from_value(v, Path::new("t.json")).expect("summary")
    }

    fn level(c: u32, t: f64) -> Value {
        json!({"max_concurrency": c, "output_throughput": t,
               "per_stream_tok_s": t / f64::from(c), "mode": "planned"})
    }

    #[test]
    fn ticks_reach_past_the_data() {
        // 92 * 1.08 = 99.4 -> steps of 20, five of them: the axis ends at 100.
        assert_eq!(linear_ticks(92.0), (20.0, 5));
        // 2304 * 1.08 = 2488 -> steps of 500 to 2500.
        assert_eq!(linear_ticks(2304.0), (500.0, 5));
        // 1000 * 1.08 = 1080 -> nice(216) = 250, five reach 1250.
        assert_eq!(linear_ticks(1000.0), (250.0, 5));
        assert_eq!(linear_ticks(0.0), (0.2, 5));
    }

    #[test]
    fn points_map_to_the_canvas_by_hand() {
        // The seed article's sweep: 1..128 streams, 92..2304 tok/s.
        let r = run(json!({"levels": [
            level(1, 92.0), level(4, 352.0), level(16, 1136.0),
            level(32, 1728.0), level(64, 2176.0), level(128, 2304.0)]}));
        let f = frontier_of(&r, None);
        let a = Axes::of(&f, PlotBox::below_legend(1, RIGHT));
        // x: 0..100 tok/s per user over 78..770; y: 0..2500 over 392..96.
        assert_eq!((a.x_step, a.x_n, a.y_step, a.y_n), (20.0, 5, 500.0, 5));
        assert_eq!(
            (a.area.x0, a.area.x1, a.area.top, a.area.bottom),
            (78.0, 770.0, 96.0, 392.0)
        );
        // 32 streams: 1728 / 32 = 54 per user.
        // x = 78 + 0.54 * 692 = 451.68; y = 392 - 1728/2500 * 296 = 187.4048.
        let (x, y) = a.px(54.0, 1728.0);
        assert!((x - 451.68).abs() < 1e-9, "{x}");
        assert!((y - 187.4048).abs() < 1e-9, "{y}");
        // The origin is the plot's bottom left; the axis tops its top right.
        assert_eq!(a.px(0.0, 0.0), (78.0, 392.0));
        assert_eq!(a.px(100.0, 2500.0), (770.0, 96.0));
        // Off the scale is clamped to the frame, never drawn outside it.
        assert_eq!(a.px(250.0, -5.0), (770.0, 392.0));
        // One curve through the six, in concurrency order.
        assert_eq!(f.curves.len(), 1);
        let cs: Vec<u32> = f.curves[0].vertices.iter().map(|v| v.0).collect();
        assert_eq!(cs, [1, 4, 16, 32, 64, 128]);
        assert_eq!(f.curves[0].vertices[3], (32, 54.0, 1728.0));
    }

    #[test]
    fn series_rounds_partial_unsteady_and_open_loop_levels() {
        let r = run(json!({
            "run": {"gpus": 2},
            "levels": [
                level(1, 100.0),
                // Two rounds at 4: the curve takes their median.
                {"max_concurrency": 4, "output_throughput": 360.0, "per_stream_tok_s": 90.0,
                 "file": "sweep-c4.json"},
                {"max_concurrency": 4, "output_throughput": 320.0, "per_stream_tok_s": 80.0,
                 "file": "sweep-c4-r2.json"},
                // Partial: a hollow point, off the curve.
                {"max_concurrency": 8, "output_throughput": 500.0, "per_stream_tok_s": 62.5,
                 "partial": true},
                // Open loop: not a point.
                {"max_concurrency": 256, "output_throughput": 900.0, "per_stream_tok_s": 3.5,
                 "mode": "rate"},
                // Series 2, by hand: one settled, one not.
                {"max_concurrency": 8, "output_throughput": 720.0, "per_stream_tok_s": 90.0,
                 "mode": "manual", "steady": true, "series": 1, "series_label": "slots 64"},
                {"max_concurrency": 7, "output_throughput": 630.0, "per_stream_tok_s": 90.0,
                 "mode": "manual", "steady": false, "series": 1, "series_label": "slots 64"},
            ],
            "series": [
                {"index": 0, "label": "series 1", "capacity": {"concurrency": 4,
                  "output_throughput": 340.0, "per_stream_tok_s": 85.0}},
                {"index": 1, "label": "slots 64", "capacity": null},
            ],
            "capacity": null,
        }));
        let f = frontier_of(&r, None);
        // The run's 2 GPUs divide the throughput; `report --gpus 4` would override.
        assert_eq!(f.gpus, Some(2));
        let cs: Vec<(usize, u32, PointKind)> = f
            .points
            .iter()
            .map(|p| (p.series, p.concurrency, p.kind))
            .collect();
        assert_eq!(
            cs,
            [
                (0, 1, PointKind::Sweep),
                (0, 4, PointKind::Sweep),
                (0, 4, PointKind::Sweep),
                (0, 8, PointKind::Partial),
                (1, 8, PointKind::Manual),
            ]
        );
        assert_eq!(f.points[4].throughput, 360.0);
        assert_eq!(f.curves.len(), 2);
        assert_eq!(f.curves[0].label, "series 1");
        assert_eq!(f.curves[1].label, "slots 64");
        assert_eq!(
            f.curves[0].vertices,
            [(1, 100.0, 50.0), (4, 85.0, 170.0)],
            "rounds' median, per GPU; no partial"
        );
        assert_eq!(f.curves[1].vertices, [(8, 90.0, 360.0)]);
        // Series 1's capacity is its vertex at 4; series 2 has none.
        assert_eq!(f.curves[0].capacity, Some((4, 85.0, 170.0)));
        assert_eq!(f.curves[1].capacity, None);
        let f4 = frontier_of(&r, Some(4));
        assert_eq!(f4.curves[0].vertices[1], (4, 85.0, 85.0));
    }

    #[test]
    fn a_spot_two_series_share_is_labelled_once_in_ink() {
        // Both series alike at 1 stream, apart at 16.
        let mut second = level(16, 1600.0);
        second["series"] = json!(1);
        let mut first_of_second = level(1, 90.0);
        first_of_second["series"] = json!(1);
        let r = run(json!({"levels": [level(1, 90.0), level(16, 1000.0),
                                      first_of_second, second]}));
        let svg = render_frontier_svg(&r);
        let labels: Vec<&str> = svg
            .split(r#"class="point-label""#)
            .skip(1)
            .filter_map(|rest| rest.split("</text>").next())
            .collect();
        assert_eq!(labels.len(), 3, "{labels:?}");
        assert!(
            labels[0].ends_with(&format!(r#"fill="{INK}">1"#)),
            "{labels:?}"
        );
        assert!(labels[1].ends_with(&format!(r#"fill="{}">16"#, SERIES_COLORS[0])));
        assert!(labels[2].ends_with(&format!(r#"fill="{}">16"#, SERIES_COLORS[1])));
    }

    #[test]
    fn a_level_by_hand_at_the_capacity_does_not_move_it() {
        // Planned rounds at 4 streams: 360 and 320 tok/s, median 340 (85 a
        // stream); a level by hand at 4 streams read 200. The curve's vertex
        // at 4 is the median of all three (320), the capacity the decision's
        // median of the two planned (340).
        let r = run(json!({
            "levels": [
                level(1, 100.0),
                {"max_concurrency": 4, "output_throughput": 360.0, "per_stream_tok_s": 90.0},
                {"max_concurrency": 4, "output_throughput": 320.0, "per_stream_tok_s": 80.0},
                {"max_concurrency": 4, "output_throughput": 200.0, "per_stream_tok_s": 50.0,
                 "mode": "manual", "steady": true},
            ],
            "capacity": {"concurrency": 4, "output_throughput": 340.0, "per_stream_tok_s": 85.0},
        }));
        let f = frontier_of(&r, None);
        assert_eq!(f.curves[0].vertices[1], (4, 80.0, 320.0));
        assert_eq!(f.curves[0].capacity, Some((4, 85.0, 340.0)));
        // The marker is the decision's saved figures, whatever the levels
        // drawn say: 99 a stream and 999 in all.
        let mut saved = r.clone();
        saved.capacity =
            crate::report::schema::typed(json!({"concurrency": 4, "output_throughput": 999.0,
                                              "per_stream_tok_s": 99.0}));
        assert_eq!(
            frontier_of(&saved, None).curves[0].capacity,
            Some((4, 99.0, 999.0))
        );
        // An older summary saved only the streams: the planned rounds'
        // median, 340 and 85 (the hand-set 200 left out), not the vertex's 320.
        saved.capacity = crate::report::schema::typed(json!({"concurrency": 4}));
        assert_eq!(
            frontier_of(&saved, None).curves[0].capacity,
            Some((4, 85.0, 340.0))
        );
    }

    #[test]
    fn the_top_level_capacity_is_the_latest_series() {
        // An older summary with no `series` list: the capacity is marked on
        // the latest series, from its figures when no vertex has it.
        let r = run(json!({
            "levels": [level(1, 100.0), level(16, 1200.0)],
            "capacity": {"concurrency": 16, "output_throughput": 1200.0,
                         "per_stream_tok_s": 75.0},
        }));
        let f = frontier_of(&r, None);
        assert_eq!(f.curves[0].capacity, Some((16, 75.0, 1200.0)));
        let r = run(json!({
            "levels": [level(1, 100.0)],
            "capacity": {"concurrency": 16, "output_throughput": 1200.0,
                         "per_stream_tok_s": 75.0},
        }));
        assert_eq!(
            frontier_of(&r, Some(2)).curves[0].capacity,
            Some((16, 75.0, 600.0))
        );
    }

    #[test]
    fn the_chart_draws_what_the_data_says() {
        let r = run(json!({
            "run": {"model": "m<1>"},
            "levels": [level(1, 92.0), level(16, 1136.0),
                       {"max_concurrency": 32, "output_throughput": 1728.0,
                        "per_stream_tok_s": 54.0, "partial": true}],
            "capacity": {"concurrency": 16, "output_throughput": 1136.0,
                         "per_stream_tok_s": 71.0},
        }));
        let svg = render_frontier_svg(&r);
        assert!(svg.starts_with("<svg xmlns="), "{svg}");
        assert_eq!(svg.matches("<g class=\"point").count(), 3, "{svg}");
        assert_eq!(svg.matches("point-partial").count(), 1, "{svg}");
        assert!(svg.contains("m&lt;1&gt;"), "escaped: {svg}");
        assert!(svg.contains("capacity: 16 streams, 1,136 tok/s, 71.0 per user"));
        // Labels: each vertex and the partial point by its streams.
        let labels: Vec<&str> = svg
            .split(r#"class="point-label""#)
            .skip(1)
            .filter_map(|rest| rest.split("</text>").next()?.rsplit('>').next())
            .collect();
        assert_eq!(labels, ["1", "16", "32"], "{svg}");
        assert!(svg.contains("total output tok/s"), "{svg}");
        let mut per_gpu = r.clone();
        per_gpu.run.gpus = Some(8);
        let svg = render_frontier_svg(&per_gpu);
        assert!(
            svg.contains("output tok/s per GPU (total / 8 GPUs)"),
            "{svg}"
        );
        assert!(svg.contains("142 tok/s per GPU"), "1136 / 8: {svg}");
        // Nothing to plot: a note, still one closed element.
        let empty = render_frontier_svg(&run(json!({"levels": []})));
        assert!(empty.contains("no finished closed-loop level"));
        assert!(empty.trim_end().ends_with("</svg>"));
    }
}
