//! A lean HTTP/1.1 client for the load path of plain `http://` targets.
//!
//! Why not reqwest here: hyper reads a connection in a task of its own and
//! hands each read to the response body through a channel, so every chunk
//! costs two task wake-ups, a `Bytes` split and an atomic-waker handshake:
//! at 256 streams that was about a third of tokbench's CPU (perf). Here the
//! load task reads its socket itself, into the connection's own buffer, and
//! the body's payload bytes go to the stream parser in place. reqwest keeps
//! everything else: TLS, `--http2`, URLs with credentials, and every request
//! that is not a measured one (preflight, `/metrics`, `/tokenize`).
//!
//! What it speaks: one request per connection at a time (no pipelining),
//! keep-alive unless the server says `Connection: close` or speaks
//! HTTP/1.0, bodies framed by `Content-Length`, `chunked` or the end of the
//! connection. Idle connections are pooled per target, up to the run's
//! concurrency, one lock per request (never per chunk).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::request::say_once;
use super::rxtime::{self, ConnClock, ControlBuf, WallAnchor};
use crate::record::{ErrorClass, RxClock, TxClock};

// The reader's parts: the connection and its timed reads, the head, the
// chunked coding. The pool and the response are here.
mod chunked;
mod conn;
mod head;

pub(crate) use chunked::Chunked;
use conn::{enable_rx_timestamps, enable_tx_timestamps, stamping_socket, Conn, Head, TxTimes};
use head::{parse_head, Framing};

/// Bytes a connection reads at a time; a response head must fit in it.
const READ_BUFFER: usize = 32 * 1024;
/// Header lines a response may have.
const MAX_HEADERS: usize = 64;
/// How long an unused connection is kept. The reqwest client of the
/// measured requests (`run::prepare`) keeps them as long, so the two clients
/// differ in nothing but how they read.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a connection may take to open, for both clients alike.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Test hook, not a feature: `TOKBENCH_TEST_READ_DELAY_MS=20` makes every
/// read of this reader wait that long after its socket turned readable, as
/// a client starved of CPU would (the end-to-end test of kernel receive
/// times uses it). Read once per process; honoured here only.
pub(crate) const TEST_READ_DELAY_ENV: &str = "TOKBENCH_TEST_READ_DELAY_MS";

fn test_read_delay() -> Option<Duration> {
    static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms: f64 = std::env::var(TEST_READ_DELAY_ENV)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (ms.is_finite() && ms > 0.0).then(|| Duration::from_secs_f64(ms / 1000.0))
    })
}

/// When one read's bytes came: the user-space time the read returned and,
/// with kernel receive times on, the kernel's time of the last segment it
/// consumed (on the monotonic clock, never after `read_at` nor before the
/// connection's previous read; see [`rxtime`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadTimes {
    pub read_at: Instant,
    pub kernel: Option<Instant>,
}

/// Why a request did not get (the rest of) its answer, already classified
/// the way `requests.jsonl` counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct H1Error {
    pub class: ErrorClass,
    pub message: String,
}

impl H1Error {
    fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        H1Error {
            class,
            message: message.into(),
        }
    }

    /// A read or write on an open connection failed or met its end.
    fn closed(what: &str, e: &io::Error) -> Self {
        let class = match e.kind() {
            io::ErrorKind::TimedOut => ErrorClass::Timeout,
            _ => ErrorClass::ConnectionClosed,
        };
        H1Error::new(
            class,
            format!("connection closed mid-request ({what}: {e})"),
        )
    }

    fn eof(what: &str) -> Self {
        H1Error::new(
            ErrorClass::ConnectionClosed,
            format!("connection closed mid-request ({what})"),
        )
    }
}

