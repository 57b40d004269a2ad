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
use crate::record::{ErrorClass, RxClock};

/// Bytes a connection reads at a time; a response head must fit in it.
const READ_BUFFER: usize = 32 * 1024;
/// Header lines a response may have.
const MAX_HEADERS: usize = 64;
/// How long an unused connection is kept (reqwest's default too).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Test hook, not a feature: `TOKBENCH_TEST_READ_DELAY_MS=20` makes every
/// read of this reader wait that long after its socket turned readable, as
/// a client starved of CPU would (the end-to-end test of kernel receive
/// times uses it). Read once per process; honoured here only.
pub const TEST_READ_DELAY_ENV: &str = "TOKBENCH_TEST_READ_DELAY_MS";

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
pub struct ReadTimes {
    pub read_at: Instant,
    pub kernel: Option<Instant>,
}

/// Why a request did not get (the rest of) its answer, already classified
/// the way `requests.jsonl` counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H1Error {
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

    /// Send `body` and read the response head. `fresh` skips the pool (a
    /// resend after a pooled connection turned out closed). The error says
    /// whether a pooled connection was used, for that retry.
    pub async fn send(
        self: &Arc<Self>,
        body: &[u8],
        request_id: &str,
        fresh: bool,
    ) -> Result<Response, H1Error> {
        let pooled = if fresh { None } else { self.take_idle() };
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.connect().await?,
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
                Ok(head) => return Ok(Response::new(head, conn, false, self)),
                Err(_) => return Err(H1Error::closed("writing the request", &e)),
            },
        };
        let head = conn.read_head().await?;
        Ok(Response::new(head, conn, whole, self))
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
                return Err(H1Error::new(
                    ErrorClass::Connect,
                    format!("cannot connect to {} ({e})", self.authority),
                ))
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
        })
    }
}

/// A UDP socket with receive timestamps on, opened once and kept for the
/// process's life. Linux stamps packets only while some socket wants it,
/// and the first socket to ask turns stamping on from a deferred kernel
/// work item: packets landing before it has run carry no stamp (seen on a
/// loaded VM as reads of a fresh connection without one), and stamping goes
/// off again, also deferred, when the last such socket closes. Asking once,
/// when the first pool is made (before the warmup's first answer), and
/// never letting go keeps it on for every measured read.
/// None if the platform refuses; reads then fall back to user time.
#[cfg(unix)]
fn stamping_socket() -> Option<&'static std::net::UdpSocket> {
    use std::os::fd::AsRawFd;
    static SOCKET: std::sync::OnceLock<Option<std::net::UdpSocket>> = std::sync::OnceLock::new();
    SOCKET
        .get_or_init(|| {
            let socket = std::net::UdpSocket::bind(("127.0.0.1", 0)).ok()?;
            rxtime::enable(socket.as_raw_fd()).ok()?;
            Some(socket)
        })
        .as_ref()
}

#[cfg(not(unix))]
fn stamping_socket() -> Option<&'static std::net::UdpSocket> {
    None
}

#[cfg(unix)]
fn enable_rx_timestamps(stream: &TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    rxtime::enable(stream.as_raw_fd())
}

#[cfg(not(unix))]
fn enable_rx_timestamps(_stream: &TcpStream) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// A connection and the bytes read from it but not yet used
/// (`buf[start..end]`).
struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Kernel receive times are on: every read goes through `recvmsg` and
    /// its stamp is converted on this clock. None: user-space times.
    clock: Option<ConnClock>,
    /// Boxed: it would double the size of every `Response` moved around.
    control: Box<ControlBuf>,
    /// No byte of this connection arrived before it was opened: the floor
    /// of its first read's kernel time.
    opened: Instant,
    /// The last read's times (the bytes in `buf` came with it).
    last: Option<ReadTimes>,
    /// The test hook's wait before the next read ([`TEST_READ_DELAY_ENV`]).
    delay: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// What the response head says.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    framing: Framing,
    keep_alive: bool,
}

