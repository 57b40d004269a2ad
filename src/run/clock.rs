//! How far the server's wall clock is from ours, from its HTTP `Date`
//! header (RFC 9110: the time the response was generated, to the second).
//!
//! One response says only that the server's time, somewhere between our
//! send and our receipt, lay in `[Date, Date + 1 s)`: the offset (server
//! minus ours) lies in `(Date - received, Date + 1 - sent)`. Each further
//! response narrows that interval; two on either side of the server's
//! second ticking over narrow it to about the time between them. So a few
//! quick requests, kept up until the `Date` changes, give the offset to a
//! few ms on a near server. The error saved is the interval's half width.
//!
//! The bound assumes the header is fresh. Some servers (hyper's default,
//! uvicorn) refresh a cached header about once a second, which can make it
//! up to a second old: such an offset reads up to a second low, past the
//! error given. The built-in simulator stamps each response itself.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most time spent looking for a tick of the server's second.
const LOOK_FOR: Duration = Duration::from_millis(1500);

/// Between two requests while looking: fine enough for a narrow interval,
/// light enough not to load the server.
const EVERY: Duration = Duration::from_millis(20);

/// One response: our wall clock when the request went out and when the
/// answer came, and the server's `Date`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct DateSample {
    pub sent: SystemTime,
    pub received: SystemTime,
    pub date: SystemTime,
}

/// The offset (server wall clock minus ours) and how sure it is, ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ClockOffset {
    pub offset_ms: f64,
    pub error_ms: f64,
}

/// Seconds since the epoch, signed (a clock may be set before 1970).
fn unix_s(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// The interval every sample allows, its middle and half width; None
/// without samples or when they contradict each other (a clock stepped).
pub(crate) fn offset_of(samples: &[DateSample]) -> Option<ClockOffset> {
    let mut lo = f64::NEG_INFINITY;
    let mut hi = f64::INFINITY;
    for s in samples {
        let date = unix_s(s.date);
        lo = lo.max(date - unix_s(s.received));
        hi = hi.min(date + 1.0 - unix_s(s.sent));
    }
    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
        return None;
    }
    let round = |x: f64| (x * 1000.0 * 10.0).round() / 10.0;
    Some(ClockOffset {
        offset_ms: round((lo + hi) / 2.0),
        error_ms: round((hi - lo) / 2.0),
    })
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110's IMF-fixdate, the one form
/// senders must use) as a time.
pub(crate) fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut parts = text.split_whitespace();
    let (_weekday, day, month, year, clock, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() || day.len() != 2 || year.len() != 4 {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    crate::time::parse_iso8601(&format!("{year}-{month:02}-{day}T{clock}Z"))
}

/// Ask `url` (the server's root: any status carries a `Date`) until its
/// second ticks over or [`LOOK_FOR`] has passed. None when the server
/// sends no `Date` or cannot be reached.
pub(crate) async fn measure(client: &reqwest::Client, url: &str) -> Option<ClockOffset> {
    let began = Instant::now();
    let mut samples: Vec<DateSample> = Vec::new();
    while began.elapsed() < LOOK_FOR {
        let sent = SystemTime::now();
        let response = match client.get(url).timeout(Duration::from_secs(2)).send().await {
            Ok(response) => response,
            Err(_) => break,
        };
        let received = SystemTime::now();
        let date = response
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date);
        let Some(date) = date else { break };
        let ticked = samples.last().is_some_and(|last| last.date != date);
        samples.push(DateSample {
            sent,
            received,
            date,
        });
        if ticked {
            break;
        }
        tokio::time::sleep(EVERY).await;
    }
    offset_of(&samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix_ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(unix_ms)
    }

    #[test]
    fn http_dates_parse() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(at(784_111_777_000))
        );
        assert_eq!(
            parse_http_date("Tue, 01 Dec 2026 13:00:00 GMT"),
            Some(at(1_796_130_000_000))
        );
        for bad in [
            "",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nox 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn one_answer_bounds_the_offset_to_about_a_second() {
        // Sent at 100.200 s, back at 100.210 s, Date 102 s: the server's
        // time lay in [102, 103) somewhere in [100.200, 100.210], so the
        // offset is in (102 - 100.210, 103 - 100.200) = (1.790, 2.800) s.
        let one = DateSample {
            sent: at(100_200),
            received: at(100_210),
            date: at(102_000),
        };
        assert_eq!(
            offset_of(&[one]),
            Some(ClockOffset {
                offset_ms: 2295.0,
                error_ms: 505.0
            })
        );
    }

    #[test]
    fn a_tick_of_the_servers_second_narrows_it_to_the_gap() {
        // The server runs 250 ms ahead. Requests every 20 ms, each 2 ms
        // there and back, stamped at their middle: at our 100.730 s the
        // server reads 100.980 (Date 100), at our 100.752 s it reads
        // 101.002 (Date 101). The tick lay between our 100.729 (the first
        // one's send) and 100.753 (the second one's receipt).
        let server_ahead_ms = 250u64;
        let sample = |sent_ms: u64| {
            let middle = sent_ms + 1;
            DateSample {
                sent: at(sent_ms),
                received: at(sent_ms + 2),
                date: at((middle + server_ahead_ms) / 1000 * 1000),
            }
        };
        let samples: Vec<DateSample> = (0..5).map(|i| sample(100_669 + 20 * i)).collect();
        // Dates: 100.920, 100.940, 100.960, 100.980 -> 100; 101.000 -> 101.
        assert_eq!(samples[3].date, at(100_000));
        assert_eq!(samples[4].date, at(101_000));
        // lo = 101 - 100.751 (the last receipt) = 0.249 s; hi = 101 - 100.729
        // (the last send before the tick) = 0.271 s: 260 +- 11 ms.
        assert_eq!(
            offset_of(&samples),
            Some(ClockOffset {
                offset_ms: 260.0,
                error_ms: 11.0
            })
        );
    }

    #[test]
    fn contradicting_answers_give_no_offset() {
        let a = DateSample {
            sent: at(100_000),
            received: at(100_010),
            date: at(100_000),
        };
        // 20 ms later the server says 5 s later: a stepped clock.
        let b = DateSample {
            sent: at(100_020),
            received: at(100_030),
            date: at(105_000),
        };
        assert_eq!(offset_of(&[a, b]), None);
        assert_eq!(offset_of(&[]), None);
    }
}
