//! Ollama: `/api/version` is its own; gauges from `/api/ps`; requests beyond
//! `OLLAMA_NUM_PARALLEL` (default 1) wait without limit, and a 503 means more
//! than `OLLAMA_MAX_QUEUE` piled up behind a model load.

use serde_json::Value;

use super::{str_field, Advice, Detect, GaugeSource, Slots, Spec};
use crate::sim::SimEngine;

pub(super) const SPEC: Spec = Spec {
    name: "ollama",
    detect: Detect::at("/api/version", recognize),
    gauges: &[GaugeSource::OllamaPs],
    advice: Advice {
        slots: Some(Slots {
            setting: "OLLAMA_NUM_PARALLEL",
            one_slot: "OLLAMA_NUM_PARALLEL=1",
            named_when_queueing: true,
        }),
        on_503: Some(
            "Ollama's queue is full: more than OLLAMA_MAX_QUEUE (default 512) requests piled up, usually behind a model load",
        ),
    },
    sim: Some(SimEngine::Ollama),
    kv_blocks: false,
};

/// `{"version":"0.9.0"}`.
fn recognize(body: &Value) -> Option<Option<String>> {
    str_field(body, "version").map(Some)
}
