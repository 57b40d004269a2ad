//! Per-request timing from the chunk arrivals a load task recorded
//! (docs/architecture.md section 7). Pure: the caller measures, this only does arithmetic.

use std::time::Duration;

use crate::record::ChunkArrival;

/// Above this many spread ITL samples for one request, per-chunk token
/// counts are not trusted (they come from the server) and every gap counts as
/// one sample instead. Far above any real `max_tokens`; it only keeps a server
/// that reports absurd counts from making us allocate gigabytes.
pub(crate) const MAX_SPREAD_SAMPLES: u64 = 1 << 20;

/// A level's stream decode speed, tok/s a stream once it streams: 1000 /
/// the median TPOT in ms. None without a positive, finite median (a level
/// whose answers were each one chunk has no decode speed, not an infinite
/// one). The level files, `report`'s reading of older files and the merge
/// all take it from here.
pub(crate) fn stream_decode_tok_s(median_tpot_ms: Option<f64>) -> Option<f64> {
    median_tpot_ms
        .filter(|t| *t > 0.0)
        .map(|t| 1000.0 / t)
        .filter(|v| v.is_finite())
}

/// What one request's arrivals say about its latency.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RequestTiming {
    /// First output-carrying chunk, since t0.
    pub ttft: Option<Duration>,
    /// Last output-carrying chunk, since t0.
    pub e2el: Option<Duration>,
    /// (E2EL - TTFT) / (output_tokens - 1), when output_tokens > 1.
    pub tpot: Option<Duration>,
    /// Inter-token latencies in milliseconds.
    pub itl_ms: Vec<f64>,
}

