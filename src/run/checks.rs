//! The checks a command line passes before anything is sent or started,
//! in one place: the commands themselves call them, and
//! [`check_command_line`] runs them over any command line (the `--help`
//! examples are checked with it, `tests/it/help_checks.rs`).
//!
//! What applies without files: `sweep` its whole plan
//! (`SweepPlan::from_args`); `demo` the flags it refuses and its plan,
//! against a stand-in address for its simulator; `tune` its grid, server
//! command, environment and sweep flags (`tune_plan::check`); `sim` its
//! timing; `view` how many folders it shows; `man` the page's name.
//! `report`, `compare` and `merge` check what clap checks: the rest of
//! theirs reads the folders. Nor is a `--config` file read here.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use color_eyre::eyre::{bail, eyre, Result};

use super::plan::SweepPlan;
use crate::cli::{Cli, Command, SweepArgs, ViewArgs};

/// Parse and check `argv` (`tokbench` first) as the command would,
/// without sending anything, starting anything or reading any file.
pub fn check_command_line(argv: &[String]) -> Result<()> {
    let matches = Cli::command()
        .try_get_matches_from(argv)
        .map_err(|e| eyre!("{}", clap_first_line(&e)))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| eyre!("{}", clap_first_line(&e)))?;
    let sub = matches.subcommand().map(|(_, m)| m);
    match cli.command {
        Command::Sweep(args) => {
            SweepPlan::from_args(&args)?;
        }
        Command::Demo(mut args) => {
            demo_args(&mut args, sub)?;
            args.base_url = Some(STAND_IN.into());
            SweepPlan::from_args(&args)?;
        }
        Command::Tune(args) => {
            super::tune_plan::check(&args)?;
        }
        Command::Sim(args) => {
            args.timing.config()?;
        }
        Command::View(args) => view_args(&args)?,
        Command::Man(args) => {
            man_command(args.subcommand.as_deref())?;
        }
        Command::Report(_)
        | Command::Compare(_)
        | Command::Merge(_)
        | Command::Predict(_)
        | Command::Completions(_) => {}
    }
    Ok(())
}

/// An address a plan is checked against where the real one comes later
/// (the demo's simulator, a tune's server): nothing is sent to it.
pub const STAND_IN: &str = "http://127.0.0.1:9";

/// The target flags `demo` does not take: it runs its own simulator.
const NOT_FOR_DEMO: [&str; 4] = ["base_url", "model", "api_key", "gpu_metrics"];

/// `tokbench demo`'s flags made ready for its plan: a target flag given
/// (on the command line or in a config file) is refused in one line; an
/// API key from the environment is dropped, the simulator asks for none;
/// and the demo's short defaults fill what the user left out.
pub fn demo_args(args: &mut SweepArgs, sub: Option<&ArgMatches>) -> Result<()> {
    let source = |id: &str| sub.and_then(|m| m.value_source(id));
    for id in NOT_FOR_DEMO {
        if source(id) == Some(ValueSource::CommandLine) {
            bail!(
                "--{}: demo runs its own simulator; use sweep for a server",
                id.replace('_', "-")
            );
        }
    }
    args.api_key = None;
    let defaulted = |id: &str| source(id).is_none_or(|s| s == ValueSource::DefaultValue);
    // A --profile or --dataset sets its own lengths.
    let shaped = args.profile.is_some() || args.dataset.is_some();
    if defaulted("random_input_len") && !shaped {
        args.random_input_len = Some(128);
    }
    if defaulted("random_output_len") && !shaped {
        args.random_output_len = Some(128);
    }
    if defaulted("prompts_per_stream") && args.budget.is_none() {
        // 5 requests per stream keeps the whole demo near two minutes;
        // with --budget they are the budget's to choose.
        args.prompts_per_stream = Some(5);
    }
    Ok(())
}

/// `tokbench view`'s folders: one run, or two overlaid; several only as
/// the shards of one run followed.
pub(crate) fn view_args(args: &ViewArgs) -> Result<()> {
    if !args.follow && args.runs.len() > 2 {
        bail!("view shows one run, or two overlaid; --follow follows several shard folders of one run, merged");
    }
    Ok(())
}

/// The clap command whose manual page `tokbench man [SUBCOMMAND]` prints.
pub fn man_command(subcommand: Option<&str>) -> Result<clap::Command> {
    let mut cmd = Cli::command();
    cmd.build();
    let Some(name) = subcommand else {
        return Ok(cmd);
    };
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let sub = cmd
        .find_subcommand(name)
        .cloned()
        .ok_or_else(|| eyre!("no subcommand {name:?}; pages: {}", names.join(", ")))?;
    // The page's name and title: tokbench-sweep(1).
    Ok(sub.name(format!("tokbench-{name}")))
}

/// The command the shell completion scripts are made from: zsh and fish
/// complete hidden flags too, so a subcommand's hidden flags (demo's
/// target) are left out of it.
pub fn completion_command() -> clap::Command {
    Cli::command().mut_subcommand("demo", |demo| {
        let mut shown = clap::Command::new(demo.get_name().to_string());
        if let Some(about) = demo.get_about() {
            shown = shown.about(about.clone());
        }
        for arg in demo.get_arguments().filter(|a| !a.is_hide_set()) {
            shown = shown.arg(arg.clone());
        }
        shown
    })
}

/// clap's complaint on one line, without its `error: ` prefix.
fn clap_first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or("").trim();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}