impl Conn {
    /// Read until a whole response head is in the buffer; skip `1xx`
    /// interim answers. The body's first bytes stay buffered.
    async fn read_head(&mut self) -> Result<Head, H1Error> {
        loop {
            if self.start < self.end {
                match parse_head(&self.buf[self.start..self.end])? {
                    Some((head, used)) => {
                        self.start += used;
                        if (100..200).contains(&head.status) && head.status != 101 {
                            continue;
                        }
                        return Ok(head);
                    }
                    None if self.end == self.buf.len() && self.start == 0 => {
                        return Err(H1Error::new(
                            ErrorClass::MalformedStream,
                            format!("response head over {} KiB", READ_BUFFER / 1024),
                        ))
                    }
                    None => {}
                }
            }
            if self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let read = std::future::poll_fn(|cx| self.poll_fill(cx)).await;
            match read {
                Ok(0) => {
                    return Err(H1Error::eof(
                        "the server closed the connection before answering",
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(H1Error::closed("reading the response", &e)),
            }
        }
    }

    /// Write the request; stop early (Ok(false)) if the server starts
    /// answering before it has read it all.
    async fn write_request(&mut self, request: &[u8]) -> io::Result<bool> {
        let mut written = 0;
        std::future::poll_fn(|cx| {
            while written < request.len() {
                match Pin::new(&mut self.stream).poll_write(cx, &request[written..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => written += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {
                        if self.end < self.buf.len() {
                            if let Poll::Ready(Ok(n)) = self.poll_fill(cx) {
                                if n > 0 {
                                    return Poll::Ready(Ok(false));
                                }
                            }
                        }
                        return Poll::Pending;
                    }
                }
            }
            Poll::Ready(Ok(true))
        })
        .await
    }

    /// Read once into the free end of the buffer, noting when
    /// ([`Conn::last`]).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if let Some(delay) = test_read_delay() {
            // The test hook: bytes are there; come back for them late.
            if self.delay.is_none() {
                match self.stream.poll_read_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
                self.delay = Some(Box::pin(tokio::time::sleep(delay)));
            }
            if let Some(sleep) = self.delay.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            self.delay = None;
        }
        if self.clock.is_none() {
            let mut read = ReadBuf::new(&mut self.buf[self.end..]);
            return match Pin::new(&mut self.stream).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    self.end += n;
                    self.last = Some(ReadTimes {
                        read_at: Instant::now(),
                        kernel: None,
                    });
                    Poll::Ready(Ok(n))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            };
        }
        self.poll_fill_timed(cx)
    }

    /// `poll_fill` through `recvmsg`, with the kernel's receive time.
    #[cfg(unix)]
    fn poll_fill_timed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        use std::os::fd::AsRawFd;
        let fd = self.stream.as_raw_fd();
        loop {
            match self.stream.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            let buf = &mut self.buf[self.end..];
            let control = &mut self.control;
            // try_io clears the readiness on WouldBlock, so the next
            // poll_read_ready waits for the socket again (a spurious wake).
            let read = self
                .stream
                .try_io(Interest::READABLE, || rxtime::recv_timed(fd, buf, control));
            let (n, stamp) = match read {
                Ok(read) => read,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            };
            let read_at = Instant::now();
            let floor = self.last.and_then(|l| l.kernel).unwrap_or(self.opened);
            let kernel = match (self.clock.as_mut(), stamp) {
                (Some(clock), Some(_)) => Some(clock.arrival(
                    stamp,
                    floor,
                    read_at,
                    rxtime::realtime_ns(),
                    WallAnchor::measure,
                )),
                _ => None,
            };
            self.end += n;
            self.last = Some(ReadTimes { read_at, kernel });
            return Poll::Ready(Ok(n));
        }
    }

    #[cfg(not(unix))]
    fn poll_fill_timed(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

/// A response: its status, and its body read a socket read at a time.
pub struct Response {
    pub status: u16,
    framing: Framing,
    keep_alive: bool,
    /// None once the body is over (the connection went back to the pool).
    conn: Option<Conn>,
    pool: Arc<Connections>,
}

/// What one poll of the body gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    /// Bytes are waiting: hand them on with [`Response::consume`].
    Bytes,
    /// The body is over.
    End,
}

/// What [`Response::consume`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Consumed {
    More,
    End,
}

