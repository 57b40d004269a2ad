//! Timed levels and shards (issue 13): `--duration`, `--shard`,
//! `--start-at`, `--level-gap`, turned from text into checked values.
//! Every parser returns one line a user can act on; nothing here panics.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cli::SweepArgs;
use crate::load::driver::LevelPlan;

/// Longest `--duration` and `--level-gap`: a week, far past any soak.
const MOST_SECONDS: f64 = 7.0 * 86_400.0;

/// Most shards of one run (each is a process with its own streams).
pub(crate) const MAX_SHARDS: u32 = 4096;

/// `--level-gap` when not given: seconds between one scheduled level's
/// end of dispatch and the next level's start, for the drain.
pub(crate) const DEFAULT_LEVEL_GAP_S: f64 = 5.0;

/// `30`, `30s`, `2m`, `1.5m`, `1h` (seconds when no unit) as a duration.
pub(crate) fn parse_duration(flag: &str, raw: &str) -> Result<Duration, String> {
    let text = raw.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], &text[i..]),
        _ => (text, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
            "{flag} {raw}: give seconds, or a number with s, m or h, e.g. {flag} 30s or {flag} 2m"
        ))
        }
    };
    let seconds = number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite())
        .map(|n| n * scale)
        .ok_or_else(|| {
            format!("{flag} {raw}: not a number of seconds; write it like {flag} 30s, 2m or 1.5m")
        })?;
    if !(seconds > 0.0 && seconds <= MOST_SECONDS) {
        return Err(format!(
            "{flag} {raw}: give more than 0 and at most a week (168h)"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `--level-gap`: like [`parse_duration`], but 0 is allowed (no gap).
pub(crate) fn parse_gap(raw: &str) -> Result<Duration, String> {
    let zero = raw
        .trim()
        .trim_end_matches(['s', 'm', 'h'])
        .parse::<f64>()
        .is_ok_and(|n| n == 0.0);
    if zero {
        return Ok(Duration::ZERO);
    }
    parse_duration("--level-gap", raw)
}

/// `--start-at`: RFC 3339 (`2026-12-01T13:00:00Z`, `2026-12-01T14:00:00.5+01:00`)
/// or Unix seconds (`1796130000`, `1796130000.25`).
pub(crate) fn parse_start_at(raw: &str) -> Result<SystemTime, String> {
    let text = raw.trim();
    let unix = text
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e11);
    if let Some(seconds) = unix {
        return Ok(UNIX_EPOCH + Duration::from_secs_f64(seconds));
    }
    rfc3339(text).ok_or_else(|| {
        format!(
            "--start-at {raw}: give a UTC time like 2026-12-01T13:00:00Z (RFC 3339) or Unix seconds like 1796130000"
        )
    })
}

/// RFC 3339's date-time: `T` (or `t`, or a space) between date and time,
/// optional fractional seconds, `Z` or a `±HH:MM` offset.
fn rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let whole = crate::time::parse_iso8601(&format!("{}T{}Z", text.get(..10)?, text.get(11..19)?))?;
    let mut rest = text.get(19..)?;
    let mut fraction = Duration::ZERO;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let value: f64 = format!("0.{}", &after_dot[..digits]).parse().ok()?;
        fraction = Duration::from_secs_f64(value);
        rest = &after_dot[digits..];
    }
    let at = whole + fraction;
    match rest {
        "Z" | "z" => Some(at),
        offset if offset.len() == 6 && offset.as_bytes()[3] == b':' => {
            let sign = match offset.as_bytes()[0] {
                b'+' => 1i64,
                b'-' => -1,
                _ => return None,
            };
            let field = |s: &str| -> Option<i64> {
                s.bytes()
                    .all(|c| c.is_ascii_digit())
                    .then(|| s.parse().ok())?
            };
            let (h, m) = (field(offset.get(1..3)?)?, field(offset.get(4..6)?)?);
            if h > 23 || m > 59 {
                return None;
            }
            // Local time = UTC + offset, so UTC = local - offset.
            let shift = Duration::from_secs((h * 3600 + m * 60) as u64);
            if sign > 0 {
                at.checked_sub(shift)
            } else {
                at.checked_add(shift)
            }
        }
        _ => None,
    }
}

