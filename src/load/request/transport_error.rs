//! Transport failures in one class and one plain line.

use super::*;

/// Seconds for a message: `0.3 s`, `60 s`.
pub(super) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 || s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{} s", (s * 100.0).round() / 100.0)
    }
}

/// Name the failure by the innermost error that says what happened.
pub(crate) fn classify_transport_error(error: &reqwest::Error) -> ErrorClass {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if let Some(class) = crate::record::client_limit_class(io) {
                return class;
            }
            match io.kind() {
                ConnectionRefused => return ErrorClass::ConnectRefused,
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
                    return ErrorClass::ConnectionClosed
                }
                TimedOut => return ErrorClass::Timeout,
                _ => {}
            }
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return ErrorClass::ConnectionClosed;
            }
        }
        source = e.source();
    }
    if error.is_timeout() {
        ErrorClass::Timeout
    } else if error.is_connect() {
        ErrorClass::Connect
    } else {
        ErrorClass::ConnectionClosed
    }
}

/// One line for a transport failure, from the innermost error's words.
pub(crate) fn transport_message(error: &reqwest::Error, class: ErrorClass) -> String {
    // reqwest's own text names the URL, credentials and all.
    let mut innermost = match error.url() {
        Some(url) => crate::redact::url_in(error.to_string(), url),
        None => error.to_string(),
    };
    let mut source = error.source();
    while let Some(e) = source {
        innermost = e.to_string();
        source = e.source();
    }
    match class {
        ErrorClass::ConnectRefused => say_once("connection refused", &innermost),
        ErrorClass::ConnectionClosed => format!("connection closed mid-request ({innermost})"),
        ErrorClass::ClientFdLimit | ErrorClass::ClientPortsExhausted => {
            crate::record::client_limit_message(class, &innermost)
        }
        _ => innermost,
    }
}

/// `what (detail)`, or `what` and the rest of `detail` when `detail` starts
/// with the same words: `connection refused (os error 111)`, not
/// `connection refused (Connection refused (os error 111))`.
pub(crate) fn say_once(what: &str, detail: &str) -> String {
    match detail.get(..what.len()) {
        Some(head) if head.eq_ignore_ascii_case(what) => {
            format!("{what}{}", &detail[what.len()..])
        }
        _ => format!("{what} ({detail})"),
    }
}
