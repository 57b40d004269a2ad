//! Lines for the person at the terminal, written so that they cannot panic.
//!
//! `eprintln!` panics when stderr cannot be written. That is not rare here:
//! an SSH session that drops leaves stderr a dead terminal (EIO), and the
//! line tokbench prints just then ("interrupted, saving what was measured")
//! would panic the run in the middle of saving it. A line that cannot be
//! shown is dropped instead; the result files are the record.

use std::fmt::Arguments;
use std::io::Write;

/// Write `text` (and a newline when `newline`) to `out`, then flush; a
/// write that fails drops the text. What [`say!`](crate::say) and
/// [`say_inline!`](crate::say_inline) do with stderr.
#[doc(hidden)]
pub(crate) fn write_or_drop(out: &mut dyn Write, text: Arguments<'_>, newline: bool) {
    let _ = out.write_fmt(text);
    if newline {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
}

/// A command's output (a report, a comparison) to stdout. A reader that
/// left (`tokbench report DIR | head`) is no error; any other failure is,
/// for the caller to word. Public for the binary's own output (completions,
/// the manual, `--print-config`).
#[doc(hidden)]
pub fn print_output(text: impl AsRef<[u8]>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_ref()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Lines kept back while a screen owns the terminal (`hold_lines`).
static HELD: std::sync::Mutex<Option<Vec<String>>> = std::sync::Mutex::new(None);

/// While a face that spans several runs (a tune) has the screen, lines for
/// stderr are kept instead of written over it; `release_lines` writes them
/// in order once the terminal is given back.
pub(crate) fn hold_lines() {
    if let Ok(mut held) = HELD.lock() {
        held.get_or_insert_with(Vec::new);
    }
}

/// Write the lines kept since `hold_lines`, and write the next ones at once.
pub(crate) fn release_lines() {
    let lines = HELD.lock().ok().and_then(|mut held| held.take());
    for line in lines.unwrap_or_default() {
        write_or_drop(&mut std::io::stderr().lock(), format_args!("{line}"), true);
    }
}

/// [`write_or_drop`] to stderr, held locked for the one write so that
/// lines from two threads never interleave.
#[doc(hidden)]
pub fn to_stderr(text: Arguments<'_>, newline: bool) {
    if let Ok(mut held) = HELD.lock() {
        if let Some(lines) = held.as_mut() {
            // A line redrawn in place (progress) is not worth keeping.
            if newline {
                lines.push(text.to_string());
            }
            return;
        }
    }
    write_or_drop(&mut std::io::stderr().lock(), text, newline);
}

/// `eprintln!` that drops the line when stderr is gone, rather than panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::to_stderr(::std::format_args!($($arg)*), true)
    };
}

/// `eprint!` (no newline: a progress line redrawn in place) that drops the
/// text when stderr is gone, rather than panic.
#[macro_export]
macro_rules! say_inline {
    ($($arg:tt)*) => {
        $crate::console::to_stderr(::std::format_args!($($arg)*), false)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A terminal that went away: every write and flush is EIO.
    struct Gone {
        tries: usize,
    }

    impl Write for Gone {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.tries += 1;
            Err(io::Error::from_raw_os_error(5))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(5))
        }
    }

    #[test]
    fn a_line_is_written_whole_with_its_newline_or_without() {
        let mut out = Vec::new();
        let n = 3;
        write_or_drop(&mut out, format_args!("tokbench: {n} lines"), true);
        write_or_drop(
            &mut out,
            format_args!("\r\x1b[2K[  2s] {}", "level 1"),
            false,
        );
        assert_eq!(out, b"tokbench: 3 lines\n\r\x1b[2K[  2s] level 1");
    }

    #[test]
    fn a_dead_terminal_drops_the_line_instead_of_panicking() {
        let mut gone = Gone { tries: 0 };
        write_or_drop(
            &mut gone,
            format_args!("tokbench: interrupted, saving"),
            true,
        );
        // It was tried (and failed) rather than skipped.
        assert!(gone.tries >= 1);
    }
}
