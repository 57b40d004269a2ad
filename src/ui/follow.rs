//! `tokbench view DIR --follow`: a run in progress, read from its files by
//! another process. summary.json is rewritten atomically after every level;
//! requests.jsonl grows a line per request, so the level under way is
//! counted from its new lines. Read-only: nothing here writes or sends.
//!
//! `view --follow DIR DIR...` follows the shard folders of one run
//! (`sweep --shard I/N`) and shows them merged: on each change of any
//! shard's summary.json, every shard is read again and merged with the
//! same pure function `tokbench merge` uses (`merge::merge`), over the
//! levels every shard has finished so far.
//!
//! A run is over when its summary says so (`run.ended_at`, written when
//! the recorder closes its books); shards, when every shard's summary says
//! so. [`Following::over_line`] words it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::merge::{self, files::load_shard, MergeOptions};
use crate::report::saved::SavedRun;
use crate::report::schema::RequestLine;

/// Most bytes read from requests.jsonl per poll (a huge backlog is taken
/// in steps, so a poll stays short).
const MAX_READ_PER_POLL: u64 = 8 * 1024 * 1024;

/// What has been read of a run's files so far.
#[derive(Debug)]
pub(crate) struct Follower {
    dir: PathBuf,
    summary_stamp: Option<(SystemTime, u64)>,
    jsonl_offset: u64,
    /// Bytes after the last newline, waiting for the rest of their line.
    partial_line: Vec<u8>,
    pub progress: LiveProgress,
}

/// Requests seen in requests.jsonl, for the level under way.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LiveProgress {
    /// Highest level index seen in requests.jsonl.
    pub level: Option<u64>,
    /// Concurrency of that level, as the lines say.
    pub concurrency: Option<u64>,
    pub done: u64,
    pub failed: u64,
    /// Lines that were not a request record (torn or foreign).
    pub unreadable: u64,
    pub last_line_at: Option<SystemTime>,
}

