//! The wire's parsing and chunk shapes, on hand-made bodies.

use super::*;

fn req(include_usage: bool, continuous: bool) -> GenRequest {
    GenRequest {
        model: Some("m".into()),
        prompt_tokens: 7,
        max_tokens: 2,
        stream: true,
        include_usage,
        continuous_usage: continuous,
        ignore_eos: false,
    }
}

fn events(bytes: &[u8]) -> Vec<String> {
    let s = std::str::from_utf8(bytes).unwrap();
    assert!(s.ends_with("\n\n"));
    s.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
        .collect()
}

/// The events of a two-token answer, the second token its last.
fn two_token_events(fmt: &ChunkFormat) -> Vec<String> {
    let mut buf = BytesMut::new();
    fmt.emit_into(&mut buf, 0, false);
    fmt.emit_into(&mut buf, 1, true);
    events(&buf)
}

#[test]
fn eos_lengths_are_seeded_with_the_asked_mean() {
    assert_eq!(eos_length(0.0, 1, 0), None);
    assert_eq!(eos_length(0.5, 1, 0), Some(1));
    assert_eq!(eos_length(20.0, 7, 3), eos_length(20.0, 7, 3));
    let n = 20_000;
    let lens: Vec<u64> = (0..n).map(|i| eos_length(20.0, 7, i).unwrap()).collect();
    assert!(lens.iter().all(|&l| l >= 1));
    let mean = lens.iter().sum::<u64>() as f64 / n as f64;
    assert!((mean - 20.0).abs() < 0.6, "mean {mean}");
    assert_ne!(
        lens[..50],
        (0..50)
            .map(|i| eos_length(20.0, 8, i).unwrap())
            .collect::<Vec<_>>()[..]
    );
}

#[test]
fn counts_words() {
    assert_eq!(count_tokens("  hello   world\n\tagain "), 3);
    assert_eq!(count_tokens(""), 0);
    assert_eq!(token_ids("a b a").len(), 3);
    assert_eq!(token_ids("a b a")[0], token_ids("a b a")[2]);
}

#[test]
fn parses_chat_request() {
    let body = br#"{"model":"x","messages":[{"role":"system","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"one two three"}]}],
        "max_completion_tokens":5,"max_tokens":9,"stream":true,
        "stream_options":{"include_usage":true,"continuous_usage_stats":true},"ignore_eos":true}"#;
    let r = parse_gen_request(Api::Chat, body).unwrap();
    assert_eq!(r.prompt_tokens, 5);
    assert_eq!(r.max_tokens, 5);
    assert!(r.stream && r.include_usage && r.continuous_usage);
    assert_eq!(r.model.as_deref(), Some("x"));
}

