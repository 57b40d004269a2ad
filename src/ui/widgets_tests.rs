//! Tests of `widgets.rs`: number formatting, fitting, bars and charts.

use super::frontier::{frontier_cell, frontier_xy};
use super::*;

#[test]
fn numbers() {
    // grouped, dollars and percent are `crate::fmt`'s, checked there.
    assert_eq!(figure(Some(9.84)), "9.8");
    assert_eq!(figure(Some(92.4)), "92.4");
    assert_eq!(figure(Some(352.4)), "352");
    assert_eq!(figure(Some(1728.0)), "1,728");
    assert_eq!(figure(None), "-");
    assert_eq!(figure(Some(f64::NAN)), "-");
    assert_eq!(compact(0.0), "0");
    assert_eq!(compact(950.0), "950");
    assert_eq!(compact(2300.0), "2.3k");
    assert_eq!(compact(2000.0), "2k");
    assert_eq!(compact(23000.0), "23k");
    assert_eq!(compact(1.25e6), "1.2M");
    assert_eq!(compact(2.5), "2.5");
    assert_eq!(clock(3 * 3600 + 7 * 60 + 41), "03:07:41");
    assert_eq!(times(2.0218), "2.0x");
    assert_eq!(times(1.036), "1.04x");
    assert_eq!(nice_ceil(0.3), 1.0);
    assert_eq!(nice_ceil(2176.0), 2500.0);
    assert_eq!(nice_ceil(2500.0), 2500.0);
    assert_eq!(nice_ceil(51.0), 100.0);
}

#[test]
fn least_important_parts_go_first() {
    let parts = vec![
        Part::text(0, "aaaa", Style::default()),
        Part::text(2, "bbbb", Style::default()),
        Part::text(1, "cccc", Style::default()),
        Part::text(2, "dddd", Style::default()),
    ];
    assert_eq!(keep_fitting(&parts, 19, 1), [true, true, true, true]);
    // Two prio-2 parts: the rightmost goes first.
    assert_eq!(keep_fitting(&parts, 18, 1), [true, true, true, false]);
    assert_eq!(keep_fitting(&parts, 9, 1), [true, false, true, false]);
    assert_eq!(keep_fitting(&parts, 3, 1), [false, false, false, false]);
}

#[test]
fn ellipsis_only_when_needed() {
    assert_eq!(ellipsize("Qwen/Qwen3-8B", 20), "Qwen/Qwen3-8B");
    assert_eq!(ellipsize("Qwen/Qwen3-8B", 6), "Qwen/…");
}

fn render_spark(points: &[SparkPoint], w: u16, h: u16) -> Vec<String> {
    let area = Rect::new(0, 0, w, h);
    let mut buf = Buffer::empty(area);
    Spark {
        points,
        value: |p| p.ttft_p99_us,
        style: Style::default(),
        marker_style: Style::default(),
        lower: None,
    }
    .render(area, &mut buf);
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect()
}

#[test]
fn spark_bars_markers_and_gaps() {
    let pt = |second, v: Option<u64>, marker| SparkPoint {
        server_queue: None,
        waiting: None,
        in_prefill: None,
        second,
        ttft_p99_us: v,
        itl_p99_us: None,
        marker,
    };
    let points = [
        pt(0, Some(100), false),
        pt(1, None, false),
        pt(2, Some(50), true),
        pt(3, Some(200), false),
        pt(4, Some(200), true),
    ];
    // Two rows, 16 eighths for the max (200): 100 -> 8, 50 -> 4.
    assert_eq!(render_spark(&points, 6, 2), ["   │█│", " █ ▄██"]);
    // One row: a marker takes the column.
    assert_eq!(render_spark(&points, 5, 1), ["▄ │█│"]);
    // Narrower than the window: the newest seconds are kept.
    assert_eq!(render_spark(&points, 2, 1), ["█│"]);
}

