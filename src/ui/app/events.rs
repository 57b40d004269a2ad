//! Driver events folded into the view's state.

use super::*;

impl App {
    /// Fold one driver event into the state.
    pub fn on_driver_event(&mut self, event: &DriverEvent) {
        match event {
            DriverEvent::WarmupStarted {
                requests,
                concurrency,
            } => {
                self.phase = Phase::Warmup {
                    requests: *requests,
                    concurrency: *concurrency,
                };
            }
            DriverEvent::WarmupFinished { .. } => self.phase = Phase::Running,
            DriverEvent::LevelStarted(info) => {
                if matches!(
                    self.phase,
                    Phase::Starting | Phase::Warmup { .. } | Phase::Finished { error: None, .. }
                ) {
                    self.phase = Phase::Running;
                }
                self.rate = info.rate;
                self.series = info.series;
                // The driver closes the running level before it starts the
                // next one; it keeps draining until LevelFinished.
                for level in &mut self.shown.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
                if self.shown.run.ramp.is_some() && info.mode == Mode::Replay {
                    self.ramp_seconds = Some((
                        info.index,
                        crate::stats::rate_series::RateSeries::starting_at(info.started_at),
                    ));
                }
                let mut row = LevelRow::new(info.clone());
                if info.mode != Mode::Manual {
                    row.steady.start(info.started_at);
                }
                self.shown.levels.push(row);
            }
            DriverEvent::TargetReached { index, at } => {
                if let Some(level) = self.shown.levels.get_mut(*index) {
                    level.steady.start(*at);
                }
            }
            DriverEvent::ServerGone { since } => {
                self.server_gone_since = Some(*since);
                // The clock runs again while the view waits for the server.
                self.stopped_at = None;
                self.server_back = false;
                if self.is_finished() {
                    self.phase = Phase::Running;
                }
                for level in &mut self.shown.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
            }
            DriverEvent::ServerBack { .. } => self.server_back = true,
            DriverEvent::RestartSuspected {
                failures,
                level,
                restart,
                ..
            } => {
                let at = level
                    .and_then(|i| self.shown.levels.get(i))
                    .map(|l| format!(" at {} streams", l.info.concurrency))
                    .unwrap_or_default();
                self.note(match restart {
                    Some(why) => format!("server restarted{at} ({why}): the level is cut short"),
                    None => format!(
                        "{failures} connection failures{at} looked like a restart, but no mark of the server showed a new process: counted as failures"
                    ),
                });
            }
            // In the level files; the view shows its lines once saved.
            DriverEvent::ServerAccount { .. } => {}
            DriverEvent::PlanDone => {
                self.stopped_at = Some(self.elapsed);
                self.phase = Phase::Finished {
                    stopped_by_user: false,
                    error: None,
                };
            }
            DriverEvent::SeriesStarted { series, .. } => {
                self.series = *series;
                self.server_gone_since = None;
                self.server_back = false;
                self.stopped_at = None;
                self.shown
                    .series_labels
                    .entry(*series)
                    .or_insert_with(|| crate::analysis::series::default_label(*series));
                self.phase = Phase::Running;
                self.note(format!(
                    "new series: {}",
                    self.shown
                        .series_labels
                        .get(series)
                        .cloned()
                        .unwrap_or_default()
                ));
            }
            DriverEvent::TargetChanged { at, target } => {
                let moved = self.target != *target;
                self.target = *target;
                if moved {
                    self.rebase_pending();
                }
                let second = at.as_secs();
                if self.target_changes.back() != Some(&second) {
                    self.target_changes.push_back(second);
                }
                self.latency_stale = true;
            }
            DriverEvent::Record(r) => {
                if let Some(level) = self.shown.levels.get_mut(r.level) {
                    level.add(r);
                }
                if let Some((level, seconds)) = &mut self.ramp_seconds {
                    if *level == r.level && !r.transition {
                        seconds.add(r);
                    }
                }
                if let (true, Some(ttft)) = (r.is_ok(), r.ttft) {
                    // Every level still measuring shares the server with it.
                    for level in self
                        .shown
                        .levels
                        .iter_mut()
                        .filter(|l| !matches!(l.state, LevelState::Finished { .. }))
                    {
                        let counted = level.info.index == r.level && !r.transition;
                        level
                            .steady
                            .add(r.start, r.start + ttft, r.end, r.output_tokens, counted);
                    }
                }
                for &lag in &r.rx_lag_ms {
                    if self.rx_lag_ms.len() == RX_LAG_WINDOW {
                        self.rx_lag_ms.pop_front();
                    }
                    self.rx_lag_ms.push_back(lag);
                }
                match r.outcome {
                    Outcome::Ok => {
                        self.shown.counters.ok += 1;
                        self.achieved.0 += u64::from(r.input_tokens());
                        self.achieved.1 += u64::from(r.output_tokens);
                        self.achieved.2 += 1;
                    }
                    Outcome::Failed(class) => {
                        self.shown.counters.failed += 1;
                        *self.shown.counters.by_class.entry(class.key()).or_insert(0) += 1;
                        let column = match class {
                            ErrorClass::Http(503) => Some(0),
                            ErrorClass::Http(429) => Some(1),
                            ErrorClass::Timeout => Some(2),
                            _ => None,
                        };
                        if let Some(column) = column {
                            let second = r.end.as_secs();
                            self.failure_seconds.entry(second).or_insert([0; 3])[column] += 1;
                            let keep_from = second.saturating_sub(60);
                            if self
                                .failure_seconds
                                .first_key_value()
                                .is_some_and(|(s, _)| *s < keep_from)
                            {
                                self.failure_seconds = self.failure_seconds.split_off(&keep_from);
                            }
                        }
                        let message = r.error_message.as_deref().unwrap_or("no message");
                        self.shown.counters.last_error =
                            Some(one_line(&format!("{class}: {message}")));
                    }
                    Outcome::Cancelled => self.shown.counters.cancelled += 1,
                }
                self.window.record_request(r);
                self.latency_stale = true;
            }
            // Apart from the level's figures: the probes' own line only.
            DriverEvent::Probe(r) => match &mut self.probes {
                Some((level, tally)) if *level == r.level => tally.add(r),
                // A later level's first probe: the line follows it.
                Some((level, _)) if *level > r.level => {}
                _ => {
                    let mut tally = crate::stats::probes::ProbeTally::default();
                    tally.add(r);
                    self.probes = Some((r.level, tally));
                }
            },
            DriverEvent::LevelFinished { index, partial } => {
                if let Some(level) = self.shown.levels.get_mut(*index) {
                    level.state = LevelState::Finished { partial: *partial };
                    level.stale = true;
                    level.recompute();
                    level.ttft_ms = Vec::new();
                }
            }
            DriverEvent::Paused(paused) => self.paused = *paused,
            DriverEvent::Search(progress) => self.search = Some(*progress),
            DriverEvent::Fit(FitEvent::TimeLeft { seconds, at }) => {
                self.time_left = Some((*at, *seconds));
            }
            // Answers shortened to fit: the header shows the shape the
            // levels run with, as every table and file does.
            DriverEvent::Fit(FitEvent::Estimate {
                shortened: Some((_, used)),
                ..
            }) => self.shown.run.output_len = *used,
            DriverEvent::Fit(_) => {}
            DriverEvent::Finished {
                stopped_by_user,
                error,
            } => {
                for level in &mut self.shown.levels {
                    if level.state == LevelState::Running {
                        level.state = LevelState::Draining;
                    }
                }
                self.stopped_at = Some(self.elapsed);
                self.phase = Phase::Finished {
                    stopped_by_user: *stopped_by_user,
                    error: error.as_deref().map(one_line),
                };
            }
        }
    }

