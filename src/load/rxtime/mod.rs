//! Kernel receive times for the lean HTTP/1.1 reader ([`super::h1`]).
//!
//! A chunk's arrival time taken when `read` returns in user space includes
//! the client's own lateness: how long the bytes sat in the socket before
//! the load task was polled. With `SO_TIMESTAMPNS` on, Linux stamps every
//! segment when it reaches the host, and `recvmsg` hands back the stamp of
//! the last segment the read consumed as a control message. That time is
//! what a latency should count up to; the difference to the user-space
//! read time is the client's receive lag, reported on its own.
//!
//! The stamp is `CLOCK_REALTIME`; the run's clock is `CLOCK_MONOTONIC`
//! (`Instant`). [`WallAnchor`] pairs the two: `CLOCK_REALTIME` read between
//! two `Instant` reads, the tightest of a few tries, the pair's monotonic
//! side taken as the midpoint. A connection measures one when it opens and
//! again when it is a second old ([`ANCHOR_REFRESH`], which bounds an NTP
//! slew's drift: 500 ppm at most is 0.5 ms a second, a few ppm in practice).
//! A wall-clock step (NTP, `date -s`) is caught at the next read: each read
//! also takes the wall time beside its `Instant`, and when the anchor's
//! prediction disagrees by more than [`STEP_TOLERANCE`] the anchor is
//! measured again before the stamp is converted ([`ConnClock::arrival`]).
//! Only a step that lands between a segment's arrival and its read can
//! still misplace that one read, and [`place`] keeps even it within
//! `[floor, read time]`: no latency turns negative, none exceeds what the
//! user-space clock measured, and arrivals never go backwards.
//!
//! Everything here but the two system calls is a pure function, tested on
//! crafted buffers and synthetic instants.

use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a connection measures its wall-to-monotonic anchor again.
pub(crate) const ANCHOR_REFRESH: Duration = Duration::from_secs(1);
/// Bracketed reads per anchor measurement; the tightest is kept.
const ANCHOR_TRIES: usize = 5;
/// A read whose wall time and `Instant` disagree with the anchor by more
/// than this has seen the wall clock step (or its thread was preempted
/// between the two clock reads): the anchor is measured again. A false
/// alarm costs one measurement (a few hundred nanoseconds).
pub(crate) const STEP_TOLERANCE: Duration = Duration::from_micros(100);

/// Bytes of control-message room per read: one `SCM_TIMESTAMPING` (three
/// timespecs, 64 bytes on 64-bit Linux) or `SCM_TIMESTAMPNS` (32) with
/// room to spare, so a second message cannot truncate the first.
pub(crate) const CONTROL_LEN: usize = 128;

/// The control buffer `recvmsg` fills, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
pub(crate) struct ControlBuf(pub [u8; CONTROL_LEN]);

impl Default for ControlBuf {
    fn default() -> Self {
        ControlBuf([0; CONTROL_LEN])
    }
}

/// The kernel's receive time in a `recvmsg` control buffer (the first
/// `msg_controllen` bytes): `CLOCK_REALTIME` nanoseconds since the epoch,
/// from `SCM_TIMESTAMPNS` or the software stamp of `SCM_TIMESTAMPING`. None
/// when there is none, or the buffer is cut short or malformed: a header
/// whose length runs past the buffer (`MSG_CTRUNC`) or is shorter than a
/// header ends the walk, and a timespec out of range is ignored. Never
/// reads past `control`.
pub fn parse_rx_timestamp(control: &[u8]) -> Option<i128> {
    let mut found = None;
    for (level, kind, data) in cmsgs(control) {
        if level == libc::SOL_SOCKET
            && (kind == libc::SCM_TIMESTAMPNS || kind == libc::SCM_TIMESTAMPING)
        {
            // SCM_TIMESTAMPING carries [software, deprecated, hardware]:
            // the first is the one SOF_TIMESTAMPING_SOFTWARE reports.
            if let Some(ns) = first_timespec(data) {
                found = Some(ns);
            }
        }
    }
    found
}

