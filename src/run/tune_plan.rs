//! A tune's command line checked, before any server starts: the grid, the
//! server command and its environment, the sweep's own flags. `run_tune`
//! and the help examples' checks (`run::checks`) both go through
//! [`check`]; `--print-config` shows what each setting would start
//! ([`print_config`]) and starts nothing.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use color_eyre::eyre::{bail, Result};

use super::plan::SweepPlan;
use super::url::default_result_dir;
use super::EXIT_OK;
use crate::cli::TuneArgs;
use crate::config::Settings;
use crate::report::saved::SavedRun;
use crate::server;
use crate::tune::auto::{AutoGrid, AUTO_TOP};
use crate::tune::grid::{self, Setting};

/// The checked command line of a tune: nothing is started before this.
pub(super) struct TunePlan {
    pub(super) settings: Vec<Setting>,
    /// The command's words (one string with --serve-shell), unfilled.
    pub(super) words: Vec<String>,
    /// `NAME=template`, or `NAME` alone to pass tokbench's own value on.
    pub(super) env: Vec<(String, Option<String>)>,
    pub(super) port: u16,
    pub(super) dir: PathBuf,
    /// When the tune began: its budget and its time left count from here.
    pub(super) started: std::time::Instant,
    /// `--grid NAME=auto` or `NAME=LOW..HIGH`: the knob searched; its
    /// settings are added one at a time, as the search asks for them.
    pub(super) search: Option<AutoGrid>,
    /// Whether the user gave the capacity SLO (`config::Settings::gives_slo`).
    pub(super) slo_given: bool,
}

/// A name whose value is a secret: never shown or saved.
pub(super) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| upper.contains(w))
}

pub(crate) fn check(args: &TuneArgs) -> Result<TunePlan> {
    let mut search = None;
    for g in &args.grid {
        if let Some(found) = AutoGrid::parse(g)? {
            if args.grid.len() > 1 || !args.grid_link.is_empty() {
                bail!(
                    "--grid {g}: a searched knob goes alone (one --grid, no --grid-link); fix the other knobs' values in --serve-cmd"
                );
            }
            search = Some(found);
        }
    }
    let settings = match &search {
        Some(s) => vec![Setting {
            values: vec![(s.name.clone(), s.low.to_string())],
        }],
        None => grid::settings(&args.grid, &args.grid_link)?,
    };
    let names: Vec<String> = settings
        .first()
        .map(|s| s.values.iter().map(|(k, _)| k.clone()).collect())
        .unwrap_or_default();
    grid::check_template(
        "--serve-cmd",
        &args.serve_cmd,
        &names,
        args.serve_port.is_none(),
    )?;
    let mut env = Vec::new();
    for item in &args.serve_env {
        match item.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                grid::check_template(&format!("--serve-env {name}"), value, &names, false)?;
                env.push((name.trim().to_string(), Some(value.to_string())));
            }
            None if !item.trim().is_empty() => env.push((item.trim().to_string(), None)),
            _ => {
                bail!("--serve-env {item:?}: expected NAME=VALUE (or NAME to pass tokbench's own)")
            }
        }
    }
    if let Some(url) = &args.sweep.base_url {
        let port = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.port_or_known_default());
        if args.serve_port.is_none() || port != args.serve_port {
            bail!(
                "--base-url is set by tune (it owns the server's address): leave it out, or give --serve-port with the URL's port"
            );
        }
    }
    let words = if args.serve_shell {
        vec![args.serve_cmd.clone()]
    } else {
        server::split_words(&args.serve_cmd)?
    };
    if words.is_empty() {
        bail!("--serve-cmd is empty: give the command that starts the server");
    }
    let dir = match (&args.sweep.resume, &args.sweep.result_dir) {
        (Some(d), _) | (None, Some(d)) => d.clone(),
        (None, None) => default_result_dir(Path::new("results"), SystemTime::now()),
    };
    let port = match (args.serve_port, &args.sweep.resume) {
        (Some(p), _) => p,
        // A resumed tune keeps its address: the saved levels name it.
        (None, Some(d)) => saved_port(d).unwrap_or(server::free_loopback_port()?),
        (None, None) => server::free_loopback_port()?,
    };
    // The sweep's own flags (--budget among them) refused here, before
    // any server starts, against a stand-in address as --print-config does.
    let mut sweep = args.sweep.clone();
    sweep.base_url = Some(super::checks::STAND_IN.into());
    SweepPlan::from_args(&sweep)?;
    Ok(TunePlan {
        settings,
        words,
        env,
        port,
        dir,
        started: std::time::Instant::now(),
        search,
        // Told by the settings, which `run_tune` has and `check` does not.
        slo_given: false,
    })
}

/// The port of a saved run's target.
fn saved_port(dir: &Path) -> Option<u16> {
    let run = SavedRun::load(dir).ok()?;
    reqwest::Url::parse(run.run.target.as_deref()?).ok()?.port()
}

