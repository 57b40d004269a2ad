//! One level as the view knows it: running sums over its records, folded
//! into the figures of one row of the level table.

use std::time::Duration;

use crate::load::driver::LevelInfo;
use crate::record::{Outcome, RequestRecord};
use crate::stats::percentile::percentile_sorted;
use crate::stats::steady::SteadyEstimator;

/// The figures of one row of the level table.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Output tokens over the level's duration (first dispatch to last end).
    pub output_tok_s: f64,
    /// `output_tok_s` / concurrency.
    pub per_stream_tok_s: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
}

/// Where a level is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelState {
    /// The level dispatching now.
    Running,
    /// Closed; its last requests are still out.
    Draining,
    /// Every request is back.
    Finished { partial: bool },
}

/// One level as the view knows it: running sums over its records.
#[derive(Clone, Debug)]
pub struct LevelRow {
    pub info: LevelInfo,
    pub state: LevelState,
    /// Records back, any outcome.
    pub done: u32,
    pub ok: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub figures: Figures,
    /// The recorder wrote its file (None until the recorder said).
    pub saved: Option<bool>,
    pub(super) first_start: Option<Duration>,
    pub(super) last_end: Option<Duration>,
    pub(super) output_tokens: u64,
    /// TTFT of the completed requests, ms; freed when the level finishes.
    pub(super) ttft_ms: Vec<f64>,
    /// Records arrived since `figures` was computed.
    pub(super) stale: bool,
    /// In flight across a concurrency change: not in the figures.
    pub transition: u32,
    /// Per-second throughput since the level's steady stretch began.
    pub steady: SteadyEstimator,
    /// The live estimate: (tok/s, relative standard error).
    pub estimate: Option<(f64, f64)>,
    /// Hand-set levels: steady once enough completed and the estimate
    /// settled; from the recorder's verdict once finished.
    pub is_steady: bool,
    /// A hand-set level left before it settled: dimmed, never charted.
    pub unsteady: bool,
    /// Mean requests waiting for a first token over the level.
    pub waiting_mean: Option<f64>,
    /// Mean requests streaming over the level (effective slots in use).
    pub streaming_mean: Option<f64>,
    /// Of the waiting, those in prefill, by the server's own prefill times.
    pub in_prefill_mean: Option<f64>,
    /// The server's own TTFT beside the client's, in words (its account).
    pub account_line: Option<String>,
    /// Open loop: sends later than `stats::lateness::LATE_AFTER` past their schedule, and the
    /// latest of all.
    pub late_sends: u32,
    pub max_send_lag: Duration,
}

impl LevelRow {
    /// A level read back from a result file: finished, its figures as saved.
    pub(crate) fn saved(
        info: LevelInfo,
        partial: bool,
        ok: u32,
        failed: u32,
        figures: Figures,
    ) -> LevelRow {
        LevelRow {
            state: LevelState::Finished { partial },
            done: ok.saturating_add(failed),
            ok,
            failed,
            figures,
            saved: Some(true),
            ..LevelRow::new(info)
        }
    }

    pub(super) fn new(info: LevelInfo) -> LevelRow {
        LevelRow {
            info,
            state: LevelState::Running,
            done: 0,
            ok: 0,
            failed: 0,
            cancelled: 0,
            figures: Figures::default(),
            saved: None,
            first_start: None,
            last_end: None,
            output_tokens: 0,
            ttft_ms: Vec::new(),
            stale: false,
            transition: 0,
            steady: SteadyEstimator::default(),
            estimate: None,
            is_steady: false,
            unsteady: false,
            waiting_mean: None,
            streaming_mean: None,
            in_prefill_mean: None,
            account_line: None,
            late_sends: 0,
            max_send_lag: Duration::ZERO,
        }
    }

    pub(super) fn add(&mut self, r: &RequestRecord) {
        if let Some(lag) = r.send_lag {
            self.max_send_lag = self.max_send_lag.max(lag);
            if lag > crate::stats::lateness::LATE_AFTER {
                self.late_sends += 1;
            }
        }
        if r.transition {
            self.transition += 1;
            return;
        }
        self.done += 1;
        self.stale = true;
        match r.outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.output_tokens += u64::from(r.output_tokens);
                if let Some(t) = r.ttft {
                    // At the microsecond the saved statistics keep
                    // (stats::hdr), so the row and the level file agree.
                    self.ttft_ms
                        .push((t.as_secs_f64() * 1_000_000.0).round() / 1000.0);
                }
            }
            Outcome::Failed(_) => self.failed += 1,
            // Cancelled requests count in no statistic (stats::summary).
            Outcome::Cancelled => {
                self.cancelled += 1;
                return;
            }
        }
        self.first_start = Some(self.first_start.map_or(r.start, |s| s.min(r.start)));
        self.last_end = Some(self.last_end.map_or(r.end, |e| e.max(r.end)));
    }

    /// The same figures `level_stats` saves: duration from the first
    /// dispatch to the last end over completed and failed requests, numpy
    /// percentiles over the raw TTFT samples.
    pub(super) fn recompute(&mut self) {
        if !self.stale {
            return;
        }
        self.stale = false;
        let duration_s = match (self.first_start, self.last_end) {
            (Some(s), Some(e)) => e.saturating_sub(s).as_secs_f64(),
            _ => 0.0,
        };
        let output_tok_s = if duration_s > 0.0 {
            self.output_tokens as f64 / duration_s
        } else {
            0.0
        };
        // A stable sort finds the sorted prefix from the last pass and only
        // sorts and merges the new tail, so this stays cheap as a long
        // manual level grows.
        self.ttft_ms.sort_by(f64::total_cmp);
        let finite_start = self
            .ttft_ms
            .partition_point(|x| !x.is_finite() && x.is_sign_negative());
        let finite = &self.ttft_ms[finite_start..];
        let finite = &finite[..finite.partition_point(|x| x.is_finite())];
        self.figures = Figures {
            output_tok_s,
            per_stream_tok_s: if self.info.concurrency > 0 {
                output_tok_s / f64::from(self.info.concurrency)
            } else {
                0.0
            },
            ttft_p50_ms: percentile_sorted(finite, 50.0),
            ttft_p99_ms: percentile_sorted(finite, 99.0),
        };
    }

    /// Has anything to show in the table.
    pub(crate) fn has_results(&self) -> bool {
        self.ok + self.failed > 0
    }

    pub(crate) fn is_running(&self) -> bool {
        self.state == LevelState::Running
    }

    pub(crate) fn is_partial(&self) -> bool {
        matches!(self.state, LevelState::Finished { partial: true })
    }

    /// A planned or search level that ran to its end: one the decision
    /// judges (the capacity can only be one of these).
    pub(crate) fn is_judged(&self) -> bool {
        self.state == (LevelState::Finished { partial: false }) && self.info.mode.is_sweep()
    }

    /// Completed requests a hand-set level needs before it can be steady.
    pub(crate) fn min_completions(&self, per_stream: u32) -> u32 {
        crate::stats::steady::min_completions(self.info.rate, self.info.concurrency, per_stream)
    }
}
