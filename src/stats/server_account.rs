//! The server's own account of a level: its latency histograms and request
//! and token counters, read at the level's start and end (a snapshot each,
//! taken while nothing of either level is in flight), their differences,
//! and what they say beside the client's figures.
//!
//! Histograms and counters only grow, so a level's difference is exact in
//! count and sum: the server's mean is exact; its percentiles are bounded
//! by the bucket edges either side (and estimated inside the bucket as
//! Prometheus' `histogram_quantile` does, linearly). A counter that went
//! down means the server restarted between the two snapshots: that level's
//! account is not trusted, and says so.
//!
//! Pure: the probe reads `/metrics` into a [`Snapshot`]; nothing here does
//! I/O or reads a clock.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::fmt::round3;

/// One histogram family, summed over its label sets: cumulative counts at
/// each upper edge (`le`, ascending, the last `+Inf`), the sum, the count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

/// Where a percentile falls: the bucket's edges and the estimate inside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounded {
    /// The bucket's lower edge (0 for the first).
    pub from: f64,
    /// Its upper edge; infinite for the `+Inf` bucket.
    pub to: f64,
    /// Linear inside the bucket; the lower edge for the `+Inf` bucket.
    pub estimate: f64,
}

impl Histogram {
    /// This histogram less an earlier reading of the same family. None when
    /// their edges differ or a count went down (a restart in between).
    pub fn since(&self, earlier: &Histogram) -> Option<Histogram> {
        if earlier.buckets.is_empty() {
            return Some(self.clone());
        }
        if self.buckets.len() != earlier.buckets.len() || self.count < earlier.count {
            return None;
        }
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for ((le, c), (le0, c0)) in self.buckets.iter().zip(&earlier.buckets) {
            if le != le0 && !(le.is_infinite() && le0.is_infinite()) || c < c0 {
                return None;
            }
            buckets.push((*le, c - c0));
        }
        Some(Histogram {
            buckets,
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        })
    }

    /// The exact mean (sum over count); None with no observation.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The bucket the `q` quantile (0..=1) falls in, as
    /// `histogram_quantile` finds it: the first edge whose cumulative count
    /// reaches `q * count`.
    pub fn quantile(&self, q: f64) -> Option<Bounded> {
        if self.count <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * self.count;
        let mut from = 0.0;
        let mut below = 0.0;
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank && cumulative > 0.0 {
                let inside = cumulative - below;
                let estimate = if le.is_infinite() {
                    from
                } else if inside > 0.0 {
                    from + (le - from) * ((rank - below) / inside)
                } else {
                    le
                };
                return Some(Bounded {
                    from,
                    to: le,
                    estimate,
                });
            }
            from = le;
            below = cumulative;
        }
        None
    }
}

/// What one snapshot of a server's `/metrics` holds, under tokbench's own
/// keys (`ttft`, `queue`, `prefill`, `decode`, `e2e`, `itl`; `requests`,
/// `generation_tokens`, `prompt_tokens`), each from the engine's name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Seconds, as the engines write them.
    pub histograms: BTreeMap<&'static str, Histogram>,
    pub counters: BTreeMap<&'static str, f64>,
}

/// The latency histograms, in the order the account lists them.
pub const LATENCIES: [&str; 7] = [
    "ttft",
    "queue",
    "prefill",
    "decode",
    "itl",
    "e2e",
    "inference",
];

/// One level's account from its two snapshots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LevelAccount {
    /// Per key: the histogram of the level's own observations.
    pub histograms: BTreeMap<&'static str, Histogram>,
    /// Per key: how much the counter grew over the level.
    pub counters: BTreeMap<&'static str, f64>,
    /// A count went down between the snapshots: a restart; nothing here is
    /// trusted.
    pub reset: bool,
}

impl LevelAccount {
    pub fn between(start: &Snapshot, end: &Snapshot) -> LevelAccount {
        let mut account = LevelAccount::default();
        for (key, h) in &end.histograms {
            let earlier = start.histograms.get(key).cloned().unwrap_or_default();
            match h.since(&earlier) {
                Some(d) => {
                    account.histograms.insert(key, d);
                }
                None => account.reset = true,
            }
        }
        for (key, v) in &end.counters {
            let earlier = start.counters.get(key).copied().unwrap_or(0.0);
            if *v < earlier {
                account.reset = true;
            } else {
                account.counters.insert(key, v - earlier);
            }
        }
        account
    }