/// A body that could not be read on: the connection's fault, or the sink's.
#[derive(Debug)]
pub enum BodyError<E> {
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
        }
    }

    /// When the bytes `poll_body` last found (or the head) were read. None
    /// once the connection went back to the pool.
    pub fn read_times(&self) -> Option<ReadTimes> {
        self.conn.as_ref().and_then(|c| c.last)
    }

    /// Wait for body bytes (none are read while some are still waiting).
    pub fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<Polled, H1Error>> {
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
    pub fn consume<E>(
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

/// How the body's end is known.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked(Chunked),
    /// Until the server closes the connection.
    Close,
    /// Over.
    Done,
}

/// The head at the start of `bytes` and its length, None if it is not all
/// there yet.
fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, H1Error> {
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

/// The `chunked` transfer coding, decoded a byte at a time for its framing
/// and a slice at a time for its data, so a chunk split across reads (or a
/// read holding many chunks) needs no copy.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunked {
    state: ChunkState,
    size: u64,
    digits: u8,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum ChunkState {
    /// Hex digits of the next chunk's size.
    #[default]
    Size,
    /// A chunk extension (`;name=value`) up to the line's end.
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (after the last, zero-size chunk).
    TrailerStart,
    TrailerLine,
    EndLf,
    Done,
}

impl Chunked {
    /// Decode `input`, giving each run of data bytes to `sink`. Returns the
    /// bytes after the body's end (normally none) and whether it ended.
    pub fn decode<'a, E>(
        &mut self,
        input: &'a [u8],
        sink: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(&'a [u8], bool), BodyError<E>> {
        let bad = |what: &str| {
            BodyError::Transport(H1Error::new(
                ErrorClass::MalformedStream,
                format!("invalid chunked encoding ({what})"),
            ))
        };
        let mut i = 0;
        while i < input.len() {
            if self.state == ChunkState::Data {
                let left = usize::try_from(self.size).unwrap_or(usize::MAX);
                let take = left.min(input.len() - i);
                sink(&input[i..i + take]).map_err(BodyError::Sink)?;
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = ChunkState::DataCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.state = match (self.state, b) {
                (ChunkState::Size, b) if b.is_ascii_hexdigit() => {
                    if self.digits == 15 {
                        return Err(bad("chunk size too large"));
                    }
                    self.digits += 1;
                    self.size = self.size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0));
                    ChunkState::Size
                }
                (ChunkState::Size, b';' | b' ' | b'\t') if self.digits > 0 => ChunkState::Extension,
                (ChunkState::Size, b'\r') if self.digits > 0 => ChunkState::SizeLf,
                (ChunkState::Size, b'\n') if self.digits > 0 => self.after_size(),
                (ChunkState::Size, _) => return Err(bad("no chunk size")),
                (ChunkState::Extension, b'\r') => ChunkState::SizeLf,
                (ChunkState::Extension, b'\n') => self.after_size(),
                (ChunkState::Extension, _) => ChunkState::Extension,
                (ChunkState::SizeLf, b'\n') => self.after_size(),
                (ChunkState::SizeLf, _) => return Err(bad("no line feed after the size")),
                (ChunkState::DataCr, b'\r') => ChunkState::DataLf,
                (ChunkState::DataCr, b'\n') | (ChunkState::DataLf, b'\n') => ChunkState::Size,
                (ChunkState::DataCr | ChunkState::DataLf, _) => {
                    return Err(bad("chunk longer than its size"))
                }
                (ChunkState::TrailerStart, b'\r') => ChunkState::EndLf,
                (ChunkState::TrailerStart, b'\n') | (ChunkState::EndLf, b'\n') => {
                    self.state = ChunkState::Done;
                    return Ok((&input[i..], true));
                }
                (ChunkState::EndLf, _) => return Err(bad("no line feed at the end")),
                (ChunkState::TrailerLine, b'\n') => ChunkState::TrailerStart,
                (ChunkState::TrailerStart | ChunkState::TrailerLine, _) => ChunkState::TrailerLine,
                (ChunkState::Data, _) => ChunkState::Data,
                (ChunkState::Done, _) => return Ok((&input[i - 1..], true)),
            };
        }
        Ok((&[], self.state == ChunkState::Done))
    }

    /// The size line is over: data, or the trailer after the last chunk.
    fn after_size(&mut self) -> ChunkState {
        let state = if self.size == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        };
        self.digits = 0;
        state
    }
}

#[cfg(test)]
mod tests {
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
        let body =
            b"5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";
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
        assert!(
            head.starts_with("POST /v1/chat/completions?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
        );
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
        (response.status, body)
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
        use tokio::io::AsyncReadExt;
        use tokio::sync::oneshot;
        for clock in [RxClock::Kernel, RxClock::User] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
            let (go_tx, go_rx) = oneshot::channel::<()>();
            let (written_tx, written_rx) = oneshot::channel::<()>();
            tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap();
                    seen.extend_from_slice(&buf[..n]);
                }
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
                    .await
                    .unwrap();
                let _ = go_rx.await;
                socket.write_all(b"ok").await.unwrap();
                let _ = written_tx.send(());
                tokio::time::sleep(Duration::from_secs(5)).await;
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
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                });
            }
        });
        (url, accepted)
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
        tokio::time::sleep(Duration::from_millis(200)).await;
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
                tokio::time::sleep(Duration::from_secs(5)).await;
            },
        ).await;
        let c = connections(&base, 4);
        assert_eq!(fetch(&c).await, (200, b"ok".to_vec()));
        tokio::time::sleep(Duration::from_millis(200)).await;
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

    async fn one_shot_server_head_only(close: bool) -> String {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/completions", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            socket.write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await.unwrap();
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
        if head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")
            .keep_alive
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
        let (base, accepted) = server(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\nHTTP/1.1 500 X\r\ncontent-length: 0\r\n\r\n").await;
        let c = connections(&base, 4);
        let _ = fetch(&c).await;
        let pooled = c.idle.lock().unwrap().len();
        let _ = accepted;
        assert_eq!(pooled, 0, "an out-of-step connection was pooled");
    }
}
