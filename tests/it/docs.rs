//! The docs cannot drift from the code: every `tokbench ...` command in a
//! fenced block of README.md and docs/*.md, and every example at the end
//! of a subcommand's `--help`, is parsed by the real command line (clap's
//! `try_parse_from`); a renamed or removed flag fails here, naming the
//! file and line. Blocks fenced as `sh,run` are run against the built-in
//! simulator, and a `text,output` block right after one is checked
//! against what the run printed.
//!
//! Our own small harness, not `trycmd`: what a run prints holds timings,
//! which differ every run, and column widths that follow them. Here a
//! shown line matches a printed one with every number a wildcard and any
//! run of blanks the same as one; `trycmd` would need `[..]` in every
//! such place of the page, and the page is written for people.

use std::path::PathBuf;

use clap::Parser;
use tokbench::cli::Cli;

use crate::support::{bin, scratch};

/// One command found in a page: where it is, and its words.
#[derive(Debug)]
struct Found {
    file: String,
    line: usize,
    text: String,
    words: Vec<String>,
}

/// A fenced block: its info string, the line after its opening fence, and
/// its lines.
pub(crate) struct Fence {
    pub(crate) info: String,
    pub(crate) first_line: usize,
    pub(crate) lines: Vec<String>,
}

pub(crate) fn fences(text: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut open: Option<Fence> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(f) => out.push(f),
                None => {
                    open = Some(Fence {
                        info: rest.trim().to_string(),
                        first_line: i + 2,
                        lines: Vec::new(),
                    })
                }
            }
            continue;
        }
        if let Some(f) = &mut open {
            f.lines.push(line.to_string());
        }
    }
    out
}

/// Blocks that hold commands: shell ones and untagged ones. `text` and
/// other languages are output, config or code.
fn is_shell(info: &str) -> bool {
    let lang = info.split([',', ' ']).next().unwrap_or("");
    matches!(lang, "" | "sh" | "bash" | "console" | "shell" | "zsh")
}

/// A line's command: the prompt taken off, continuations joined, and a
/// trailing comment cut.
pub(crate) fn logical_lines(fence: &Fence) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (k, raw) in fence.lines.iter().enumerate() {
        let n = fence.first_line + k;
        let mut line = raw.trim().to_string();
        if pending.is_none() {
            line = line
                .strip_prefix("$ ")
                .or_else(|| line.strip_prefix("# $ "))
                .unwrap_or(&line)
                .to_string();
        }
        let (start, mut text) = pending.take().unwrap_or((n, String::new()));
        if let Some(body) = line.strip_suffix('\\') {
            text.push_str(body);
            text.push(' ');
            pending = Some((start, text));
            continue;
        }
        text.push_str(&line);
        out.push((start, text));
    }
    out.extend(pending);
    out
}

/// `# comment` cut where the `#` opens a word outside quotes.
fn without_comment(line: &str) -> String {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

/// The words of the tokbench command a line opens with, up to the first
/// shell operator; None where the line is not one (or is a sketch with
/// `...` in it).
fn command_words(line: &str) -> Option<Vec<String>> {
    let line = without_comment(line);
    let mut words = shell_words::split(&line).ok()?;
    let head = words.first()?.clone();
    let rest_from = match head.as_str() {
        "tokbench" | "./tokbench" | "~/tokbench" | "target/release/tokbench" => 1,
        "cargo" if words.get(1).map(String::as_str) == Some("run") => {
            words.iter().position(|w| w == "--")? + 1
        }
        _ => return None,
    };
    let mut rest: Vec<String> = words.drain(rest_from..).collect();
    if let Some(op) = rest.iter().position(|w| {
        matches!(
            w.as_str(),
            "|" | "||" | "&&" | ";" | "&" | ">" | ">>" | "<" | "2>&1"
        ) || w.starts_with('>')
            || w.starts_with("2>")
    }) {
        rest.truncate(op);
    }
    if rest.iter().any(|w| w.contains("...") || w.contains('…')) {
        return None;
    }
    let mut argv = vec!["tokbench".to_string()];
    argv.extend(rest);
    Some(argv)
}

fn commands_in(file: &str, text: &str) -> Vec<Found> {
    let mut out = Vec::new();
    for fence in fences(text).iter().filter(|f| is_shell(&f.info)) {
        for (line, logical) in logical_lines(fence) {
            if let Some(words) = command_words(&logical) {
                out.push(Found {
                    file: file.to_string(),
                    line,
                    text: logical.trim().to_string(),
                    words,
                });
            }
        }
    }
    out
}

/// `FILE:LINE: COMMAND: clap's first line` for each that does not parse.
fn stale(found: &[Found]) -> Vec<String> {
    found
        .iter()
        .filter_map(|f| match Cli::try_parse_from(&f.words) {
            Ok(_) => None,
            Err(e)
                if matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp
                        | clap::error::ErrorKind::DisplayVersion
                        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) =>
            {
                None
            }
            Err(e) => Some(format!(
                "{}:{}: {}: {}",
                f.file,
                f.line,
                f.text,
                e.to_string().lines().next().unwrap_or("")
            )),
        })
        .collect()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page under docs/, by their names in the repo.
fn pages() -> Vec<(String, String)> {
    let mut paths = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(repo()).unwrap_or(&p).display().to_string();
            let text = std::fs::read_to_string(&p).expect("a page");
            (name, text)
        })
        .collect()
}

