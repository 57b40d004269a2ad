//! Invariant checks for tokbench's wire-format parsers, shared by the
//! libFuzzer targets (`fuzz_targets/*.rs`) and by the corpus replay test
//! (`tests/it/fuzz_corpus.rs` includes this file with `#[path]`, so `cargo test`
//! checks the same invariants on the committed corpus without cargo-fuzz).
//!
//! Input layout for `sse` and `ndjson`: the first `CONTROL_BYTES` bytes are
//! not body but choose the parser's size cap and how the body is cut into
//! reads (see `Input::new`); the rest is the response body. `prometheus` takes
//! the whole input as the `/metrics` body; `cmsg` the whole input as a
//! `recvmsg` control buffer.
//!
//! Every check panics (assert) on a broken invariant; a panic is what
//! libFuzzer reports as a crash.

use tokbench::load::rxtime;
use tokbench::probe::prometheus;
use tokbench::protocol::ndjson::DEFAULT_MAX_LINE_BYTES;
use tokbench::protocol::sse::DEFAULT_MAX_EVENT_BYTES;
use tokbench::protocol::{
    MalformedNdjson, MalformedStream, NdjsonError, NdjsonSplitter, OllamaDecoder, OpenAiDecoder,
    SseError, SseEvent, SseParser, StreamEvent,
};

/// Bytes at the front of an `sse` / `ndjson` input that steer the run.
pub const CONTROL_BYTES: usize = 4;

/// Cap used by the endless-line check when the run's cap is the (16 MiB)
/// default: growing a line to 16 MiB on every fuzz iteration is too slow.
const ENDLESS_CAP_FALLBACK: usize = 1000;

/// One fuzz input, decoded.
pub struct Input<'a> {
    /// Size cap for `SseParser::with_max_event_bytes` /
    /// `NdjsonSplitter::with_max_line_bytes`.
    pub cap: usize,
    /// The response body.
    pub body: &'a [u8],
    /// The body cut into reads (empty reads included); concatenated they are
    /// `body`.
    pub pieces: Vec<&'a [u8]>,
}

impl<'a> Input<'a> {
    /// `data[0]`: cap base; `data[1] >> 6`: cap scale (x1, x16, x256 + 255,
    /// default 16 MiB); `data[1] & 3`: cut mode (whole, byte by byte, random
    /// reads of 0..=8 bytes, random reads of 0..=256 bytes); `data[2..4]`:
    /// seed for the random cuts. Inputs shorter than `CONTROL_BYTES` are all
    /// body, cap 64, one read.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        if data.len() < CONTROL_BYTES {
            return Input {
                cap: 64,
                body: data,
                pieces: vec![data],
            };
        }
        let (b0, b1) = (usize::from(data[0]), data[1]);
        let cap = match b1 >> 6 {
            0 => b0,
            1 => b0 * 16,
            2 => b0 * 256 + 255,
            _ => DEFAULT_MAX_EVENT_BYTES,
        };
        let body = &data[CONTROL_BYTES..];
        let seed = u64::from(u16::from_le_bytes([data[2], data[3]]));
        let pieces = cut(body, b1 & 3, seed);
        Input { cap, body, pieces }
    }
}

/// Control bytes that select `cap` (rounded to what the encoding can say)
/// and cut `mode` (0 whole, 1 byte by byte, 2 small random, 3 larger random).
pub fn control(cap: Option<usize>, mode: u8, seed: u16) -> [u8; CONTROL_BYTES] {
    let (b0, scale) = match cap {
        None => (0, 3),
        Some(c) if c <= 255 => (c as u8, 0),
        Some(c) if c <= 255 * 16 => ((c / 16) as u8, 1),
        Some(c) => (((c.saturating_sub(255)) / 256).min(255) as u8, 2),
    };
    let s = seed.to_le_bytes();
    [b0, (scale << 6) | (mode & 3), s[0], s[1]]
}