/// What one setting's server is started with: its command's words and
/// its environment, filled. The start (`run_setting`) and `--print-config`
/// both take it from here.
pub(super) struct Filled {
    pub(super) words: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    /// Names passed on from tokbench's environment that it does not have.
    pub(super) unset: Vec<String>,
}

pub(super) fn fill_setting(plan: &TunePlan, setting: &Setting, reset_cache: bool) -> Filled {
    let words: Vec<String> = plan
        .words
        .iter()
        .map(|w| grid::fill(w, setting, plan.port))
        .collect();
    let mut env = Vec::new();
    let mut unset = Vec::new();
    for (name, value) in &plan.env {
        match value {
            Some(v) => env.push((name.clone(), grid::fill(v, setting, plan.port))),
            None => match std::env::var(name) {
                Ok(v) => env.push((name.clone(), v)),
                Err(_) => unset.push(name.clone()),
            },
        }
    }
    // vLLM serves its cache reset only in its development mode.
    if reset_cache
        && server::EngineHint::of_words(&words) == server::EngineHint::Vllm
        && !env.iter().any(|(name, _)| name == "VLLM_SERVER_DEV_MODE")
    {
        env.push(("VLLM_SERVER_DEV_MODE".into(), "1".into()));
    }
    Filled { words, env, unset }
}

/// The tune's settings as a file and as shown: secret `--serve-env`
/// values by name only, `--gpu-metrics` without its credentials.
pub(super) fn mask_settings(plan: &TunePlan, args: &TuneArgs, settings: &mut Settings) {
    let env: Vec<toml::Value> = plan
        .env
        .iter()
        .map(|(name, value)| {
            toml::Value::String(match value {
                Some(v) if !is_secret_name(name) => format!("{name}={v}"),
                _ => name.clone(),
            })
        })
        .collect();
    settings.set(
        "serve-env",
        (!env.is_empty()).then_some(toml::Value::Array(env)),
    );
    // The flag's raw value may hold credentials; shown without them.
    settings.set(
        "gpu-metrics",
        args.sweep
            .gpu_metrics
            .as_deref()
            .map(|raw| toml::Value::String(crate::redact::url(raw))),
    );
}

/// `tune --print-config`: the settings, and the server command and
/// environment of each setting, on stdout. Starts nothing, sends nothing,
/// writes no folder.
pub(super) fn print_config(
    plan: &TunePlan,
    args: &TuneArgs,
    mut settings: Settings,
) -> Result<i32> {
    mask_settings(plan, args, &mut settings);
    let mut out = settings.to_toml(&[
        "tokbench tune: effective settings (the config file and the flags together).",
        "Run them with: tokbench tune --config FILE.toml",
        "Nothing was started: below, the server each setting would start.",
    ]);
    out.push_str(&servers_text(plan, args));
    crate::console::print_output(out.as_bytes())
        .map_err(|e| color_eyre::eyre::eyre!("cannot write to stdout: {e}"))?;
    Ok(EXIT_OK)
}

/// The `#` lines of [`print_config`] after the settings.
fn servers_text(plan: &TunePlan, args: &TuneArgs) -> String {
    let mut lines = Vec::new();
    let port = match args.serve_port {
        Some(p) => format!("port {p} (--serve-port)"),
        None => format!(
            "port {}: a free loopback port, picked again when the tune starts",
            plan.port
        ),
    };
    match &plan.search {
        Some(search) => {
            let top = if search.open {
                format!("{}={} (the search's own top)", search.name, AUTO_TOP)
            } else {
                format!("{}={} (the top given)", search.name, search.high)
            };
            lines.push(format!(
                "A search over {name}: it starts at {name}={low} and doubles while each setting serves more, up to {top}, then tries one value between; each setting's server is this command with its {name}, on {port}:",
                name = search.name,
                low = search.low,
            ));
        }
        None => {
            let n = plan.settings.len();
            lines.push(format!(
                "The server of each of the {n} setting{}, on {port}:",
                if n == 1 { "" } else { "s" }
            ));
        }
    }
    for setting in &plan.settings {
        let filled = fill_setting(plan, setting, args.reset_cache);
        let command = if args.serve_shell {
            format!("sh -c {}", shell_words::quote(&filled.words.join(" ")))
        } else {
            shell_words::join(&filled.words)
        };
        lines.push(format!("  {}: {command}", setting.label()));
        let mut env: Vec<String> = filled
            .env
            .iter()
            .map(|(name, value)| match is_secret_name(name) {
                true => format!("{name}=<hidden>"),
                false => format!("{name}={}", shell_words::quote(value)),
            })
            .collect();
        env.extend(
            filled
                .unset
                .iter()
                .map(|n| format!("{n} (not set here: not passed)")),
        );
        if !env.is_empty() {
            lines.push(format!("    environment: {}", env.join(" ")));
        }
    }
    lines.iter().map(|l| format!("# {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        assert!(is_secret_name("HF_TOKEN"));
        assert!(is_secret_name("openai_api_key"));
        assert!(!is_secret_name("OLLAMA_NUM_PARALLEL"));
    }
}
