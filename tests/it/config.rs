//! `--config FILE.toml`, `--print-config` and each run's `config.toml`
//! (issue 14): the real binary, against the simulator on loopback.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{self, bin, paced, read_json, stderr, stdout, text, Sim};

fn scratch(name: &str) -> PathBuf {
    support::scratch("config", name)
}

fn tokbench(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("tokbench runs")
}

fn toml_of(out: &Output) -> toml::Table {
    stdout(out)
        .parse()
        .unwrap_or_else(|e| panic!("--print-config is not TOML ({e}):\n{}", text(out)))
}

/// The prompts a run sent, in request order (needs `--save-prompts`).
fn prompts(dir: &Path) -> Vec<(u64, u64, String)> {
    let body = std::fs::read_to_string(dir.join("requests.jsonl")).expect("requests.jsonl");
    let mut out: Vec<(u64, u64, String)> = body
        .lines()
        .map(|line| {
            let r: Value = serde_json::from_str(line).expect("a JSON line");
            (
                r["level"].as_u64().expect("level"),
                r["id"].as_u64().expect("id"),
                r["prompt"].as_str().expect("saved prompt").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_runs_config_toml_repeats_its_shape_with_new_prompts() {
    let sim = Sim::with(paced(1.0, 1.0));
    let base = scratch("repeat");
    let (first, second) = (base.join("first"), base.join("second"));
    // No --seed: the run draws one, and its config.toml notes it as a
    // comment: a repeat draws its own, so the server's prefix cache is as
    // cold for it as for the first run.
    let out = tokbench(&[
        "sweep",
        "--no-tui",
        "--base-url",
        &sim.url(),
        "--concurrency",
        "1,3",
        "--num-prompts",
        "4",
        "--warmup",
        "1",
        "--random-input-len",
        "24",
        "--random-output-len",
        "8",
        "--random-range-ratio",
        "0.5",
        "--label",
        "gpu=none",
        "--label",
        "box=ci",
        "--save-prompts",
        "--probe-interval",
        "0.2",
        "--result-dir",
        first.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let config = first.join("config.toml");
    let written: toml::Table = std::fs::read_to_string(&config)
        .expect("config.toml written")
        .parse()
        .expect("config.toml is TOML");
    assert!(
        written.get("seed").is_none(),
        "a drawn seed is no setting: {written:?}"
    );
    let seed = read_json(&first.join("summary.json"))["run"]["seed"].clone();
    let raw = std::fs::read_to_string(&config).expect("config.toml");
    assert!(raw.contains(&format!("# seed = {seed}  (drawn;")), "{raw}");
    assert_eq!(
        written["model"].as_str(),
        Some("sim"),
        "resolved model recorded"
    );
    assert!(
        written.get("result-dir").is_none(),
        "a repeat gets its own folder"
    );

    let out = tokbench(&[
        "sweep",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--result-dir",
        second.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let (a, b) = (
        read_json(&first.join("summary.json")),
        read_json(&second.join("summary.json")),
    );
    assert_ne!(a["run"]["seed"], b["run"]["seed"], "a fresh seed");
    for key in ["input_len", "output_len", "labels", "model", "target"] {
        assert_eq!(a["run"][key], b["run"][key], "run.{key}");
    }
    let shape = |s: &Value| -> Vec<(Value, Value, Value)> {
        s["levels"]
            .as_array()
            .expect("levels")
            .iter()
            .map(|l| {
                (
                    l["max_concurrency"].clone(),
                    l["num_prompts"].clone(),
                    l["completed"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&a), shape(&b));
    assert_eq!(shape(&a).len(), 2);
    // New prompts: none of the first run's is sent again.
    let (pa, pb) = (prompts(&first), prompts(&second));
    assert_eq!((pa.len(), pb.len()), (8, 8));
    assert!(pa.iter().all(|p| !pb.contains(p)), "{pa:?} {pb:?}");
    // And the repeat's own record says the same again.
    let again: toml::Table = std::fs::read_to_string(second.join("config.toml"))
        .expect("second config.toml")
        .parse()
        .expect("TOML");
    assert_eq!(written, again);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn command_line_flags_override_the_file_and_replace_its_lists() {
    let dir = scratch("override");
    let file = dir.join("tokbench.toml");
    std::fs::write(
        &file,
        "base-url = \"http://127.0.0.1:9\"\nconcurrency = [1, 2, 4]\nlabel = { a = \"1\" }\n\
         seed = 11\nrandom_input_len = 64\nno-tui = true\n",
    )
    .expect("write config");
    let f = file.to_str().expect("utf-8 path");
    let out = tokbench(&["sweep", "--config", f, "--print-config"]);
    assert!(out.status.success(), "{}", text(&out));
    let t = toml_of(&out);
    assert_eq!(
        t["concurrency"],
        toml::Value::Array(vec![1.into(), 2.into(), 4.into()])
    );
    assert_eq!(t["label"], toml::Value::Array(vec!["a=1".into()]));
    assert_eq!(t["random-input-len"].as_integer(), Some(64));
    assert_eq!(t["no-tui"].as_bool(), Some(true));

    let out = tokbench(&[
        "sweep",
        "--concurrency",
        "8",
        "--config",
        f,
        "--label",
        "b=2",
        "--label",
        "c=3",
        "--seed",
        "5",
        "--print-config",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let t = toml_of(&out);
    assert_eq!(t["concurrency"], toml::Value::Array(vec![8.into()]));
    assert_eq!(
        t["label"],
        toml::Value::Array(vec!["b=2".into(), "c=3".into()])
    );
    assert_eq!(t["seed"].as_integer(), Some(5));
    assert_eq!(
        t["random-input-len"].as_integer(),
        Some(64),
        "the file still counts"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_example_configs_parse_and_print_back_their_keys() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/examples");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&examples)
        .expect("assets/examples")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    for path in names {
        let file: toml::Table = std::fs::read_to_string(&path)
            .expect("read example")
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = tokbench(&[
            "sweep",
            "--config",
            path.to_str().expect("utf-8 path"),
            "--print-config",
        ]);
        assert!(out.status.success(), "{}: {}", path.display(), text(&out));
        let printed = toml_of(&out);
        for (key, value) in &file {
            let got = printed
                .get(key)
                .unwrap_or_else(|| panic!("{}: {key} not printed", path.display()));
            match value {
                // A table of labels prints as K=V items.
                toml::Value::Table(t) if key == "label" => {
                    let want: Vec<toml::Value> = t
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().expect("label text")).into())
                        .collect();
                    assert_eq!(got, &toml::Value::Array(want), "{}: {key}", path.display());
                }
                // 1.0 and 1 are the same setting.
                toml::Value::Float(f) => {
                    let g = got
                        .as_float()
                        .or_else(|| got.as_integer().map(|i| i as f64));
                    assert_eq!(g, Some(*f), "{}: {key}", path.display());
                }
                _ => assert_eq!(got, value, "{}: {key}", path.display()),
            }
        }
    }
}

/// A listener that counts connections: a refused config sends nothing.
fn silent_server() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

#[test]
fn a_bad_config_stops_before_any_load_in_one_line() {
    let dir = scratch("bad");
    let (listener, url) = silent_server();
    let cases = [
        (
            "concurency = [1, 2]\n",
            "unknown key \"concurency\" (did you mean \"concurrency\"?)",
        ),
        (
            "concurrency = \"1,two\"\n",
            "key \"concurrency\": invalid value 'two' for '--concurrency <LIST>': invalid digit found in string",
        ),
        (
            "no-tui = \"yes\"\n",
            "key \"no-tui\" is a switch: write true or false, not \"yes\"",
        ),
        ("seed = [1, 2]\n", "key \"seed\" takes one value, not a list"),
        (
            "api-key = \"sk-do-not-keep-me\"\n",
            "key \"api-key\" is not read from a file (files get copied and committed): pass --api-key or set OPENAI_API_KEY",
        ),
        ("concurrency = [1,\n", "line 1 not valid TOML: "),
    ];
    for (i, (body, want)) in cases.iter().enumerate() {
        let file = dir.join("tokbench.toml");
        std::fs::write(&file, body).expect("write config");
        let result_dir = dir.join(format!("run-{i}"));
        let out = tokbench(&[
            "sweep",
            "--no-tui",
            "--base-url",
            &url,
            "--config",
            file.to_str().expect("utf-8 path"),
            "--result-dir",
            result_dir.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(out.status.code(), Some(1), "{body}: {}", text(&out));
        let err = stderr(&out);
        let expected = format!("tokbench: {}: {want}", file.display());
        assert!(
            err.starts_with(&expected),
            "{body}\nwant: {expected}\ngot:  {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            !err.contains("sk-do-not-keep-me"),
            "the refused key is not echoed"
        );
        assert!(stdout(&out).is_empty(), "{}", text(&out));
        assert!(
            !result_dir.exists(),
            "no result folder for a refused config"
        );
    }
    let missing = tokbench(&["sweep", "--config", "/nonexistent/tokbench.toml"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        stderr(&missing)
            .starts_with("tokbench: cannot read the config file /nonexistent/tokbench.toml: "),
        "{}",
        text(&missing)
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a refused config connected to the server"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_demo_takes_a_config_and_its_defaults_are_recorded() {
    let dir = scratch("demo");
    let file = dir.join("demo.toml");
    std::fs::write(&file, "concurrency = [2]\nseed = 3\n").expect("write config");
    let out = tokbench(&[
        "demo",
        "--config",
        file.to_str().expect("utf-8 path"),
        "--print-config",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let t = toml_of(&out);
    assert_eq!(t["concurrency"], toml::Value::Array(vec![2.into()]));
    assert_eq!(t["seed"].as_integer(), Some(3));
    // The demo's short lengths are part of what it runs.
    assert_eq!(t["random-input-len"].as_integer(), Some(128));
    assert_eq!(t["prompts-per-stream"].as_integer(), Some(5));
    assert!(
        t.get("base-url").is_none(),
        "the demo picks its simulator's address"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dataset_named_in_a_file_is_found_beside_it_from_any_directory() {
    let dir = scratch("paths");
    std::fs::write(
        dir.join("chats.jsonl"),
        "{\"prompt\": \"Say hello.\"}\n{\"prompt\": \"Name three rivers.\"}\n",
    )
    .expect("write dataset");
    let file = dir.join("bench.toml");
    std::fs::write(
        &file,
        "base-url = \"http://127.0.0.1:9\"\ndataset = \"chats.jsonl\"\n",
    )
    .expect("write config");
    let out = Command::new(bin())
        .args(["sweep", "--print-config", "--config"])
        .arg(&file)
        .current_dir("/")
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "{}", text(&out));
    let t = toml_of(&out);
    let want = dir.join("chats.jsonl");
    assert_eq!(t["dataset"].as_str(), want.to_str(), "{}", text(&out));
    // Without the file, the same name is not found from /.
    let out = Command::new(bin())
        .args([
            "sweep",
            "--print-config",
            "--base-url",
            "http://127.0.0.1:9",
        ])
        .args(["--dataset", "chats.jsonl"])
        .current_dir("/")
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tune's own flags, `--serve-cmd` and `--grid`, may come from the file:
/// the file is found before they are required. Without them anywhere, the
/// tune is still refused for want of them.
#[test]
fn a_tune_takes_its_server_command_and_grid_from_the_file() {
    let dir = scratch("tune-file");
    std::fs::create_dir_all(&dir).expect("scratch");
    let file = dir.join("tune.toml");
    std::fs::write(
        &file,
        "serve-cmd = \"llama-server -m m.gguf --port {port} -np {np}\"\ngrid = [\"np=1,2\"]\n",
    )
    .expect("config");
    let out = tokbench(&[
        "tune",
        "--config",
        &file.display().to_string(),
        "--print-config",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = stdout(&out);
    for np in ["1", "2"] {
        assert!(
            printed.contains(&format!("np={np}: llama-server -m m.gguf --port ")),
            "{printed}"
        );
    }
    let bare = dir.join("bare.toml");
    std::fs::write(&bare, "concurrency = [1]\n").expect("config");
    let refused = tokbench(&[
        "tune",
        "--config",
        &bare.display().to_string(),
        "--print-config",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        stderr(&refused).contains("--serve-cmd"),
        "{}",
        text(&refused)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
