//! tokbench's simulator playing vLLM: its `/version` says `tokbench-sim`
//! (`sim::SIM_VERSION`); it serves vLLM's `/metrics`. Its `--max-num-seqs`
//! is vLLM's, named under vLLM. The Ollama and llama.cpp personalities are
//! detected as those engines.

use serde_json::Value;

use super::{str_field, Advice, Detect, GaugeSource, Spec};
use crate::sim::SimEngine;

pub(super) const SPEC: Spec = Spec {
    name: "tokbench-sim",
    detect: Some(Detect {
        path: "/version",
        recognize,
    }),
    gauges: &[GaugeSource::VllmMetrics],
    advice: Advice {
        slots: None,
        on_503: None,
    },
    sim: Some(SimEngine::Vllm),
    kv_blocks: false,
};

fn recognize(body: &Value) -> Option<Option<String>> {
    str_field(body, "version")
        .filter(|v| v.contains("tokbench-sim"))
        .map(Some)
}
