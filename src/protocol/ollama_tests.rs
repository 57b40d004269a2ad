//! Tests of `ollama.rs`: hand-written streams in Ollama's documented format
//! (tests/fixtures/ollama/), odd lines, and `ollama_request_body`.

use super::*;
use crate::protocol::StreamEvent as E;
use serde_json::json;

macro_rules! fixture {
    ($path:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/ollama/",
            $path
        ))
        .as_slice()
    };
}

decoder_test_helpers!(OllamaDecoder, MalformedNdjson);

fn thinking(n: usize) -> Vec<StreamEvent> {
    vec![
        E::Output {
            tokens: None,
            reasoning: true
        };
        n
    ]
}

fn usage(prompt: Option<u32>, completion: Option<u32>) -> StreamEvent {
    E::Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        reasoning_tokens: None,
        cached_tokens: None,
    }
}

/// Ollama's figures as `Timings`: counts as sent, durations in ms.
fn timings(
    prompt_n: Option<u32>,
    prompt_ms: f64,
    predicted_n: Option<u32>,
    predicted_ms: f64,
    load_ms: f64,
    total_ms: f64,
) -> ServerTimings {
    ServerTimings {
        prompt_n,
        prompt_ms: Some(prompt_ms),
        predicted_n,
        predicted_ms: Some(predicted_ms),
        load_ms: load_ms as f32,
        total_ms: total_ms as f32,
    }
}

fn concat(parts: Vec<Vec<StreamEvent>>) -> Vec<StreamEvent> {
    parts.into_iter().flatten().collect()
}

/// Ollama's final object: no text, its `done_reason`, its counts and figures.
fn done(reason: FinishReason, usage: StreamEvent, t: ServerTimings) -> Vec<StreamEvent> {
    vec![E::NoOutput, E::Finish(reason), usage, E::Timings(t)]
}

/// The `Timings` event of a stream, which must be its last event.
fn last_timings(evs: &[StreamEvent]) -> ServerTimings {
    match evs.last() {
        Some(E::Timings(t)) => *t,
        other => panic!("last event is not Timings: {other:?}"),
    }
}

/// Equal within f32 rounding of a few hundred ms (load and total are f32).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-4
}

// ---------------------------------------------------------------------------
// Fixtures (hand-checked against the files: see the comments).

#[test]
fn generate_stream() {
    // 8 lines with non-empty `response` ("The" ... " scattering\n", one with
    // \u003c escapes), then the final object: "response":"", done_reason
    // "length", a `context` array, total 500 ms, load 12.345678 ms, prompt
    // 26 tokens in 130 ms, eval 8 tokens in 160 ms.
    let evs = decode_every_split(fixture!("generate_stream.ndjson"));
    let expected = concat(vec![
        outputs(8),
        done(
            FinishReason::Length,
            usage(Some(26), Some(8)),
            timings(Some(26), 130.0, Some(8), 160.0, 12.345678, 500.0),
        ),
    ]);
    assert_eq!(evs, expected);

    // The figures the load task records per request.
    let t = last_timings(&evs);
    assert_eq!(t.decode_tok_s(), Some(50.0)); // 8 / 0.160 s
    assert_eq!(t.prefill_tok_s(), Some(200.0)); // 26 / 0.130 s
    assert!(close(f64::from(t.load_ms), 12.345678));
    // 500 - 12.345678 - 130 - 160
    assert!(close(t.slot_wait_ms().unwrap(), 197.654322));
}

#[test]
fn generate_stream_crlf_decodes_like_lf() {
    let crlf = fixture!("generate_stream_crlf.ndjson");
    // The fixture really has CRLF line endings (no checkout converted it).
    assert_eq!(crlf.windows(2).filter(|w| w == b"\r\n").count(), 9);
    assert_eq!(
        decode_every_split(crlf),
        decode(fixture!("generate_stream.ndjson")).unwrap()
    );
}

