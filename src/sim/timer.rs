//! Sleeps with sub-millisecond precision on the tokio runtime, for the engine's step
//! deadlines.
//!
//! tokio's timer wheel has 1 ms resolution and rounds a deadline up to the next tick;
//! epoll's timeout is in whole ms on top. A step sleeping with `tokio::time::sleep_until`
//! ended 1-2 ms after its deadline, which the client then measured as extra TTFT.
//!
//! On Linux a `timerfd` armed for the deadline is registered with tokio's reactor: the
//! kernel's high-resolution timer makes it readable at the deadline, and the worker
//! waiting in `epoll_wait` wakes at once (measured ~0.05-0.1 ms late on a VM), with no
//! thread of its own and no hand-off between threads: the engine task wakes on a
//! runtime worker and its chunk sends wake the HTTP tasks locally, as before. Elsewhere,
//! or if the timerfd cannot be set up, it falls back to tokio's timer.

use std::time::Instant;

/// A one-shot timer the engine re-arms for each step.
pub(crate) struct PreciseTimer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl PreciseTimer {
    /// Call inside a tokio runtime with I/O and time enabled (the simulator's listener
    /// needs I/O anyway). Off Linux, or if no timerfd can be created, sleeps fall back
    /// to tokio's timer.
    pub(crate) fn new() -> Self {
        PreciseTimer {
            #[cfg(target_os = "linux")]
            fd: linux::timerfd().ok(),
        }
    }

    /// Whether sleeps use the precise timer (false: tokio's 1 ms timer).
    #[cfg(test)]
    pub(crate) fn is_precise(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.fd.is_some();
        #[cfg(not(target_os = "linux"))]
        return false;
    }

    /// Sleep until `deadline` (returns at once if it has passed). Cancel-safe: dropping
    /// the future leaves the timer armed, and the next call re-arms it.
    pub(crate) async fn sleep_until(&mut self, deadline: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            match linux::sleep_until(fd, deadline).await {
                Ok(()) => return,
                // Not expected once created; finish this sleep and later ones on
                // tokio's timer rather than fail a step.
                Err(_) => self.fd = None,
            }
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::{Duration, Instant};

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// A non-blocking monotonic timerfd registered with the current runtime's reactor.
    pub(super) fn timerfd() -> io::Result<AsyncFd<OwnedFd>> {
        // SAFETY: plain syscall; on success we take sole ownership of the new fd.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh, open descriptor that nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the `OwnedFd` is open and moves into the `AsyncFd`, which keeps it open
        // (and `as_raw_fd` unchanged) until the `AsyncFd` is dropped. On error the fd
        // comes back inside the error and is closed with it.
        unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
            .map_err(io::Error::from)
    }

    /// Arm the timer to fire once after `after` (zero would disarm it: use 1 ns).
    fn arm(fd: &OwnedFd, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let spec = libc::itimerspec {
            it_interval: zero,
            it_value: libc::timespec {
                // A step is at most ~3e8 s (validated inputs): no overflow.
                // `as _`: the field's own type (libc deprecates naming time_t on musl).
                tv_sec: after.as_secs() as _,
                tv_nsec: after.subsec_nanos() as _,
            },
        };
        // SAFETY: valid fd, a valid itimerspec, and a null old-value pointer (allowed).
        let rc = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Read (and so reset) the expiration count; `WouldBlock` when it has not fired.
    fn read_expirations(fd: &OwnedFd) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into an 8-byte buffer we own.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short read from timerfd",
            ));
        }
        Ok(u64::from_ne_bytes(buf))
    }

    pub(super) async fn sleep_until(fd: &AsyncFd<OwnedFd>, deadline: Instant) -> io::Result<()> {
        loop {
            // Relative arming: the deadline is a std `Instant` (CLOCK_MONOTONIC, but
            // opaque). The few ns between `now()` and the syscall only make the timer
            // fire that much later, never early.
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            arm(fd.get_ref(), deadline - now)?;
            // Wait for the expiration. A readiness tokio cached from an earlier sleep
            // reads as WouldBlock, which clears it, and we wait again.
            loop {
                let mut guard = fd.readable().await?;
                match guard.try_io(|inner| read_expirations(inner.get_ref())) {
                    Ok(result) => {
                        result?;
                        break;
                    }
                    Err(_would_block) => continue,
                }
            }
            // Re-arming resets the expiration count, so an expiration a dropped sleep
            // left unread is never taken for ours; the check at the top of the loop
            // would re-arm if it were.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Lateness of 20 sleeps of 0.5-2.4 ms, sorted.
    async fn lateness(timer: &mut PreciseTimer) -> Vec<Duration> {
        let mut late = Vec::new();
        for i in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(500 + 100 * i);
            timer.sleep_until(deadline).await;
            let now = Instant::now();
            assert!(now >= deadline, "woke before the deadline");
            late.push(now - deadline);
        }
        late.sort();
        late
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sleeps_until_the_deadline_and_not_before() {
        let mut timer = PreciseTimer::new();
        #[cfg(target_os = "linux")]
        assert!(timer.is_precise());
        // A passed deadline returns at once.
        timer.sleep_until(Instant::now()).await;
        // tokio's own timer is late by ~1 ms nearly every time, so the median shows
        // which one ran. A burst of load on a shared machine can delay a whole batch:
        // up to three are tried.
        let mut medians = Vec::new();
        for _ in 0..3 {
            let late = lateness(&mut timer).await;
            println!("timer lateness: median {:?}, max {:?}", late[10], late[19]);
            medians.push(late[10]);
            if late[10] < Duration::from_micros(700) {
                break;
            }
        }
        #[cfg(target_os = "linux")]
        assert!(
            medians.iter().any(|m| *m < Duration::from_micros(700)),
            "median lateness {medians:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_sleep_does_not_cut_the_next_one_short() {
        let mut timer = PreciseTimer::new();
        {
            // Poll once (this arms the timer for 50 ms ahead), then drop it.
            let sleep = timer.sleep_until(Instant::now() + Duration::from_millis(50));
            tokio::pin!(sleep);
            tokio::select! {
                biased;
                _ = &mut sleep => {}
                _ = std::future::ready(()) => {}
            }
        }
        // Now the dropped sleep's expiration is there, unread.
        std::thread::sleep(Duration::from_millis(80));
        let deadline = Instant::now() + Duration::from_millis(5);
        timer.sleep_until(deadline).await;
        assert!(Instant::now() >= deadline);
    }
}
