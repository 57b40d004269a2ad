//! Key presses: steering (concurrency and rate steps that wait out the
//! settle window), pause, quit, help and the new-series prompt.

use super::*;

impl App {
    /// The settle window is over: the change waiting in it goes.
    pub(crate) fn due_command(&mut self) -> Option<Command> {
        let (pending, at) = self.pending?;
        if self.elapsed < at {
            return None;
        }
        self.pending = None;
        Some(match pending {
            Pending::Concurrency(n) => Command::SetConcurrency(n),
            Pending::Rate(r) => Command::SetRate(r),
        })
    }

    /// A key while the label prompt is open.
    pub(super) fn prompt_key(&mut self, key: KeyEvent) -> Option<Action> {
        let prompt = self.prompt.as_mut()?;
        match key.code {
            KeyCode::Esc => {
                self.prompt = None;
                self.note("new series cancelled");
                None
            }
            KeyCode::Enter => {
                let label = one_line(&prompt.text);
                if label.is_empty() {
                    prompt.error = Some("a label cannot be empty".into());
                    return None;
                }
                if label.chars().count() > MAX_LABEL_CHARS {
                    prompt.error = Some(format!("at most {MAX_LABEL_CHARS} characters"));
                    return None;
                }
                self.prompt = None;
                Some(Action::NewSeries(label))
            }
            KeyCode::Backspace => {
                prompt.text.pop();
                prompt.edited = true;
                prompt.error = None;
                None
            }
            KeyCode::Char(c) if !c.is_control() => {
                if !prompt.edited {
                    // The first key replaces the offered default.
                    prompt.text.clear();
                    prompt.edited = true;
                }
                prompt.text.push(c);
                prompt.error = None;
                None
            }
            _ => None,
        }
    }

    /// A key press. Releases and repeats are not presses: terminals that
    /// report them (kitty protocol, Windows) would otherwise step twice.
    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind != KeyEventKind::Press {
            return None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if self.prompt.is_some() && !(ctrl && key.code == KeyCode::Char('c')) {
            return self.prompt_key(key);
        }
        match key.code {
            // Raw mode turns Ctrl-C into a key, not a signal.
            KeyCode::Char('c') | KeyCode::Char('C') if ctrl => self.quit(),
            KeyCode::Char('q') | KeyCode::Char('Q') => self.quit(),
            KeyCode::Esc if self.show_help => {
                self.show_help = false;
                None
            }
            KeyCode::Esc => self.quit(),
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => {
                self.show_help = !self.show_help;
                None
            }
            KeyCode::Tab | KeyCode::BackTab if self.is_saved() => {
                if !self.swap_runs() {
                    self.note("one run: Tab switches between two (tokbench view A B)");
                }
                None
            }
            KeyCode::Char('+') | KeyCode::Char('=') => self.step(Step::Up, 1.1),
            KeyCode::Char('-') | KeyCode::Char('_') => self.step(Step::Down, 1.0 / 1.1),
            KeyCode::Char(']') => self.step(Step::Double, 2.0),
            KeyCode::Char('[') => self.step(Step::Halve, 0.5),
            KeyCode::Char('n') | KeyCode::Char('N') if self.tune.is_some() => {
                if self.quitting || self.is_finished() {
                    return None;
                }
                self.quitting = true;
                self.show_help = false;
                self.note("skipping to the next setting: this one is saved as partial");
                Some(Action::SkipSetting)
            }
            KeyCode::Char('s') | KeyCode::Char('S') if self.tune.is_some() => {
                self.note("a tune starts each setting's series itself (n: next setting)");
                None
            }
            KeyCode::Char('n') | KeyCode::Char('N') => {
                if !self.can_steer() {
                    return None;
                }
                self.pending = None;
                Some(Action::Send(Command::NextLevel))
            }
            KeyCode::Char('s') | KeyCode::Char('S') => {
                if self.quitting || self.is_saved() {
                    return None;
                }
                if self.server_gone_since.is_some() && !self.server_back {
                    self.note("the server is gone: the next series starts when it answers");
                    return None;
                }
                self.pending = None;
                self.prompt = Some(LabelPrompt {
                    text: crate::analysis::series::default_label(self.series + 1),
                    ..LabelPrompt::default()
                });
                Some(Action::ProbeForLabel)
            }
            // A view, not a steer: it touches no pending change and works
            // in a saved run too (inside the label prompt it is a letter).
            KeyCode::Char('v') | KeyCode::Char('V') => {
                self.frontier = !self.frontier;
                None
            }
            KeyCode::Char('p') | KeyCode::Char('P') => {
                if !self.can_steer() {
                    return None;
                }
                Some(Action::Send(Command::TogglePause))
            }
            _ => None,
        }
    }

