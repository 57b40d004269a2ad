//! The level table: one row per level (grouped by series), its columns
//! dropped by priority when the screen is narrow.

use super::chart::{has_series, is_capacity, kind_of, series_style, shown_series, SERIES_STYLES};
use super::latency::padded;
use crate::load::driver::Mode;
use crate::ui::app::{App, LevelRow, LevelState};
use crate::ui::widgets::{
    ellipsize, figure, fit, grouped, keep_fitting, Part, PointKind, CAPACITY_GLYPH,
};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Widget};

/// A column of the level table: its header in three lengths (long, the
/// sketch's, shortest), how much it matters when space runs out (0 stays
/// longest).
struct Column {
    heads: [&'static str; 3],
    prio: u8,
}

impl Column {
    const fn new(heads: [&'static str; 3], prio: u8) -> Column {
        Column { heads, prio }
    }
}

const NOTE: usize = 6;

const COLUMNS: [Column; 7] = [
    Column::new(["streams", "streams", "strm"], 0),
    Column::new(["tok/s/stream", "tok/s/str", "/strm"], 1),
    Column::new(["total tok/s", "tok/s", "tok/s"], 0),
    Column::new(["TTFT p50", "p50", "p50"], 3),
    Column::new(["TTFT p99", "p99", "p99"], 1),
    Column::new(["errors", "err", "err"], 2),
    Column::new(["note", "note", "note"], 2),
];

pub(super) struct TableRow {
    /// A series' heading (its label) instead of a level.
    group: Option<String>,
    mark: char,
    cells: [String; 7],
    style: Style,
    note_style: Style,
    failed: bool,
}

pub(super) struct LevelTable {
    pub(super) rows: Vec<TableRow>,
}

/// Which headers (0 long, 1 the sketch's, 2 short) and columns a table is
/// drawn with, and the spaces between columns.
pub(super) struct Variant {
    tier: usize,
    keep: [bool; 7],
    gap: u16,
}

impl LevelTable {
    pub(super) fn build(app: &App) -> LevelTable {
        let grouped = app.other().is_none() && has_series(&app.shown.levels);
        let mut rows = Vec::new();
        let mut last_series = None;
        for l in app
            .shown
            .levels
            .iter()
            .filter(|l| l.has_results() || l.is_running())
        {
            if grouped && last_series != Some(l.info.series) {
                last_series = Some(l.info.series);
                rows.push(TableRow {
                    group: Some(app.series_label(l.info.series)),
                    mark: PointKind::Planned.glyph_in((l.info.series % SERIES_STYLES) as u8, false),
                    cells: Default::default(),
                    style: series_style(&app.palette, (l.info.series % SERIES_STYLES) as u8),
                    note_style: app.palette.dim,
                    failed: false,
                });
            }
            rows.push(Self::row(app, l));
        }
        LevelTable { rows }
    }

    fn row(app: &App, l: &LevelRow) -> TableRow {
        let p = &app.palette;
        let f = &l.figures;
        // Each series has its own capacity; the run's is the latest one's.
        let series_capacity = app
            .shown
            .series_results
            .iter()
            .find(|r| r.index == l.info.series)
            .map_or(app.shown.capacity, |r| r.capacity);
        let capacity = is_capacity(series_capacity, l);
        let mark = if l.is_running() {
            '▶'
        } else if capacity {
            CAPACITY_GLYPH
        } else {
            // A run of several series marks each row with its series' glyph.
            let series = if app.other().is_none() {
                (l.info.series % SERIES_STYLES) as u8
            } else {
                shown_series(app)
            };
            kind_of(l).glyph_in(series, l.is_partial())
        };
        let complete_plan = l.is_judged();
        let c = l.info.concurrency;
        let rse = |l: &LevelRow| l.estimate.map(|(_, r)| format!("±{:.0}%", r * 100.0));
        let (note, note_style) = match l.state {
            // A hand-set level says whether it has settled yet.
            LevelState::Running if l.info.mode == Mode::Manual => match (l.is_steady, rse(l)) {
                (true, Some(r)) => (r, p.good),
                (false, Some(r)) => (format!("settling… {r}"), p.dim),
                (_, None) => ("settling…".to_string(), p.dim),
            },
            LevelState::Running => (String::new(), p.text),
            LevelState::Draining => ("draining".into(), p.dim),
            _ if l.unsteady => ("not steady".into(), p.dim),
            LevelState::Finished { partial: true } => ("partial".into(), p.dim),
            LevelState::Finished { partial: false } => {
                if capacity {
                    ("capacity".into(), p.capacity)
                } else if complete_plan && app.shown.knee.is_some_and(|(_, to)| to == c) {
                    ("knee".into(), p.knee)
                } else if l.info.mode == Mode::Manual && l.is_steady {
                    (rse(l).unwrap_or_default(), p.text)
                } else {
                    (String::new(), p.text)
                }
            }
        };
        let has = l.has_results();
        let num = |x: f64| if has { figure(Some(x)) } else { "-".into() };
        TableRow {
            group: None,
            mark,
            cells: [
                c.to_string(),
                num(f.per_stream_tok_s),
                num(f.output_tok_s),
                figure(f.ttft_p50_ms),
                figure(f.ttft_p99_ms),
                grouped(u64::from(l.failed)),
                note,
            ],
            style: if l.is_running() {
                p.running
            } else if capacity {
                // The row the sweep is for: it stands out whole.
                p.capacity
            } else if l.is_partial() || l.unsteady {
                p.dim
            } else {
                p.text
            },
            note_style,
            failed: l.failed > 0,
        }
    }

