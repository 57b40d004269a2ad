use super::*;

const SEC: i64 = 1_767_225_600; // 2026-01-01

fn ns(sec: i64, nsec: i64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

#[test]
fn the_stamp_is_read_from_either_message_and_nothing_else() {
    let one = craft_cmsg(
        libc::SOL_SOCKET,
        libc::SCM_TIMESTAMPNS,
        &timespec_bytes(SEC, 123_456_789),
    );
    assert_eq!(parse_rx_timestamp(&one), Some(ns(SEC, 123_456_789)));

    // SCM_TIMESTAMPING: software stamp first, then two zeroed ones.
    let mut three = timespec_bytes(SEC, 5);
    three.extend(timespec_bytes(0, 0));
    three.extend(timespec_bytes(SEC + 9, 9));
    let ts = craft_cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &three);
    assert_eq!(parse_rx_timestamp(&ts), Some(ns(SEC, 5)));

    // Another message first (IP_TOS-like), then the stamp: found.
    let mut both = craft_cmsg(libc::IPPROTO_IP, libc::IP_TOS, &[0x10]);
    both.extend(&one);
    assert_eq!(parse_rx_timestamp(&both), Some(ns(SEC, 123_456_789)));

    // Other levels and types are not stamps.
    let other = craft_cmsg(
        libc::IPPROTO_IP,
        libc::SCM_TIMESTAMPNS,
        &timespec_bytes(SEC, 1),
    );
    assert_eq!(parse_rx_timestamp(&other), None);
    let rights = craft_cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &timespec_bytes(SEC, 1));
    assert_eq!(parse_rx_timestamp(&rights), None);
    assert_eq!(parse_rx_timestamp(&[]), None);
}

#[test]
fn cut_short_or_malformed_buffers_give_no_stamp_and_no_panic() {
    let one = craft_cmsg(
        libc::SOL_SOCKET,
        libc::SCM_TIMESTAMPNS,
        &timespec_bytes(SEC, 7),
    );
    // MSG_CTRUNC: the kernel wrote part of the message.
    for cut in 0..one.len() {
        let data_end = cmsg_align(std::mem::size_of::<libc::cmsghdr>())
            + std::mem::size_of::<libc::timespec>();
        let got = parse_rx_timestamp(&one[..cut]);
        if cut < data_end {
            assert_eq!(got, None, "cut at {cut}");
        }
    }
    // A zero length (would loop forever if followed), a length past the
    // buffer, a length shorter than a header.
    for len in [0usize, 8, one.len() + 1, usize::MAX] {
        let mut bad = one.clone();
        bad[..std::mem::size_of::<usize>()].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(parse_rx_timestamp(&bad), None, "cmsg_len {len}");
    }
    // A stamp with a length too short for its timespec is not read.
    let short = craft_cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &[1, 2, 3, 4]);
    assert_eq!(parse_rx_timestamp(&short), None);
    // Out-of-range and empty timespecs.
    for (s, n) in [(0, 0), (SEC, 1_000_000_000), (SEC, -1), (-1, 0)] {
        let m = craft_cmsg(
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPNS,
            &timespec_bytes(s, n),
        );
        assert_eq!(parse_rx_timestamp(&m), None, "{s}.{n}");
    }
}

