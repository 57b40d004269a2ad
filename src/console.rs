//! Lines for the person at the terminal, written so that they cannot panic.
//!
//! `eprintln!` panics when stderr cannot be written. That is not rare here:
//! an SSH session that drops leaves stderr a dead terminal (EIO), and the
//! line tokbench prints just then ("interrupted, saving what was measured")
//! would panic the run in the middle of saving it. A line that cannot be
//! shown is dropped instead; the result files are the record.

/// `eprintln!` that drops the line when stderr is gone, rather than panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr().lock(), $($arg)*);
    }};
}

/// `eprint!` (no newline: a progress line redrawn in place) that drops the
/// text when stderr is gone, rather than panic.
#[macro_export]
macro_rules! say_inline {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let mut stderr = ::std::io::stderr().lock();
        let _ = ::std::write!(stderr, $($arg)*);
        let _ = stderr.flush();
    }};
}

#[cfg(test)]
mod tests {
    #[test]
    fn say_formats_like_eprintln() {
        // The macro only has to expand and run; its output goes to the
        // test's stderr.
        let n = 3;
        crate::say!("tokbench: {n} lines");
        crate::say!("plain");
        crate::say_inline!("\r\x1b[2K");
    }
}
