//! A run that failed because `--backend` names an API the server does not
//! have: the server's engine, detected before the run, names the backend
//! to use, instead of a bare 404.

use clap::ValueEnum;

use crate::cli::Backend;
use crate::engine::Engine;
use crate::report::run_info::RunInfo;

/// The line a face says when the run stopped on `error`: the error, or,
/// where every warmup request got a 404 (or 405) from a server whose
/// engine is known and does not speak the run's backend, which backend to
/// use, with the first error after it.
pub(crate) fn failure_line(error: &str, run: &RunInfo) -> String {
    wrong_backend(error, run).unwrap_or_else(|| error.to_string())
}

fn wrong_backend(error: &str, run: &RunInfo) -> Option<String> {
    let (head, first) = error.split_once("; first error: ")?;
    if !(first.starts_with("http_404") || first.starts_with("http_405")) {
        return None;
    }
    // A 404 that names a model is about the model, not the route.
    if first.to_ascii_lowercase().contains("model") {
        return None;
    }
    let engine = Engine::from_name(&run.engine)?;
    let speaks = engine.backends();
    if speaks.is_empty() || speaks.contains(&run.backend.as_str()) {
        return None;
    }
    let route = Backend::value_variants()
        .iter()
        .find(|b| b.as_str() == run.backend)
        .map_or("this route", |b| b.default_path());
    let use_ = match speaks {
        [one] => format!("--backend {one}"),
        [first_choice, second, ..] => format!("--backend {first_choice} (or {second})"),
        [] => return None,
    };
    // The request's own guess (made without knowing the server) gives way.
    let first = first
        .split_once("; no such OpenAI route here")
        .or_else(|| first.split_once("; no TGI /generate_stream here"))
        .map_or(first, |(message, _)| message);
    Some(format!(
        "{head}: the server at {} is {} and has no {route}: use {use_} (first error: {first})",
        run.target,
        engine.display_name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(engine: &str, backend: &str) -> RunInfo {
        let mut run = RunInfo::example();
        run.engine = engine.into();
        run.backend = backend.into();
        run
    }

    #[test]
    fn a_404_names_the_backend_the_server_speaks() {
        let error = "all 1 warmup requests failed; first error: http_404: Not Found: /api/generate";
        assert_eq!(
            failure_line(error, &run("vllm", "ollama-generate")),
            "all 1 warmup requests failed: the server at http://h:8000 is vLLM and has no \
             /api/generate: use --backend openai-chat (or openai-completions) (first error: \
             http_404: Not Found: /api/generate)"
        );
        let error = "all 1 warmup requests failed; first error: http_404: File Not Found";
        assert!(
            failure_line(error, &run("llamacpp", "ollama-chat")).contains(
                "is llama.cpp's llama-server and has no /api/chat: use --backend openai-chat"
            )
        );
        // The request's guess of TGI is dropped where the engine is known.
        let error = "all 1 warmup requests failed; first error: http_404: 404 page not found; \
                     no such OpenAI route here: a server with only TGI's native API \
                     (/generate_stream) takes --backend tgi-generate";
        let line = failure_line(error, &run("ollama", "openai-completions"));
        assert!(
            line.contains("is Ollama and has no /v1/completions: use --backend ollama-chat (or ollama-generate)"),
            "{line}"
        );
        assert!(!line.contains("tgi"), "{line}");
    }

    #[test]
    fn other_failures_are_left_as_they_are() {
        let plain = |error: &str, engine: &str, backend: &str| {
            assert_eq!(failure_line(error, &run(engine, backend)), error);
        };
        // The backend is one the engine speaks: the 404 is about something else.
        plain(
            "all 1 warmup requests failed; first error: http_404: Not Found",
            "vllm",
            "openai-chat",
        );
        // A missing model.
        plain(
            "all 1 warmup requests failed; first error: http_404: model 'x' not found",
            "ollama",
            "openai-completions",
        );
        // An engine not recognised, another status.
        plain(
            "all 1 warmup requests failed; first error: http_404: Not Found",
            "openai-compatible",
            "ollama-chat",
        );
        plain(
            "all 1 warmup requests failed; first error: http_500: boom",
            "vllm",
            "ollama-chat",
        );
    }
}
