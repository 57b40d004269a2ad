//! Incremental parser for `text/event-stream` (Server-Sent Events).
//!
//! Bytes go in as they come off the socket, in pieces of any size; complete
//! events come out through a callback. The rules are the WHATWG SSE ones, with
//! one deliberate difference: `finish()` hands over a last event that the
//! server did not close with a blank line (the spec drops it; some servers end
//! their body right after the final `data:` line).
//!
//! - A line ends at `\n`, `\r\n` or `\r`. A `\r` at the end of one read and its
//!   `\n` at the start of the next are one line ending, not two.
//! - A blank line ends an event. An event with no `data:` field is not
//!   dispatched.
//! - `data:` with or without one leading space; several `data:` lines of one
//!   event are joined with `\n`.
//! - Lines starting with `:` are comments (keep-alive pings).
//! - `event:`, `id:`, `retry:` and unknown fields are ignored.
//! - A UTF-8 byte-order mark at the very start of the stream is skipped.
//!
//! Hot path: one reusable buffer for the event's data and one for a line split
//! across reads; a line that lies whole inside one read is parsed in place, so
//! steady-state parsing allocates nothing.

use std::fmt;

/// Default cap on one event (its data plus any unfinished line): 16 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One complete thing the stream said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SseEvent<'a> {
    /// The event's data: its `data:` lines joined with `\n`.
    Data(&'a str),
    /// `data: [DONE]`, the OpenAI end-of-stream marker.
    Done,
    /// A comment line (`: ping`). Its text is not kept.
    Comment,
}

/// Bytes that are not a usable event stream. After an error the parser's
/// state is undefined: treat the stream as failed (or call `reset`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// An event's data is not UTF-8; `valid_up_to` bytes into the data.
    #[error("event data is not valid UTF-8 (bad byte at offset {valid_up_to})")]
    InvalidUtf8 { valid_up_to: usize },
    /// One event (or one line) grew past the limit.
    #[error("event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
}

/// Incremental SSE parser. Create one per response body, or `reset` and reuse
/// it to keep its buffers.
pub struct SseParser {
    /// Data of the event being assembled (lines joined with `\n`).
    data: Vec<u8>,
    /// Whether the event being assembled has a `data` field (even an empty one).
    has_data: bool,
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
    /// The last byte seen was a `\r` that ended a line: a `\n` right after it
    /// belongs to the same line ending (even when it comes in the next read).
    after_cr: bool,
    /// Bytes of a leading BOM matched so far, while `at_start`.
    bom_matched: usize,
    /// Nothing but (part of) a BOM has been seen yet.
    at_start: bool,
    max_event: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SseParser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseParser")
            .field("data_len", &self.data.len())
            .field("has_data", &self.has_data)
            .field("partial_len", &self.partial.len())
            .field("after_cr", &self.after_cr)
            .field("max_event", &self.max_event)
            .finish()
    }
}

impl SseParser {
    /// A parser with the default 16 MiB event limit.
    pub(crate) fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser that fails on any event (data plus unfinished line) larger
    /// than `max` bytes.
    pub fn with_max_event_bytes(max: usize) -> Self {
        SseParser {
            data: Vec::new(),
            has_data: false,
            partial: Vec::new(),
            after_cr: false,
            bom_matched: 0,
            at_start: true,
            max_event: max,
        }
    }

    /// Forget everything about the current stream, keep the buffers.
    pub(crate) fn reset(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.partial.clear();
        self.after_cr = false;
        self.bom_matched = 0;
        self.at_start = true;
    }

