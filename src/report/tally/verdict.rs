//! Knee, capacity, cost and diagnoses over the levels finished so far:
//! the judgement the summary writes and the live view shows. Pure.

use serde_json::{json, Map, Value};

use super::{FinishedLevel, Tally};
use crate::analysis::cost::{cost, Cost};
use crate::analysis::decide::{decide_judged, Decision, LevelPoint};
use crate::analysis::diagnose::{
    diagnose_run, ClientLevelLoad, DiagnoseInput, Diagnosis, LevelView, StreamShape,
};
use crate::analysis::engine_checks::{
    engine_diagnoses, knee_cause, seed_repeat, EngineInput, ServerView,
};
use crate::analysis::rounds::rounds_spread;
use crate::report::schema::{self, SeriesEntry};

/// A search judges its capacity among the probes below its failing bound,
/// while the table lists every probe: where one at or past the bound made
/// more throughput than the peak the capacity line names, the line says the
/// peak is the one below the bound, and names the table's, so both read
/// true together. `beyond` is (the bound, the concurrency and throughput of
/// the best probe from there on).
fn judged_below_the_bound(reason: &mut String, judged: &[LevelPoint], beyond: (u32, u32, f64)) {
    let (bound, at, throughput) = beyond;
    let judged_peak = judged
        .iter()
        .map(|p| p.figures.output_throughput)
        .fold(f64::NEG_INFINITY, f64::max);
    if throughput <= judged_peak {
        return;
    }
    let below = format!(" of the best below {bound} streams, ");
    *reason = reason.replacen(" of the peak ", &below, 1);
    reason.push_str(&format!(
        " (the search judges only the levels below {bound} streams, where the SLO failed or \
         throughput stopped growing; {} streams made {} tok/s)",
        at,
        crate::fmt::thousands(throughput)
    ));
}

impl Tally {
    /// Knee and capacity over the levels finished so far (partial and manual
    /// ones are left out by the decision rules themselves).
    pub(crate) fn decision(&self) -> Decision {
        let latest = self.series_indexes().last().copied().unwrap_or(0);
        self.decision_of(latest)
    }

    /// Knee and capacity of one series' levels.
    pub(crate) fn decision_of(&self, series: usize) -> Decision {
        let kept = self.prior.iter().flat_map(|p| {
            p.points
                .iter()
                .zip(&p.point_series)
                .filter(|(_, s)| **s == series)
                .map(|(point, _)| point.clone())
        });
        let mut points: Vec<LevelPoint> = kept
            .chain(
                self.saved_levels()
                    .iter()
                    .filter(|l| l.info.series == series)
                    .filter_map(|l| l.point()),
            )
            .collect();
        // The search's failing bound failed the SLO or bought no throughput:
        // probes from there on are past the capacity, whatever their SLO says.
        let failing = self.search.and_then(|s| s.failing);
        let beyond = failing.and_then(|failing| {
            points
                .iter()
                .filter(|p| p.concurrency >= failing && p.kind.is_sweep() && !p.partial)
                .max_by(|a, b| {
                    a.figures
                        .output_throughput
                        .total_cmp(&b.figures.output_throughput)
                })
                .map(|p| (failing, p.concurrency, p.figures.output_throughput))
        });
        if let Some(failing) = failing {
            points.retain(|p| p.concurrency < failing);
        }
        let mut decision = decide_judged(&points, &self.run.decision.slo, self.run.slo_given);
        if let (Some(beyond), Ok(capacity)) = (beyond, decision.capacity.as_mut()) {
            judged_below_the_bound(&mut capacity.reason, &points, beyond);
        }
        // The knee's cause from the server's own gauges, where the run read
        // them at both of its levels: a level of this run, else one kept
        // from the folder (a resumed run, a tune's earlier setting), so a
        // series saves the cause it printed when it ran.
        if let Some(knee) = decision.knee.as_mut() {
            let at = |c: u32| {
                let live = self
                    .saved_levels()
                    .iter()
                    .rev()
                    .filter(|l| l.info.series == series && l.info.concurrency == c)
                    .find(|l| l.point().is_some())
                    .map(|l| server_view(l));
                live.or_else(|| {
                    let prior = self.prior.as_ref()?;
                    prior
                        .points
                        .iter()
                        .zip(&prior.point_series)
                        .zip(&prior.point_servers)
                        .rev()
                        .find(|((p, s), _)| {
                            **s == series && p.concurrency == c && p.kind.is_sweep() && !p.partial
                        })
                        .map(|((p, _), server)| saved_gauge_view(p.concurrency, server))
                })
            };
            if let (Some(from), Some(to)) = (at(knee.from_concurrency), at(knee.to_concurrency)) {
                if let Some(cause) = knee_cause(&from, &to, &self.run.engine) {
                    knee.told_by_server(&cause);
                }
            }
        }
        decision
    }