#[test]
fn an_error_queue_stamp_needs_its_time_and_its_extended_error() {
    let want = |key, kind, sec, nsec| {
        Some(TxStamp {
            key,
            kind,
            realtime_ns: ns(sec, nsec),
        })
    };
    // As the kernel writes it: SCM_TIMESTAMPING, then IP_RECVERR.
    let sched = craft_tx_stamp(499, TSTAMP_SCHED, SEC, 77);
    assert_eq!(parse_tx_timestamp(&sched), want(499, TSTAMP_SCHED, SEC, 77));
    let snd = craft_tx_stamp(u32::MAX, TSTAMP_SND, SEC, 78);
    assert_eq!(
        parse_tx_timestamp(&snd),
        want(u32::MAX, TSTAMP_SND, SEC, 78)
    );

    // SO_TIMESTAMPNS on too: an SCM_TIMESTAMPNS beside it. The
    // SCM_TIMESTAMPING time wins; alone, the TIMESTAMPNS one is used.
    let err = extended_err_bytes(libc::ENOMSG as u32, libc::SO_EE_ORIGIN_TIMESTAMPING, 0, 9);
    let mut with_ns = craft_timestampns(SEC, 5);
    with_ns.extend(&sched);
    assert_eq!(
        parse_tx_timestamp(&with_ns),
        want(499, TSTAMP_SCHED, SEC, 77)
    );
    let mut ns_only = craft_timestampns(SEC, 5);
    ns_only.extend(craft_cmsg(libc::SOL_IP, libc::IP_RECVERR, &err));
    assert_eq!(parse_tx_timestamp(&ns_only), want(9, TSTAMP_SND, SEC, 5));
    // IPv6 sockets report IPV6_RECVERR (offender sockaddr_in6, longer).
    let mut v6 = craft_timestampns(SEC, 6);
    let mut err6 = err.clone();
    err6.resize(16 + std::mem::size_of::<libc::sockaddr_in6>(), 0);
    v6.extend(craft_cmsg(libc::SOL_IPV6, libc::IPV6_RECVERR, &err6));
    assert_eq!(parse_tx_timestamp(&v6), want(9, TSTAMP_SND, SEC, 6));
    // The whole message fits the error queue's control room.
    assert!(v6.len() + sched.len() <= ERRQUEUE_CONTROL_LEN);

    // A time without an extended error, an extended error without a
    // time, one that is a real error (ECONNREFUSED from an ICMP) or
    // another origin: no stamp.
    assert_eq!(parse_tx_timestamp(&craft_timestampns(SEC, 5)), None);
    assert_eq!(
        parse_tx_timestamp(&craft_cmsg(libc::SOL_IP, libc::IP_RECVERR, &err)),
        None
    );
    for (errno, origin) in [
        (libc::ECONNREFUSED as u32, libc::SO_EE_ORIGIN_TIMESTAMPING),
        (libc::ENOMSG as u32, libc::SO_EE_ORIGIN_ICMP),
        (libc::ENOMSG as u32, libc::SO_EE_ORIGIN_LOCAL),
    ] {
        let mut m = craft_timestampns(SEC, 5);
        m.extend(craft_cmsg(
            libc::SOL_IP,
            libc::IP_RECVERR,
            &extended_err_bytes(errno, origin, 0, 1),
        ));
        assert_eq!(parse_tx_timestamp(&m), None, "{errno} {origin}");
    }
    // An extended error cut short, at another level, or a zero time.
    let mut short = craft_timestampns(SEC, 5);
    short.extend(craft_cmsg(libc::SOL_IP, libc::IP_RECVERR, &err[..12]));
    assert_eq!(parse_tx_timestamp(&short), None);
    let mut level = craft_timestampns(SEC, 5);
    level.extend(craft_cmsg(libc::SOL_SOCKET, libc::IP_RECVERR, &err));
    assert_eq!(parse_tx_timestamp(&level), None);
    assert_eq!(parse_tx_timestamp(&craft_tx_stamp(1, 0, 0, 0)), None);
    // Every prefix (MSG_CTRUNC) parses without panic; only the whole
    // message, or one cut inside the padding, has the stamp.
    for cut in 0..sched.len() {
        if let Some(got) = parse_tx_timestamp(&sched[..cut]) {
            assert_eq!(Some(got), want(499, TSTAMP_SCHED, SEC, 77), "cut {cut}");
        }
    }
}

#[test]
fn an_anchor_converts_both_ways_and_refuses_what_an_instant_cannot_hold() {
    let base = Instant::now();
    let anchor = WallAnchor {
        mono: base,
        realtime_ns: ns(SEC, 0),
    };
    let ms = Duration::from_millis;
    assert_eq!(anchor.to_instant(ns(SEC, 0)), Some(base));
    assert_eq!(anchor.to_instant(ns(SEC, 2_000_000)), Some(base + ms(2)));
    assert_eq!(
        anchor.to_instant(ns(SEC, 0) - 1_000_000),
        base.checked_sub(ms(1))
    );
    assert_eq!(anchor.to_instant(i128::MAX), None);
    assert_eq!(anchor.to_instant(i128::MIN), None);
    assert!(!anchor.is_due(base + ms(999)));
    assert!(anchor.is_due(base + ms(1000)));
}