    fn mean_ms(&self, key: &str) -> Option<f64> {
        self.histograms.get(key)?.mean().map(|s| s * 1000.0)
    }
}

/// What the client measured of the same level, to set beside it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientSide {
    /// Completed requests (ok).
    pub completed: u64,
    /// Failed or cancelled ones (the server may still have finished them).
    pub failed: u64,
    pub ttft_mean_ms: Option<f64>,
    /// Requests `ttft_mean_ms` is over.
    pub ttft_count: u64,
    /// The probes' TTFT mean and count: the server's mean holds them too.
    pub probe_ttft: Option<(f64, u64)>,
    /// Tokens of the level's requests, its probes' included.
    pub output_tokens: u64,
    pub input_tokens: u64,
    /// Probe requests of the level (`--probe-rate`), however they ended:
    /// not in `completed` or `failed`, but the server counts them too.
    pub probes: u64,
    /// `--shard I/N`: the run's N (0 or 1: not sharded). The other shards'
    /// requests are in the server's counts by design.
    pub shards: u32,
}

/// Requests more than the client's, over which another client is using the
/// server (a level's request counts are exact: no tolerance is needed but
/// a request the client gave up on that the server still finished). For a
/// shard this is the other shards' load, expected: see [`other_shards`].
fn other_traffic(server_requests: f64, client: &ClientSide) -> bool {
    server_requests > (client.completed + client.failed + client.probes) as f64 + 0.5
}

/// A shard of a run of `shards > 1`: the server's counts hold the other
/// shards' requests. Whether a third client used the server too is not
/// judged: the other shards' levels need not line up with this one in time
/// (without `--start-at` each shard steps on its own) and their pace is
/// not known to this process, so no excess can be told from theirs.
fn other_shards(client: &ClientSide) -> Option<u32> {
    (client.shards > 1).then(|| client.shards - 1)
}

/// "the other shard's" or "the other N shards'".
fn shards_text(others: u32) -> String {
    match others {
        1 => "the other shard's".to_string(),
        n => format!("the other {n} shards'"),
    }
}

/// ", and N probes" where the level had probes: the server's count holds them.
fn probes_text(client: &ClientSide) -> String {
    match client.probes {
        0 => String::new(),
        n => format!(" and {n} probes"),
    }
}

/// The client's TTFT mean over what the server's covers: the level's
/// requests and its probes, each weighted by its count.
fn client_ttft_mean(client: &ClientSide) -> Option<f64> {
    let load = client.ttft_mean_ms.map(|m| (m, client.ttft_count));
    let (sum, n) = [load, client.probe_ttft]
        .into_iter()
        .flatten()
        .filter(|(m, n)| m.is_finite() && *n > 0)
        .fold((0.0, 0u64), |(sum, total), (m, n)| {
            (sum + m * n as f64, total + n)
        });
    (n > 0).then(|| sum / n as f64)
}

/// The level's account as the level file's `server_account` object and
/// its lines in words.
pub fn account_json(account: &LevelAccount, client: &ClientSide) -> Value {
    let mut out = Map::new();
    if account.reset {
        out.insert("trusted".into(), json!(false));
        out.insert(
            "lines".into(),
            json!(["the server's counters went down during this level (a restart?): its own account is not used"]),
        );
        return Value::Object(out);
    }
    for key in LATENCIES {
        let Some(h) = account.histograms.get(key).filter(|h| h.count > 0.0) else {
            continue;
        };
        let ms = |x: f64| {
            if x.is_finite() {
                json!(round3(x * 1000.0))
            } else {
                Value::Null
            }
        };
        let bounded = |q: f64| {
            h.quantile(q).map_or(Value::Null, |b| {
                json!({"from_ms": ms(b.from), "to_ms": ms(b.to), "estimate_ms": ms(b.estimate)})
            })
        };
        out.insert(
            format!("{key}_ms"),
            json!({
                "count": h.count,
                "mean": h.mean().map_or(Value::Null, ms),
                "p50": bounded(0.5),
                "p99": bounded(0.99),
            }),
        );
    }
    for (key, v) in &account.counters {
        out.insert((*key).to_string(), json!(v));
    }
    let lines = account_lines(account, client);
    let shared = account
        .counters
        .get("requests")
        .is_some_and(|r| other_traffic(*r, client));
    out.insert("other_traffic".into(), json!(shared));
    out.insert("trusted".into(), json!(true));
    out.insert("lines".into(), json!(lines));
    Value::Object(out)
}

