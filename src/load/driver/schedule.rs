//! The open-loop schedule: when a rate or replay level's next request is due.

// One actor split over files: these are more of `Driver`'s methods.
use super::*;

/// The schedule of the open-loop level running now.
pub(super) struct OpenLoop {
    pub(super) level: usize,
    /// Intended send time of the next request; it may be past when the cap
    /// held it back, and then it goes out late with that time recorded.
    pub(super) next_at: Instant,
    pub(super) source: Schedule,
}

pub(super) enum Schedule {
    Rate(Arrivals),
    Replay {
        origin: Instant,
        next: usize,
        speed: f64,
        entries: Arc<Vec<ReplayEntry>>,
    },
}

impl OpenLoop {
    /// Move to the next request's intended time.
    pub(super) fn advance(&mut self) {
        match &mut self.source {
            Schedule::Rate(arrivals) => {
                self.next_at += Duration::from_secs_f64(arrivals.next_gap_s().min(1e6));
            }
            Schedule::Replay {
                origin,
                next,
                speed,
                entries,
            } => {
                *next += 1;
                if let Some(entry) = entries.get(*next) {
                    self.next_at = *origin + Duration::from_secs_f64((entry.t / *speed).min(1e9));
                }
            }
        }
    }

    /// A pause moves the whole schedule on by its length.
    pub(super) fn shift(&mut self, by: Duration) {
        self.next_at += by;
        if let Schedule::Replay { origin, .. } = &mut self.source {
            *origin += by;
        }
    }
}

impl Driver {
    /// When the open-loop level next has a request due, if it could send one.
    pub(super) fn next_send_time(&self) -> Option<Instant> {
        let open = self.open_loop.as_ref()?;
        let level = self.levels.get(open.level)?;
        let can_send = !self.paused
            && !self.stopping
            && self.current == Some(open.level)
            && level.remaining() > 0
            && level
                .dispatch_until
                .is_none_or(|until| open.next_at < until)
            && self.busy(open.level) < self.concurrency_target;
        can_send.then_some(open.next_at)
    }

    /// When planned level `index` (0-based) is due on the `--start-at`
    /// schedule: the first at `start_at`; with `--duration`, level k at
    /// `start_at + k * (duration + level_gap)`. None: it starts as soon as
    /// the one before it is done (no schedule, or past the plan).
    pub(super) fn scheduled_start(&self, index: usize) -> Option<Instant> {
        let start_at = self.cfg.start_at?;
        if index >= self.cfg.plan.len() || self.search.is_some() || self.cfg.replay.is_some() {
            return None;
        }
        let offset = match (index, self.cfg.duration) {
            (0, _) => start_at,
            (k, Some(duration)) => start_at + (duration + self.cfg.level_gap) * k as u32,
            (_, None) => return None,
        };
        Some(self.run_start + offset)
    }

    /// When the level plan next needs the loop awake: a scheduled level
    /// coming due, the current level's dispatch window closing, or (while
    /// it drains past its window) the next scheduled start.
    pub(super) fn next_level_time(&self) -> Option<Instant> {
        if self.stopping {
            return None;
        }
        if let Some(at) = self.pending_start {
            return Some(at);
        }
        let level = self.levels.get(self.current?)?;
        let until = level.dispatch_until?;
        if until > Instant::now() {
            return Some(until);
        }
        self.scheduled_start(self.next_plan)
    }
}
