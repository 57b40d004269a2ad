use super::*;
use crate::protocol::openai::MalformedStream;
use crate::protocol::OpenAiDecoder;

decoder_test_helpers!(TgiDecoder, MalformedTgi);

/// A public capture of TGI (`tests/fixtures/captures/tgi/`, each beside its
/// `.source.txt`).
fn capture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/captures/tgi/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn usage(prompt: Option<u32>, completion: Option<u32>) -> StreamEvent {
    StreamEvent::Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        reasoning_tokens: None,
        cached_tokens: None,
    }
}

fn token() -> StreamEvent {
    StreamEvent::Output {
        tokens: Some(1),
        reasoning: false,
    }
}

/// The three captures of `/generate_stream` with details are each one
/// event: the one token (`" "`, then `"."`) and, on it, the end:
/// `generated_tokens: 1`, `finish_reason: "length"`. Only the 2025 one says
/// `input_length` (1); the 2023 one has no `index`, the 2025 one writes
/// `data: ` with a space.
#[test]
fn generate_stream_captures_give_one_token_counted_by_the_server() {
    for (name, prompt) in [
        ("tgi_2023-06_generate_stream_details.sse", None),
        ("tgi_2024-06_generate_stream_details.sse", None),
        ("tgi_2025-01_generate_stream_details.sse", Some(1)),
    ] {
        let events = decode_every_split(&capture(name));
        assert_eq!(
            events,
            vec![
                token(),
                StreamEvent::Finish(FinishReason::Length),
                usage(prompt, Some(1)),
            ],
            "{name}"
        );
    }
}

/// A longer stream as TGI writes it: three text tokens, then the
/// end-of-sequence token (`special: true`, empty text) whose event ends the
/// answer: four tokens, as `generated_tokens` says.
const EOS_STREAM: &[u8] = b"data:{\"index\":1,\"token\":{\"id\":450,\"text\":\" The\",\"logprob\":-0.5,\"special\":false},\"generated_text\":null,\"details\":null}\n\n\
data:{\"index\":2,\"token\":{\"id\":4996,\"text\":\" sky\",\"logprob\":-0.25,\"special\":false},\"generated_text\":null,\"details\":null}\n\n\
data:{\"index\":3,\"token\":{\"id\":338,\"text\":\" is\",\"logprob\":-0.125,\"special\":false},\"generated_text\":null,\"details\":null}\n\n\
data:{\"index\":4,\"token\":{\"id\":2,\"text\":\"\",\"logprob\":-0.01,\"special\":true},\"generated_text\":\" The sky is\",\"details\":{\"finish_reason\":\"eos_token\",\"generated_tokens\":4,\"seed\":null,\"input_length\":7}}\n\n";

#[test]
fn every_token_event_is_one_token_and_the_last_carries_the_count() {
    let events = decode_every_split(EOS_STREAM);
    let mut want = vec![token(); 4];
    want.push(StreamEvent::Finish(FinishReason::Stop));
    want.push(usage(Some(7), Some(4)));
    assert_eq!(events, want);
}

#[test]
fn without_details_the_end_is_known_but_not_why_nor_the_count() {
    let events = decode_every_split(
        b"data:{\"token\":{\"id\":1,\"text\":\"a\",\"logprob\":-1.0,\"special\":false},\"generated_text\":null,\"details\":null}\n\n\
data:{\"token\":{\"id\":2,\"text\":\"b\",\"logprob\":-1.0,\"special\":false},\"generated_text\":\"ab\",\"details\":null}\n\n",
    );
    assert_eq!(
        events,
        vec![token(), token(), StreamEvent::Finish(FinishReason::Other)]
    );
}

#[test]
fn a_stop_sequence_is_a_stop() {
    let events = decode(
        b"data:{\"token\":{\"id\":1,\"text\":\".\",\"logprob\":0,\"special\":false},\"generated_text\":\".\",\"details\":{\"finish_reason\":\"stop_sequence\",\"generated_tokens\":1,\"seed\":3}}\n\n",
    )
    .unwrap();
    assert_eq!(events[1], StreamEvent::Finish(FinishReason::Stop));
}

