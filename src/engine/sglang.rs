//! SGLang: `/get_server_info` is its own. Its own gauges (`sglang:` names)
//! are not read yet: the probe tries vLLM's names, as for any server.

use serde_json::Value;

use super::{openai_compatible, str_field, Detect, Spec};

pub(super) const SPEC: Spec = Spec {
    name: "sglang",
    detect: Detect::at("/get_server_info", recognize),
    ..openai_compatible::SPEC
};

/// Any JSON answer at that path.
fn recognize(body: &Value) -> Option<Option<String>> {
    Some(str_field(body, "version"))
}
