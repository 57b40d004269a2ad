//! How a run asked for its answers' length, and whether the engine can
//! honour it: the one source of the `ignore_eos` / `num_predict` label the
//! header, the report titles and the short-answer note use.

use super::Engine;

/// What the request bodies asked of the answer's length, as the engine
/// honours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LengthAsk {
    /// `ignore_eos: true` sent to an engine that has it: every answer runs
    /// to the length asked.
    IgnoreEos,
    /// `--no-ignore-eos`: a cap the model may stop before.
    NoIgnoreEos,
    /// The engine (or the backend's body) has no way to force a length:
    /// the named field is a cap, and answers end at the model's own end.
    CapOnly(&'static str),
}

impl LengthAsk {
    /// From the saved engine and backend names and `ignore_eos` as sent.
    /// Ollama's native bodies carry `num_predict`, TGI's `max_new_tokens`;
    /// neither engine has `ignore_eos` on any of its APIs.
    pub(crate) fn of(engine: &str, backend: &str, ignore_eos: bool) -> LengthAsk {
        match backend {
            "ollama-generate" | "ollama-chat" => return LengthAsk::CapOnly("num_predict"),
            "tgi-generate" => return LengthAsk::CapOnly("max_new_tokens"),
            _ => {}
        }
        match Engine::from_name(engine) {
            Some(Engine::Ollama | Engine::Tgi) => LengthAsk::CapOnly("max_tokens"),
            _ if ignore_eos => LengthAsk::IgnoreEos,
            _ => LengthAsk::NoIgnoreEos,
        }
    }

    /// The label next to the lengths: `ignore_eos`, `no ignore_eos`,
    /// `num_predict (a cap, not forced)`.
    pub(crate) fn label(self) -> String {
        match self {
            LengthAsk::IgnoreEos => "ignore_eos".into(),
            LengthAsk::NoIgnoreEos => "no ignore_eos".into(),
            LengthAsk::CapOnly(field) => format!("{field} (a cap, not forced)"),
        }
    }

    /// The label once answers are in: `ignore_eos` sent to a server that
    /// still ended `short` answers early is not claimed honoured.
    pub(crate) fn label_seen(self, short: u64) -> String {
        match self {
            LengthAsk::IgnoreEos if short > 0 => {
                format!("ignore_eos sent, yet {short} answers ended early")
            }
            _ => self.label(),
        }
    }

    /// Whether the server was asked to generate every token asked for.
    pub(crate) fn forced(self) -> bool {
        self == LengthAsk::IgnoreEos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_and_backend_gets_what_it_honours() {
        let of = LengthAsk::of;
        assert_eq!(
            of("ollama", "ollama-generate", true).label(),
            "num_predict (a cap, not forced)"
        );
        assert_eq!(
            of("ollama", "ollama-chat", true),
            LengthAsk::CapOnly("num_predict")
        );
        // Ollama's OpenAI API takes ignore_eos and ignores it.
        assert_eq!(
            of("ollama", "openai-chat", true),
            LengthAsk::CapOnly("max_tokens")
        );
        assert_eq!(
            of("tgi", "tgi-generate", true),
            LengthAsk::CapOnly("max_new_tokens")
        );
        assert_eq!(of("vllm", "openai-chat", true), LengthAsk::IgnoreEos);
        assert_eq!(
            of("sglang", "openai-completions", true).label(),
            "ignore_eos"
        );
        assert_eq!(
            of("llamacpp", "openai-chat", false).label(),
            "no ignore_eos"
        );
        assert!(of("tokbench-sim", "openai-chat", true).forced());
        assert!(!of("ollama", "openai-chat", true).forced());
    }

    /// Answers that ended early although ignore_eos was sent: the label
    /// says so instead of claiming it was honoured.
    #[test]
    fn a_label_seen_does_not_claim_what_the_answers_deny() {
        assert_eq!(LengthAsk::IgnoreEos.label_seen(0), "ignore_eos");
        assert_eq!(
            LengthAsk::IgnoreEos.label_seen(3),
            "ignore_eos sent, yet 3 answers ended early"
        );
        assert_eq!(
            LengthAsk::CapOnly("num_predict").label_seen(3),
            "num_predict (a cap, not forced)"
        );
    }
}