#[test]
fn parses_completions_request_and_defaults() {
    let r = parse_gen_request(Api::Completions, br#"{"prompt":"a b c d"}"#).unwrap();
    assert_eq!((r.prompt_tokens, r.max_tokens), (4, DEFAULT_MAX_TOKENS));
    assert!(!r.stream && !r.include_usage && !r.continuous_usage);
    let r =
        parse_gen_request(Api::Completions, br#"{"prompt":[1,2,3],"max_tokens":null}"#).unwrap();
    assert_eq!(r.prompt_tokens, 3);
    // continuous usage needs include_usage, as in vLLM.
    let r = parse_gen_request(
        Api::Completions,
        br#"{"prompt":"a","stream_options":{"continuous_usage_stats":true}}"#,
    )
    .unwrap();
    assert!(!r.continuous_usage);
}

#[test]
fn rejects_bad_requests() {
    assert!(parse_gen_request(Api::Chat, b"{not json").is_err());
    assert!(parse_gen_request(Api::Chat, br#"{"prompt":"a"}"#).is_err());
    assert!(parse_gen_request(Api::Completions, br#"{"messages":[]}"#).is_err());
    assert!(parse_gen_request(Api::Completions, br#"{"prompt":"a","max_tokens":0}"#).is_err());
    assert!(parse_gen_request(Api::Completions, br#"{"prompt":"a","max_tokens":-1}"#).is_err());
    assert!(parse_gen_request(Api::Completions, br#"{"prompt":["a","b"]}"#).is_err());
    assert!(parse_gen_request(Api::Chat, br#"{"messages":[{"content":5}]}"#).is_err());
}

#[test]
fn parses_tokenize_shapes() {
    assert_eq!(
        parse_tokenize(br#"{"model":"m","prompt":"a b"}"#).unwrap(),
        ("a b".into(), false)
    );
    assert_eq!(
        parse_tokenize(br#"{"content":"a b"}"#).unwrap(),
        ("a b".into(), true)
    );
    let (text, llama) =
        parse_tokenize(br#"{"messages":[{"content":"a b"},{"content":"c"}]}"#).unwrap();
    assert_eq!((count_tokens(&text), llama), (3, false));
    assert!(parse_tokenize(b"{}").is_err());
}

#[test]
fn chat_stream_chunks_are_vllm_shaped() {
    let fmt = ChunkFormat::new(Api::Chat, "chatcmpl-1", 42, "m\"q", &req(true, false));
    let ev = two_token_events(&fmt);
    assert_eq!(ev.len(), 5);
    let role: Value = serde_json::from_str(&ev[0]).unwrap();
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(role["model"], "m\"q");
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(role["choices"][0]["delta"]["content"], "");
    assert!(role.get("usage").is_none());
    let t0: Value = serde_json::from_str(&ev[1]).unwrap();
    assert_eq!(t0["choices"][0]["delta"]["content"], " lorem");
    assert_eq!(t0["choices"][0]["finish_reason"], Value::Null);
    let t1: Value = serde_json::from_str(&ev[2]).unwrap();
    assert_eq!(t1["choices"][0]["delta"]["content"], " ipsum");
    assert_eq!(t1["choices"][0]["finish_reason"], "length");
    let usage: Value = serde_json::from_str(&ev[3]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens":7,"total_tokens":9,"completion_tokens":2})
    );
    assert_eq!(ev[4], "[DONE]");
}

#[test]
fn continuous_usage_on_every_chunk() {
    let fmt = ChunkFormat::new(Api::Chat, "chatcmpl-1", 42, "m", &req(true, true));
    let ev = two_token_events(&fmt);
    let completion: Vec<u64> = ev[..4]
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["usage"]["completion_tokens"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(completion, [0, 1, 2, 2]);
}

#[test]
fn reasoning_tokens_come_first_and_are_reported() {
    let fmt =
        ChunkFormat::new(Api::Chat, "chatcmpl-1", 42, "m", &req(true, true)).with_reasoning(1);
    let ev = two_token_events(&fmt);
    let v: Vec<Value> = ev[..4]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(v[1]["choices"][0]["delta"]["reasoning_content"], " lorem");
    assert!(v[1]["choices"][0]["delta"].get("content").is_none());
    assert_eq!(v[2]["choices"][0]["delta"]["content"], " ipsum");
    let reasoning: Vec<u64> = v
        .iter()
        .map(|v| {
            v["usage"]["completion_tokens_details"]["reasoning_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(reasoning, [0, 1, 1, 1]);
    assert_eq!(v[3]["usage"]["completion_tokens"], 2);
    // The completions API has no reasoning field.
    let fmt = ChunkFormat::new(Api::Completions, "c", 42, "m", &req(true, false)).with_reasoning(1);
    let mut buf = BytesMut::new();
    fmt.emit_into(&mut buf, 0, true);
    assert!(!String::from_utf8(buf.to_vec())
        .unwrap()
        .contains("reasoning"));
}

#[test]
fn completions_stream_has_no_role_chunk() {
    let fmt = ChunkFormat::new(Api::Completions, "cmpl-1", 42, "m", &req(false, false));
    let ev = two_token_events(&fmt);
    assert_eq!(ev.len(), 3);
    let t0: Value = serde_json::from_str(&ev[0]).unwrap();
    assert_eq!(t0["object"], "text_completion");
    assert_eq!(t0["choices"][0]["text"], " lorem");
    let t1: Value = serde_json::from_str(&ev[1]).unwrap();
    assert_eq!(t1["choices"][0]["finish_reason"], "length");
    assert_eq!(ev[2], "[DONE]");
}

#[test]
fn whole_sink_reports_on_last_token() {
    let (tx, mut rx) = oneshot::channel();
    let mut sink = Sink::Whole(Some(tx));
    assert!(sink.emit(0, false));
    assert!(sink.emit(1, true));
    assert_eq!(rx.try_recv().unwrap().completion_tokens, 2);
    let (tx, rx) = oneshot::channel::<Finished>();
    let mut sink = Sink::Whole(Some(tx));
    drop(rx);
    assert!(sink.is_closed());
    assert!(!sink.emit(0, false));
}

#[test]
fn completion_body_shape() {
    let v = completion_body(Api::Chat, "chatcmpl-1", 1, "m", 3, 2);
    assert_eq!(v["choices"][0]["message"]["content"], " lorem ipsum");
    assert_eq!(v["usage"]["total_tokens"], 5);
}
