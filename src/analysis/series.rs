//! A run of several series (server settings compared in one run): each
//! series' result in one line, and the latest against the first.

/// The label of series `index` (0-based) when the user gave none:
/// `series 1`, `series 2`, ... The live view, the level files and every
/// report name an unlabelled series so.
pub(crate) fn default_label(index: usize) -> String {
    // The index may come from a file: the largest one must not overflow.
    format!("series {}", index.saturating_add(1))
}

/// One series' result: its label, capacity, knee and peak.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesResult {
    pub index: usize,
    pub label: String,
    pub capacity: Option<u32>,
    pub knee: Option<(u32, u32)>,
    /// Highest output tok/s of its complete levels.
    pub peak_tok_s: Option<f64>,
}

/// The "so far" lines of a run of several series: each one's capacity and
/// peak, then the latest against the first
/// (`NUM_PARALLEL=4 vs NUM_PARALLEL=1: capacity 4 vs 1 streams, peak 388 vs 97 tok/s`).
pub(crate) fn series_lines(results: &[SeriesResult]) -> Vec<String> {
    let capacity = |r: &SeriesResult| r.capacity.map_or_else(|| "-".into(), |c| c.to_string());
    let peak = |r: &SeriesResult| {
        r.peak_tok_s
            .map_or_else(|| "-".into(), |t| format!("{t:.0}"))
    };
    let mut lines: Vec<String> = results
        .iter()
        .map(|r| {
            let knee = r
                .knee
                .map_or_else(String::new, |(a, b)| format!(", knee {a} → {b}"));
            format!(
                "{}: capacity {} streams, peak {} tok/s{knee}",
                r.label,
                capacity(r),
                peak(r)
            )
        })
        .collect();
    if let (Some(first), Some(last)) = (results.first(), results.last()) {
        if results.len() > 1 {
            lines.push(format!(
                "{} vs {}: capacity {} vs {} streams, peak {} vs {} tok/s",
                last.label,
                first.label,
                capacity(last),
                capacity(first),
                peak(last),
                peak(first)
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlabelled_series_counts_from_one() {
        assert_eq!(default_label(0), "series 1");
        assert_eq!(default_label(2), "series 3");
        assert_eq!(default_label(usize::MAX), format!("series {}", usize::MAX));
    }
}