#[test]
fn every_documented_command_parses() {
    let mut found = Vec::new();
    for (name, text) in pages() {
        found.extend(commands_in(&name, &text));
    }
    assert!(
        found.len() >= 30,
        "the pages hold far more commands than {}: is the reader blind?",
        found.len()
    );
    let bad = stale(&found);
    assert!(
        bad.is_empty(),
        "{} documented commands no longer parse:\n{}",
        bad.len(),
        bad.join("\n")
    );
    eprintln!("{} documented commands parse", found.len());
}

#[test]
fn a_stale_flag_in_a_page_is_named_by_file_and_line() {
    let page = "# A page\n\nSome words.\n\n```sh\ntokbench sweep --base-url http://127.0.0.1:8000 \\\n    --concurrency-list 1,4   # renamed long ago\ntokbench report results/x --format md\n$ tokbench compare a b | less\n```\n\n```text\ntokbench sweep --not-a-command-here\n```\n";
    let found = commands_in("docs/example.md", page);
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(found[2].words, ["tokbench", "compare", "a", "b"]);
    let bad = stale(&found);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("docs/example.md:6: tokbench sweep --base-url")
            && bad[0].contains("--concurrency-list"),
        "{}",
        bad[0]
    );
}

#[test]
fn every_help_example_parses() {
    use tokbench::cli::*;
    let all = ALL_EXAMPLES;
    let mut found = Vec::new();
    for text in all {
        let block = format!("```sh\n{text}\n```\n");
        let here = commands_in("--help", &block);
        assert!(!here.is_empty(), "no example in {text}");
        found.extend(here);
    }
    let bad = stale(&found);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // And they are what --help prints.
    let out = std::process::Command::new(bin())
        .args(["sweep", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.ends_with(&format!("{EXAMPLES_SWEEP}\n")), "{help}");
    for heading in [
        "Target:",
        "Workload:",
        "Levels:",
        "Open loop and replay:",
        "SLO and cost:",
        "Output:",
        "Live view:",
        "Shards:",
        "Network and TLS:",
    ] {
        assert!(help.contains(&format!("\n{heading}\n")), "{heading}");
    }
    // The man page has the same sections, and the examples.
    let out = std::process::Command::new(bin())
        .args(["man", "sweep"])
        .output()
        .expect("man");
    let man = String::from_utf8_lossy(&out.stdout);
    for section in [
        ".SH TARGET",
        ".SH WORKLOAD",
        ".SH LEVELS",
        ".SH \"OPEN LOOP AND REPLAY\"",
        ".SH \"SLO AND COST\"",
        ".SH OUTPUT",
        ".SH \"LIVE VIEW\"",
        ".SH SHARDS",
        ".SH \"NETWORK AND TLS\"",
    ] {
        assert!(man.contains(section), "{section} missing from the man page");
    }
    assert!(
        man.contains("find\\-capacity \\-\\-slo\\-ttft\\-p99\\-ms 500")
            || man.contains("find-capacity --slo-ttft-p99-ms 500"),
        "the examples: {man}"
    );
}

/// A shown line matches a printed one: numbers are wildcards, blanks are
/// blanks however many.
fn shape(line: &str) -> String {
    let mut out = String::new();
    let mut in_number = false;
    let mut in_blank = false;
    for c in line.trim().chars() {
        if c.is_ascii_digit() || (in_number && matches!(c, '.' | ',')) {
            if !in_number {
                out.push('#');
            }
            in_number = true;
            in_blank = false;
            continue;
        }
        in_number = false;
        if c.is_whitespace() {
            if !in_blank {
                out.push(' ');
            }
            in_blank = true;
            continue;
        }
        in_blank = false;
        out.push(c);
    }
    out
}

/// The shown lines in the printed ones, in order; the first missing one.
fn first_unmatched<'a>(shown: &'a [String], printed: &str) -> Option<&'a str> {
    let printed: Vec<String> = printed.lines().map(shape).collect();
    let mut at = 0;
    for line in shown.iter().filter(|l| !l.trim().is_empty()) {
        let want = shape(line);
        match printed[at..].iter().position(|p| *p == want) {
            Some(k) => at += k + 1,
            None => return Some(line),
        }
    }
    None
}

