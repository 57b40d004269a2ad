//! Taking the terminal and always giving it back: raw mode off, alternate
//! screen left, cursor shown, on quit, on error and on panic. A user whose
//! shell is left in raw mode after a crash over SSH has to know `reset`;
//! they should never need to.

use std::io::{self, Stdout};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use color_eyre::eyre::{Result, WrapErr};
use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

/// The terminal is in raw mode on the alternate screen right now.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// A panic happened while the view was up (on any thread).
static PANICKED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();
/// The panic's report has been printed (the hook chained to has returned).
static REPORTED: AtomicBool = AtomicBool::new(false);

pub(crate) type Tui = Terminal<CrosstermBackend<Stdout>>;

/// Owns the terminal while the view is up; restores it when dropped.
pub(crate) struct TerminalGuard {
    // ManuallyDrop: see Drop below.
    pub terminal: ManuallyDrop<Tui>,
}

impl TerminalGuard {
    pub(crate) fn enter() -> Result<TerminalGuard> {
        install_panic_hook();
        enable_raw_mode().wrap_err("cannot put the terminal in raw mode")?;
        ACTIVE.store(true, Ordering::SeqCst);
        // From here on every error path restores, through `restore` or Drop.
        let mut stdout = io::stdout();
        if let Err(e) = execute!(stdout, EnterAlternateScreen, Hide) {
            restore();
            return Err(e).wrap_err("cannot switch to the alternate screen");
        }
        let terminal = match Terminal::new(CrosstermBackend::new(stdout)) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e).wrap_err("cannot size the terminal");
            }
        };
        Ok(TerminalGuard {
            terminal: ManuallyDrop::new(terminal),
        })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
        // ratatui's own Drop shows the cursor it hid and, when that write
        // fails, reports it with eprintln!. After an SSH hang-up the
        // terminal answers EIO to both, so that eprintln! panics inside a
        // drop and the process aborts (seen: SIGABRT, exit 134) before it
        // can say where the run was saved. `restore` has shown the cursor
        // already; a terminal that takes the write is dropped as usual, and
        // one that is gone is left to the process's exit (its buffers only).
        if self.terminal.show_cursor().is_ok() {
            // SAFETY: the only drop of `terminal`, which is not used after.
            unsafe { ManuallyDrop::drop(&mut self.terminal) };
        }
    }
}

/// Give the terminal back. Idempotent: the panic hook and the guard may
/// both call it, and only the first does anything, so no stray escape
/// sequences reach a terminal that was already restored.
pub(crate) fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
    }
}

/// Whether a panic hit while the view was up; the loop then stops the run
/// and saves rather than drawing on a terminal the hook already gave back.
pub(crate) fn panicked() -> bool {
    PANICKED.load(Ordering::SeqCst)
}

/// Whether the report of the panic has been printed (the hook chained to
/// has returned); see `run_tui`, which waits for it.
pub(crate) fn panic_reported() -> bool {
    REPORTED.load(Ordering::SeqCst)
}

/// Restore before the panic message is printed, or it lands garbled on the
/// alternate screen and vanishes with it. Chains to the hook already
/// installed (color-eyre's), which prints the report.
fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ACTIVE.load(Ordering::SeqCst) {
                PANICKED.store(true, Ordering::SeqCst);
                restore();
            }
            previous(info);
            REPORTED.store(true, Ordering::SeqCst);
        }));
    });
}

/// Errors from the terminal's event stream in a row before the keys are
/// taken to be gone for good.
const INPUT_ERRORS_TO_GIVE_UP: u32 = 20;

/// Whether an error from the event stream means the keys are gone. One
/// error is not: crossterm turns a resize whose size it cannot read (under
/// load, its `tput` fallback) into an error item and reads on, so taking the
/// first error for a closed stdin left `q` unread. Many in a row are.
#[derive(Debug, Default)]
pub(crate) struct InputErrors {
    in_a_row: u32,
}

impl InputErrors {
    /// An event came through: the errors before it were passing.
    pub(crate) fn ok(&mut self) {
        self.in_a_row = 0;
    }

    /// Another error; true once so many came in a row that input is gone.
    pub(crate) fn gone_after_error(&mut self) -> bool {
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.in_a_row >= INPUT_ERRORS_TO_GIVE_UP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 19 errors in a row are passing; the 20th gives up; an event between
    /// starts the count again.
    #[test]
    fn only_many_input_errors_in_a_row_mean_the_keys_are_gone() {
        let mut errors = InputErrors::default();
        for _ in 0..19 {
            assert!(!errors.gone_after_error());
        }
        errors.ok();
        for _ in 0..19 {
            assert!(!errors.gone_after_error());
        }
        assert!(errors.gone_after_error(), "the 20th in a row");
    }
}
