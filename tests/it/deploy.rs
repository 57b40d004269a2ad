//! The launchers in `deploy/` (docs/machines.md), checked
//! offline: the Kubernetes manifests as `deploy/kubernetes/submit.sh` renders
//! them, validated against the Kubernetes v1.33.0 API schema checked in under
//! `tests/schemas/kubernetes/` (with `validate.py`: PyYAML and jsonschema) and
//! then checked for the Indexed-Job facts the shards depend on; the submit
//! script's flow against a stand-in `kubectl` that records what it is asked;
//! and the Ray launcher's one-line errors that need no Ray.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::{
    bin, paced, python_with_jsonschema, read_json, scratch, stderr, stdout, text, Sim,
};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bash() -> Command {
    let ok = Command::new("bash")
        .args(["-c", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "bash is not installed: deploy/kubernetes/submit.sh is a bash script"
    );
    Command::new("bash")
}

/// A Python with jsonschema and PyYAML, or a panic naming what is missing.
fn python() -> &'static str {
    let python = python_with_jsonschema("the Kubernetes manifests of deploy/kubernetes/");
    let ok = Command::new(python)
        .args(["-c", "import yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "PyYAML is not installed for {python}: this test reads the Kubernetes manifests with it \
         (apt-get install python3-yaml, or run .ci/run which installs it)"
    );
    python
}

const RUN: &str = "tb-check";
const START: &str = "2026-12-01T13:00:00Z";

/// `submit.sh --render-only DIR` with the given shard count and sweep flags.
fn render(dir: &Path, shards: u32, extra: &[&str], sweep: &[&str]) -> Output {
    let mut cmd = bash();
    cmd.arg(root().join("deploy/kubernetes/submit.sh"))
        .arg("--render-only")
        .arg(dir)
        .args(["--base-url", "http://vllm.bench.svc:8000"])
        .args(["--shards", &shards.to_string()])
        .args(["--image", "registry.example/tokbench:0.1"])
        .args(["--duration", "90s"])
        .args(["--run-name", RUN])
        .args(extra);
    if !sweep.is_empty() {
        cmd.arg("--").args(sweep);
    }
    cmd.output().expect("bash runs")
}

fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("rendered dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Run validate.py over files: (exit status ok, its JSON report, stderr).
fn validate(files: &[PathBuf]) -> (bool, Value, String) {
    let out = Command::new(python())
        .arg(root().join("tests/schemas/kubernetes/validate.py"))
        .args(files)
        .output()
        .expect("python runs");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("validate.py printed no JSON ({e}): {}", text(&out)));
    (out.status.success(), report, stderr(&out))
}

/// The one document of a file, by kind.
fn doc<'a>(report: &'a Value, file: &str) -> &'a Value {
    let docs: Vec<&Value> = report["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .filter(|d| d["file"] == file)
        .collect();
    assert_eq!(docs.len(), 1, "{file}: one document");
    &docs[0]["object"]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("not a string: {s}"))
                .to_string()
        })
        .collect()
}

/// The value after `flag` in args, which must hold it once.
fn flag_value<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at: Vec<usize> = (0..args.len()).filter(|&i| args[i] == flag).collect();
    assert_eq!(at.len(), 1, "{flag} once in {args:?}");
    args.get(at[0] + 1)
        .unwrap_or_else(|| panic!("{flag} has no value in {args:?}"))
}

/// The claim a container's mount at `path` reads, through the pod's volumes.
fn claim_at(pod: &Value, container: &Value, path: &str) -> String {
    let mounts = container["volumeMounts"].as_array().expect("volumeMounts");
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("no mount at {path}: {mounts:?}"));
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("no volume named {}", mount["name"]));
    volume["persistentVolumeClaim"]["claimName"]
        .as_str()
        .expect("a persistentVolumeClaim volume")
        .to_string()
}

