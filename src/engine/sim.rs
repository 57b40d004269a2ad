//! tokbench's simulator playing vLLM: its `/version` says `tokbench-sim`
//! (`sim::SIM_VERSION`); it serves vLLM's `/metrics`. Its `--max-num-seqs`
//! is vLLM's, named under vLLM. The other personalities (Ollama, llama.cpp,
//! SGLang, TGI) are detected as those engines.

use serde_json::Value;

use super::{openai_compatible, str_field, Detect, Spec};
use crate::sim::SimEngine;

pub(super) const SPEC: Spec = Spec {
    name: "tokbench-sim",
    detect: Detect::at("/version", recognize),
    sim: Some(SimEngine::Vllm),
    ..openai_compatible::SPEC
};

fn recognize(body: &Value) -> Option<Option<String>> {
    str_field(body, "version")
        .filter(|v| v.contains("tokbench-sim"))
        .map(Some)
}
