//! `tokbench completions SHELL` and `tokbench man` (issue 14, item 4),
//! checked with the real tools: bash (and bash-completion's loader, as a user
//! installs the script), and man-db's `man -l`, which must render without a
//! warning. A missing tool fails the test naming its Debian package;
//! `.ci/run` installs them.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{self, bin, text, Tmux};

fn tokbench(args: &[&str]) -> Output {
    let out = Command::new(bin())
        .args(args)
        .output()
        .expect("tokbench runs");
    assert!(out.status.success(), "tokbench {args:?}: {}", text(&out));
    out
}

/// Fails naming the package when `tool` is not on PATH.
fn need(tool: &str, package: &str, why: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is not installed: {why} (apt-get install {package}, or run .ci/run which installs it)"
    );
}

/// What bash's completion function offers for `words`, the last being the
/// word under the cursor: the generated script sourced in a real bash,
/// COMP_WORDS/COMP_CWORD set as readline sets them, the function that
/// `complete -p tokbench` names called, COMPREPLY read back.
fn bash_complete(script: &Path, words: &[&str]) -> Vec<String> {
    let driver = r#"
        source "$1" || exit 3
        shift
        spec=$(complete -p tokbench) || exit 4
        fn=${spec##* -F }
        fn=${fn%% *}
        COMP_WORDS=("$@")
        COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        "$fn" tokbench "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", driver, "bash"])
        .arg(script)
        .args(words)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash completion of {words:?}: {}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_subcommands_flags_and_values() {
    need("bash", "bash", "the completion script runs in a real bash");
    let dir = support::scratch("completions", "bash");
    let script = dir.join("tokbench.bash");
    std::fs::write(&script, tokbench(&["completions", "bash"]).stdout).expect("write script");
    assert_eq!(bash_complete(&script, &["tokbench", "sw"]), ["sweep"]);
    assert_eq!(
        bash_complete(&script, &["tokbench", "sweep", "--conc"]),
        ["--concurrency"]
    );
    // A flag added for this issue is there too: the script is generated.
    assert_eq!(
        bash_complete(&script, &["tokbench", "demo", "--print-c"]),
        ["--print-config"]
    );
    let mut backends = bash_complete(&script, &["tokbench", "sweep", "--backend", "ollama-"]);
    backends.sort();
    assert_eq!(backends, ["ollama-chat", "ollama-generate"]);
    assert_eq!(
        bash_complete(&script, &["tokbench", "completions", "fi"]),
        ["fish"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// As a user installs it: the script in bash-completion's user folder,
/// found on demand by its loader in an interactive bash, and TAB pressed.
#[test]
fn tab_in_an_interactive_bash_with_bash_completion_gives_sweep() {
    need("bash", "bash", "the completion script runs in a real bash");
    let loader = Path::new("/usr/share/bash-completion/bash_completion");
    assert!(
        loader.exists(),
        "bash-completion is not installed ({} missing): this test loads the script as users do \
         (apt-get install bash-completion, or run .ci/run which installs it)",
        loader.display()
    );
    let dir = support::scratch("completions", "tab");
    let completions = dir.join("bash-completion/completions");
    std::fs::create_dir_all(&completions).expect("completions folder");
    std::fs::write(
        completions.join("tokbench"),
        tokbench(&["completions", "bash"]).stdout,
    )
    .expect("write script");
    let rc = dir.join("bashrc");
    std::fs::write(
        &rc,
        format!(
            "PS1='ready> '\nexport XDG_DATA_HOME='{}'\nsource {}\n",
            dir.display(),
            loader.display()
        ),
    )
    .expect("write bashrc");
    let tmux = Tmux::start(
        "tab",
        100,
        20,
        &format!("bash --noprofile --rcfile '{}' -i", rc.display()),
    );
    tmux.wait_for("the prompt", Duration::from_secs(20), |s| {
        s.contains("ready>")
    });
    tmux.keys("tokbench sw");
    let out = tmux.run(&["send-keys", "Tab"]);
    assert!(out.status.success(), "send-keys Tab: {}", text(&out));
    tmux.wait_for("tokbench sweep", Duration::from_secs(20), |s| {
        s.contains("ready> tokbench sweep")
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_shell_gets_a_script_naming_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = tokbench(&["completions", shell]);
        let script = String::from_utf8_lossy(&out.stdout);
        // fish and elvish name long flags without their dashes.
        for word in ["sweep", "demo", "concurrency", "print-config"] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
    }
    // The bash script is valid bash.
    need("bash", "bash", "the bash script is syntax-checked");
    let dir = support::scratch("completions", "syntax");
    let script = dir.join("tokbench.bash");
    std::fs::write(&script, tokbench(&["completions", "bash"]).stdout).expect("write script");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash -n");
    assert!(check.status.success(), "bash -n: {}", text(&check));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The zsh and fish scripts parse in a real zsh and fish (`-n`: read, not
/// run), and zsh's defines its completion function.
#[test]
fn zsh_and_fish_scripts_parse_in_their_shells() {
    need("zsh", "zsh", "the zsh script is syntax-checked by zsh -n");
    need(
        "fish",
        "fish",
        "the fish script is syntax-checked by fish -n",
    );
    let dir = support::scratch("completions", "zsh-fish");
    for (shell, file) in [("zsh", "_tokbench"), ("fish", "tokbench.fish")] {
        let script = dir.join(file);
        std::fs::write(&script, tokbench(&["completions", shell]).stdout).expect("write script");
        let check = Command::new(shell)
            .arg("-n")
            .arg(&script)
            .output()
            .expect("the shell runs");
        assert!(check.status.success(), "{shell} -n: {}", text(&check));
        assert!(
            check.stderr.is_empty(),
            "{shell} -n warned: {}",
            text(&check)
        );
    }
    let zsh = std::fs::read_to_string(dir.join("_tokbench")).unwrap_or_default();
    assert!(
        zsh.starts_with("#compdef tokbench"),
        "{}",
        &zsh[..zsh.len().min(80)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `man -l -` on the page: stderr must stay empty (man-db passes groff's
/// warnings through), and the rendered text must hold what it documents.
fn render(roff: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = Command::new("man")
        .args(["-l", "-"])
        .env("MANWIDTH", "80")
        .env("LC_ALL", "C")
        .env_remove("MANPAGER")
        .env("PAGER", "cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("man runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(roff)
        .expect("write the page");
    let out = child.wait_with_output().expect("man finishes");
    assert!(out.status.success(), "man -l: {}", text(&out));
    assert!(out.stderr.is_empty(), "man -l warned: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// groff's own check with every warning on: `groff -ww -z -man`.
fn groff_clean(roff: &[u8], page: &str) {
    use std::io::Write as _;
    let mut child = Command::new("groff")
        .args(["-ww", "-z", "-man"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("groff runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(roff)
        .expect("write the page");
    let out = child.wait_with_output().expect("groff finishes");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "groff -ww on {page}: {}",
        text(&out)
    );
}

#[test]
fn the_man_pages_render_without_warnings() {
    need("man", "man-db", "the page is rendered with man -l");
    need("groff", "groff-base", "the page is checked with groff -ww");
    let top = tokbench(&["man"]).stdout;
    assert!(top.starts_with(b".ie"), "roff on stdout");
    groff_clean(&top, "tokbench(1)");
    let page = render(&top);
    for want in [
        "tokbench",
        "SUBCOMMANDS",
        "tokbench-sweep(1)",
        "completions",
    ] {
        assert!(page.contains(want), "tokbench(1) has no {want}:\n{page}");
    }
    let sweep = tokbench(&["man", "sweep"]).stdout;
    groff_clean(&sweep, "tokbench-sweep(1)");
    let page = render(&sweep);
    for want in ["tokbench-sweep", "--concurrency", "--config", "--api-key"] {
        assert!(
            page.contains(want),
            "tokbench-sweep(1) has no {want}:\n{page}"
        );
    }
    for sub in ["sim", "demo", "report", "compare", "view"] {
        let roff = tokbench(&["man", sub]).stdout;
        groff_clean(&roff, sub);
        render(&roff);
    }
    let out = Command::new(bin())
        .args(["man", "swep"])
        .output()
        .expect("tokbench runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("tokbench: no subcommand \"swep\"; pages: sweep,"),
        "{}",
        text(&out)
    );
}
