//! `tokbench view DIR --follow` without a terminal, against a real run:
//! a headless sweep of the simulator writes its folder while follow reads
//! it. Follow ends by itself once the run's summary says the run is over
//! (`run.ended_at`), says so, exits 0, and prints each level's progress
//! line before its "level done" line. On a terminal, the view says the run
//! is over and stays until `q`. Waits are on states (a file there, a
//! process gone, the screen), never a fixed time.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::{bin, paced, scratch, Sim, Tmux};

/// Generous: a loaded machine with three other tests beside this one.
const LIMIT: Duration = Duration::from_secs(120);

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "waited {LIMIT:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child's exit, or None when it is still running after `LIMIT` (then
/// it is killed).
fn exit_within_limit(child: &mut Child) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sweep(sim: &Sim, dir: &Path, extra: &[&str]) -> Child {
    Command::new(bin())
        .args(["sweep", "--base-url", &sim.url(), "--no-tui", "--no-probe"])
        .args(["--random-input-len", "32", "--random-output-len", "16"])
        .args(["--num-prompts", "12"])
        .args(["--warmup", "1"])
        .arg("--result-dir")
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sweep starts")
}

/// `view --follow DIRS` with stdin, stdout and stderr no terminal: both
/// outputs into one file, in the order they were written.
fn follow(dirs: &[PathBuf], out: &Path) -> Child {
    let file = File::create(out).expect("output file");
    Command::new(bin())
        .arg("view")
        .args(dirs)
        .arg("--follow")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone"))
        .stderr(file)
        .spawn()
        .expect("follow starts")
}

/// Every level's "following" lines come before its "level done" line.
fn assert_in_order(text: &str, levels: &[(u64, u64)]) {
    let lines: Vec<&str> = text.lines().collect();
    for (number, concurrency) in levels {
        let done = lines
            .iter()
            .position(|l| l.starts_with(&format!("level done: concurrency {concurrency} ")))
            .unwrap_or_else(|| panic!("no level done line for {concurrency}:\n{text}"));
        let late = lines[done..]
            .iter()
            .any(|l| l.starts_with("following") && l.contains(&format!(": level {number} ")));
        assert!(
            !late,
            "level {number}'s progress after its level done line:\n{text}"
        );
    }
}

#[test]
fn follow_without_a_terminal_ends_when_the_run_does() {
    let sim = Sim::with(paced(5.0, 0.0));
    let root = scratch("follow", "one");
    let dir = root.join("run");
    let mut run = sweep(&sim, &dir, &["--concurrency", "1,2,4"]);
    // Follow reads a run that has begun: its summary is written first.
    wait_for("the run's summary.json", || {
        dir.join("summary.json").exists()
    });
    let out = root.join("follow.txt");
    let mut follower = follow(std::slice::from_ref(&dir), &out);
    assert!(run.wait().expect("sweep ends").success(), "the sweep");
    let status = exit_within_limit(&mut follower);
    let text = std::fs::read_to_string(&out).expect("follow's output");
    let status = status.unwrap_or_else(|| panic!("follow still running {LIMIT:?} after:\n{text}"));
    assert_eq!(status.code(), Some(0), "{text}");
    let over = format!(
        "run over: 3 levels, summary in {}",
        dir.join("summary.json").display()
    );
    assert_eq!(text.lines().last(), Some(over.as_str()), "{text}");
    assert_in_order(&text, &[(1, 1), (2, 2), (3, 4)]);
}

#[test]
fn follow_of_shards_ends_when_every_shard_is_over() {
    let sim = Sim::with(paced(5.0, 0.0));
    let root = scratch("follow", "shards");
    let dirs: Vec<PathBuf> = (0..2).map(|i| root.join(format!("s{i}"))).collect();
    let mut runs: Vec<Child> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let shard = format!("{i}/2");
            sweep(
                &sim,
                dir,
                &["--concurrency", "2,4,8", "--seed", "42", "--shard", &shard],
            )
        })
        .collect();
    for dir in &dirs {
        wait_for("a shard's summary.json", || {
            dir.join("summary.json").exists()
        });
    }
    let out = root.join("follow.txt");
    let mut follower = follow(&dirs, &out);
    for run in &mut runs {
        assert!(run.wait().expect("shard ends").success(), "a shard");
    }
    let status = exit_within_limit(&mut follower);
    let text = std::fs::read_to_string(&out).expect("follow's output");
    let status = status.unwrap_or_else(|| panic!("follow still running {LIMIT:?} after:\n{text}"));
    assert_eq!(status.code(), Some(0), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("run over: all 2 shards ended; 3 levels merged, summaries in "),
        "{text}"
    );
    // Merged: each level's streams are the shards' together.
    assert_in_order(&text, &[(1, 2), (2, 4), (3, 8)]);
}

/// On a terminal: the same line in the view, which stays up to be read,
/// and `q` leaves it with exit 0.
#[test]
fn the_follow_view_says_the_run_is_over_and_stays_until_q() {
    let sim = Sim::with(paced(5.0, 0.0));
    let root = scratch("follow", "screen");
    let dir = root.join("run");
    let mut run = sweep(&sim, &dir, &["--concurrency", "1,2"]);
    wait_for("the run's summary.json", || {
        dir.join("summary.json").exists()
    });
    let tmux = Tmux::start(
        "follow",
        160,
        40,
        &format!(
            "sh -c 'exec env TERM=xterm-256color {} view {} --follow'; echo FOLLOW_EXIT=$?; sleep 60",
            bin(),
            dir.display()
        ),
    );
    assert!(run.wait().expect("sweep ends").success(), "the sweep");
    tmux.wait_for("the run over line", LIMIT, |s| {
        s.contains("run over: 2 levels") && s.contains("q to leave")
    });
    assert!(tmux.alternate_on(), "the view stays up after the run");
    tmux.keys("q");
    tmux.wait_for("follow's exit", LIMIT, |s| s.contains("FOLLOW_EXIT=0"));
}
