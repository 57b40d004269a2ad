//! Multi-turn runs (`--turns`) and prefix caches: time to first token and
//! the share of prompt tokens the server's cache answered, turn by turn.
//! The hit rate counts only requests whose server said how many prompt
//! tokens came from its cache (vLLM's `prompt_tokens_details.cached_tokens`,
//! llama.cpp's `cache_n`).

use serde_json::{json, Value};

use std::collections::BTreeMap;

use crate::fmt::{round3, round4};
use crate::record::RequestRecord;
use crate::stats::hdr::{Samples, EXACT_CAP};

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TurnStats {
    /// 1-based; 0 gathers requests outside any conversation.
    pub turn: u32,
    /// Completed requests of this turn.
    pub completed: usize,
    pub p50_ttft_ms: Option<f64>,
    pub p99_ttft_ms: Option<f64>,
    /// Mean prompt tokens (the server's count where given).
    pub mean_input_tokens: f64,
    /// cached / prompt tokens, over the requests whose server said.
    pub cache_hit_rate: Option<f64>,
}

impl TurnStats {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "turn": self.turn,
            "completed": self.completed,
            "p50_ttft_ms": self.p50_ttft_ms.map(round3),
            "p99_ttft_ms": self.p99_ttft_ms.map(round3),
            "mean_input_tokens": round3(self.mean_input_tokens),
            "cache_hit_rate": self.cache_hit_rate.map(round4),
        })
    }
}

/// Completed requests grouped by turn, in turn order. Empty when no
/// request belongs to a conversation.
#[cfg(test)]
pub(crate) fn by_turn(records: &[RequestRecord]) -> Vec<TurnStats> {
    let mut tally = TurnTally::default();
    for r in records {
        tally.add(r);
    }
    tally.stats()
}

/// Cached and prompt tokens, summed over completed requests reporting both.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CacheHits {
    cached: u64,
    prompt: u64,
}

impl CacheHits {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        if let (true, Some(c), Some(p)) = (r.is_ok(), r.cached_tokens, r.input_tokens_reported) {
            self.cached += u64::from(c);
            self.prompt += u64::from(p);
        }
    }

    pub(crate) fn rate(&self) -> Option<f64> {
        (self.prompt > 0).then(|| self.cached as f64 / self.prompt as f64)
    }
}

/// One turn's completed requests, folded.
#[derive(Clone, Debug, PartialEq)]
struct TurnAcc {
    ttft: Samples,
    completed: usize,
    input_tokens: f64,
    hits: CacheHits,
}

/// `--turns`: TTFT and prefix-cache hits turn by turn, folded request by
/// request (a turn's TTFT values are bounded like any metric's, `hdr`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TurnTally {
    turns: BTreeMap<u32, TurnAcc>,
}

impl TurnTally {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let (Some(turn), true) = (r.turn, r.is_ok()) else {
            return;
        };
        let acc = self.turns.entry(turn).or_insert_with(|| TurnAcc {
            ttft: Samples::latency_ms(EXACT_CAP),
            completed: 0,
            input_tokens: 0.0,
            hits: CacheHits::default(),
        });
        acc.completed += 1;
        acc.input_tokens += f64::from(r.input_tokens());
        acc.hits.add(r);
        if let Some(t) = r.ttft {
            acc.ttft.add(t.as_secs_f64() * 1000.0);
        }
    }

    pub(crate) fn stats(&self) -> Vec<TurnStats> {
        self.turns
            .iter()
            .map(|(&turn, acc)| TurnStats {
                turn,
                completed: acc.completed,
                p50_ttft_ms: acc.ttft.percentile(50.0),
                p99_ttft_ms: acc.ttft.percentile(99.0),
                mean_input_tokens: acc.input_tokens / acc.completed as f64,
                cache_hit_rate: acc.hits.rate(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rec(turn: u32, ttft_ms: u64, prompt: u32, cached: Option<u32>) -> RequestRecord {
        let mut r = RequestRecord::empty(0, 0);
        r.turn = Some(turn);
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.input_tokens_reported = Some(prompt);
        r.cached_tokens = cached;
        r
    }

    #[test]
    fn ttft_and_hit_rate_by_turn() {
        let records = [
            rec(1, 10, 100, Some(0)),
            rec(1, 20, 100, Some(0)),
            rec(2, 8, 300, Some(96)),
            rec(2, 12, 300, Some(160)),
            // A server that did not say: left out of the rate, not counted as 0.
            rec(2, 30, 300, None),
        ];
        let turns = by_turn(&records);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].turn, 1);
        assert_eq!(turns[0].p50_ttft_ms, Some(15.0));
        assert_eq!(turns[0].cache_hit_rate, Some(0.0));
        assert_eq!(turns[1].completed, 3);
        // (96 + 160) / (300 + 300) = 0.42666...
        let rate = turns[1].cache_hit_rate.expect("rate");
        assert!((rate - 256.0 / 600.0).abs() < 1e-12, "{rate}");
        assert_eq!(turns[1].mean_input_tokens, 300.0);
        // p50 of [8, 12, 30] = 12.
        assert_eq!(turns[1].p50_ttft_ms, Some(12.0));
        assert!(by_turn(&[RequestRecord::empty(0, 0)]).is_empty());
    }
}
