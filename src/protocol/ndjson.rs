//! Incremental splitter for newline-delimited JSON (NDJSON), the framing of
//! Ollama's native `/api/generate` and `/api/chat` streams.
//!
//! Bytes go in as they come off the socket, in pieces of any size; complete
//! lines come out through a callback, as `&str` without their line ending.
//!
//! - A line ends at `\n`; a `\r` right before it is dropped (CRLF), even when
//!   the `\r` ends one read and the `\n` starts the next. A `\r` anywhere else
//!   is part of the line (JSON reads it as whitespace).
//! - Blank lines (empty, or only spaces, tabs and `\r`) are skipped.
//! - A UTF-8 byte-order mark at the very start of the stream is skipped.
//! - A line longer than the limit is an error as soon as it is known to be
//!   too long, whether or not its `\n` has arrived: memory stays bounded.
//! - A line that is not UTF-8 is an error.
//! - `finish()` hands over a last line that has no `\n`.
//!
//! Every outcome, errors included, is the same however the input is split
//! across reads. Hot path: a line that lies whole inside one read is handed
//! over in place; only a line split across reads is copied, into one
//! reusable buffer.

use std::fmt;

/// Default cap on one line: 16 MiB (an old Ollama's final `/api/generate`
/// object carries the whole `context` token array; it still fits easily).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

const BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

/// Bytes that are not a usable NDJSON stream. After an error the splitter's
/// state is undefined: treat the stream as failed (or call `reset`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NdjsonError {
    /// Line `line` (counting every line from 1, blank ones included) is not
    /// UTF-8; the bad byte is `valid_up_to` bytes into it.
    #[error("line {line} is not valid UTF-8 (bad byte at offset {valid_up_to})")]
    InvalidUtf8 { line: u64, valid_up_to: usize },
    /// Line `line` grew past `limit` bytes (its `\n` not counted).
    #[error("line {line} is longer than {limit} bytes")]
    LineTooLong { line: u64, limit: usize },
}

/// Incremental NDJSON line splitter. Create one per response body, or
/// `reset` and reuse it to keep its buffer.
pub struct NdjsonSplitter {
    /// The start of a line whose `\n` has not arrived yet.
    partial: Vec<u8>,
    /// Lines started so far, counting from 1 (the one being read included).
    line_no: u64,
    /// No complete line has been handed over or skipped yet: a BOM at the
    /// start of the next complete line is the stream's, and is dropped.
    at_start: bool,
    max_line: usize,
}

impl Default for NdjsonSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for NdjsonSplitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NdjsonSplitter")
            .field("partial_len", &self.partial.len())
            .field("line_no", &self.line_no)
            .field("max_line", &self.max_line)
            .finish()
    }
}

impl NdjsonSplitter {
    /// A splitter with the default 16 MiB line limit.
    pub(crate) fn new() -> Self {
        Self::with_max_line_bytes(DEFAULT_MAX_LINE_BYTES)
    }

    /// A splitter that fails on any line longer than `max` bytes (not
    /// counting its `\n`; a `\r` before it counts).
    pub fn with_max_line_bytes(max: usize) -> Self {
        NdjsonSplitter {
            partial: Vec::new(),
            line_no: 1,
            at_start: true,
            max_line: max,
        }
    }

    /// Forget everything about the current stream, keep the buffer.
    pub(crate) fn reset(&mut self) {
        self.partial.clear();
        self.line_no = 1;
        self.at_start = true;
    }

    /// The error for the line being read.
    fn too_long(&self) -> NdjsonError {
        NdjsonError::LineTooLong {
            line: self.line_no,
            limit: self.max_line,
        }
    }

