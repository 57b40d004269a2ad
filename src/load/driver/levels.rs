//! Levels: starting and closing them, filling the concurrency target,
//! the transition rule, counting what comes back, and the plan moving on.

// One actor split over files: these are more of `Driver`'s methods.
use super::*;

impl Driver {
    pub(super) fn start_level(
        &mut self,
        concurrency: u32,
        mode: Mode,
        num_prompts: Option<u32>,
        plan_index: Option<usize>,
        rate: Option<f64>,
    ) {
        let index = self.levels.len();
        let now = Instant::now();
        self.open_loop = match (mode, rate, &self.cfg.replay) {
            (Mode::Rate | Mode::Manual, Some(rate), _) => Some(OpenLoop {
                level: index,
                next_at: now,
                source: Schedule::Rate(Arrivals::new(
                    self.cfg.seed ^ (index as u64).wrapping_mul(0x9E37_79B9),
                    rate,
                    self.cfg.burstiness,
                )),
            }),
            (Mode::Replay, _, Some(replay)) => Some(OpenLoop {
                level: index,
                next_at: now
                    + Duration::from_secs_f64(
                        (replay.entries.first().map_or(0.0, |e| e.t) / replay.speed).min(1e9),
                    ),
                source: Schedule::Replay {
                    origin: now,
                    next: 0,
                    speed: replay.speed,
                    entries: replay.entries.clone(),
                },
            }),
            _ => None,
        };
        let timeline = match (mode, &self.cfg.replay) {
            (Mode::Replay, Some(replay)) => replay
                .entries
                .last()
                .map(|e| Duration::from_secs_f64((e.t / replay.speed).clamp(0.0, 1e9))),
            _ => None,
        };
        let info = LevelInfo {
            index,
            concurrency,
            mode,
            num_prompts,
            plan_index,
            started_at: self.now(),
            rate,
            timeline,
            series: self.series,
        };
        self.current = Some(info.index);
        self.emit(DriverEvent::LevelStarted(info.clone()));
        if let Some(probes) = &self.probes {
            probes.set_level(Some(index));
        }
        self.levels.push(LevelState {
            info,
            reached_target: mode != Mode::Manual,
            dispatched: 0,
            in_flight: 0,
            closed: false,
            partial: false,
            announced_finish: false,
            ok: 0,
            failed: 0,
            first_error: None,
            dispatch_until: None,
            sent_enough: false,
        });
        self.set_target(concurrency);
        self.refresh_marks();
    }

    /// Start the plan's next level (or the search's next probe, or the
    /// replay), or end the run's dispatching when there is none.
    pub(super) fn start_next_planned(&mut self) {
        if let Some(search) = &mut self.search {
            let next = if search.probes == 0 {
                Some(search.policy.first())
            } else {
                search.pending.take()
            };
            match next {
                Some(c) => {
                    let n = search.plan.num_prompts(c);
                    let index = search.probes;
                    search.probes += 1;
                    self.start_level(c, Mode::Search, Some(n), Some(index), None);
                }
                None => self.current = None,
            }
            return;
        }
        if let Some(replay) = &self.cfg.replay {
            if self.next_plan == 0 && !replay.entries.is_empty() {
                self.next_plan = 1;
                let (cap, n) = (replay.max_in_flight, replay.entries.len() as u32);
                self.start_level(cap, Mode::Replay, Some(n), Some(0), None);
            } else {
                self.current = None;
            }
            return;
        }
        match self.cfg.plan.get(self.next_plan).copied() {
            Some(step) => {
                let index = self.next_plan;
                let now = Instant::now();
                let due = self.scheduled_start(index);
                if let Some(due) = due.filter(|&due| due > now) {
                    // Not yet: the loop wakes at `due` and comes back here.
                    self.current = None;
                    self.pending_start = Some(due);
                    return;
                }
                self.pending_start = None;
                if !self.fit_level_may_start(index) {
                    self.current = None;
                    return;
                }
                self.next_plan += 1;
                let mode = if step.rate.is_some() {
                    Mode::Rate
                } else {
                    Mode::Planned
                };
                // A timed level has no count: it sends until its window ends.
                let num_prompts = self.cfg.duration.is_none().then_some(step.num_prompts);
                self.start_level(step.concurrency, mode, num_prompts, Some(index), step.rate);
                let started = self.levels.len() - 1;
                self.pace_level_started(started);
                if let (Some(duration), Some(level)) = (self.cfg.duration, self.levels.last_mut()) {
                    // On a schedule the window ends on the schedule, even
                    // after a late start (a warmup past --start-at), so every
                    // shard stops dispatching at the same moment.
                    level.dispatch_until = Some(due.unwrap_or(now) + duration);
                }
            }
            None => self.current = None,
        }
    }

