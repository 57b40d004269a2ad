//! The chart panels: throughput against concurrency (or rate), the
//! latency frontier, their points, series colours and legend.

use super::latency::padded;
use crate::load::driver::Mode;
use crate::ui::app::{App, LevelRow};
use crate::ui::theme::Palette;
use crate::ui::widgets::{
    self, fit, ChartPoint, FrontierChart, Part, PointKind, ThroughputChart, CAPACITY_GLYPH,
    KNEE_GLYPH, P99_GLYPH, P99_GLYPH_B, PREDICTED_GLYPH,
};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Widget};

/// A series' colour on the chart and in the legend.
pub(crate) fn series_style(p: &Palette, series: u8) -> Style {
    widgets::series_style(p, series % SERIES_STYLES as u8)
}

/// The chart series of a run's letter: `A` (and the live run) 0, `B` 1.
pub(super) fn series_of(label: char) -> u8 {
    u8::from(label == 'B')
}

/// The series of the run the table shows.
pub(super) fn shown_series(app: &App) -> u8 {
    app.saved.as_ref().map_or(0, |_| series_of(app.shown.label))
}

/// A complete planned (or search) level at the capacity's concurrency: the
/// capacity point on the chart and the highlighted row of the table. An
/// open-loop level at its cap of the same streams is not it.
pub(super) fn is_capacity(capacity: Option<u32>, l: &LevelRow) -> bool {
    l.is_judged() && capacity == Some(l.info.concurrency)
}

/// `series`: the chart series of every level (a run of `view A B`), or
/// None to give each level its own run's series (a run of several series).
fn points_of(
    levels: &[LevelRow],
    series: Option<u8>,
    capacity: Option<u32>,
    capacity_series: usize,
) -> Vec<ChartPoint> {
    levels
        .iter()
        // A hand-set level that never settled is no result: table only.
        .filter(|l| l.has_results() && !l.unsteady)
        .map(|l| ChartPoint {
            concurrency: l.info.concurrency,
            tok_s: l.figures.output_tok_s,
            p99_ttft_ms: l.figures.ttft_p99_ms,
            kind: kind_of(l),
            partial: l.is_partial(),
            series: series.unwrap_or((l.info.series % SERIES_STYLES) as u8),
            capacity: l.info.series == capacity_series && is_capacity(capacity, l),
        })
        .collect()
}

/// Distinct marks and colours for series; more series than this repeat.
pub(crate) const SERIES_STYLES: usize = 4;

/// The run has more than one series (server settings compared in one run).
pub(super) fn has_series(levels: &[LevelRow]) -> bool {
    levels
        .iter()
        .any(|l| l.info.series != levels[0].info.series)
}

/// The run shown with its capacity marked, and the other run of `view A B`.
fn chart_points(app: &App) -> Vec<ChartPoint> {
    if app.other().is_none() {
        let latest = app
            .shown
            .levels
            .iter()
            .map(|l| l.info.series)
            .max()
            .unwrap_or(0);
        // A tune: the settings before this one first, under the current one.
        let mut points = points_of(&app.earlier, None, None, usize::MAX);
        points.extend(points_of(
            &app.shown.levels,
            None,
            app.shown.capacity,
            latest,
        ));
        return points;
    }
    let series = shown_series(app);
    let mut points = points_of(
        &app.shown.levels,
        Some(series),
        app.shown.capacity,
        usize::MAX,
    );
    if let Some(other) = app.other() {
        points.extend(points_of(&other.levels, Some(1 - series), None, usize::MAX));
    }
    points
}

pub(super) fn kind_of(l: &LevelRow) -> PointKind {
    if l.is_running() {
        PointKind::Running
    } else if l.info.mode == Mode::Manual {
        PointKind::Manual
    } else {
        PointKind::Planned
    }
}