/// One target's connections: where to connect, the request head every
/// request shares, and the idle pool.
pub struct Connections {
    /// `host:port` to connect to (resolved per new connection).
    authority: String,
    /// `POST /path HTTP/1.1`, `Host`, `Content-Type` and the key's line.
    head: Vec<u8>,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    /// Kernel receive times on new connections (`--rx-clock kernel`).
    kernel_rx: bool,
    /// Kernel transmit times on new connections (`--tx-clock kernel`).
    kernel_tx: bool,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The head holds the API key: never print it.
        f.debug_struct("Connections")
            .field("authority", &self.authority)
            .field("max_idle", &self.max_idle)
            .finish()
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl Connections {
    /// The lean client for `url`, or None where reqwest must do the work:
    /// not `http`, or credentials in the URL (reqwest turns them into Basic
    /// auth). `authorization` is the whole header value (`Bearer <key>`).
    pub fn for_url(
        url: &reqwest::Url,
        authorization: Option<&str>,
        max_idle: usize,
    ) -> Option<Connections> {
        if url.scheme() != "http" || !url.username().is_empty() || url.password().is_some() {
            return None;
        }
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let authority = format!("{host}:{port}");
        let host_header = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let mut target = url.path().to_owned();
        if let Some(query) = url.query() {
            target.push('?');
            target.push_str(query);
        }
        let mut head = format!(
            "POST {target} HTTP/1.1\r\nHost: {host_header}\r\ncontent-type: application/json\r\naccept: */*\r\n"
        );
        if let Some(auth) = authorization {
            if auth.contains(['\r', '\n']) {
                return None;
            }
            head.push_str("authorization: ");
            head.push_str(auth);
            head.push_str("\r\n");
        }
        Some(
            Connections {
                authority,
                head: head.into_bytes(),
                idle: Mutex::new(Vec::new()),
                max_idle: max_idle.max(1),
                kernel_rx: false,
                kernel_tx: false,
            }
            .with_rx_clock(RxClock::Kernel),
        )
    }

    /// Which clock new connections time their reads by. Kernel is the
    /// default where the platform has it; `User` keeps the user-space read
    /// time (`--rx-clock user`, for comparison).
    pub fn with_rx_clock(mut self, clock: RxClock) -> Connections {
        self.kernel_rx = clock == RxClock::Kernel && cfg!(target_os = "linux");
        if self.kernel_rx {
            let _ = stamping_socket();
        }
        self
    }

    /// Keep at most `max_idle` idle connections (a probe pool's own size).
    pub(crate) fn with_max_idle(mut self, max_idle: usize) -> Connections {
        self.max_idle = max_idle.max(1);
        self
    }

    /// Whether new connections time each request's departure by the
    /// kernel's transmit timestamp (`--tx-clock kernel`, Linux only) or not
    /// (the default: the request's t0 is taken in user space before it is
    /// written).
    pub fn with_tx_clock(mut self, clock: TxClock) -> Connections {
        self.kernel_tx = clock == TxClock::Kernel && cfg!(target_os = "linux");
        self
    }

    /// Send `body` and read the response head. `fresh` skips the pool (a
    /// resend after a pooled connection turned out closed). The error says
    /// whether a pooled connection was used, for that retry.
    pub(crate) async fn send(
        self: &Arc<Self>,
        body: &[u8],
        request_id: &str,
        fresh: bool,
    ) -> Result<Response, H1Error> {
        let pooled = if fresh { None } else { self.take_idle() };
        // The connect's own time: zero on a pooled connection.
        let (mut conn, connect) = match pooled {
            Some(conn) => (conn, Duration::ZERO),
            None => {
                let asked = Instant::now();
                let conn = self.connect().await?;
                (conn, asked.elapsed())
            }
        };
        let mut request = Vec::with_capacity(self.head.len() + 96 + body.len());
        request.extend_from_slice(&self.head);
        request.extend_from_slice(b"x-request-id: ");
        request.extend_from_slice(request_id.as_bytes());
        request.extend_from_slice(b"\r\ncontent-length: ");
        request.extend_from_slice(body.len().to_string().as_bytes());
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(body);
        let whole = match conn.write_request(&request).await {
            Ok(whole) => whole,
            // The server may have answered (401, 413) and closed before
            // reading it all: its answer can still be in the socket.
            Err(e) => match conn.read_head().await {
                Ok(head) => {
                    let mut response = Response::new(head, conn, false, self);
                    response.connect = connect;
                    return Ok(response);
                }
                Err(_) => return Err(H1Error::closed("writing the request", &e)),
            },
        };
        let head = conn.read_head().await?;
        // The answer has begun: the request has left, its stamp is queued.
        let departed = conn.departure();
        let mut response = Response::new(head, conn, whole, self);
        response.departed = departed;
        response.connect = connect;
        Ok(response)
    }

    /// Tests: wait (up to 5 s) until the kernel stamps TCP packets, shown
    /// by a byte over a loopback TCP pair coming back with a stamp. (A UDP
    /// socket would not show it: its receive path fills in the current time
    /// when a packet came unstamped; TCP's gives no stamp at all.) True once
    /// it does; false with user-space times or when it never did.
    #[cfg(all(test, unix))]
    pub(crate) fn wait_for_stamping(&self) -> bool {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        if !self.kernel_rx {
            return false;
        }
        let pair = || -> io::Result<(std::net::TcpStream, std::net::TcpStream)> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let reader = std::net::TcpStream::connect(listener.local_addr()?)?;
            let (writer, _) = listener.accept()?;
            rxtime::enable(reader.as_raw_fd())?;
            Ok((reader, writer))
        };
        let Ok((reader, mut writer)) = pair() else {
            return false;
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if writer.write_all(b"?").is_err() {
                return false;
            }
            let mut control = ControlBuf::default();
            let mut byte = [0u8; 16];
            // Not there yet (recv_timed does not wait) or unstamped: again.
            if let Ok((_, Some(_))) =
                rxtime::recv_timed(reader.as_raw_fd(), &mut byte, &mut control)
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = idle.pop() {
            if entry.since.elapsed() >= IDLE_TIMEOUT {
                continue;
            }
            // Closed by the server while idle (uvicorn and cpp-httplib after
            // 5 s), or bytes nobody asked for: not at a clean boundary.
            match entry.conn.stream.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(entry.conn),
                _ => continue,
            }
        }
        None
    }

