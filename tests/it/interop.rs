//! The tools around a run, driven for real: `--events` read the way a script
//! reads it, `--metrics-listen` scraped by promtool and by a Prometheus
//! server started here, the Grafana board's queries checked against what
//! tokbench and the (vLLM-like) simulator serve, and `report --format br`
//! validated against llm-d's own JSON Schema.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    self, bin, paced, python_with_jsonschema, read_json, scratch, text, tokbench, Sim,
};

/// Give a flag that `sweep_args` sets another value.
fn set_flag(args: &mut [String], flag: &str, value: &str) {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("sweep_args sets {flag}"))
        + 1;
    args[at] = value.into();
}

/// The sweep every test here runs: two short levels against a paced
/// simulator, long enough per request (16 tokens of 20 ms) that a 100 ms
/// scraper sees each level begin at zero.
fn sweep_args(sim: &Sim, dir: &Path) -> Vec<String> {
    [
        "sweep",
        "--base-url",
        &sim.url(),
        "--no-tui",
        "--seed",
        "5",
        "--warmup",
        "1",
        "--concurrency",
        "1,4",
        "--prompts-per-stream",
        "3",
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--no-probe",
        "--result-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn events_on_stdout_follow_the_run_and_repeat_the_level_files() {
    let sim = Sim::with(paced(2.0, 0.0));
    let dir = scratch("interop", "events");
    let run_dir = dir.join("run");
    let mut args = sweep_args(&sim, &run_dir);
    args.extend(["--events".into(), "-".into()]);
    let out = tokbench(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // stdout holds the events and nothing else; the table went to stderr.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("results: "), "{}", text(&out));
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().expect("every line has its event"))
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "run_finished").count(), 1);
    for e in &events {
        assert!(e["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
        assert!(e["elapsed_s"].as_f64().is_some(), "{e}");
    }
    // Each level starts, then finishes, in run order.
    let levels: Vec<(&str, u64)> = events
        .iter()
        .filter_map(|e| {
            let kind = e["event"].as_str()?;
            matches!(kind, "level_started" | "level_finished")
                .then(|| (kind, e["level_index"].as_u64().expect("level_index")))
        })
        .collect();
    assert_eq!(
        levels,
        [
            ("level_started", 0),
            ("level_finished", 0),
            ("level_started", 1),
            ("level_finished", 1)
        ],
        "{kinds:?}"
    );
    // level_finished carries the level file's object, exactly.
    let summary = read_json(&run_dir.join("summary.json"));
    for e in events.iter().filter(|e| e["event"] == "level_finished") {
        let file = e["file"].as_str().expect("a saved level names its file");
        assert_eq!(e["level"], level_as_told(&run_dir.join(file)), "{file}");
    }
    // The run's identity, without credentials, and the diagnoses of the summary.
    let started = &events[0];
    // The start cannot know the end: the summary's `ended_at` aside.
    let mut run = summary["run"].clone();
    assert!(run["ended_at"].is_string(), "{run}");
    run.as_object_mut().map(|r| r.remove("ended_at"));
    assert_eq!(started["run"], run);
    assert_eq!(started["result_dir"], run_dir.display().to_string());
    let told: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "diagnosis")
        .collect();
    let diagnoses = summary["diagnoses"].as_array().expect("diagnoses");
    assert_eq!(told.len(), diagnoses.len());
    for (e, d) in told.iter().zip(diagnoses) {
        assert_eq!((&e["id"], &e["message"]), (&d["id"], &d["message"]));
    }
    let finished = events.last().expect("events");
    assert_eq!(finished["exit_code"], 0);
    assert_eq!(finished["capacity"], summary["capacity"]);
    assert_eq!(finished["knee"], summary["knee"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_run_that_cannot_start_its_exporters_sends_no_load() {
    let sim = Sim::with(paced(2.0, 0.0));
    let dir = scratch("interop", "taken");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut args = sweep_args(&sim, &dir.join("run"));
    args.extend(["--metrics-listen".into(), format!("127.0.0.1:{port}")]);
    let out = tokbench(&args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "--metrics-listen 127.0.0.1:{port}: cannot listen there"
        )),
        "{}",
        text(&out)
    );
    assert!(!dir.join("run").join("sweep-c1.json").exists());
    let mut args = sweep_args(&sim, &dir.join("run2"));
    args.extend(["--events".into(), "/nonexistent-dir/ev.jsonl".into()]);
    let out = tokbench(&args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--events: cannot write /nonexistent-dir/ev.jsonl"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A port nobody listens on now (bound, read, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET over plain HTTP/1.0: (status, body), None when nothing answers.
fn http_get(addr: SocketAddr, path_and_query: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A scrape of `listen` once it shows requests, taken while `child` runs;
/// panics with the child's output if it ends first.
fn scrape_while_running(child: &mut Child, listen: SocketAddr) -> String {
    let start = Instant::now();
    loop {
        if let Some((200, body)) = http_get(listen, "/metrics") {
            if body.contains("tokbench_requests_total{") {
                return body;
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            panic!("tokbench ended ({status}) before a scrape:\n{stderr}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no scrape from tokbench"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn require_tool(name: &str) {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{name} is not installed: this test runs the real one \
         (apt-get install prometheus, or run .ci/run which installs it)"
    );
}

/// A Prometheus server of our own on loopback, its data in a temp folder;
/// killed on drop whatever happened.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Prometheus {
    fn start(dir: &Path, scrape: SocketAddr) -> Prometheus {
        require_tool("prometheus");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 100ms\n  scrape_timeout: 90ms\n\
                 scrape_configs:\n  - job_name: tokbench\n    static_configs:\n      - targets: ['{scrape}']\n"
            ),
        )
        .expect("write the config");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus { child, addr };
        prometheus.wait_for("ready", Duration::from_secs(60), || {
            http_get(addr, "/-/ready").is_some_and(|(s, _)| s == 200)
        });
        // Targets reach the scrape loop seconds after start (discovery is
        // batched): wait for the first attempt on ours, failed as it must be.
        prometheus.wait_for(
            "its first scrape of the target",
            Duration::from_secs(60),
            || {
                http_get(addr, "/api/v1/targets")
                    .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
                    .and_then(|v| {
                        let target = v["data"]["activeTargets"].get(0)?.clone();
                        Some(target["health"] != "unknown")
                    })
                    .unwrap_or(false)
            },
        );
        prometheus
    }

    /// Poll until `ready()` holds; panics naming `what` after `limit`.
    fn wait_for(&self, what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < limit,
                "Prometheus: gave up waiting for {what} after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// An instant query's first value, at `time` when given.
    fn query(&self, promql: &str, time: Option<f64>) -> Option<f64> {
        let mut path = format!("/api/v1/query?query={}", url_encode(promql));
        if let Some(t) = time {
            path.push_str(&format!("&time={t:.3}"));
        }
        let (status, body) = http_get(self.addr, &path)?;
        assert_eq!(status, 200, "{promql}: {body}");
        let v: Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// The raw samples of a range selector, every series: (time, value).
    fn samples(&self, selector: &str) -> Vec<Vec<(f64, f64)>> {
        let path = format!("/api/v1/query?query={}", url_encode(selector));
        let Some((200, body)) = http_get(self.addr, &path) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["result"]
            .as_array()
            .map(|series| {
                series
                    .iter()
                    .map(|s| {
                        s["values"]
                            .as_array()
                            .map(|points| {
                                points
                                    .iter()
                                    .filter_map(|p| {
                                        Some((p[0].as_f64()?, p[1].as_str()?.parse().ok()?))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_the_run_and_counts_its_output_tokens() {
    require_tool("promtool");
    let sim = Sim::with(paced(20.0, 0.0));
    let dir = scratch("interop", "prometheus");
    // The port stays bound while Prometheus starts (seconds): released
    // early, an outgoing connection of a test beside this one took it as its
    // source port, or Prometheus's own free port came back the same.
    let reserved = TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = reserved.local_addr().expect("addr");
    let prometheus = Prometheus::start(&dir, listen);
    drop(reserved);

    let run_dir = dir.join("run");
    let mut args = sweep_args(&sim, &run_dir);
    args.extend(["--metrics-listen".into(), listen.to_string()]);
    let mut child = Command::new(bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokbench runs");

    // A scrape taken while the run runs, checked by promtool.
    let scrape = scrape_while_running(&mut child, listen);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(scrape.as_bytes())
        .expect("feed promtool");
    let checked = promtool.wait_with_output().expect("promtool ends");
    assert!(
        checked.status.success(),
        "promtool check metrics: {}\n{scrape}",
        text(&checked)
    );
    for name in [
        "tokbench_requests_in_flight",
        "tokbench_requests_streaming",
        "tokbench_requests_waiting",
        "tokbench_concurrency_target",
        "tokbench_level_index",
        "tokbench_output_tokens_total",
        "tokbench_requests_total",
        "tokbench_ttft_seconds_bucket",
        "tokbench_itl_seconds_bucket",
        "tokbench_e2el_seconds_bucket",
    ] {
        assert!(
            scrape.contains(&format!("\n{name}{{")),
            "no {name} in\n{scrape}"
        );
    }
    let out = child.wait_with_output().expect("tokbench ends");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let summary = read_json(&run_dir.join("summary.json"));
    let total: f64 = summary["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| l["total_output_tokens"].as_f64().expect("tokens"))
        .sum();
    assert!(total > 0.0);
    // The run's last figures reach Prometheus (tokbench waits for that scrape).
    let run_id = "run";
    let counter = format!("tokbench_output_tokens_total{{run_id=\"{run_id}\"}}");
    // The run is over and its series have gone stale: read the stored
    // samples. The last scrape carries the final figures (tokbench waited for it).
    let mut series = Vec::new();
    prometheus.wait_for(
        "the final output-token count",
        Duration::from_secs(30),
        || {
            series = prometheus.samples(&format!("{counter}[10m]"));
            let last: f64 = series.iter().filter_map(|s| s.last()).map(|p| p.1).sum();
            last == total
        },
    );
    // Every level's series begins at zero (so nothing is extrapolated back).
    for s in &series {
        assert_eq!(s.first().map(|p| p.1), Some(0.0), "{series:?}");
    }
    // The counter's increase over the run, evaluated at the last scrape.
    let last = series
        .iter()
        .filter_map(|s| s.last())
        .map(|p| p.0)
        .fold(f64::MIN, f64::max);
    let increase = prometheus
        .query(&format!("sum(increase({counter}[10m]))"), Some(last))
        .expect("an increase");
    println!("sum(increase({counter}[10m])) = {increase} (summary.json: {total})");
    assert!(
        (increase - total).abs() <= total * 0.01,
        "increase {increase} vs the run's {total} output tokens"
    );
    drop(prometheus);
    std::fs::remove_dir_all(&dir).ok();
}

/// Metric names in a text exposition: every sample's name, and every
/// declared family's (a counter with no sample yet, as the error classes
/// before an error), histograms with their three series.
fn exposed_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut parts = declared.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                if kind == "histogram" {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                } else {
                    names.insert(name.to_string());
                }
            }
        } else if !line.starts_with('#') {
            if let Some(name) = line.split(['{', ' ']).next().filter(|n| !n.is_empty()) {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The metric names a PromQL expression reads: label matchers, ranges,
/// strings and `by (...)` lists removed, then every identifier that is not a
/// function call, a keyword or a number.
fn promql_metric_names(expr: &str) -> Vec<String> {
    // Drop {...}, [...] and "..." (label values may hold anything).
    let mut plain = String::new();
    let (mut depth, mut quoted) = (0usize, false);
    for c in expr.chars() {
        match c {
            '"' if depth > 0 || quoted => quoted = !quoted,
            _ if quoted => {}
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            _ => plain.push(c),
        }
    }
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = Vec::new();
    let chars: Vec<char> = plain.chars().collect();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        if !is_ident(chars[i]) {
            if chars[i] == '(' && skip_group {
                // `by (le)`: label names, not metrics.
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_group = false;
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = chars[i..].iter().find(|c| !c.is_whitespace());
        match word.as_str() {
            "by" | "without" | "on" | "ignoring" | "group_left" | "group_right" => {
                skip_group = true
            }
            "offset" | "bool" | "and" | "or" | "unless" => {}
            // Aggregations may put `by (...)` before their parenthesis.
            "sum" | "avg" | "min" | "max" | "count" | "group" | "stddev" | "stdvar" | "topk"
            | "bottomk" | "quantile" | "count_values" => {}
            _ if word.chars().next().is_some_and(|c| c.is_ascii_digit()) => {}
            _ if next == Some(&'(') => {}
            _ => names.push(word),
        }
    }
    names
}

#[test]
fn the_grafana_board_reads_only_metrics_tokbench_or_vllm_serve() {
    // What tokbench serves, from a real exporter; what vLLM serves, from the
    // simulator's vLLM personality (vLLM's names and help lines).
    // A worker of its own serves the exporter while this thread asks.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let exporter = rt
        .block_on(async {
            tokbench::export::metrics::MetricsExporter::start(
                "127.0.0.1:0".parse().expect("addr"),
                vec![("run_id".into(), "x".into())],
                0,
            )
        })
        .expect("exporter");
    exporter.expect_levels(0..1);
    // Error classes appear with the first failure: have one.
    let mut failed = tokbench::record::RequestRecord::empty(1, 0);
    failed.outcome = tokbench::record::Outcome::Failed(tokbench::record::ErrorClass::Http(503));
    exporter.on_event(&tokbench::load::driver::DriverEvent::Record(failed));
    let (_, tokbench) = http_get(exporter.addr(), "/metrics").expect("tokbench answers");
    let sim = Sim::with(paced(2.0, 0.0));
    let (_, vllm) = http_get(sim.addr(), "/metrics").expect("the simulator answers");
    let mut served = exposed_names(&tokbench);
    served.extend(exposed_names(&vllm));
    assert!(
        served.contains("tokbench_ttft_seconds_bucket"),
        "{served:?}"
    );
    assert!(served.contains("vllm:num_requests_waiting"), "{served:?}");

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/grafana/tokbench-vllm.json");
    let board = read_json(&path);
    assert!(board["title"].as_str().is_some() && board["uid"].as_str().is_some());
    let mut exprs: Vec<String> = Vec::new();
    for panel in board["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("a query").to_string());
        }
    }
    // The run picker reads label_values(METRIC, LABEL): its metric counts too.
    for var in board["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = var["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .expect("label_values(metric, label)");
            exprs.push(inner.to_string());
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for expr in &exprs {
        let names = promql_metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for name in names {
            assert!(
                served.contains(&name),
                "{name} (in {expr}) is served by neither tokbench nor vLLM"
            );
            seen.insert(name);
        }
    }
    // The board shows tokbench beside the two vLLM gauges the issue names.
    for name in [
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "tokbench_output_tokens_total",
        "tokbench_requests_waiting",
        "tokbench_ttft_seconds_bucket",
    ] {
        assert!(seen.contains(name), "the board never reads {name}");
    }
}

#[test]
fn promql_names_are_found_and_labels_are_not() {
    assert_eq!(
        promql_metric_names(
            "histogram_quantile(0.99, sum by (le) (rate(tokbench_ttft_seconds_bucket{run_id=~\"$run_id\"}[$__rate_interval])))"
        ),
        ["tokbench_ttft_seconds_bucket"]
    );
    assert_eq!(
        promql_metric_names("sum(vllm:num_requests_waiting) / on (x) group_left foo_total"),
        ["vllm:num_requests_waiting", "foo_total"]
    );
}

/// Validate every report of a `--format br` array against the checked-in
/// schema; the validator's messages on failure.
fn validate_br(reports: &Path) {
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemas/br_v0_2_1_json_schema.json");
    let script = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
reports = json.load(open(sys.argv[2]))
assert isinstance(reports, list) and reports, "not a non-empty array"
validator = jsonschema.Draft202012Validator(schema)
bad = 0
for i, report in enumerate(reports):
    for error in validator.iter_errors(report):
        bad += 1
        print(f"report {i}: {'/'.join(map(str, error.absolute_path))}: {error.message}")
print(f"{len(reports)} reports, {bad} errors")
sys.exit(1 if bad else 0)
"#;
    let out = Command::new(python_with_jsonschema("against llm-d's JSON Schema"))
        .args(["-c", script])
        .arg(&schema)
        .arg(reports)
        .output()
        .expect("python runs");
    assert!(out.status.success(), "schema validation: {}", text(&out));
}

#[test]
fn benchmark_reports_validate_against_the_llm_d_schema() {
    let sim = Sim::with(paced(2.0, 0.0));
    let dir = scratch("interop", "br");
    let run_dir = dir.join("run");
    let mut args = sweep_args(&sim, &run_dir);
    // The probe on (the simulator's vLLM gauges), lengths drawn, a GPU named.
    args.retain(|a| a != "--no-probe");
    // Levels of about half a second, so the probe's 0.1 s samples land in
    // each even when the box is busy (three requests a stream took ~0.1 s).
    set_flag(&mut args, "--prompts-per-stream", "12");
    args.extend(
        [
            "--random-range-ratio",
            "0.25",
            "--label",
            "gpu=test-gpu",
            "--probe-interval",
            "0.1",
        ]
        .map(String::from),
    );
    let out = tokbench(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let br = dir.join("br.json");
    let out = tokbench(&[
        "report".into(),
        run_dir.display().to_string(),
        "--format".into(),
        "br".into(),
        "-o".into(),
        br.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    validate_br(&br);

    // What was mapped: one report per level, the level's own figures.
    let reports = read_json(&br);
    let summary = read_json(&run_dir.join("summary.json"));
    let levels = summary["levels"].as_array().expect("levels");
    let reports = reports.as_array().expect("an array");
    assert_eq!(reports.len(), levels.len());
    let mut sampled = 0;
    for (report, level) in reports.iter().zip(levels) {
        assert_eq!(report["version"], "0.2.1");
        assert_eq!(
            report["run"]["eid"], reports[0]["run"]["eid"],
            "one experiment"
        );
        let load = &report["scenario"]["load"]["standardized"];
        assert_eq!(load["stage"], level["level_index"]);
        assert_eq!(load["concurrency"], level["max_concurrency"]);
        assert_eq!(load["tool"], "tokbench");
        assert_eq!(load["input_seq_len"]["distribution"], "uniform");
        assert_eq!(load["input_seq_len"]["min"], 12);
        let engine = &report["scenario"]["stack"][0]["standardized"];
        assert_eq!(engine["tool"], summary["run"]["engine"]);
        assert_eq!(engine["model"]["name"], summary["run"]["model"]);
        assert_eq!(engine["accelerator"]["model"], "test-gpu");
        let aggregate = &report["results"]["request_performance"]["aggregate"];
        let ttft = &aggregate["latency"]["time_to_first_token"];
        assert_eq!(ttft["units"], "s");
        let close = |a: &Value, b: f64| (a.as_f64().expect("a number") - b).abs() < 1e-9;
        assert!(close(
            &ttft["mean"],
            level["mean_ttft_ms"].as_f64().expect("ms") / 1000.0
        ));
        assert!(close(
            &ttft["p99"],
            level["p99_ttft_ms"].as_f64().expect("ms") / 1000.0
        ));
        assert!(close(
            &aggregate["throughput"]["output_token_rate"]["mean"],
            level["output_throughput"].as_f64().expect("tok/s")
        ));
        assert_eq!(aggregate["requests"]["total"], level["completed"]);
        // The server's KV gauge, where the probe sampled the level: as a
        // percent of the fraction vLLM reports.
        let kv =
            &report["results"]["observability"]["components"][0]["aggregate"]["kv_cache_usage"];
        if let Some(mean) = level["server"]["kv_cache_usage"]["mean"].as_f64() {
            assert_eq!(kv["units"], "percent", "{report}");
            assert!(close(&kv["mean"], mean * 100.0), "{report}");
            sampled += 1;
        } else {
            // No sample: no KV figure made up for the level either.
            assert!(kv.is_null(), "a KV figure without a sample: {report}");
        }
    }
    assert!(sampled > 0, "no level has a KV sample: {summary}");
    // ... and older summaries (as `view` reads them) still make valid reports.
    for fixture in ["a", "b"] {
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/view")
            .join(fixture);
        let to = dir.join(format!("fixture-{fixture}.json"));
        let out = tokbench(&[
            "report".into(),
            from.display().to_string(),
            "--format".into(),
            "br".into(),
            "-o".into(),
            to.display().to_string(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        validate_br(&to);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_live_view_feeds_the_same_events_and_metrics() {
    let sim = Sim::with(paced(3.0, 0.0));
    let dir = scratch("interop", "tui");
    let run_dir = dir.join("run");
    let events = dir.join("events.jsonl");
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let command = format!(
        "sh -c 'exec env TERM=xterm {bin} sweep --base-url {url} --concurrency 1,2 \
         --prompts-per-stream 4 --warmup 1 --random-input-len 16 --random-output-len 32 \
         --no-probe --seed 9 --result-dir {run} --events {events} --metrics-listen {listen}'; \
         echo TOKBENCH_EXIT=$?; sleep 60",
        bin = bin(),
        url = sim.url(),
        run = run_dir.display(),
        events = events.display(),
    );
    let tmux = support::Tmux::start("interop-tui", 120, 40, &command);
    tmux.wait_for("the live view", Duration::from_secs(20), |s| {
        s.contains("output tok/s")
    });
    // The view's run is scraped like a headless one.
    let start = Instant::now();
    loop {
        if let Some((200, body)) = http_get(listen, "/metrics") {
            if body.contains("tokbench_requests_total{") {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no scrape from the live view"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both levels done (the plan's end leaves the view up), then q.
    let start = Instant::now();
    while std::fs::read_to_string(&events)
        .unwrap_or_default()
        .matches("\"level_finished\"")
        .count()
        < 2
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the levels did not finish:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tmux.keys("q");
    tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("TOKBENCH_EXIT=")
    });
    assert!(
        tmux.screen().contains("TOKBENCH_EXIT=0"),
        "{}",
        tmux.screen()
    );

    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .expect("events file")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    let finished: Vec<&Value> = lines
        .iter()
        .filter(|e| e["event"] == "level_finished")
        .collect();
    assert_eq!(finished.len(), 2, "{kinds:?}");
    for e in finished {
        let file = e["file"].as_str().expect("a file");
        assert_eq!(e["level"], level_as_told(&run_dir.join(file)), "{file}");
    }
    assert_eq!(lines.last().map(|e| &e["exit_code"]), Some(&Value::from(0)));
    drop(tmux);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_key_or_url_credential_reaches_the_events_or_the_metrics() {
    const KEY: &str = "SECRET-interop-5b1e9c";
    const USER: &str = "tokuser-interop";
    const PASS: &str = "pass-interop-Zq81";
    // The key is sent (and could be echoed) though this simulator does not
    // ask for it: with both a key required and user:pass@ in the URL, the
    // preflight fails first (a 401; see the report of this branch).
    let sim = Sim::with(paced(20.0, 0.0));
    let dir = scratch("interop", "secrets");
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut args = sweep_args(&sim, &dir.join("run"));
    let url = args
        .iter()
        .position(|a| a == "--base-url")
        .expect("--base-url")
        + 1;
    args[url] = format!("http://{USER}:{PASS}@{}", sim.addr());
    args.extend(
        [
            "--api-key",
            KEY,
            "--events",
            "-",
            "--metrics-listen",
            &listen.to_string(),
        ]
        .map(String::from),
    );
    let mut child = Command::new(bin())
        .args(&args)
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokbench runs");
    let scrape = scrape_while_running(&mut child, listen);
    let out = child.wait_with_output().expect("tokbench ends");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(events.contains("\"run_finished\""), "{events}");
    for needle in [KEY, USER, PASS] {
        assert!(
            !events.contains(needle),
            "the events hold {needle}:\n{events}"
        );
        assert!(
            !scrape.contains(needle),
            "the scrape holds {needle}:\n{scrape}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains(needle),
            "stderr holds {needle}"
        );
    }
    assert!(
        scrape.contains(&format!("target=\"http://{}\"", sim.addr())),
        "the target label is the URL without credentials:\n{scrape}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_signal_still_ends_the_events_with_the_partial_level_and_exit_130() {
    let sim = Sim::with(paced(3.0, 0.0));
    let dir = scratch("interop", "sigterm");
    let run_dir = dir.join("run");
    let events = dir.join("events.jsonl");
    let mut args = sweep_args(&sim, &run_dir);
    // One long level: the signal lands in the middle of it.
    set_flag(&mut args, "--concurrency", "2");
    args.extend(["--num-prompts", "100000", "--events"].map(String::from));
    args.push(events.display().to_string());
    let mut child = Command::new(bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokbench runs");
    // Wait for the level to have answers (a partial file needs some).
    let start = Instant::now();
    while !std::fs::read_to_string(run_dir.join("requests.jsonl"))
        .unwrap_or_default()
        .contains("\"error\":null")
    {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("tokbench ended early ({status})");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no answers");
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = child.wait().expect("tokbench ends");
    assert_eq!(status.code(), Some(130));

    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .expect("events file")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let last = lines.last().expect("events");
    assert_eq!(last["event"], "run_finished", "{lines:?}");
    assert_eq!(last["exit_code"], 130);
    let finished: Vec<&Value> = lines
        .iter()
        .filter(|e| e["event"] == "level_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{lines:?}");
    assert_eq!(finished[0]["partial"], true);
    let file = finished[0]["file"].as_str().expect("a file");
    assert_eq!(file, "sweep-c2-partial.json");
    assert_eq!(finished[0]["level"], level_as_told(&run_dir.join(file)));
    std::fs::remove_dir_all(&dir).ok();
}

/// A level file as `level_finished` repeats it: all of it but the
/// histograms and samples, which only merges read (docs/live-metrics.md, `--events`).
fn level_as_told(path: &std::path::Path) -> Value {
    let mut level = read_json(path);
    let map = level.as_object_mut().expect("a level file is an object");
    assert!(
        map.remove("histograms").is_some(),
        "{}: histograms",
        path.display()
    );
    assert!(
        map.remove("samples").is_some(),
        "{}: samples",
        path.display()
    );
    level
}
