//! The lean reader against hand-made bytes and loopback servers.

use super::*;
use tokio::io::AsyncWriteExt;

/// Decode `input` cut into pieces of `step` bytes; the data and whether
/// the body ended.
fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, bool), String> {
    let mut decoder = Chunked::default();
    let mut data = Vec::new();
    let mut ended = false;
    for piece in input.chunks(step) {
        let (rest, done) = decoder
            .decode(piece, &mut |b: &[u8]| {
                data.extend_from_slice(b);
                Ok::<(), ()>(())
            })
            .map_err(|e| match e {
                BodyError::Transport(e) => e.message,
                BodyError::Sink(()) => "sink".into(),
            })?;
        assert!(rest.is_empty(), "bytes after the end: {rest:?}");
        ended = done;
    }
    Ok((data, ended))
}

#[test]
fn chunked_bodies_decode_however_they_are_split() {
    let body = b"5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";
    for step in 1..=body.len() {
        let (data, ended) = decode_in_steps(body, step).unwrap();
        assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
        assert!(ended, "step {step}");
    }
    // Bare line feeds, as some servers write them.
    let (data, ended) = decode_in_steps(b"3\nabc\n0\n\n", 4).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"abc"[..], true));
    // Not over yet: no last chunk.
    let (data, ended) = decode_in_steps(b"3\r\nabc\r\n", 64).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"abc"[..], false));
}

#[test]
fn bad_chunked_framing_is_an_error_not_a_panic() {
    for (body, says) in [
        (&b"zz\r\n"[..], "no chunk size"),
        (b"3\r\nabcd\r\n", "longer than its size"),
        (b"ffffffffffffffff\r\n", "too large"),
        (b"3\rx", "no line feed"),
    ] {
        let e = decode_in_steps(body, 64).unwrap_err();
        assert!(e.contains(says), "{body:?}: {e}");
    }
}

#[test]
fn the_body_end_leaves_what_follows() {
    let mut decoder = Chunked::default();
    let (rest, done) = decoder
        .decode(b"0\r\n\r\nHTTP/1.1", &mut |_: &[u8]| Ok::<(), ()>(()))
        .unwrap();
    assert!(done);
    assert_eq!(rest, b"HTTP/1.1");
}

#[test]
fn heads_say_status_framing_and_keep_alive() {
    let head = |text: &str| parse_head(text.as_bytes()).unwrap().unwrap().0;
    let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
    assert_eq!(h.status, 200);
    assert_eq!(h.framing, Framing::Chunked(Chunked::default()));
    assert!(h.keep_alive);
    let h = head("HTTP/1.1 500 Internal\r\nContent-Length: 12\r\nConnection: close\r\n\r\n");
    assert_eq!((h.status, h.keep_alive), (500, false));
    assert_eq!(h.framing, Framing::Length(12));
    // No length and not chunked: the body runs to the connection's end.
    let h = head("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
    assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
    let h = head("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n");
    assert!(!h.keep_alive);
    let h = head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n");
    assert!(h.keep_alive);
    // Chunked wins over a length.
    let h = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(h.framing, Framing::Chunked(Chunked::default()));
    assert_eq!(
        head("HTTP/1.1 204 No Content\r\n\r\n").framing,
        Framing::Length(0)
    );
    // Not all there yet.
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nconte").unwrap().is_none());
    // Length of the head.
    let (_, used) = parse_head(b"HTTP/1.1 200 OK\r\n\r\ndata").unwrap().unwrap();
    assert_eq!(used, 19);
}

#[test]
fn malformed_heads_are_one_line_errors() {
    for text in [
        "SSH-2.0-OpenSSH\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ] {
        let e = parse_head(text.as_bytes()).unwrap_err();
        assert_eq!(e.class, ErrorClass::MalformedStream, "{text:?}");
        assert!(!e.message.contains('\n'));
    }
}

#[test]
fn only_plain_http_without_credentials_is_taken() {
    let url = |u: &str| reqwest::Url::parse(u).unwrap();
    let c = Connections::for_url(
        &url("http://127.0.0.1:8000/v1/chat/completions?a=1"),
        Some("Bearer k"),
        4,
    )
    .unwrap();
    let head = String::from_utf8(c.head.clone()).unwrap();
    assert!(head.starts_with("POST /v1/chat/completions?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"));
    assert!(head.contains("authorization: Bearer k\r\n"));
    assert_eq!(c.authority, "127.0.0.1:8000");
    assert!(
        !format!("{c:?}").contains("Bearer"),
        "the key is not in Debug"
    );
    let c = Connections::for_url(&url("http://[::1]/v1/completions"), None, 4).unwrap();
    assert_eq!(c.authority, "[::1]:80");
    assert!(Connections::for_url(&url("https://example.com/v1"), None, 4).is_none());
    assert!(Connections::for_url(&url("http://u:p@example.com/v1"), None, 4).is_none());
    assert!(Connections::for_url(&url("http://h/v1"), Some("Bearer a\r\nX: y"), 4).is_none());
}

/// A loopback server answering every request on a connection with
/// `answer`, counting the connections it accepted.
async fn server(answer: &'static [u8]) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    // Each test request has a 2-byte body after its head.
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        if seen.len() < end + 6 {
                            break;
                        }
                        seen.drain(..end + 6);
                        if socket.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, accepted)
}