/// `--shard I/N`: this process is shard `index` (0-based) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// The environment variables `--shard auto/N` reads, in order: a
/// Kubernetes Indexed Job's, then the one torchrun and Ray set.
pub(crate) const SHARD_INDEX_VARS: [&str; 2] = ["JOB_COMPLETION_INDEX", "RANK"];

/// `I/N` or `auto/N`; `env` looks up a variable (the process's own in use).
pub(crate) fn parse_shard(
    raw: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Shard, String> {
    let usage = "write it like --shard 0/4 (shard 0 of 4, counted from 0) or --shard auto/4";
    let (index, count) = raw
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("--shard {raw}: {usage}"))?;
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=MAX_SHARDS).contains(n))
        .ok_or_else(|| {
            format!("--shard {raw}: the shard count must be 1 to {MAX_SHARDS}; {usage}")
        })?;
    let (index, from) = if index.trim() == "auto" {
        let found = SHARD_INDEX_VARS
            .iter()
            .find_map(|name| env(name).map(|value| (value, *name)));
        let Some((value, name)) = found else {
            return Err(format!(
                "--shard {raw}: neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor RANK is set; give the index, e.g. --shard 0/{count}"
            ));
        };
        let index = value.trim().parse::<u32>().map_err(|_| {
            format!(
                "--shard {raw}: {name}={value} is not a shard index (0 to {})",
                count - 1
            )
        })?;
        (index, Some((name, value)))
    } else {
        let index = index
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("--shard {raw}: {usage}"))?;
        (index, None)
    };
    if index >= count {
        return Err(match from {
            Some((name, value)) => format!(
                "--shard {raw}: {name}={value} is out of range: shards are 0 to {} of {count}",
                count - 1
            ),
            None => format!(
                "--shard {raw}: shards are counted from 0, so the index must be 0 to {} of {count}",
                count - 1
            ),
        });
    }
    Ok(Shard { index, count })
}

impl Shard {
    /// This shard's part of `total` (streams, requests): an even split
    /// with the remainder to the lowest indexes (10 over 4: 3, 3, 2, 2).
    pub(crate) fn share(self, total: u32) -> u32 {
        total / self.count + u32::from(self.index < total % self.count)
    }

    /// This shard's part of a request rate: an even split (a rate has no
    /// remainder); `inf` stays `inf`.
    pub(crate) fn share_rate(self, rate: f64) -> f64 {
        rate / f64::from(self.count)
    }

    /// The seed this shard draws its prompts and arrivals from: the run's
    /// seed mixed with the index, so shards never send the same prompt and
    /// their open-loop arrivals are independent (one seed for all would
    /// make every shard burst at the same instants).
    pub(crate) fn seed(self, seed: u64) -> u64 {
        seed ^ u64::from(self.index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// This machine's host name, for each shard's identity; None when unknown.
pub(crate) fn host_name() -> Option<String> {
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc == 0 {
            let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
            let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
            if !name.is_empty() {
                return Some(name);
            }
        }
    }
    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty())
}

/// What `--duration`, `--shard`, `--start-at` and `--level-gap` make of a
/// run, checked against the rest of its flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimingPlan {
    pub duration: Option<Duration>,
    pub shard: Option<Shard>,
    pub start_at: Option<SystemTime>,
    /// Only with `start_at` and `duration`; zero otherwise.
    pub level_gap: Duration,
}