/// Cut `body` into reads.
pub fn cut(body: &[u8], mode: u8, seed: u64) -> Vec<&[u8]> {
    match mode {
        0 => vec![body],
        1 => body.chunks(1).collect(),
        _ => {
            let max = if mode == 2 { 8 } else { 256 };
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (body.len() as u64) ^ 0xD1B5;
            let mut out = Vec::new();
            let mut rest = body;
            while !rest.is_empty() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let n = (rng % (max + 1)) as usize;
                let (a, b) = rest.split_at(n.min(rest.len()));
                out.push(a);
                rest = b;
            }
            out
        }
    }
}

/// A number field of a parser's `Debug` output (`partial_len: 12`): the
/// parsers keep their buffers private, their `Debug` shows the sizes.
fn debug_field(debug: &str, field: &str) -> usize {
    let key = format!("{field}: ");
    let at = debug
        .find(&key)
        .unwrap_or_else(|| panic!("{field} in {debug}"))
        + key.len();
    debug[at..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0, |n, d| n * 10 + usize::from(d - b'0'))
}

// ---------------------------------------------------------------------------
// SSE framing and the OpenAI decoder.

/// One SSE event, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    Data(String),
    Done,
    Comment,
}

/// What an `SseParser` made of some reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseRun {
    pub events: Vec<Ev>,
    /// The error a `feed` returned (the run stops there).
    pub feed_err: Option<SseError>,
    /// The error `finish` returned.
    pub finish_err: Option<SseError>,
}

impl SseRun {
    pub fn err(&self) -> Option<&SseError> {
        self.feed_err.as_ref().or(self.finish_err.as_ref())
    }
}

fn sse_bounded(p: &SseParser, cap: usize) {
    let d = format!("{p:?}");
    let held = debug_field(&d, "data_len") + debug_field(&d, "partial_len");
    assert!(held <= cap, "SSE parser holds {held} bytes, cap {cap}: {d}");
}

/// Feed `pieces` to a fresh parser with event cap `cap`, then `finish`.
pub fn run_sse(cap: usize, pieces: &[&[u8]]) -> SseRun {
    let mut p = SseParser::with_max_event_bytes(cap);
    let mut events = Vec::new();
    let mut push = |e: SseEvent<'_>| -> Result<(), SseError> {
        events.push(match e {
            SseEvent::Data(s) => Ev::Data(s.to_owned()),
            SseEvent::Done => Ev::Done,
            SseEvent::Comment => Ev::Comment,
        });
        Ok(())
    };
    for piece in pieces {
        let r = p.feed(piece, &mut push);
        sse_bounded(&p, cap);
        if let Err(e) = r {
            return SseRun {
                events,
                feed_err: Some(e),
                finish_err: None,
            };
        }
    }
    let finish_err = p.finish(&mut push).err();
    let d = format!("{p:?}");
    assert_eq!(
        debug_field(&d, "data_len") + debug_field(&d, "partial_len"),
        0,
        "finish leaves buffers empty: {d}"
    );
    SseRun {
        events,
        feed_err: None,
        finish_err,
    }
}

/// The bytes after the last line ending; for a body without one, the body
/// less a leading byte-order mark. A body that is only the first byte or two
/// of a BOM is held by the BOM matcher (at most 2 bytes, outside the cap)
/// until `finish` tells: no tail.
fn sse_tail(body: &[u8]) -> &[u8] {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    match body.iter().rposition(|&b| b == b'\n' || b == b'\r') {
        Some(i) => &body[i + 1..],
        None if body.len() < BOM.len() && BOM.starts_with(body) => &[],
        None => body.strip_prefix(BOM).unwrap_or(body),
    }
}