    pub(super) fn close_current(&mut self, partial: bool) {
        self.open_loop = None;
        if let Some(probes) = &self.probes {
            probes.set_level(None);
        }
        if let Some(index) = self.current.take() {
            let level = &mut self.levels[index];
            level.closed = true;
            level.partial = partial;
            // A hand-set level's requests still out finish under the next
            // level's load: transition, left out of this level's figures.
            if level.info.mode == Mode::Manual {
                for meta in self.task_levels.values_mut() {
                    if meta.level == index {
                        meta.transition = true;
                    }
                }
            }
            self.pace_level_closed(index);
        }
    }

    pub(super) fn dispatch(&mut self) {
        if self.paused || self.stopping || !matches!(self.server, ServerState::Up) {
            return;
        }
        let Some(index) = self.current else { return };
        let now = Instant::now();
        if self.levels[index].window_over(now) {
            return;
        }
        self.note_target_reached(index);
        let open_loop = self.open_loop.as_ref().is_some_and(|o| o.level == index);
        while self.busy(index) < self.concurrency_target && self.levels[index].remaining() > 0 {
            let scheduled = if open_loop {
                match &self.open_loop {
                    Some(open) if open.next_at <= now => Some(open.next_at),
                    _ => break,
                }
            } else {
                None
            };
            let (prompt, conversation) = if self.cfg.turns > 1 {
                let (prompt, conversation) = self.next_turn();
                (prompt, Some(conversation))
            } else {
                (self.prompt_for(index), None)
            };
            let id = self.spawn_request(
                index,
                &prompt,
                scheduled,
                conversation.as_ref().map(|c| c.turn),
            );
            if let Some(conversation) = conversation {
                self.conversations.insert(id, conversation);
            }
            if let Some(open) = self.open_loop.as_mut().filter(|_| open_loop) {
                open.advance();
            }
            let level = &mut self.levels[index];
            level.dispatched += 1;
            level.in_flight += 1;
        }
        self.note_target_reached(index);
    }

    /// Requests that count against level `index`'s target: every one in
    /// flight (a level change shares the server with the last level's
    /// stragglers), but on a `--start-at` schedule only the level's own, so
    /// each level runs its full concurrency from its start on every shard,
    /// a late drain beside it (recorded as `drain_overrun_s`).
    pub(super) fn busy(&self, index: usize) -> u32 {
        if self.cfg.start_at.is_some() && self.cfg.duration.is_some() {
            self.levels.get(index).map_or(0, |l| l.in_flight)
        } else {
            self.tasks.len() as u32
        }
    }

    /// A manual level's steady state starts once in flight first reaches
    /// its target (closed loop), or once nothing of the levels before it
    /// is still out (open loop, where the rate sets what is in flight).
    pub(super) fn note_target_reached(&mut self, index: usize) {
        let level = &self.levels[index];
        if level.reached_target {
            return;
        }
        let reached = if level.info.rate.is_some() {
            self.task_levels.values().all(|m| m.level == index)
        } else {
            self.tasks.len() as u32 >= self.concurrency_target
        };
        if reached {
            self.levels[index].reached_target = true;
            self.emit(DriverEvent::TargetReached {
                index,
                at: self.now(),
            });
        }
    }

    /// Close a planned level that has sent and received everything, announce
    /// every closed level whose requests are all back, and move the plan on.
    pub(super) fn settle_levels(&mut self) {
        if let Some(index) = self.current {
            let now = Instant::now();
            let level = &self.levels[index];
            let sent_all = match level.dispatch_until {
                Some(_) => level.window_over(now),
                None => level.info.num_prompts.is_some() && level.remaining() == 0,
            };
            // A drain past the gap: the next scheduled level starts on time
            // beside this one's last requests, which still count for it.
            let next_due = level.window_over(now)
                && self
                    .scheduled_start(self.next_plan)
                    .is_some_and(|at| at <= now);
            if sent_all && (level.in_flight == 0 || next_due) {
                // Nothing of it in flight: an edge the server's account can
                // be read at (a drain past a schedule's gap is not one).
                let clean = level.in_flight == 0;
                self.close_current(false);
                self.judge_probe(index);
                let waits = !self.stopping && self.spawn_edge(Some(index), clean);
                // While the edge's work runs this waits for it.
                self.announce_finished();
                if !self.stopping && !waits {
                    self.start_next_planned();
                }
                return;
            }
        }
        self.announce_finished();
    }