/// The lean client for a test server's URL.
fn connections(url: &str, max_idle: usize) -> Arc<Connections> {
    let url = reqwest::Url::parse(url).unwrap();
    Arc::new(Connections::for_url(&url, None, max_idle).unwrap())
}

/// The whole body of one request, and the response's status.
async fn fetch(c: &Arc<Connections>) -> (u16, Vec<u8>) {
    let mut response = c.send(b"{}", "tokbench-test-1", false).await.unwrap();
    let body = read_out(&mut response).await;
    (response.status, body)
}

/// A response's body to its end (which hands the connection back to the
/// pool).
async fn read_out(response: &mut Response) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        match std::future::poll_fn(|cx| response.poll_body(cx))
            .await
            .unwrap()
        {
            Polled::End => break,
            Polled::Bytes => {
                let consumed = response
                    .consume(|b| {
                        body.extend_from_slice(b);
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                if consumed == Consumed::End {
                    break;
                }
            }
        }
    }
    body
}

#[tokio::test]
async fn keep_alive_connections_are_reused_and_closed_ones_are_not() {
    use std::sync::atomic::Ordering;
    for (answer, want, accepts) in [
        (
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"[..],
            &b"hi"[..],
            1,
        ),
        (
            b"HTTP/1.1 503 Busy\r\ncontent-length: 4\r\n\r\nfull",
            b"full",
            1,
        ),
        (
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
            b"ok",
            3,
        ),
    ] {
        let (base, accepted) = server(answer).await;
        let c = connections(&base, 4);
        for _ in 0..3 {
            let (status, body) = fetch(&c).await;
            assert!(status == 200 || status == 503);
            assert_eq!(body, want);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), accepts, "{answer:?}");
    }
}