    pub(super) fn quit(&mut self) -> Option<Action> {
        if self.is_finished() {
            return Some(Action::Exit);
        }
        if self.quitting {
            return None;
        }
        self.quitting = true;
        self.show_help = false;
        Some(Action::Send(Command::Stop))
    }

    /// Whether steering keys mean anything now; says why not in the footer.
    pub(super) fn can_steer(&mut self) -> bool {
        if self.quitting {
            return false;
        }
        if self.is_saved() {
            self.note("a saved run: nothing to steer (q quits)");
            return false;
        }
        if self.is_finished() {
            self.note("the sweep is over: s starts a new series, q quits");
            return false;
        }
        if self.server_gone_since.is_some() {
            self.note("the server is gone: waiting for it to answer");
            return false;
        }
        if self.current().is_none() {
            self.note("keys steer once the first level runs");
            return false;
        }
        true
    }

    pub(super) fn step(&mut self, key: Step, rate_factor: f64) -> Option<Action> {
        if !self.can_steer() {
            return None;
        }
        let deadline = self.elapsed + self.settle;
        // Open loop: the keys step the rate, by the factor.
        if let Some(rate) = self.pending_rate().or(self.rate) {
            let wanted = (rate * rate_factor).clamp(0.01, 100_000.0);
            let wanted = crate::fmt::round3(wanted);
            if (wanted - rate).abs() < 1e-9 {
                self.note("rate stays where it is (0.01 to 100000/s)");
                return None;
            }
            self.pending = Some((Pending::Rate(wanted), deadline));
            return self.flush_if_instant();
        }
        let from = match self.pending {
            Some((Pending::Concurrency(n), _)) => n,
            _ => {
                self.pending_steps.clear();
                self.target
            }
        };
        let wanted = key.apply(from).clamp(1, MAX_CONCURRENCY);
        if wanted == from {
            self.note(format!(
                "concurrency stays at {wanted} (range 1 to {MAX_CONCURRENCY})"
            ));
            return None;
        }
        // The next key steps from here: presses within the settle window
        // add up to one change, sent when the window closes.
        self.pending_steps.push(key);
        self.pending = Some((Pending::Concurrency(wanted), deadline));
        self.flush_if_instant()
    }

    /// The driver's target moved while a concurrency change waits (the
    /// plan's next level started as the keys were pressed): the change
    /// starts from the level now running, not the one before it.
    pub(super) fn rebase_pending(&mut self) {
        let Some((Pending::Concurrency(_), at)) = self.pending else {
            return;
        };
        let wanted = self.pending_steps.iter().fold(self.target, |t, step| {
            step.apply(t).clamp(1, MAX_CONCURRENCY)
        });
        self.pending = if wanted == self.target {
            self.pending_steps.clear();
            None
        } else {
            Some((Pending::Concurrency(wanted), at))
        };
    }

    pub(super) fn pending_rate(&self) -> Option<f64> {
        match self.pending {
            Some((Pending::Rate(r), _)) => Some(r),
            _ => None,
        }
    }

    /// With no settle window (`--settle-s 0`) a press goes at once.
    pub(super) fn flush_if_instant(&mut self) -> Option<Action> {
        if !self.settle.is_zero() {
            return None;
        }
        let command = self.due_command()?;
        if let Command::SetConcurrency(n) = command {
            self.target = n;
        }
        Some(Action::Send(command))
    }
}
