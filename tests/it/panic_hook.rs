//! A panic while the live view is up (issue 14, item 5: the `dist` profile
//! keeps panic = "unwind"): the hook in src/ui/terminal.rs gives the
//! terminal back (raw mode off, alternate screen left), the run is stopped
//! and saved, and the exit code is 1. `TOKBENCH_TEST_PANIC=S` makes a task
//! panic S seconds in. `TOKBENCH_BIN=target/dist/tokbench cargo test --test
//! it panic_hook::` runs the same check on another build of the binary. The
//! panic and its hook are in that child process, not in this one, so this
//! test shares the one test binary.
//!
//! Needs tmux, like tests/it/tui.rs.

use std::time::Duration;

use crate::support::{self, paced, read_json, Sim, Tmux};

#[test]
fn a_panic_in_the_view_restores_the_terminal_and_saves_the_run() {
    let bin = std::env::var("TOKBENCH_BIN").unwrap_or_else(|_| support::bin().to_string());
    let sim = Sim::with(paced(2.0, 1.0));
    let dir = support::scratch("panic_hook", "view");
    let results = dir.join("results");
    let stty = dir.join("stty.txt");
    let command = format!(
        "sh -c 'exec env TERM=xterm-256color TOKBENCH_TEST_PANIC=1.5 {bin} sweep --base-url {url} \
         --concurrency 2 --num-prompts 100000 --warmup 1 --random-input-len 16 \
         --random-output-len 64 --seed 3 --result-dir {dir}'; \
         code=$?; stty -a > {stty}; echo TOKBENCH_EXIT=$code; sleep 60",
        url = sim.url(),
        dir = results.display(),
        stty = stty.display(),
    );
    let tmux = Tmux::start("panic", 120, 40, &command);
    tmux.wait_for("the live view", Duration::from_secs(10), |s| {
        s.contains("Concurrency 2")
    });
    assert!(tmux.alternate_on(), "the view is on the alternate screen");
    let screen = {
        tmux.wait_for("exit after the panic", Duration::from_secs(15), |s| {
            s.contains("TOKBENCH_EXIT=")
        });
        tmux.screen_with_history()
    };
    assert!(
        !tmux.alternate_on(),
        "the alternate screen was left:\n{screen}"
    );
    assert!(screen.contains("TOKBENCH_EXIT=1"), "exit 1:\n{screen}");
    assert!(
        screen.contains("TOKBENCH_TEST_PANIC: a panic in the live view's process, on purpose"),
        "the panic message is on the normal screen:\n{screen}"
    );
    // The report comes first: the closing line says "panic above".
    let report = screen.find("TOKBENCH_TEST_PANIC: a panic");
    let closing = screen.find("the live view hit a bug (panic above); results so far are saved");
    assert!(
        report.is_some() && closing.is_some() && report < closing,
        "the report, then the closing line:\n{screen}"
    );
    // Raw mode is off: the line discipline is back (icanon, echo), as
    // `stty -a` run in the same pane right after says.
    let modes = std::fs::read_to_string(&stty).expect("stty -a output");
    let words: Vec<&str> = modes
        .split([' ', ';', '\n'])
        .filter(|w| matches!(*w, "icanon" | "-icanon" | "echo" | "-echo"))
        .collect();
    assert_eq!(
        words,
        ["icanon", "echo"],
        "terminal modes after the panic:\n{modes}"
    );
    let summary = read_json(&results.join("summary.json"));
    let levels = summary["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 1, "the level cut short is saved");
    assert_eq!(levels[0]["partial"], true);
    assert!(
        levels[0]["completed"].as_u64().unwrap_or(0) > 0,
        "{summary}"
    );
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}