impl TimingPlan {
    /// The flags of a sweep, each refusal in one line. `now` is the wall
    /// clock, for a start time in the past.
    pub(crate) fn from_args(args: &SweepArgs, now: SystemTime) -> Result<TimingPlan, String> {
        let duration = match &args.duration {
            Some(raw) => Some(parse_duration("--duration", raw)?),
            None => None,
        };
        if duration.is_some() {
            if args.num_prompts.is_some() {
                return Err(
                    "--duration and --num-prompts both say when a level ends: give one of them"
                        .into(),
                );
            }
            if args.replay.is_some() || args.ramp.is_some() {
                return Err("--replay and --ramp run on their own timeline: leave out --duration (--replay-speed or --ramp-duration sets it)".into());
            }
            if args.find_capacity {
                return Err("--find-capacity sizes its probes by count: leave out --duration (--num-prompts sets a probe's requests)".into());
            }
        }
        let shard = match &args.shard {
            Some(raw) => Some(parse_shard(raw, |name| std::env::var(name).ok())?),
            None => None,
        };
        if shard.is_some() {
            if args.replay.is_some() || args.ramp.is_some() {
                return Err("--shard splits levels of a sweep or a rate run; a --replay log or a --ramp is sent by one process".into());
            }
            if args.find_capacity {
                return Err("--shard: --find-capacity chooses each probe from the last one's results, which one shard alone does not see; run it from one process".into());
            }
        }
        let start_at = match &args.start_at {
            Some(raw) => {
                let at = parse_start_at(raw)?;
                if let Ok(past) = now.duration_since(at) {
                    if past > Duration::from_secs(1) {
                        return Err(format!(
                            "--start-at {raw} is {:.1} s in the past (now is {}): give a time ahead, e.g. a minute from now",
                            past.as_secs_f64(),
                            crate::time::iso8601(now)
                        ));
                    }
                }
                if args.find_capacity || args.replay.is_some() || args.ramp.is_some() {
                    return Err("--start-at schedules the levels of a sweep or a rate run: not with --find-capacity, --replay or --ramp".into());
                }
                Some(at)
            }
            None => None,
        };
        let level_gap = match &args.level_gap {
            Some(raw) => {
                if start_at.is_none() || duration.is_none() {
                    return Err("--level-gap spaces the levels of a schedule: it needs --start-at and --duration".into());
                }
                parse_gap(raw)?
            }
            None if start_at.is_some() && duration.is_some() => {
                Duration::from_secs_f64(DEFAULT_LEVEL_GAP_S)
            }
            None => Duration::ZERO,
        };
        Ok(TimingPlan {
            duration,
            shard,
            start_at,
            level_gap,
        })
    }

    /// The levels this shard runs: each level's concurrency (closed loop),
    /// rate and cap (open loop) split; its count split when the user gave
    /// it (`count_given`), else sized from the shard's own part as for one
    /// process (`per_stream` requests per stream, 30 s of a rate).
    pub(crate) fn shard_levels(
        &self,
        levels: Vec<LevelPlan>,
        count_given: bool,
        per_stream: u32,
        rate_prompts: impl Fn(f64) -> u32,
    ) -> Vec<LevelPlan> {
        let Some(shard) = self.shard else {
            return levels;
        };
        levels
            .into_iter()
            .map(|level| match level.rate {
                Some(rate) => {
                    let rate = shard.share_rate(rate);
                    LevelPlan {
                        // The cap on requests in flight: a shard needs at least one.
                        concurrency: shard.share(level.concurrency).max(1),
                        num_prompts: if count_given {
                            shard.share(level.num_prompts)
                        } else {
                            rate_prompts(rate)
                        },
                        rate: Some(rate),
                    }
                }
                None => {
                    let concurrency = shard.share(level.concurrency);
                    if count_given {
                        LevelPlan::closed(concurrency, shard.share(level.num_prompts))
                    } else {
                        LevelPlan::per_stream(concurrency, per_stream)
                    }
                }
            })
            .collect()
    }