/// `arrivals`: output-carrying chunks in arrival order (times since t0). The
/// caller leaves out what is not output: a role-only first delta, the
/// usage-only chunk, `[DONE]`. `output_tokens`: the request's true total
/// (usage when the server sent it), which drives TPOT.
///
/// - TTFT = first arrival; E2EL = last arrival; both `None` without arrivals.
/// - TPOT = (E2EL - TTFT) / (output_tokens - 1) when output_tokens > 1 and
///   there is at least one arrival (one chunk holding every token gives 0).
/// - ITL = the gaps between consecutive arrivals. When EVERY arrival after the
///   first says how many tokens it carried (`tokens: Some(k)`, from vLLM's
///   continuous usage stats), each gap is spread over its chunk's tokens:
///   gap/k, pushed k times (k = 0 counts as 1). Otherwise each gap is one
///   sample. Spreading is also dropped (one sample per gap) when the counts add
///   up to more than `output_tokens` or [`MAX_SPREAD_SAMPLES`]: counts that
///   contradict the total are not believed.
///
/// Arrivals out of order never panic: a negative gap counts as zero.
pub(crate) fn request_timing(arrivals: &[ChunkArrival], output_tokens: u32) -> RequestTiming {
    let (first, last) = match (arrivals.first(), arrivals.last()) {
        (Some(f), Some(l)) => (f.at, l.at),
        _ => return RequestTiming::default(),
    };

    let tpot = if output_tokens > 1 {
        Some(last.saturating_sub(first) / (output_tokens - 1))
    } else {
        None
    };

    let rest = &arrivals[1..];
    let spread_counts: Option<Vec<u32>> = rest
        .iter()
        .map(|a| a.tokens.map(|k| k.max(1)))
        .collect::<Option<Vec<u32>>>()
        .filter(|ks| {
            let total: u64 = ks.iter().map(|&k| u64::from(k)).sum();
            total <= u64::from(output_tokens) && total <= MAX_SPREAD_SAMPLES
        });

    let gaps = arrivals
        .windows(2)
        .map(|w| w[1].at.saturating_sub(w[0].at).as_secs_f64() * 1000.0);

    let itl_ms = match spread_counts {
        Some(ks) => {
            let total: usize = ks.iter().map(|&k| k as usize).sum();
            let mut out = Vec::with_capacity(total);
            for (gap, k) in gaps.zip(ks) {
                let each = gap / f64::from(k);
                out.extend(std::iter::repeat_n(each, k as usize));
            }
            out
        }
        None => gaps.collect(),
    };

    RequestTiming {
        ttft: Some(first),
        e2el: Some(last),
        tpot,
        itl_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_speed_is_1000_over_the_median_tpot() {
        // A 25 ms median TPOT: 40 tok/s a stream; 8 ms: 125.
        assert_eq!(stream_decode_tok_s(Some(25.0)), Some(40.0));
        assert_eq!(stream_decode_tok_s(Some(8.0)), Some(125.0));
        // One chunk an answer (TPOT 0), no TPOT, or a broken one: no speed.
        assert_eq!(stream_decode_tok_s(Some(0.0)), None);
        assert_eq!(stream_decode_tok_s(None), None);
        assert_eq!(stream_decode_tok_s(Some(f64::NAN)), None);
        assert_eq!(stream_decode_tok_s(Some(1e-320)), None);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn at(n: u64) -> ChunkArrival {
        ChunkArrival {
            at: ms(n),
            tokens: None,
        }
    }

    fn at_k(n: u64, k: u32) -> ChunkArrival {
        ChunkArrival {
            at: ms(n),
            tokens: Some(k),
        }
    }

    fn assert_ms(actual: &[f64], expected: &[f64]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
        for (a, e) in actual.iter().zip(expected) {
            assert!((a - e).abs() < 1e-9, "{actual:?} vs {expected:?}");
        }
    }

    #[test]
    fn no_arrivals_no_timing() {
        let t = request_timing(&[], 5);
        assert_eq!(t, RequestTiming::default());
        assert!(t.ttft.is_none() && t.e2el.is_none() && t.tpot.is_none());
    }

    #[test]
    fn single_token_request() {
        // One chunk at 120 ms holding the only token: TTFT = E2EL = 120 ms,
        // no TPOT (output_tokens = 1), no gaps.
        let t = request_timing(&[at(120)], 1);
        assert_eq!(t.ttft, Some(ms(120)));
        assert_eq!(t.e2el, Some(ms(120)));
        assert_eq!(t.tpot, None);
        assert!(t.itl_ms.is_empty());
    }

    #[test]
    fn one_token_per_chunk() {
        // Arrivals 100, 110, 130, 160 ms; 4 tokens.
        // TPOT = (160 - 100) / 3 = 20 ms. ITL = [10, 20, 30].
        let t = request_timing(&[at(100), at(110), at(130), at(160)], 4);
        assert_eq!(t.ttft, Some(ms(100)));
        assert_eq!(t.e2el, Some(ms(160)));
        assert_eq!(t.tpot, Some(ms(20)));
        assert_ms(&t.itl_ms, &[10.0, 20.0, 30.0]);
    }

    #[test]
    fn chunks_with_several_tokens_spread_the_gap() {
        // Continuous usage: first chunk carries 2 tokens, then 4, then 2.
        // Arrivals 50, 90, 110 ms; total 8 tokens.
        // Gap 40 ms over 4 tokens -> 10 ms x4; gap 20 ms over 2 tokens -> 10 ms x2.
        // TPOT = (110 - 50) / (8 - 1) = 60/7 ms = 8.571428... ms.
        let t = request_timing(&[at_k(50, 2), at_k(90, 4), at_k(110, 2)], 8);
        assert_eq!(t.ttft, Some(ms(50)));
        assert_eq!(t.e2el, Some(ms(110)));
        assert_eq!(t.tpot, Some(ms(60) / 7));
        assert_ms(&t.itl_ms, &[10.0, 10.0, 10.0, 10.0, 10.0, 10.0]);
    }

    #[test]
    fn first_chunk_count_not_needed_for_spreading() {
        // Only arrivals after the first need a count: the first chunk has no
        // gap before it. Gaps 30 ms over 3 tokens -> 10 x3; 8 ms over k=0 -> 8 x1.
        let t = request_timing(&[at(10), at_k(40, 3), at_k(48, 0)], 5);
        assert_ms(&t.itl_ms, &[10.0, 10.0, 10.0, 8.0]);
        // TPOT = (48 - 10) / 4 = 9.5 ms.
        assert_eq!(t.tpot, Some(Duration::from_micros(9_500)));
    }

    #[test]
    fn one_missing_count_means_one_sample_per_gap() {
        // The middle chunk has no count, so nothing is spread:
        // gaps 40 and 20 ms are one sample each.
        let t = request_timing(&[at_k(50, 2), at(90), at_k(110, 2)], 8);
        assert_ms(&t.itl_ms, &[40.0, 20.0]);
        assert_eq!(t.tpot, Some(ms(60) / 7));
    }

    #[test]
    fn usage_total_above_chunk_count_drives_tpot_only() {
        // Server streamed 3 chunks (no per-chunk counts) but usage says 9
        // tokens. The usage-only chunk is not passed, so E2EL stays at the
        // last output chunk (70 ms), not when usage arrived.
        // TPOT = (70 - 10) / (9 - 1) = 7.5 ms; ITL = one sample per gap: [20, 40].
        let t = request_timing(&[at(10), at(30), at(70)], 9);
        assert_eq!(t.e2el, Some(ms(70)));
        assert_eq!(t.tpot, Some(Duration::from_micros(7_500)));
        assert_ms(&t.itl_ms, &[20.0, 40.0]);
    }

    #[test]
    fn all_tokens_in_one_chunk() {
        // One chunk holding 5 tokens: TPOT = 0 / 4 = 0, no ITL.
        let t = request_timing(&[at_k(200, 5)], 5);
        assert_eq!(t.tpot, Some(Duration::ZERO));
        assert!(t.itl_ms.is_empty());
    }

    #[test]
    fn counts_contradicting_the_total_are_not_spread() {
        // Per-chunk counts say 1000 + 1000 tokens but the total is 3:
        // not believed, one sample per gap.
        let t = request_timing(&[at(0), at_k(10, 1000), at_k(30, 1000)], 3);
        assert_ms(&t.itl_ms, &[10.0, 20.0]);
        // Absurd counts with an absurd total stay bounded too.
        let t = request_timing(&[at(0), at_k(10, u32::MAX)], u32::MAX);
        assert_ms(&t.itl_ms, &[10.0]);
    }

    #[test]
    fn out_of_order_arrivals_do_not_panic() {
        // 50 then 40 ms: the negative gap saturates to 0; E2EL - TTFT also 0.
        let t = request_timing(&[at(50), at(40)], 2);
        assert_eq!(t.tpot, Some(Duration::ZERO));
        assert_ms(&t.itl_ms, &[0.0]);
    }
}
