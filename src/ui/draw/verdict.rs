//! The verdict panel under the level table: what the levels so far add up
//! to (knee, capacity, SLO, cost), wrapped in whole words.

use super::latency::padded;
use crate::ui::app::{App, CostView};
use crate::ui::theme::Palette;
use crate::ui::widgets::{dollars, ellipsize, grouped, percent, times};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Widget};

/// The verdict panel is not worth fewer rows than this.
pub(super) const VERDICT_MIN_HEIGHT: u16 = 5;

pub(super) fn has_result(app: &App) -> bool {
    !app.shown.verdict.is_empty() || app.shown.cost.is_some() || app.tune.is_some()
}

/// A word of the result panel and its style.
type Word = (String, Style);

pub(super) fn words(text: &str, style: Style) -> impl Iterator<Item = Word> + '_ {
    text.split_whitespace().map(move |w| (w.to_string(), style))
}

/// `capacity: ...` with its head word in the head's colour.
fn sentence(line: &str, p: &Palette) -> Vec<Word> {
    match line.split_once(": ") {
        Some((head, rest)) if head.len() <= 12 => {
            let style = match head {
                "capacity" => p.capacity,
                "knee" => p.knee,
                _ => p.strong,
            };
            let mut out: Vec<Word> = words(head, style).collect();
            if let Some(last) = out.last_mut() {
                last.0.push(':');
            }
            out.extend(words(rest, p.text));
            out
        }
        _ => words(line, p.text).collect(),
    }
}

/// The cost at capacity in figures, the verdict first:
/// `cost: $0.322/M vs API $0.65/M: 2.0x cheaper; break-even 855 tok/s =
/// 49% utilization (GPU $2/h at full use)`.
fn cost_words(c: &CostView, p: &Palette) -> Vec<Word> {
    let Some(full) = c.cost_per_m else {
        // Nothing to show in figures: the analysis says why.
        return sentence(&c.verdict, p);
    };
    let (own, at) = match c.effective {
        Some((e, u)) => (e, format!("{} use", percent(u))),
        None => (full, "full use".to_string()),
    };
    let cmp = c.api_price_per_m.map(|api| own.total_cmp(&api));
    let own_style = match cmp {
        Some(std::cmp::Ordering::Less) => p.good,
        Some(std::cmp::Ordering::Greater) => p.bad,
        _ => p.strong,
    };
    let mut w: Vec<Word> = vec![
        ("cost:".into(), p.strong),
        (format!("{}/M", dollars(own)), own_style),
    ];
    if let Some(api) = c.api_price_per_m {
        w.extend(words("vs API", p.text));
        w.push((format!("{}/M:", dollars(api)), p.strong));
        if own < api {
            w.push((times(api / own), p.good));
            w.push(("cheaper;".into(), p.text));
        } else if own > api {
            w.push(("API".into(), p.text));
            w.push((times(own / api), p.bad));
            w.push(("cheaper;".into(), p.text));
        } else {
            w.extend(words("the same;", p.text));
        }
        if let Some(even) = c.break_even_tok_s {
            w.push(("break-even".into(), p.text));
            w.push((grouped(even.round().max(0.0) as u64), p.strong));
            w.push(("tok/s".into(), p.text));
            if let Some(u) = c.break_even_utilization {
                w.push(("=".into(), p.text));
                w.push((percent(u), if u > 1.0 { p.bad } else { p.strong }));
                w.push(("utilization".into(), p.text));
            }
        }
    }
    match c.gpu_price_per_hour {
        Some(gpu) => {
            w.push((format!("(GPU {}/h", dollars(gpu)), p.dim));
            w.extend(words(&format!("at {at})"), p.dim));
        }
        None => w.push((format!("(at {at})"), p.dim)),
    }
    w
}

fn words_width(line: &[Word]) -> usize {
    line.iter()
        .map(|(t, _)| Span::raw(t.as_str()).width())
        .sum::<usize>()
        + line.len().saturating_sub(1)
}

