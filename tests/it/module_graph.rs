//! The one-way flow of docs/architecture.md, checked: no import cycle among
//! the crate's top-level modules, and the simulator imports nothing of the
//! client. Read from the source text (`crate::NAME` paths), test code left
//! out (files `*_tests.rs`, and everything after a `#[cfg(test)]` line).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level module -> the top-level modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a name");
        if matches!(top.as_str(), "main" | "lib") || rel.to_string_lossy().ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let edges = graph.entry(top.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != top {
                edges.insert(name);
            }
        }
    }
    graph
}

/// A cycle through `start`, as the path that closes it.
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    at: &str,
    path: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for next in graph.get(at).into_iter().flatten() {
        if next == start {
            let mut found = path.clone();
            found.push(next.clone());
            return Some(found);
        }
        if seen.insert(next.clone()) {
            path.push(next.clone());
            if let Some(found) = cycle_from(graph, start, next, path, seen) {
                return Some(found);
            }
            path.pop();
        }
    }
    None
}

#[test]
fn top_level_modules_import_one_way() {
    let graph = graph();
    assert!(graph.len() > 10, "read the modules: {graph:?}");
    let mut cycles = Vec::new();
    for start in graph.keys() {
        let mut path = vec![start.clone()];
        if let Some(cycle) = cycle_from(&graph, start, start, &mut path, &mut BTreeSet::new()) {
            cycles.push(cycle.join(" -> "));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_simulator_stands_alone() {
    let graph = graph();
    let sim = graph.get("sim").expect("src/sim");
    // `time` is a leaf of calendar arithmetic that both sides share.
    let client: Vec<&String> = sim.iter().filter(|m| m.as_str() != "time").collect();
    assert!(client.is_empty(), "sim imports {client:?}");
}

/// Issue 12's rule for the writer of result files: it takes what it writes
/// (driver events, probe samples, the face's client readings) and reaches
/// for neither the probe nor the wiring above it. The pure layers import
/// nothing that does I/O.
#[test]
fn the_recorder_and_the_math_reach_down_only() {
    let graph = graph();
    let imports = |m: &str| graph.get(m).cloned().unwrap_or_default();
    let report = imports("report");
    assert!(
        report.contains("stats"),
        "read report's imports: {report:?}"
    );
    for above in ["probe", "run", "ui"] {
        assert!(!report.contains(above), "report imports {above}");
    }
    for pure in ["stats", "analysis"] {
        let io: Vec<String> = imports(pure)
            .into_iter()
            .filter(|m| {
                matches!(
                    m.as_str(),
                    "probe" | "load" | "report" | "run" | "ui" | "export"
                )
            })
            .collect();
        assert!(io.is_empty(), "{pure} imports {io:?}");
    }
}

/// The fitted model (`src/model/`, docs/predict.md) reads saved runs and
/// drives the simulator's pure engine in virtual time; only the wiring
/// above it (`run`, `ui`) imports it, and it reaches for neither the
/// probe, the load, the server nor the wiring.
#[test]
fn only_the_wiring_imports_the_model() {
    let graph = graph();
    let model = graph.get("model").expect("src/model");
    assert!(model.contains("sim"), "read model's imports: {model:?}");
    for above in ["run", "ui", "probe", "load", "server"] {
        assert!(!model.contains(above), "model imports {above}");
    }
    let importers: Vec<&String> = graph
        .iter()
        .filter(|(m, deps)| deps.contains("model") && !matches!(m.as_str(), "run" | "ui"))
        .map(|(m, _)| m)
        .collect();
    assert!(importers.is_empty(), "{importers:?} import model");
}
