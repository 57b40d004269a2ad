//! UTC wall-clock formatting without a date crate: the civil-from-days
//! algorithm (Howard Hinnant's), exact for the proleptic Gregorian calendar.

use std::time::{SystemTime, UNIX_EPOCH};

/// (year, month, day, hour, minute, second) in UTC.
pub(crate) fn utc_parts(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

/// `2026-11-29T19:14:00Z`
pub(crate) fn iso8601(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `20261129-191400`: vLLM's `date` format, also the default result folder name.
pub(crate) fn compact(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(t);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// `2026-11-29T19:14:00Z` (what [`iso8601`] writes) back to a time; None
/// for anything else. Days from civil, Howard Hinnant's inverse.
pub(crate) fn parse_iso8601(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let field = |from: usize, to: usize| -> Option<i64> {
        let text = s.get(from..to)?;
        text.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| text.parse().ok())?
    };
    let (y, m, d) = (field(0, 4)?, field(5, 7)?, field(8, 10)?);
    let (h, mi, sec) = (field(11, 13)?, field(14, 16)?, field(17, 19)?);
    if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let secs = days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + sec;
    u64::try_from(secs)
        .ok()
        .map(|secs| UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`); `m` in 1..=12.
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_instants() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day in a century leap year) 12:34:56 = 951827696 s.
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(iso8601(t), "2000-02-29T12:34:56Z");
        assert_eq!(compact(t), "20000229-123456");
        // 2026-11-29 19:14:00 = 1795979640 s (20 421 days * 86400 + 69240).
        let t = UNIX_EPOCH + Duration::from_secs(1_795_979_640);
        assert_eq!(iso8601(t), "2026-11-29T19:14:00Z");
    }

    #[test]
    fn parsing_inverts_formatting() {
        for secs in [0u64, 951_827_696, 1_795_979_640, 4_107_542_399] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_iso8601(&iso8601(t)), Some(t), "{}", iso8601(t));
        }
        for bad in [
            "",
            "2026-11-29 19:14:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-29T19:14:00",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }
}