/// The SSE invariants for `body` read as `pieces` with cap `cap`.
pub fn check_sse(cap: usize, body: &[u8], pieces: &[&[u8]]) -> SseRun {
    let whole = run_sse(cap, &[body]);
    let split = run_sse(cap, pieces);

    // Reads of any size see the same events; a line split across reads is
    // held (and counted against the cap) whole, so a split read may fail
    // sooner than one read, never later, and never differently before that.
    assert!(
        whole.events.starts_with(&split.events),
        "split events are not a prefix of whole events:\nwhole {whole:?}\nsplit {split:?}"
    );
    if split.err().is_none() {
        assert_eq!(split, whole, "split read succeeded, one read differs");
    }
    if cap >= body.len() {
        // The cap cannot be reached: the cut must not matter at all.
        assert_eq!(split, whole, "cap {cap} >= body {}", body.len());
    }
    for run in [&whole, &split] {
        let mut total = 0;
        for e in &run.events {
            if let Ev::Data(s) = e {
                assert!(s.len() <= cap, "event of {} bytes > cap {cap}", s.len());
                total += s.len();
            }
        }
        assert!(
            total <= body.len(),
            "{total} data bytes from {} input bytes",
            body.len()
        );
        let comments = run.events.iter().filter(|e| **e == Ev::Comment).count();
        assert!(comments <= body.iter().filter(|&&b| b == b':').count());
        if let Some(e) = run.err() {
            match e {
                SseError::EventTooLarge { limit } => assert_eq!(*limit, cap),
                SseError::InvalidUtf8 { .. } => {}
            }
        }
    }
    // An unterminated last line longer than the cap fails while it is
    // being read, not at the end of the body.
    if sse_tail(body).len() > cap {
        assert!(
            whole.feed_err.is_some(),
            "tail > cap {cap}, one read: {whole:?}"
        );
        assert!(
            split.feed_err.is_some(),
            "tail > cap {cap}, split: {split:?}"
        );
    }
    split
}

/// `chunk` without the bytes `drop` (`fill` if nothing is left), repeated
/// to about a sixteenth of `cap`: an endless line reaches the cap in a few
/// dozen reads, not thousands.
fn endless_chunk(chunk: &[u8], drop: &[u8], fill: u8, cap: usize) -> Vec<u8> {
    let mut out: Vec<u8> = chunk
        .iter()
        .copied()
        .filter(|b| !drop.contains(b))
        .collect();
    if out.is_empty() {
        out.push(fill);
    }
    while out.len() < cap / 16 {
        out.extend_from_within(..);
    }
    out
}

/// A `data:` line that never ends, fed in `chunk`s: it must fail with the
/// cap error once it passes `cap`, holding at most `cap` bytes meanwhile.
pub fn endless_sse(cap: usize, chunk: &[u8]) {
    let chunk = endless_chunk(chunk, b"\n\r", b'x', cap);
    let chunk: &[u8] = &chunk;
    let mut p = SseParser::with_max_event_bytes(cap);
    let mut fed = 0usize;
    let mut first = true;
    loop {
        let bytes: &[u8] = if first { b"data: " } else { chunk };
        first = false;
        let r: Result<(), SseError> = p.feed(bytes, |e| panic!("no line ended, got {e:?}"));
        sse_bounded(&p, cap);
        match r {
            Ok(()) => fed += bytes.len(),
            Err(e) => {
                assert_eq!(e, SseError::EventTooLarge { limit: cap });
                assert!(
                    fed + bytes.len() > cap,
                    "failed early: {fed} + {}",
                    bytes.len()
                );
                return;
            }
        }
        assert!(fed <= cap, "took {fed} bytes of one line, cap {cap}");
    }
}

/// What an `OpenAiDecoder` made of some reads (events, then the error).
pub fn run_openai(
    dec: &mut OpenAiDecoder,
    pieces: &[&[u8]],
) -> (Vec<StreamEvent>, Option<MalformedStream>) {
    let mut out = Vec::new();
    for piece in pieces {
        if let Err(e) = dec.feed(piece, &mut out) {
            dec.reset();
            return (out, Some(e));
        }
    }
    let err = dec.finish(&mut out).err();
    (out, err)
}

