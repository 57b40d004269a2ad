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
