//! `tokbench view DIR --follow`: a run in progress, read from its files by
//! another process. summary.json is rewritten atomically after every level;
//! requests.jsonl grows a line per request, so the level under way is
//! counted from its new lines. Read-only: nothing here writes or sends.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::report::schema::RequestLine;

/// Most bytes read from requests.jsonl per poll (a huge backlog is taken
/// in steps, so a poll stays short).
const MAX_READ_PER_POLL: u64 = 8 * 1024 * 1024;

/// What has been read of a run's files so far.
#[derive(Debug)]
pub struct Follower {
    dir: PathBuf,
    summary_stamp: Option<(SystemTime, u64)>,
    jsonl_offset: u64,
    /// Bytes after the last newline, waiting for the rest of their line.
    partial_line: Vec<u8>,
    pub progress: LiveProgress,
}

/// Requests seen in requests.jsonl, for the level under way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveProgress {
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
    pub fn new(dir: &Path) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            summary_stamp: None,
            jsonl_offset: 0,
            partial_line: Vec::new(),
            progress: LiveProgress::default(),
        }
    }

    /// True when summary.json changed since the last call (or is new).
    pub fn summary_changed(&mut self) -> bool {
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
    pub fn poll_requests(&mut self) {
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
    pub fn feed(&mut self, bytes: &[u8], now: SystemTime) {
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
    pub fn status_line(&self, now: SystemTime) -> String {
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
}
