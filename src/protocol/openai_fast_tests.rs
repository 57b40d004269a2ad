//! The fast path against the full decoder: every capture and a set of odd
//! shapes read both ways give the same events.

use super::*;

/// What the full (serde) decoder makes of one payload, as `on_data` does.
fn serde_events(payload: &str) -> Result<Vec<StreamEvent>, ()> {
    let mut out = Vec::new();
    match serde_json::from_str::<Lenient<Chunk<'_>>>(payload) {
        Ok(Lenient(Some(chunk))) => ChunkState::default().on_chunk(chunk, &mut out),
        Ok(Lenient(None)) => out.push(E::NoOutput),
        Err(_) if serde_json::from_str::<IgnoredAny>(payload).is_ok() => out.push(E::NoOutput),
        Err(_) => return Err(()),
    }
    Ok(out)
}

/// When the fast path reads a payload, its events are the full decoder's.
/// Returns whether it read it.
fn check_fast(payload: &str) -> bool {
    check_fast_after(payload, &mut fast::Prefix::default())
}

/// `check_fast` with the prefix memory of the chunks read before.
fn check_fast_after(payload: &str, prefix: &mut fast::Prefix) -> bool {
    let Some(chunk) = fast::chunk(payload, prefix) else {
        return false;
    };
    let mut fast_out = Vec::new();
    ChunkState::default().on_chunk(chunk, &mut fast_out);
    assert_eq!(
        Ok(fast_out),
        serde_events(payload),
        "fast path disagrees on {payload:?}"
    );
    true
}

fn capture_payloads() -> Vec<String> {
    let mut payloads = Vec::new();
    let dirs = [
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/captures"),
        "/work/shared/captures",
    ];
    for dir in dirs {
        let Ok(servers) = std::fs::read_dir(dir) else {
            continue;
        };
        for server in servers.flatten() {
            let Ok(files) = std::fs::read_dir(server.path()) else {
                continue;
            };
            for f in files.flatten() {
                let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                for line in text.lines() {
                    if let Some(p) = line.strip_prefix("data: ") {
                        if p != "[DONE]" {
                            payloads.push(p.to_owned());
                        }
                    }
                }
            }
        }
    }
    payloads
}

const SHAPES: &[&str] = &[
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":12,"completion_tokens":0}}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w\u00f6rld \"q\"\n"},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":4},"prompt_tokens_details":{"cached_tokens":2}}}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":[1,2.5e3,-0.1]}"}}]},"finish_reason":"tool_calls"}]}"#,
    r#"{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}"#,
    r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"total_tokens":18,"completion_tokens":6}}"#,
    r#" { "choices" : [ { "delta" : { "content" : "a" } } , null , [ 1 ] , "s" ] , "x" : { "y" : [ true , false , null ] } } "#,
];

#[test]
fn fast_path_agrees_with_serde() {
    // Real streams: every chunk of every capture is read by the fast path
    // except those with keys it leaves to the full decoder (timings).
    let captures = capture_payloads();
    assert!(!captures.is_empty());
    let mut fast = 0;
    for p in &captures {
        if check_fast(p) {
            fast += 1;
        }
    }
    assert!(
        fast * 10 >= captures.len() * 9,
        "fast path read only {fast} of {} capture chunks",
        captures.len()
    );
    for p in SHAPES {
        assert!(check_fast(p), "the fast path should read {p}");
    }

    // Odd cases: either the fast path steps aside or it agrees.
    let odd = [
        r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[],"choices":[]}"#,
        r#"{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1e400}}"#,
        r#"{"choices":[{"delta":{"content":1e400}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud83d\ude00"}}]}"#,
        r#"{"choic\u0065s":[{"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"finish_reason":"len\u0067th"}]}"#,
        r#"{"object":"err\u006fr","message":"m"}"#,
        r#"{"object":"error","message":"m"}"#,
        r#"{"choices":{"delta":{"content":"x"}}}"#,
        r#"{"choices":"x","usage":[1,2]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":-3}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":3.0}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":"3"}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":12345678901234567890123}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":007}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}]}x"#,
        r#"{"choices":[{"delta":{"content":"x"}},]}"#,
        r#"{"choices":[{"delta":{"content":"x\u0000"}}]}"#,
        "{\"choices\":[{\"delta\":{\"content\":\"x\ty\"}}]}",
        r#"{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"choices":[]}"#,
        r#"{}"#,
        r#"[]"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"timings":{"cache_n":3}}"#,
        r#"{"choices":[{"delta":{"content":"x"},"delta":{}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"x"},"text":"","finish_reason":7}]}"#,
    ];
    for p in odd {
        check_fast(p);
    }

    // Mutations of each shape.
    for base in SHAPES
        .iter()
        .copied()
        .chain(captures.iter().take(3).map(|s| s.as_str()))
    {
        for s in mutations(base) {
            check_fast(&s);
        }
    }
}

