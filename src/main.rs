//! Wiring: parse the command line, pick the mode, run it, exit with the
//! contract's code (docs/architecture.md section 5).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsString;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory, FromArgMatches};
use color_eyre::eyre::{Result, WrapErr};
use toml::Value;

use tokbench::cli::{Cli, Command};
use tokbench::config::Settings;
use tokbench::run::{self, SweepPlan, EXIT_FAILED, EXIT_OK};
use tokbench::sim::{self, SimConfig};

fn main() -> ExitCode {
    // Plain reports: no colours or backtrace sections in one-line errors.
    let _ = color_eyre::config::HookBuilder::default()
        .display_env_section(false)
        .install();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let matches = match parse_with_config(&argv) {
        Ok(matches) => matches,
        Err(e) => {
            // A bad config file stops here, before any load.
            tokbench::say!("tokbench: {}", run::one_line(&e));
            return ExitCode::from(EXIT_FAILED as u8);
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tokbench::say!("tokbench: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED as u8);
        }
    };
    let sub = matches.subcommand().map(|(_, m)| m);
    let result = runtime.block_on(dispatch(cli.command, sub));
    // Load tasks still blocked on a dead socket must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            tokbench::say!("tokbench: {}", run::one_line(&e));
            ExitCode::from(EXIT_FAILED as u8)
        }
    }
}

/// The command line, with a `--config` file's keys put in before the
/// user's own flags (src/config.rs). clap's own errors exit as clap does.
fn parse_with_config(argv: &[OsString]) -> Result<ArgMatches> {
    let cmd = Cli::command();
    // A tune's required flags may come from the file (`--config`, or the
    // folder's own config.toml with `--resume DIR`): the first reading,
    // which only finds the file, does not require them; the second does.
    let first = match cmd.clone().try_get_matches_from(argv) {
        Ok(first) => first,
        Err(strict) if strict.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
            tokbench::config::lenient(cmd.clone())
                .try_get_matches_from(argv)
                .unwrap_or_else(|_| strict.exit())
        }
        Err(e) => e.exit(),
    };
    let expanded = tokbench::config::expand_argv(&cmd, argv, &first)?;
    Ok(cmd.get_matches_from(expanded))
}

/// The error and its causes on one line: `cannot write x: permission denied`.
async fn dispatch(command: Command, sub: Option<&ArgMatches>) -> Result<i32> {
    match command {
        Command::Sweep(args) => {
            let mut settings = settings_of("sweep", sub);
            let plan = SweepPlan::from_args(&args)?;
            settings.set("base-url", Some(Value::String(plan.display_target.clone())));
            settings.set("gpu-metrics", gpu_metrics_setting(&plan));
            if args.print_config {
                return print_config("sweep", &settings, args.seed);
            }
            let mut prepared = run::prepare(plan, None).await?;
            // A reading speed typed at its default is still the user's SLO.
            prepared.run.slo_given |= settings.gives_slo();
            write_config("sweep", settings, &prepared)?;
            run_with_a_face(prepared).await
        }
        Command::Tune(args) => tokbench::ui::tune::run_tune(*args, settings_of("tune", sub)).await,
        Command::Sim(args) => {
            let emission_log = match &args.timing.emission_log {
                Some(path) => Some(sim::EmissionLog::create(path).wrap_err_with(|| {
                    format!("cannot write the emission log {}", path.display())
                })?),
                None => None,
            };
            sim::run_forever(
                SocketAddr::new(args.host, args.port),
                SimConfig {
                    emission_log,
                    api_key: args.api_key.clone(),
                    // As vLLM reads it: only "1" turns the dev routes on.
                    dev_mode: std::env::var("VLLM_SERVER_DEV_MODE").is_ok_and(|v| v.trim() == "1"),
                    engine: match args.engine {
                        tokbench::cli::SimEngine::Vllm => sim::SimEngine::Vllm,
                        tokbench::cli::SimEngine::Ollama => sim::SimEngine::Ollama,
                        tokbench::cli::SimEngine::Llamacpp => sim::SimEngine::Llamacpp,
                        tokbench::cli::SimEngine::Sglang => sim::SimEngine::Sglang,
                        tokbench::cli::SimEngine::Tgi => sim::SimEngine::Tgi,
                    },
                    ..args.timing.config()?
                },
            )
            .await?;
            Ok(0)
        }
        Command::Report(args) => tokbench::report::formats::run_report_command(&args),
        Command::Compare(args) => tokbench::compare::run_compare_command(&args),
        Command::View(args) => tokbench::ui::view::run_view(&args).await,
        Command::Merge(args) => tokbench::merge::files::run_merge_command(&args),
        Command::Predict(args) => tokbench::model::run_predict_command(&args),
        Command::Completions(args) => {
            let mut out = Vec::new();
            clap_complete::generate(
                args.shell,
                &mut run::checks::completion_command(),
                "tokbench",
                &mut out,
            );
            to_stdout(&out)
        }
        Command::Man(args) => to_stdout(&man_page(args.subcommand.as_deref())?),
        Command::Demo(mut args) => {
            run::checks::demo_args(&mut args, sub)?;
            let mut settings = settings_of("demo", sub);
            // The demo's own defaults are settings of its run like any other.
            let number = |v: Option<u32>| v.map(|v| Value::Integer(i64::from(v)));
            settings.set("random-input-len", number(args.random_input_len));
            settings.set("random-output-len", number(args.random_output_len));
            settings.set("prompts-per-stream", number(args.prompts_per_stream));
            // The simulator gets a new port each time: the demo sets it.
            settings.set("base-url", None);
            if args.print_config {
                // Checked like a run would be, against a stand-in address.
                args.base_url = Some(run::checks::STAND_IN.into());
                let plan = SweepPlan::from_args(&args)?;
                settings.set("gpu-metrics", gpu_metrics_setting(&plan));
                return print_config("demo", &settings, args.seed);
            }
            // Fewer batch slots than the top level's streams, so the sweep
            // ends in the knee a real server shows when its KV cache is full.
            let config = SimConfig {
                max_num_seqs: 64,
                ..SimConfig::default()
            };
            let sim = sim::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), config).await?;
            args.base_url = Some(format!("http://{}", sim.addr));
            let mut plan = SweepPlan::from_args(&args)?;
            settings.set("gpu-metrics", gpu_metrics_setting(&plan));
            // The live view shows a SIMULATED SERVER badge.
            plan.simulated = true;
            tokbench::say!(
                "tokbench demo: SIMULATED SERVER (vLLM-like, 64 batch slots) at http://{}",
                sim.addr
            );
            let mut prepared = run::prepare(plan, None).await?;
            prepared.run.slo_given |= settings.gives_slo();
            write_config("demo", settings, &prepared)?;
            let code = run_with_a_face(prepared).await;
            sim.shutdown().await;
            code
        }
    }
}

