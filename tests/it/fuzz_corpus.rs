//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the
//! parsers with the fuzz targets' own invariant checks (`fuzz/src/lib.rs`,
//! included below), so `cargo test` guards what the fuzzers found without
//! cargo-fuzz or a nightly toolchain. Small bodies are also cut at every
//! byte, larger ones at a spread of points, under several size caps. Plus
//! the cases too large to keep as corpus files (a 10 MB line), generated.

use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod checks;

use checks::{Ev, Input, SseRun};
use tokbench::probe::prometheus;
use tokbench::protocol::{
    MalformedNdjson, MalformedStream, NdjsonError, OllamaDecoder, OpenAiDecoder, SseError,
};

/// Bodies up to this size are cut at every byte; larger ones at
/// `SPREAD_CUTS` points.
const EVERY_CUT_MAX: usize = 512;
const SPREAD_CUTS: usize = 24;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "{}: only {} files",
        dir.display(),
        files.len()
    );
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).expect("corpus file");
            (p, data)
        })
        .collect()
}

/// Where to cut a body in two.
fn cuts(len: usize) -> Vec<usize> {
    if len <= EVERY_CUT_MAX {
        (0..=len).collect()
    } else {
        (0..=SPREAD_CUTS).map(|i| len * i / SPREAD_CUTS).collect()
    }
}

/// Size caps to try on a body: tiny, around the body's size, the default.
fn caps(len: usize) -> [usize; 5] {
    [
        0,
        7,
        len / 2,
        len,
        tokbench::protocol::sse::DEFAULT_MAX_EVENT_BYTES,
    ]
}

/// Whether a corpus file is a hand-named seed rather than one the fuzzer
/// kept (named by the SHA-1 of its bytes).
fn is_seed(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !(name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Runs `f(data, is_seed)` on every corpus file of `target`; names the file
/// when it panics.
fn each(target: &str, f: impl Fn(&[u8], bool)) -> usize {
    let files = corpus(target);
    for (path, data) in &files {
        let seed = is_seed(path);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(data, seed)));
        if let Err(e) = r {
            eprintln!("failed on {}", path.display());
            std::panic::resume_unwind(e);
        }
    }
    files.len()
}

#[test]
fn sse_corpus_holds_the_invariants() {
    each("sse", |data, seed| {
        // Exactly what the fuzz target runs, on every file.
        checks::sse(data);
        if !seed {
            return;
        }
        // The seeds, harder: every cut (or a spread of them), several caps.
        let body = Input::new(data).body;
        for cut in cuts(body.len()) {
            let pieces = [&body[..cut], &body[cut..]];
            for cap in caps(body.len()) {
                checks::check_sse(cap, body, &pieces);
            }
            checks::check_openai(body, &pieces);
        }
        checks::check_sse(body.len(), body, &checks::cut(body, 1, 0));
    });
}

#[test]
fn ndjson_corpus_holds_the_invariants() {
    each("ndjson", |data, seed| {
        checks::ndjson(data);
        if !seed {
            return;
        }
        let body = Input::new(data).body;
        for cut in cuts(body.len()) {
            let pieces = [&body[..cut], &body[cut..]];
            for cap in caps(body.len()) {
                checks::check_ndjson(cap, body, &pieces);
            }
            checks::check_ollama(body, &pieces);
        }
        checks::check_ndjson(body.len(), body, &checks::cut(body, 1, 0));
    });
}

#[test]
fn prometheus_corpus_holds_the_invariants() {
    each("prometheus", |data, _| {
        checks::prometheus(data);
        // The halves check cuts at the line chosen by the first byte: try
        // other lines by changing that byte.
        let mut d = data.to_vec();
        for first in [b'\n', b'a', b'#', 0x80] {
            if let Some(b) = d.first_mut() {
                *b = first;
            }
            checks::prometheus(&d);
        }
    });
}

#[test]
fn cmsg_corpus_holds_the_invariants() {
    each("cmsg", |data, _| {
        checks::cmsg(data);
        // Every cut of the seeds, and each seed shifted by one byte (a
        // misaligned walk must stop cleanly, not panic).
        for cut in 0..=data.len() {
            checks::cmsg(&data[..cut]);
        }
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(data);
        checks::cmsg(&shifted);
    });
}

#[test]
fn the_corpus_is_small_and_the_seeds_are_there() {
    let mut total = 0;
    for target in ["sse", "ndjson", "prometheus", "cmsg"] {
        for (path, data) in corpus(target) {
            assert!(data.len() <= 1 << 20, "{} is over 1 MiB", path.display());
            total += data.len();
        }
    }
    assert!(
        total <= 2 << 20,
        "corpus is {total} bytes, keep it under 2 MiB"
    );
    // The recorded server responses are among the seeds.
    let sse = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/sse");
    assert!(sse.join("llama-server-stream_basic-whole").is_file());
}

