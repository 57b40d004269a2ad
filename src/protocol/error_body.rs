//! The one-line message of a server error: from an HTTP error body
//! (`error_message_from_body`, every engine's shapes) and for the decoders'
//! own messages (`one_line`, `snippet`).

use serde_json::Value;

/// Longest message kept from a server error, in characters.
const MAX_MESSAGE_CHARS: usize = 200;
/// How much of an undecodable chunk goes into the error message.
const SNIPPET_CHARS: usize = 60;

/// One line, trimmed, control characters as spaces, at most
/// `MAX_MESSAGE_CHARS` characters (then `...`).
pub(crate) fn one_line(s: &str) -> String {
    cap_chars(s.trim(), MAX_MESSAGE_CHARS)
}

fn cap_chars(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 3));
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.truncate(out.trim_end().len());
            out.push_str("...");
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

pub(super) fn snippet(payload: &str) -> String {
    format!("{:?}", cap_chars(payload.trim(), SNIPPET_CHARS))
}

/// A one-line message from an HTTP error body: `{"error":{"message":..}}`,
/// `{"error":".."}`, `{"object":"error","message":..}`, `{"detail":..}`
/// (FastAPI, including its list of validation errors), an HTML page's
/// `<title>`, else the body's first non-blank line; `HTTP <status>` for an
/// empty body. Trimmed, at most ~200 characters; bad UTF-8 is replaced, never
/// a panic.
pub(crate) fn error_message_from_body(status: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = message_from_json(&v) {
            let m = one_line(&m);
            if !m.is_empty() {
                return m;
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    if let Some(title) = html_title(&text) {
        return one_line(title);
    }
    match text.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => one_line(line),
        None => format!("HTTP {status}"),
    }
}

fn message_from_json(v: &Value) -> Option<String> {
    let obj = v.as_object()?;
    let nonblank = |v: Option<&Value>| -> Option<String> {
        v.and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned)
    };
    match obj.get("error") {
        Some(Value::String(s)) if !s.trim().is_empty() => return Some(s.clone()),
        Some(Value::Object(e)) => {
            if let Some(m) = nonblank(e.get("message")).or_else(|| nonblank(e.get("type"))) {
                return Some(m);
            }
        }
        _ => {}
    }
    if let Some(m) = nonblank(obj.get("message")) {
        return Some(m);
    }
    match obj.get("detail") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(Value::Array(items)) => {
            let parts: Vec<String> = items.iter().filter_map(detail_item).collect();
            (!parts.is_empty()).then(|| parts.join("; "))
        }
        Some(Value::Object(o)) => nonblank(o.get("message")).or_else(|| nonblank(o.get("msg"))),
        _ => None,
    }
}

/// One FastAPI validation error: `{"loc":["body","max_tokens"],"msg":"..."}`
/// -> `body.max_tokens: ...`.
fn detail_item(item: &Value) -> Option<String> {
    if let Some(s) = item.as_str() {
        return Some(s.to_owned());
    }
    let msg = item.get("msg").and_then(Value::as_str)?;
    let loc: Vec<String> = item
        .get("loc")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .map(|p| match p {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(if loc.is_empty() {
        msg.to_owned()
    } else {
        format!("{}: {msg}", loc.join("."))
    })
}

fn html_title(text: &str) -> Option<&str> {
    let mut head = text.len().min(4096);
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    // ASCII lowercasing keeps byte offsets, so they index `text` too.
    let lower = text[..head].to_ascii_lowercase();
    let start = lower.find("<title>")? + "<title>".len();
    let end = start + lower[start..].find("</title>")?;
    let title = text.get(start..end)?.trim();
    (!title.is_empty()).then_some(title)
}
