//! Any other server that speaks OpenAI's API: never detected, what is left
//! when no engine recognises the server (and how a `--engine` name of the
//! user's own behaves). The probe tries vLLM's `/metrics` names, the most
//! common; a server without them costs one request. The engines that have
//! nothing of their own but an endpoint to be recognised by start from this
//! [`SPEC`].

use super::{Advice, GaugeSource, Spec};

pub(super) const SPEC: Spec = Spec {
    name: "openai-compatible",
    detect: None,
    gauges: &[GaugeSource::VllmMetrics],
    advice: Advice {
        slots: None,
        on_503: None,
    },
    sim: None,
    kv_blocks: false,
};