// ---------------------------------------------------------------------------
// A 10 MB line: generated, not a corpus file.

const TEN_MB: usize = 10 * 1000 * 1000;

fn ten_mb_line(prefix: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(prefix.len() + TEN_MB + 2);
    v.extend_from_slice(prefix);
    v.resize(prefix.len() + TEN_MB, b'x');
    v
}

#[test]
fn ten_mb_sse_line_hits_a_1_mib_cap_while_it_grows() {
    let line = ten_mb_line(b"data: ");
    let pieces: Vec<&[u8]> = line.chunks(64 * 1024).collect();
    let run = checks::run_sse(1 << 20, &pieces);
    assert_eq!(run.events, vec![]);
    assert_eq!(
        run.feed_err,
        Some(SseError::EventTooLarge { limit: 1 << 20 })
    );
    // Whole, in one read, the same: an unterminated line is held, so capped.
    let run = checks::run_sse(1 << 20, &[&line]);
    assert_eq!(
        run.feed_err,
        Some(SseError::EventTooLarge { limit: 1 << 20 })
    );
}

#[test]
fn ten_mb_sse_event_fits_the_default_cap_and_the_decoder_error_stays_short() {
    let mut body = ten_mb_line(b"data: ");
    body.extend_from_slice(b"\n\n");
    let pieces: Vec<&[u8]> = body.chunks(64 * 1024).collect();
    let run = checks::run_sse(tokbench::protocol::sse::DEFAULT_MAX_EVENT_BYTES, &pieces);
    assert_eq!(run.err(), None);
    assert_eq!(run.events.len(), 1);
    assert!(matches!(&run.events[0], Ev::Data(s) if s.len() == TEN_MB));

    // Not JSON: the decoder's error quotes a snippet, not 10 MB.
    let (events, err) = checks::run_openai(&mut OpenAiDecoder::new(), &pieces);
    assert!(events.is_empty());
    let err = err.expect("10 MB of x is not JSON");
    assert!(
        matches!(err, MalformedStream::Json { chunk: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().len() < 300,
        "{} bytes of error",
        err.to_string().len()
    );
}

#[test]
fn ten_mb_ndjson_line_hits_a_1_mib_cap_and_the_decoder_error_stays_short() {
    let line = ten_mb_line(b"{\"response\":\"");
    let pieces: Vec<&[u8]> = line.chunks(64 * 1024).collect();
    let run = checks::run_ndjson(1 << 20, &pieces);
    assert_eq!(
        run.err,
        Some(NdjsonError::LineTooLong {
            line: 1,
            limit: 1 << 20
        })
    );
    assert!(run.in_feed, "the error comes while the line grows");

    // Under the default 16 MiB cap it is one (broken) JSON line.
    let (events, err) = checks::run_ollama(&mut OllamaDecoder::new(), &pieces);
    assert!(events.is_empty());
    let err = err.expect("an unterminated JSON string");
    assert!(
        matches!(err, MalformedNdjson::Json { line: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().len() < 300,
        "{} bytes of error",
        err.to_string().len()
    );
}

#[test]
fn ten_mb_prometheus_label_parses() {
    let mut body = ten_mb_line(b"m{a=\"");
    body.extend_from_slice(b"\"} 1\nn 2\n");
    let m = prometheus::parse_bytes(&body);
    assert_eq!(m.samples.len(), 2);
    assert_eq!(m.samples[0].label("a").map(str::len), Some(TEN_MB));
    assert_eq!(m.value("n"), Some(2.0));
}

#[test]
fn endless_lines_fail_at_the_cap() {
    for cap in [0, 1, 2, 63, 64, 1000] {
        for chunk in [&b"x"[..], b"0123456789", &[0xFF; 100]] {
            checks::endless_sse(cap, chunk);
            checks::endless_ndjson(cap, chunk);
        }
    }
}

/// The `sse` fuzzer's one finding (a harness bug, not a parser bug): a body
/// that is only the start of a byte-order mark is held by the BOM matcher
/// (at most 2 bytes, outside the cap) and turns out to be data only at
/// `finish`, so the cap error comes from `finish`, not from `feed`.
#[test]
fn a_lone_bom_prefix_is_held_until_finish() {
    checks::sse(&[0, 0, 0, 0x69, 0xEF, 0xBB]);
    let run = checks::run_sse(0, &[b"\xEF\xBB"]);
    assert_eq!(run.feed_err, None);
    assert_eq!(run.finish_err, Some(SseError::EventTooLarge { limit: 0 }));
    let nothing = SseRun {
        events: vec![],
        feed_err: None,
        finish_err: None,
    };
    assert_eq!(checks::run_sse(64, &[b"\xEF", b"\xBB"]), nothing);
}
