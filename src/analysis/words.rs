//! Small helpers shared by the analysis modules: numbers in words and
//! medians, with `crate::fmt`'s formats and saved-figure precision at hand.
//! Private to `analysis`.

pub(crate) use crate::stats::percentile::median;

/// "1 stream", "32 streams".
pub(crate) fn streams(n: u32) -> String {
    if n == 1 {
        "1 stream".to_string()
    } else {
        format!("{n} streams")
    }
}

pub(crate) use crate::fmt::{dollars, num, opt_num, percent0, percent1, round_to, thousands};

/// A measured figure (ms, tok/s) for a sentence: whole numbers from 10 up
/// (with thousands separators), one decimal below.
pub(crate) fn figure(x: f64) -> String {
    if x.abs() >= 10.0 {
        thousands(x)
    } else {
        format!("{x:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_for_numbers() {
        // thousands, dollars and percents are `crate::fmt`'s, and the median
        // `stats::percentile`'s: each is checked there.
        assert_eq!(figure(1910.26), "1,910");
        assert_eq!(figure(612.0), "612");
        assert_eq!(figure(7.06), "7.1");
        assert_eq!(streams(1), "1 stream");
        assert_eq!(streams(32), "32 streams");
    }
}