/// The connect time of each request: what opening its connection took on
/// the first, 0 on the requests a kept-alive connection carried after it,
/// and again a connect on each request of a server that closes.
#[tokio::test]
async fn a_reused_connection_connects_in_zero() {
    for (answer, reused) in [
        (&b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"[..], true),
        (
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
            false,
        ),
    ] {
        let (base, _) = server(answer).await;
        let c = connections(&base, 4);
        for i in 0..3 {
            let asked = Instant::now();
            let mut response = c.send(b"{}", "tokbench-test-1", false).await.unwrap();
            let whole = asked.elapsed();
            read_out(&mut response).await;
            let connect = response.connect_time();
            if i > 0 && reused {
                assert_eq!(connect, Duration::ZERO, "request {i}");
            } else {
                // A loopback connect: more than nothing, within the send.
                assert!(
                    connect > Duration::ZERO && connect <= whole,
                    "request {i}: {connect:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn nothing_listening_is_connect_refused_in_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let c = connections(&url, 1);
    let e = c.send(b"{}", "id", false).await.err().unwrap();
    assert_eq!(e.class, ErrorClass::ConnectRefused);
    assert_eq!(e.message.matches("refused").count(), 1, "{}", e.message);
}

/// With kernel receive times on, a read the client makes late carries
/// the time the bytes arrived, not the time it read them; with
/// `RxClock::User` it carries none. The server writes the body on the
/// client's word and says when it has; the client then waits 50 ms
/// before reading, so the bytes were in its socket for at least that.
#[tokio::test]
async fn a_late_read_carries_the_kernel_time_of_its_bytes() {
    use tokio::sync::oneshot;
    for clock in [RxClock::Kernel, RxClock::User] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let (written_tx, written_rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request_head(&mut socket).await;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
                .await
                .unwrap();
            let _ = go_rx.await;
            socket.write_all(b"ok").await.unwrap();
            let _ = written_tx.send(());
            hold_open(&mut socket).await;
        });
        let url = reqwest::Url::parse(&url).unwrap();
        let c = Arc::new(
            Connections::for_url(&url, None, 1)
                .unwrap()
                .with_rx_clock(clock),
        );
        // Stamping comes on from a deferred kernel work item: wait for
        // it (a run's preflight and warmup do), not for a fixed time.
        assert_eq!(c.wait_for_stamping(), clock == RxClock::Kernel);
        let mut response = c.send(b"{}", "id", false).await.unwrap();
        let asked = Instant::now();
        go_tx.send(()).unwrap();
        written_rx.await.unwrap();
        let written = Instant::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let polled = std::future::poll_fn(|cx| response.poll_body(cx)).await;
        assert_eq!(polled.unwrap(), Polled::Bytes);
        let t = response.read_times().expect("times of the read");
        match clock {
            RxClock::Kernel => {
                let k = t.kernel.expect("a kernel time on Linux");
                // The bytes arrived after the client asked for them and
                // before it heard they were written.
                assert!(
                    k >= asked && k <= written,
                    "{k:?} not in [{asked:?}, {written:?}]"
                );
                assert!(t.read_at.duration_since(k) >= Duration::from_millis(50));
            }
            RxClock::User => assert_eq!(t.kernel, None),
        }
    }
}

/// With transmit timestamps on, each request's departure is the kernel's
/// time of its last byte: after its write began, before the server had
/// read it. A second request on the same (pooled) connection gets its own
/// (the `OPT_ID` key counts bytes), and `TxClock::User` gives none. With
/// kernel receive times on or off: the time comes back in another message.
#[tokio::test]
async fn a_request_departs_at_the_kernel_time_of_its_last_byte() {
    use std::sync::Mutex as StdMutex;
    for (clock, rx) in [
        (TxClock::Kernel, RxClock::Kernel),
        (TxClock::Kernel, RxClock::User),
        (TxClock::User, RxClock::Kernel),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
        // When the server had read each request whole.
        let heard = Arc::new(StdMutex::new(Vec::new()));
        let heard_server = Arc::clone(&heard);
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            for k in 0..2 {
                read_request_whole(&mut socket, 3000 * (k + 1)).await;
                heard_server.lock().unwrap().push(Instant::now());
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
            }
            hold_open(&mut socket).await;
        });
        let url = reqwest::Url::parse(&url).unwrap();
        let c = Arc::new(
            Connections::for_url(&url, None, 1)
                .unwrap()
                .with_rx_clock(rx)
                .with_tx_clock(clock),
        );
        let mut departures = Vec::new();
        for k in 0..2 {
            let asked = Instant::now();
            // A body big enough that the request is several segments.
            let body = vec![b' '; 3000 * (k + 1)];
            let mut response = c.send(&body, "id", false).await.unwrap();
            let answered = Instant::now();
            departures.push((asked, response.departed(), answered));
            read_out(&mut response).await;
        }
        let heard = heard.lock().unwrap().clone();
        assert_eq!(heard.len(), 2);
        for (k, (asked, departed, answered)) in departures.into_iter().enumerate() {
            match clock {
                TxClock::Kernel => {
                    let d = departed.expect("a transmit time on Linux");
                    assert!(
                        d >= asked && d <= heard[k] && d <= answered,
                        "request {k} ({rx:?}): {d:?} not in [{asked:?}, {:?}]",
                        heard[k]
                    );
                }
                TxClock::User => assert_eq!(departed, None),
            }
        }
    }
}

/// Read one request, head and a `body`-byte body, off `socket`.
/// The server's side of a test connection kept open until the client
/// closes it (or the test's runtime ends), rather than for a fixed time: a
/// close from this side is what some tests must not see early.
async fn hold_open(socket: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut sink = [0u8; 1024];
    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
}

async fn read_request_whole(socket: &mut tokio::net::TcpStream, body: usize) {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            if seen.len() >= end + 4 + body {
                assert_eq!(seen.len(), end + 4 + body, "one request at a time");
                return;
            }
        }
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed mid-request");
        seen.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn the_departure_is_the_device_hand_off_of_the_last_byte() {
    use rxtime::{TxStamp, TSTAMP_SCHED, TSTAMP_SND};
    let s = |key, kind, realtime_ns| TxStamp {
        key,
        kind,
        realtime_ns,
    };
    // Stamps of an earlier send (key 99), then this one's: SND wins over
    // SCHED whichever comes first; SCHED alone is the fallback.
    let stamps = [
        s(99, TSTAMP_SND, 1),
        s(499, TSTAMP_SCHED, 10),
        s(499, TSTAMP_SND, 12),
    ];
    assert_eq!(conn::departure_stamp(stamps, 499), Some(12));
    assert_eq!(
        conn::departure_stamp([s(499, TSTAMP_SND, 12), s(499, TSTAMP_SCHED, 10)], 499),
        Some(12)
    );
    assert_eq!(
        conn::departure_stamp([s(499, TSTAMP_SCHED, 10)], 499),
        Some(10)
    );
    // Another byte's stamps, or an unknown kind (ACK): none.
    assert_eq!(
        conn::departure_stamp([s(98, TSTAMP_SND, 1), s(499, 2, 5)], 499),
        None
    );
}

// Found in review: idle connections, early answers, odd heads.

/// A server that answers the first request on each connection with
/// `first`, then runs `after` on the socket.
async fn one_shot_server<F, Fut>(
    first: &'static [u8],
    after: F,
) -> (String, Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let after = Arc::new(after);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let after = Arc::clone(&after);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let r = socket.read(&mut buf).await.unwrap_or(0);
                    if r == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..r]);
                    if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        if seen.len() >= end + 6 {
                            break;
                        }
                    }
                }
                if n == 0 {
                    socket.write_all(first).await.unwrap();
                    after(socket).await;
                } else {
                    socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await
                        .unwrap();
                    hold_open(&mut socket).await;
                }
            });
        }
    });
    (url, accepted)
}

