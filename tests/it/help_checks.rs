//! Every `tokbench` command in a `--help` example passes the checks the
//! command itself makes before it sends or starts anything
//! (`run::checks::check_command_line`), not only clap's parse.

use tokbench::cli::*;
use tokbench::run::checks::check_command_line;

/// The examples of each `--help`, as argv (`tokbench` first), cut at the
/// first shell operator (`| man -l -`, `> file`).
fn examples() -> Vec<(String, Vec<String>)> {
    let all = ALL_EXAMPLES;
    let mut out = Vec::new();
    for block in all {
        let mut here = 0;
        for line in block.lines().map(str::trim) {
            if !line.starts_with("tokbench ") && line != "tokbench" {
                continue;
            }
            let mut words = shell_words::split(line).expect("an example splits into words");
            if let Some(op) = words
                .iter()
                .position(|w| matches!(w.as_str(), "|" | ">" | ">>" | "&&" | ";"))
            {
                words.truncate(op);
            }
            out.push((line.to_string(), words));
            here += 1;
        }
        assert!(here > 0, "no example in {block}");
    }
    out
}

#[test]
fn every_help_example_passes_the_commands_own_checks() {
    let failed: Vec<String> = examples()
        .into_iter()
        .filter_map(|(line, argv)| {
            check_command_line(&argv)
                .err()
                .map(|e| format!("{line}\n  refused: {}", tokbench::run::one_line(&e)))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The check is the command's: what tune refuses, the check refuses.
#[test]
fn the_check_refuses_what_the_command_refuses() {
    let argv = |s: &str| shell_words::split(s).expect("words");
    for (line, why) in [
        (
            "tokbench tune --serve-cmd 'ollama serve' --grid np=1,2",
            "{port}",
        ),
        ("tokbench sweep --concurrency 1", "--base-url is required"),
        (
            "tokbench demo --base-url http://127.0.0.1:8000",
            "demo runs its own simulator",
        ),
        ("tokbench man nosuch", "no subcommand"),
        ("tokbench view a b c", "view shows one run"),
    ] {
        let e = check_command_line(&argv(line)).expect_err(line);
        let said = tokbench::run::one_line(&e);
        assert!(said.contains(why), "{line}: {said}");
    }
}

/// Every subcommand's `--help` ends with examples, and they are among the
/// ones checked here: a new subcommand's examples cannot be left out.
#[test]
fn every_subcommands_examples_are_checked() {
    use clap::CommandFactory;
    for sub in Cli::command().get_subcommands() {
        let after = sub.get_after_help().map(|h| h.to_string());
        assert!(
            after.as_deref().is_some_and(|h| ALL_EXAMPLES.contains(&h)),
            "tokbench {}: its --help examples are not in cli::ALL_EXAMPLES",
            sub.get_name()
        );
    }
}