    /// The seed prompts and arrivals are drawn from: the run's own, or
    /// this shard's (see [`Shard::seed`]).
    pub(crate) fn draw_seed(&self, seed: u64) -> u64 {
        self.shard.map_or(seed, |shard| shard.seed(seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_seconds_minutes_and_hours() {
        let secs = |raw: &str| parse_duration("--duration", raw).map(|d| d.as_secs_f64());
        assert_eq!(secs("30"), Ok(30.0));
        assert_eq!(secs("30s"), Ok(30.0));
        assert_eq!(secs("2m"), Ok(120.0));
        assert_eq!(secs("1.5m"), Ok(90.0));
        assert_eq!(secs("1h"), Ok(3600.0));
        assert_eq!(secs(" 0.25 "), Ok(0.25));
        for bad in ["0", "-3", "2d", "m", "", "nan", "inf", "200h"] {
            let err = secs(bad).expect_err(bad);
            assert!(err.starts_with("--duration "), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        assert_eq!(parse_gap("0"), Ok(Duration::ZERO));
        assert_eq!(parse_gap("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_gap("2.5"), Ok(Duration::from_millis(2500)));
        assert!(parse_gap("-1").is_err());
    }

    #[test]
    fn start_times_in_rfc3339_and_unix_seconds() {
        let unix = |raw: &str| {
            parse_start_at(raw).map(|t| {
                t.duration_since(UNIX_EPOCH)
                    .map_or(-1.0, |d| d.as_secs_f64())
            })
        };
        // 2026-12-01T13:00:00Z: 20,788 days after 1970-01-01, plus 13 h.
        let at = 20_788.0 * 86_400.0 + 13.0 * 3600.0;
        assert_eq!(unix("2026-12-01T13:00:00Z"), Ok(at));
        assert_eq!(unix("2026-12-01t13:00:00z"), Ok(at));
        assert_eq!(unix("2026-12-01 13:00:00Z"), Ok(at));
        assert_eq!(unix("2026-12-01T13:00:00.250Z"), Ok(at + 0.25));
        assert_eq!(unix("2026-12-01T14:30:00+01:30"), Ok(at));
        assert_eq!(unix("2026-12-01T08:00:00-05:00"), Ok(at));
        assert_eq!(unix("1796130000"), Ok(1_796_130_000.0));
        assert_eq!(unix("1796130000.5"), Ok(1_796_130_000.5));
        for bad in [
            "tomorrow",
            "2026-12-01",
            "2026-12-01T13:00:00",
            "2026-13-01T00:00:00Z",
            "2026-12-01T13:00:00.Z",
            "2026-12-01T13:00:00+1:00",
            "-5",
        ] {
            let err = parse_start_at(bad).expect_err(bad);
            assert!(err.starts_with("--start-at "), "{err}");
        }
    }

    #[test]
    fn shards_by_index_or_from_the_environment() {
        let none = |_: &str| None;
        assert_eq!(parse_shard("0/4", none), Ok(Shard { index: 0, count: 4 }));
        assert_eq!(parse_shard("3/4", none), Ok(Shard { index: 3, count: 4 }));
        let err = parse_shard("4/4", none).expect_err("out of range");
        assert!(
            err.contains("counted from 0") && err.contains("0 to 3"),
            "{err}"
        );
        for bad in ["4", "a/4", "1/0", "1/x", "-1/4"] {
            let err = parse_shard(bad, none).expect_err(bad);
            assert!(err.starts_with("--shard "), "{err}");
        }
        let err = parse_shard("auto/4", none).expect_err("no variable");
        assert!(
            err.contains("JOB_COMPLETION_INDEX") && err.contains("RANK"),
            "{err}"
        );
        let k8s = |name: &str| (name == "JOB_COMPLETION_INDEX").then(|| "2".to_string());
        assert_eq!(parse_shard("auto/4", k8s), Ok(Shard { index: 2, count: 4 }));
        // The Indexed Job's variable wins over RANK.
        let both = |name: &str| Some(if name == "RANK" { "1" } else { "3" }.to_string());
        assert_eq!(
            parse_shard("auto/4", both),
            Ok(Shard { index: 3, count: 4 })
        );
        let rank = |name: &str| (name == "RANK").then(|| "7".to_string());
        let err = parse_shard("auto/4", rank).expect_err("out of range");
        assert!(err.contains("RANK=7 is out of range"), "{err}");
        let junk = |name: &str| (name == "RANK").then(|| "x".to_string());
        assert!(parse_shard("auto/4", junk).is_err());
    }

    #[test]
    fn shares_split_the_total_with_the_remainder_first() {
        let shares = |total: u32, count: u32| -> Vec<u32> {
            (0..count)
                .map(|index| Shard { index, count }.share(total))
                .collect()
        };
        assert_eq!(shares(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(shares(1, 4), vec![1, 0, 0, 0]);
        assert_eq!(shares(8, 4), vec![2, 2, 2, 2]);
        assert_eq!(shares(7, 1), vec![7]);
        for (total, count) in [(10, 4), (1, 4), (129, 7), (0, 3)] {
            assert_eq!(shares(total, count).iter().sum::<u32>(), total);
        }
        let s = Shard { index: 1, count: 4 };
        assert_eq!(s.share_rate(10.0), 2.5);
        assert!(s.share_rate(f64::INFINITY).is_infinite());
        // Every shard draws from its own seed, none from the run's.
        let seeds: Vec<u64> = (0..4)
            .map(|index| Shard { index, count: 4 }.seed(42))
            .collect();
        let mut unique = seeds.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 4);
        assert!(!seeds.contains(&42));
    }
}