    /// Cost at capacity, when a GPU price was given and a capacity is known.
    pub(crate) fn cost(&self, decision: &Decision) -> Option<Cost> {
        let price = self.run.decision.gpu_price_per_hour?;
        let capacity = decision.capacity.as_ref().ok()?;
        Some(cost(
            capacity.output_throughput,
            price,
            self.run.decision.api_price_per_m,
            self.run.decision.utilization,
        ))
    }

    /// Every check that fires over the run so far. Level checks look at the
    /// complete levels, or at all saved ones when none is complete.
    pub(crate) fn diagnoses(&self) -> Vec<Diagnosis> {
        self.diagnoses_for(&self.decision())
    }

    /// What a face says of the run after its levels: the capacity line, the
    /// knee, the cost verdict when `with_cost` (the live view shows cost in
    /// its own panel), and a note a diagnosis.
    pub(crate) fn verdict_lines(&self, decision: &Decision, with_cost: bool) -> Vec<String> {
        let mut lines = vec![self.ramp_line().unwrap_or_else(|| decision.capacity_line())];
        if let Some(knee) = &decision.knee {
            lines.push(format!("knee: {}", knee.reason));
        }
        if let Some(cost) = self.cost(decision).filter(|_| with_cost) {
            lines.push(format!("cost: {}", cost.verdict));
        }
        for diagnosis in self.diagnoses_for(decision) {
            lines.push(format!("note: {}", diagnosis.message));
        }
        lines
    }

    /// A ramp's answer in place of the capacity line: where p99 TTFT first
    /// failed, from its latest finished level's seconds.
    fn ramp_line(&self) -> Option<String> {
        self.run.ramp?;
        let series = self
            .saved_levels()
            .into_iter()
            .rev()
            .find_map(|l| l.rate_series.as_ref())?;
        Some(match crate::stats::rate_series::broke_text(series) {
            Some(text) => format!("ramp: p99 TTFT first failed in {text}"),
            None => "ramp: p99 TTFT held every second of the ramp: the server kept up; ramp higher to find where it breaks".into(),
        })
    }