#[test]
fn output_is_matched_with_numbers_as_wildcards() {
    let shown = vec![
        " streams  tok/s/stream  total tok/s".to_string(),
        "       1          61.2         61.2".to_string(),
    ];
    let printed =
        "noise\n streams  tok/s/stream  total tok/s\n       1         101.0        101.0\n";
    assert_eq!(first_unmatched(&shown, printed), None);
    let out_of_order = vec![shown[1].clone(), shown[0].clone()];
    assert!(first_unmatched(&out_of_order, printed).is_some());
    assert!(first_unmatched(&["capacity: 4 streams".to_string()], printed).is_some());
}

/// A command a `sh,run` block starts with a trailing `&`: a server the
/// next lines talk to. Stopped when the block is done, or the test fails.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something accepts connections on the port, or the
/// background command has exited (then its output is the failure).
fn wait_for_port(port: u16, child: &mut Background, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("{what} exited ({status}) before it listened on port {port}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: nothing listens on port {port} after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A loopback port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The value of `--port N` in a command's words.
fn port_of(words: &[String]) -> Option<u16> {
    words
        .iter()
        .position(|w| w == "--port")
        .and_then(|i| words.get(i + 1))
        .and_then(|p| p.parse().ok())
        .or_else(|| {
            words
                .iter()
                .find_map(|w| w.strip_prefix("--port=").and_then(|p| p.parse().ok()))
        })
}

/// The runnable blocks' commands see the binary under test as `tokbench`
/// on their PATH, as a user who ran `cargo install --path .` does.
pub(crate) fn path_with_bin() -> std::ffi::OsString {
    let dir = std::path::Path::new(bin())
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let mut paths = vec![dir];
    if let Some(old) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).unwrap_or_default()
}

/// Every `sh,run` block runs (the binary under test for `tokbench`, in a
/// scratch folder, with the binary's folder first on PATH), and exits 0; the
/// `text,output` block after it is in what its commands printed. A line
/// ending in ` &` starts in the background (a `tokbench sim --port N`): the
/// next line runs once port N accepts connections, and the server is
/// stopped when the block is done. N is replaced in the block's lines by a
/// free port, so two runs of this test at once do not meet.
#[test]
fn runnable_examples_run_and_print_what_the_page_shows() {
    let mut ran = 0;
    let path = path_with_bin();
    for (name, text) in pages() {
        let blocks = fences(&text);
        for (k, fence) in blocks.iter().enumerate() {
            if fence.info.replace(' ', "") != "sh,run" {
                continue;
            }
            let shown = blocks
                .get(k + 1)
                .filter(|next| next.info.replace(' ', "") == "text,output");
            let dir = scratch("docs", &format!("run{ran}"));
            let mut servers = Vec::new();
            let mut ports: Vec<(String, String)> = Vec::new();
            let mut printed = String::new();
            for (line, logical) in logical_lines(fence) {
                let (logical, background) = match logical.trim_end().strip_suffix('&') {
                    Some(head) if !head.ends_with('&') => (head.trim_end().to_string(), true),
                    _ => (logical.clone(), false),
                };
                let mut words = command_words(&logical)
                    .unwrap_or_else(|| panic!("{name}:{line}: not a tokbench command: {logical}"));
                if background {
                    // The page's port, taken by another run of this test
                    // perhaps: a free one in its place, in every line after.
                    let shown = port_of(&words).unwrap_or_else(|| {
                        panic!("{name}:{line}: a background command needs --port N: {logical}")
                    });
                    ports.push((shown.to_string(), free_port().to_string()));
                }
                for word in &mut words {
                    for (shown, free) in &ports {
                        *word = word.replace(shown.as_str(), free);
                    }
                }
                let mut command = std::process::Command::new(bin());
                command
                    .args(&words[1..])
                    .current_dir(&dir)
                    .env("PATH", &path)
                    .stdin(std::process::Stdio::null());
                if background {
                    let port = port_of(&words).unwrap_or_else(|| {
                        panic!("{name}:{line}: a background command needs --port N: {logical}")
                    });
                    let child = command
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .expect("starts");
                    let mut child = Background(child);
                    wait_for_port(port, &mut child, &format!("{name}:{line}: {logical}"));
                    servers.push(child);
                    continue;
                }
                let out = command.output().expect("runs");
                let here = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    out.status.success(),
                    "{name}:{line}: {logical} failed:\n{here}"
                );
                printed.push_str(&here);
            }
            drop(servers);
            if let Some(shown) = shown {
                if let Some(missing) = first_unmatched(&shown.lines, &printed) {
                    panic!(
                        "{name}:{}: shown output not printed by the block at line {}: {missing:?}\nprinted:\n{printed}",
                        shown.first_line, fence.first_line
                    );
                }
            }
            ran += 1;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    assert!(ran >= 4, "only {ran} runnable examples in the pages");
}

/// Pages for users: README.md and docs/ but the contributors' page.
fn user_pages() -> Vec<(String, String)> {
    pages()
        .into_iter()
        .filter(|(name, _)| name != "docs/architecture.md")
        .collect()
}

/// What is wrong with a page's shown output, one line each: a `text` block
/// that is neither a `text,output` checked against the `sh,run` block right
/// before it, nor a `text,excerpt` whose lead-in says `Excerpt of` and
/// names its command in backticks (a tokbench one must parse), or says
/// `Excerpt of the command above` right after a shell block holding a
/// tokbench command; and a block with no language at all.
fn unchecked_outputs(file: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let blocks = fences(text);
    let mut bad = Vec::new();
    for (k, fence) in blocks.iter().enumerate() {
        let info = fence.info.replace(' ', "");
        let lang = info.split(',').next().unwrap_or("");
        let at = fence.first_line - 1;
        if lang.is_empty() {
            bad.push(format!(
                "{file}:{at}: a block with no language: say sh or text"
            ));
            continue;
        }
        if lang != "text" {
            continue;
        }
        match info.as_str() {
            "text,output" => {
                let after_run = k > 0 && blocks[k - 1].info.replace(' ', "") == "sh,run";
                if !after_run {
                    bad.push(format!(
                        "{file}:{at}: a text,output block not right after a sh,run block"
                    ));
                }
            }
            "text,excerpt" => {
                // The prose between the block before (or the page's top)
                // and this one.
                let from = if k > 0 {
                    blocks[k - 1].first_line + blocks[k - 1].lines.len()
                } else {
                    0
                };
                let end = at.saturating_sub(1);
                let lead = lines[from.min(end)..end].join(" ");
                // `Excerpt of the command above`: the shell block right
                // before holds it.
                let above = (k > 0 && lead.contains("Excerpt of the command above"))
                    .then(|| &blocks[k - 1])
                    .filter(|f| is_shell(&f.info))
                    .and_then(|f| {
                        logical_lines(f)
                            .into_iter()
                            .map(|(_, l)| l)
                            .find(|l| command_words(l).is_some())
                    });
                match above.or_else(|| excerpt_command(&lead)) {
                    None => bad.push(format!(
                        "{file}:{at}: a text,excerpt block whose lead-in names no command (`Excerpt of: `COMMAND``)"
                    )),
                    Some(cmd) => {
                        if let Some(words) = command_words(&cmd) {
                            let found = Found {
                                file: file.to_string(),
                                line: at,
                                text: cmd.clone(),
                                words,
                            };
                            bad.extend(stale(&[found]));
                        } else if cmd.trim_start().starts_with("tokbench") {
                            bad.push(format!("{file}:{at}: excerpt of {cmd}: not a whole command"));
                        }
                    }
                }
            }
            _ => bad.push(format!(
                "{file}:{at}: a ```{} block: shown output is text,output (checked) or text,excerpt (with its command)",
                fence.info
            )),
        }
    }
    bad
}

/// The first backticked command after `Excerpt of` in a lead-in.
fn excerpt_command(lead: &str) -> Option<String> {
    let after = &lead[lead.find("Excerpt of")?..];
    let open = after.find('`')?;
    let rest = &after[open + 1..];
    let close = rest.find('`')?;
    let cmd = rest[..close].trim();
    (!cmd.is_empty()).then(|| cmd.to_string())
}

#[test]
fn every_shown_output_is_checked_or_an_excerpt_of_a_named_command() {
    let mut bad = Vec::new();
    let mut excerpts = 0;
    for (name, text) in user_pages() {
        bad.extend(unchecked_outputs(&name, &text));
        excerpts += fences(&text)
            .iter()
            .filter(|f| f.info.replace(' ', "") == "text,excerpt")
            .count();
    }
    assert!(
        bad.is_empty(),
        "{} shown outputs can drift from what tokbench prints:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(
        excerpts >= 10,
        "only {excerpts} excerpts: is the reader blind?"
    );
}

#[test]
fn an_unmarked_output_or_an_excerpt_without_its_command_is_named() {
    let page = "# A page\n\n```sh,run\ntokbench demo --no-tui\n```\n\n```text,output\ncapacity: 4 streams\n```\n\nExcerpt of: `tokbench demo --no-tui`\n\n```text,excerpt\nknee: none\n```\n\nWhat it says:\n\n```text\nknee: none\n```\n\nExcerpt of a run\n\n```text,excerpt\nknee: none\n```\n\nExcerpt of: `tokbench demo --no-such-flag`\n\n```text,excerpt\nknee: none\n```\n\n```text,output\nknee: none\n```\n";
    let bad = unchecked_outputs("docs/example.md", page);
    assert_eq!(bad.len(), 4, "{bad:#?}");
    assert!(
        bad[0].starts_with("docs/example.md:19: a ```text block"),
        "{}",
        bad[0]
    );
    assert!(
        bad[1]
            .starts_with("docs/example.md:25: a text,excerpt block whose lead-in names no command"),
        "{}",
        bad[1]
    );
    assert!(
        bad[2].starts_with("docs/example.md:31: tokbench demo --no-such-flag"),
        "{}",
        bad[2]
    );
    assert!(
        bad[3].starts_with("docs/example.md:35: a text,output block not right after"),
        "{}",
        bad[3]
    );
}

/// The loop in measure.md that installs the man pages names every
/// subcommand that has one.
#[test]
fn the_man_page_loop_covers_every_subcommand() {
    use clap::CommandFactory;
    let text = std::fs::read_to_string(repo().join("docs/measure.md")).expect("measure.md");
    let looped: Vec<&str> = text
        .lines()
        .find_map(|l| {
            let rest = &l[l.find("for p in \"\" ")? + "for p in \"\" ".len()..];
            Some(rest[..rest.find(';')?].split_whitespace().collect())
        })
        .expect("measure.md has the man-page loop `for p in \"\" ...; do`");
    let mut looped = looped;
    looped.sort_unstable();
    let mut all: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    all.sort();
    assert_eq!(looped, all, "the man-page loop in docs/measure.md");
}

/// Flags of other programs the pages name in passing: the servers',
/// cargo's, the launchers' (deploy/), nvidia-smi's, vLLM's bench,
/// check-jsonschema's.
const OTHER_PROGRAMS_FLAGS: [&str; 23] = [
    "--base-uri",
    "--bench",
    "--dry-run",
    "--enforce-eager",
    "--fetch",
    "--lib",
    "--margin",
    "--max-batch-total-tokens",
    "--max-running-requests",
    "--metrics",
    "--metric-percentiles",
    "--no-repack",
    "--num-cpus",
    "--path",
    "--query-gpu",
    "--release",
    "--render-only",
    "--slots",
    "--storage-class",
    "--target",
    "--test",
    "--tokbench",
    "--version",
];

/// The `--flag`s in a page's prose (inside backticks, outside fenced
/// blocks), by line.
fn prose_flags(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for (k, span) in line.split('`').enumerate() {
            if k % 2 == 0 {
                continue;
            }
            for word in span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                if let Some(name) = word.strip_prefix("--") {
                    if !name.is_empty() && !name.ends_with('-') && !name.starts_with('-') {
                        out.push((i + 1, format!("--{name}")));
                    }
                }
            }
        }
    }
    out
}

