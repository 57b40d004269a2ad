//! The chart panel of a ramp (`--ramp`): the offered rate over the ramp's
//! seconds beside the achieved one (requests finished in each second that
//! is over), and the second where p99 TTFT first failed.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, BorderType, Chart, Dataset, GraphType, Widget};

use super::latency::padded;
use crate::report::recorder::rate_label;
use crate::stats::rate_series::RateSeries;
use crate::ui::app::{App, RampView};
use crate::ui::widgets::{fit, Part};

/// Offered-rate samples drawn per second of the ramp.
const OFFERED_PER_SECOND: usize = 4;

/// What the panel shows, worked out from the ramp and its seconds so far.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RampFigures {
    /// (second, requests/s offered), sampled along the ramp.
    pub offered: Vec<(f64, f64)>,
    /// (middle of the second, requests finished in it): seconds that are over.
    pub achieved: Vec<(f64, f64)>,
    /// The first second whose p99 TTFT failed, with the rate offered then
    /// and the p99 against its limit.
    pub broke: Option<(usize, f64, f64, f64)>,
    pub y_max: f64,
}

/// The offered rate sampled along the ramp.
fn offered_line(ramp: &crate::load::ramp::Ramp) -> Vec<(f64, f64)> {
    let steps = (ramp.duration_s.ceil() as usize).max(1) * OFFERED_PER_SECOND;
    (0..=steps)
        .map(|i| {
            let t = ramp.duration_s * i as f64 / steps as f64;
            (t, ramp.rate_at(t))
        })
        .collect()
}

impl RampFigures {
    /// The figures, with room above the highest of both lines.
    fn new(
        offered: Vec<(f64, f64)>,
        achieved: Vec<(f64, f64)>,
        broke: Option<(usize, f64, f64, f64)>,
    ) -> RampFigures {
        let y_max = offered
            .iter()
            .chain(&achieved)
            .map(|p| p.1)
            .fold(1.0, f64::max)
            * 1.1;
        RampFigures {
            offered,
            achieved,
            broke,
            y_max,
        }
    }
}

/// A finished ramp as its level file saved it (`rate_series`): every
/// second's finished requests, and its `broke_at`.
pub(crate) fn saved_ramp_figures(
    ramp: &crate::load::ramp::Ramp,
    rate_series: &serde_json::Value,
) -> RampFigures {
    let offered = offered_line(ramp);
    let count = |s: &serde_json::Value, key: &str| s[key].as_f64().unwrap_or(0.0);
    let achieved: Vec<(f64, f64)> = rate_series["seconds"]
        .as_array()
        .map(|seconds| {
            seconds
                .iter()
                .enumerate()
                .map(|(k, s)| (k as f64 + 0.5, count(s, "completed") + count(s, "failed")))
                .collect()
        })
        .unwrap_or_default();
    let broke = rate_series.get("broke_at").and_then(|b| {
        Some((
            usize::try_from(b["second"].as_u64()?).ok()?,
            b["offered_rate"].as_f64()?,
            b["ttft_p99_ms"].as_f64()?,
            b["limit_ms"].as_f64()?,
        ))
    });
    RampFigures::new(offered, achieved, broke)
}

/// `now`: the run's clock; a second counts as achieved once it is over.
pub(crate) fn ramp_figures(view: &RampView, seconds: &RateSeries, now_s: f64) -> RampFigures {
    let ramp = view.ramp;
    let offered = offered_line(&ramp);
    let over = (now_s - seconds.from().as_secs_f64()).max(0.0).floor() as usize;
    let achieved: Vec<(f64, f64)> = (0..over.min(seconds.seconds_counted()))
        .map(|k| {
            let (completed, failed) = seconds.finished_in(k);
            (k as f64 + 0.5, f64::from(completed + failed))
        })
        .collect();
    let broke = seconds
        .broke(view.slo_ttft_p99_ms)
        .filter(|b| b.second < over)
        .map(|b| {
            let rate = ramp.rate_at(b.second as f64 + 0.5);
            (b.second, rate, b.ttft_p99_ms, b.limit_ms)
        });
    RampFigures::new(offered, achieved, broke)
}

/// Whether the chart panel is a ramp's: a ramp run with its level started,
/// or a saved one.
pub(super) fn is_ramp(app: &App) -> bool {
    app.shown.run.ramp.is_some() && (app.ramp_seconds.is_some() || app.saved_ramp.is_some())
}

