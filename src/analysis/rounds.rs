//! Stability across rounds (issue 5 item 4): with `--rounds N` each level is
//! run N times back to back; the median of the rounds is the level's figure
//! and the spread `(max - min) / median` says how far to trust it.

use serde_json::{json, Value};

use super::decide::{counted_levels, LevelPoint};
use super::words::{median, num, opt_num, round_to};

/// A spread above this means the environment is noisy.
pub(crate) const ROUNDS_SPREAD_LIMIT: f64 = 0.15;

/// Median and spread of one metric over the rounds of one level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spread {
    pub median: f64,
    /// (max - min) / median; `None` when the median is 0.
    pub spread: Option<f64>,
}

impl Spread {
    /// Over the finite values; `None` when there is none.
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let med = median(finite.iter().copied())?;
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let spread = (med != 0.0)
            .then(|| (max - min) / med.abs())
            .filter(|s| s.is_finite());
        Some(Spread {
            median: med,
            spread,
        })
    }

    fn to_json(self) -> Value {
        json!({"median": num(round_to(self.median, 3)),
               "spread": opt_num(self.spread.map(|s| round_to(s, 4)))})
    }
}

/// The rounds of one concurrency.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RoundsSpread {
    pub concurrency: u32,
    pub rounds: usize,
    pub output_throughput: Spread,
    /// `None` when no round had a TTFT sample.
    pub p50_ttft_ms: Option<Spread>,
}

impl RoundsSpread {
    /// The larger spread of the two metrics.
    pub(crate) fn max_spread(&self) -> Option<f64> {
        let a = self.output_throughput.spread;
        let b = self.p50_ttft_ms.and_then(|s| s.spread);
        match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        }
    }

    /// Spread over 15% in either metric.
    pub(crate) fn is_noisy(&self) -> bool {
        self.max_spread().is_some_and(|s| s > ROUNDS_SPREAD_LIMIT)
    }

    /// `{concurrency, rounds, output_throughput: {median, spread},
    /// p50_ttft_ms: {median, spread} | null, noisy}`.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "concurrency": self.concurrency,
            "rounds": self.rounds,
            "output_throughput": self.output_throughput.to_json(),
            "p50_ttft_ms": self.p50_ttft_ms.map_or(Value::Null, Spread::to_json),
            "noisy": self.is_noisy(),
        })
    }
}

/// One entry per concurrency that has two or more finished (not partial)
/// planned or search levels, by rising concurrency.
pub(crate) fn rounds_spread(levels: &[LevelPoint]) -> Vec<RoundsSpread> {
    counted_levels(levels)
        .chunk_by(|a, b| a.concurrency == b.concurrency)
        .filter(|g| g.len() >= 2)
        .filter_map(|g| {
            let tput: Vec<f64> = g.iter().map(|l| l.figures.output_throughput).collect();
            let ttft: Vec<f64> = g.iter().filter_map(|l| l.figures.p50_ttft_ms).collect();
            Some(RoundsSpread {
                concurrency: g[0].concurrency,
                rounds: g.len(),
                output_throughput: Spread::of(&tput)?,
                p50_ttft_ms: Spread::of(&ttft),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::decide::Figures;
    use crate::record::Mode;

    fn round(c: u32, tput: f64, p50: Option<f64>) -> LevelPoint {
        LevelPoint {
            concurrency: c,
            kind: Mode::Planned,
            partial: false,
            figures: Figures {
                output_throughput: tput,
                per_stream_tok_s: tput / f64::from(c),
                p50_ttft_ms: p50,
                ..Figures::default()
            },
        }
    }

    #[test]
    fn spread_by_hand() {
        // 1000, 1100, 1230: median 1100, (1230 - 1000) / 1100 = 0.2091.
        let s = Spread::of(&[1100.0, 1230.0, 1000.0]).expect("values");
        assert_eq!(s.median, 1100.0);
        assert!((s.spread.unwrap_or(0.0) - 0.2091).abs() < 1e-4);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[0.0, 0.0]).map(|s| s.spread), Some(None));
    }

    #[test]
    fn noisy_and_quiet_rounds() {
        let levels = vec![
            // 4 streams, quiet: tput 400, 410, 405 -> median 405, spread 10/405 = 2.5%;
            // p50 100, 104, 102 -> 4/102 = 3.9%.
            round(4, 400.0, Some(100.0)),
            round(4, 410.0, Some(104.0)),
            round(4, 405.0, Some(102.0)),
            // 16 streams: tput steady (1500, 1520: 20/1510 = 1.3%) but p50 TTFT
            // 200 and 246: median 223, 46/223 = 20.6% -> noisy.
            round(16, 1500.0, Some(200.0)),
            round(16, 1520.0, Some(246.0)),
            // One round at 64: no spread entry.
            round(64, 2000.0, Some(500.0)),
        ];
        let spreads = rounds_spread(&levels);
        assert_eq!(spreads.len(), 2);
        let (a, b) = (&spreads[0], &spreads[1]);
        assert_eq!((a.concurrency, a.rounds), (4, 3));
        assert!(!a.is_noisy());
        assert!((a.max_spread().unwrap_or(0.0) - 4.0 / 102.0).abs() < 1e-9);
        assert_eq!((b.concurrency, b.rounds), (16, 2));
        assert!(b.is_noisy());
        assert!((b.max_spread().unwrap_or(0.0) - 46.0 / 223.0).abs() < 1e-9);
        assert_eq!(b.to_json()["noisy"], json!(true));
        assert_eq!(b.to_json()["output_throughput"]["median"], json!(1510.0));
    }

    #[test]
    fn partial_and_manual_levels_are_not_rounds() {
        let mut p = round(8, 100.0, None);
        p.partial = true;
        let mut m = round(8, 300.0, None);
        m.kind = Mode::Manual;
        let levels = vec![round(8, 200.0, None), p, m];
        assert!(rounds_spread(&levels).is_empty());
    }
}
