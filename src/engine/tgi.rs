//! Hugging Face text-generation-inference: `/info` naming its router or its
//! concurrency cap is its own; it answers 429 (and some builds 503) past
//! `--max-concurrent-requests`. Its own gauges (`tgi_queue_size`) are not
//! read yet: the probe tries vLLM's names, as for any server.

use serde_json::Value;

use super::{openai_compatible, str_field, Advice, Detect, Spec};

/// What a 429 means from any server, and a 503 from TGI.
pub(crate) const CONCURRENCY_CAP: &str =
    "the server caps concurrent requests (TGI --max-concurrent-requests, a gateway's rate limit)";

pub(super) const SPEC: Spec = Spec {
    name: "tgi",
    detect: Detect::at("/info", recognize),
    advice: Advice {
        slots: None,
        on_503: Some(CONCURRENCY_CAP),
    },
    ..openai_compatible::SPEC
};

fn recognize(body: &Value) -> Option<Option<String>> {
    (body.get("max_concurrent_requests").is_some() || body.get("router").is_some())
        .then(|| str_field(body, "version"))
}