/// Words in lines of `width`, at most `max_lines` of them; an entry cut
/// short ends in `…` after a whole word, so no figure is ever cut.
fn wrap_words(words: &[Word], width: usize, max_lines: usize, p: &Palette) -> Vec<Line<'static>> {
    if width == 0 || max_lines == 0 {
        return Vec::new();
    }
    let mut lines: Vec<Vec<Word>> = Vec::new();
    let mut line: Vec<Word> = Vec::new();
    for (text, style) in words {
        let w = Span::raw(text.as_str()).width();
        let text = if w > width {
            ellipsize(text, width)
        } else {
            text.clone()
        };
        let needed = Span::raw(text.as_str()).width() + usize::from(!line.is_empty());
        if !line.is_empty() && words_width(&line) + needed > width {
            lines.push(std::mem::take(&mut line));
        }
        line.push((text, *style));
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > max_lines {
        lines.truncate(max_lines);
        if let Some(last) = lines.last_mut() {
            while last.len() > 1 && words_width(last) + 2 > width {
                last.pop();
            }
            if words_width(last) + 2 <= width {
                last.push(("…".into(), p.dim));
            }
        }
    }
    lines
        .into_iter()
        .map(|l| {
            let mut spans = Vec::new();
            for (i, (text, style)) in l.into_iter().enumerate() {
                if i > 0 {
                    spans.push(Span::raw(" "));
                }
                spans.push(Span::styled(text, style));
            }
            Line::from(spans)
        })
        .collect()
}

/// What the result panel says, in order, each with its claim on spare
/// lines (lower first) when not everything fits.
fn result_entries(app: &App) -> Vec<(Vec<Word>, u8)> {
    let p = &app.palette;
    let mut entries: Vec<(Vec<Word>, u8)> = Vec::new();
    // A tune: which setting to keep so far, and each setting's result,
    // before what the current setting's levels add up to.
    if let Some(tune) = &app.tune {
        if let Some(keep) = &tune.recommendation {
            entries.push((words(keep, p.strong).collect(), 0));
        }
        for row in &tune.rows {
            entries.push((sentence(row, p), 1));
        }
    }
    let mut rest = app.shown.verdict.iter().peekable();
    if let Some(first) =
        rest.next_if(|l| l.starts_with("capacity:") || l.starts_with("no capacity:"))
    {
        entries.push((sentence(first, p), 1));
    }
    if let Some(cost) = &app.shown.cost {
        entries.push((cost_words(cost, p), 0));
    }
    for line in rest {
        let rank = if line.starts_with("knee:") { 2 } else { 3 };
        entries.push((sentence(line, p), rank));
    }
    if app.other().is_some() {
        // Two runs: the header has no room for the SLO; it goes here.
        if let Some(slo) = app.shown.slo.as_deref() {
            entries.push((sentence(&format!("SLO: {slo}"), p), 4));
        }
    }
    entries
}

/// Lines per entry for `height` rows: everything when it fits; else one
/// line each (in order, while rows last), then the spare rows by rank.
fn share_lines(full: &[usize], ranks: &[u8], height: usize) -> Vec<usize> {
    if full.iter().sum::<usize>() <= height {
        return full.to_vec();
    }
    let mut given = vec![0; full.len()];
    let mut left = height;
    for g in given.iter_mut() {
        if left == 0 {
            break;
        }
        *g = 1;
        left -= 1;
    }
    let mut order: Vec<usize> = (0..full.len()).collect();
    order.sort_by_key(|&i| ranks[i]);
    for i in order {
        if given[i] == 0 {
            continue;
        }
        let more = (full[i] - given[i]).min(left);
        given[i] += more;
        left -= more;
    }
    given
}

/// Capacity, cost, knee and the checks that fired, over the levels so far
/// (or the saved run's).
pub(super) fn verdict_panel(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.palette;
    let title = match &app.saved {
        None if app.tune.is_some() => "tune".into(),
        Some(saved) if saved.other.is_some() => format!("result {}", app.shown.label),
        Some(_) => "result".into(),
        None if app.is_finished() => "result".into(),
        None => "so far".into(),
    };
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(p.border)
        .title(Line::from(padded(Line::styled(title, p.title))));
    let inner = block.inner(area);
    block.render(area, buf);
    let width = usize::from(inner.width);
    let height = usize::from(inner.height);
    let entries = result_entries(app);
    let full: Vec<usize> = entries
        .iter()
        .map(|(w, _)| wrap_words(w, width, usize::MAX, p).len())
        .collect();
    let ranks: Vec<u8> = entries.iter().map(|(_, r)| *r).collect();
    let given = share_lines(&full, &ranks, height);
    let mut y = inner.y;
    for ((w, _), n) in entries.iter().zip(given) {
        for line in wrap_words(w, width, n, p) {
            line.render(Rect::new(inner.x, y, inner.width, 1), buf);
            y += 1;
        }
    }
}
