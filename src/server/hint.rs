//! A `--serve-cmd` template's words, and what engine they start.

use color_eyre::eyre::{eyre, Result};

/// `cmd` split into words by shell rules (quotes, backslashes), without a
/// shell: a value filled into the template with `;` or `$(x)` in it stays
/// inside its word instead of running as a command.
pub(crate) fn split_words(cmd: &str) -> Result<Vec<String>> {
    // The command is not quoted back: its words may hold a secret (`--api-key K`).
    shell_words::split(cmd)
        .map_err(|_| eyre!("cannot split the server command into words: a quote is not closed"))
}

/// The engine a server command starts, judged from its words, so that
/// readiness is asked the way that engine answers it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum EngineHint {
    Vllm,
    Sglang,
    Llamacpp,
    Tgi,
    Ollama,
    Unknown,
}

impl EngineHint {
    /// The first word that names an engine: a program (`vllm serve`,
    /// `/opt/bin/llama-server`), a Python module (`python -m vllm.entrypoints...`),
    /// or tokbench's own simulator (`tokbench sim --engine X`). With a shell
    /// command (one word holding the whole line) its words are read the same way.
    pub(crate) fn of_words(words: &[String]) -> EngineHint {
        let split;
        let words = match words {
            [line] if line.contains(char::is_whitespace) => {
                split = split_words(line)
                    .unwrap_or_else(|_| line.split_whitespace().map(str::to_owned).collect());
                &split[..]
            }
            _ => words,
        };
        for (i, word) in words.iter().enumerate() {
            let rest = &words[i + 1..];
            let hint = match program(word) {
                "vllm" => EngineHint::Vllm,
                "sglang" => EngineHint::Sglang,
                "llama-server" => EngineHint::Llamacpp,
                "text-generation-launcher" => EngineHint::Tgi,
                "ollama" => EngineHint::Ollama,
                "tokbench" => return of_tokbench(rest),
                "-m" => match rest.first() {
                    Some(module) => of_module(module),
                    None => EngineHint::Unknown,
                },
                _ => EngineHint::Unknown,
            };
            if hint != EngineHint::Unknown {
                return hint;
            }
        }
        EngineHint::Unknown
    }
}

/// A word's last path part: `/usr/local/bin/vllm` is `vllm`.
fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `python -m MODULE`: vLLM's and SGLang's entry points, llama-cpp-python's server.
fn of_module(module: &str) -> EngineHint {
    let top = module.split('.').next().unwrap_or(module);
    match top {
        "vllm" => EngineHint::Vllm,
        "sglang" => EngineHint::Sglang,
        "llama_cpp" if module.starts_with("llama_cpp.server") => EngineHint::Llamacpp,
        _ => EngineHint::Unknown,
    }
}

/// `tokbench sim [--engine X]`: the personality it plays (vLLM by default,
/// as `tokbench sim` itself defaults). Any other tokbench command serves nothing.
fn of_tokbench(rest: &[String]) -> EngineHint {
    if rest.first().map(String::as_str) != Some("sim") {
        return EngineHint::Unknown;
    }
    let mut engine = None;
    for (i, word) in rest.iter().enumerate() {
        if let Some(value) = word.strip_prefix("--engine=") {
            engine = Some(value);
        } else if word == "--engine" {
            engine = rest.get(i + 1).map(String::as_str);
        }
    }
    match engine {
        None | Some("vllm") => EngineHint::Vllm,
        Some("ollama") => EngineHint::Ollama,
        Some("llamacpp") => EngineHint::Llamacpp,
        Some(_) => EngineHint::Unknown,
    }
}