    fn col_width(&self, i: usize, tier: usize) -> u16 {
        let head = COLUMNS[i].heads[tier];
        self.rows
            .iter()
            .filter(|r| r.group.is_none())
            .map(|r| r.cells[i].chars().count())
            .chain(std::iter::once(head.chars().count()))
            .max()
            .unwrap_or(0) as u16
    }

    /// Mark column, then each kept column with `gap` spaces before it.
    pub(super) fn width(&self, v: &Variant) -> u16 {
        1 + (0..7)
            .filter(|&i| v.keep[i])
            .map(|i| self.col_width(i, v.tier) + v.gap)
            .sum::<u16>()
    }

    /// Long headers when they fit, then shorter ones and tighter gaps,
    /// then the least useful columns go, until the table fits `room`
    /// (border included).
    pub(super) fn variant_for(&self, room: u16) -> Variant {
        // The note column only when some row has a note.
        let any_note = self.rows.iter().any(|r| !r.cells[NOTE].is_empty());
        let mut base = [true; 7];
        base[NOTE] = any_note;
        for (tier, gap) in [(0, 2), (1, 2), (2, 1)] {
            let v = Variant {
                tier,
                keep: base,
                gap,
            };
            if self.width(&v) + 2 <= room {
                return v;
            }
        }
        let parts: Vec<Part<'_>> = (0..7)
            .map(|i| {
                let w = if base[i] { self.col_width(i, 2) + 1 } else { 0 };
                Part::text(
                    COLUMNS[i].prio,
                    " ".repeat(usize::from(w)),
                    Style::default(),
                )
            })
            .collect();
        let fits = keep_fitting(&parts, usize::from(room.saturating_sub(3)), 0);
        let mut keep = [false; 7];
        for i in 0..7 {
            keep[i] = base[i] && fits[i];
        }
        Variant {
            tier: 2,
            keep,
            gap: 1,
        }
    }

    pub(super) fn render(&self, app: &App, v: &Variant, area: Rect, buf: &mut Buffer) {
        let p = &app.palette;
        let mut parts = vec![Part::text(0, "levels", p.title)];
        if app.saved.as_ref().is_some_and(|s| s.other.is_some()) {
            // Which run the rows are, and how to see the other.
            parts.push(Part::text(0, format!("run {}", app.shown.label), p.strong));
            let other = if app.shown.label == 'A' { 'B' } else { 'A' };
            parts.push(Part::text(2, format!("Tab: {other}"), p.key));
        }
        parts.push(Part::text(1, "TTFT in ms", p.dim));
        let title = fit(parts, area.width.saturating_sub(4), 2);
        let block = Block::new()
            .borders(Borders::ALL)
            .border_type(BorderType::Rounded)
            .border_style(p.border)
            .title(Line::from(padded(title)));
        let inner = block.inner(area);
        block.render(area, buf);
        if inner.height == 0 {
            return;
        }
        let widths: Vec<usize> = (0..7)
            .map(|i| usize::from(self.col_width(i, v.tier)))
            .collect();
        let gap = " ".repeat(usize::from(v.gap));
        // Numbers right-aligned under right-aligned headers; the note is
        // text, left-aligned.
        let cell = |i: usize, text: &str| {
            if i == NOTE {
                format!("{text:<w$}", w = widths[i])
            } else {
                format!("{text:>w$}", w = widths[i])
            }
        };
        let mut header = vec![Span::raw(" ")];
        for i in (0..7).filter(|&i| v.keep[i]) {
            header.push(Span::raw(gap.clone()));
            header.push(Span::styled(cell(i, COLUMNS[i].heads[v.tier]), p.header));
        }
        Line::from(header).render(Rect::new(inner.x, inner.y, inner.width, 1), buf);
        let body_h = usize::from(inner.height - 1);
        if self.rows.is_empty() {
            if body_h > 0 {
                Line::styled("  no level has results yet", p.dim)
                    .render(Rect::new(inner.x, inner.y + 1, inner.width, 1), buf);
            }
            return;
        }
        // The newest rows when they do not all fit: the running level is last.
        let skip = self.rows.len().saturating_sub(body_h);
        for (n, row) in self.rows.iter().skip(skip).enumerate() {
            let y = inner.y + 1 + n as u16;
            if let Some(label) = &row.group {
                let room = usize::from(inner.width).saturating_sub(3);
                Line::from(vec![
                    Span::styled(row.mark.to_string(), row.style),
                    Span::styled(format!(" {}", ellipsize(label, room)), row.style),
                ])
                .render(Rect::new(inner.x, y, inner.width, 1), buf);
                continue;
            }
            let mut spans = vec![Span::styled(row.mark.to_string(), row.style)];
            for i in (0..7).filter(|&i| v.keep[i]) {
                spans.push(Span::raw(gap.clone()));
                let style = match i {
                    5 if row.failed => p.bad,
                    NOTE => row.note_style,
                    _ => row.style,
                };
                spans.push(Span::styled(cell(i, &row.cells[i]), style));
            }
            Line::from(spans).render(Rect::new(inner.x, y, inner.width, 1), buf);
        }
    }
}
