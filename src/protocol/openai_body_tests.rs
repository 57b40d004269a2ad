//! The bodies that are not streams: error bodies (`error_message_from_body`)
//! and the request body (`request_body`).

use super::*;

// ---------------------------------------------------------------------------
// error_message_from_body.

#[test]
fn error_messages_from_http_bodies() {
    let m = |status, body: &[u8]| error_message_from_body(status, body);
    assert_eq!(
        m(400, br#"{"error":{"message":"max_tokens is too large","type":"invalid_request_error","param":"max_tokens","code":null}}"#),
        "max_tokens is too large"
    );
    // Ollama native and /v1.
    assert_eq!(
        m(
            503,
            br#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#
        ),
        "server busy, please try again.  maximum pending requests exceeded"
    );
    assert_eq!(
        m(503, br#"{"error":{"message":"server busy, please try again.  maximum pending requests exceeded","type":"api_error","param":null,"code":null}}"#),
        "server busy, please try again.  maximum pending requests exceeded"
    );
    // TGI.
    assert_eq!(
        m(
            429,
            br#"{"error":"Model is overloaded","error_type":"overloaded"}"#
        ),
        "Model is overloaded"
    );
    // Older vLLM.
    assert_eq!(
        m(400, br#"{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}"#),
        "The model `x` does not exist."
    );
    // FastAPI.
    assert_eq!(m(404, br#"{"detail":"Not Found"}"#), "Not Found");
    assert_eq!(
        m(422, br#"{"detail":[{"loc":["body","max_tokens"],"msg":"value is not a valid integer","type":"type_error.integer"},{"loc":["body",0],"msg":"bad"}]}"#),
        "body.max_tokens: value is not a valid integer; body.0: bad"
    );
    // llama.cpp's 503 while loading.
    assert_eq!(
        m(
            503,
            br#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#
        ),
        "Loading model"
    );
    // JSON without a message: its first line.
    assert_eq!(m(500, b"{\"foo\":1}\n"), "{\"foo\":1}");
    // Plain text, HTML, empty.
    assert_eq!(
        m(502, b"\n  upstream connect error  \r\nmore\n"),
        "upstream connect error"
    );
    assert_eq!(
        m(
            502,
            b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body></body></html>"
        ),
        "502 Bad Gateway"
    );
    // A long page whose 4096th byte falls inside a character.
    let page = format!("<title>Busy</title>{}", "é".repeat(3000));
    assert_eq!(m(503, page.as_bytes()), "Busy");
    assert_eq!(m(503, b""), "HTTP 503");
    assert_eq!(m(500, b" \r\n\t\n"), "HTTP 500");
    // Bad UTF-8 never panics.
    assert_eq!(m(500, b"\xff\xfe broken"), "\u{fffd}\u{fffd} broken");
    // Long bodies are capped on a character boundary.
    let long = "ü".repeat(1000);
    let msg = m(500, long.as_bytes());
    assert_eq!(msg.chars().count(), 203);
    assert!(msg.ends_with("..."));
}

// ---------------------------------------------------------------------------
// request_body.

fn body(api: Api, ignore_eos: bool, extra: Option<Value>) -> Value {
    let extra = extra.map(|v| v.as_object().unwrap().clone());
    let bytes = request_body(api, "m", "hello \"you\"", 128, ignore_eos, extra.as_ref());
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn request_body_chat() {
    assert_eq!(
        body(Api::Chat, true, None),
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hello \"you\""}],
            "max_tokens": 128,
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true},
            "ignore_eos": true,
        })
    );
}

#[test]
fn request_body_completions_without_ignore_eos() {
    let b = body(Api::Completions, false, None);
    assert_eq!(
        b,
        json!({
            "model": "m",
            "prompt": "hello \"you\"",
            "max_tokens": 128,
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true},
        })
    );
    assert!(b.get("ignore_eos").is_none());
    assert!(b.get("messages").is_none());
}

#[test]
fn request_body_extra_body_merges_last() {
    let b = body(
        Api::Chat,
        true,
        Some(json!({
            "temperature": 0.7,
            "ignore_eos": false,
            "top_k": 1,
            "stream_options": {"include_usage": true},
            "chat_template_kwargs": {"enable_thinking": false},
        })),
    );
    assert_eq!(b["temperature"], json!(0.7));
    assert_eq!(b["ignore_eos"], json!(false));
    assert_eq!(b["top_k"], json!(1));
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["chat_template_kwargs"], json!({"enable_thinking": false}));
    assert_eq!(b["model"], json!("m"));
    assert_eq!(b["stream"], json!(true));
}