    fn put_idle(&self, mut conn: Conn) {
        conn.start = 0;
        conn.end = 0;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<Conn, H1Error> {
        let stream = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(&self.authority),
        )
        .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(H1Error::new(
                    ErrorClass::ConnectRefused,
                    say_once("connection refused", &e.to_string()),
                ))
            }
            Ok(Err(e)) => {
                if let Some(class) = crate::record::client_limit_class(&e) {
                    return Err(H1Error::new(
                        class,
                        crate::record::client_limit_message(class, &e.to_string()),
                    ));
                }
                return Err(H1Error::new(
                    ErrorClass::Connect,
                    format!("cannot connect to {} ({e})", self.authority),
                ));
            }
            Err(_) => {
                return Err(H1Error::new(
                    ErrorClass::Connect,
                    format!(
                        "cannot connect to {} within {} s",
                        self.authority,
                        CONNECT_TIMEOUT.as_secs()
                    ),
                ))
            }
        };
        // Small requests must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        // A socket that refuses the option keeps user-space times; each
        // record says which clock it got (`rx_clock`).
        let clock = (self.kernel_rx && enable_rx_timestamps(&stream).is_ok())
            .then(|| ConnClock::new(WallAnchor::measure()));
        // Before the first write: the keys count bytes from here.
        let tx = (self.kernel_tx && enable_tx_timestamps(&stream, clock.is_some()).is_ok())
            .then(|| Box::new(TxTimes::new()));
        Ok(Conn {
            stream,
            buf: vec![0; READ_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            clock,
            control: Box::default(),
            opened: Instant::now(),
            last: None,
            delay: None,
            tx,
        })
    }
}

/// A response: its status, and its body read a socket read at a time.
pub(crate) struct Response {
    pub status: u16,
    framing: Framing,
    keep_alive: bool,
    /// None once the body is over (the connection went back to the pool).
    conn: Option<Conn>,
    pool: Arc<Connections>,
    /// When the request's last byte left, by the kernel's transmit
    /// timestamp (`--tx-clock kernel`); None without one.
    departed: Option<Instant>,
    /// How long opening its connection took (TCP connect); zero when a
    /// pooled keep-alive connection carried the request.
    connect: Duration,
}