/// The account in words: TTFT beside the client's with what is outside
/// the engine, the request count check, the token count check.
pub fn account_lines(account: &LevelAccount, client: &ClientSide) -> Vec<String> {
    let mut lines = Vec::new();
    if let (Some(client_ttft), Some(server_ttft)) =
        (client_ttft_mean(client), account.mean_ms("ttft"))
    {
        let over = match client.probe_ttft {
            Some((_, n)) if n > 0 => " (requests and probes)",
            _ => "",
        };
        let parts: Vec<String> = [("queue", "queue"), ("prefill", "prefill")]
            .iter()
            .filter_map(|(key, word)| Some(format!("{word} {}", ms_text(account.mean_ms(key)?))))
            .collect();
        let split = if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        };
        let shared = account
            .counters
            .get("requests")
            .is_some_and(|r| other_traffic(*r, client));
        lines.push(if let Some(others) = other_shards(client).filter(|_| shared) {
            // The server's mean covers the other shards' requests too.
            format!(
                "TTFT mean: client {} ms{over}, server {} ms{split} over {} requests too: no gap is read",
                ms_text(client_ttft),
                ms_text(server_ttft),
                shards_text(others),
            )
        } else if shared {
            // The server's mean covers the other client's requests too.
            format!(
                "TTFT mean: client {} ms{over}, server {} ms{split} over another client's requests too: no gap is read",
                ms_text(client_ttft),
                ms_text(server_ttft),
            )
        } else {
            format!(
                "TTFT mean: client {} ms{over}, server {} ms{split}: {} ms outside the engine",
                ms_text(client_ttft),
                ms_text(server_ttft),
                ms_text(client_ttft - server_ttft)
            )
        });
    }
    if let Some(&server) = account.counters.get("requests") {
        let ok = client.completed as f64;
        let others = other_shards(client).filter(|_| other_traffic(server, client));
        if let Some(others) = others {
            // Expected, not a warning: the run says it once (`shards_share_server`).
            lines.push(format!(
                "requests: the server finished {server:.0} during this level, this shard {}{} ({} failed); {} are in its count",
                client.completed,
                probes_text(client),
                client.failed,
                shards_text(others)
            ));
        } else if other_traffic(server, client) {
            lines.push(format!(
                "the server finished {server:.0} requests during this level, this client {}{} ({} failed): another client is using the server, and its figures include that load",
                client.completed, probes_text(client), client.failed
            ));
        } else if server + 0.5 < ok {
            lines.push(format!(
                "the server counted {server:.0} requests finished, this client {}{}: its counters lag or count differently",
                client.completed, probes_text(client)
            ));
        } else {
            lines.push(format!(
                "requests: the server counted {server:.0}, this client {}{}: no other traffic",
                client.completed,
                probes_text(client)
            ));
        }
    }
    let tokens = |key: &str, word: &str, mine: u64| -> Option<String> {
        let server = *account.counters.get(key)?;
        if mine == 0 && server == 0.0 {
            return None;
        }
        let differ = if mine > 0 {
            (server - mine as f64) / mine as f64
        } else {
            f64::INFINITY
        };
        Some(if differ.abs() < 0.005 {
            format!("{word} tokens: the server counted {server:.0}, this client {mine}: the same")
        } else {
            format!(
                "{word} tokens: the server counted {server:.0}, this client {mine} ({:+.1}%)",
                differ * 100.0
            )
        })
    };
    lines.extend(tokens("generation_tokens", "output", client.output_tokens));
    lines.extend(tokens("prompt_tokens", "input", client.input_tokens));
    lines.extend(speculation_line(account));
    lines
}

