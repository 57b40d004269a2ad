//! The watch on the server (the live view): failures to connect held
//! while an outage may be starting, a quick restart told from dropped
//! connections by the server's marks, the server gone and polled, back
//! again.

// One actor split over files: these are more of `Driver`'s methods.
use super::*;

/// Whether the server is there, as the requests' outcomes tell.
pub(super) enum ServerState {
    Up,
    /// Every request back since `since` failed to connect or was cut: the
    /// records wait here, not yet charged to a level, until the outage
    /// proves real (then they are restart failures) or a request gets
    /// through (then they count as they are).
    Suspect {
        since: Instant,
        held: Vec<RequestRecord>,
    },
    /// A suspected restart: a connect was refused, or the failures closed
    /// every request in flight at once, with nothing left in flight. The
    /// root is polled every `RESTART_POLL_EVERY`; once it answers, the
    /// server's marks are read again (`checking`) and compared with the
    /// last ones, however short the outage was. Silent for
    /// `SERVER_GONE_AFTER`: gone, as any outage.
    Restarting {
        since: Instant,
        held: Vec<RequestRecord>,
        checking: bool,
    },
    /// The failures lasted `SERVER_GONE_AFTER` with nothing in flight: the
    /// root is asked once before the run calls the server gone, so one
    /// connection a server dropped at low concurrency is not a restart.
    Confirming {
        since: Instant,
        held: Vec<RequestRecord>,
    },
    /// Nothing is sent; the server's root is polled until it answers.
    Gone,
    /// It answered; the next series may start.
    Back,
}

/// How long every request must fail to connect before the server counts as gone.
pub(crate) const SERVER_GONE_AFTER: Duration = Duration::from_secs(2);
/// How often the root is asked during a suspected restart: the outage of
/// a quick restart is a fraction of a second.
pub(super) const RESTART_POLL_EVERY: Duration = Duration::from_millis(100);
/// Failures whose ends lie this close together closed at once: what a
/// process that died does to every connection it held.
pub(super) const BURST_WITHIN: Duration = Duration::from_millis(100);
/// How often a gone server is asked whether it is back.
pub(super) const SERVER_POLL_EVERY: Duration = Duration::from_millis(500);
/// How often an idle driver (the plan done) checks the server is still there.
pub(super) const IDLE_POLL_EVERY: Duration = Duration::from_millis(500);

impl ServerState {
    /// Whether records are held and levels wait to settle: the outage is
    /// being judged.
    pub(super) fn holds(&self) -> bool {
        matches!(
            self,
            ServerState::Suspect { .. }
                | ServerState::Confirming { .. }
                | ServerState::Restarting { .. }
        )
    }
}

/// A read of the marks; a read task that died counts as none.
pub(super) async fn marks_result(
    read: &mut Option<tokio::task::JoinHandle<Option<ServerMarks>>>,
) -> Option<ServerMarks> {
    let marks = match read {
        Some(handle) => handle.await.unwrap_or(None),
        None => std::future::pending().await,
    };
    *read = None;
    marks
}

/// The poll's answer; a poll task that died counts as no answer.
pub(super) async fn poll_result(poll: &mut Option<tokio::task::JoinHandle<bool>>) -> bool {
    match poll {
        Some(handle) => handle.await.unwrap_or(false),
        None => std::future::pending().await,
    }
}

impl Driver {
    /// A record on its way out, through the watch on the server: failures
    /// to connect are held while an outage may be starting.
    pub(super) fn pass_on(&mut self, mut record: RequestRecord) {
        if !self.cfg.watch_server {
            self.emit(DriverEvent::Record(record));
            return;
        }
        let lost = matches!(
            record.outcome,
            Outcome::Failed(ErrorClass::ConnectRefused | ErrorClass::ConnectionClosed)
        );
        match (&mut self.server, lost) {
            (ServerState::Up, true) => {
                self.server = ServerState::Suspect {
                    since: Instant::now(),
                    held: vec![record],
                };
            }
            (
                ServerState::Suspect { held, .. }
                | ServerState::Confirming { held, .. }
                | ServerState::Restarting { held, .. },
                true,
            ) => held.push(record),
            (
                ServerState::Suspect { .. }
                | ServerState::Confirming { .. }
                | ServerState::Restarting { .. },
                false,
            ) => {
                // Something got through: the failures count as they are.
                self.flush_held();
                self.emit(DriverEvent::Record(record));
            }
            (ServerState::Gone | ServerState::Back, true) => {
                Self::as_restart(&mut record);
                self.emit(DriverEvent::Record(record));
            }
            _ => self.emit(DriverEvent::Record(record)),
        }
        if lost {
            self.suspect_restart();
        }
    }