/// Everything the shards and the merge rely on, from the parsed documents.
fn check_structure(report: &Value, shards: u64, sweep: &[&str]) {
    let pvc = doc(report, "pvc.yaml");
    assert_eq!(pvc["kind"], "PersistentVolumeClaim");
    assert!(
        strings(&pvc["spec"]["accessModes"]).contains(&"ReadWriteMany".into()),
        "pods on several nodes write the claim at once: {}",
        pvc["spec"]["accessModes"]
    );
    let claim = pvc["metadata"]["name"].as_str().expect("claim name");

    // The shards: one Indexed Job, every pod at once, never retried.
    let job = doc(report, "shards-job.yaml");
    assert_eq!(job["kind"], "Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], shards);
    assert_eq!(spec["parallelism"], shards);
    assert_eq!(
        spec["backoffLimitPerIndex"], 0,
        "a retried shard would start late"
    );
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let shard = &containers[0];
    assert_eq!(strings(&shard["command"]), ["tokbench"]);
    let args = strings(&shard["args"]);
    assert_eq!(args[0], "sweep");
    assert_eq!(flag_value(&args, "--shard"), format!("auto/{shards}"));
    assert_eq!(flag_value(&args, "--start-at"), START);
    assert_eq!(flag_value(&args, "--duration"), "90s");
    assert_eq!(
        flag_value(&args, "--base-url"),
        "http://vllm.bench.svc:8000"
    );
    assert!(args.contains(&"--no-tui".into()), "{args:?}");
    let result_dir = flag_value(&args, "--result-dir");
    assert_eq!(result_dir, format!("/results/{RUN}/shard-$(SHARD_INDEX)"));
    // One run seed for every shard (each mixes its index in; merge refuses
    // shards of different seeds): the user's, else one chosen at submit time.
    let seed = flag_value(&args, "--seed");
    assert!(seed.parse::<u64>().is_ok(), "--seed {seed}");
    if let Some(at) = sweep.iter().position(|a| *a == "--seed") {
        assert_eq!(seed, sweep[at + 1]);
    }
    // The user's sweep flags, in order, at the end, as written: only `$(`
    // doubled, which the kubelet turns back into `$(` instead of expanding.
    let tail = &args[args.len() - sweep.len()..];
    let expected: Vec<String> = sweep.iter().map(|a| a.replace("$(", "$$(")).collect();
    assert_eq!(tail, expected);
    assert!(
        !args.iter().any(|a| a.starts_with("--api-key")),
        "no key on a command line: {args:?}"
    );
    // $(SHARD_INDEX) is expanded only from a variable of the container's env.
    let env = shard["env"].as_array().expect("env");
    let var = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no env {name}: {env:?}"))
    };
    assert_eq!(
        var("SHARD_INDEX")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    let key = &var("OPENAI_API_KEY")["valueFrom"]["secretKeyRef"];
    assert_eq!(key["name"], "tokbench-api-key");
    assert_eq!(
        key["optional"], true,
        "a server without a key needs no Secret"
    );
    assert_eq!(claim_at(pod, shard, "/results"), claim);
    assert!(result_dir.starts_with("/results/"));

    // The merge: every shard's folder, on the same claim, into merged/.
    let merge = doc(report, "merge-job.yaml");
    assert_eq!(merge["kind"], "Job");
    assert_eq!(merge["spec"]["backoffLimit"], 0);
    let mpod = &merge["spec"]["template"]["spec"];
    let init = &mpod["initContainers"][0];
    let margs = strings(&init["args"]);
    assert_eq!(margs[0], "merge");
    let dirs: Vec<String> = (0..shards)
        .map(|i| result_dir.replace("$(SHARD_INDEX)", &i.to_string()))
        .collect();
    assert_eq!(margs[1..=shards as usize], dirs[..], "{margs:?}");
    let merged = flag_value(&margs, "-o");
    assert_eq!(merged, format!("/results/{RUN}/merged"));
    assert_eq!(claim_at(mpod, init, "/results"), claim);
    let report_c = &mpod["containers"][0];
    assert_eq!(strings(&report_c["args"]), ["report", merged]);
    assert_eq!(claim_at(mpod, report_c, "/results"), claim);

    // The fetch helper reads the same claim.
    let fetch = doc(report, "fetch-pod.yaml");
    assert_eq!(fetch["kind"], "Pod");
    assert_eq!(
        claim_at(&fetch["spec"], &fetch["spec"]["containers"][0], "/results"),
        claim
    );
}

#[test]
fn kubernetes_manifests_validate_against_the_api_schema_and_hold_the_indexed_job_facts() {
    let sweep = [
        "--model",
        "Qwen/Qwen3-8B",
        "--concurrency",
        "64,256",
        "--extra-body",
        r#"{"ignore_eos":true,"note":"say \"hi\" & $(HOME) \\"}"#,
    ];
    for shards in [1u32, 4, 7] {
        let dir = scratch("deploy", &format!("render-{shards}"));
        let class: &[&str] = if shards == 4 {
            &["--storage-class", "nfs-client"]
        } else {
            &[]
        };
        // 7 shards: the user's own seed, kept and not doubled.
        let with_seed = [&sweep[..], &["--seed", "7"]].concat();
        let sweep: &[&str] = if shards == 7 { &with_seed } else { &sweep };
        let out = render(
            &dir,
            shards,
            &[&["--start-at", START], class].concat(),
            sweep,
        );
        assert!(out.status.success(), "{}", text(&out));
        let files = manifests(&dir);
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "fetch-pod.yaml",
                "merge-job.yaml",
                "pvc.yaml",
                "shards-job.yaml"
            ]
        );
        let (ok, report, stderr) = validate(&files);
        assert!(ok, "{shards} shards: schema errors:\n{stderr}");
        assert_eq!(report["errors"], serde_json::json!([]));
        check_structure(&report, shards.into(), sweep);
        let pvc = &doc(&report, "pvc.yaml")["spec"];
        match shards {
            4 => assert_eq!(pvc["storageClassName"], "nfs-client"),
            _ => assert!(pvc.get("storageClassName").is_none(), "{pvc}"),
        }
    }
}