/// The full OpenAI decoder: the cut does not matter (bodies here are far
/// below its 16 MiB cap), and a decoder is reusable after `finish`/`reset`.
pub fn check_openai(body: &[u8], pieces: &[&[u8]]) {
    let mut dec = OpenAiDecoder::new();
    let whole = run_openai(&mut dec, &[body]);
    let split = run_openai(&mut dec, pieces);
    let again = run_openai(&mut dec, &[body]);
    if body.len() < DEFAULT_MAX_EVENT_BYTES {
        // Debug, not ==: compares f64 timings bit-for-bit-ish, NaN included.
        assert_eq!(
            format!("{split:?}"),
            format!("{whole:?}"),
            "OpenAI decoder: cut changed the outcome"
        );
    }
    assert_eq!(
        format!("{again:?}"),
        format!("{whole:?}"),
        "OpenAI decoder not reusable"
    );
    let outputs = whole
        .0
        .iter()
        .filter(|e| matches!(e, StreamEvent::Output { .. }))
        .count();
    assert!(outputs <= body.len());
}

/// Fuzz target `sse`.
pub fn sse(data: &[u8]) {
    let input = Input::new(data);
    check_sse(input.cap, input.body, &input.pieces);
    check_openai(input.body, &input.pieces);
    let endless_cap = if input.cap >= DEFAULT_MAX_EVENT_BYTES {
        ENDLESS_CAP_FALLBACK
    } else {
        input.cap
    };
    endless_sse(endless_cap, &input.body[..input.body.len().min(64)]);
}

// ---------------------------------------------------------------------------
// NDJSON framing and the Ollama decoder.

/// What an `NdjsonSplitter` made of some reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NdRun {
    pub lines: Vec<(u64, String)>,
    pub err: Option<NdjsonError>,
    /// Whether the error came from a `feed` (not `finish`).
    pub in_feed: bool,
}

/// The splitter's documented behaviour, written the simple way (whole body
/// in memory): what every cut must produce.
pub fn ndjson_model(cap: usize, body: &[u8]) -> NdRun {
    let segs: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let mut lines = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        let number = i as u64 + 1;
        let last = i + 1 == segs.len();
        if seg.len() > cap {
            return NdRun {
                lines,
                err: Some(NdjsonError::LineTooLong {
                    line: number,
                    limit: cap,
                }),
                in_feed: true,
            };
        }
        if last && seg.is_empty() {
            break;
        }
        let mut line: &[u8] = seg;
        if i == 0 {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            continue;
        }
        match std::str::from_utf8(line) {
            Ok(s) => lines.push((number, s.to_owned())),
            Err(e) => {
                return NdRun {
                    lines,
                    err: Some(NdjsonError::InvalidUtf8 {
                        line: number,
                        valid_up_to: e.valid_up_to(),
                    }),
                    in_feed: !last,
                }
            }
        }
    }
    NdRun {
        lines,
        err: None,
        in_feed: false,
    }
}

fn nd_bounded(s: &NdjsonSplitter, cap: usize) {
    let d = format!("{s:?}");
    let held = debug_field(&d, "partial_len");
    assert!(
        held <= cap,
        "NDJSON splitter holds {held} bytes, cap {cap}: {d}"
    );
}

/// Feed `pieces` to a fresh splitter with line cap `cap`, then `finish`.
pub fn run_ndjson(cap: usize, pieces: &[&[u8]]) -> NdRun {
    let mut s = NdjsonSplitter::with_max_line_bytes(cap);
    let mut lines = Vec::new();
    let mut push = |n: u64, l: &str| -> Result<(), NdjsonError> {
        lines.push((n, l.to_owned()));
        Ok(())
    };
    for piece in pieces {
        let r = s.feed(piece, &mut push);
        nd_bounded(&s, cap);
        if let Err(e) = r {
            return NdRun {
                lines,
                err: Some(e),
                in_feed: true,
            };
        }
    }
    let err = s.finish(&mut push).err();
    NdRun {
        lines,
        err,
        in_feed: false,
    }
}

/// The NDJSON invariants: whole, split and the model agree exactly.
pub fn check_ndjson(cap: usize, body: &[u8], pieces: &[&[u8]]) -> NdRun {
    let model = ndjson_model(cap, body);
    let whole = run_ndjson(cap, &[body]);
    assert_eq!(whole, model, "one read vs model");
    let split = run_ndjson(cap, pieces);
    assert_eq!(split, model, "split vs model");
    let total: usize = split.lines.iter().map(|(_, l)| l.len()).sum();
    assert!(total <= body.len());
    assert!(split.lines.iter().all(|(_, l)| l.len() <= cap));
    split
}