    /// Feed bytes as they come off the socket. Every non-blank line
    /// completed by these bytes is handed to `on_line` with its number (from
    /// 1, blank lines counted), in order; the first error (the splitter's or
    /// the callback's) stops the feed and is returned.
    pub fn feed<E, F>(&mut self, mut bytes: &[u8], mut on_line: F) -> Result<(), E>
    where
        E: From<NdjsonError>,
        F: FnMut(u64, &str) -> Result<(), E>,
    {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            let piece = &bytes[..end];
            bytes = &bytes[end + 1..];
            if self.partial.is_empty() {
                if piece.len() > self.max_line {
                    return Err(self.too_long().into());
                }
                self.line(piece, &mut on_line)?;
            } else {
                if self.partial.len().saturating_add(piece.len()) > self.max_line {
                    return Err(self.too_long().into());
                }
                self.partial.extend_from_slice(piece);
                let whole = std::mem::take(&mut self.partial);
                let r = self.line(&whole, &mut on_line);
                self.partial = whole;
                self.partial.clear();
                r?;
            }
        }
        if !bytes.is_empty() {
            if self.partial.len().saturating_add(bytes.len()) > self.max_line {
                return Err(self.too_long().into());
            }
            self.partial.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// End of the body: a last line without its `\n` is handed over as if it
    /// had one. The splitter is then ready for a new stream.
    pub fn finish<E, F>(&mut self, mut on_line: F) -> Result<(), E>
    where
        E: From<NdjsonError>,
        F: FnMut(u64, &str) -> Result<(), E>,
    {
        let r = if self.partial.is_empty() {
            Ok(())
        } else {
            let line = std::mem::take(&mut self.partial);
            let r = self.line(&line, &mut on_line);
            self.partial = line;
            r
        };
        self.reset();
        r
    }

    /// One complete line, without its `\n`.
    fn line<E, F>(&mut self, mut line: &[u8], on_line: &mut F) -> Result<(), E>
    where
        E: From<NdjsonError>,
        F: FnMut(u64, &str) -> Result<(), E>,
    {
        let number = self.line_no;
        self.line_no += 1;
        if std::mem::take(&mut self.at_start) {
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            return Ok(());
        }
        match std::str::from_utf8(line) {
            Ok(s) => on_line(number, s),
            Err(e) => Err(NdjsonError::InvalidUtf8 {
                line: number,
                valid_up_to: e.valid_up_to(),
            }
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(
        s: &mut NdjsonSplitter,
        bytes: &[u8],
        out: &mut Vec<(u64, String)>,
        finish: bool,
    ) -> Result<(), NdjsonError> {
        let mut push = |n: u64, line: &str| -> Result<(), NdjsonError> {
            out.push((n, line.to_owned()));
            Ok(())
        };
        s.feed(bytes, &mut push)?;
        if finish {
            s.finish(&mut push)?;
        }
        Ok(())
    }

    type Outcome = (Vec<(u64, String)>, Option<NdjsonError>);

    /// Split `bytes` with a splitter of line limit `max`, fed in `pieces`.
    fn run(max: usize, pieces: &[&[u8]]) -> Outcome {
        let mut s = NdjsonSplitter::with_max_line_bytes(max);
        let mut out = Vec::new();
        for p in pieces {
            if let Err(e) = collect(&mut s, p, &mut out, false) {
                return (out, Some(e));
            }
        }
        let err = collect(&mut s, b"", &mut out, true).err();
        (out, err)
    }

    /// Whole, split in two at every boundary, and byte by byte: all must
    /// agree, errors included.
    fn every_split(max: usize, bytes: &[u8]) -> Outcome {
        let whole = run(max, &[bytes]);
        for cut in 0..=bytes.len() {
            assert_eq!(
                run(max, &[&bytes[..cut], &bytes[cut..]]),
                whole,
                "split at {cut}"
            );
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(run(max, &bytewise), whole, "byte by byte");
        whole
    }

    fn lines(v: &[(u64, &str)]) -> Vec<(u64, String)> {
        v.iter().map(|(n, s)| (*n, (*s).to_owned())).collect()
    }

    #[test]
    fn lf_crlf_blank_lines_and_final_line_without_newline() {
        let (out, err) = every_split(
            1024,
            b"{\"a\":1}\n\r\n{\"b\":2}\r\n\n  \t\n{\"c\":3}\r\n{\"d\":4}",
        );
        assert_eq!(err, None);
        assert_eq!(
            out,
            lines(&[
                (1, "{\"a\":1}"),
                (3, "{\"b\":2}"),
                (6, "{\"c\":3}"),
                (7, "{\"d\":4}")
            ])
        );
    }

    #[test]
    fn a_lone_cr_is_part_of_the_line_and_a_final_cr_is_dropped() {
        let (out, err) = every_split(1024, b"a\rb\nc\r");
        assert_eq!(err, None);
        assert_eq!(out, lines(&[(1, "a\rb"), (2, "c")]));
    }

    #[test]
    fn empty_and_blank_bodies_yield_nothing() {
        assert_eq!(every_split(16, b""), (vec![], None));
        assert_eq!(every_split(16, b"\n\r\n \n"), (vec![], None));
    }

    #[test]
    fn leading_bom_is_skipped_only_at_the_start() {
        let (out, err) = every_split(64, b"\xEF\xBB\xBF{\"a\":1}\n\xEF\xBB\xBFx\n");
        assert_eq!(err, None);
        assert_eq!(out, lines(&[(1, "{\"a\":1}"), (2, "\u{FEFF}x")]));
    }

    #[test]
    fn multibyte_utf8_split_anywhere() {
        let (out, err) = every_split(64, "{\"response\":\"héllo 世界 🦀\"}\n".as_bytes());
        assert_eq!(err, None);
        assert_eq!(out, lines(&[(1, "{\"response\":\"héllo 世界 🦀\"}")]));
    }

    #[test]
    fn invalid_utf8_is_an_error_after_the_good_lines() {
        let (out, err) = every_split(64, b"ok\n\nab\xFFcd\nnever\n");
        assert_eq!(out, lines(&[(1, "ok")]));
        assert_eq!(
            err,
            Some(NdjsonError::InvalidUtf8 {
                line: 3,
                valid_up_to: 2
            })
        );
        // A truncated multibyte character on the unterminated last line.
        let (out, err) = every_split(64, b"ok\n\xE4\xB8");
        assert_eq!(out, lines(&[(1, "ok")]));
        assert_eq!(
            err,
            Some(NdjsonError::InvalidUtf8 {
                line: 2,
                valid_up_to: 0
            })
        );
    }

    #[test]
    fn line_limit_is_exact_and_the_same_at_every_split() {
        // 8 bytes is the limit: "12345678" passes, with or without CRLF
        // (the `\r` counts, so "1234567\r" passes and "12345678\r" does not).
        let (out, err) = every_split(8, b"12345678\n1234567\r\nabc");
        assert_eq!(err, None);
        assert_eq!(out, lines(&[(1, "12345678"), (2, "1234567"), (3, "abc")]));

        let (out, err) = every_split(8, b"ok\n123456789\nnever\n");
        assert_eq!(out, lines(&[(1, "ok")]));
        assert_eq!(err, Some(NdjsonError::LineTooLong { line: 2, limit: 8 }));

        let (_, err) = every_split(8, b"12345678\r\n");
        assert_eq!(err, Some(NdjsonError::LineTooLong { line: 1, limit: 8 }));

        // No newline at all: the error comes before the end of the body.
        let (out, err) = every_split(8, b"123456789");
        assert_eq!(out, vec![]);
        assert_eq!(err, Some(NdjsonError::LineTooLong { line: 1, limit: 8 }));
    }

    #[test]
    fn memory_stays_bounded_on_an_endless_line() {
        let mut s = NdjsonSplitter::with_max_line_bytes(1000);
        let chunk = [b'x'; 100];
        let mut fed = 0;
        let err = loop {
            match s.feed::<NdjsonError, _>(&chunk, |_, _| Ok(())) {
                Ok(()) => fed += chunk.len(),
                Err(e) => break e,
            }
            assert!(fed <= 1000, "kept {fed} bytes");
        };
        assert_eq!(
            err,
            NdjsonError::LineTooLong {
                line: 1,
                limit: 1000
            }
        );
        assert!(s.partial.len() <= 1000);
    }

    #[test]
    fn callback_errors_stop_the_feed_and_finish_resets() {
        #[derive(Debug, PartialEq)]
        enum E {
            Split(NdjsonError),
            Stop(u64),
        }
        impl From<NdjsonError> for E {
            fn from(e: NdjsonError) -> E {
                E::Split(e)
            }
        }
        let mut s = NdjsonSplitter::new();
        let mut seen = Vec::new();
        let r = s.feed(b"a\nb\nc\n", |n, l| {
            seen.push(l.to_owned());
            if l == "b" {
                Err(E::Stop(n))
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err(E::Stop(2)));
        assert_eq!(seen, ["a", "b"]);

        // After finish, numbering and the BOM rule start over.
        let mut s = NdjsonSplitter::new();
        let mut out = Vec::new();
        collect(&mut s, b"x\ny", &mut out, true).unwrap();
        collect(&mut s, b"\xEF\xBB\xBFz\n", &mut out, true).unwrap();
        assert_eq!(out, lines(&[(1, "x"), (2, "y"), (1, "z")]));
    }
}
