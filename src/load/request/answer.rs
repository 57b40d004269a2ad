//! One answer from either HTTP client (the lean HTTP/1.1 reader or reqwest),
//! read the same way: its body a read at a time, its error body bounded.

use super::*;

/// A response status and its body, from either HTTP client.
pub(super) type Sent = Result<(u16, Answer), (ErrorClass, String)>;

pub(super) async fn send_h1(
    h1: &Arc<Connections>,
    body: &[u8],
    id: u64,
    attempt: u8,
    probe: bool,
) -> Sent {
    let request_id = request_id_header(id, attempt, probe);
    let request_id = request_id.to_str().unwrap_or("tokbench");
    match h1.send(body, request_id, attempt > 0).await {
        Ok(response) => Ok((response.status, Answer::H1(response))),
        Err(e) => Err((e.class, e.message)),
    }
}

pub(super) async fn send_reqwest(
    target: &Target,
    body: &Bytes,
    id: u64,
    attempt: u8,
    probe: bool,
) -> Sent {
    let mut builder = target
        .client
        .post(target.url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(X_REQUEST_ID, request_id_header(id, attempt, probe))
        .body(body.clone());
    if let Some(auth) = &target.authorization {
        builder = builder.header(AUTHORIZATION, auth.clone());
    }
    match builder.send().await {
        Ok(response) => Ok((
            response.status().as_u16(),
            Answer::Reqwest {
                stream: Box::pin(response.bytes_stream()),
                waiting: None,
            },
        )),
        Err(e) => {
            let class = classify_transport_error(&e);
            Err((class, transport_message(&e, class)))
        }
    }
}

/// A response body being read: by the lean HTTP/1.1 client, or by reqwest
/// (TLS, HTTP/2, credentials in the URL).
pub(super) enum Answer {
    H1(h1::Response),
    Reqwest {
        stream: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
        /// A read that `consume` has not handed on yet.
        waiting: Option<Bytes>,
    },
}

impl Answer {
    /// Wait for the next bytes of the body, or its end.
    pub(super) fn poll_body(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Polled, (ErrorClass, String)>> {
        match self {
            Answer::H1(response) => response.poll_body(cx).map_err(|e| (e.class, e.message)),
            Answer::Reqwest { stream, waiting } => {
                if waiting.is_some() {
                    return Poll::Ready(Ok(Polled::Bytes));
                }
                match stream.poll_next_unpin(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(None) => Poll::Ready(Ok(Polled::End)),
                    Poll::Ready(Some(Ok(bytes))) => {
                        *waiting = Some(bytes);
                        Poll::Ready(Ok(Polled::Bytes))
                    }
                    Poll::Ready(Some(Err(e))) => {
                        let class = match classify_transport_error(&e) {
                            ErrorClass::Connect | ErrorClass::ConnectRefused => {
                                ErrorClass::ConnectionClosed
                            }
                            other => other,
                        };
                        Poll::Ready(Err((class, transport_message(&e, class))))
                    }
                }
            }
        }
    }

    /// When the bytes `poll_body` found were read (the lean reader only).
    pub(super) fn read_times(&self) -> Option<h1::ReadTimes> {
        match self {
            Answer::H1(response) => response.read_times(),
            Answer::Reqwest { .. } => None,
        }
    }

    /// How long opening the connection took (zero on a reused one); `None`
    /// from reqwest, whose pool does not say.
    pub(super) fn connect_time(&self) -> Option<Duration> {
        match self {
            Answer::H1(response) => Some(response.connect_time()),
            Answer::Reqwest { .. } => None,
        }
    }

    /// When the request left by the kernel's transmit timestamp (the lean
    /// reader with `--tx-clock kernel` only).
    pub(super) fn departed(&self) -> Option<Instant> {
        match self {
            Answer::H1(response) => response.departed(),
            Answer::Reqwest { .. } => None,
        }
    }

    /// Hand the bytes `poll_body` found to `sink` (the body's payload only).
    pub(super) fn consume<E>(
        &mut self,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Consumed, BodyError<E>> {
        match self {
            Answer::H1(response) => response.consume(sink),
            Answer::Reqwest { waiting, .. } => {
                if let Some(bytes) = waiting.take() {
                    sink(&bytes).map_err(BodyError::Sink)?;
                }
                // reqwest says the end at the next poll.
                Ok(Consumed::More)
            }
        }
    }
}

/// One line for an HTTP error answer: the message in its body, or what
/// became of a body that did not come whole within `limit` (a half-sent
/// `{"error":` is no message).
pub(super) async fn http_error_message(
    status: u16,
    answer: &mut Answer,
    limit: Duration,
) -> String {
    let (body, complete) = read_error_body(answer, limit).await;
    if complete {
        error_message_from_body(status, &body)
    } else if body.is_empty() {
        format!("HTTP {status}, no error body within {}", seconds(limit))
    } else {
        format!(
            "HTTP {status}, error body cut short: {}",
            error_message_from_body(status, &body)
        )
    }
}

/// An HTTP error's message, with the backend to use when the answer says
/// the request went to another API than the server speaks: TGI's native
/// `/generate_stream` at a server without it, an OpenAI route at a server
/// that has only TGI's native API, or an OpenAI body at TGI's native route
/// (its JSON extractor misses `inputs`). A 404 that names a model is about
/// the model, not the route.
pub(super) fn with_backend_hint(wire: Wire, status: u16, message: String) -> String {
    let about_model = message.to_ascii_lowercase().contains("model");
    let hint = match (wire, status) {
        (Wire::Tgi, 404 | 405) if !about_model => Some(
            "no TGI /generate_stream here: an OpenAI-compatible server takes --backend \
             openai-chat, Ollama's native API --backend ollama-chat",
        ),
        (Wire::OpenAi(_), 404 | 405) if !about_model => Some(
            "no such OpenAI route here: a server with only TGI's native API \
             (/generate_stream) takes --backend tgi-generate",
        ),
        (Wire::OpenAi(_) | Wire::Ollama(_), 422) if message.contains("`inputs`") => Some(
            "this is TGI's native route: use --backend tgi-generate (or TGI's \
             /v1/chat/completions with the default backend)",
        ),
        _ => None,
    };
    match hint {
        Some(hint) => format!("{message}; {hint}"),
        None => message,
    }
}

/// The error body, at most `ERROR_BODY_LIMIT` bytes of it, and whether it
/// came whole (or filled the limit) rather than stopping or breaking off.
pub(super) async fn read_error_body(answer: &mut Answer, limit: Duration) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    let read = async {
        loop {
            match poll_fn(|cx| answer.poll_body(cx)).await {
                Ok(Polled::Bytes) => {
                    let consumed = answer.consume(|bytes| {
                        let room = ERROR_BODY_LIMIT.saturating_sub(body.len());
                        body.extend_from_slice(&bytes[..bytes.len().min(room)]);
                        Ok::<(), ()>(())
                    });
                    match consumed {
                        Ok(Consumed::More) if body.len() < ERROR_BODY_LIMIT => {}
                        Ok(_) => return true,
                        Err(_) => return false,
                    }
                }
                Ok(Polled::End) => return true,
                Err(_) => return false,
            }
        }
    };
    let complete = tokio::time::timeout(limit, read).await.unwrap_or(false);
    (body, complete)
}