/// A line that never ends, fed in `chunk`s: the cap error, bounded memory.
pub fn endless_ndjson(cap: usize, chunk: &[u8]) {
    let chunk = endless_chunk(chunk, b"\n", b'{', cap);
    let chunk: &[u8] = &chunk;
    let mut s = NdjsonSplitter::with_max_line_bytes(cap);
    let mut fed = 0usize;
    loop {
        let r: Result<(), NdjsonError> =
            s.feed(chunk, |n, l| panic!("no line ended, got {n} {l:?}"));
        nd_bounded(&s, cap);
        match r {
            Ok(()) => fed += chunk.len(),
            Err(e) => {
                assert_eq!(
                    e,
                    NdjsonError::LineTooLong {
                        line: 1,
                        limit: cap
                    }
                );
                assert!(fed + chunk.len() > cap, "failed early");
                return;
            }
        }
        assert!(fed <= cap, "took {fed} bytes of one line, cap {cap}");
    }
}

/// What an `OllamaDecoder` made of some reads (events, then the error).
pub fn run_ollama(
    dec: &mut OllamaDecoder,
    pieces: &[&[u8]],
) -> (Vec<StreamEvent>, Option<MalformedNdjson>) {
    let mut out = Vec::new();
    for piece in pieces {
        if let Err(e) = dec.feed(piece, &mut out) {
            dec.reset();
            return (out, Some(e));
        }
    }
    let err = dec.finish(&mut out).err();
    (out, err)
}

/// The Ollama decoder: the cut does not matter, and it is reusable.
pub fn check_ollama(body: &[u8], pieces: &[&[u8]]) {
    let mut dec = OllamaDecoder::new();
    let whole = run_ollama(&mut dec, &[body]);
    let split = run_ollama(&mut dec, pieces);
    let again = run_ollama(&mut dec, &[body]);
    if body.len() < DEFAULT_MAX_LINE_BYTES {
        assert_eq!(
            format!("{split:?}"),
            format!("{whole:?}"),
            "Ollama decoder: cut changed the outcome"
        );
    }
    assert_eq!(
        format!("{again:?}"),
        format!("{whole:?}"),
        "Ollama decoder not reusable"
    );
}

/// Fuzz target `ndjson`.
pub fn ndjson(data: &[u8]) {
    let input = Input::new(data);
    check_ndjson(input.cap, input.body, &input.pieces);
    check_ollama(input.body, &input.pieces);
    let endless_cap = if input.cap >= DEFAULT_MAX_LINE_BYTES {
        ENDLESS_CAP_FALLBACK
    } else {
        input.cap
    };
    endless_ndjson(endless_cap, &input.body[..input.body.len().min(64)]);
}

// ---------------------------------------------------------------------------
// Prometheus text.