/// Wait (up to 5 s) until the pooled connection has something to read:
/// the server's close or its stray bytes have reached the client's
/// socket, the state `take_idle` must see through. (Instead of a fixed
/// sleep, which a loaded machine can outlast.) A peek, not the socket's
/// readiness: that is still set from the last read, which did not drain
/// the socket to `WouldBlock`. The peek leaves what it saw in place: the
/// end (0), the bytes, or a reset (an error) all count.
async fn until_the_idle_connection_is_readable(c: &Connections) {
    let ready = std::future::poll_fn(|cx| {
        let idle = c.idle.lock().unwrap();
        let entry = idle
            .first()
            .expect("the first answer's connection is pooled");
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        entry.conn.stream.poll_peek(cx, &mut buf).map(|_| ())
    });
    tokio::time::timeout(Duration::from_secs(5), ready)
        .await
        .expect("the server's close or bytes never reached the pooled connection");
}

/// uvicorn (vLLM, SGLang) and cpp-httplib (llama-server) close idle
/// keep-alive connections after 5 s; the pool keeps them 90 s and
/// hands a dead one out: the send fails and the caller must retry
/// (record.retries += 1, TTFB includes the failed round trip).
#[tokio::test]
async fn a_pooled_connection_the_server_closed_is_not_handed_out() {
    let (base, _) = one_shot_server(
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        |s| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(s)
        },
    )
    .await;
    let c = connections(&base, 4);
    assert_eq!(fetch(&c).await, (200, b"ok".to_vec()));
    until_the_idle_connection_is_readable(&c).await;
    let r = c.send(b"{}", "id", false).await;
    assert!(
        r.is_ok(),
        "the dead pooled connection was used: {:?}",
        r.err()
    );
}

