//! The open-file limit against what the largest level needs: every stream
//! holds a socket, and the result files, the probe, the exports and the
//! runtime hold more. The soft limit is raised to the hard one where that
//! helps; a hard limit too low for the level refuses the run before
//! anything is sent, unless `--force`.

use color_eyre::eyre::{bail, Result};

/// Descriptors beside the streams: the three standard ones, the runtime's
/// poll and wake descriptors, the gauge scrapes, the result files open
/// through the run (`requests.jsonl`, `probes.jsonl`) and the ones a level
/// file and `summary.json` need while written, with a margin (a run at 8
/// streams was seen holding 34 in all).
const BASE: u64 = 32;
/// `--probe-rate`: the probes' own pool.
const PROBES: u64 = 16;
/// `--metrics-listen`: the listener and its scrapers.
const METRICS: u64 = 8;

/// What the run needs: the streams of its largest level and the rest.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Need {
    pub streams: u32,
    /// The level in words: `level 400`, `the cap of 600 requests in flight`.
    pub what: String,
    pub probes: bool,
    pub metrics: bool,
}

impl Need {
    pub(crate) fn files(&self) -> u64 {
        u64::from(self.streams)
            + BASE
            + if self.probes { PROBES } else { 0 }
            + if self.metrics { METRICS } else { 0 }
    }
}

/// What to do with the limits found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    /// The soft limit is enough as it is.
    Enough,
    /// Raise the soft limit to `to` (the hard limit); the line says so.
    Raise { to: u64, line: String },
    /// The hard limit is too low: refuse, in this line.
    Refuse(String),
    /// Too low, run anyway (`--force`), raised to `to`; the line warns.
    Forced { to: u64, line: String },
}

/// The verdict on a soft and a hard limit for what the run needs. Pure.
pub(crate) fn verdict(soft: u64, hard: u64, need: &Need, force: bool) -> Verdict {
    let files = need.files();
    if soft >= files {
        return Verdict::Enough;
    }
    if hard >= files {
        return Verdict::Raise {
            to: hard,
            line: format!(
                "raised the open-file limit from {soft} to {hard}: {} needs about {files}",
                need.what
            ),
        };
    }
    let short = format!(
        "{} needs about {files} open files; the hard limit is {hard}",
        need.what
    );
    if force {
        Verdict::Forced {
            to: hard,
            line: format!(
                "{short}: running anyway (--force); requests that find no descriptor are counted as client_fd_limit"
            ),
        }
    } else {
        Verdict::Refuse(format!(
            "{short}: raise it (ulimit -Hn, /etc/security/limits.conf) or lower --concurrency; --force runs anyway"
        ))
    }
}

/// Check the limits for `need`, raising the soft one where it helps: the
/// line to print, if any, or the refusal.
pub(crate) fn check(need: Option<&Need>, force: bool) -> Result<Option<String>> {
    let Some(need) = need else {
        return Ok(None);
    };
    let Some((soft, hard)) = limits() else {
        return Ok(None);
    };
    match verdict(soft, hard, need, force) {
        Verdict::Enough => Ok(None),
        Verdict::Raise { to, line } => Ok(set_soft(to, hard).then_some(line)),
        Verdict::Forced { to, line } => {
            set_soft(to, hard);
            Ok(Some(line))
        }
        Verdict::Refuse(line) => bail!(line),
    }
}

#[cfg(unix)]
fn limits() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some((limit.rlim_cur, limit.rlim_max))
}

#[cfg(unix)]
fn set_soft(to: u64, hard: u64) -> bool {
    let raised = libc::rlimit {
        rlim_cur: to,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct given.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 }
}

#[cfg(not(unix))]
fn limits() -> Option<(u64, u64)> {
    None
}

#[cfg(not(unix))]
fn set_soft(_: u64, _: u64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(streams: u32, probes: bool) -> Need {
        Need {
            streams,
            what: format!("level {streams}"),
            probes,
            metrics: false,
        }
    }

    /// 400 streams need 400 + 32 = 432 files, 448 with probes.
    #[test]
    fn limits_against_the_largest_level_worked_by_hand() {
        assert_eq!(need(400, false).files(), 432);
        assert_eq!(need(400, true).files(), 448);
        assert_eq!(
            Need {
                metrics: true,
                ..need(400, true)
            }
            .files(),
            456
        );
        // Soft 1024: enough as it is, nothing said.
        assert_eq!(
            verdict(1024, 4096, &need(400, false), false),
            Verdict::Enough
        );
        // Soft 256, hard 4096: raised, in one line.
        assert_eq!(
            verdict(256, 4096, &need(400, false), false),
            Verdict::Raise {
                to: 4096,
                line: "raised the open-file limit from 256 to 4096: level 400 needs about 432"
                    .into()
            }
        );
        // Hard 256: refused, naming the level, the need and the limit.
        assert_eq!(
            verdict(256, 256, &need(400, false), false),
            Verdict::Refuse(
                "level 400 needs about 432 open files; the hard limit is 256: raise it (ulimit -Hn, /etc/security/limits.conf) or lower --concurrency; --force runs anyway".into()
            )
        );
        // With --force: raised as far as it goes, and warned.
        match verdict(128, 256, &need(400, false), true) {
            Verdict::Forced { to, line } => {
                assert_eq!(to, 256);
                assert!(line.ends_with("counted as client_fd_limit"), "{line}");
            }
            other => panic!("{other:?}"),
        }
        // Exactly enough is enough.
        assert_eq!(verdict(432, 432, &need(400, false), false), Verdict::Enough);
    }
}