    /// Feed bytes as they come off the socket. Every event completed by these
    /// bytes is handed to `on_event`, in order; the first error (the parser's
    /// or the callback's) stops the feed and is returned.
    pub fn feed<E, F>(&mut self, mut bytes: &[u8], mut on_event: F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(SseEvent<'_>) -> Result<(), E>,
    {
        if self.at_start {
            // Skip a BOM, which may itself arrive split across reads.
            while self.at_start {
                let Some((&b, rest)) = bytes.split_first() else {
                    return Ok(());
                };
                if b == BOM[self.bom_matched] {
                    bytes = rest;
                    self.bom_matched += 1;
                    if self.bom_matched == BOM.len() {
                        self.at_start = false;
                    }
                } else {
                    // Not a BOM after all: the bytes matched so far are data.
                    self.at_start = false;
                    let matched = self.bom_matched;
                    self.bom_matched = 0;
                    self.feed_lines(&BOM[..matched], &mut on_event)?;
                }
            }
        }
        self.feed_lines(bytes, &mut on_event)
    }

    /// End of the body: a line without its line ending and an event without
    /// its closing blank line are handed over as if both had arrived. The
    /// parser is then ready for a new stream.
    pub fn finish<E, F>(&mut self, mut on_event: F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(SseEvent<'_>) -> Result<(), E>,
    {
        if self.at_start && self.bom_matched > 0 {
            // The body was a lone BOM prefix: those bytes were data.
            let matched = self.bom_matched;
            self.at_start = false;
            self.bom_matched = 0;
            self.feed_lines(&BOM[..matched], &mut on_event)?;
        }
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            let r = self.line(&line, &mut on_event);
            self.partial = line;
            self.partial.clear();
            r?;
        }
        let r = self.dispatch(&mut on_event);
        self.reset();
        r
    }

    fn feed_lines<E, F>(&mut self, mut bytes: &[u8], on_event: &mut F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(SseEvent<'_>) -> Result<(), E>,
    {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = find_line_end(bytes) {
            let line = &bytes[..end];
            let mut next = end + 1;
            if bytes[end] == b'\r' {
                match bytes.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    // The `\n` may be the first byte of the next read.
                    None => self.after_cr = true,
                }
            }
            if self.partial.is_empty() {
                self.line(line, on_event)?;
            } else {
                self.check_size(self.partial.len() + line.len())?;
                self.partial.extend_from_slice(line);
                let whole = std::mem::take(&mut self.partial);
                let r = self.line(&whole, on_event);
                self.partial = whole;
                self.partial.clear();
                r?;
            }
            bytes = &bytes[next..];
        }
        if !bytes.is_empty() {
            self.check_size(self.partial.len() + bytes.len())?;
            self.partial.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn check_size(&self, line_len: usize) -> Result<(), SseError> {
        if self.data.len().saturating_add(line_len) > self.max_event {
            Err(SseError::EventTooLarge {
                limit: self.max_event,
            })
        } else {
            Ok(())
        }
    }

    /// One complete line, without its line ending.
    fn line<E, F>(&mut self, line: &[u8], on_event: &mut F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(SseEvent<'_>) -> Result<(), E>,
    {
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line[0] == b':' {
            return on_event(SseEvent::Comment);
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &line[line.len()..]),
        };
        if field == b"data" {
            let sep = usize::from(self.has_data);
            self.check_size(sep + value.len())?;
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // `event`, `id`, `retry` and unknown fields: ignored.
        Ok(())
    }

    /// The blank line: hand over the event assembled so far, if it has data.
    fn dispatch<E, F>(&mut self, on_event: &mut F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(SseEvent<'_>) -> Result<(), E>,
    {
        if !self.has_data {
            return Ok(());
        }
        self.has_data = false;
        let r = match std::str::from_utf8(&self.data) {
            Ok(s) if s.trim() == "[DONE]" => on_event(SseEvent::Done),
            Ok(s) => on_event(SseEvent::Data(s)),
            Err(e) => Err(SseError::InvalidUtf8 {
                valid_up_to: e.valid_up_to(),
            }
            .into()),
        };
        self.data.clear();
        r
    }
}

/// Index of the first `\n` or `\r`: eight bytes at a time (SWAR), since
/// every byte of the stream passes through here.
#[inline]
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const LF: u64 = ONES * b'\n' as u64;
    const CR: u64 = ONES * b'\r' as u64;
    // A byte of `w` is zero -> its high bit is set in the result (exact for
    // the lowest such byte, which is the one we want).
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[i..i + 8]);
        let w = u64::from_le_bytes(word);
        let hits = zero(w ^ LF) | zero(w ^ CR);
        if hits != 0 {
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes[i..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|p| i + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_end_search_agrees_with_a_byte_loop() {
        let naive = |b: &[u8]| b.iter().position(|&c| c == b'\n' || c == b'\r');
        // Every position of each line ending, in buffers of every length up
        // to 40, with bytes around that differ from the ending by one bit
        // (0x0B, 0x0C, 0x0E, 0x8A, 0x8D) to catch a sloppy zero-byte test.
        for len in 0..40 {
            for fill in [b'a', 0x0B, 0x0C, 0x0E, 0x8A, 0x8D, 0x00, 0xFF] {
                let mut buf = vec![fill; len];
                assert_eq!(find_line_end(&buf), naive(&buf));
                for pos in 0..len {
                    for end in [b'\n', b'\r'] {
                        buf[pos] = end;
                        assert_eq!(find_line_end(&buf), naive(&buf), "{len} {pos} {fill}");
                        // A second ending after the first changes nothing.
                        if pos + 1 < len {
                            let keep = buf[pos + 1];
                            buf[pos + 1] = b'\n';
                            assert_eq!(find_line_end(&buf), Some(pos));
                            buf[pos + 1] = keep;
                        }
                        buf[pos] = fill;
                    }
                }
            }
        }
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Ev {
        Data(String),
        Done,
        Comment,
    }

    fn collect(
        p: &mut SseParser,
        bytes: &[u8],
        out: &mut Vec<Ev>,
        finish: bool,
    ) -> Result<(), SseError> {
        let mut push = |e: SseEvent<'_>| -> Result<(), SseError> {
            out.push(match e {
                SseEvent::Data(s) => Ev::Data(s.to_owned()),
                SseEvent::Done => Ev::Done,
                SseEvent::Comment => Ev::Comment,
            });
            Ok(())
        };
        p.feed(bytes, &mut push)?;
        if finish {
            p.finish(&mut push)?;
        }
        Ok(())
    }

    fn parse_whole(bytes: &[u8]) -> Result<Vec<Ev>, SseError> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, bytes, &mut out, true)?;
        Ok(out)
    }

    /// Parse `bytes` whole, split at every boundary and byte by byte; all
    /// must agree. Returns the events.
    fn parse_every_split(bytes: &[u8]) -> Vec<Ev> {
        let whole = parse_whole(bytes).unwrap();
        for cut in 0..=bytes.len() {
            let mut p = SseParser::new();
            let mut out = Vec::new();
            collect(&mut p, &bytes[..cut], &mut out, false).unwrap();
            collect(&mut p, &bytes[cut..], &mut out, true).unwrap();
            assert_eq!(out, whole, "split at {cut}");
        }
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for b in bytes {
            collect(&mut p, std::slice::from_ref(b), &mut out, false).unwrap();
        }
        collect(&mut p, b"", &mut out, true).unwrap();
        assert_eq!(out, whole, "byte by byte");
        whole
    }

    fn data(s: &str) -> Ev {
        Ev::Data(s.to_owned())
    }

    #[test]
    fn basic_events_and_done() {
        let evs = parse_every_split(b"data: {\"a\":1}\n\ndata:{\"b\":2}\n\ndata: [DONE]\n\n");
        assert_eq!(evs, vec![data("{\"a\":1}"), data("{\"b\":2}"), Ev::Done]);
    }

    #[test]
    fn all_line_endings_and_cr_split_across_reads() {
        let evs = parse_every_split(b"data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\n\n");
        assert_eq!(evs, vec![data("a"), data("b"), data("c"), data("d")]);

        // The CR ends one read, its LF starts the next: one line ending.
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"data: x\r", &mut out, false).unwrap();
        assert!(out.is_empty());
        collect(&mut p, b"\n", &mut out, false).unwrap();
        assert!(out.is_empty(), "CR LF split must not make a blank line");
        collect(&mut p, b"\r", &mut out, false).unwrap();
        assert_eq!(out, vec![data("x")]);
        // CR, an empty read, LF: still one line ending; the next LF is the
        // blank line.
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"data: y\r", &mut out, false).unwrap();
        collect(&mut p, b"", &mut out, false).unwrap();
        collect(&mut p, b"\n", &mut out, false).unwrap();
        collect(&mut p, b"\n", &mut out, false).unwrap();
        assert_eq!(out, vec![data("y")]);
    }

    #[test]
    fn multi_line_data_comments_and_ignored_fields() {
        let evs = parse_every_split(
            b": ping\n\nevent: message\nid: 7\nretry: 100\ndata: one\ndata:two\ndata:  three\nfoo: bar\n\n:\n",
        );
        assert_eq!(
            evs,
            vec![Ev::Comment, data("one\ntwo\n three"), Ev::Comment]
        );
    }

    #[test]
    fn empty_data_fields() {
        // `data` with no colon and `data:` with nothing are empty data fields.
        let evs = parse_every_split(b"data\n\ndata:\ndata:\n\nevent: x\n\n");
        assert_eq!(evs, vec![data(""), data("\n")]);
    }

    #[test]
    fn unterminated_event_flushed_by_finish() {
        assert_eq!(parse_every_split(b"data: last"), vec![data("last")]);
        assert_eq!(
            parse_every_split(b"data: a\n\ndata: b\n"),
            vec![data("a"), data("b")]
        );
        assert_eq!(parse_every_split(b"data: a\r"), vec![data("a")]);
        // Without finish, nothing unterminated comes out.
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"data: a\n", &mut out, false).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn bom_skipped_only_at_start() {
        let evs = parse_every_split(b"\xEF\xBB\xBFdata: a\n\n");
        assert_eq!(evs, vec![data("a")]);
        // A broken BOM is data, i.e. an unknown field name here, ignored.
        let evs = parse_every_split(b"\xEF\xBBdata: a\n\ndata: b\n\n");
        assert_eq!(evs, vec![data("b")]);
        // A BOM later in the stream is not skipped.
        let r = parse_whole(b"data: a\n\ndata: \xEF\xBB\xBFb\n\n").unwrap();
        assert_eq!(r, vec![data("a"), data("\u{feff}b")]);
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let r = parse_whole(b"data: ok\n\ndata: bad \xff\xfe\n\n");
        assert_eq!(r, Err(SseError::InvalidUtf8 { valid_up_to: 4 }));
        // Invalid UTF-8 in an ignored field or comment is not data: fine.
        assert_eq!(
            parse_whole(b": \xff\nevent: \xff\n\ndata: x\n\n").unwrap(),
            vec![Ev::Comment, data("x")]
        );
        // A multi-byte character split across reads is fine.
        assert_eq!(
            parse_every_split("data: é€😀\n\n".as_bytes()),
            vec![data("é€😀")]
        );
    }

    #[test]
    fn oversized_event_is_an_error() {
        let mut p = SseParser::with_max_event_bytes(10);
        let mut out = Vec::new();
        assert_eq!(
            collect(&mut p, b"data: 0123456789\n\n", &mut out, false),
            Ok(()),
            "exactly the limit is fine"
        );
        assert_eq!(out, vec![data("0123456789")]);
        let r = collect(&mut p, b"data: 012345\ndata: 6789\n\n", &mut out, false);
        assert_eq!(r, Err(SseError::EventTooLarge { limit: 10 }));

        // A line that never ends is caught while it grows, across reads.
        let mut p = SseParser::with_max_event_bytes(10);
        let mut out = Vec::new();
        collect(&mut p, b"data: 0123", &mut out, false).unwrap();
        let r = collect(&mut p, b"456789", &mut out, false);
        assert_eq!(r, Err(SseError::EventTooLarge { limit: 10 }));
    }

    #[test]
    fn callback_error_stops_the_feed() {
        #[derive(Debug, PartialEq)]
        enum E {
            Sse,
            Stop,
        }
        impl From<SseError> for E {
            fn from(_: SseError) -> Self {
                E::Sse
            }
        }
        let mut p = SseParser::new();
        let mut seen = 0;
        let r = p.feed(b"data: a\n\ndata: b\n\ndata: c\n\n", |_| {
            seen += 1;
            if seen == 2 {
                Err(E::Stop)
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err(E::Stop));
        assert_eq!(seen, 2);
    }

    #[test]
    fn reusable_after_finish() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"data: a", &mut out, true).unwrap();
        collect(&mut p, b"data: b\n\n", &mut out, true).unwrap();
        assert_eq!(out, vec![data("a"), data("b")]);
    }
}