#[test]
fn chat_stream() {
    // 7 lines with non-empty `message.content` (one holds a 4-byte emoji,
    // so splits land inside it), then the final object: content "",
    // done_reason "stop" (before `done`), no load_duration (omitted = 0),
    // total 1000 ms, prompt 31 in 62 ms, eval 7 in 140 ms.
    let evs = decode_every_split(fixture!("chat_stream.ndjson"));
    let expected = concat(vec![
        outputs(7),
        done(
            FinishReason::Stop,
            usage(Some(31), Some(7)),
            timings(Some(31), 62.0, Some(7), 140.0, 0.0, 1000.0),
        ),
    ]);
    assert_eq!(evs, expected);

    let t = last_timings(&evs);
    assert_eq!(t.decode_tok_s(), Some(50.0)); // 7 / 0.140 s
    assert_eq!(t.prefill_tok_s(), Some(500.0)); // 31 / 0.062 s
    assert_eq!(t.load_ms, 0.0);
    // 1000 - 0 - 62 - 140: most of the request waited for a slot.
    assert_eq!(t.slot_wait_ms(), Some(798.0));
}

#[test]
fn chat_thinking_model() {
    // qwen3 with think: 5 lines of `message.thinking` (content ""), one line
    // with neither (content "" only), 3 lines of content, then the final
    // object: stop, a cold load of 2900 ms out of 3200 ms total, prompt 18
    // in 45 ms, eval 10 in 150 ms (10 tokens over 8 output lines: the think
    // tags are tokens that never reach the stream).
    let evs = decode_every_split(fixture!("chat_thinking.ndjson"));
    let expected = concat(vec![
        thinking(5),
        vec![E::NoOutput],
        outputs(3),
        done(
            FinishReason::Stop,
            usage(Some(18), Some(10)),
            timings(Some(18), 45.0, Some(10), 150.0, 2900.0, 3200.0),
        ),
    ]);
    assert_eq!(evs, expected);
    // Thinking is output: the very first line is the first token (and
    // the 7th line the first content token).
    assert_eq!(
        evs[0],
        E::Output {
            tokens: None,
            reasoning: true
        }
    );

    let t = last_timings(&evs);
    assert!(close(t.decode_tok_s().unwrap(), 10.0 / 0.150));
    assert_eq!(t.prefill_tok_s(), Some(400.0)); // 18 / 0.045 s
    assert_eq!(t.load_ms, 2900.0);
    // 3200 - 2900 - 45 - 150
    assert_eq!(t.slot_wait_ms(), Some(105.0));
}

#[test]
fn error_line_mid_stream() {
    // Two tokens, then `{"error":"..."}`: the error alone, no NoOutput.
    let evs = decode_every_split(fixture!("generate_error.ndjson"));
    let expected = concat(vec![
        outputs(2),
        vec![E::Error(
            "an error was encountered while running the model: unexpected EOF".into(),
        )],
    ]);
    assert_eq!(evs, expected);
}

// ---------------------------------------------------------------------------
// Odd lines.

#[test]
fn generate_thinking_tool_calls_and_odd_objects() {
    let body = concat!(
        // /api/generate with think: top-level `thinking`.
        r#"{"model":"m","response":"","thinking":"Hmm","done":false}"#,
        "\n",
        // Chat tool call with empty content.
        r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#,
        "\n",
        // Wrong types read as absent: no output.
        r#"{"response":42,"message":"text","done":"no"}"#,
        "\n",
        // Not an object; an object of unknown keys.
        "[1,2]\n",
        r#"{"status":"pulling manifest"}"#,
        "\n",
        // Duplicate keys: valid JSON, not a stream object.
        r#"{"response":"a","response":"b"}"#,
        "\n",
        // Whitespace around the object, and a final line without a newline.
        "  {\"response\":\" x\",\"done\":false}  \n",
        r#"{"response":"","done":true}"#,
    );
    let evs = decode_every_split(body.as_bytes());
    let expected = concat(vec![
        thinking(1),
        outputs(1),
        vec![E::NoOutput; 4],
        outputs(1),
        // done without a reason or any figure (an old Ollama, say).
        done(
            FinishReason::Other,
            usage(None, None),
            timings(None, 0.0, None, 0.0, 0.0, 0.0),
        ),
    ]);
    assert_eq!(evs, expected);
    let t = last_timings(&evs);
    assert_eq!(t.decode_tok_s(), None);
    assert_eq!(t.prefill_tok_s(), None);
    // Ollama sent no total: no wait estimate.
    assert_eq!(t.slot_wait_ms(), None);
}