/// The Prometheus invariants for one `/metrics` body (the whole input).
pub fn prometheus(data: &[u8]) {
    let m = prometheus::parse_bytes(data);
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();
    assert!(
        m.samples.len() + m.skipped <= lines,
        "{m} from {lines} lines"
    );
    assert!(m.samples.len() <= prometheus::MAX_SAMPLES);
    for s in &m.samples {
        assert!(!s.name.is_empty());
        let held = s.name.len()
            + s.labels
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        assert!(
            held <= text.len(),
            "sample holds {held} bytes of a {}-byte body",
            text.len()
        );
    }
    // The query helpers never panic, whatever was parsed.
    let _ = m.to_string();
    if let Some(s) = m.samples.first() {
        let _ = (
            m.value(&s.name),
            m.sum(&s.name),
            m.max(&s.name),
            m.metric_type(&s.name),
        );
        let pairs: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let _ = (m.value_where(&s.name, &pairs), m.sum_where(&s.name, &pairs));
        assert!(m.has_prefix(&s.name));
    }
    // Lines are independent: parsing two halves cut at a line end gives the
    // whole body's samples. (Debug: NaN values compare equal that way.)
    let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i).collect();
    if !ends.is_empty() && m.samples.len() < prometheus::MAX_SAMPLES {
        let at = ends[usize::from(data[0]) % ends.len()];
        let (a, b) = (
            prometheus::parse(&text[..at]),
            prometheus::parse(&text[at + 1..]),
        );
        assert_eq!(a.skipped + b.skipped, m.skipped, "skipped: halves vs whole");
        let halves: Vec<_> = a.samples.iter().chain(&b.samples).collect();
        let whole: Vec<_> = m.samples.iter().collect();
        assert_eq!(
            format!("{halves:?}"),
            format!("{whole:?}"),
            "samples: halves vs whole"
        );
    }
    // CRLF line ends read the same as LF.
    if !text.contains('\r') {
        let crlf = prometheus::parse(&text.replace('\n', "\r\n"));
        assert_eq!(format!("{crlf:?}"), format!("{m:?}"), "CRLF vs LF");
    }
}

// ---------------------------------------------------------------------------
// recvmsg control messages (kernel receive times).

/// The control-message invariants for one buffer (the whole input):
/// - parsing never panics nor reads past the buffer, and a stamp it finds
///   is a positive time;
/// - the input as the payload of a foreign message, followed by a real
///   stamp, gives that stamp: a payload is skipped by its length, whatever
///   it holds;
/// - a stamp built from the input's first 16 bytes comes back exactly, or
///   not at all when out of range.
///
/// The same for the error queue's transmit timestamps
/// ([`rxtime::parse_tx_timestamp`]): no panic, a positive time, and a real
/// one found behind a foreign message holding the input.
pub fn cmsg(data: &[u8]) {
    if let Some(ns) = rxtime::parse_rx_timestamp(data) {
        assert!(ns > 0, "stamp {ns}");
    }
    if let Some(tx) = rxtime::parse_tx_timestamp(data) {
        assert!(tx.realtime_ns > 0, "transmit stamp {tx:?}");
    }
    let mut wrapped_tx = rxtime::craft_other(data);
    wrapped_tx.extend(rxtime::craft_tx_stamp(
        7,
        rxtime::TSTAMP_SCHED,
        1_767_225_600,
        42,
    ));
    assert_eq!(
        rxtime::parse_tx_timestamp(&wrapped_tx),
        Some(rxtime::TxStamp {
            key: 7,
            kind: rxtime::TSTAMP_SCHED,
            realtime_ns: 1_767_225_600_000_000_042
        }),
        "a foreign payload of {} bytes hid the transmit stamp",
        data.len()
    );
    let mut wrapped = rxtime::craft_other(data);
    wrapped.extend(rxtime::craft_timestampns(1_767_225_600, 42));
    assert_eq!(
        rxtime::parse_rx_timestamp(&wrapped),
        Some(1_767_225_600_000_000_042),
        "a foreign payload of {} bytes hid the stamp",
        data.len()
    );
    let word = |i: usize| {
        let mut b = [0u8; 8];
        for (k, byte) in b.iter_mut().enumerate() {
            *byte = data.get(i + k).copied().unwrap_or(0);
        }
        i64::from_le_bytes(b)
    };
    let (sec, nsec) = (word(0), word(8));
    let got = rxtime::parse_rx_timestamp(&rxtime::craft_timestampns(sec, nsec));
    let valid = sec >= 0 && (0..1_000_000_000).contains(&nsec) && (sec, nsec) != (0, 0);
    let want = valid.then(|| i128::from(sec) * 1_000_000_000 + i128::from(nsec));
    assert_eq!(got, want, "{sec}.{nsec}");
    // Every prefix (a control buffer cut by MSG_CTRUNC) parses too.
    for cut in 0..data.len().min(256) {
        let _ = rxtime::parse_rx_timestamp(&data[..cut]);
        let _ = rxtime::parse_tx_timestamp(&data[..cut]);
    }
}