/// The control messages of a buffer, as (level, type, data), in order. The
/// walk ends at a header whose length runs past the buffer (`MSG_CTRUNC`)
/// or is shorter than a header; it never reads past `control`.
fn cmsgs(control: &[u8]) -> impl Iterator<Item = (i32, i32, &[u8])> {
    let header = std::mem::size_of::<libc::cmsghdr>();
    // CMSG_LEN(0): where a message's data starts (the header, aligned).
    let data_at = cmsg_align(header);
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let rest = control.get(at..).filter(|r| r.len() >= header)?;
        // SAFETY: `rest` holds at least `size_of::<cmsghdr>()` bytes;
        // `cmsghdr` is plain integers, valid for any bit pattern, and
        // `read_unaligned` has no alignment requirement.
        let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(rest.as_ptr().cast()) };
        // `cmsg_len` is size_t on glibc and socklen_t on musl: widening
        // either way.
        #[allow(clippy::unnecessary_cast)]
        let len = h.cmsg_len as usize;
        if len < data_at || len > rest.len() {
            at = control.len();
            return None;
        }
        let data = &rest[data_at..len];
        at = match at.checked_add(cmsg_align(len)) {
            Some(next) if next > at => next,
            _ => control.len(),
        };
        Some((h.cmsg_level, h.cmsg_type, data))
    })
}

/// The first timespec of a message's data, in nanoseconds; None when the
/// data is too short or the time out of range (or zero: no stamp).
fn first_timespec(data: &[u8]) -> Option<i128> {
    if data.len() < std::mem::size_of::<libc::timespec>() {
        return None;
    }
    // SAFETY: `data` holds at least `size_of::<timespec>()` bytes of plain
    // integers; `read_unaligned` has no alignment requirement.
    let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    // time_t and c_long are 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    timespec_ns(i64::from(ts.tv_sec), i64::from(ts.tv_nsec))
}

/// `SCM_TSTAMP_SND` (linux/errqueue.h): the packet was handed to the
/// device (`SOF_TIMESTAMPING_TX_SOFTWARE`).
pub(crate) const TSTAMP_SND: u32 = 0;
/// `SCM_TSTAMP_SCHED`: the packet entered the queueing layer
/// (`SOF_TIMESTAMPING_TX_SCHED`).
pub const TSTAMP_SCHED: u32 = 1;

/// One transmit timestamp from the socket's error queue: which byte it is
/// for (the `SOF_TIMESTAMPING_OPT_ID` key: on TCP, the offset of the last
/// byte of the send it stamps, counted from when the option was set), at
/// which point of the send path ([`TSTAMP_SND`], [`TSTAMP_SCHED`]), and the
/// `CLOCK_REALTIME` time in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxStamp {
    pub key: u32,
    pub kind: u32,
    pub realtime_ns: i128,
}

/// The transmit timestamp in a `recvmsg(MSG_ERRQUEUE)` control buffer: the
/// software time of `SCM_TIMESTAMPING` (or `SCM_TIMESTAMPNS`, which a
/// socket with `SO_TIMESTAMPNS` on also gets) and the `sock_extended_err`
/// (`IP_RECVERR` / `IPV6_RECVERR`) that says it is a timestamp
/// (`ENOMSG`, `SO_EE_ORIGIN_TIMESTAMPING`) and carries its key and kind.
/// None unless both are there and valid; the same walk as
/// [`parse_rx_timestamp`], so never past `control`.
pub fn parse_tx_timestamp(control: &[u8]) -> Option<TxStamp> {
    let mut timestamping = None;
    let mut timestampns = None;
    let mut ext = None;
    for (level, kind, data) in cmsgs(control) {
        match (level, kind) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING) => {
                timestamping = first_timespec(data).or(timestamping);
            }
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                timestampns = first_timespec(data).or(timestampns);
            }
            (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
                if data.len() >= std::mem::size_of::<libc::sock_extended_err>() =>
            {
                // SAFETY: `data` holds a whole sock_extended_err (plain
                // integers); read_unaligned as above.
                let e: libc::sock_extended_err =
                    unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                if e.ee_errno == libc::ENOMSG as u32
                    && e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                {
                    ext = Some((e.ee_data, e.ee_info));
                }
            }
            _ => {}
        }
    }
    let (key, kind) = ext?;
    Some(TxStamp {
        key,
        kind,
        realtime_ns: timestamping.or(timestampns)?,
    })
}

/// CMSG_ALIGN: control messages are padded to a `size_t`.
fn cmsg_align(len: usize) -> usize {
    let word = std::mem::size_of::<usize>();
    len.saturating_add(word - 1) & !(word - 1)
}

/// Nanoseconds of a timespec; None for zero (no stamp) or a field out of
/// range.
fn timespec_ns(sec: i64, nsec: i64) -> Option<i128> {
    if !(0..1_000_000_000).contains(&nsec) || sec < 0 || (sec == 0 && nsec == 0) {
        return None;
    }
    Some(i128::from(sec) * 1_000_000_000 + i128::from(nsec))
}

