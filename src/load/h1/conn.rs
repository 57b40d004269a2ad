//! One connection: its socket options (kernel receive timestamps), the
//! request writer, the response-head reader and the buffered reads, timed
//! by the kernel (`recvmsg`) where the platform stamps packets.

use super::*;

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
pub(super) fn stamping_socket() -> Option<&'static std::net::UdpSocket> {
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
pub(super) fn stamping_socket() -> Option<&'static std::net::UdpSocket> {
    None
}

#[cfg(unix)]
pub(super) fn enable_rx_timestamps(stream: &TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    rxtime::enable(stream.as_raw_fd())
}

#[cfg(not(unix))]
pub(super) fn enable_rx_timestamps(_stream: &TcpStream) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Transmit timestamps on; `rx_stamped`: the socket has `SO_TIMESTAMPNS`
/// on already (see [`rxtime::enable_tx`]).
#[cfg(unix)]
pub(super) fn enable_tx_timestamps(stream: &TcpStream, rx_stamped: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    rxtime::enable_tx(stream.as_raw_fd(), !rx_stamped)
}

#[cfg(not(unix))]
pub(super) fn enable_tx_timestamps(_stream: &TcpStream, _rx_stamped: bool) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Most error-queue messages one request drains: a request is a send or a
/// few (two stamps each); what is left is drained with the next request's.
const ERRQUEUE_DRAIN: usize = 32;

/// A connection's transmit timestamps (`--tx-clock kernel`): the clock its
/// stamps are converted on, the bytes written since they were turned on
/// (the `OPT_ID` keys count them, wrapping at 2^32), and the last whole
/// request's key and the time its write began.
#[derive(Clone, Copy, Debug)]
pub(super) struct TxTimes {
    pub(super) clock: ConnClock,
    pub(super) written: u32,
    pub(super) want: Option<(u32, Instant)>,
}

impl TxTimes {
    pub(super) fn new() -> TxTimes {
        TxTimes {
            clock: ConnClock::new(WallAnchor::measure()),
            written: 0,
            want: None,
        }
    }
}

/// Of the stamps drained for one request, the one that says when it left:
/// the key of its last byte, the device hand-off (`SND`) over the queueing
/// layer's (`SCHED`), which comes first and is the fallback. Consumes
/// every stamp (the drain of the queue).
pub(super) fn departure_stamp(
    stamps: impl IntoIterator<Item = rxtime::TxStamp>,
    key: u32,
) -> Option<i128> {
    let (mut snd, mut sched) = (None, None);
    for s in stamps.into_iter().filter(|s| s.key == key) {
        match s.kind {
            rxtime::TSTAMP_SND => snd = Some(s.realtime_ns),
            rxtime::TSTAMP_SCHED => sched = Some(s.realtime_ns),
            _ => {}
        }
    }
    snd.or(sched)
}

/// A connection and the bytes read from it but not yet used
/// (`buf[start..end]`).
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) buf: Box<[u8]>,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Kernel receive times are on: every read goes through `recvmsg` and
    /// its stamp is converted on this clock. None: user-space times.
    pub(super) clock: Option<ConnClock>,
    /// Boxed: it would double the size of every `Response` moved around.
    pub(super) control: Box<ControlBuf>,
    /// No byte of this connection arrived before it was opened: the floor
    /// of its first read's kernel time.
    pub(super) opened: Instant,
    /// The last read's times (the bytes in `buf` came with it).
    pub(super) last: Option<ReadTimes>,
    /// The test hook's wait before the next read ([`TEST_READ_DELAY_ENV`]).
    pub(super) delay: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Transmit timestamps are on: when each request left, from the
    /// socket's error queue. None: the request's t0 is the user's. Boxed,
    /// as `control` is.
    pub(super) tx: Option<Box<TxTimes>>,
}

/// What the response head says.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) framing: Framing,
    pub(super) keep_alive: bool,
}

impl Conn {
    /// Read until a whole response head is in the buffer; skip `1xx`
    /// interim answers. The body's first bytes stay buffered.
    pub(super) async fn read_head(&mut self) -> Result<Head, H1Error> {
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
    pub(super) async fn write_request(&mut self, request: &[u8]) -> io::Result<bool> {
        let began = self.tx.is_some().then(Instant::now);
        let mut written = 0;
        let whole = std::future::poll_fn(|cx| {
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
        .await;
        if let (Some(tx), Some(began)) = (self.tx.as_mut(), began) {
            // The keys count every byte sent, whole request or not.
            tx.written = tx.written.wrapping_add(written as u32);
            tx.want = match (&whole, written) {
                (Ok(true), 1..) => Some((tx.written.wrapping_sub(1), began)),
                _ => None,
            };
        }
        whole
    }

    /// When the last request's last byte left, on the monotonic clock:
    /// the kernel's transmit time from the error queue, read without
    /// waiting (call it once the answer's head is in: by then the request
    /// has long left), kept within `[the write's start, now]`. None without
    /// transmit timestamps, or when the kernel gave none for that byte.
    /// Drains the queue either way, so it does not grow.
    #[cfg(unix)]
    pub(super) fn departure(&mut self) -> Option<Instant> {
        use std::os::fd::AsRawFd;
        let tx = self.tx.as_mut()?;
        let fd = self.stream.as_raw_fd();
        let stamps = (0..ERRQUEUE_DRAIN)
            .map_while(|_| rxtime::recv_tx_stamp(fd).ok())
            .flatten();
        let Some((key, began)) = tx.want.take() else {
            stamps.for_each(drop);
            return None;
        };
        let stamp = departure_stamp(stamps, key)?;
        let now = Instant::now();
        Some(tx.clock.arrival(
            Some(stamp),
            began,
            now,
            rxtime::realtime_ns(),
            WallAnchor::measure,
        ))
    }

    #[cfg(not(unix))]
    pub(super) fn departure(&mut self) -> Option<Instant> {
        None
    }

    /// Read once into the free end of the buffer, noting when
    /// ([`Conn::last`]).
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
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
    pub(super) fn poll_fill_timed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
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
    pub(super) fn poll_fill_timed(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}