#[test]
fn frontier_points_land_where_worked_by_hand() {
    let pt = |concurrency, tok_s, kind| ChartPoint {
        concurrency,
        tok_s,
        p99_ttft_ms: None,
        kind,
        partial: false,
        series: 0,
        capacity: false,
    };
    // Per user is total / streams.
    assert_eq!(
        frontier_xy(&pt(32, 1728.0, PointKind::Planned)),
        (54.0, 1728.0)
    );
    assert_eq!(frontier_xy(&pt(0, 10.0, PointKind::Planned)), (10.0, 10.0));
    // A 41 x 10 graph, axes to 100 tok/s per user and 2,500 tok/s:
    // 81 dots across, 39 down. (54, 1728): dot 0.54 * 81 = 43.74 -> 43,
    // column 21; from the top 0.3088 * 39 = 12.04 -> dot 12, row 3.
    assert_eq!(
        frontier_cell((54.0, 1728.0), (100.0, 2500.0), 41, 10),
        (21, 3)
    );
    // The corners: the origin bottom left, the tops top right.
    assert_eq!(frontier_cell((0.0, 0.0), (100.0, 2500.0), 41, 10), (0, 9));
    assert_eq!(
        frontier_cell((100.0, 2500.0), (100.0, 2500.0), 41, 10),
        (40, 0)
    );
    // Drawn: the glyphs where the cells say, each labelled with its streams.
    let palette = Palette::new(super::super::theme::ColorMode::None);
    let points = [
        pt(1, 90.0, PointKind::Planned),
        pt(16, 1024.0, PointKind::Planned),
        pt(32, 1500.0, PointKind::Running),
    ];
    let area = Rect::new(0, 0, 50, 12);
    let mut buf = Buffer::empty(area);
    FrontierChart {
        points: &points,
        palette: &palette,
        front: 0,
        gpus: None,
    }
    .render(area, &mut buf);
    let rows: Vec<String> = (0..12)
        .map(|y| (0..50).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect();
    let text = rows.join("\n");
    // Tops: nice_ceil(1500 * 1.05) = 2000 (the label `2k`, 4 wide with
    // its tick: the graph starts at column 3, is 50 - 4 = 46 wide and 10
    // high); nice_ceil(90 * 1.05) = 100 tok/s per user.
    assert!(rows[0].starts_with("2k┤"), "{text}");
    let at = |xy| {
        let (c, r) = frontier_cell(xy, (100.0, 2000.0), 46, 10);
        (usize::from(c) + 3, usize::from(r))
    };
    for (glyph, xy, label) in [
        ('●', (90.0, 90.0), "1"),
        ('●', (64.0, 1024.0), "16"),
        ('◉', (46.875, 1500.0), "32"),
    ] {
        let (x, y) = at(xy);
        let row: Vec<char> = rows[y].chars().collect();
        assert_eq!(row[x], glyph, "({x}, {y})\n{text}");
        let after: String = row[x + 1..].iter().take(label.len()).collect();
        let before: String = row[x.saturating_sub(label.len())..x].iter().collect();
        assert!(
            after == label || before == label,
            "{label} at ({x}, {y})\n{text}"
        );
    }
    // The x axis: 0, half and the top, and its name.
    assert!(rows[11].contains("0 tok/s per user"), "{text}");
    assert!(rows[11].trim_end().ends_with("100"), "{text}");
    // Per GPU: the throughput axis divided, per user not. Tops
    // nice_ceil(1500 / 4 * 1.05) = 500 and 100: the label `500` makes
    // the graph start at column 4, 45 wide.
    let mut quarter = Buffer::empty(area);
    FrontierChart {
        points: &points,
        palette: &palette,
        front: 0,
        gpus: Some(4),
    }
    .render(area, &mut quarter);
    let rows: Vec<String> = (0..12)
        .map(|y| {
            (0..50)
                .map(|x| quarter[(x, y)].symbol().to_string())
                .collect()
        })
        .collect();
    let text = rows.join("\n");
    assert!(rows[0].starts_with("500┤"), "{text}");
    for (glyph, xy) in [
        ('●', (90.0, 22.5)),
        ('●', (64.0, 256.0)),
        ('◉', (46.875, 375.0)),
    ] {
        let (c, r) = frontier_cell(xy, (100.0, 500.0), 45, 10);
        let row: Vec<char> = rows[usize::from(r)].chars().collect();
        assert_eq!(row[usize::from(c) + 4], glyph, "{xy:?}\n{text}");
    }
}

#[test]
fn chart_ticks_sit_on_their_values() {
    let palette = Palette::new(super::super::theme::ColorMode::None);
    let points = [
        ChartPoint {
            concurrency: 1,
            tok_s: 100.0,
            p99_ttft_ms: Some(50.0),
            kind: PointKind::Planned,
            partial: false,
            series: 0,
            capacity: false,
        },
        ChartPoint {
            concurrency: 16,
            tok_s: 1000.0,
            p99_ttft_ms: Some(500.0),
            kind: PointKind::Planned,
            partial: false,
            series: 0,
            capacity: false,
        },
        ChartPoint {
            concurrency: 64,
            tok_s: 1200.0,
            p99_ttft_ms: Some(900.0),
            kind: PointKind::Running,
            partial: false,
            series: 0,
            capacity: false,
        },
    ];
    let area = Rect::new(0, 0, 60, 12);
    let mut buf = Buffer::empty(area);
    ThroughputChart {
        points: &points,
        x_max: 128,
        palette: &palette,
        knee: None,
        front: 0,
        predicted: &[],
    }
    .render(area, &mut buf);
    let rows: Vec<String> = (0..12)
        .map(|y| (0..60).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect();
    let text = rows.join("\n");
    // The column of each glyph is the column of its tick label.
    let col_of = |row: &str, pat: &str| {
        row.find(pat)
            .map(|b| row[..b].chars().count())
            .unwrap_or_else(|| panic!("{pat} not in {row}\n{text}"))
    };
    let labels = &rows[11];
    let axis = &rows[10];
    let ticks: Vec<usize> = axis
        .chars()
        .enumerate()
        .filter(|(_, c)| *c == '┴')
        .map(|(i, _)| i)
        .collect();
    assert_eq!(ticks.len(), 8, "one tick per power of two: {axis}\n{text}");
    // "16" is centred on its tick, and the 16-stream point is in that column.
    let c16 = col_of(labels, "16");
    assert!(ticks.contains(&(c16 + 1)) || ticks.contains(&c16), "{text}");
    let glyph_cols: Vec<usize> = rows[..10]
        .iter()
        .filter_map(|r| r.chars().position(|c| c == '●'))
        .collect();
    assert!(
        glyph_cols.contains(&ticks[4]),
        "{glyph_cols:?} vs {ticks:?}\n{text}"
    );
    assert!(text.contains('◉') && text.contains('×'), "{text}");
    // Right axis: p99 top is nice_ceil(945) = 1000.
    assert!(rows[0].trim_end().ends_with("├1k"), "{text}");
    assert!(rows[0].starts_with("2k┤"), "{text}");
}

#[test]
fn throughput_is_a_line_and_p99_its_marks() {
    let palette = Palette::new(super::super::theme::ColorMode::None);
    let pt = |concurrency, tok_s, p99, kind, partial| ChartPoint {
        concurrency,
        tok_s,
        p99_ttft_ms: Some(p99),
        kind,
        partial,
        series: 0,
        capacity: false,
    };
    // p99 falls while throughput rises: the two curves cross the plot in
    // opposite directions, so a braille dot tells which one is drawn.
    let points = [
        pt(1, 100.0, 900.0, PointKind::Planned, false),
        pt(64, 1000.0, 50.0, PointKind::Planned, false),
        // Not results yet: loose points, never on the line.
        pt(128, 200.0, 20.0, PointKind::Running, false),
    ];
    let (w, h) = (60, 14);
    let area = Rect::new(0, 0, w, h);
    let mut buf = Buffer::empty(area);
    ThroughputChart {
        points: &points,
        x_max: 128,
        palette: &palette,
        knee: None,
        front: 0,
        predicted: &[],
    }
    .render(area, &mut buf);
    let rows: Vec<Vec<char>> = (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().chars().next().unwrap_or(' '))
                .collect()
        })
        .collect();
    let text: String = rows
        .iter()
        .map(|r| r.iter().collect::<String>() + "\n")
        .collect();
    let cell = |x: usize, y: usize| rows[y][x];
    let braille = |c: char| ('\u{2801}'..='\u{28ff}').contains(&c);
    let at = |glyph: char| {
        rows.iter()
            .enumerate()
            .find_map(|(y, r)| r.iter().position(|c| *c == glyph).map(|x| (x, y)))
            .unwrap_or_else(|| panic!("{glyph} not drawn\n{text}"))
    };
    let mut dots: Vec<(usize, usize)> = rows
        .iter()
        .enumerate()
        .flat_map(|(y, r)| {
            r.iter()
                .enumerate()
                .filter(|(_, c)| **c == '●')
                .map(move |(x, _)| (x, y))
        })
        .collect();
    dots.sort_unstable();
    let [(x1, y1), (x64, y64)] = dots[..] else {
        panic!("two finished levels: {dots:?}\n{text}");
    };
    assert!(
        x64 > x1 + 4 && y64 < y1,
        "({x1}, {y1}) ({x64}, {y64})\n{text}"
    );
    // Every column between the two finished levels holds the line, in
    // the rows between them: throughput is not scatter.
    for x in x1 + 1..x64 {
        assert!(
            (y64..=y1).any(|y| braille(cell(x, y))),
            "no line in column {x}\n{text}"
        );
    }
    // Nothing joins the running level, and p99 is marks alone: no dot of
    // a line above the throughput's, where the falling p99 curve would run.
    let (xr, _) = at('◉');
    for x in x64 + 1..xr {
        assert!(
            (0..usize::from(h) - 2).all(|y| !braille(cell(x, y))),
            "a line to the running level in column {x}\n{text}"
        );
    }
    let p99_marks = rows.iter().flatten().filter(|c| **c == '×').count();
    assert_eq!(p99_marks, 3, "{text}");
    let x_mid = (x1 + x64) / 2;
    let line_rows: Vec<usize> = (0..usize::from(h) - 2)
        .filter(|y| braille(cell(x_mid, *y)))
        .collect();
    assert!(
        line_rows.iter().all(|y| (y64..=y1).contains(y)) && !line_rows.is_empty(),
        "one line in column {x_mid}: {line_rows:?}\n{text}"
    );
}

