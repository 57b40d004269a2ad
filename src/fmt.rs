//! Number formats shared by the live view, the reports and the analysis's
//! sentences, so a figure reads the same everywhere: thousands grouped with
//! commas, dollars to three significant digits, fractions as percentages.
//! And the precision of a figure in a result file: every writer (level
//! files, summary, events, merge) rounds and turns NaN into `null` here.
//! Pure, and a leaf of the module map (it imports nothing of the crate).

use serde_json::Value;

/// Rounded to `places` decimals: the precision a result file keeps (3 for
/// ms, seconds and tok/s, so a millisecond keeps its microseconds; 4 for
/// ratios and dollars). A value too large to scale passes through as it is.
pub(crate) fn round_to(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    let r = (x * f).round() / f;
    if r.is_finite() {
        r
    } else {
        x
    }
}

/// [`round_to`] 3 places: ms, seconds, tok/s.
pub(crate) fn round3(x: f64) -> f64 {
    round_to(x, 3)
}

/// [`round_to`] 4 places: ratios and rates.
pub(crate) fn round4(x: f64) -> f64 {
    round_to(x, 4)
}

/// A JSON number, or null for NaN and infinities (JSON has neither).
pub(crate) fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// [`num`], and null for a figure there is none of.
pub(crate) fn opt_num(x: Option<f64>) -> Value {
    x.map_or(Value::Null, num)
}

/// `1795.64, 1` -> `1,795.6`: thousands separated by commas, `decimals`
/// after the point; a value that rounds to zero has no minus sign.
pub(crate) fn group(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s.as_str(), None),
    };
    let mut grouped = String::with_capacity(int.len() + int.len() / 3);
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let sign = if x < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// `1914` -> `1,914`.
pub(crate) fn grouped(n: u64) -> String {
    group(n as f64, 0)
}

/// `1910.26` -> `1,910`: whole, grouped.
pub(crate) fn thousands(x: f64) -> String {
    group(x, 0)
}

/// Dollars to three significant digits, trailing zeros dropped:
/// `0.2778` -> `$0.278`, `1.1111` -> `$1.11`, `0.34` -> `$0.34`, `2.0` -> `$2`.
pub(crate) fn dollars(x: f64) -> String {
    if !x.is_finite() {
        return "$?".into();
    }
    if x == 0.0 {
        return "$0".into();
    }
    let magnitude = x.abs().log10().floor() as i32;
    let places = (2 - magnitude).clamp(0, 6) as usize;
    let mut s = format!("{x:.places$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("${s}")
}

/// A fraction as a whole percentage: `0.7513` -> `75%`.
pub(crate) fn percent0(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// A fraction as a percentage with one decimal: `0.0588` -> `5.9%`.
pub(crate) fn percent1(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A threshold the user set, as they set it: thousands grouped, up to three
/// decimals, no trailing zeros (`2500` -> `2,500`, `12.5` -> `12.5`,
/// `5` -> `5`). A limit must not read rounder than it is.
pub(crate) fn threshold(x: f64) -> String {
    let text = group(x, 3);
    match text.split_once('.') {
        Some((int, frac)) if frac.trim_end_matches('0').is_empty() => int.to_string(),
        Some(_) => text.trim_end_matches('0').to_string(),
        None => text,
    }
}

/// A fraction the user set, as a percentage by [`threshold`]: `0.01` ->
/// `1%`, `0.005` -> `0.5%`.
pub(crate) fn threshold_percent(x: f64) -> String {
    format!("{}%", threshold(x * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_read_as_set() {
        assert_eq!(threshold(2500.0), "2,500");
        assert_eq!(threshold(12.5), "12.5");
        assert_eq!(threshold(5.0), "5");
        assert_eq!(threshold(0.125), "0.125");
        // Past three decimals the figure is rounded: 1/3 -> 0.333.
        assert_eq!(threshold(1.0 / 3.0), "0.333");
        assert_eq!(threshold_percent(0.01), "1%");
        assert_eq!(threshold_percent(0.005), "0.5%");
        // 0.07 x 100 is 7.000000000000001 in binary: still 7%.
        assert_eq!(threshold_percent(0.07), "7%");
    }

    /// The analysis (`analysis::words`) and the live view (`ui::widgets`)
    /// use these very functions; their figures are checked here, once.
    #[test]
    fn numbers_read_the_same_everywhere() {
        for (n, want) in [(0, "0"), (1914, "1,914"), (1_234_567, "1,234,567")] {
            assert_eq!(grouped(n), want);
        }
        for (x, want) in [
            (1910.26, "1,910"),
            (2304.0, "2,304"),
            (999.4, "999"),
            (1_234_567.0, "1,234,567"),
            (-2304.4, "-2,304"),
        ] {
            assert_eq!(thousands(x), want);
        }
        assert_eq!(group(1795.64, 1), "1,795.6");
        assert_eq!(group(-0.04, 1), "0.0");
        for (x, want) in [
            (0.2778, "$0.278"),
            (2.0 / 7.2, "$0.278"),
            (1.1111, "$1.11"),
            (2.0 / 1.8, "$1.11"),
            (0.34, "$0.34"),
            (0.65, "$0.65"),
            (2.0, "$2"),
            (12.34, "$12.3"),
            (12.345, "$12.3"),
            (f64::NAN, "$?"),
        ] {
            assert_eq!(dollars(x), want, "{x}");
        }
        for (x, want) in [
            (0.7513, "75%"),
            (1728.0 / 2304.0, "75%"),
            (854.7 / 1728.0, "49%"),
        ] {
            assert_eq!(percent0(x), want, "{x}");
        }
        assert_eq!(percent1(0.0588), "5.9%");
        assert_eq!(percent1(2304.0 / 2176.0 - 1.0), "5.9%");
    }

    #[test]
    fn saved_figures_keep_three_or_four_places_and_no_nan() {
        // 12.3456 ms: 12345.6 us rounds to 12346 us.
        assert_eq!(round3(12.3456), 12.346);
        assert_eq!(round3(-0.0004), -0.0);
        // 1/3 as a ratio: 0.33333... to 0.3333.
        assert_eq!(round4(1.0 / 3.0), 0.3333);
        assert_eq!(round_to(1.25, 1), 1.3);
        assert_eq!(round_to(0.277_777, 4), 0.2778);
        // 1e306 * 1000 overflows: the figure stays what it was.
        assert_eq!(round3(1e306), 1e306);
        assert!(round3(f64::NAN).is_nan());
        assert_eq!(num(1.5), serde_json::json!(1.5));
        assert_eq!(num(f64::NAN), Value::Null);
        assert_eq!(num(f64::INFINITY), Value::Null);
        assert_eq!(opt_num(None), Value::Null);
        assert_eq!(opt_num(Some(2.0)), serde_json::json!(2.0));
    }
}