    /// A search probe is over: tell the search how it went, so it can
    /// choose the next concurrency.
    pub(super) fn judge_probe(&mut self, index: usize) {
        let Some(search) = &mut self.search else {
            return;
        };
        let level = &self.levels[index];
        if level.info.mode != Mode::Search {
            return;
        }
        let records = std::mem::take(&mut search.records);
        search.pending = search
            .policy
            .judge(level.info.concurrency, level.partial, &records);
        let (passing, failing) = search.policy.bounds();
        let next = search.pending;
        self.emit(DriverEvent::Search(SearchProgress {
            passing,
            failing,
            next,
        }));
    }

    pub(super) fn announce_finished(&mut self) {
        // A level's edge is being read: its LevelFinished follows the account.
        if self.between.is_some() {
            return;
        }
        let mut finished = Vec::new();
        for level in &mut self.levels {
            if level.closed && level.in_flight == 0 && !level.announced_finish {
                level.announced_finish = true;
                finished.push(DriverEvent::LevelFinished {
                    index: level.info.index,
                    partial: level.partial,
                });
                if !level.partial && level.failed > 0 && self.fatal.is_none() {
                    let all_failed = level.ok == 0;
                    // One level lost to a restart is survivable; a run that
                    // never got an answer, or two dead levels in a row, is not.
                    if all_failed && (self.run_ok == 0 || self.last_level_all_failed) {
                        self.fatal = Some(format!(
                            "every request failed at concurrency {} ({} of {}; first: {}): stopping early. \
                             Is the server up and the model right? Levels so far are saved",
                            level.info.concurrency,
                            level.failed,
                            level.dispatched,
                            level.first_error.as_deref().unwrap_or("no message"),
                        ));
                    }
                    self.last_level_all_failed = all_failed;
                } else if !level.partial && level.ok > 0 {
                    self.last_level_all_failed = false;
                }
            }
        }
        for event in finished {
            self.emit(event);
        }
        if self.fatal.is_some() && !self.stopping {
            self.stopping = true;
            self.close_current(true);
            self.cancel.send_replace(true);
        }
    }

    pub(super) fn on_joined(
        &mut self,
        joined: Result<(tokio::task::Id, RequestRecord), tokio::task::JoinError>,
    ) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let (task, record) = match joined {
            Ok((task, record)) => (task, Some(record)),
            Err(error) => {
                // A load task panicked: a bug, not a server fault. Its level
                // still drains (below), so the run goes on; the message goes
                // to stderr.
                crate::say!("tokbench: a load task failed: {error}");
                (error.id(), None)
            }
        };
        let meta = self.task_levels.remove(&task);
        if let Some(level) = meta.and_then(|m| self.levels.get_mut(m.level)) {
            level.in_flight = level.in_flight.saturating_sub(1);
            if let Some(record) = &record {
                match record.outcome {
                    Outcome::Ok => {
                        level.ok += 1;
                        self.run_ok += 1;
                    }
                    Outcome::Failed(class) => {
                        level.failed += 1;
                        if level.first_error.is_none() {
                            level.first_error = Some(format!(
                                "{class}: {}",
                                record.error_message.as_deref().unwrap_or("no message")
                            ));
                        }
                    }
                    Outcome::Cancelled => {}
                }
                if level.info.mode == Mode::Search {
                    if let Some(search) = &mut self.search {
                        search.records.push(record.clone());
                    }
                }
            }
        }
        if let Some(mut record) = record {
            if self.cfg.turns > 1 {
                self.continue_conversation(&record);
            }
            record.transition = meta.is_some_and(|m| m.transition);
            self.pace_record(&record);
            self.pass_on(record);
        }
    }

    /// Start the plan again from its first level, as a new series.
    pub(super) fn new_series(&mut self) {
        // Failures held while an outage was judged belong to the old
        // series' level: saved as they are, not dropped with the state.
        self.flush_held();
        let index = self.current;
        let partial = index.is_some_and(|i| self.levels[i].info.mode != Mode::Manual);
        self.close_current(partial);
        if let Some(index) = index {
            self.judge_probe(index);
        }
        self.series += 1;
        self.next_plan = 0;
        self.pace_new_series();
        self.plan_done_sent = false;
        self.next_poll = None;
        if let Some(search) = &mut self.search {
            search.policy.restart();
            search.pending = None;
            search.records.clear();
            search.probes = 0;
        }
        self.server = ServerState::Up;
        self.emit(DriverEvent::SeriesStarted {
            series: self.series,
            at: self.now(),
        });
        self.start_next_planned();
    }
}