#[test]
fn a_measured_anchor_agrees_with_the_clocks() {
    let a = WallAnchor::measure();
    let now = realtime_ns();
    let back = a.to_instant(now).expect("representable");
    let drift = back.saturating_duration_since(Instant::now());
    // `now` was read after the anchor and before this Instant::now():
    // its instant cannot be later than the present by more than the
    // anchor's error (a bracket; 1 ms allows a preempted test thread).
    assert!(drift < Duration::from_millis(1), "{drift:?}");
}

/// A simulated machine: a monotonic origin and a wall clock that
/// reads `SEC` there and steps by `step_ms` at `step_at`.
struct Wall {
    origin: Instant,
    step_at: Duration,
    step_ms: i64,
}

impl Wall {
    fn at(&self, t: Instant) -> i128 {
        let since = t.duration_since(self.origin);
        let mut wall = ns(SEC, 0) + since.as_nanos() as i128;
        if since >= self.step_at {
            wall += i128::from(self.step_ms) * 1_000_000;
        }
        wall
    }
    fn anchor(&self, t: Instant) -> WallAnchor {
        WallAnchor {
            mono: t,
            realtime_ns: self.at(t),
        }
    }
}

/// A wall-clock step of any size or sign, between reads or inside one
/// read's lateness, against a connection whose anchor was measured
/// before it. Reads: bytes arrive at t0 + 5, 25, 45, 65 ms and are read
/// 2 ms later; the kernel stamps them on the wall clock of that moment.
/// - A step between reads is caught by the next read's clock pair:
///   every latency stays exact.
/// - A step between a segment's arrival and its read (the only case
///   the check cannot see before converting) misplaces that one read,
///   within [previous arrival, read time]: never a negative TTFT or
///   ITL, never above the user-space figure; the reads after are exact.
#[test]
fn a_wall_clock_step_cannot_make_a_latency_negative_or_wrong() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let arrivals = [ms(5), ms(25), ms(45), ms(65)];
    for step_ms in [-3_600_000i64, -30, -10, -1, 1, 10, 30, 3_600_000] {
        // Between read 1 (at 27 ms) and arrival 2 (45 ms) / inside read
        // 2's lateness (arrival 45, read 47).
        for (step_at, inside) in [(ms(35), false), (ms(46), true)] {
            let wall = Wall {
                origin: t0,
                step_at,
                step_ms,
            };
            let mut clock = ConnClock::new(wall.anchor(t0));
            let mut floor = t0;
            for (k, at) in arrivals.iter().enumerate() {
                let arrived = t0 + *at;
                let read_at = arrived + ms(2);
                let placed = clock.arrival(
                    Some(wall.at(arrived)),
                    floor,
                    read_at,
                    wall.at(read_at),
                    || wall.anchor(read_at),
                );
                let what = format!("step {step_ms} ms at {step_at:?}, read {k}");
                assert!(placed >= floor, "{what}: went backwards");
                assert!(placed <= read_at, "{what}: after its read");
                if inside && k == 2 {
                    // Bounded, not exact: the stamp predates the step.
                    assert!(placed.duration_since(t0) <= read_at - t0, "{what}");
                } else {
                    assert_eq!(placed, arrived, "{what}: not exact");
                }
                floor = placed;
            }
        }
    }
}

#[test]
fn placing_keeps_the_kernel_time_between_floor_and_read() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    // No stamp: the read time. A floor past the read: the read time.
    let r = t0 + ms(3);
    assert_eq!(place(None, t0, r), (r, false));
    assert_eq!(place(Some(t0), t0 + ms(9), r), (r, true));
    // In range: the kernel's time as it is; outside: the nearer bound.
    assert_eq!(place(Some(t0 + ms(1)), t0, r), (t0 + ms(1), false));
    assert_eq!(place(Some(t0 + ms(4)), t0, r), (r, true));
    assert_eq!(place(t0.checked_sub(ms(1)), t0, r), (t0, true));
}
