//! The plan's checks, URLs, result folders and the client choice.

use std::time::{Duration, SystemTime};

use color_eyre::eyre::{bail, eyre, Result};

use super::prepare::lean_connections;
use super::url::{default_result_dir, normalize_base_url};
use super::*;
use crate::load::request::Target;

fn plan_of(args: &[&str]) -> Result<SweepPlan> {
    use clap::Parser;
    let cli = crate::cli::Cli::try_parse_from(
        ["tokbench", "sweep", "--base-url", "http://127.0.0.1:9"]
            .iter()
            .chain(args),
    )
    .map_err(|e| eyre!("{e}"))?;
    match cli.command {
        crate::cli::Command::Sweep(sweep) => SweepPlan::from_args(&sweep),
        _ => bail!("not a sweep"),
    }
}

#[test]
fn a_replay_takes_its_lengths_from_the_log_unless_given() {
    let dir = std::env::temp_dir().join(format!("tokbench-replay-len-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("log.jsonl");
    // Input lengths 10, 30, 20 (median 20); outputs 5 and 7 (median of two: the upper, 7).
    std::fs::write(
        &log,
        "{\"t\":0,\"input_len\":10,\"output_len\":5}\n{\"t\":1,\"input_len\":30}\n{\"t\":2,\"input_len\":20,\"output_len\":7}\n",
    )
    .expect("write");
    let path = log.display().to_string();
    let plan = plan_of(&["--replay", &path]).expect("plan");
    assert_eq!((plan.input_len, plan.output_len), (20, 7));
    assert_eq!(plan.traffic.profile, "replay");
    assert_eq!(plan.levels.len(), 1);
    assert_eq!(plan.levels[0].num_prompts, 3);
    let plan = plan_of(&["--replay", &path, "--random-output-len", "64"]).expect("plan");
    assert_eq!((plan.input_len, plan.output_len), (20, 64));
    let err = plan_of(&["--replay", &path, "--request-rate", "2"]).expect_err("exclusive");
    assert!(err.to_string().contains("choose one"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn base_url_forms() {
    assert_eq!(
        normalize_base_url("http://h:8000/").ok().as_deref(),
        Some("http://h:8000")
    );
    assert_eq!(
        normalize_base_url("http://h:8000/v1").ok().as_deref(),
        Some("http://h:8000")
    );
    assert!(normalize_base_url("h:8000").is_err());
    assert!(normalize_base_url("not a url").is_err());
}

#[test]
fn result_dirs_never_clash() {
    let root = std::env::temp_dir().join(format!("tokbench-dirs-{}", std::process::id()));
    let now = SystemTime::UNIX_EPOCH;
    let first = default_result_dir(&root, now);
    assert!(first.ends_with("19700101-000000"));
    std::fs::create_dir_all(&first).expect("mkdir");
    let second = default_result_dir(&root, now);
    assert!(second.ends_with("19700101-000000-2"));
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn measured_requests_take_the_lean_client_only_where_it_applies() {
    let lean = |args: &[&str], url: Option<&str>, key: Option<&str>| {
        let mut plan = plan_of(args).expect("plan");
        if let Some(url) = url {
            plan.endpoint_url = url.parse().expect("url");
        }
        let auth = key.and_then(Target::authorization_from_key);
        lean_connections(&plan, auth.as_ref()).is_some()
    };
    assert!(lean(&[], None, None));
    assert!(lean(&["--http-client", "auto"], None, Some("sk-visible")));
    assert!(!lean(&["--http-client", "reqwest"], None, None));
    assert!(!lean(&["--http2"], None, None));
    assert!(!lean(&[], Some("https://h/v1/chat/completions"), None));
    assert!(!lean(&[], Some("http://u:p@h/v1/chat/completions"), None));
    // Valid in a header, but not visible ASCII: reqwest sends it as given.
    assert!(!lean(&[], None, Some("s\u{e9}same")));
}

#[test]
fn timed_levels_and_their_refusals() {
    let plan = plan_of(&["--duration", "2m", "--concurrency", "1,4"]).expect("plan");
    assert_eq!(plan.timing.duration, Some(Duration::from_secs(120)));
    assert_eq!(plan.timing.level_gap, Duration::ZERO);
    assert_eq!(plan.levels.len(), 2);
    let refused = |args: &[&str], want: &str| {
        let err = plan_of(args).expect_err(want).to_string();
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains('\n'), "{args:?}: {err}");
    };
    refused(
        &["--duration", "30", "--num-prompts", "5"],
        "--duration and --num-prompts",
    );
    refused(&["--duration", "30x"], "--duration 30x");
    refused(&["--duration", "0"], "more than 0");
    refused(
        &["--find-capacity", "--duration", "5"],
        "--find-capacity sizes its probes by count",
    );
    refused(&["--level-gap", "2"], "it needs --start-at and --duration");
    refused(&["--start-at", "2020-01-01T00:00:00Z"], "in the past");
    refused(&["--start-at", "soon"], "--start-at soon: give a UTC time");
    refused(&["--shard", "4/4"], "0 to 3 of 4");
    refused(
        &["--shard", "0/4", "--find-capacity"],
        "--shard: --find-capacity",
    );
}

#[test]
fn a_bad_goodput_names_its_flag_once() {
    let err = plan_of(&["--goodput", "itl:5"]).expect_err("itl is no goodput metric");
    assert_eq!(
        err.to_string(),
        "--goodput: unknown metric 'itl' in 'itl:5': use ttft, tpot or e2el"
    );
}

#[test]
fn a_schedule_gets_the_default_gap() {
    let soon = SystemTime::now() + Duration::from_secs(3600);
    let at = format!(
        "{:.3}",
        soon.duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    );
    let plan = plan_of(&["--start-at", &at, "--duration", "30s"]).expect("plan");
    assert_eq!(plan.timing.level_gap, Duration::from_secs(5));
    assert!(plan.timing.start_at.is_some());
    let plan =
        plan_of(&["--start-at", &at, "--duration", "30s", "--level-gap", "0"]).expect("plan");
    assert_eq!(plan.timing.level_gap, Duration::ZERO);
    // A start without a duration moves level 1 only: no gap.
    let plan = plan_of(&["--start-at", &at]).expect("plan");
    assert_eq!(plan.timing.level_gap, Duration::ZERO);
}

#[test]
fn a_shard_runs_its_part_of_every_level() {
    let levels = |args: &[&str]| -> Vec<(u32, u32, Option<f64>)> {
        plan_of(args)
            .expect("plan")
            .levels
            .iter()
            .map(|l| (l.concurrency, l.num_prompts, l.rate))
            .collect()
    };
    // 1 and 10 streams over 4 shards: shard 1 has 0 and 3, each stream
    // sending its 10 requests (--prompts-per-stream) as one process would.
    assert_eq!(
        levels(&["--shard", "1/4", "--concurrency", "1,10"]),
        vec![(0, 0, None), (3, 30, None)]
    );
    assert_eq!(
        levels(&["--shard", "0/4", "--concurrency", "1,10"]),
        vec![(1, 10, None), (3, 30, None)]
    );
    // A given count is split as the total it is.
    assert_eq!(
        levels(&[
            "--shard",
            "3/4",
            "--concurrency",
            "10",
            "--num-prompts",
            "10"
        ]),
        vec![(2, 2, None)]
    );
    // Open loop: a quarter of the rate, the cap split (at least 1), and
    // 30 s of the shard's own rate (2.5/s: 75 requests).
    assert_eq!(
        levels(&[
            "--shard",
            "1/4",
            "--request-rate",
            "10",
            "--max-concurrency",
            "10"
        ]),
        vec![(3, 75, Some(2.5))]
    );
    // Rounds repeat the split levels.
    assert_eq!(
        levels(&["--shard", "1/2", "--concurrency", "3", "--rounds", "2"]),
        vec![(1, 10, None), (1, 10, None)]
    );
    // A shard with no part of the first level still warms up (one request).
    let plan = plan_of(&["--shard", "3/4", "--concurrency", "1,8"]).expect("plan");
    assert_eq!(plan.warmup, 1);
    assert_eq!(
        plan.timing.draw_seed(plan.seed),
        timing::Shard { index: 3, count: 4 }.seed(plan.seed)
    );
}

/// What the open-file check counts: a closed loop's largest level; an
/// open-loop cap or a search's top only where given (the default 4096 is
/// a ceiling, and counting it would refuse a 2 req/s run under a hard
/// limit of 4096).
#[test]
fn the_streams_a_run_surely_needs() {
    let needed = |args: &[&str]| plan_of(args).expect("plan").streams_needed();
    assert_eq!(
        needed(&["--concurrency", "1,400,16"]),
        Some((400, "level 400".to_string()))
    );
    assert_eq!(needed(&["--request-rate", "2"]), None);
    assert_eq!(
        needed(&["--request-rate", "2", "--max-concurrency", "600"]),
        Some((600, "the cap of 600 requests in flight".to_string()))
    );
    let search = needed(&["--find-capacity", "--slo-ttft-p99-ms", "500"]);
    assert!(search.as_ref().is_none_or(|(n, _)| *n < 4096), "{search:?}");
}

#[test]
fn a_sweep_given_no_count_is_fitted_to_the_default_budget() {
    use crate::analysis::fit::DEFAULT_BUDGET;
    let bare = plan_of(&["--concurrency", "1,4"]).expect("plan");
    let fit = bare.fit.expect("a bare sweep is fitted");
    assert_eq!(fit.budget, DEFAULT_BUDGET);
    assert!(fit.default_budget);
    // Its levels' counts are caps: 10 a stream.
    assert_eq!(bare.levels[1].num_prompts, 40);
    // Any count, duration or other kind of run: the counts as given.
    for fixed in [
        &["--num-prompts", "8"][..],
        &["--prompts-per-stream", "10"],
        &["--duration", "30"],
        &["--request-rate", "2"],
        &["--find-capacity"],
        &["--turns", "2"],
    ] {
        let plan = plan_of(fixed).expect("plan");
        assert_eq!(plan.fit, None, "{fixed:?}");
    }
    let given = plan_of(&["--budget", "15m", "--prompts-per-stream", "4"]).expect("plan");
    let fit = given.fit.expect("fitted");
    assert_eq!(fit.budget, Duration::from_secs(900));
    assert!(!fit.default_budget);
    assert_eq!(given.levels[0].num_prompts, 4);
}

#[test]
fn a_budget_is_refused_in_one_line_where_it_cannot_fit_the_run() {
    let refused = |args: &[&str], want: &str| {
        let err = plan_of(args).expect_err(want).to_string();
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains('\n'), "{args:?}: {err}");
    };
    refused(
        &["--budget", "5s"],
        "--budget 5s is too short: a warmup and one level of the shortest answers need at least 10s",
    );
    refused(
        &["--budget", "10m", "--num-prompts", "5"],
        "--budget and --num-prompts both set how long each level runs: choose one",
    );
    refused(
        &["--budget", "10m", "--duration", "30"],
        "--budget and --duration",
    );
    refused(
        &["--budget", "10m", "--request-rate", "2"],
        "--budget fits a sweep of closed-loop levels (--concurrency): not with --request-rate",
    );
    refused(&["--budget", "soon"], "--budget soon");
}
