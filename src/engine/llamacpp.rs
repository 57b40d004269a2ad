//! llama.cpp's `llama-server`: `/props` with `total_slots` is its own (the
//! version is `build_info`); gauges from `/metrics` (with `--metrics`) and
//! `/slots`; `-np` sets its slots; a 503 while it loads the model.

use serde_json::Value;

use super::{str_field, Advice, Detect, GaugeSource, Slots, Spec};
use crate::sim::SimEngine;

pub(super) const SPEC: Spec = Spec {
    name: "llamacpp",
    detect: Detect::at("/props", recognize),
    gauges: &[GaugeSource::LlamacppMetrics, GaugeSource::LlamacppSlots],
    advice: Advice {
        slots: Some(Slots {
            setting: "-np",
            one_slot: "llama-server -np 1",
            named_when_queueing: false,
        }),
        on_503: Some("llama-server answers 503 while it loads the model"),
    },
    sim: Some(SimEngine::Llamacpp),
    kv_blocks: false,
};

fn recognize(body: &Value) -> Option<Option<String>> {
    body.get("total_slots")
        .is_some()
        .then(|| str_field(body, "build_info"))
}
