//! Wiring: parse the command line, pick the mode, run it, exit with the
//! contract's code (DESIGN.md section 5).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use color_eyre::eyre::{Result, WrapErr};

use tokbench::cli::{Cli, Command, SimTimingArgs, SweepArgs};
use tokbench::run::{self, SweepPlan, EXIT_FAILED};
use tokbench::sim::{self, SimConfig};

fn main() -> ExitCode {
    // Plain reports: no colours or backtrace sections in one-line errors.
    let _ = color_eyre::config::HookBuilder::default()
        .display_env_section(false)
        .install();
    let matches = Cli::command().get_matches();
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
            eprintln!("tokbench: cannot start the async runtime: {e}");
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
            eprintln!("tokbench: {}", run::one_line(&e));
            ExitCode::from(EXIT_FAILED as u8)
        }
    }
}

async fn dispatch(command: Command, sub: Option<&ArgMatches>) -> Result<i32> {
    match command {
        Command::Sweep(args) => {
            let plan = SweepPlan::from_args(&args)?;
            let prepared = run::prepare(plan, None).await?;
            run_with_a_face(prepared).await
        }
        Command::Sim(args) => {
            let kv_policy: sim::KvPolicy = args
                .timing
                .kv_policy
                .parse()
                .map_err(|_| color_eyre::eyre::eyre!("--kv-policy must be reserve or grow"))?;
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
                    kv_policy,
                    engine: match args.engine {
                        tokbench::cli::SimEngine::Vllm => sim::SimEngine::Vllm,
                        tokbench::cli::SimEngine::Ollama => sim::SimEngine::Ollama,
                        tokbench::cli::SimEngine::Llamacpp => sim::SimEngine::Llamacpp,
                    },
                    ..sim_config(&args.timing)
                },
            )
            .await?;
            Ok(0)
        }
        Command::Report(args) => tokbench::report::formats::run_report_command(&args),
        Command::Compare(args) => tokbench::compare::run_compare_command(&args),
        Command::View(args) => tokbench::ui::view::run_view(&args).await,
        Command::Demo(mut args) => {
            apply_demo_defaults(&mut args, sub);
            // Fewer batch slots than the top level's streams, so the sweep
            // ends in the knee a real server shows when its KV cache is full.
            let config = SimConfig {
                max_num_seqs: 64,
                ..SimConfig::default()
            };
            let sim = sim::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), config).await?;
            args.base_url = Some(format!("http://{}", sim.addr));
            let mut plan = SweepPlan::from_args(&args)?;
            // The live view shows a SIMULATED SERVER badge.
            plan.simulated = true;
            eprintln!(
                "tokbench demo: SIMULATED SERVER (vLLM-like, 64 batch slots) at http://{}",
                sim.addr
            );
            let prepared = run::prepare(plan, None).await?;
            let code = run_with_a_face(prepared).await;
            sim.shutdown().await;
            code
        }
    }
}

/// The live view on a terminal, plain output otherwise or with --no-tui.
async fn run_with_a_face(prepared: run::Prepared) -> Result<i32> {
    if prepared.plan.no_tui || !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        run::run_headless(prepared).await
    } else {
        tokbench::ui::run_tui(prepared).await
    }
}

fn sim_config(t: &SimTimingArgs) -> SimConfig {
    SimConfig {
        step_ms: t.step_ms,
        step_ms_per_seq: t.step_ms_per_seq,
        prefill_ms_per_1k: t.prefill_ms_per_1k,
        max_num_seqs: t.max_num_seqs,
        kv_tokens: t.kv_tokens,
        noise: t.noise,
        noise_period_ms: t.noise_period_ms,
        noise_seed: t.noise_seed,
        parallel: t.parallel,
        load_ms: t.load_ms,
        keep_alive_s: t.keep_alive_s,
        max_queue: t.max_queue,
        vram_share: t.vram_share,
        eos_mean_tokens: t.eos_mean_tokens,
        eos_seed: t.eos_seed,
        prefix_block_tokens: t.prefix_block_tokens,
        fail_rate: t.fail_rate,
        stall_rate: t.stall_rate,
        disconnect_rate: t.disconnect_rate,
        malformed_rate: t.malformed_rate,
        fault_seed: t.fault_seed,
        reasoning_tokens: t.reasoning_tokens,
        ..SimConfig::default()
    }
}

/// The demo is short: smaller lengths and fewer prompts, unless the user
/// said otherwise on the command line.
fn apply_demo_defaults(args: &mut SweepArgs, sub: Option<&ArgMatches>) {
    let defaulted = |id: &str| {
        sub.and_then(|m| m.value_source(id))
            .is_none_or(|s| s == ValueSource::DefaultValue)
    };
    // A --profile or --dataset sets its own lengths.
    let shaped = args.profile.is_some() || args.dataset.is_some();
    if defaulted("random_input_len") && !shaped {
        args.random_input_len = Some(128);
    }
    if defaulted("random_output_len") && !shaped {
        args.random_output_len = Some(128);
    }
    if defaulted("prompts_per_stream") {
        // 5 requests per stream keeps the whole demo near two minutes.
        args.prompts_per_stream = 5;
    }
}