/// `--gpu-metrics` as saved and printed: the URL without its credentials
/// (what the flag's raw value would otherwise write).
fn gpu_metrics_setting(plan: &SweepPlan) -> Option<Value> {
    plan.gpu_metrics
        .as_ref()
        .map(|g| Value::String(g.shown.clone()))
}

/// The sweep settings of `sub` (the `sweep` or `demo` matches).
fn settings_of(name: &str, sub: Option<&ArgMatches>) -> Settings {
    let cmd = Cli::command();
    match (cmd.find_subcommand(name), sub) {
        (Some(sub_cmd), Some(m)) => Settings::from_matches(sub_cmd, m),
        _ => Settings::default(),
    }
}

/// `--print-config`: the settings a run would start from, on stdout.
fn print_config(name: &str, settings: &Settings, seed: Option<u64>) -> Result<i32> {
    let title =
        format!("tokbench {name}: effective settings (the config file and the flags together).");
    let usage = format!("Run them with: tokbench {name} --config FILE.toml");
    let mut header = vec![title.as_str(), usage.as_str()];
    if seed.is_none() {
        header.push("seed: none given; a run draws one and records it in its config.toml");
    }
    to_stdout(settings.to_toml(&header).as_bytes())
}

/// Each run's effective settings, as `config.toml` in its result folder:
/// `tokbench sweep --config results/X/config.toml` sends the same traffic
/// again (the model it resolved included). A seed the run drew is written
/// as a comment: a repeat draws its own, so its prompts are new to the
/// server's prefix cache as the first run's were; a seed the user gave
/// stays a setting.
fn write_config(name: &str, mut settings: Settings, prepared: &run::Prepared) -> Result<()> {
    let path = prepared.result_dir.join("config.toml");
    let seed = match &prepared.prior {
        // A resumed run's seed is derived from the first part's: repeating
        // it means repeating the first part, whose config.toml says so.
        Some(_) if path.exists() => return Ok(()),
        Some(prior) => prior.run.get("seed").and_then(serde_json::Value::as_u64),
        None => Some(prepared.plan.seed),
    };
    let mut drawn = None;
    match seed {
        Some(seed) if prepared.plan.seed_given => settings.set("seed", Some(typed_u64(seed))),
        Some(seed) => {
            settings.set("seed", None);
            drawn = Some(seed);
        }
        None => {}
    }
    // The demo's model is its simulator's: a repeat takes no --model.
    if name != "demo" {
        settings.set("model", Some(Value::String(prepared.model.clone())));
    }
    // A repeat writes a folder of its own (two runs never share one).
    settings.set("result-dir", None);
    let mut text = settings.to_toml(&[
        &format!(
            "tokbench {}: the effective settings of the run in this folder.",
            env!("CARGO_PKG_VERSION")
        ),
        &format!("Repeat it with: tokbench {name} --config <this folder>/config.toml (flags given as well override it)."),
        "Never here: the API key; result-dir, so a repeat gets a folder of its own.",
    ]);
    if let Some(seed) = drawn {
        text.push_str(&format!(
            "# seed = {}  (drawn; uncomment to repeat the same prompts, which a prefix cache will answer)\n",
            typed_u64(seed)
        ));
    }
    tokbench::report::atomic::write_atomic(&path, text.as_bytes())
        .wrap_err_with(|| format!("cannot write {}", path.display()))
}

/// A seed as TOML: an integer up to i64::MAX, text above (TOML integers are
/// 64-bit signed; the flag reads either back as the same u64).
fn typed_u64(v: u64) -> Value {
    match i64::try_from(v) {
        Ok(i) => Value::Integer(i),
        Err(_) => Value::String(v.to_string()),
    }
}

/// `tokbench man [SUBCOMMAND]`: roff for tokbench(1) or tokbench-SUB(1).
fn man_page(subcommand: Option<&str>) -> Result<Vec<u8>> {
    let page = run::checks::man_command(subcommand)?;
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .wrap_err("cannot render the manual page")?;
    Ok(out)
}

/// Write generated text to stdout; a closed pipe (`| head`) is not an error.
fn to_stdout(bytes: &[u8]) -> Result<i32> {
    tokbench::console::print_output(bytes).wrap_err("cannot write to stdout")?;
    Ok(EXIT_OK)
}

/// The live view on a terminal, plain output otherwise or with --no-tui.
async fn run_with_a_face(prepared: run::Prepared) -> Result<i32> {
    if prepared.plan.no_tui || !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        run::run_headless(prepared).await
    } else {
        tokbench::ui::run_tui(prepared).await
    }
}
