//! Time passing: the live window's sparklines, the running levels' figures
//! and steady estimates, and the one-line summary of the last step.

use super::*;

impl App {
    /// Time passes: `now` is the offset from the run's start. Recomputes
    /// what is derived from the records, at most every `RECOMPUTE_EVERY`.
    pub fn on_tick(&mut self, now: Duration) {
        // The clock and the bars stop with the run: the final screen shows
        // the run's last minute, not a minute of nothing after it.
        let now = match self.stopped_at {
            Some(at) => now.min(at),
            None => now,
        };
        let new_second = now.as_secs() != self.elapsed.as_secs();
        if new_second {
            // The second just ended has all its samples.
            self.track_queue_disagreement(self.elapsed.as_secs());
        }
        self.elapsed = self.elapsed.max(now);
        if self
            .status
            .as_ref()
            .is_some_and(|(_, until)| *until <= self.elapsed)
        {
            self.status = None;
        }
        let due = self
            .last_recompute
            .is_none_or(|at| self.elapsed.saturating_sub(at) >= RECOMPUTE_EVERY);
        if due || new_second {
            self.recompute(now);
        }
    }

    /// Bring every derived figure up to date now.
    pub(crate) fn recompute(&mut self, now: Duration) {
        self.last_recompute = Some(now);
        let (per_stream, max_rse) = (self.steady_per_stream, self.steady_rse);
        for level in &mut self.shown.levels {
            // Finished levels were computed once, when they finished.
            if !matches!(level.state, LevelState::Finished { .. }) {
                level.recompute();
                level.estimate = level.steady.estimate(now, false).map(|e| (e.tok_s, e.rse));
                // Judged afresh each time, as the saved verdict will be at
                // the key press: a badge that latched could say settled
                // over a level whose spread has since grown past the limit.
                if level.info.mode == Mode::Manual {
                    level.is_steady = crate::stats::steady::is_steady(
                        level.steady.completions,
                        level.min_completions(per_stream),
                        level.estimate.map(|(_, rse)| rse),
                        max_rse,
                    );
                }
            }
        }
        self.update_step_summary();
        let before = self.window.now_sec();
        self.window.advance(now);
        if self.latency_stale || self.window.now_sec() != before {
            self.latency_stale = false;
            self.rebuild_latency();
        }
    }

    /// Once a hand-set level settles, say in one line what the step from
    /// the level before did.
    pub(super) fn update_step_summary(&mut self) {
        let Some(new) = self.shown.levels.last() else {
            return;
        };
        if new.info.mode != Mode::Manual
            || !new.is_steady
            || self.step_summary_for == Some(new.info.index)
        {
            return;
        }
        let Some(old) = self
            .shown
            .levels
            .iter()
            .rev()
            .skip(1)
            .find(|l| l.has_results())
        else {
            return;
        };
        let from_to = match (old.info.rate, new.info.rate) {
            (Some(a), Some(b)) => format!(
                "{}/s → {}/s",
                crate::report::recorder::rate_label(a),
                crate::report::recorder::rate_label(b)
            ),
            _ => format!(
                "{} → {} streams",
                old.info.concurrency, new.info.concurrency
            ),
        };
        let mut parts = vec![from_to];
        // The steady estimate where there is one: a young level's own
        // figure still lags behind what the server emits.
        let rate = |l: &LevelRow| l.estimate.map_or(l.figures.output_tok_s, |(t, _)| t);
        let (a, b) = (rate(old), rate(new));
        if a > 0.0 {
            parts.push(format!("{:+.1}% tok/s", (b / a - 1.0) * 100.0));
        }
        if let (Some(a), Some(b)) = (old.figures.ttft_p99_ms, new.figures.ttft_p99_ms) {
            if a > 0.0 {
                parts.push(format!("p99 TTFT ×{:.1}", b / a));
            }
        }
        let new_waiting =
            self.mean_waiting_since(new.steady.started().unwrap_or(new.info.started_at));
        if let (Some(a), Some(b)) = (old.waiting_mean, new_waiting) {
            parts.push(format!("queue {:+.0}", b - a));
        }
        let line = format!("{}: {}", parts[0], parts[1..].join(", "));
        self.step_summary_for = Some(new.info.index);
        self.step_summary = Some(line);
    }

    /// Mean of the waiting counts sampled since `from`.
    pub(super) fn mean_waiting_since(&self, from: Duration) -> Option<f64> {
        let (sum, n) = self
            .waiting_seconds
            .range(from.as_secs()..)
            .fold((0.0, 0u32), |(s, n), (_, (sum, k))| (s + sum, n + k));
        (n > 0).then(|| sum / f64::from(n))
    }

    pub(super) fn rebuild_latency(&mut self) {
        let seconds = self.window.seconds();
        let first = seconds.first().map_or(0, |s| s.second);
        while self.target_changes.front().is_some_and(|&s| s < first) {
            self.target_changes.pop_front();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let ttft = self.window.ttft();
        let itl = self.window.itl();
        self.recent_tok_s = self.window.output_tok_s(5);
        self.latency = Latency {
            points: seconds
                .iter()
                .map(|s| SparkPoint {
                    second: s.second,
                    ttft_p99_us: s.ttft.map(|q| q.p99_us),
                    itl_p99_us: s.itl.map(|q| q.p99_us),
                    marker: self.target_changes.contains(&s.second),
                    server_queue: self
                        .server_queue
                        .get(&s.second)
                        .map(|v| v.max(0.0).round() as u64),
                    waiting: self
                        .waiting_seconds
                        .get(&s.second)
                        .map(|(sum, n)| (sum / f64::from((*n).max(1))).round() as u64),
                    in_prefill: self
                        .prefill_seconds
                        .get(&s.second)
                        .map(|(sum, n)| (sum / f64::from((*n).max(1))).round() as u64),
                })
                .collect(),
            ttft_p50_ms: ttft.map(|q| ms(q.p50_us)),
            ttft_p99_ms: ttft.map(|q| ms(q.p99_us)),
            itl_p50_ms: itl.map(|q| ms(q.p50_us)),
            itl_p99_ms: itl.map(|q| ms(q.p99_us)),
        };
    }
}
