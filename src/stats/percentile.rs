//! Percentiles exactly as numpy computes them by default, so saved figures
//! match `vllm bench serve` on the same samples (docs/architecture.md section 7).

/// numpy.percentile default ("linear") on a SORTED slice; `p` in `0..=100`.
///
/// `None` for an empty slice, and for a `p` outside `0..=100` (or NaN): a
/// percentile that cannot be computed is reported as missing, never guessed.
///
/// Method (numpy's `linear`): rank = p/100 * (n-1); the result interpolates
/// between the samples at floor(rank) and ceil(rank). The interpolation uses
/// numpy's own two-sided lerp (`a + (b-a)*t` below t = 0.5, `b - (b-a)*(1-t)`
/// from 0.5 up) so results agree with numpy to the last bit in most cases.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let n = sorted.len();
    let q = p / 100.0;
    let rank = (n - 1) as f64 * q;
    let lo = rank.floor();
    // `lo` is in 0..=n-1 because 0 <= q <= 1; the cast cannot wrap.
    let lo_idx = (lo as usize).min(n - 1);
    let hi_idx = (lo_idx + 1).min(n - 1);
    let t = rank - lo;
    let a = sorted[lo_idx];
    let b = sorted[hi_idx];
    let diff = b - a;
    Some(if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    })
}

/// numpy.median on a SORTED slice: the middle sample, or the mean of the two
/// middle ones. `None` for an empty slice.
pub(crate) fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    Some(if n % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// numpy.median of the finite values, in any order; `None` when there is
/// none. NaN and infinities are left out, not sorted to an end.
pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_unstable_by(f64::total_cmp);
    median_sorted(&v)
}

/// A percentile as vLLM writes it in key names: `99.0 -> "99"`,
/// `99.9 -> "99.9"`, `50.0 -> "50"` (Python's
/// `str(int(p)) if int(p) == p else str(p)`).
pub(crate) fn percentile_label(p: f64) -> String {
    if p.is_finite() && p == p.trunc() && p.abs() < 1e15 {
        // Whole number well inside i64: print without a fraction.
        format!("{}", p as i64)
    } else {
        format!("{p}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn median_of_unsorted_finite_values() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        // Even count: the mean of the middle two, (1 + 4) / 2.
        assert_eq!(median([4.0, 1.0]), Some(2.5));
        // NaN and infinities are not figures: 3, 1, 2 remain.
        assert_eq!(median([3.0, f64::NAN, 1.0, f64::INFINITY, 2.0]), Some(2.0));
        assert_eq!(median([f64::NEG_INFINITY]), None);
        assert_eq!(median([]), None);
    }

    #[test]
    fn empty_slice_is_none() {
        assert_eq!(percentile_sorted(&[], 50.0), None);
        assert_eq!(median_sorted(&[]), None);
    }

    #[test]
    fn one_sample_is_every_percentile() {
        // n = 1: rank = p/100 * 0 = 0 for every p -> the only sample.
        for p in [0.0, 1.0, 50.0, 99.0, 100.0] {
            assert_eq!(percentile_sorted(&[7.0], p), Some(7.0));
        }
        assert_eq!(median_sorted(&[7.0]), Some(7.0));
    }

    #[test]
    fn two_samples_interpolate() {
        // n = 2, [10, 20]: rank = p/100 * 1.
        // p0 -> 10; p50 -> rank 0.5 -> 10 + 10*0.5 = 15; p90 -> 10 + 10*0.9 = 19;
        // p99 -> 19.9; p100 -> 20.
        let s = [10.0, 20.0];
        assert_eq!(percentile_sorted(&s, 0.0), Some(10.0));
        assert!(close(percentile_sorted(&s, 50.0).unwrap(), 15.0));
        assert!(close(percentile_sorted(&s, 90.0).unwrap(), 19.0));
        assert!(close(percentile_sorted(&s, 99.0).unwrap(), 19.9));
        assert_eq!(percentile_sorted(&s, 100.0), Some(20.0));
        assert_eq!(median_sorted(&s), Some(15.0));
    }

    #[test]
    fn five_samples_match_numpy() {
        // [1, 2, 3, 4, 10], n-1 = 4.
        // p50: rank 2.0 -> s[2] = 3.
        // p90: rank 3.6 -> s[3] + (s[4]-s[3])*0.6 = 4 + 6*0.6 = 7.6.
        // p99: rank 3.96 -> 4 + 6*0.96 = 9.76.
        // p25: rank 1.0 -> 2.  p10: rank 0.4 -> 1 + 1*0.4 = 1.4.
        // (numpy.percentile([1,2,3,4,10], [10,25,50,90,99]) = [1.4, 2, 3, 7.6, 9.76])
        let s = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert!(close(percentile_sorted(&s, 50.0).unwrap(), 3.0));
        assert!(close(percentile_sorted(&s, 90.0).unwrap(), 7.6));
        assert!(close(percentile_sorted(&s, 99.0).unwrap(), 9.76));
        assert!(close(percentile_sorted(&s, 25.0).unwrap(), 2.0));
        assert!(close(percentile_sorted(&s, 10.0).unwrap(), 1.4));
        assert_eq!(percentile_sorted(&s, 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&s, 100.0), Some(10.0));
        assert_eq!(median_sorted(&s), Some(3.0));
    }

    #[test]
    fn out_of_range_p_is_none() {
        let s = [1.0, 2.0];
        assert_eq!(percentile_sorted(&s, -0.1), None);
        assert_eq!(percentile_sorted(&s, 100.1), None);
        assert_eq!(percentile_sorted(&s, f64::NAN), None);
    }

    #[test]
    fn labels_like_vllm() {
        for (p, label) in [
            (99.0, "99"),
            (50.0, "50"),
            (99.9, "99.9"),
            (0.0, "0"),
            (100.0, "100"),
            (12.5, "12.5"),
        ] {
            assert_eq!(percentile_label(p), label);
        }
    }
}
