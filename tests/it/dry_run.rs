//! Flags that promise to send nothing and start nothing keep it: `tune
//! --print-config` starts no server and writes no folder; `demo` takes no
//! target of the user's (it runs its own simulator).

use std::process::{Command, Stdio};

use crate::support::{bin, scratch, stderr, stdout, text, tokbench};

#[test]
fn tune_print_config_starts_nothing_and_shows_each_command() {
    let dir = scratch("dry_run", "tune-print-config");
    let marker = dir.join("started");
    let results = dir.join("results");
    // Were it started, each setting's server would leave a file behind.
    let serve = format!(
        "touch {}-{{np}}; exec sleep 30 --port {{port}}",
        marker.display()
    );
    let out = Command::new(bin())
        .current_dir(&dir)
        .args(["tune", "--serve-shell", "--serve-cmd", &serve])
        .args(["--grid", "np=1,2,4", "--concurrency", "1", "--no-tui"])
        .args(["--serve-env", "OLLAMA_NUM_PARALLEL={np}"])
        .args(["--serve-env", "HF_TOKEN=hunter2-secret"])
        .arg("--result-dir")
        .arg(&results)
        .arg("--print-config")
        .stdin(Stdio::null())
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = stdout(&out);
    for np in ["1", "2", "4"] {
        let filled = format!("touch {}-{np}; exec sleep 30 --port", marker.display());
        assert!(
            shown.contains(&format!("np={np}: sh -c"))
                && shown.contains(&filled)
                && shown.contains(&format!("OLLAMA_NUM_PARALLEL={np}")),
            "setting np={np} not shown filled:\n{shown}"
        );
    }
    assert!(shown.contains("HF_TOKEN=<hidden>"), "{shown}");
    assert!(!text(&out).contains("hunter2"), "{}", text(&out));
    // Nothing started, nothing written: no marker, no result folder.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("scratch")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{}", text(&out));
}

#[test]
fn a_search_grid_says_where_it_starts_and_its_bounds() {
    let out = tokbench([
        "tune",
        "--serve-cmd",
        "tokbench sim --port {port} --parallel {np}",
        "--grid",
        "np=2..16",
        "--print-config",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("starts at np=2") && shown.contains("np=16 (the top given)"),
        "{shown}"
    );
    assert!(shown.contains("np=2: tokbench sim --port "), "{shown}");
}

#[test]
fn demo_refuses_a_target_in_one_line_and_does_not_offer_one() {
    for flag in [
        ["--base-url", "http://127.0.0.1:1"],
        ["--model", "llama3"],
        ["--api-key", "k"],
        ["--gpu-metrics", "http://127.0.0.1:1/metrics"],
    ] {
        let out = tokbench(["demo", "--no-tui", flag[0], flag[1]]);
        assert_eq!(out.status.code(), Some(1), "{flag:?}: {}", text(&out));
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "{}: demo runs its own simulator; use sweep for a server",
                flag[0]
            )),
            "{err}"
        );
        assert!(stdout(&out).is_empty(), "{}", text(&out));
    }
    let help = stdout(&tokbench(["demo", "--help"]));
    for flag in ["--base-url", "--model", "--api-key", "--gpu-metrics"] {
        assert!(!help.contains(flag), "demo --help offers {flag}:\n{help}");
    }
    // Nor do the completions (zsh and fish complete hidden flags too).
    let fish = stdout(&tokbench(["completions", "fish"]));
    let demo: Vec<&str> = fish
        .lines()
        .filter(|l| l.contains("using_subcommand demo"))
        .collect();
    assert!(demo.iter().any(|l| l.contains("-l concurrency")), "{fish}");
    for flag in ["base-url", "model", "api-key", "gpu-metrics"] {
        let offered = demo.iter().any(|l| l.contains(&format!("-l {flag} ")));
        assert!(!offered, "fish completes demo --{flag}");
    }
    // A key in the environment is not the user asking: the demo runs.
    let out = Command::new(bin())
        .args(["demo", "--print-config"])
        .env("OPENAI_API_KEY", "k")
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