/// Milliseconds as a line shows them: a tenth under 10 ms, where a loopback
/// gap lives, whole ones above.
fn ms_text(ms: f64) -> String {
    if ms.abs() < 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

/// Speculative decoding over the level: the share of draft tokens accepted,
/// and the mean acceptance length as vLLM defines it (1 + accepted per
/// draft: each draft step also yields the target model's own token).
fn speculation_line(account: &LevelAccount) -> Option<String> {
    let drafts = *account.counters.get("spec_drafts")?;
    let draft_tokens = *account.counters.get("spec_draft_tokens")?;
    let accepted = *account.counters.get("spec_accepted_tokens")?;
    if drafts <= 0.0 || draft_tokens <= 0.0 {
        return None;
    }
    Some(format!(
        "speculative decoding: {drafts:.0} drafts of {draft_tokens:.0} tokens, {:.0}% accepted, mean acceptance length {:.2}",
        accepted / draft_tokens * 100.0,
        1.0 + accepted / drafts
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(edges: &[(f64, f64)], sum: f64) -> Histogram {
        Histogram {
            buckets: edges.to_vec(),
            sum,
            count: edges.last().map_or(0.0, |e| e.1),
        }
    }

    /// Edges 0.1, 0.2, 0.5, +Inf. Before: 3 / 5 / 5 / 5 (sum 0.6). After:
    /// 3 / 9 / 13 / 13 (sum 3.0). The level's own: 0 / 4 / 8 / 8, sum 2.4:
    /// mean 0.3 s exactly. p50 is rank 4: reached at 0.2 (cumulative 4), in
    /// (0.1, 0.2], estimated at the edge 0.2. p99 is rank 7.92: in
    /// (0.2, 0.5], estimated 0.2 + 0.3 x (7.92 - 4) / 4 = 0.494.
    #[test]
    fn a_levels_histogram_is_the_difference_and_its_percentiles_are_bucket_bounded() {
        let inf = f64::INFINITY;
        let before = hist(&[(0.1, 3.0), (0.2, 5.0), (0.5, 5.0), (inf, 5.0)], 0.6);
        let after = hist(&[(0.1, 3.0), (0.2, 9.0), (0.5, 13.0), (inf, 13.0)], 3.0);
        let level = after.since(&before).expect("grew");
        assert_eq!(
            level.buckets,
            vec![(0.1, 0.0), (0.2, 4.0), (0.5, 8.0), (inf, 8.0)]
        );
        assert_eq!(level.count, 8.0);
        assert!((level.mean().expect("mean") - 0.3).abs() < 1e-12);
        let p50 = level.quantile(0.5).expect("p50");
        assert_eq!((p50.from, p50.to), (0.1, 0.2));
        assert!((p50.estimate - 0.2).abs() < 1e-12);
        let p99 = level.quantile(0.99).expect("p99");
        assert_eq!((p99.from, p99.to), (0.2, 0.5));
        assert!((p99.estimate - 0.494).abs() < 1e-12, "{}", p99.estimate);
        // Past the last finite edge: bounded below only.
        let tail = hist(&[(0.1, 1.0), (inf, 2.0)], 5.0)
            .quantile(0.99)
            .expect("tail");
        assert_eq!((tail.from, tail.to, tail.estimate), (0.1, inf, 0.1));
        // A count that went down, or other edges: not a difference.
        assert_eq!(before.since(&after), None);
        let other = hist(&[(0.25, 3.0), (inf, 5.0)], 0.6);
        assert_eq!(after.since(&other), None);
        assert_eq!(Histogram::default().mean(), None);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    fn snapshot(ttft: Histogram, queue: Histogram, prefill: Histogram, requests: f64) -> Snapshot {
        Snapshot {
            histograms: [("ttft", ttft), ("queue", queue), ("prefill", prefill)]
                .into_iter()
                .collect(),
            counters: [
                ("requests", requests),
                ("generation_tokens", requests * 64.0),
                ("prompt_tokens", requests * 100.0),
            ]
            .into_iter()
            .collect(),
        }
    }

    /// 10 requests in the level: server TTFT sum 1.98 s (mean 198 ms),
    /// queue 1.2 s (120), prefill 0.78 s (78); the client's mean 212 ms:
    /// 14 ms outside the engine. 10 requests and 640 output tokens on both
    /// sides; input tokens 1000 against the client's 980 (+2.0%).
    #[test]
    fn the_account_beside_the_client_worked_by_hand() {
        let inf = f64::INFINITY;
        let h = |count: f64, sum: f64| hist(&[(1.0, count), (inf, count)], sum);
        let start = snapshot(h(0.0, 0.0), h(0.0, 0.0), h(0.0, 0.0), 0.0);
        let end = snapshot(h(10.0, 1.98), h(10.0, 1.2), h(10.0, 0.78), 10.0);
        let account = LevelAccount::between(&start, &end);
        assert!(!account.reset);
        let client = ClientSide {
            completed: 10,
            failed: 0,
            ttft_mean_ms: Some(212.0),
            ttft_count: 10,
            probe_ttft: None,
            output_tokens: 640,
            input_tokens: 980,
            probes: 0,
            shards: 1,
        };
        assert_eq!(
            account_lines(&account, &client),
            vec![
                "TTFT mean: client 212 ms, server 198 ms (queue 120, prefill 78): 14 ms outside the engine",
                "requests: the server counted 10, this client 10: no other traffic",
                "output tokens: the server counted 640, this client 640: the same",
                "input tokens: the server counted 1000, this client 980 (+2.0%)",
            ]
        );
        let json = account_json(&account, &client);
        assert_eq!(json["other_traffic"], false);
        assert_eq!(json["ttft_ms"]["count"], 10.0);
        assert_eq!(json["ttft_ms"]["mean"], 198.0);
        assert_eq!(json["ttft_ms"]["p50"]["from_ms"], 0.0);
        assert_eq!(json["ttft_ms"]["p50"]["to_ms"], 1000.0);
        // Under 10 ms a tenth is shown: a loopback gap of 0.4 ms is not "0".
        let near = ClientSide {
            ttft_mean_ms: Some(198.4),
            ..client
        };
        assert_eq!(
            account_lines(&account, &near)[0],
            "TTFT mean: client 198 ms, server 198 ms (queue 120, prefill 78): 0.4 ms outside the engine"
        );
        // 8 of the 10 were the level's (client mean 230 ms) and 2 its probes
        // (mean 100 ms): the server's mean is over all 10, so the client's
        // is too: (8 * 230 + 2 * 100) / 10 = 204 ms, 6 ms outside.
        let probed = ClientSide {
            completed: 8,
            ttft_mean_ms: Some(230.0),
            ttft_count: 8,
            probe_ttft: Some((100.0, 2)),
            probes: 2,
            ..client
        };
        assert_eq!(
            account_lines(&account, &probed)[..2],
            [
                "TTFT mean: client 204 ms (requests and probes), server 198 ms (queue 120, prefill 78): 6.0 ms outside the engine",
                "requests: the server counted 10, this client 8 and 2 probes: no other traffic",
            ]
        );
        // Another client's 4 requests during the level: said, and marked.
        let busy = snapshot(h(14.0, 2.5), h(14.0, 1.5), h(14.0, 1.0), 14.0);
        let shared = LevelAccount::between(&start, &busy);
        let json = account_json(&shared, &client);
        assert_eq!(json["other_traffic"], true);
        assert_eq!(
            json["lines"][0],
            "TTFT mean: client 212 ms, server 179 ms (queue 107, prefill 71) over another client's requests too: no gap is read"
        );
        assert!(json["lines"][1]
            .as_str()
            .is_some_and(|l| l.starts_with("the server finished 14 requests during this level, this client 10 (0 failed): another client")));
        // Shard 0 of 3: the other shards' 4 requests are expected, said as
        // a fact, no warning (the run says it once: shards_share_server).
        let shard = ClientSide {
            shards: 3,
            ..client
        };
        let json = account_json(&shared, &shard);
        assert_eq!(json["other_traffic"], true);
        assert_eq!(
            json["lines"].as_array().map(|l| l[..2].to_vec()).unwrap_or_default(),
            [
                "TTFT mean: client 212 ms, server 179 ms (queue 107, prefill 71) over the other 2 shards' requests too: no gap is read",
                "requests: the server finished 14 during this level, this shard 10 (0 failed); the other 2 shards' are in its count",
            ]
        );
        let text = json["lines"].to_string();
        assert!(!text.contains("another client"), "{text}");
        // Two shards, and nothing beyond this one's requests: as unsharded.
        let pair = ClientSide {
            shards: 2,
            ..client
        };
        assert_eq!(
            account_lines(&account, &pair),
            account_lines(&account, &client)
        );
        assert!(account_json(&shared, &pair)["lines"][1]
            .as_str()
            .is_some_and(|l| l.ends_with("; the other shard's are in its count")));
        // Speculative decoding: 10 drafts of 30 tokens, 18 accepted: 60%,
        // mean acceptance length 1 + 18/10 = 2.8.
        let mut spec = account.clone();
        spec.counters.extend([
            ("spec_drafts", 10.0),
            ("spec_draft_tokens", 30.0),
            ("spec_accepted_tokens", 18.0),
        ]);
        assert_eq!(
            account_lines(&spec, &client).last().map(String::as_str),
            Some("speculative decoding: 10 drafts of 30 tokens, 60% accepted, mean acceptance length 2.80")
        );
        // A restart in between: nothing trusted.
        let restarted = LevelAccount::between(&end, &start);
        assert!(restarted.reset);
        assert_eq!(account_json(&restarted, &client)["trusted"], false);
    }
}