pub(super) fn chart_panel(app: &App, area: Rect, buf: &mut Buffer) {
    if app.frontier {
        return frontier_panel(app, area, buf);
    }
    if super::ramp::is_ramp(app) {
        return super::ramp::ramp_panel(app, area, buf);
    }
    let p = &app.palette;
    let points = chart_points(app);
    let room = area.width.saturating_sub(4);
    let title = fit(
        vec![
            Part::text(0, "output tok/s", p.title),
            Part::text(1, "vs streams", p.title),
        ],
        room,
        1,
    );
    let legend = chart_legend(app, &points, room, true);
    let inner = chart_frame(app, area, buf, title, legend);
    let x_max = app
        .shown
        .run
        .plan
        .iter()
        .copied()
        .chain(points.iter().map(|pt| pt.concurrency))
        .chain(
            app.shown
                .levels
                .iter()
                .chain(&app.earlier)
                .map(|l| l.info.concurrency),
        )
        .chain(std::iter::once(app.target))
        .chain(
            app.predicted
                .iter()
                .flat_map(|c| c.points.iter().map(|pt| pt.0)),
        )
        .max()
        .unwrap_or(1);
    ThroughputChart {
        points: &points,
        x_max,
        palette: p,
        knee: app.shown.knee,
        front: front_series(app),
        predicted: &app.predicted,
    }
    .render(inner, buf);
}

/// The chart panel's border with its title on top and legend below; the
/// area inside it.
fn chart_frame(
    app: &App,
    area: Rect,
    buf: &mut Buffer,
    title: Line<'static>,
    legend: Line<'static>,
) -> Rect {
    let p = &app.palette;
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(title)))
        .title_bottom(Line::from(padded(legend)).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    inner
}

/// The series drawn on top: the run the table shows in `view A B`, else
/// the series running now.
fn front_series(app: &App) -> u8 {
    if app.other().is_some() {
        shown_series(app)
    } else {
        (app.series % SERIES_STYLES) as u8
    }
}

/// The chart panel toggled by `v`: the same levels as per-user speed
/// against total throughput, each labelled with its streams.
fn frontier_panel(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let points = chart_points(app);
    let room = area.width.saturating_sub(4);
    let unit = match app.shown.run.gpus {
        Some(n) if n > 0 => format!("output tok/s per GPU ({n})"),
        _ => "output tok/s".into(),
    };
    let title = fit(
        vec![
            Part::text(0, unit, p.title),
            Part::text(1, "vs tok/s per user", p.title),
            Part::text(2, "(v: vs streams)", p.dim),
        ],
        room,
        1,
    );
    // Neither p99 TTFT nor the knee is on this chart: no legend entry.
    let legend = chart_legend(app, &points, room, false);
    let inner = chart_frame(app, area, buf, title, legend);
    FrontierChart {
        points: &points,
        palette: p,
        gpus: app.shown.run.gpus,
        front: front_series(app),
    }
    .render(inner, buf);
}

