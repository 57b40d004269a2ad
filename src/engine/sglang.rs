//! SGLang: `/get_server_info` is its own. Its own gauges (`sglang:` names)
//! are not read yet: the probe tries vLLM's names, as for any server.

use serde_json::Value;

use super::{str_field, Advice, Detect, GaugeSource, Spec};

pub(super) const SPEC: Spec = Spec {
    name: "sglang",
    detect: Some(Detect {
        path: "/get_server_info",
        recognize,
    }),
    gauges: &[GaugeSource::VllmMetrics],
    advice: Advice {
        slots: None,
        on_503: None,
    },
    sim: None,
    kv_blocks: false,
};

/// Any JSON answer at that path.
fn recognize(body: &Value) -> Option<Option<String>> {
    Some(str_field(body, "version"))
}