/// Bytes a server sent on an idle connection (Node's 408 on its
/// keep-alive timeout, or junk after a body) are taken as the next
/// request's answer.
#[tokio::test]
async fn bytes_that_arrived_on_an_idle_connection_are_not_the_next_answer() {
    let (base, _) = one_shot_server(
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        |mut s| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = s.write_all(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            hold_open(&mut s).await;
        },
    ).await;
    let c = connections(&base, 4);
    assert_eq!(fetch(&c).await, (200, b"ok".to_vec()));
    until_the_idle_connection_is_readable(&c).await;
    let (status, _) = fetch(&c).await;
    assert_eq!(
        status, 200,
        "a stale 408 was taken as this request's answer"
    );
}

/// A server that answers early (401 from vLLM's --api-key middleware,
/// 413) without reading a large body: the answer is read whether the
/// server closes at once (the write fails with a reset, and the answer
/// is read after it) or keeps the socket open without reading (the
/// write would block until --request-timeout; it is read meanwhile).
/// Each half fails when its branch of `send` / `write_request` is cut.
#[tokio::test]
async fn an_early_answer_to_a_large_upload_is_read() {
    for close in [true, false] {
        let base = one_shot_server_head_only(close).await;
        let c = connections(&base, 4);
        let body = vec![b'x'; 64 << 20];
        let r = tokio::time::timeout(Duration::from_secs(5), c.send(&body, "id", true)).await;
        match r {
            Ok(Ok(resp)) => assert_eq!(resp.status, 413, "close: {close}"),
            Ok(Err(e)) => panic!("early 413 lost (close: {close}): {e:?}"),
            Err(_) => panic!("hung (close: {close}): the early answer is never read"),
        }
    }
}

/// Read a request head off `socket` (a test server's side of it).
async fn read_request_head(socket: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
}

async fn one_shot_server_head_only(close: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request_head(&mut socket).await;
        socket
            .write_all(
                b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        if close {
            drop(socket);
        } else {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    url
}

#[test]
fn odd_heads_close_the_connection() {
    let head = |text: &str| parse_head(text.as_bytes()).unwrap().unwrap().0;
    let mut bad = Vec::new();
    // HTTP/1.0 with both tokens: close must win whatever the order.
    if head("HTTP/1.0 200 OK\r\nConnection: close, keep-alive\r\nContent-Length: 2\r\n\r\n")
        .keep_alive
    {
        bad.push("1.0 close,keep-alive kept alive");
    }
    // 101: the connection no longer speaks HTTP/1.1; it must not be pooled.
    if head("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n")
        .keep_alive
    {
        bad.push("101 kept alive");
    }
    // RFC 9112 6.3(3): TE present, chunked not last => read to close.
    if head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n").framing
        != Framing::Close
    {
        bad.push("TE gzip + CL used CL");
    }
    // RFC 9112 6.1: TE and CL both present => close after the response.
    if head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n").keep_alive
    {
        bad.push("TE+CL kept alive");
    }
    // Content-Length is 1*DIGIT.
    if parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n").is_ok() {
        bad.push("CL +5 accepted");
    }
    assert!(bad.is_empty(), "{bad:?}");
}

/// A zero-length body followed by more bytes: the connection is out of
/// step but goes back to the pool (Length(n>0) drops it in that case).
#[tokio::test]
async fn bytes_after_an_empty_body_keep_the_connection_out_of_the_pool() {
    let (base, accepted) = server(
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\nHTTP/1.1 500 X\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    let c = connections(&base, 4);
    let _ = fetch(&c).await;
    let pooled = c.idle.lock().unwrap().len();
    let _ = accepted;
    assert_eq!(pooled, 0, "an out-of-step connection was pooled");
}