/// The marks in use, in words when they fit, glyphs alone when not; the
/// p99 series always says its unit and its axis (`with_p99`: the streams
/// chart; the frontier has neither it nor the knee).
fn chart_legend(app: &App, points: &[ChartPoint], room: u16, with_p99: bool) -> Line<'static> {
    let p = &app.palette;
    let two = app.other().is_some();
    let all: Vec<&LevelRow> = app.earlier.iter().chain(&app.shown.levels).collect();
    let several = all
        .first()
        .is_some_and(|first| all.iter().any(|l| l.info.series != first.info.series));
    let labels: Vec<(usize, String)> = if !two && several {
        let mut seen: Vec<usize> = all.iter().map(|l| l.info.series).collect();
        seen.dedup();
        seen.into_iter().map(|s| (s, app.series_label(s))).collect()
    } else {
        Vec::new()
    };
    let mut marks: Vec<(char, &str, Style)> = if two {
        vec![
            (PointKind::Planned.glyph_in(0, false), "A", p.point_planned),
            (PointKind::Planned.glyph_in(1, false), "B", p.point_b),
        ]
    } else if !labels.is_empty() {
        labels
            .iter()
            .map(|(s, label)| {
                let series = (*s % SERIES_STYLES) as u8;
                (
                    PointKind::Planned.glyph_in(series, false),
                    label.as_str(),
                    series_style(p, series),
                )
            })
            .collect()
    } else {
        vec![(PointKind::Planned.glyph(false), "level", p.point_planned)]
    };
    if points.iter().any(|pt| pt.partial) {
        marks.push((PointKind::Planned.glyph(true), "partial", p.point_planned));
    }
    if points.iter().any(|pt| pt.kind == PointKind::Manual) {
        marks.push((PointKind::Manual.glyph(false), "manual", p.point_manual));
    }
    if points.iter().any(|pt| pt.kind == PointKind::Running) {
        marks.push((PointKind::Running.glyph(false), "now", p.running));
    }
    if points.iter().any(|pt| pt.capacity) {
        marks.push((CAPACITY_GLYPH, "capacity", p.capacity));
    }
    if let Some(curve) = app.predicted.first() {
        marks.push((PREDICTED_GLYPH, "predicted", series_style(p, curve.series)));
    }
    // The knee and p99 TTFT are marks of the streams axis only.
    if app.shown.knee.is_some() && with_p99 {
        marks.push((KNEE_GLYPH, "knee", p.knee));
    }
    let p99 = if two {
        Part::new(
            0,
            vec![
                Span::styled(P99_GLYPH.to_string(), p.p99),
                Span::styled(P99_GLYPH_B.to_string(), p.p99_b),
                Span::styled(" p99 TTFT ms (right)", p.p99),
            ],
        )
    } else {
        Part::text(0, format!("{P99_GLYPH} p99 TTFT ms (right)"), p.p99)
    };
    let p99_width = if with_p99 {
        p99.spans.iter().map(Span::width).sum::<usize>()
    } else {
        0
    };
    let worded: usize = marks.iter().map(|(_, w, _)| w.len() + 4).sum::<usize>() + p99_width;
    let mut parts = Vec::new();
    if worded <= usize::from(room) {
        for (glyph, word, style) in marks {
            parts.push(Part::text(0, format!("{glyph} {word}"), style));
        }
    } else {
        let glyphs: Vec<Span<'static>> = marks
            .iter()
            .map(|(glyph, _, style)| Span::styled(glyph.to_string(), *style))
            .chain(std::iter::once(Span::styled(" tok/s", p.dim)))
            .collect();
        let glyphs_width: usize = glyphs.iter().map(Span::width).sum();
        parts.push(Part::new(1, glyphs));
        // Both in a short form rather than the marks dropped: the p99
        // series keeps its unit and its axis.
        if with_p99 && !two && glyphs_width + 1 + p99_width > usize::from(room) {
            parts.push(Part::text(0, format!("{P99_GLYPH} p99 ms (right)"), p.p99));
            return fit(parts, room, 2);
        }
    }
    if with_p99 {
        parts.push(p99);
    }
    fit(parts, room, 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::driver::LevelInfo;
    use crate::ui::app::Figures;

    #[test]
    fn only_a_judged_level_is_the_capacity() {
        let row = |mode, partial| {
            let info = LevelInfo::new(0, 4, mode, std::time::Duration::ZERO);
            LevelRow::saved(info, partial, 10, 0, Figures::default())
        };
        assert!(is_capacity(Some(4), &row(Mode::Planned, false)));
        assert!(is_capacity(Some(4), &row(Mode::Search, false)));
        assert!(!is_capacity(Some(8), &row(Mode::Planned, false)));
        assert!(!is_capacity(Some(4), &row(Mode::Planned, true)));
        // The same streams, by hand or as an open-loop cap: not the capacity.
        for mode in [Mode::Manual, Mode::Rate, Mode::Replay] {
            assert!(!is_capacity(Some(4), &row(mode, false)), "{mode:?}");
        }
    }
}
