//! Label placement shared by both charts (throughput and frontier): text
//! boxes measured by an approximate font width, polylines sampled as
//! obstacles, and the first spot that overlaps nothing.

use super::PlotBox;

/// Points every 3 px along a polyline, so labels can keep clear of it.
pub(in crate::report) fn sample_polyline(line: &[(f64, f64)], out: &mut Vec<(f64, f64)>) {
    for w in line.windows(2) {
        let ((ax, ay), (bx, by)) = (w[0], w[1]);
        let steps = ((bx - ax).hypot(by - ay) / 3.0).ceil().max(1.0) as usize;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            out.push((ax + t * (bx - ax), ay + t * (by - ay)));
        }
    }
}

/// A placed label: where its text is anchored, and how.
#[derive(Clone, Copy, Debug)]
pub(in crate::report) struct Placed {
    pub x: f64,
    pub y: f64,
    pub anchor: &'static str,
}

impl PlotBox {
    /// Of some candidate spots for `text`, the first whose box stays inside
    /// the area and covers the fewest obstacle points (within `clearance`)
    /// and `placed` boxes; the area's top left when none is given. Its box
    /// joins `placed`, so the next label keeps clear of it. Both SVG charts
    /// place their labels with it.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::report) fn place(
        &self,
        clearance: f64,
        text: &str,
        size: f64,
        bold: bool,
        candidates: &[(f64, f64, &'static str)],
        points: &[(f64, f64)],
        placed: &mut Vec<TextBox>,
    ) -> Placed {
        let mut best: Option<(f64, Placed, TextBox)> = None;
        for &(x, y, anchor) in candidates {
            let b = TextBox::new(x, y, anchor, text, size, bold);
            let mut cost = points
                .iter()
                .filter(|p| b.grown(clearance).contains(**p))
                .count() as f64;
            cost += 50.0 * placed.iter().filter(|o| o.overlaps(&b)).count() as f64;
            if b.x0 < self.x0 + 2.0
                || b.x1 > self.x1 - 2.0
                || b.y0 < self.top + 2.0
                || b.y1 > self.bottom - 2.0
            {
                cost += 1000.0;
            }
            if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                best = Some((cost, Placed { x, y, anchor }, b));
            }
        }
        let (spot, b) = best.map_or_else(
            || {
                let (x, y, anchor) = (self.x0, self.top, "start");
                let b = TextBox::new(x, y, anchor, text, size, bold);
                (Placed { x, y, anchor }, b)
            },
            |(_, spot, b)| (spot, b),
        );
        placed.push(b);
        spot
    }
}

/// Where a line of text lies, from an estimate of its width.
#[derive(Clone, Copy, Debug)]
pub(in crate::report) struct TextBox {
    pub(in crate::report) x0: f64,
    pub(in crate::report) y0: f64,
    pub(in crate::report) x1: f64,
    pub(in crate::report) y1: f64,
}

impl TextBox {
    pub(in crate::report) fn new(
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
    pub(in crate::report) fn grown(&self, by: f64) -> TextBox {
        TextBox {
            x0: self.x0 - by,
            y0: self.y0 - by,
            x1: self.x1 + by,
            y1: self.y1 + by,
        }
    }
    pub(in crate::report) fn contains(&self, (x, y): (f64, f64)) -> bool {
        x >= self.x0 && x <= self.x1 && y >= self.y0 && y <= self.y1
    }
    pub(in crate::report) fn overlaps(&self, o: &TextBox) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

/// Width of a line of text in a Helvetica-like sans-serif, from rough
/// per-character widths in em: close enough to place labels and legends.
pub(in crate::report) fn text_width(text: &str, size: f64, bold: bool) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A placed label counts as placed: a second label offered the same
    /// spots takes the next one, and a third, with none left clear, still
    /// gets the first spot rather than none.
    #[test]
    fn each_label_keeps_clear_of_the_ones_placed_before() {
        let area = PlotBox {
            x0: 0.0,
            x1: 800.0,
            top: 0.0,
            bottom: 450.0,
        };
        let spots = [(100.0, 100.0, "start"), (100.0, 200.0, "start")];
        let mut placed = Vec::new();
        let at = |p: Placed| (p.x, p.y);
        let first = area.place(2.0, "64", 11.0, false, &spots, &[], &mut placed);
        let second = area.place(2.0, "128", 11.0, false, &spots, &[], &mut placed);
        let third = area.place(2.0, "256", 11.0, false, &spots, &[], &mut placed);
        assert_eq!(
            [at(first), at(second), at(third)],
            [(100.0, 100.0), (100.0, 200.0), (100.0, 100.0)]
        );
        assert_eq!(placed.len(), 3);
        // No spot offered: the area's top left, still counted.
        let fallback = area.place(2.0, "x", 11.0, false, &[], &[], &mut placed);
        assert_eq!(
            (at(fallback), fallback.anchor, placed.len()),
            ((0.0, 0.0), "start", 4)
        );
    }
}