pub(super) fn ramp_panel(app: &App, area: Rect, buf: &mut Buffer) {
    let Some(view) = &app.shown.run.ramp else {
        return;
    };
    let figures = match (&app.ramp_seconds, &app.saved_ramp) {
        (Some((_, seconds)), _) => ramp_figures(view, seconds, app.elapsed.as_secs_f64()),
        (None, Some(saved)) => saved.clone(),
        (None, None) => return,
    };
    let p = &app.palette;
    let room = area.width.saturating_sub(4);
    let title = fit(
        vec![
            Part::text(0, "req/s", p.title),
            Part::text(1, format!("{} ramp", view.ramp.kind.name()), p.title),
            Part::text(
                2,
                format!(
                    "{}..{} req/s over {} s",
                    rate_label(view.ramp.from),
                    rate_label(view.ramp.to),
                    rate_label(view.ramp.duration_s)
                ),
                p.dim,
            ),
        ],
        room,
        1,
    );
    // Where it broke is kept longest; its reason, then the key, go first.
    let mut legend = vec![
        Part::text(1, "⠒ offered", p.running),
        Part::text(1, "• achieved", p.point_planned),
    ];
    if let Some((second, rate, p99, limit)) = figures.broke {
        legend.push(Part::text(
            0,
            format!("broke s{second} at {rate:.1} req/s"),
            p.bad,
        ));
        legend.push(Part::text(
            2,
            format!("(p99 TTFT {p99:.0} > {limit:.0} ms)"),
            p.bad,
        ));
    }
    let legend = fit(legend, room, 1);
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(title)))
        .title_bottom(Line::from(padded(legend)).right_aligned());
    let mut datasets = vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(p.running)
            .data(&figures.offered),
        Dataset::default()
            .marker(Marker::Dot)
            .graph_type(GraphType::Scatter)
            .style(p.point_planned)
            .data(&figures.achieved),
    ];
    let broke_at;
    if let Some((second, rate, ..)) = figures.broke {
        broke_at = [(second as f64 + 0.5, rate)];
        datasets.push(
            Dataset::default()
                .marker(Marker::Block)
                .graph_type(GraphType::Scatter)
                .style(p.bad)
                .data(&broke_at),
        );
    }
    // The queue drains after the ramp's last second: its seconds too.
    let x_max = figures
        .achieved
        .last()
        .map_or(0.0, |p| p.0 + 0.5)
        .max(view.ramp.duration_s)
        .max(1.0);
    let label = |v: f64| Span::styled(format!("{v:.0}"), p.dim);
    Chart::new(datasets)
        .block(block)
        .x_axis(Axis::default().bounds([0.0, x_max]).labels(vec![
            label(0.0),
            Span::styled("s", p.dim),
            label(x_max),
        ]))
        .y_axis(
            Axis::default()
                .bounds([0.0, figures.y_max])
                .labels(vec![label(0.0), label(figures.y_max / 1.1)]),
        )
        .hidden_legend_constraints((
            ratatui::layout::Constraint::Length(0),
            ratatui::layout::Constraint::Length(0),
        ))
        .render(area, buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::ramp::{Ramp, RampKind};
    use crate::record::RequestRecord;
    use std::time::Duration;

    fn done(start_ms: u64, ttft_ms: u64, end_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::empty(1, 0);
        r.start = Duration::from_millis(start_ms);
        r.send_lag = Some(Duration::ZERO);
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.end = Duration::from_millis(end_ms);
        r
    }

    /// A ramp from 2 to 6 req/s over 4 s from the run's second 10: the
    /// offered line runs 2 at 0 s, 4 at 2 s, 6 at 4 s. Second 0 finished
    /// two requests (TTFT 10 and 12), second 1 three (TTFT 11, 10, 300),
    /// second 2 one so far. At 12.5 s on the run's clock seconds 0 and 1
    /// are over: achieved 2 and 3; second 2 is not shown. With an SLO of
    /// 100 ms, second 1's p99 (numpy's, over the sorted 10, 11, 300: rank
    /// 0.99 * 2 = 1.98, so 11 + 0.98 * 289 = 294.22) fails: broke at s1,
    /// at the offered rate of 1.5 s, 2 + 4 * 1.5 / 4 = 3.5.
    #[test]
    fn offered_and_achieved_by_second_and_the_break_worked_by_hand() {
        let view = RampView {
            ramp: Ramp::new(RampKind::Linear, 2.0, 6.0, 4.0).expect("ramp"),
            slo_ttft_p99_ms: Some(100.0),
        };
        let mut seconds = RateSeries::starting_at(Duration::from_secs(10));
        for (start, ttft, end) in [
            (10_000, 10, 10_400),
            (10_500, 12, 10_900),
            (11_000, 11, 11_300),
            (11_200, 10, 11_600),
            (11_400, 300, 11_900),
            (12_000, 10, 12_200),
        ] {
            seconds.add(&done(start, ttft, end));
        }
        let f = ramp_figures(&view, &seconds, 12.5);
        assert_eq!(f.offered.first(), Some(&(0.0, 2.0)));
        assert_eq!(f.offered.get(8), Some(&(2.0, 4.0)));
        assert_eq!(f.offered.last(), Some(&(4.0, 6.0)));
        assert_eq!(f.achieved, vec![(0.5, 2.0), (1.5, 3.0)]);
        let (second, rate, p99, limit) = f.broke.expect("broke");
        assert_eq!((second, rate, limit), (1, 3.5, 100.0));
        assert!((p99 - 294.22).abs() < 1e-9, "{p99}");
        // Before second 1 is over its break is not shown.
        let early = ramp_figures(&view, &seconds, 11.5);
        assert_eq!(early.achieved, vec![(0.5, 2.0)]);
        assert_eq!(early.broke, None);
    }
}