/// The waiting bars stacked: 8 waiting of which 4 in prefill, in a panel
/// 4 rows high scaled to 8: the bar fills all 4 rows, the lower 2 in the
/// in-prefill style, the upper 2 in the bar's own.
#[test]
fn a_stacked_bar_draws_its_lower_part_at_the_foot() {
    use ratatui::style::Color;
    let points = [SparkPoint {
        second: 0,
        ttft_p99_us: None,
        itl_p99_us: None,
        marker: false,
        server_queue: None,
        waiting: Some(8),
        in_prefill: Some(4),
    }];
    let area = Rect::new(0, 0, 1, 4);
    let mut buf = Buffer::empty(area);
    let (queued, prefill) = (
        Style::default().fg(Color::Red),
        Style::default().fg(Color::Blue),
    );
    Spark {
        points: &points,
        value: |p| p.waiting,
        style: queued,
        marker_style: Style::default(),
        lower: Some((|p| p.in_prefill, prefill)),
    }
    .render(area, &mut buf);
    let colours: Vec<Option<Color>> = (0..4).map(|y| Some(buf[(0, y)].fg)).collect();
    assert_eq!(
        colours,
        [
            Some(Color::Red),
            Some(Color::Red),
            Some(Color::Blue),
            Some(Color::Blue)
        ]
    );
    assert!((0..4).all(|y| buf[(0, y)].symbol() == "█"));
}