impl Follower {
    pub(crate) fn new(dir: &Path) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            summary_stamp: None,
            jsonl_offset: 0,
            partial_line: Vec::new(),
            progress: LiveProgress::default(),
        }
    }

    /// True when summary.json changed since the last call (or is new).
    pub(crate) fn summary_changed(&mut self) -> bool {
        let stamp = std::fs::metadata(self.dir.join("summary.json"))
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        if stamp.is_some() && stamp != self.summary_stamp {
            self.summary_stamp = stamp;
            return true;
        }
        false
    }

    /// Read what requests.jsonl gained since the last poll.
    pub(crate) fn poll_requests(&mut self) {
        let path = self.dir.join("requests.jsonl");
        let Ok(mut file) = File::open(&path) else {
            return;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.jsonl_offset {
            // Rewritten from the start (a new run in the same folder).
            self.jsonl_offset = 0;
            self.partial_line.clear();
            self.progress = LiveProgress::default();
        }
        if len == self.jsonl_offset || file.seek(SeekFrom::Start(self.jsonl_offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let want = (len - self.jsonl_offset).min(MAX_READ_PER_POLL);
        if file.take(want).read_to_end(&mut bytes).is_err() {
            return;
        }
        self.jsonl_offset += bytes.len() as u64;
        self.feed(&bytes, SystemTime::now());
    }

    /// Count whole lines; keep a torn last line for the next poll.
    pub(crate) fn feed(&mut self, bytes: &[u8], now: SystemTime) {
        self.partial_line.extend_from_slice(bytes);
        let Some(last_newline) = self.partial_line.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let rest = self.partial_line.split_off(last_newline + 1);
        let whole = std::mem::replace(&mut self.partial_line, rest);
        for line in whole.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<RequestLine>(line) {
                Ok(v) if v.level.is_some() => {
                    self.count(&v);
                    self.progress.last_line_at = Some(now);
                }
                _ => self.progress.unreadable += 1,
            }
        }
    }

    fn count(&mut self, v: &RequestLine) {
        let level = v.level;
        let p = &mut self.progress;
        if level > p.level {
            p.level = level;
            p.concurrency = v.concurrency.map(u64::from);
            p.done = 0;
            p.failed = 0;
        }
        if level == p.level {
            p.done += 1;
            if v.error.is_some() {
                p.failed += 1;
            }
        }
    }

    /// One line for the screen: what the level under way has done.
    pub(crate) fn status_line(&self, now: SystemTime) -> String {
        let p = &self.progress;
        let age = p
            .last_line_at
            .and_then(|t| now.duration_since(t).ok())
            .map_or_else(
                || "no request yet".to_string(),
                |d| format!("last request {:.0} s ago", d.as_secs_f64()),
            );
        match p.level {
            Some(level) => format!(
                "following: level {} (concurrency {}) {} requests back, {} failed; {age}",
                level + 1,
                p.concurrency.map_or_else(|| "?".into(), |c| c.to_string()),
                p.done,
                p.failed
            ),
            None => format!("following: waiting for the first request; {age}"),
        }
    }
}

/// What `view --follow` watches: one run's folder, or the shard folders
/// of one run, merged.
#[derive(Debug)]
pub(crate) enum Following {
    One {
        path: PathBuf,
        follower: Follower,
    },
    Shards {
        paths: Vec<PathBuf>,
        followers: Vec<Follower>,
        /// Why the last merge did not happen (a refusal, no summary yet).
        problem: Option<String>,
        /// Shard folders with a summary.json at the last merge.
        merged: usize,
        /// Shard folders whose summary said the run ended, at the last merge.
        ended: usize,
    },
}

impl Following {
    /// One path: that run, as `view --follow DIR` always did. More: shards.
    pub(crate) fn new(paths: &[PathBuf]) -> Following {
        match paths {
            [one] => Following::One {
                path: one.clone(),
                follower: Follower::new(&merge::files::folder_of(one)),
            },
            many => Following::Shards {
                paths: many.to_vec(),
                followers: many
                    .iter()
                    .map(|p| Follower::new(&merge::files::folder_of(p)))
                    .collect(),
                problem: None,
                merged: 0,
                ended: 0,
            },
        }
    }

    /// True when some summary.json changed since the last call.
    pub(crate) fn summary_changed(&mut self) -> bool {
        match self {
            Following::One { follower, .. } => follower.summary_changed(),
            // Every follower looks, so each one's stamp stays current.
            Following::Shards { followers, .. } => {
                let mut changed = false;
                for f in followers.iter_mut() {
                    changed |= f.summary_changed();
                }
                changed
            }
        }
    }

    pub(crate) fn poll_requests(&mut self) {
        match self {
            Following::One { follower, .. } => follower.poll_requests(),
            Following::Shards { followers, .. } => {
                followers.iter_mut().for_each(Follower::poll_requests)
            }
        }
    }

    /// The run to show: the one folder's summary, or the shards merged.
    pub(crate) fn load(&mut self) -> color_eyre::eyre::Result<Vec<SavedRun>> {
        match self {
            Following::One { path, .. } => Ok(vec![SavedRun::load(path)?]),
            Following::Shards {
                paths,
                problem,
                merged,
                ended,
                ..
            } => {
                let result = merge_shards(paths);
                *problem = result.as_ref().err().map(|e| format!("{e:#}"));
                let (run, n, over) = result?;
                *merged = n;
                *ended = over;
                Ok(vec![run])
            }
        }
    }

    /// The newest level any followed folder's requests.jsonl has reached.
    pub(crate) fn level_under_way(&self) -> Option<u64> {
        match self {
            Following::One { follower, .. } => follower.progress.level,
            Following::Shards { followers, .. } => {
                followers.iter().filter_map(|f| f.progress.level).max()
            }
        }
    }

    /// When the run `load` gave is over (its summary says it ended; every
    /// shard's, for shards): the line that says so.
    pub(crate) fn over_line(&self, run: &SavedRun) -> Option<String> {
        let levels = run.levels.len();
        let levels = format!("{levels} level{}", if levels == 1 { "" } else { "s" });
        match self {
            Following::One { path, .. } => run.run.ended_at.as_ref().map(|_| {
                format!(
                    "run over: {levels}, summary in {}",
                    crate::report::saved::summary_path(path).display()
                )
            }),
            Following::Shards { paths, ended, .. } => (*ended == paths.len()).then(|| {
                let summaries: Vec<String> = paths
                    .iter()
                    .map(|p| crate::report::saved::summary_path(p).display().to_string())
                    .collect();
                format!(
                    "run over: all {} shards ended; {levels} merged, summaries in {}",
                    paths.len(),
                    summaries.join(", ")
                )
            }),
        }
    }

    pub(crate) fn status_line(&self, now: SystemTime) -> String {
        match self {
            Following::One { follower, .. } => follower.status_line(now),
            Following::Shards {
                followers,
                problem,
                merged,
                ..
            } => shards_status(followers, *merged, problem.as_deref(), now),
        }
    }
}

/// Every shard folder with a summary.json so far, merged over the levels
/// all of them have; the count of shard folders in it, and of those whose
/// run ended.
fn merge_shards(paths: &[PathBuf]) -> color_eyre::eyre::Result<(SavedRun, usize, usize)> {
    // A shard that has not written its summary.json yet is left out, as
    // `--allow-missing` would: the others are shown meanwhile.
    let mut runs: Vec<merge::ShardRun> = paths.iter().filter_map(|p| load_shard(p).ok()).collect();
    if runs.is_empty() {
        color_eyre::eyre::bail!("no shard has a summary.json yet");
    }
    let ended = runs
        .iter()
        .filter(|r| r.summary.run.ended_at.is_some())
        .count();
    merge::keep_common_levels(&mut runs);
    let merged = merge::merge(
        &runs,
        MergeOptions {
            allow_missing: true,
        },
    )
    .map_err(|e| color_eyre::eyre::eyre!("cannot merge the shards: {e}"))?;
    let name: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let run = SavedRun::from_value(
        merged.summary.to_value(),
        Path::new(&format!("merged {}", name.join(" + "))),
    )?;
    Ok((run, runs.len(), ended))
}

/// One line for the screen: every shard's level under way, summed.
fn shards_status(
    followers: &[Follower],
    merged: usize,
    problem: Option<&str>,
    now: SystemTime,
) -> String {
    let total = followers.len();
    if let Some(problem) = problem {
        return format!("following {total} shards: {problem}");
    }
    let level = followers.iter().filter_map(|f| f.progress.level).max();
    // Requests back at the newest level any shard has reached.
    let at_level = followers
        .iter()
        .filter(|f| f.progress.level.is_some() && f.progress.level == level);
    let (done, failed) = at_level.clone().fold((0, 0), |(d, x), f| {
        (d + f.progress.done, x + f.progress.failed)
    });
    let concurrency: Option<u64> = at_level.clone().map(|f| f.progress.concurrency).sum();
    let there = at_level.count();
    let age = followers
        .iter()
        .filter_map(|f| f.progress.last_line_at)
        .max()
        .and_then(|t| now.duration_since(t).ok())
        .map_or_else(
            || "no request yet".to_string(),
            |d| format!("last request {:.0} s ago", d.as_secs_f64()),
        );
    match level {
        Some(level) => format!(
            "following {total} shards merged ({merged} with results): level {} in {there} shards (concurrency {} in all) {done} requests back, {failed} failed; {age}",
            level + 1,
            concurrency.map_or_else(|| "?".into(), |c| c.to_string()),
        ),
        None => format!("following {total} shards: waiting for the first request; {age}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_newest_level_and_waits_for_torn_lines() {
        let mut f = Follower::new(Path::new("/nonexistent"));
        let t = SystemTime::UNIX_EPOCH;
        f.feed(b"{\"level\":0,\"concurrency\":1,\"error\":null}\n{\"level\":1,\"concurrency\":4,\"error\":null}\n{\"level\":1,\"conc", t);
        assert_eq!(f.progress.level, Some(1));
        assert_eq!((f.progress.done, f.progress.failed), (1, 0));
        // The torn line completes, and a failed one follows; then garbage.
        f.feed(b"urrency\":4,\"error\":\"http_500\"}\n{\"level\":1,\"concurrency\":4,\"error\":null}\nnot json\n", t);
        assert_eq!((f.progress.done, f.progress.failed), (3, 1));
        assert_eq!(f.progress.unreadable, 1);
        assert_eq!(
            f.status_line(t),
            "following: level 2 (concurrency 4) 3 requests back, 1 failed; last request 0 s ago"
        );
    }

    #[test]
    fn reads_appended_lines_from_the_file() {
        let dir = std::env::temp_dir().join(format!("tokbench-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("requests.jsonl");
        std::fs::write(&path, "{\"level\":0,\"concurrency\":2,\"error\":null}\n").expect("write");
        let mut f = Follower::new(&dir);
        f.poll_requests();
        assert_eq!(f.progress.done, 1);
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        file.write_all(b"{\"level\":0,\"concurrency\":2,\"error\":\"timeout\"}\n")
            .expect("append");
        f.poll_requests();
        assert_eq!((f.progress.done, f.progress.failed), (2, 1));
        assert!(!f.summary_changed(), "no summary.json yet");
        std::fs::write(dir.join("summary.json"), "{}").expect("summary");
        assert!(f.summary_changed());
        assert!(!f.summary_changed());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn several_shard_folders_are_followed_merged() {
        let dir =
            std::env::temp_dir().join(format!("tokbench-follow-shards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut paths = crate::merge::tests::write_shard_folders(&dir);
        // A third folder whose shard has not written anything yet.
        paths.push(dir.join("not-yet"));
        let mut f = Following::new(&paths);
        assert!(f.summary_changed());
        let runs = f.load().expect("the two shards merge");
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].levels[0].completed, Some(5));
        assert_eq!(runs[0].levels[0].concurrency, Some(5));
        f.poll_requests();
        // At the epoch the lines' age is unknown: "no request yet".
        let t = SystemTime::UNIX_EPOCH;
        assert_eq!(
            f.status_line(t),
            "following 3 shards merged (2 with results): level 1 in 2 shards (concurrency ? in all) 4 requests back, 0 failed; no request yet"
        );
        // Over only when every shard's summary says its run ended; the
        // merged summary then ends with the last of them.
        assert_eq!(f.over_line(&runs[0]), None);
        let pair = paths[..2].to_vec();
        let mut two = Following::new(&pair);
        let end = |path: &PathBuf, at: &str| {
            let file = path.join("summary.json");
            let mut summary: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
            summary["run"]["ended_at"] = serde_json::json!(at);
            std::fs::write(&file, summary.to_string()).expect("write");
        };
        end(&pair[0], "2026-12-01T10:00:05Z");
        let runs = two.load().expect("merged");
        assert_eq!(
            (two.over_line(&runs[0]), runs[0].run.ended_at.clone()),
            (None, None)
        );
        end(&pair[1], "2026-12-01T10:00:07Z");
        let runs = two.load().expect("merged");
        let line = two.over_line(&runs[0]).expect("over");
        assert!(
            line.starts_with("run over: all 2 shards ended; 1 level merged, summaries in "),
            "{line}"
        );
        assert_eq!(
            runs[0].run.ended_at.as_deref(),
            Some("2026-12-01T10:00:07Z")
        );
        // No folder left: the line says why (the screen keeps what it had).
        std::fs::remove_dir_all(&dir).ok();
        let mut gone = Following::new(&paths);
        assert!(gone.load().is_err());
        assert_eq!(
            gone.status_line(t),
            "following 3 shards: no shard has a summary.json yet"
        );
    }
}
