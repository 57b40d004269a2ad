//! Hugging Face text-generation-inference: `/info` naming its router or its
//! concurrency cap is its own; it answers 429 (and some builds 503) past
//! `--max-concurrent-requests`; gauges from `/metrics` (`tgi_` names: the
//! queue, the running batch and its token budget). How many requests run
//! at once is set by the batch's token budget, `--max-batch-total-tokens`.

use serde_json::Value;

use super::{openai_compatible, str_field, Advice, Detect, GaugeSource, Slots, Spec};
use crate::sim::SimEngine;

/// What a 429 means from any server, and a 503 from TGI.
pub(crate) const CONCURRENCY_CAP: &str =
    "the server caps concurrent requests (TGI --max-concurrent-requests, a gateway's rate limit)";

pub(super) const SPEC: Spec = Spec {
    name: "tgi",
    detect: Detect::at("/info", recognize),
    gauges: &[GaugeSource::TgiMetrics],
    advice: Advice {
        slots: Some(Slots {
            setting: "--max-batch-total-tokens",
            one_slot: "TGI --max-batch-size 1",
            named_when_queueing: false,
        }),
        on_503: Some(CONCURRENCY_CAP),
    },
    sim: Some(SimEngine::Tgi),
    ..openai_compatible::SPEC
};

fn recognize(body: &Value) -> Option<Option<String>> {
    (body.get("max_concurrent_requests").is_some() || body.get("router").is_some())
        .then(|| str_field(body, "version"))
}