/// Every flag a page names in prose is one some subcommand shows in its
/// `--help` (an alias kept for old scripts is not: the page should say what
/// `--help` says), or another program's.
#[test]
fn every_flag_named_in_prose_is_one_tokbench_shows() {
    use clap::CommandFactory;
    let mut known: std::collections::BTreeSet<String> = OTHER_PROGRAMS_FLAGS
        .iter()
        .map(|f| (*f).to_string())
        .collect();
    known.insert("--help".into());
    let cli = Cli::command();
    for sub in cli.get_subcommands().chain([&cli]) {
        for arg in sub.get_arguments() {
            if let Some(long) = arg.get_long() {
                known.insert(format!("--{long}"));
            }
        }
    }
    let mut bad = Vec::new();
    let mut seen = 0;
    for (name, text) in user_pages() {
        for (line, flag) in prose_flags(&text) {
            seen += 1;
            if !known.contains(&flag) {
                bad.push(format!("{name}:{line}: {flag}"));
            }
        }
    }
    assert!(
        seen >= 200,
        "only {seen} flags in the prose: is the reader blind?"
    );
    assert!(
        bad.is_empty(),
        "flags named in the pages that no --help shows:\n{}",
        bad.join("\n")
    );
}

/// README's guide links every page of docs/, so a new page is found.
#[test]
fn the_guide_links_every_page() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let guide = &readme[readme
        .find("## The guide")
        .expect("README has a guide index")..];
    let missing: Vec<String> = pages()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("docs/"))
        .filter(|name| !guide.contains(&format!("({name})")))
        .collect();
    assert!(missing.is_empty(), "not in README's guide: {missing:?}");
}