    /// Held failures that look like a restart, with nothing left in
    /// flight: a refused connect (nothing listened), or failures that all
    /// ended at once (every connection the process held closed). The root
    /// is asked at once, not after the 2 s grace, so a restart shorter
    /// than that is still seen.
    fn suspect_restart(&mut self) {
        let ServerState::Suspect { held, .. } = &self.server else {
            return;
        };
        if !self.tasks.is_empty() {
            return;
        }
        let refused = held
            .iter()
            .any(|r| r.outcome == Outcome::Failed(ErrorClass::ConnectRefused));
        let first = held.iter().map(|r| r.end).min().unwrap_or_default();
        let last = held.iter().map(|r| r.end).max().unwrap_or_default();
        if !refused && last - first > BURST_WITHIN {
            return;
        }
        if let ServerState::Suspect { since, held } =
            std::mem::replace(&mut self.server, ServerState::Up)
        {
            self.server = ServerState::Restarting {
                since,
                held,
                checking: false,
            };
        }
        if self.poll.is_none() {
            self.start_poll();
        }
    }

    /// Read the server's marks for the next comparison: at each level's
    /// start, while it is up.
    pub(super) fn refresh_marks(&mut self) {
        if self.cfg.watch_server && self.marks_baseline.is_none() {
            self.marks_baseline = Some(tokio::spawn(self.executor.server_marks()));
        }
    }

    pub(super) fn on_baseline_marks(&mut self, marks: Option<ServerMarks>) {
        // Read across an outage, they may be the next process's: only a
        // read while all was well is the baseline.
        if matches!(self.server, ServerState::Up) && marks.is_some() {
            self.marks = marks;
        }
    }

    /// The marks after a suspected restart: another process, or the same.
    pub(super) fn on_check_marks(&mut self, after: Option<ServerMarks>) {
        // Moved on meanwhile (a request got through, a new series): the
        // answer is no longer wanted.
        if !matches!(self.server, ServerState::Restarting { .. }) {
            return;
        }
        let ServerState::Restarting { since, held, .. } =
            std::mem::replace(&mut self.server, ServerState::Up)
        else {
            return;
        };
        let sign = match (&self.marks, &after) {
            (Some(before), Some(after)) => ServerMarks::restart_sign(before, after),
            _ => None,
        };
        if after.is_some() {
            self.marks = after;
        }
        self.emit(DriverEvent::RestartSuspected {
            at: self.now(),
            failures: held.len(),
            level: self.current,
            restart: sign.clone(),
        });
        if sign.is_some() {
            // A new process: as if it had been gone, and it is back. The
            // face looks at it and starts the next series.
            self.server_gone(since, held);
            self.server = ServerState::Back;
            self.next_poll = None;
            self.emit(DriverEvent::ServerBack { at: self.now() });
        } else {
            // The same server: the failures were its connections'.
            self.server = ServerState::Suspect { since, held };
            self.flush_held();
        }
    }

    /// The outage was not one (or the run moves on without judging it):
    /// the held failures count as they are.
    pub(super) fn flush_held(&mut self) {
        // Gone or back: nothing is held, and that state stays.
        if !self.server.holds() {
            return;
        }
        if let ServerState::Suspect { held, .. }
        | ServerState::Confirming { held, .. }
        | ServerState::Restarting { held, .. } =
            std::mem::replace(&mut self.server, ServerState::Up)
        {
            for held in held {
                self.emit(DriverEvent::Record(held));
            }
        }
    }

    /// A failure of the restart window: saved as such, charged to no level.
    pub(super) fn as_restart(record: &mut RequestRecord) {
        record.outcome = Outcome::Failed(ErrorClass::ServerRestart);
        record.transition = true;
    }