    /// The recorder's own summary of a finished level: the figures the file
    /// holds. Identical to the view's by construction; taking them makes the
    /// screen show exactly what was saved.
    pub(crate) fn on_level_saved(&mut self, finished: &FinishedLevel) {
        let Some(level) = self.shown.levels.get_mut(finished.info.index) else {
            return;
        };
        let s = &finished.stats;
        level.saved = Some(finished.file.is_some());
        level.unsteady = finished.is_unsteady();
        level.is_steady = finished.steadiness.as_ref().is_some_and(|s| s.steady);
        if let Some(rse) = finished.throughput_rse {
            level.estimate = Some((finished.stats.output_throughput, rse));
        }
        level.waiting_mean = finished.occupancy.map(|o| o.waiting_mean);
        level.streaming_mean = finished.occupancy.map(|o| o.streaming_mean);
        level.in_prefill_mean = finished.occupancy.and_then(|o| o.in_prefill_mean);
        level.account_line = finished
            .server_account
            .as_ref()
            .and_then(|a| a.get("lines")?.as_array()?.first()?.as_str())
            .filter(|l| l.starts_with("TTFT mean:"))
            .map(String::from);
        level.figures = Figures {
            output_tok_s: s.output_throughput,
            per_stream_tok_s: s.per_stream_tok_s,
            ttft_p50_ms: s.ttft.as_ref().and_then(|d| d.percentile(50.0)),
            ttft_p99_ms: s.ttft.as_ref().and_then(|d| d.percentile(99.0)),
        };
        level.stale = false;
    }
}
