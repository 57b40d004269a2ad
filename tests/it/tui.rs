//! The live view end to end: the real binary in a real terminal (tmux),
//! against the simulator on loopback, driven by keypresses the way a person
//! would drive it over SSH.
//!
//! Needs tmux (`.ci/run` installs it). Each test has its own tmux server
//! (`-L` socket), killed on the way out even when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokbench::sim::{EmissionLog, SimConfig};

use crate::support::{self, against_server, bin, median, paced, read_json, text, Sim, Tmux};

/// The `ok N` counter on the screen.
fn ok_count(screen: &str) -> Option<u64> {
    let at = screen.find(" ok ")?;
    let digits: String = screen[at + 4..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits.parse().ok()
}

/// Requests in flight on the status line: `streaming S · waiting W`, or
/// where the server counts what it runs `streaming S · prefill P · queued
/// Q` (`in prefill` on a wide screen).
fn in_flight(screen: &str) -> Option<u64> {
    status_counts(screen).map(|(s, w, q)| s + w + q.unwrap_or(0))
}

/// (streaming, waiting or in prefill, queued where split) on the status line.
fn status_counts(screen: &str) -> Option<(u64, u64, Option<u64>)> {
    let line = screen.lines().find(|l| l.contains("streaming "))?;
    let after = |word: &str| -> Option<u64> {
        let at = line.find(word)? + word.len();
        line[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .ok()
    };
    let streaming = after("streaming ")?;
    match after("queued ") {
        Some(queued) => Some((streaming, after("prefill ")?, Some(queued))),
        None => Some((streaming, after("waiting ")?, None)),
    }
}

/// A simulator whose requests take about 0.2 s (64 tokens at 3 ms a step).
fn quick_sim() -> Sim {
    Sim::with(paced(3.0, 1.0))
}

fn scratch(name: &str) -> PathBuf {
    support::scratch("tui", name)
}

/// The shell command for the pane: tokbench with `term`, its pid in
/// `pidfile` (the inner shell execs it), then its exit code on the screen,
/// and the pane kept open to be read.
fn pane_command(term: &str, sim: &Sim, dir: &Path, pidfile: &Path) -> String {
    format!(
        "sh -c 'echo $$ > {pid}; exec env TERM={term} {bin} sweep --base-url {url} \
         --concurrency 2,4 --num-prompts 100000 --warmup 1 --random-input-len 16 \
         --random-output-len 64 --seed 3 --result-dir {dir}'; \
         echo TOKBENCH_EXIT=$?; sleep 60",
        pid = pidfile.display(),
        bin = bin(),
        url = sim.url(),
        dir = dir.display(),
    )
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The live view comes up, follows `+`, and `q` leaves a restored terminal,
/// the final table and every file, the level cut short saved as partial.
fn steer_and_quit(name: &str, width: u16, height: u16, term: &str) {
    let sim = quick_sim();
    let dir = scratch(name);
    let results = dir.join("results");
    let tmux = Tmux::start(
        name,
        width,
        height,
        &pane_command(term, &sim, &results, &dir.join("pid")),
    );

    // The header, the chart and the first planned level, its streams busy.
    tmux.wait_for("the live view", Duration::from_secs(10), |s| {
        s.contains("tokbench")
            && s.contains("in 16 / out 64")
            && s.contains("output tok/s")
            && s.contains("Concurrency 2")
            && in_flight(s) == Some(2)
    });
    assert!(tmux.alternate_on(), "the view is on the alternate screen");
    // Some answers in, so that the level has figures to save.
    tmux.wait_for("answers at 2", Duration::from_secs(5), |s| {
        ok_count(s).is_some_and(|n| n >= 2)
    });
    let ok_before = ok_count(&tmux.screen()).unwrap_or(0);

    // `+`: a manual level at 3; the target and the driver's gauge follow.
    tmux.keys("+");
    // Presses settle for a second (--settle-s) before they become a level.
    let took = tmux.wait_for("concurrency 3 in flight", Duration::from_secs(5), |s| {
        s.contains("Concurrency 3") && in_flight(s) == Some(3) && s.contains("MANUAL")
    });
    eprintln!("{name}: `+` -> target 3 and 3 in flight on screen in {took:?}");
    tmux.wait_for("answers at 3", Duration::from_secs(5), |s| {
        ok_count(s).is_some_and(|n| n >= ok_before + 4)
    });

    // `q`: stop, save, restore, print.
    tmux.keys("q");
    let screen_after = {
        tmux.wait_for("exit", Duration::from_secs(5), |s| {
            s.contains("TOKBENCH_EXIT=")
        });
        tmux.screen()
    };
    assert!(
        screen_after.contains("TOKBENCH_EXIT=0"),
        "q exits 0:\n{screen_after}"
    );
    assert!(!tmux.alternate_on(), "the alternate screen was left");
    // The final table (its header names the streams column) and the folder.
    assert!(screen_after.contains("streams"), "{screen_after}");
    assert!(screen_after.contains("results: "), "{screen_after}");

    let names = files(&results);
    for want in [
        "summary.json",
        "requests.jsonl",
        "sweep-c2-partial.json",
        "sweep-c3-manual-partial.json",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let manual = read_json(&results.join("sweep-c3-manual-partial.json"));
    assert_eq!(manual["mode"], "manual");
    assert_eq!(manual["partial"], true);
    assert_eq!(manual["max_concurrency"], 3);
    let planned = read_json(&results.join("sweep-c2-partial.json"));
    assert_eq!(planned["mode"], "planned");
    assert_eq!(planned["partial"], true);
    let summary = read_json(&results.join("summary.json"));
    assert_eq!(
        summary["levels"].as_array().map(Vec::len),
        Some(2),
        "{summary}"
    );
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn steer_and_quit_80x24_xterm() {
    steer_and_quit("80x24-xterm", 80, 24, "xterm");
}

#[test]
fn steer_and_quit_80x24_xterm_256color() {
    steer_and_quit("80x24-256", 80, 24, "xterm-256color");
}

#[test]
fn steer_and_quit_160x48_xterm() {
    steer_and_quit("160x48-xterm", 160, 48, "xterm");
}

#[test]
fn steer_and_quit_160x48_xterm_256color() {
    steer_and_quit("160x48-256", 160, 48, "xterm-256color");
}

/// SIGTERM from outside: saved, restored, exit 130 within 2 seconds.
#[test]
fn sigterm_saves_and_exits_130() {
    let name = "sigterm";
    let sim = quick_sim();
    let dir = scratch(name);
    let results = dir.join("results");
    let pidfile = dir.join("pid");
    let tmux = Tmux::start(
        name,
        100,
        30,
        &pane_command("xterm-256color", &sim, &results, &pidfile),
    );
    tmux.wait_for("answers", Duration::from_secs(10), |s| {
        in_flight(s) == Some(2) && ok_count(s).is_some_and(|n| n >= 2)
    });
    let pid = std::fs::read_to_string(&pidfile).expect("pid file");
    let status = Command::new("kill")
        .args(["-TERM", pid.trim()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let took = tmux.wait_for("exit", Duration::from_secs(2), |s| {
        s.contains("TOKBENCH_EXIT=")
    });
    eprintln!("SIGTERM -> exit in {took:?}");
    let screen = tmux.screen();
    assert!(screen.contains("TOKBENCH_EXIT=130"), "{screen}");
    assert!(!tmux.alternate_on(), "the alternate screen was left");
    let names = files(&results);
    assert!(
        names.iter().any(|n| n == "sweep-c2-partial.json"),
        "{names:?}"
    );
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The view never bends a measurement. What the view could bend is the
/// client's reading of the stream, not the simulator's pace (a busy 2-core
/// box slows the in-process simulator too, with or without the view), so
/// each request's TPOT is checked against the simulator's own emission log:
/// the error (client TPOT minus the gaps the simulator wrote) stays within
/// 2% of the 10 ms step with the live view as without it.
#[test]
fn tpot_is_the_same_with_and_without_the_view() {
    // The two runs side by side, each on a simulator of its own (the
    // emission logs match requests by id, which both runs number from 0):
    // half the time of one after the other, and both read under the same
    // load of the box.
    let sim = |log: &EmissionLog| {
        Sim::with(SimConfig {
            emission_log: Some(log.clone()),
            ..paced(10.0, 1.0)
        })
    };
    let (headless_log, live_log) = (EmissionLog::in_memory(), EmissionLog::in_memory());
    let (headless_sim, live_sim) = (sim(&headless_log), sim(&live_log));
    let dir = scratch("tpot");
    let args = |sim: &Sim, out: &Path| {
        format!(
            "sweep --base-url {} --concurrency 1,4 --num-prompts 6 --warmup 1 \
             --random-input-len 16 --random-output-len 48 --seed 9 --result-dir {}",
            sim.url(),
            out.display()
        )
    };
    let headless = dir.join("headless");
    let headless_run = {
        let args = args(&headless_sim, &headless);
        std::thread::spawn(move || {
            Command::new(bin())
                .args(args.split_whitespace())
                .arg("--no-tui")
                .output()
                .expect("tokbench runs")
        })
    };

    let live = dir.join("live");
    let tmux = Tmux::start(
        "tpot",
        100,
        30,
        &format!(
            "env TERM=xterm-256color {} {}; echo TOKBENCH_EXIT=$?; sleep 60",
            bin(),
            args(&live_sim, &live)
        ),
    );
    tmux.wait_for("the sweep's end", Duration::from_secs(20), |s| {
        s.contains("sweep finished")
    });
    // The model fitted to the finished run: its line on the chart, dashed
    // and named, beside the measured one.
    tmux.wait_for("the model's line", Duration::from_secs(5), |s| {
        s.contains("predicted")
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(5), |s| {
        s.contains("TOKBENCH_EXIT=0")
    });
    let live_errors = tpot_errors(&live, &live_log);
    let out = headless_run.join().expect("the headless run");
    assert!(out.status.success(), "{}", text(&out));
    let headless_errors = tpot_errors(&headless, &headless_log);

    for (mode, errors) in [("headless", &headless_errors), ("live", &live_errors)] {
        // 6 requests at each of 2 levels, every one matched to its stream.
        assert_eq!(errors.len(), 12, "{mode}: {errors:?}");
        let mid = median(errors);
        eprintln!(
            "{mode}: |client TPOT - simulator TPOT| median {mid:.4} ms, max {:.4} ms",
            errors.iter().copied().fold(f64::MIN, f64::max)
        );
        assert!(mid <= 0.2, "{mode}: TPOT errors {errors:?} ms");
    }
    for c in [1, 4] {
        let name = format!("sweep-c{c}.json");
        let tpot = |d: &Path| read_json(&d.join(&name))["median_tpot_ms"].as_f64();
        eprintln!(
            "c{c}: median TPOT {:?} ms headless, {:?} ms live",
            tpot(&headless),
            tpot(&live)
        );
    }
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SGLang and TGI, each capped at 2 running while 4 streams ask: the live
/// view's footer reads the server's own running, waiting and KV from its
/// `sglang:` or `tgi_` names, and the level file keeps them.
fn engine_gauges_live(engine: tokbench::sim::SimEngine, width: u16, height: u16, term: &str) {
    let name = format!("{engine:?}-gauges").to_lowercase();
    let sim = Sim::with(SimConfig {
        engine,
        max_num_seqs: 2,
        // Small enough that two sequences show in SGLang's two-decimal share.
        kv_tokens: 2048,
        ..paced(5.0, 1.0)
    });
    let dir = scratch(&name);
    let results = dir.join("results");
    let backend = if engine == tokbench::sim::SimEngine::Tgi {
        "openai-chat"
    } else {
        "openai-completions"
    };
    let tmux = Tmux::start(
        &name,
        width,
        height,
        &format!(
            "env TERM={term} {} sweep --base-url {} --backend {backend} --concurrency 4 \
             --num-prompts 100000 --warmup 1 --random-input-len 16 --random-output-len 64 \
             --probe-interval 0.1 --seed 3 --result-dir {}; echo TOKBENCH_EXIT=$?; sleep 60",
            bin(),
            sim.url(),
            results.display()
        ),
    );
    // 2 run while the other 2 wait; the KV share is the engine's own.
    tmux.wait_for("the server's gauges", Duration::from_secs(15), |s| {
        s.contains("server: running 2 waiting 2 KV ")
    });
    // Some answers in, for the level file to keep.
    tmux.wait_for("answers", Duration::from_secs(15), |s| {
        ok_count(s).is_some_and(|n| n >= 4)
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=0")
    });
    drop(tmux);
    let level = read_json(&results.join("sweep-c4-partial.json"));
    let server = &level["server"];
    assert_eq!(server["running"]["max"], 2.0, "{server}");
    assert!(
        server["waiting"]["max"].as_f64().is_some_and(|w| w >= 1.0),
        "{server}"
    );
    assert!(
        server["kv_cache_usage"]["max"]
            .as_f64()
            .is_some_and(|k| k > 0.0 && k <= 1.0),
        "{server}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A long prefill under a cap of 8 at 16 streams: the status line splits
/// the waiting into in prefill (the server runs them, no token yet) and
/// queued (the rest), and streaming + in prefill + queued is in flight.
#[test]
fn the_live_waiting_splits_into_in_prefill_and_queued() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 8,
        // 1,024-token prompts: 400 ms of prefill for each admitted one.
        prefill_ms_per_1k: 400.0,
        ..paced(5.0, 0.0)
    });
    let dir = scratch("split");
    let tmux = Tmux::start(
        "split",
        160,
        48,
        &format!(
            "env TERM=xterm-256color {} sweep --base-url {} --concurrency 16 \
             --num-prompts 100000 --warmup 1 --random-input-len 1024 --random-output-len 32 \
             --probe-interval 0.2 --seed 3 --result-dir {}; echo TOKBENCH_EXIT=$?; sleep 60",
            bin(),
            sim.url(),
            dir.join("results").display()
        ),
    );
    // The screen that met the wait, as read then (a later read may differ).
    let told = std::cell::Cell::new((0, 0, 0, 0));
    tmux.wait_for(
        "some in prefill, some queued",
        Duration::from_secs(60),
        |s| {
            let Some((streaming, prefill, Some(queued))) = status_counts(s) else {
                return false;
            };
            let line = s.lines().find(|l| l.contains("in flight ")).unwrap_or("");
            let total = line
                .split("in flight ")
                .nth(1)
                .and_then(|r| r.split(':').next())
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            told.set((total, streaming, prefill, queued));
            prefill > 0 && queued > 0
        },
    );
    let (total, streaming, prefill, queued) = told.get();
    eprintln!("in flight {total}: streaming {streaming}, in prefill {prefill}, queued {queued}");
    assert_eq!(streaming + prefill + queued, total, "{}", tmux.screen());
    // The waiting panel stacks them: in prefill at each bar's foot.
    tmux.wait_for("the stacked waiting panel", Duration::from_secs(10), |s| {
        s.contains("foot: in prefill")
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=0")
    });
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sglang_gauges_in_the_live_view_100x30_xterm() {
    engine_gauges_live(tokbench::sim::SimEngine::Sglang, 100, 30, "xterm");
}

#[test]
fn tgi_gauges_in_the_live_view_160x48_xterm_256color() {
    engine_gauges_live(tokbench::sim::SimEngine::Tgi, 160, 48, "xterm-256color");
}

/// |client TPOT - the mean gap the simulator wrote| per measured request, ms.
fn tpot_errors(run: &Path, log: &EmissionLog) -> Vec<f64> {
    against_server(run, &log.take())
        .iter()
        .map(|r| r.tpot_abs_err_ms)
        .collect()
}

// ---------------------------------------------------------------- tokbench view

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/view")
        .join(name)
}

/// A finished run on screen: a short sweep against the simulator is
/// saved, then `tokbench view` shows its table and result, `?` its help,
/// and `q` leaves at once with exit 0 and the terminal restored.
#[test]
fn view_shows_a_saved_run_and_quits_on_q() {
    let name = "view";
    let sim = quick_sim();
    let dir = scratch(name);
    let results = dir.join("results");
    let out = Command::new(bin())
        .args([
            "sweep",
            "--base-url",
            &sim.url(),
            "--concurrency",
            "1,2",
            "--num-prompts",
            "4",
            "--warmup",
            "1",
            "--random-input-len",
            "16",
            "--random-output-len",
            "16",
            "--seed",
            "5",
            "--no-tui",
            "--result-dir",
        ])
        .arg(&results)
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "{}", text(&out));
    drop(sim);

    let tmux = Tmux::start(
        name,
        80,
        24,
        &format!(
            "env TERM=xterm-256color {} view {}; echo TOKBENCH_EXIT=$?; sleep 60",
            bin(),
            results.display()
        ),
    );
    let took = tmux.wait_for("the saved run", Duration::from_secs(5), |s| {
        s.contains("SAVED RUN")
            && s.contains("in 16 / out 16")
            && s.contains("levels")
            && s.contains("output tok/s")
            && s.contains("result")
    });
    eprintln!("view: on screen in {took:?}");
    assert!(tmux.alternate_on(), "the view is on the alternate screen");
    // The table holds both levels: a row per concurrency, by its streams.
    let screen = tmux.screen();
    for c in ["1", "2"] {
        assert!(
            screen
                .lines()
                // The table is the rightmost panel: read the row there, not
                // whatever the chart draws beside it.
                .any(|l| {
                    let table = l.rsplit("││").next().unwrap_or(l);
                    table.split(['│', ' ']).filter(|w| !w.is_empty()).nth(1) == Some(c)
                }),
            "no row for {c} streams:\n{screen}"
        );
    }
    assert!(!screen.contains("in flight"), "nothing live:\n{screen}");

    tmux.keys("?");
    tmux.wait_for("help", Duration::from_secs(2), |s| {
        s.contains("what the figures mean")
    });
    tmux.keys("?");
    tmux.wait_for("help closed", Duration::from_secs(2), |s| {
        !s.contains("what the figures mean")
    });
    // `v`: the chart panel turns to the frontier, and back.
    tmux.keys("v");
    tmux.wait_for("the frontier", Duration::from_secs(2), |s| {
        s.contains("output tok/s vs tok/s per user") && s.contains("tok/s per user")
    });
    tmux.keys("v");
    tmux.wait_for("the streams chart", Duration::from_secs(2), |s| {
        s.contains("output tok/s vs streams")
    });
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(3), |s| {
        s.contains("TOKBENCH_EXIT=")
    });
    let screen = tmux.screen();
    assert!(screen.contains("TOKBENCH_EXIT=0"), "{screen}");
    assert!(!tmux.alternate_on(), "the alternate screen was left");
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two runs: both in the header, B overlaid; Tab brings B's table forward.
#[test]
fn view_two_runs_tab_switches_the_table() {
    let tmux = Tmux::start(
        "view-two",
        120,
        36,
        &format!(
            "env TERM=xterm {} view {} {}; echo TOKBENCH_EXIT=$?; sleep 60",
            bin(),
            fixture("a").display(),
            fixture("b").display()
        ),
    );
    tmux.wait_for("run A's table", Duration::from_secs(5), |s| {
        s.contains("run A") && s.contains("0.11.2") && s.contains("0.12.0") && s.contains('■')
    });
    tmux.keys("\t");
    tmux.wait_for("run B's table", Duration::from_secs(2), |s| {
        s.contains("run B") && s.contains("capacity: 64 streams")
    });
    // Esc quits too.
    let out = tmux.run(&["send-keys", "Escape"]);
    assert!(out.status.success(), "{}", text(&out));
    tmux.wait_for("exit", Duration::from_secs(3), |s| {
        s.contains("TOKBENCH_EXIT=0")
    });
}

/// Without a terminal, `view` prints what `report --format md` prints.
#[test]
fn view_headless_prints_the_markdown_report() {
    let view = Command::new(bin())
        .arg("view")
        .arg(fixture("a"))
        .output()
        .expect("tokbench runs");
    assert!(view.status.success(), "{}", text(&view));
    let report = Command::new(bin())
        .args(["report", "--format", "md"])
        .arg(fixture("a"))
        .output()
        .expect("tokbench runs");
    assert!(report.status.success(), "{}", text(&report));
    assert_eq!(
        String::from_utf8_lossy(&view.stdout),
        String::from_utf8_lossy(&report.stdout)
    );
    assert!(String::from_utf8_lossy(&view.stdout).contains("| **32** |"));
}

/// A folder that is not there: one line on stderr, exit 1.
#[test]
fn view_of_a_missing_folder_is_one_line_and_exit_1() {
    let missing = scratch("view-missing").join("no-such-run");
    let out = Command::new(bin())
        .arg("view")
        .arg(&missing)
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no such result folder"), "{stderr}");
    let _ = std::fs::remove_dir_all(scratch("view-missing"));
}

/// Whether the process runs (a zombie nobody reaps has exited: in a
/// container without an init, orphans stay zombies).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// What a process still running is doing, for a failure message: each
/// thread's name, state and kernel wait channel from /proc.
fn where_it_is(pid: &str) -> String {
    let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let mut threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| {
                    let tid = e.file_name().to_string_lossy().into_owned();
                    let stat = read(format!("/proc/{pid}/task/{tid}/stat"));
                    let state = stat
                        .rsplit_once(')')
                        .map_or("", |(_, rest)| rest.trim_start());
                    format!(
                        "{} {} {}",
                        read(format!("/proc/{pid}/task/{tid}/comm")).trim(),
                        state.chars().next().unwrap_or('?'),
                        read(format!("/proc/{pid}/task/{tid}/wchan")).trim()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    threads.sort();
    format!("its threads (name, state, wait channel): {threads:?}")
}

/// The `--events` file's last line is the run's end, with exit 130: the
/// run was stopped by a signal and finished saving.
fn assert_ended_130(events: &Path) {
    let last_event = std::fs::read_to_string(events)
        .expect("events file")
        .lines()
        .last()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("an event line"))
        .expect("an event");
    assert_eq!(last_event["event"], "run_finished", "{last_event}");
    assert_eq!(last_event["exit_code"], 130, "{last_event}");
}

/// The SSH session drops (tmux kill-session hangs up the pane: SIGHUP and
/// a dead terminal at once): the finished level's file, a partial file for
/// the level under way and a flushed requests.jsonl are left; then
/// `--resume` finishes the sweep and summary.json holds every level once.
#[test]
fn sighup_then_resume_finishes_the_sweep() {
    let name = "sighup-resume";
    // One batch slot: requests run one after another, 1.2 s each (400 tokens
    // at 3 ms), so level 2 has a clear moment with one answer in and more to
    // come: 2.4 s of it, room for a screen read on a loaded machine.
    let sim = Sim::with(SimConfig {
        max_num_seqs: 1,
        ..paced(3.0, 1.0)
    });
    let dir = scratch(name);
    let results = dir.join("results");
    let pidfile = dir.join("pid");
    let flags = format!(
        "--base-url {url} --concurrency 1,2,4 --num-prompts 3 --warmup 1 \
         --random-input-len 16 --random-output-len 400 --seed 9",
        url = sim.url()
    );
    // The events file's last line says how the run ended: a hang-up once
    // aborted the process (ratatui's Drop panicked writing to the dead
    // terminal) after the files were saved, which "gone, files there"
    // alone did not show.
    let events = dir.join("events.jsonl");
    let command = format!(
        "sh -c 'echo $$ > {pid}; exec env TERM=xterm-256color {bin} sweep {flags} --result-dir {dir} --events {events}'",
        pid = pidfile.display(),
        bin = bin(),
        dir = results.display(),
        events = events.display(),
    );
    let tmux = Tmux::start(name, 100, 30, &command);
    // Level 1 done (3 answers), level 2 under way with one of its answers in.
    tmux.wait_for("level 2 with an answer", Duration::from_secs(15), |s| {
        s.contains("Concurrency 2") && ok_count(s).is_some_and(|n| n >= 4)
    });
    let pid = std::fs::read_to_string(&pidfile).expect("pid file");
    let pid = pid.trim().to_string();
    let hung_up = Instant::now();
    let out = tmux.run(&["kill-session"]);
    assert!(out.status.success(), "kill-session: {}", text(&out));
    // Gone within 2 s of the hang-up.
    while running(&pid) {
        assert!(
            hung_up.elapsed() < Duration::from_secs(2),
            "tokbench still running 2 s after SIGHUP; {}; files so far: {:?}",
            where_it_is(&pid),
            files(&results)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("SIGHUP -> process gone in {:?}", hung_up.elapsed());
    drop(tmux);
    assert_ended_130(&events);
    let names = files(&results);
    assert!(names.iter().any(|n| n == "sweep-c1.json"), "{names:?}");
    assert!(
        names.iter().any(|n| n == "sweep-c2-partial.json"),
        "{names:?}"
    );
    let lines_before = std::fs::read_to_string(results.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .count();
    assert!(lines_before >= 4, "flushed: {lines_before} lines");

    let out = Command::new(bin())
        .arg("sweep")
        .args(flags.split_whitespace())
        .args(["--no-tui", "--resume"])
        .arg(&results)
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = read_json(&results.join("summary.json"));
    let levels = summary["levels"].as_array().expect("levels");
    let seen: Vec<(u64, bool)> = levels
        .iter()
        .map(|l| {
            (
                l["max_concurrency"].as_u64().unwrap_or(0),
                l["partial"].as_bool().unwrap_or(true),
            )
        })
        .collect();
    assert_eq!(seen, vec![(1, false), (2, false), (4, false)]);
    let indexes: Vec<u64> = levels
        .iter()
        .filter_map(|l| l["level_index"].as_u64())
        .collect();
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "{indexes:?}");
    assert_eq!(summary["resumed"]["levels_kept"], 1);
    let names = files(&results);
    for file in [
        "sweep-c1.json",
        "sweep-c2.json",
        "sweep-c4.json",
        "sweep-c2-partial.json",
    ] {
        assert!(names.iter().any(|n| n == file), "{file}: {names:?}");
    }
    let lines_after = std::fs::read_to_string(results.join("requests.jsonl"))
        .expect("requests.jsonl")
        .lines()
        .count();
    assert!(
        lines_after >= lines_before + 6,
        "appended: {lines_before} -> {lines_after}"
    );
    // A different shape is refused, in one line, before any load.
    let out = Command::new(bin())
        .arg("sweep")
        .args(
            flags
                .replace("--random-output-len 400", "--random-output-len 100")
                .split_whitespace(),
        )
        .args(["--no-tui", "--resume"])
        .arg(&results)
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("output_len 400 now 100"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--no-tui` in an SSH session that drops: stderr is the dead terminal
/// then, and the line said on the signal ("interrupted, saving what was
/// measured") once panicked there (`eprintln!` on EIO) in the middle of
/// saving. The partial level and the run's end are saved all the same.
#[test]
fn headless_in_a_dropped_session_saves_and_ends_130() {
    let name = "headless-hangup";
    let sim = quick_sim();
    let dir = scratch(name);
    let results = dir.join("results");
    let pidfile = dir.join("pid");
    let events = dir.join("events.jsonl");
    let command = format!(
        "sh -c 'echo $$ > {pid}; exec {bin} sweep --no-tui --base-url {url} \
         --concurrency 2,4 --num-prompts 100000 --warmup 1 --random-input-len 16 \
         --random-output-len 64 --seed 3 --result-dir {dir} --events {events}'",
        pid = pidfile.display(),
        bin = bin(),
        url = sim.url(),
        dir = results.display(),
        events = events.display(),
    );
    let tmux = Tmux::start(name, 100, 30, &command);
    let jsonl = results.join("requests.jsonl");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&jsonl).map_or(0, |t| t.lines().count()) < 4 {
        assert!(Instant::now() < deadline, "no answers in 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pidfile).expect("pid file");
    let pid = pid.trim().to_string();
    let out = tmux.run(&["kill-session"]);
    assert!(out.status.success(), "kill-session: {}", text(&out));
    // A hang guard, not a measure: the events file's end is the check.
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(&pid) {
        assert!(
            Instant::now() < deadline,
            "still running: {}",
            where_it_is(&pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(tmux);
    assert_ended_130(&events);
    let names = files(&results);
    assert!(
        names.iter().any(|n| n == "sweep-c2-partial.json"),
        "{names:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ramp past a server's capacity (two slots of 160 ms: 12.5 requests a
/// second) in the real binary at 80x24, TERM=xterm: the chart panel is the
/// ramp's, with the offered line and the achieved seconds, and once p99
/// TTFT passes the SLO it says where; at the end that second is the one
/// the level file saved.
#[test]
fn a_ramp_shows_where_it_broke_80x24_xterm() {
    let sim = Sim::with(SimConfig {
        max_num_seqs: 2,
        ..paced(5.0, 0.0)
    });
    let dir = scratch("ramp-live");
    let results = dir.join("results");
    let tmux = Tmux::start(
        "ramp-live",
        80,
        24,
        &format!(
            "env TERM=xterm {} sweep --base-url {} --ramp linear --ramp-from 2 --ramp-to 20 \
             --ramp-duration 6 --max-concurrency 64 --random-input-len 16 --random-output-len 32 \
             --slo-ttft-p99-ms 100 --warmup 1 --seed 3 --result-dir {}; echo TOKBENCH_EXIT=$?; sleep 60",
            bin(),
            sim.url(),
            results.display()
        ),
    );
    tmux.wait_for("the ramp's chart", Duration::from_secs(15), |s| {
        s.contains("linear ramp") && s.contains("offered")
    });
    tmux.wait_for("the break, at the end", Duration::from_secs(60), |s| {
        s.contains("broke s") && s.contains("FINISHED")
    });
    let screen = tmux.screen();
    let shown: u64 = screen
        .split("broke s")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no second on screen:\n{screen}"));
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=0")
    });
    drop(tmux);
    let level = read_json(&results.join("sweep-ramp.json"));
    let broke = &level["rate_series"]["broke_at"];
    assert_eq!(broke["second"], shown, "screen s{shown}, file {broke}");
    assert_eq!(broke["rule"], "slo", "{broke}");
    let _ = std::fs::remove_dir_all(&dir);
}
