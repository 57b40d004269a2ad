//! `tokbench compare`'s arguments: the runs, `--force`, the regression gate
//! (`--fail-on-regression [PCT]`) and the output format.

use clap::{Args, ValueEnum};

/// The threshold `--fail-on-regression` takes when given without a value
/// (its `default_missing_value`, which clap takes as text, says the same).
pub const DEFAULT_REGRESSION_PCT: f64 = 5.0;

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Two or more result folders or summary.json files; the first is the baseline.
    #[arg(required = true, num_args = 2.., value_name = "DIR_OR_SUMMARY")]
    pub runs: Vec<std::path::PathBuf>,

    /// Compare even when the runs' input/output lengths or profiles differ.
    #[arg(long)]
    pub force: bool,

    /// Exit 99 when a figure got worse than the baseline's beyond the noise:
    /// beyond PCT percent, or beyond the rounds' spread widened by PCT where
    /// a run has `--rounds` (5 when given without a value).
    #[arg(
        long,
        value_name = "PCT",
        num_args = 0..=1,
        default_missing_value = "5",
        value_parser = parse_pct
    )]
    pub fail_on_regression: Option<f64>,

    /// What to print: text (the side-by-side tables, then the gate's verdict
    /// when gated), markdown (the verdict as a table for a pull-request
    /// comment) or json (the verdict, typed).
    #[arg(long, value_enum, default_value_t = CompareFormat::Text)]
    pub format: CompareFormat,
}

/// `tokbench compare --format`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    /// The side-by-side tables, and the verdict when gated.
    Text,
    /// The verdict as a Markdown table with a pass/fail header.
    #[value(alias = "md")]
    Markdown,
    /// The verdict as one JSON object (assets/schema/compare.schema.json).
    Json,
}

/// A percentage from 0 up to (not including) 100.
fn parse_pct(text: &str) -> Result<f64, String> {
    let pct: f64 = text.trim().trim_end_matches('%').parse().map_err(|_| {
        format!("{text:?} is not a percentage: give a number such as 5 (put the flag after the runs, or write --fail-on-regression=5)")
    })?;
    if !pct.is_finite() || !(0.0..100.0).contains(&pct) {
        return Err(format!(
            "{text} is not a percentage from 0 to under 100: give a number such as 5"
        ));
    }
    Ok(pct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_parse_and_nonsense_is_refused() {
        assert_eq!(parse_pct("5"), Ok(5.0));
        assert_eq!(parse_pct("2.5%"), Ok(2.5));
        assert_eq!(parse_pct("0"), Ok(0.0));
        assert!(parse_pct("100").is_err());
        assert!(parse_pct("-1").is_err());
        assert!(parse_pct("NaN").is_err());
        assert!(parse_pct("results/a").is_err());
    }
}