#[test]
fn the_schema_check_fails_on_a_misspelt_field_a_wrong_type_and_an_unknown_kind() {
    let dir = scratch("deploy", "broken");
    let out = render(&dir, 4, &["--start-at", START], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let job = dir.join("shards-job.yaml");
    let good = fs::read_to_string(&job).expect("rendered job");
    assert!(good.contains("  completionMode: Indexed\n") && good.contains("  parallelism: 4\n"));
    let bad = good
        .replace("  completionMode: Indexed\n", "  completionMod: Indexed\n")
        .replace("  parallelism: 4\n", "  parallelism: four\n");
    fs::write(&job, bad).expect("write");
    let other = dir.join("other.yaml");
    fs::write(
        &other,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
    )
    .expect("write");
    let (ok, report, stderr) = validate(&[job, other]);
    assert!(!ok, "broken manifests passed: {report}");
    assert!(
        stderr.contains("'completionMod' was unexpected"),
        "strict schema names the unknown field:\n{stderr}"
    );
    assert!(
        stderr.contains("spec/parallelism: 'four' is not of type 'integer'"),
        "the type error at its path:\n{stderr}"
    );
    assert!(
        stderr.contains("no schema here for apiVersion apps/v1 kind Deployment"),
        "a kind without a schema is not passed silently:\n{stderr}"
    );
    assert_eq!(
        report["errors"].as_array().map(Vec::len),
        Some(3),
        "{stderr}"
    );
}

/// The shard pods' command as the kubelet starts it, run here against the
/// simulator: the rendered Job's args with `$(SHARD_INDEX)` expanded from
/// the env it defines (and `$$(` unescaped), `JOB_COMPLETION_INDEX` set as
/// the Job controller sets it, and `/results` (the claim's mount) moved to a
/// scratch folder. This is what shows the rendered flags are ones tokbench
/// takes, in the forms it takes them (`auto/N`, the start time, `90s`).
/// Then the merge Job's containers the same way, over those folders.
#[test]
fn the_rendered_shard_and_merge_pods_run_as_the_kubelet_would_start_them() {
    let sim = Sim::with(paced(2.0, 0.0));
    let dir = scratch("deploy", "kubelet");
    let shards = 2u32;
    let sweep = [
        "--concurrency",
        "4",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--no-probe",
    ];
    // 8 s: two processes start, read the server's clock (up to 1.5 s) and
    // warm up, on a busy machine, before the start the pods are given.
    let url = sim.url();
    let extra = [
        "--base-url",
        url.as_str(),
        "--duration",
        "1s",
        "--margin",
        "8",
    ];
    let out = render(&dir.join("k8s"), shards, &extra, &sweep);
    assert!(out.status.success(), "{}", text(&out));
    let (ok, report, errors) = validate(&manifests(&dir.join("k8s")));
    assert!(ok, "{errors}");
    let job = doc(&report, "shards-job.yaml");
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(strings(&container["command"]), ["tokbench"]);
    let args = strings(&container["args"]);
    let results = dir.join("results");
    let children: Vec<_> = (0..shards)
        .map(|i| {
            let argv: Vec<String> = args
                .iter()
                .map(|a| {
                    a.replace("$(SHARD_INDEX)", &i.to_string())
                        .replace("$$(", "$(")
                        .replace("/results/", &format!("{}/", results.display()))
                })
                .collect();
            Command::new(bin())
                .args(&argv)
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .env_remove("RANK")
                .env_remove("OPENAI_API_KEY")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a shard starts")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("a shard ends"))
        .collect();
    let mut seeds = Vec::new();
    let mut starts = Vec::new();
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(out.status.code(), Some(0), "shard {i}: {}", text(out));
        let folder = results.join(format!("{RUN}/shard-{i}"));
        let summary = read_json(&folder.join("summary.json"));
        let shard = &summary["run"]["shard"];
        assert_eq!(
            shard["index"].as_u64(),
            Some(i as u64),
            "auto/N read the index"
        );
        assert_eq!(shard["count"].as_u64(), Some(shards.into()));
        assert_eq!(summary["run"]["duration_target"], 1.0);
        seeds.push(summary["run"]["seed"].clone());
        let level = &summary["levels"][0];
        assert!(level["completed"].as_u64() > Some(0), "{level}");
        starts.push(level["started_unix_s"].as_f64().expect("started_unix_s"));
    }
    assert_eq!(seeds[0], seeds[1], "one seed for every shard");
    assert!(seeds[0].is_u64(), "{}", seeds[0]);
    assert!(
        (starts[0] - starts[1]).abs() < 0.25,
        "the shards started level 1 together: {starts:?}"
    );

    // Then the merge Job's two containers, in order: merge, then report.
    let merge = doc(&report, "merge-job.yaml");
    let mpod = &merge["spec"]["template"]["spec"];
    let mut printed = String::new();
    for container in [&mpod["initContainers"][0], &mpod["containers"][0]] {
        let argv: Vec<String> = strings(&container["args"])
            .iter()
            .map(|a| a.replace("/results/", &format!("{}/", results.display())))
            .collect();
        let out = Command::new(bin()).args(&argv).output().expect("runs");
        assert_eq!(out.status.code(), Some(0), "{argv:?}: {}", text(&out));
        printed = stdout(&out);
    }
    let merged = read_json(&results.join(format!("{RUN}/merged/summary.json")));
    let level = &merged["levels"][0];
    let shards_of: Vec<u64> = level["shards"]
        .as_array()
        .expect("the merged level lists its shards")
        .iter()
        .map(|s| s["index"].as_u64().expect("index"))
        .collect();
    assert_eq!(shards_of, [0, 1]);
    let completed: u64 = (0..shards)
        .map(|i| {
            let f = results.join(format!("{RUN}/shard-{i}/summary.json"));
            read_json(&f)["levels"][0]["completed"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(level["completed"].as_u64(), Some(completed));
    assert!(
        printed.contains("| streams |"),
        "the report container prints the report:\n{printed}"
    );
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`.
fn epoch_of_rfc3339(s: &str) -> i64 {
    let num = |range: std::ops::Range<usize>| -> i64 {
        s.get(range)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not YYYY-MM-DDTHH:MM:SSZ: {s}"))
    };
    assert!(
        s.len() == 20 && s.ends_with('Z'),
        "not YYYY-MM-DDTHH:MM:SSZ: {s}"
    );
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + num(11..13) * 3600 + num(14..16) * 60 + num(17..19)
}

#[test]
fn the_start_time_is_rendered_at_submit_time_as_now_plus_the_margin() {
    assert_eq!(epoch_of_rfc3339("1970-01-01T00:00:00Z"), 0);
    assert_eq!(epoch_of_rfc3339("2026-12-01T13:00:00Z"), 1_796_130_000);
    let dir = scratch("deploy", "margin");
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let out = render(&dir, 2, &["--margin", "300"], &[]);
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(out.status.success(), "{}", text(&out));
    let (ok, report, stderr) = validate(&manifests(&dir));
    assert!(ok, "{stderr}");
    let job = doc(&report, "shards-job.yaml");
    let args = strings(&job["spec"]["template"]["spec"]["containers"][0]["args"]);
    let start = epoch_of_rfc3339(flag_value(&args, "--start-at"));
    assert!(
        (before + 300..=after + 301).contains(&start),
        "start {start} not now+300 (now {before}..{after})"
    );
}

#[test]
fn submit_refuses_bad_input_in_one_line_and_never_echoes_a_key() {
    let dir = scratch("deploy", "refuse");
    let existing = dir.to_string_lossy().into_owned();
    let cases: [(&[&str], &[&str], &str); 7] = [
        (
            &["--shards", "0"],
            &[],
            "--shards must be a whole number >= 1, not '0'",
        ),
        (
            &["--run-name", "Bad_Name"],
            &[],
            "--run-name must be lowercase",
        ),
        (
            &["--duration", "soon"],
            &[],
            "--duration must look like 30, 30s or 2m",
        ),
        (
            &[],
            &["--api-key", "sk-secret-123"],
            "do not pass --api-key",
        ),
        (&[], &["--api-key=sk-secret-123"], "do not pass --api-key"),
        (&[], &["--shard", "0/2"], "--shard is set by submit.sh"),
        (
            &["--fetch", &existing],
            &[],
            "exists already: kubectl cp would copy into it",
        ),
    ];
    for (extra, sweep, says) in cases {
        let out = render(&dir.join("out"), 2, extra, sweep);
        let stderr = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{extra:?} {sweep:?}: {}",
            text(&out)
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with("submit.sh: ") && stderr.contains(says),
            "{stderr}"
        );
        assert!(!stderr.contains("sk-secret"), "the key is echoed: {stderr}");
        assert!(!dir.join("out").exists(), "nothing rendered on a refusal");
    }
    let out = bash()
        .arg(root().join("deploy/kubernetes/submit.sh"))
        .args(["--shards", "2"])
        .output()
        .expect("bash runs");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), "submit.sh: --base-url is required\n");
}

/// A stand-in `kubectl`: logs every call's arguments, saves what it is asked
/// to apply, answers `get job` from a script of states (one line per poll),
/// and reads the Secret's file as kubectl would.
const FAKE_KUBECTL: &str = r#"#!/usr/bin/env bash
set -euo pipefail
d=$FAKE_DIR
# Logged last, so `create ... | apply -f -` logs in pipeline order.
trap 'printf "%s\n" "$*" >>"$d/calls.log"' EXIT
case "$1" in
  apply)
    n=$(ls "$d/applied" | wc -l)
    if [ "$3" = - ]; then cat >"$d/applied/$n-stdin.yaml"; else cp "$3" "$d/applied/$n-$(basename "$3")"; fi ;;
  create)
    for a in "$@"; do case "$a" in --from-file=api-key=*) cat "${a#--from-file=api-key=}" >"$d/secret-value" ;; esac; done
    echo "kind: Secret" ;;
  get)
    case "$2" in *-merge) echo "Complete |0|1|||0"; exit 0 ;; esac
    poll=$(($(cat "$d/polls" 2>/dev/null || echo 0) + 1)); echo "$poll" >"$d/polls"
    sed -n "${poll}p" "$d/states" | grep . || tail -n 1 "$d/states" ;;
  wait) ;;
  logs) echo "log of $*" ;;
  cp) mkdir -p "$3" ;;
  delete) ;;
  *) echo "fake kubectl: unexpected $1" >&2; exit 2 ;;
esac
"#;

fn submit_with_fake_kubectl(
    name: &str,
    states: &str,
    extra: &[&str],
    sweep: &[&str],
) -> (PathBuf, Output) {
    let dir = scratch("deploy", name);
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("applied")).unwrap();
    let kubectl = dir.join("bin/kubectl");
    fs::write(&kubectl, FAKE_KUBECTL).unwrap();
    let chmod = Command::new("chmod")
        .arg("+x")
        .arg(&kubectl)
        .status()
        .expect("chmod");
    assert!(chmod.success());
    fs::write(dir.join("states"), states).unwrap();
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = bash()
        .arg(root().join("deploy/kubernetes/submit.sh"))
        .args([
            "--base-url",
            "http://vllm:8000",
            "--shards",
            "4",
            "--run-name",
            RUN,
        ])
        .args(["--fetch", "fetched"])
        .args(extra)
        .arg("--")
        .args(sweep)
        .current_dir(&dir)
        .env("PATH", path)
        .env("FAKE_DIR", &dir)
        .env("OPENAI_API_KEY", "sk-test-key-42")
        .env("TOKBENCH_SUBMIT_POLL_S", "0")
        .output()
        .expect("bash runs");
    (dir, out)
}

fn applied(dir: &Path, suffix: &str) -> String {
    let mut hits: Vec<PathBuf> = fs::read_dir(dir.join("applied"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(hits.len(), 1, "{suffix} applied once: {hits:?}");
    fs::read_to_string(hits.remove(0)).unwrap()
}

#[test]
fn submit_applies_waits_for_the_shards_then_merges_and_fetches() {
    // Fields: true conditions | active | succeeded | failed | failedIndexes | ready.
    let states = "|4||||0\n|4||||4\nComplete |0|4|||0\n";
    let (dir, out) = submit_with_fake_kubectl("fake-ok", states, &[], &["--concurrency", "64"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = stdout(&out);
    assert!(
        stdout.contains(&format!(
            "{RUN}-shards: active 4, ready 4, succeeded 0, failed 0"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{RUN}-shards: active 0, ready 0, succeeded 4, failed 0"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("copied to fetched"), "{stdout}");
    assert!(
        !stdout.contains("WARNING"),
        "ready long before the start: {stdout}"
    );
    assert_eq!(
        fs::read_to_string(dir.join("polls")).unwrap().trim(),
        "3",
        "polled to Complete"
    );
    let calls = fs::read_to_string(dir.join("calls.log")).unwrap();
    // The order that matters: the claim and the shards, then (after the
    // Job completed) the merge and its logs, then the fetch pod and the copy.
    let order: Vec<&str> = calls
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .filter(|c| *c != "get")
        .collect();
    assert_eq!(
        order,
        [
            "create", "apply", "apply", "apply", "apply", "logs", "logs", "apply", "wait", "cp",
            "delete"
        ],
        "{calls}"
    );
    assert!(
        calls.contains(&format!("cp {RUN}-fetch:/results/{RUN}/merged fetched")),
        "{calls}"
    );
    let merge = applied(&dir, "merge-job.yaml");
    assert!(
        !merge.contains("- --allow-missing"),
        "every shard finished:\n{merge}"
    );
    assert_eq!(merged_dirs(&merge), [0, 1, 2, 3]);
    // The key reached the Secret through a file, and no command line.
    assert_eq!(
        fs::read_to_string(dir.join("secret-value")).unwrap(),
        "sk-test-key-42"
    );
    assert!(
        !calls.contains("sk-test-key-42"),
        "key on a kubectl command line:\n{calls}"
    );
    for file in fs::read_dir(dir.join("applied")).unwrap() {
        let body = fs::read_to_string(file.unwrap().path()).unwrap();
        assert!(
            !body.contains("sk-test-key-42"),
            "key in an applied manifest"
        );
    }
    // The rendered manifests stay for `kubectl delete -f`.
    assert!(dir.join(format!("{RUN}.k8s/shards-job.yaml")).is_file());
}

/// The shard indexes whose folders a rendered merge Job reads.
fn merged_dirs(merge: &str) -> Vec<u32> {
    let prefix = format!("            - /results/{RUN}/shard-");
    merge
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|i| i.parse().expect("an index"))
        .collect()
}

#[test]
fn submit_merges_what_finished_when_a_shard_failed_and_names_it() {
    let states = "|4||||4\nFailed FailureTarget |0|3|1|2|0\n";
    // A start already past when the pods were ready: warned.
    let past = ["--start-at", "2020-01-01T00:00:00Z"];
    let (dir, out) = submit_with_fake_kubectl("fake-failed", states, &past, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = stdout(&out);
    assert!(
        stdout.contains("shards 2 failed: merging the 3 that finished (--allow-missing)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("WARNING: not every shard was running until "),
        "{stdout}"
    );
    let merge = applied(&dir, "merge-job.yaml");
    assert!(merge.contains("            - --allow-missing\n"), "{merge}");
    assert_eq!(
        merged_dirs(&merge),
        [0, 1, 3],
        "the failed shard's folder left out"
    );

    // failedIndexes in the API's interval form.
    let states = "Failed |0|1|3|1-3|0\n";
    let (dir, out) = submit_with_fake_kubectl("fake-range", states, &[], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        crate::support::stdout(&out).contains("shards 1-3 failed: merging the 1 that"),
        "{}",
        text(&out)
    );
    assert_eq!(merged_dirs(&applied(&dir, "merge-job.yaml")), [0]);

    let (_, out) = submit_with_fake_kubectl("fake-all-failed", "Failed |0||4|0-3|0\n", &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = stderr(&out);
    assert!(
        stderr.starts_with("submit.sh: every shard failed; see: kubectl logs"),
        "{stderr}"
    );
}

/// `deploy/ray/launch.py` with Python's site-packages off (-I -S), so no
/// Ray whatever this machine has installed; its exit code and stderr.
fn launch_without_ray(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(python())
        .args(["-I", "-S"])
        .arg(root().join("deploy/ray/launch.py"))
        .args([
            "--base-url",
            "http://127.0.0.1:9",
            "--tokbench",
            "/bin/true",
        ])
        .args(args)
        .output()
        .expect("python runs");
    (out.status.code(), stderr(&out))
}

#[test]
fn ray_launcher_without_ray_says_so_in_one_line() {
    let (code, stderr) = launch_without_ray(&["--shards", "2"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("launch.py: Ray is not installed (pip install 'ray[default]')"),
        "{stderr}"
    );
}

#[test]
fn ray_launcher_refuses_a_key_on_the_command_line_and_flags_it_sets() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--shards", "0"],
            "launch.py: --shards must be at least 1, not 0",
        ),
        (
            &["--shards", "2", "--", "--api-key", "sk-secret-123"],
            "launch.py: do not pass --api-key",
        ),
        (
            &["--shards", "2", "--", "--api-key=sk-secret-123"],
            "launch.py: do not pass --api-key",
        ),
        (
            &["--shards", "2", "--", "--start-at", "0"],
            "launch.py: --start-at is set by launch.py",
        ),
    ];
    for (args, says) in cases {
        let (code, stderr) = launch_without_ray(args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("sk-secret"), "the key is echoed: {stderr}");
    }
}