/// `CLOCK_REALTIME` now, in nanoseconds since the epoch (negative before it).
pub(crate) fn realtime_ns() -> i128 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// A `CLOCK_REALTIME` reading and the `Instant` it was taken at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WallAnchor {
    pub mono: Instant,
    pub realtime_ns: i128,
}

impl WallAnchor {
    /// Read the wall clock between two monotonic reads, a few times, and
    /// keep the pair whose bracket is narrowest: its error is at most half
    /// that bracket (tens of nanoseconds on vDSO clocks), unless the thread
    /// was preempted in every try.
    pub(crate) fn measure() -> WallAnchor {
        let mut best: Option<(WallAnchor, Duration)> = None;
        for _ in 0..ANCHOR_TRIES {
            let before = Instant::now();
            let wall = realtime_ns();
            let after = Instant::now();
            let bracket = after.saturating_duration_since(before);
            if best.is_none_or(|(_, b)| bracket < b) {
                let anchor = WallAnchor {
                    mono: before + bracket / 2,
                    realtime_ns: wall,
                };
                best = Some((anchor, bracket));
            }
        }
        match best {
            Some((anchor, _)) => anchor,
            None => WallAnchor {
                mono: Instant::now(),
                realtime_ns: realtime_ns(),
            },
        }
    }

    /// The `Instant` of a `CLOCK_REALTIME` time, on this anchor's offset.
    /// None when it falls outside what an `Instant` can hold.
    pub(crate) fn to_instant(self, realtime_ns: i128) -> Option<Instant> {
        let diff = realtime_ns.checked_sub(self.realtime_ns)?;
        let magnitude = Duration::from_nanos(u64::try_from(diff.unsigned_abs()).ok()?);
        if diff >= 0 {
            self.mono.checked_add(magnitude)
        } else {
            self.mono.checked_sub(magnitude)
        }
    }

    /// Whether a clock pair read together (`mono`, `wall_ns`) is off this
    /// anchor's offset by more than [`STEP_TOLERANCE`].
    pub(crate) fn disagrees(&self, mono: Instant, wall_ns: i128) -> bool {
        match self.to_instant(wall_ns) {
            Some(predicted) => {
                let off = predicted
                    .saturating_duration_since(mono)
                    .max(mono.saturating_duration_since(predicted));
                off > STEP_TOLERANCE
            }
            None => true,
        }
    }

    /// Whether the anchor is due to be measured again at `now`.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.mono) >= ANCHOR_REFRESH
    }
}

/// One connection's view of the wall clock: the anchor its stamps are
/// converted on, kept fresh and checked at every read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnClock {
    anchor: WallAnchor,
}

impl ConnClock {
    pub(crate) fn new(anchor: WallAnchor) -> ConnClock {
        ConnClock { anchor }
    }

    /// The arrival of a read's bytes on the monotonic clock. `stamp` is the
    /// kernel's `CLOCK_REALTIME` time (None: the read had none), `floor` and
    /// `read_at` as for [`place`], `wall_at` the wall clock read just after
    /// `read_at`. `measure` takes a new anchor ([`WallAnchor::measure`]
    /// outside tests); it runs when the anchor is a second old or the read's
    /// own clock pair shows the wall clock has stepped since.
    pub(crate) fn arrival(
        &mut self,
        stamp: Option<i128>,
        floor: Instant,
        read_at: Instant,
        wall_at: i128,
        measure: impl FnOnce() -> WallAnchor,
    ) -> Instant {
        let Some(stamp) = stamp else {
            return read_at;
        };
        if self.anchor.is_due(read_at) || self.anchor.disagrees(read_at, wall_at) {
            self.anchor = measure();
        }
        place(self.anchor.to_instant(stamp), floor, read_at).0
    }
}

/// Where a read's bytes are taken to have arrived, and whether the kernel's
/// time had to be moved to get there.
///
/// `kernel` is the read's kernel time on the monotonic clock (None: no
/// stamp), `floor` the earliest the bytes can have arrived (the previous
/// read's arrival on the connection, or the request's t0) and `read_at` the
/// user-space time the read returned. The kernel's time is kept within
/// `[floor, read_at]`: bytes cannot arrive after they were read, nor before
/// the bytes before them, so a wall-clock step between two anchor
/// measurements can neither make a latency negative nor make it larger
/// than the user-space clock would. A time moved (the bool) means the
/// anchor is off: the caller measures it again at once.
pub(crate) fn place(kernel: Option<Instant>, floor: Instant, read_at: Instant) -> (Instant, bool) {
    // A floor past the read (a caller's t0 taken after it) must not panic
    // `clamp`: the read time bounds everything.
    let floor = floor.min(read_at);
    match kernel {
        Some(k) => {
            let placed = k.clamp(floor, read_at);
            (placed, placed != k)
        }
        None => (read_at, false),
    }
}

