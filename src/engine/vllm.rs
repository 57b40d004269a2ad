//! vLLM's OpenAI server: a bare `/version` with a `version` field is vLLM's
//! (of the engines we know; checked after the simulator, which has one too);
//! gauges from `/metrics` (`vllm:` names); `--max-num-seqs` sets how many
//! run at once; a 503 is opt-in with `--max-num-queued-reqs`.

use serde_json::Value;

use super::{str_field, Advice, Detect, GaugeSource, Slots, Spec};
use crate::sim::SimEngine;

pub(super) const SPEC: Spec = Spec {
    name: "vllm",
    detect: Detect::at("/version", recognize),
    gauges: &[GaugeSource::VllmMetrics],
    advice: Advice {
        slots: Some(Slots {
            setting: "--max-num-seqs",
            one_slot: "vLLM --max-num-seqs 1",
            named_when_queueing: false,
        }),
        on_503: Some("vLLM refuses past --max-num-queued-reqs"),
    },
    sim: Some(SimEngine::Vllm),
    kv_blocks: true,
};

fn recognize(body: &Value) -> Option<Option<String>> {
    str_field(body, "version").map(Some)
}