/// The first-run page shows the live view as it is (an excerpt of a real
/// `tokbench demo`), says that `q` saves, and answers the questions a
/// newcomer asked.
#[test]
fn the_first_run_page_shows_the_screen_and_answers_first_questions() {
    let page =
        std::fs::read_to_string(repo().join("docs/first-run.md")).expect("docs/first-run.md");
    let screen = fences(&page)
        .into_iter()
        .find(|f| f.info == "text,excerpt")
        .expect("a captured screen");
    for panel in [
        "TTFT ms",
        "ITL ms",
        "waiting",
        "server queue",
        "levels",
        "so far",
        " ok ",
    ] {
        assert!(
            screen.lines.iter().any(|l| l.contains(panel)),
            "the screen shows {panel}"
        );
    }
    for words in [
        "Excerpt of: `tokbench demo`",
        "**`q` quits and saves**",
        "`num_predict`",
        "--config DIR/config.toml",
        "`--seed N`",
        "--follow",
        "exits 0",
        "`--shard I/N`",
        "`--profile`",
    ] {
        assert!(page.contains(words), "first-run.md: {words}");
    }
}

/// The README opens with the demo and the test suite, then the line that
/// puts tokbench on PATH, which every `tokbench ...` of the guide assumes.
#[test]
fn the_readme_opens_with_the_demo_the_tests_and_the_install_line() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let first = fences(&readme).into_iter().next().expect("a first block");
    let commands: Vec<String> = first
        .lines
        .iter()
        .map(|l| without_comment(l).trim().to_string())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -- demo",
            "cargo test",
            "cargo install --path ."
        ],
        "README's opening block"
    );
}