    /// `diagnoses` with a decision already at hand.
    pub(crate) fn diagnoses_for(&self, decision: &Decision) -> Vec<Diagnosis> {
        // The latest series' levels: another series ran against another
        // server configuration.
        let latest = self.series_indexes().last().copied().unwrap_or(0);
        let saved: Vec<&FinishedLevel> = self
            .saved_levels()
            .into_iter()
            .filter(|l| l.info.series == latest && !l.is_unsteady())
            .collect();
        let complete: Vec<&FinishedLevel> = saved.iter().copied().filter(|l| !l.partial).collect();
        let basis = if complete.is_empty() {
            saved.clone()
        } else {
            complete
        };
        let views: Vec<LevelView<'_>> = basis
            .iter()
            .map(|l| LevelView {
                concurrency: l.info.concurrency,
                stats: &l.stats,
            })
            .collect();
        let loads: Vec<ClientLevelLoad> = saved
            .iter()
            .map(|l| ClientLevelLoad {
                concurrency: l.info.concurrency,
                cpu_percent: l.client.cpu_percent,
                loop_lag_ms_p99: l.client.loop_lag_ms_p99,
            })
            .collect();
        let shapes: Vec<StreamShape> = basis
            .iter()
            .flat_map(|l| l.stream_shapes.iter().copied())
            .collect();
        let points: Vec<LevelPoint> = saved.iter().filter_map(|l| l.point()).collect();
        let spreads = rounds_spread(&points);
        let mut diagnoses = diagnose_run(&DiagnoseInput {
            levels: &views,
            lengths: self.run.asked_lengths(),
            length_ask: Some(self.run.length_ask()),
            warmup_requests: Some(self.run.warmup_requests),
            connect_probe_ms: self.run.connect_probe_ms,
            client_loads: &loads,
            stream_shapes: &shapes,
            rounds: self.run.decision.rounds,
            spreads: &spreads,
            decision: Some(decision),
        });
        let servers: Vec<ServerView> = basis.iter().map(|l| server_view(l)).collect();
        let template_share = self.warmup.as_ref().and_then(|w| {
            let overhead = w.get("template_overhead_tokens")?.as_f64()?;
            (self.run.input_len > 0).then(|| overhead / f64::from(self.run.input_len))
        });
        // The shared prefix of --prefix-len is the cache's by design.
        let prefix = self.run.prefix_len;
        let prefix_share = f64::from(prefix) / f64::from((self.run.input_len + prefix).max(1));
        let mut engine_found = engine_diagnoses(&EngineInput {
            engine: &self.run.engine,
            levels: &servers,
            template_share,
            prefix_share,
            shard: self
                .run
                .timing
                .shard
                .as_ref()
                .and_then(|s| s.index.zip(s.count)),
        });
        // Turns and traces repeat earlier prompts by design: their cache
        // hits are the traffic's own.
        if self.run.asked_lengths().prompts_repeat_by_design() {
            engine_found.retain(|d| d.id != "prefix_cache");
        }
        // A seed the user gave repeats its prompts on purpose: say what the
        // server's prefix cache made of them, in place of the generic note.
        if self.run.seed_given {
            let by_design = template_share.unwrap_or(0.0) + prefix_share;
            if let Some(d) = seed_repeat(self.run.seed, &servers, Some(by_design)) {
                engine_found.retain(|d| d.id != "prefix_cache");
                engine_found.push(d);
            }
        }
        // A resumed run judges its kept levels too: one concurrency of its
        // own is not all it measured.
        let kept_another = self.kept_levels().iter().any(|(s, p)| {
            *s == latest
                && p.kind.is_sweep()
                && views.iter().all(|v| v.concurrency != p.concurrency)
        });
        if kept_another {
            diagnoses.retain(|d| d.id != "single_level");
        }
        // An open-loop run sets no concurrency: the sweep checks do not apply.
        if matches!(self.run.kind.as_str(), "rate" | "replay" | "ramp") {
            diagnoses.retain(|d| !matches!(d.id, "single_level" | "no_rise" | "no_capacity"));
        }
        if let Some(warning) = saved
            .iter()
            .filter_map(|l| l.lateness.as_ref())
            .find_map(|l| l.warning())
        {
            diagnoses.push(Diagnosis {
                id: "client_lagging",
                message: format!(
                    "{warning}: the schedule slipped (a full --max-concurrency cap or a busy client); \
                     latencies count from the intended send time"
                ),
                evidence: json!({}),
            });
        }
        // The slot check says what no_rise says, with the slots counted.
        if engine_found.iter().any(|d| d.id == "slot_queueing") {
            diagnoses.retain(|d| d.id != "no_rise");
        }
        diagnoses.extend(engine_found);
        diagnoses
    }