    /// An outage held for `SERVER_GONE_AFTER` with nothing in flight is the
    /// server gone: its failures become restart failures, the level running
    /// is cut short, and dispatch waits.
    pub(super) fn check_outage(&mut self) {
        let ServerState::Suspect { since, .. } = &self.server else {
            return;
        };
        if since.elapsed() < SERVER_GONE_AFTER {
            return;
        }
        if !self.tasks.is_empty() {
            // Requests still streaming: the server is there after all.
            self.flush_held();
            return;
        }
        // Every request failed for the whole grace: ask the root once.
        if let ServerState::Suspect { since, held } =
            std::mem::replace(&mut self.server, ServerState::Up)
        {
            self.server = ServerState::Confirming { since, held };
        }
        if self.poll.is_none() {
            self.start_poll();
        }
    }

    /// The root did not answer either: the server is gone. Its failures
    /// become restart failures, the level running is cut short, and
    /// dispatch waits.
    fn server_gone(&mut self, since: Instant, held: Vec<RequestRecord>) {
        let since = self.run_start.elapsed().saturating_sub(since.elapsed());
        self.server = ServerState::Gone;
        for mut held in held {
            Self::as_restart(&mut held);
            self.emit(DriverEvent::Record(held));
        }
        let manual = self
            .current
            .is_some_and(|i| self.levels[i].info.mode == Mode::Manual);
        self.close_current(!manual);
        self.next_poll = Some(Instant::now() + SERVER_POLL_EVERY);
        self.emit(DriverEvent::ServerGone { since });
    }

    /// When the driver next wakes for the server watch: the end of an
    /// outage's grace, or the next poll.
    pub(super) fn next_watch_time(&self) -> Option<Instant> {
        match &self.server {
            ServerState::Suspect { since, .. } => Some(*since + SERVER_GONE_AFTER),
            // Waiting for the root's answer to the one question, or for
            // the marks.
            ServerState::Confirming { .. } | ServerState::Restarting { checking: true, .. } => None,
            _ => self.next_poll.filter(|_| self.poll.is_none()),
        }
    }

    /// Ask the server's root whether anyone answers.
    pub(super) fn start_poll(&mut self) {
        self.poll = Some(tokio::spawn(self.executor.server_answers()));
    }

    pub(super) fn on_poll(&mut self, answered: bool) {
        self.poll = None;
        let idle = self.current.is_none() && self.tasks.is_empty();
        if let ServerState::Restarting {
            since, checking, ..
        } = &mut self.server
        {
            if answered {
                // Something listens again: is it the same process?
                *checking = true;
                self.next_poll = None;
                if let Some(read) = self.marks_check.take() {
                    read.abort();
                }
                self.marks_check = Some(tokio::spawn(self.executor.server_marks()));
            } else if since.elapsed() >= SERVER_GONE_AFTER {
                if let ServerState::Restarting { since, held, .. } =
                    std::mem::replace(&mut self.server, ServerState::Gone)
                {
                    self.server_gone(since, held);
                }
            } else {
                self.next_poll = Some(Instant::now() + RESTART_POLL_EVERY);
            }
            return;
        }
        if matches!(self.server, ServerState::Confirming { .. }) {
            if answered {
                // It answers: the failures were the connections', not an outage.
                self.flush_held();
                self.next_poll = None;
            } else if let ServerState::Confirming { since, held } =
                std::mem::replace(&mut self.server, ServerState::Gone)
            {
                self.server_gone(since, held);
            }
            return;
        }
        match (&self.server, answered) {
            (ServerState::Gone, true) => {
                self.server = ServerState::Back;
                self.next_poll = None;
                self.emit(DriverEvent::ServerBack { at: self.now() });
            }
            (ServerState::Gone, false) => {
                self.next_poll = Some(Instant::now() + SERVER_POLL_EVERY);
            }
            // The plan is done and the server went away: the same wait.
            (ServerState::Up, false) if idle => {
                self.server = ServerState::Gone;
                self.next_poll = Some(Instant::now() + SERVER_POLL_EVERY);
                self.emit(DriverEvent::ServerGone { since: self.now() });
            }
            (ServerState::Up, true) if idle => {
                self.next_poll = Some(Instant::now() + IDLE_POLL_EVERY);
            }
            _ => self.next_poll = None,
        }
    }
}