/// TGI's error event, as it sends a failure inside a stream (the body of its
/// 422 capture is the same object).
#[test]
fn an_error_event_is_an_error_with_its_message() {
    let overloaded =
        decode(b"data:{\"error\":\"Model is overloaded\",\"error_type\":\"overloaded\"}\n\n")
            .unwrap();
    assert_eq!(
        overloaded,
        vec![StreamEvent::Error("Model is overloaded".into())]
    );
    let mut body = b"data:".to_vec();
    body.extend_from_slice(&capture("tgi_2023-06_422_validation_error.json"));
    body.extend_from_slice(b"\n\n");
    match decode(&body).unwrap().as_slice() {
        [StreamEvent::Error(m)] => {
            assert!(
                m.starts_with("Input validation error: `inputs` tokens"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// TGI's OpenAI streams read as TGI's native one fail, naming the backend
/// that reads them; read by the OpenAI decoder they give their tokens: 20
/// content chunks then an empty finish chunk (1.4.3, no `[DONE]`), 10 chunks
/// the last with the finish (3.0.1, `usage: null` on each, then `[DONE]`).
#[test]
fn tgi_chat_streams_are_openai_ones() {
    for name in ["tgi_1.4.3_chat_stream.sse", "tgi_3.0.1_chat_stream.sse"] {
        assert_eq!(
            decode(&capture(name)),
            Err(MalformedTgi::OtherApi(OPENAI_STREAM)),
            "{name}"
        );
    }
    let read = |name: &str| {
        let mut d = OpenAiDecoder::new();
        let mut out = Vec::new();
        d.feed(&capture(name), &mut out).unwrap();
        d.finish(&mut out).unwrap();
        out
    };
    let count = |events: &[StreamEvent]| {
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Output { .. }))
            .count()
    };
    let old = read("tgi_1.4.3_chat_stream.sse");
    assert_eq!(count(&old), 20);
    assert_eq!(
        old[old.len() - 2..],
        [
            StreamEvent::NoOutput,
            StreamEvent::Finish(FinishReason::Length)
        ]
    );
    let new = read("tgi_3.0.1_chat_stream.sse");
    assert_eq!(count(&new), 10);
    assert_eq!(
        new[new.len() - 2..],
        [StreamEvent::Finish(FinishReason::Length), StreamEvent::Done]
    );
    assert!(!new.iter().any(|e| matches!(e, StreamEvent::Usage { .. })));
}

/// The other way round: TGI's native events read as an OpenAI stream fail at
/// the first event, naming `--backend tgi-generate` (before, the stream
/// ended with no output and `truncated ... 0 of N tokens`).
#[test]
fn tgi_native_events_read_as_openai_name_the_backend() {
    for name in [
        "tgi_2023-06_generate_stream_details.sse",
        "tgi_2025-01_generate_stream_details.sse",
    ] {
        let mut d = OpenAiDecoder::new();
        let mut out = Vec::new();
        let r = d.feed(&capture(name), &mut out);
        assert_eq!(r, Err(MalformedStream::OtherApi(TGI_STREAM)), "{name}");
        assert!(out.is_empty());
        assert!(TGI_STREAM.contains("--backend tgi-generate"));
    }
    let mut d = OpenAiDecoder::new();
    let mut out = Vec::new();
    assert!(d.feed(EOS_STREAM, &mut out).is_err());
}

#[test]
fn other_json_is_no_output_and_only_non_json_is_malformed() {
    assert_eq!(
        decode(b"data:{\"token\":\"x\"}\n\ndata:[1,2]\n\ndata:{\"a\":1,\"a\":2}\n\n").unwrap(),
        vec![StreamEvent::NoOutput; 3]
    );
    // A keep-alive comment and an empty data line are nothing.
    assert_eq!(decode(b":\n\ndata:\n\n").unwrap(), outputs(0));
    match decode(b"data:{\"token\":{}}\n\ndata:{\"token\n\n") {
        Err(MalformedTgi::Json { event: 2, .. }) => {}
        other => panic!("{other:?}"),
    }
    // The decoder is reused after finish: the count starts again.
    let mut d = TgiDecoder::new();
    let mut out = Vec::new();
    d.feed(b"data:{\"token\":{}}\n\n", &mut out).unwrap();
    d.finish(&mut out).unwrap();
    assert!(matches!(
        d.feed(b"data:nope\n\n", &mut out),
        Err(MalformedTgi::Json { event: 1, .. })
    ));
}

#[test]
fn the_request_asks_for_details_and_merges_extra_parameters() {
    let body: Value = serde_json::from_slice(&tgi_request_body("hi there", 8, None)).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"inputs": "hi there", "parameters": {"max_new_tokens": 8, "details": true}})
    );
    let extra = serde_json::json!({"parameters": {"seed": 1, "max_new_tokens": 3}, "stream": true});
    let body: Value =
        serde_json::from_slice(&tgi_request_body("hi", 8, extra.as_object())).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "inputs": "hi",
            "parameters": {"max_new_tokens": 3, "details": true, "seed": 1},
            "stream": true
        })
    );
    // A `parameters` that is not an object replaces ours whole.
    let extra = serde_json::json!({"parameters": null});
    let body: Value =
        serde_json::from_slice(&tgi_request_body("hi", 8, extra.as_object())).unwrap();
    assert_eq!(body["parameters"], Value::Null);
}