/// Turn kernel receive timestamps on for a socket (`SO_TIMESTAMPNS`).
#[cfg(target_os = "linux")]
pub(crate) fn enable(fd: std::os::fd::RawFd) -> io::Result<()> {
    set_socket_option(fd, libc::SO_TIMESTAMPNS, 1)
}

/// `setsockopt(fd, SOL_SOCKET, name, &value)` for an option that takes an
/// int (both timestamp options do: `SO_TIMESTAMPING`'s flags are an int's bits).
#[cfg(target_os = "linux")]
fn set_socket_option(
    fd: std::os::fd::RawFd,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&value`,
    // which lives across the call; an invalid fd is reported as an error.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Kernel receive times exist on Linux only: elsewhere the reader keeps the
/// user-space time.
#[cfg(not(target_os = "linux"))]
pub(crate) fn enable(_fd: i32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "kernel receive timestamps need Linux",
    ))
}

/// One non-blocking `recvmsg` into `buf`: the bytes read and the kernel's
/// `CLOCK_REALTIME` receive time of the last segment they came from.
#[cfg(target_os = "linux")]
pub(crate) fn recv_timed(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    control: &mut ControlBuf,
) -> io::Result<(usize, Option<i128>)> {
    let (n, cmsgs) = recvmsg_into(fd, buf, &mut control.0, 0)?;
    Ok((n, parse_rx_timestamp(cmsgs)))
}

/// One non-blocking `recvmsg(fd, flags)` into `buf`, with `control` for the
/// ancillary data: the bytes read, and the control data the kernel wrote.
/// The one place this crate calls `recvmsg`.
#[cfg(target_os = "linux")]
#[inline]
fn recvmsg_into<'c>(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    control: &'c mut [u8],
    flags: libc::c_int,
) -> io::Result<(usize, &'c [u8])> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: `msg` points at one iovec over `buf` and at `control`, both
    // borrowed mutably for the call and sized as the lengths say.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // The kernel says how much control data it wrote; never trust it past
    // the buffer.
    #[allow(clippy::unnecessary_cast)]
    let used = (msg.msg_controllen as usize).min(control.len());
    Ok((n as usize, &control[..used]))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn recv_timed(
    _fd: i32,
    _buf: &mut [u8],
    _control: &mut ControlBuf,
) -> io::Result<(usize, Option<i128>)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "kernel receive timestamps need Linux",
    ))
}

/// Control room for one error-queue message: `SCM_TIMESTAMPING` (64
/// bytes), `SCM_TIMESTAMPNS` (32, the socket has `SO_TIMESTAMPNS` on) and
/// `IPV6_RECVERR` with its offender address (64), with room to spare.
const ERRQUEUE_CONTROL_LEN: usize = 256;

#[repr(C, align(8))]
struct ErrqueueControl([u8; ERRQUEUE_CONTROL_LEN]);

/// Turn transmit timestamps on for a TCP socket (`SO_TIMESTAMPING`): the
/// last byte of every send gets the software times it entered the queueing
/// layer and was handed to the device, queued on the socket's error queue
/// without the payload (`OPT_TSONLY`) and keyed by byte offset (`OPT_ID`,
/// counted from now: set it before the first write).
///
/// How the time comes back: a socket with `SO_TIMESTAMPNS` on ([`enable`])
/// gets it as the error-queue message's `SCM_TIMESTAMPNS`, so `software`
/// is false there. `SOF_TIMESTAMPING_SOFTWARE` (`software`: the socket has
/// no `SO_TIMESTAMPNS`) reports it as `SCM_TIMESTAMPING` instead, but it
/// would also add an `SCM_TIMESTAMPING` to every read of a socket whose
/// reads are stamped: measured, that made `client_cpu` 20% dearer at one
/// stream (one read per token).
#[cfg(target_os = "linux")]
pub(crate) fn enable_tx(fd: std::os::fd::RawFd, software: bool) -> io::Result<()> {
    let mut flags: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SCHED
        | libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    if software {
        flags |= libc::SOF_TIMESTAMPING_SOFTWARE;
    }
    // The flags are all below bit 31, so the int holds them unchanged.
    set_socket_option(fd, libc::SO_TIMESTAMPING, flags as libc::c_int)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn enable_tx(_fd: i32, _software: bool) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "kernel transmit timestamps need Linux",
    ))
}

/// One non-blocking `recvmsg(MSG_ERRQUEUE)`: the next message of the
/// socket's error queue, as a transmit timestamp (None: a message that is
/// not one). `WouldBlock` when the queue is empty.
#[cfg(target_os = "linux")]
pub(crate) fn recv_tx_stamp(fd: std::os::fd::RawFd) -> io::Result<Option<TxStamp>> {
    let mut control = ErrqueueControl([0; ERRQUEUE_CONTROL_LEN]);
    // OPT_TSONLY: no payload comes back, but a byte of room costs nothing.
    let mut byte = [0u8; 1];
    let (_, cmsgs) = recvmsg_into(fd, &mut byte, &mut control.0, libc::MSG_ERRQUEUE)?;
    Ok(parse_tx_timestamp(cmsgs))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn recv_tx_stamp(_fd: i32) -> io::Result<Option<TxStamp>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "kernel transmit timestamps need Linux",
    ))
}

/// An error-queue timestamp as the kernel writes it, for tests and the
/// fuzz target's seeds: `SCM_TIMESTAMPING` (software time `sec.nsec`, two
/// zeroed) then `IP_RECVERR` with the `sock_extended_err` of `key`/`kind`
/// and an offender address.
pub fn craft_tx_stamp(key: u32, kind: u32, sec: i64, nsec: i64) -> Vec<u8> {
    let mut three = timespec_bytes(sec, nsec);
    three.extend(timespec_bytes(0, 0));
    three.extend(timespec_bytes(0, 0));
    let mut out = craft_cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &three);
    out.extend(craft_cmsg(
        libc::SOL_IP,
        libc::IP_RECVERR,
        &extended_err_bytes(
            libc::ENOMSG as u32,
            libc::SO_EE_ORIGIN_TIMESTAMPING,
            kind,
            key,
        ),
    ));
    out
}

/// The bytes of a `sock_extended_err` and a zeroed `sockaddr_in` (the
/// offender `ip_recv_error` appends), for [`craft_cmsg`].
pub(crate) fn extended_err_bytes(errno: u32, origin: u8, info: u32, data: u32) -> Vec<u8> {
    // SAFETY: an all-zero sock_extended_err is valid (plain integers).
    let mut e: libc::sock_extended_err = unsafe { std::mem::zeroed() };
    e.ee_errno = errno;
    e.ee_origin = origin;
    e.ee_info = info;
    e.ee_data = data;
    let size = std::mem::size_of::<libc::sock_extended_err>();
    let mut out = vec![0u8; size + std::mem::size_of::<libc::sockaddr_in>()];
    // SAFETY: `out` holds at least one sock_extended_err; write_unaligned
    // has no alignment requirement.
    unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<libc::sock_extended_err>(), e) };
    out
}

/// A control message as the kernel lays it out, for tests and the fuzz
/// target's seeds: a `cmsghdr` of `level`/`kind` and `data`, padded.
pub(crate) fn craft_cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
    let header = std::mem::size_of::<libc::cmsghdr>();
    let data_at = cmsg_align(header);
    let len = data_at + data.len();
    // SAFETY: an all-zero cmsghdr is valid (plain integers).
    let mut h: libc::cmsghdr = unsafe { std::mem::zeroed() };
    h.cmsg_len = len as _;
    h.cmsg_level = level;
    h.cmsg_type = kind;
    let mut out = vec![0u8; cmsg_align(len)];
    // SAFETY: `out` has at least `header` bytes; write_unaligned has no
    // alignment requirement and cmsghdr is plain integers.
    unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<libc::cmsghdr>(), h) };
    out[data_at..len].copy_from_slice(data);
    out
}

/// An `SCM_TIMESTAMPNS` message of `sec.nsec`, as the kernel writes it.
pub fn craft_timestampns(sec: i64, nsec: i64) -> Vec<u8> {
    craft_cmsg(
        libc::SOL_SOCKET,
        libc::SCM_TIMESTAMPNS,
        &timespec_bytes(sec, nsec),
    )
}

/// A control message that is not a stamp (`IP_TOS`) carrying `data`.
pub fn craft_other(data: &[u8]) -> Vec<u8> {
    craft_cmsg(libc::IPPROTO_IP, libc::IP_TOS, data)
}

/// The bytes of a timespec, for [`craft_cmsg`].
pub(crate) fn timespec_bytes(sec: i64, nsec: i64) -> Vec<u8> {
    // SAFETY: an all-zero timespec is valid (plain integers).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    ts.tv_sec = sec as _;
    ts.tv_nsec = nsec as _;
    let mut out = vec![0u8; std::mem::size_of::<libc::timespec>()];
    // SAFETY: `out` is exactly one timespec long; see above.
    unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<libc::timespec>(), ts) };
    out
}

#[cfg(test)]
mod tests;