/// What one poll of the body gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Bytes are waiting: hand them on with [`Response::consume`].
    Bytes,
    /// The body is over.
    End,
}

/// What [`Response::consume`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Consumed {
    More,
    End,
}

/// A body that could not be read on: the connection's fault, or the sink's.
#[derive(Debug)]
pub(crate) enum BodyError<E> {
    Transport(H1Error),
    Sink(E),
}

impl Response {
    fn new(head: Head, conn: Conn, whole_request: bool, pool: &Arc<Connections>) -> Self {
        Response {
            status: head.status,
            framing: head.framing,
            keep_alive: head.keep_alive && whole_request,
            conn: Some(conn),
            pool: Arc::clone(pool),
            departed: None,
            connect: Duration::ZERO,
        }
    }

    /// How long opening the request's connection took; zero on a reused one.
    pub(crate) fn connect_time(&self) -> Duration {
        self.connect
    }

    /// When the request left by the kernel's clock (`--tx-clock kernel`):
    /// never after the head's read.
    pub(crate) fn departed(&self) -> Option<Instant> {
        self.departed
    }

    /// When the bytes `poll_body` last found (or the head) were read. None
    /// once the connection went back to the pool.
    pub(crate) fn read_times(&self) -> Option<ReadTimes> {
        self.conn.as_ref().and_then(|c| c.last)
    }

    /// Wait for body bytes (none are read while some are still waiting).
    pub(crate) fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<Polled, H1Error>> {
        if matches!(self.framing, Framing::Length(0)) || self.framing == Framing::Done {
            if self.conn.as_ref().is_some_and(|c| c.start < c.end) {
                // Bytes past the body: the connection is out of step.
                self.keep_alive = false;
            }
            self.finish();
            return Poll::Ready(Ok(Polled::End));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Ok(Polled::End));
        };
        if conn.start < conn.end {
            return Poll::Ready(Ok(Polled::Bytes));
        }
        conn.start = 0;
        conn.end = 0;
        match conn.poll_fill(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(0)) => {
                self.conn = None;
                match self.framing {
                    // The end of the connection is the end of this body.
                    Framing::Close => Poll::Ready(Ok(Polled::End)),
                    _ => Poll::Ready(Err(H1Error::eof("the body was cut short"))),
                }
            }
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(Polled::Bytes)),
            Poll::Ready(Err(e)) => {
                self.conn = None;
                Poll::Ready(Err(H1Error::closed("reading the body", &e)))
            }
        }
    }

    /// Hand the waiting bytes' payload to `sink`, in place.
    pub(crate) fn consume<E>(
        &mut self,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Consumed, BodyError<E>> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Consumed::End);
        };
        let input = &conn.buf[conn.start..conn.end];
        let used = input.len();
        let end = match &mut self.framing {
            Framing::Close => {
                sink(input).map_err(BodyError::Sink)?;
                false
            }
            Framing::Length(left) => {
                let take = usize::try_from(*left).map_or(input.len(), |l| l.min(input.len()));
                sink(&input[..take]).map_err(BodyError::Sink)?;
                *left -= take as u64;
                if take < input.len() {
                    // Bytes past the body: the connection is out of step.
                    self.keep_alive = false;
                }
                *left == 0
            }
            Framing::Chunked(decoder) => {
                let (rest, done) = decoder.decode(input, &mut sink)?;
                if done && !rest.is_empty() {
                    self.keep_alive = false;
                }
                done
            }
            Framing::Done => true,
        };
        conn.start += used;
        if end {
            self.framing = Framing::Done;
            self.finish();
            Ok(Consumed::End)
        } else {
            Ok(Consumed::More)
        }
    }

    /// The body is over: a reusable connection goes back to the pool.
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.keep_alive {
                self.pool.put_idle(conn);
            }
        }
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