/// `base` with each byte deleted, replaced or preceded by a byte that
/// matters to JSON; only the variants that are still UTF-8.
fn mutations(base: &str) -> Vec<String> {
    let bytes: &[u8] = b"\"\\{}[],:0-e.5 xnu\n";
    let b = base.as_bytes();
    let mut out = Vec::new();
    for i in 0..b.len() {
        let mut variants = vec![[&b[..i], &b[i + 1..]].concat()];
        for &c in bytes {
            variants.push([&b[..i], &[c], &b[i + 1..]].concat());
            variants.push([&b[..i], &[c], &b[i..]].concat());
        }
        out.extend(
            variants
                .into_iter()
                .filter_map(|v| String::from_utf8(v).ok()),
        );
    }
    out
}

#[test]
fn plain_run_stops_at_what_a_string_must_look_at() {
    let naive = |b: &[u8]| {
        b.iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .unwrap_or(b.len())
    };
    // The SWAR run may stop short of the end (the last 1-7 bytes are left
    // to the byte loop), never past a special byte.
    for len in 0..40 {
        for fill in [
            b'a', b'!', b'#', b'[', b']', 0x1F, 0x20, 0x7F, 0x80, 0xA2, 0xDC, 0xFF,
        ] {
            let mut buf = vec![fill; len];
            let check = |buf: &[u8]| {
                let want = naive(buf);
                let got = fast::plain_run(buf);
                if want < buf.len() - buf.len() % 8 {
                    assert_eq!(got, want, "{buf:?}");
                } else {
                    assert!(got <= want && got >= buf.len() - buf.len() % 8, "{buf:?}");
                }
            };
            check(&buf);
            for pos in 0..len {
                for special in [b'"', b'\\', 0x00, 0x0A, 0x1F] {
                    buf[pos] = special;
                    check(&buf);
                    buf[pos] = fill;
                }
            }
        }
    }
}

#[test]
fn remembered_prefix_changes_nothing() {
    // A stream whose chunks share their first bytes (vLLM's id, object,
    // created, model): the second and later chunks resume after them.
    let head = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","#;
    let tails = [
        r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#""choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
        r#""choices":[{"index":0,"delta":{"reasoning_content":"b"}}]}"#,
        r#""choices":[{"index":0,"delta":{"content":"c"},"finish_reason":"length"}]}"#,
        r#""choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3}}"#,
        // What must not slip through on the remembered prefix.
        r#""object":"error","message":"x"}"#,
        r#""object":"x","choices":[]}"#,
        r#""choices":[]"#,
        r#""choices":[]}}"#,
        r#"}"#,
        r#""usage":{"completion_tokens":1},"error":"boom"}"#,
    ];
    let mut prefix = fast::Prefix::default();
    let mut read = 0;
    for tail in tails {
        if check_fast_after(&format!("{head}{tail}"), &mut prefix) {
            read += 1;
        }
        // Whatever the chunk was, a full chunk right after still agrees.
        check_fast_after(&format!("{head}{}", tails[1]), &mut prefix);
    }
    assert!(read >= 5, "read {read}");
    // What was remembered is the head, up to the `"choices"` key.
    assert_eq!(prefix.len(), head.len());
    // The object string comes back from the remembered place.
    let mut prefix = fast::Prefix::default();
    for _ in 0..2 {
        let payload = format!("{head}{}", tails[0]);
        let c = fast::chunk(&payload, &mut prefix).unwrap();
        assert_eq!(c.object.0.as_deref(), Some("chat.completion.chunk"));
    }

    // Every mutation of a chunk, read after an intact one primed the
    // prefix: bytes inside the remembered prefix make it a fresh read,
    // bytes after it a resumed one; both must agree with serde.
    for base in [
        format!("{head}{}", tails[1]),
        format!("{head}{}", tails[4]),
        r#"{"id":"cmpl-9","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":"x","finish_reason":null}]}"#.to_owned(),
    ] {
        for s in mutations(&base) {
            let mut prefix = fast::Prefix::default();
            assert!(check_fast_after(&base, &mut prefix));
            check_fast_after(&s, &mut prefix);
            check_fast_after(&base, &mut prefix);
        }
    }
}