    /// `summary.json`'s `series`: each series' label, what the probe saw of
    /// the server, and its knee and capacity.
    pub(crate) fn series_entries(&self) -> Vec<SeriesEntry> {
        self.series_indexes()
            .into_iter()
            .map(|index| {
                let decision = self.decision_of(index);
                SeriesEntry {
                    index: Some(index as u64),
                    label: Some(self.series_label(index)),
                    server: self.series_server(index),
                    knee: schema::typed(decision.knee_json()),
                    capacity: schema::typed(decision.capacity_json()),
                    other: Map::new(),
                }
            })
            .collect()
    }
}

/// What a level's gauges showed of the server, the engine checks' way:
/// `min` and `max` read one gauge over the level. One reading for a level
/// of this run ([`server_view`]) and one kept in the folder
/// ([`saved_gauge_view`]), so both name a knee's cause alike.
fn gauge_view(
    concurrency: u32,
    min: impl Fn(&str) -> Option<f64>,
    max: impl Fn(&str) -> Option<f64>,
) -> ServerView {
    let preemptions = match (min("preemptions_total"), max("preemptions_total")) {
        (Some(lo), Some(hi)) => Some(hi - lo),
        _ => None,
    };
    ServerView {
        concurrency,
        gpu_share_min: min("gpu_share"),
        // llama.cpp calls its queue "deferred" (requests waiting for a slot).
        waiting_max: max("waiting").or_else(|| max("deferred")),
        kv_cache_usage_max: max("kv_cache_usage"),
        preemptions,
        running_max: ["running", "slots_busy", "processing"]
            .iter()
            .find_map(|k| max(k)),
        slots_total: max("slots_total"),
        ..ServerView::default()
    }
}

/// The gauges of a level kept from the folder: its saved `server` object
/// (`{"running": {"min", "mean", "max"}, ...}`).
fn saved_gauge_view(concurrency: u32, server: &Value) -> ServerView {
    let read = |stat: &'static str| move |name: &str| server.get(name)?.get(stat)?.as_f64();
    gauge_view(concurrency, read("min"), read("max"))
}

/// What a finished level saw of the server, for the engine checks.
fn server_view(l: &FinishedLevel) -> ServerView {
    // Only an account the level could trust.
    let account = l
        .server_account
        .as_ref()
        .filter(|a| a.get("trusted").and_then(Value::as_bool) == Some(true));
    let error = |key: &str| l.stats.errors.get(key).copied().unwrap_or(0);
    ServerView {
        output_throughput: l.stats.output_throughput,
        p99_ttft_ms: l.stats.ttft.as_ref().and_then(|d| d.percentile(99.0)),
        // The gauge where the server keeps one (vLLM, SGLang), else its
        // answers' own count (llama-server's `cached_tokens`).
        prefix_cache_hit_rate_mean: l.server.mean("prefix_cache_hit_rate").or(l.cache_hit_rate),
        load_ms_max: l.server_timings.get("load_ms_max").and_then(Value::as_f64),
        slot_wait_ms_median: l
            .server_timings
            .get("slot_wait_ms_median")
            .and_then(Value::as_f64),
        http_503: error("http_503"),
        http_429: error("http_429"),
        streaming_mean: l.occupancy.map(|o| o.streaming_mean),
        in_prefill_mean: l.occupancy.and_then(|o| o.in_prefill_mean),
        // Queued: waiting less in prefill where the server's times tell,
        // else all the client saw waiting.
        queued_mean: l
            .occupancy
            .map(|o| o.queued_mean().unwrap_or(o.waiting_mean)),
        failed: l.stats.failed,
        ended: l.stats.failed + l.stats.completed,
        ttft_mean_client_ms: l.stats.ttft.as_ref().map(|d| d.mean),
        ttft_mean_server_ms: account
            .and_then(|a| a.get("ttft_ms"))
            .and_then(|t| t.get("mean"))
            .and_then(Value::as_f64),
        other_traffic: account
            .and_then(|a| a.get("other_traffic"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ..gauge_view(
            l.info.concurrency,
            |name| l.server.min(name),
            |name| l.server.max(name),
        )
    }
}