#[test]
fn done_reasons_and_odd_figures() {
    let line = |s: &str| decode(s.as_bytes()).unwrap();
    assert_eq!(
        line(r#"{"response":"","done":true,"done_reason":"load"}"#)[1],
        E::Finish(FinishReason::Other)
    );
    assert_eq!(
        line(r#"{"response":"","done":true,"done_reason":null}"#)[1],
        E::Finish(FinishReason::Other)
    );
    // `done:false` with a reason is no finish.
    assert_eq!(
        line(r#"{"response":"a","done":false,"done_reason":"stop"}"#),
        outputs(1)
    );
    // A zero prompt count (cached prompt) is no prompt length; negative or
    // wrong-typed figures count as absent (durations as 0).
    let evs = line(
        r#"{"done":true,"done_reason":"stop","prompt_eval_count":0,"eval_count":"5","eval_duration":-3,"total_duration":2e9,"load_duration":1.5e9}"#,
    );
    assert_eq!(
        evs,
        done(
            FinishReason::Stop,
            usage(None, None),
            timings(Some(0), 0.0, None, 0.0, 1500.0, 2000.0)
        )
    );
    assert_eq!(last_timings(&evs).slot_wait_ms(), Some(500.0));
    // A final object whose parts exceed its total: the wait is never negative.
    let evs = line(
        r#"{"done":true,"total_duration":100,"prompt_eval_duration":80,"eval_duration":80,"eval_count":1}"#,
    );
    assert_eq!(last_timings(&evs).slot_wait_ms(), Some(0.0));
}

#[test]
fn error_with_other_fields_and_error_shapes() {
    let line = |s: &str| decode(s.as_bytes()).unwrap();
    // The error first, then what the rest of the line says.
    assert_eq!(
        line(r#"{"error":"boom","response":"a"}"#),
        vec![
            E::Error("boom".into()),
            E::Output {
                tokens: None,
                reasoning: false
            }
        ]
    );
    // The `/v1` shape and a long multi-line message: one line, capped.
    assert_eq!(
        line(
            r#"{"error":{"message":"server busy, please try again.  maximum pending requests exceeded","type":"api_error"}}"#
        ),
        vec![E::Error(
            "server busy, please try again.  maximum pending requests exceeded".into()
        )]
    );
    let long = format!(r#"{{"error":"a\nb{}"}}"#, "x".repeat(500));
    match &line(&long)[..] {
        [E::Error(m)] => {
            assert!(m.starts_with("a b"));
            assert!(m.ends_with("..."));
            assert!(m.chars().count() <= 203);
        }
        other => panic!("{other:?}"),
    }
    // Empty or null error: not an error.
    assert_eq!(line(r#"{"error":""}"#), vec![E::NoOutput]);
    assert_eq!(line(r#"{"error":null}"#), vec![E::NoOutput]);
}

#[test]
fn busy_body_keeps_its_two_spaces() {
    // The 503 body Ollama sends when OLLAMA_MAX_QUEUE overflows (docs/architecture.md section 8).
    let body = br#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#;
    assert_eq!(
        crate::protocol::error_body::error_message_from_body(503, body),
        "server busy, please try again.  maximum pending requests exceeded"
    );
}

// ---------------------------------------------------------------------------
// Malformed streams.

#[test]
fn not_json_is_malformed_with_the_line_number() {
    let body = b"{\"response\":\"a\",\"done\":false}\n\n{\"response\":\"b\",\"do\n";
    // Events before the bad line are kept.
    let mut d = OllamaDecoder::new();
    let mut out = Vec::new();
    let err = d.feed(body, &mut out).unwrap_err();
    assert_eq!(out, outputs(1));
    match err {
        MalformedNdjson::Json { line, snippet, .. } => {
            assert_eq!(line, 3);
            assert!(snippet.contains("\\\"b\\\""), "{snippet}");
        }
        other => panic!("{other:?}"),
    }
    // The same at every split (an unterminated bad last line fails in finish).
    for cut in 0..=body.len() {
        let r = decode_pieces(&[&body[..cut], &body[cut..]]);
        assert!(
            matches!(r, Err(MalformedNdjson::Json { line: 3, .. })),
            "split at {cut}: {r:?}"
        );
    }
    // A bare `data:` SSE line (wrong backend) is malformed too.
    assert!(decode(b"data: {\"choices\":[]}\n").is_err());
}

#[test]
fn framing_errors_surface() {
    assert!(matches!(
        decode(b"{\"response\":\"\xFF\"}\n"),
        Err(MalformedNdjson::Framing(NdjsonError::InvalidUtf8 {
            line: 1,
            ..
        }))
    ));
    let mut d = OllamaDecoder::new();
    let mut out = Vec::new();
    let huge = vec![b' '; super::super::ndjson::DEFAULT_MAX_LINE_BYTES + 1];
    assert!(matches!(
        d.feed(&huge, &mut out),
        Err(MalformedNdjson::Framing(NdjsonError::LineTooLong { .. }))
    ));
    // After `reset` the decoder works again.
    d.reset();
    d.feed(b"{\"response\":\"a\"}\n", &mut out).unwrap();
    assert_eq!(out, outputs(1));
}

#[test]
fn finish_resets_for_the_next_request() {
    let mut d = OllamaDecoder::new();
    let mut out = Vec::new();
    d.feed(b"{\"response\":\"a\"}\n{\"respo", &mut out).unwrap();
    // The body ended mid-object: that last line is not JSON.
    assert!(d.finish(&mut out).is_err());
    out.clear();
    d.feed(b"{\"response\":\"b\"}", &mut out).unwrap();
    d.finish(&mut out).unwrap();
    assert_eq!(out, outputs(1));
}

#[test]
fn garbage_never_panics() {
    // Deterministic pseudo-random bytes and mangled fixtures, every split:
    // errors are fine, panics are not.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let alphabet = b"{}[]\":,\n\r ab0\\\xFFe-";
    let mut bytes = Vec::new();
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(alphabet[(x % alphabet.len() as u64) as usize]);
    }
    for cut in (0..bytes.len()).step_by(7) {
        let _ = decode_pieces(&[&bytes[..cut], &bytes[cut..]]);
    }
    let fixture = fixture!("chat_thinking.ndjson");
    for drop_at in (0..fixture.len()).step_by(3) {
        let mut mangled = fixture.to_vec();
        mangled.remove(drop_at);
        let _ = decode(&mangled);
    }
}

// ---------------------------------------------------------------------------
// Request body.

fn body_json(bytes: Vec<u8>) -> Value {
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn request_body_generate_and_chat() {
    let generate = body_json(ollama_request_body(
        OllamaApi::Generate,
        "llama3.2:1b",
        "Why is the sky blue?",
        128,
        None,
    ));
    assert_eq!(
        generate,
        json!({
            "model": "llama3.2:1b",
            "prompt": "Why is the sky blue?",
            "stream": true,
            "options": {"num_predict": 128, "temperature": 0.0}
        })
    );
    let chat = body_json(ollama_request_body(
        OllamaApi::Chat,
        "qwen3:0.6b",
        "hi \"there\"\n",
        7,
        None,
    ));
    assert_eq!(
        chat,
        json!({
            "model": "qwen3:0.6b",
            "messages": [{"role": "user", "content": "hi \"there\"\n"}],
            "stream": true,
            "options": {"num_predict": 7, "temperature": 0.0}
        })
    );
    // Never a context size or keep-alive of our own.
    for body in [&generate, &chat] {
        assert!(body["options"].get("num_ctx").is_none());
        assert!(body.get("keep_alive").is_none());
    }
    assert_eq!(OllamaApi::Generate.path(), "/api/generate");
    assert_eq!(OllamaApi::Chat.path(), "/api/chat");
}

#[test]
fn request_body_merges_extra_body_and_its_options() {
    let extra = json!({
        "think": false,
        "keep_alive": "10m",
        "stream": true,
        "options": {"num_ctx": 8192, "temperature": 0.6, "top_k": 20}
    });
    let body = body_json(ollama_request_body(
        OllamaApi::Chat,
        "m",
        "p",
        64,
        extra.as_object(),
    ));
    assert_eq!(
        body,
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": "p"}],
            "stream": true,
            "think": false,
            "keep_alive": "10m",
            "options": {"num_predict": 64, "temperature": 0.6, "num_ctx": 8192, "top_k": 20}
        })
    );
    // Top-level keys replace ours; an `options` that is not an object
    // replaces ours whole (the user asked for it).
    let extra = json!({"model": "other", "options": null});
    let body = body_json(ollama_request_body(
        OllamaApi::Generate,
        "m",
        "p",
        1,
        extra.as_object(),
    ));
    assert_eq!(body["model"], "other");
    assert_eq!(body["options"], Value::Null);
}