/// A 12-dot-long level line in a 6 x 1 area: dashes of 3 dots, gaps of 3,
/// so dashes over 0..3 and 6..9 dots, a quarter of the width each, at 0
/// and at the half.
#[test]
fn a_predicted_line_is_cut_into_dashes() {
    use super::chart::dashes;
    let got = dashes(&[(0.0, 0.5), (1.0, 0.5)], 6, 1);
    assert_eq!(
        got,
        vec![((0.0, 0.5), (0.25, 0.5)), ((0.5, 0.5), (0.75, 0.5))]
    );
    // The pattern carries across a point: cut at 9 dots, the second
    // segment (9..12) falls in a gap and draws nothing.
    let got = dashes(&[(0.0, 0.5), (0.75, 0.5), (1.0, 0.5)], 6, 1);
    assert_eq!(
        got,
        vec![((0.0, 0.5), (0.25, 0.5)), ((0.5, 0.5), (0.75, 0.5))]
    );
}

/// Measured levels at 1 and 4 streams, and the model's prediction from 4
/// to 16: the prediction is drawn dashed (some of its columns hold no dot)
/// and labelled, and the value axis makes room for its top.
#[test]
fn a_prediction_is_dashed_and_labelled() {
    let palette = Palette::new(super::super::theme::ColorMode::None);
    let pt = |concurrency, tok_s| ChartPoint {
        concurrency,
        tok_s,
        p99_ttft_ms: None,
        kind: PointKind::Planned,
        partial: false,
        series: 0,
        capacity: false,
    };
    let points = [pt(1, 100.0), pt(4, 300.0)];
    let predicted = [PredictedCurve {
        points: vec![(4, 300.0), (8, 500.0), (16, 600.0)],
        series: 0,
        label: None,
    }];
    let (w, h) = (60, 14);
    let area = Rect::new(0, 0, w, h);
    let mut buf = Buffer::empty(area);
    ThroughputChart {
        points: &points,
        x_max: 16,
        palette: &palette,
        knee: None,
        front: 0,
        predicted: &predicted,
    }
    .render(area, &mut buf);
    let rows: Vec<String> = (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect();
    let text = rows.join("\n");
    assert!(text.contains("predicted"), "{text}");
    // The top label holds the prediction's 600: nice_ceil(630) = 700 or more.
    assert!(!rows[0].starts_with("300"), "{text}");
    // Columns of the plot right of the 4-stream point: braille in some,
    // none in others (the gaps), where the measured line never goes.
    let braille = |x: u16| {
        (0..h - 2).any(|y| {
            buf[(x, y)]
                .symbol()
                .chars()
                .next()
                .is_some_and(|c| ('\u{2801}'..='\u{28ff}').contains(&c))
        })
    };
    let four = rows[h as usize - 1].find(" 4").map_or(0, |b| b + 1) as u16;
    let right: Vec<bool> = (four + 3..w - 3).map(braille).collect();
    assert!(right.iter().any(|b| *b), "no dash drawn\n{text}");
    assert!(right.iter().any(|b| !*b), "no gap: not dashed\n{text}");
}
