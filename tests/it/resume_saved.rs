//! `sweep --resume DIR` alone continues the run from the settings its
//! folder saved (config.toml); a flag naming another server or model than
//! the run's is refused in one line, before anything is sent. The API key
//! is never in the folder: the resumed run takes it as any run does.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokbench::sim::SimConfig;

use crate::support::{bin, paced, read_json, scratch_path, stderr, text, Sim};

const KEY: &str = "resume-key-7f3a";

fn sweep(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("sweep")
        .args(args)
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs")
}

#[test]
fn resume_alone_continues_from_the_saved_settings() {
    // One batch slot, 0.6 s an answer: level 2 is under way, with most of
    // it to come, when level 1's file appears.
    let sim = Sim::with(SimConfig {
        max_num_seqs: 1,
        api_key: Some(KEY.into()),
        ..paced(3.0, 1.0)
    });
    let dir = scratch_path("resume_saved", "alone");
    let dir_s = dir.display().to_string();
    let url = sim.url();
    let child = Command::new(bin())
        .args(["sweep", "--base-url", &url, "--concurrency", "1,2"])
        .args(["--num-prompts", "3", "--warmup", "1", "--no-tui"])
        .args(["--random-input-len", "16", "--random-output-len", "200"])
        .args(["--result-dir", &dir_s])
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("sweep-c1.json").exists() {
        assert!(Instant::now() < deadline, "level 1 never finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));

    // Another server, or another model: refused in one line naming both,
    // credentials not shown.
    for (flag, value, saved) in [
        ("--base-url", "http://user:pw@127.0.0.1:1", url.as_str()),
        ("--model", "another-model", "sim"),
    ] {
        let out = sweep(&["--resume", &dir_s, flag, value]);
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", text(&out));
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        let shown = value.replace("user:pw@", "");
        assert!(
            err.contains(saved) && err.contains(&format!("{flag} {shown}")),
            "{err}"
        );
        assert!(!err.contains("pw@"), "{err}");
    }

    // Nothing but the folder: its settings, the key from the environment.
    let out = sweep(&["--resume", &dir_s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = read_json(&dir.join("summary.json"));
    let levels: Vec<(u64, bool, u64)> = summary["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            (
                l["max_concurrency"].as_u64().unwrap_or(0),
                l["partial"].as_bool().unwrap_or(true),
                l["failed"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(levels, vec![(1, false, 0), (2, false, 0)], "{}", text(&out));
    assert_eq!(summary["resumed"]["levels_kept"], 1);
    // The table it prints is the whole run: the kept level first, marked.
    let printed = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = printed
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("streams"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let shown: Vec<(&str, Option<&str>)> = rows.iter().map(|r| (r[0], r.get(6).copied())).collect();
    assert_eq!(shown, [("1", Some("kept")), ("2", None)], "{printed}");
}
