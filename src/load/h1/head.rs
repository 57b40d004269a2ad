//! The response head: status, framing and keep-alive, parsed with `httparse`.

use super::*;

/// How the body's end is known.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Framing {
    Length(u64),
    Chunked(Chunked),
    /// Until the server closes the connection.
    Close,
    /// Over.
    Done,
}

/// The head at the start of `bytes` and its length, None if it is not all
/// there yet.
pub(super) fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, H1Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let used = match response.parse(bytes) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(H1Error::new(
                ErrorClass::MalformedStream,
                format!("not an HTTP/1.1 response ({e})"),
            ))
        }
    };
    let status = response.code.unwrap_or(0);
    let http10 = response.version == Some(0);
    let mut length = None;
    let mut chunked = false;
    let mut te = false;
    let mut saw_close = false;
    let mut saw_keep_alive = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(h.value).ok().map(str::trim);
            let value = value.filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
            match value.and_then(|v| v.parse::<u64>().ok()) {
                Some(n) if length.is_none_or(|l| l == n) => length = Some(n),
                _ => {
                    return Err(H1Error::new(
                        ErrorClass::MalformedStream,
                        "invalid Content-Length in the response",
                    ))
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            chunked = h
                .value
                .split(|&b| b == b',')
                .next_back()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    saw_close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    saw_keep_alive = true;
                }
            }
        }
    }
    // RFC 9112 6.1: TE with CL (or in HTTP/1.0) is faulty framing: close
    // after it. 101: the connection no longer speaks HTTP/1.1.
    let mut close = saw_close
        || (http10 && !saw_keep_alive)
        || status == 101
        || (te && (length.is_some() || http10));
    let framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Length(0)
    } else if chunked {
        // Transfer-Encoding wins over Content-Length (RFC 9112 6.3).
        Framing::Chunked(Chunked::default())
    } else if te {
        // RFC 9112 6.3 (4): not chunked last: to the connection's end.
        close = true;
        Framing::Close
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        close = true;
        Framing::Close
    };
    Ok(Some((
        Head {
            status,
            framing,
            keep_alive: !close,
        },
        used,
    )))
}
