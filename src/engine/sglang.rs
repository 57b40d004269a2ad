//! SGLang: `/get_server_info` is its own; gauges from `/metrics` (`sglang:`
//! names: running, queued, KV use, prefix-cache hits, and the split
//! prefill/decode queues of a disaggregated server);
//! `--max-running-requests` sets how many run at once.

use serde_json::Value;

use super::{openai_compatible, str_field, Advice, Detect, GaugeSource, Slots, Spec};
use crate::sim::SimEngine;

pub(super) const SPEC: Spec = Spec {
    name: "sglang",
    detect: Detect::at("/get_server_info", recognize),
    gauges: &[GaugeSource::SglangMetrics],
    advice: Advice {
        slots: Some(Slots {
            setting: "--max-running-requests",
            one_slot: "SGLang --max-running-requests 1",
            named_when_queueing: false,
        }),
        on_503: None,
    },
    sim: Some(SimEngine::Sglang),
    ..openai_compatible::SPEC
};

/// Any JSON answer at that path.
fn recognize(body: &Value) -> Option<Option<String>> {
    Some(str_field(body, "version"))
}
