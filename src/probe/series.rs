//! What a new series is against: the server's identity and slots, looked up
//! again when the user starts a series or the server comes back from a
//! restart, and the default label that says what changed.

use serde_json::{json, Value};

use super::{detect_engine, get_json, model_ids};
use crate::engine::Engine;

/// Longest series label: the live view's prompt refuses more, and a
/// default label is cut to it.
pub(crate) const MAX_LABEL_CHARS: usize = 60;

/// What the probe can see of a server configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SeriesLook {
    pub engine: String,
    pub engine_version: Option<String>,
    /// The first model it lists.
    pub model: Option<String>,
    /// llama.cpp `/props` `total_slots`.
    pub slots: Option<u32>,
    /// vLLM `vllm:cache_config_info{num_gpu_blocks=...}`.
    pub gpu_blocks: Option<u64>,
}

impl SeriesLook {
    /// The series' `server` object in `summary.json`.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "engine": self.engine,
            "engine_version": self.engine_version,
            "model": self.model,
            "slots": self.slots,
            "num_gpu_blocks": self.gpu_blocks,
        })
    }
}

/// Look at the server at `base_url` (no `/v1`).
pub(crate) async fn look(client: &reqwest::Client, base_url: &str) -> SeriesLook {
    let (engine, engine_version) = detect_engine(client, base_url).await;
    let model = match get_json(client, &format!("{base_url}/v1/models")).await {
        Ok(Some(body)) => model_ids(&body).into_iter().next(),
        _ => None,
    };
    let slots = match get_json(client, &format!("{base_url}/props")).await {
        Ok(Some(props)) => super::gauges::llamacpp_total_slots(&props),
        _ => None,
    };
    let gpu_blocks = if engine.spec().kv_blocks {
        metrics_gpu_blocks(client, base_url).await
    } else {
        None
    };
    SeriesLook {
        engine: engine.name().to_string(),
        engine_version,
        model,
        slots,
        gpu_blocks,
    }
}

async fn metrics_gpu_blocks(client: &reqwest::Client, base_url: &str) -> Option<u64> {
    // The live probe's fetch: a bounded body, and nothing from an error page.
    let body = super::live::fetch(
        client,
        &format!("{base_url}/metrics"),
        std::time::Duration::from_secs(2),
    )
    .await?;
    let metrics = super::prometheus::parse_bytes(&body);
    let blocks = metrics
        .samples_named("vllm:cache_config_info")
        .find_map(|s| s.label("num_gpu_blocks")?.parse().ok());
    blocks
}

/// Why a series against `after` cannot follow one against `before`: a
/// different engine is a different benchmark, not a setting.
pub(crate) fn refusal(before: &SeriesLook, after: &SeriesLook) -> Option<String> {
    let known = |e: &str| !e.is_empty() && Engine::from_name(e) != Some(Engine::OpenaiCompatible);
    (known(&before.engine) && known(&after.engine) && before.engine != after.engine).then(|| {
        format!(
            "the server is now {} (was {}): a different engine is a new run, not a new series; q quits and saves",
            after.engine, before.engine
        )
    })
}

/// What changed, as a label: `slots 2 → 4`, `KV blocks 1000 → 2000`,
/// `vLLM 0.11 → 0.12`, `model qwen3`; `fallback` when nothing visible did.
pub(crate) fn default_label(before: &SeriesLook, after: &SeriesLook, fallback: &str) -> String {
    let mut changes = Vec::new();
    if let (Some(a), Some(b)) = (before.slots, after.slots) {
        if a != b {
            changes.push(format!("slots {a} → {b}"));
        }
    }
    if let (Some(a), Some(b)) = (before.gpu_blocks, after.gpu_blocks) {
        if a != b {
            changes.push(format!("KV blocks {a} → {b}"));
        }
    }
    if let (Some(a), Some(b)) = (&before.engine_version, &after.engine_version) {
        if a != b {
            changes.push(format!("{} {a} → {b}", after.engine));
        }
    }
    if let (Some(a), Some(b)) = (&before.model, &after.model) {
        if a != b {
            changes.push(format!("model {b}"));
        }
    }
    if changes.is_empty() {
        return fallback.to_string();
    }
    let mut label = changes.join(", ");
    if label.chars().count() > MAX_LABEL_CHARS {
        label = label.chars().take(MAX_LABEL_CHARS).collect();
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(engine: &str, slots: Option<u32>) -> SeriesLook {
        SeriesLook {
            engine: engine.into(),
            slots,
            ..SeriesLook::default()
        }
    }

    #[test]
    fn the_label_says_what_changed() {
        let a = look("llamacpp", Some(2));
        let b = look("llamacpp", Some(4));
        assert_eq!(default_label(&a, &b, "series 2"), "slots 2 → 4");
        assert_eq!(default_label(&a, &a, "series 2"), "series 2");
        let mut c = b.clone();
        c.model = Some("qwen3".into());
        let mut a2 = a.clone();
        a2.model = Some("smollm2".into());
        assert_eq!(default_label(&a2, &c, "x"), "slots 2 → 4, model qwen3");
        let v1 = SeriesLook {
            engine: "vllm".into(),
            engine_version: Some("0.11.0".into()),
            gpu_blocks: Some(1000),
            ..SeriesLook::default()
        };
        let v2 = SeriesLook {
            engine_version: Some("0.11.0".into()),
            gpu_blocks: Some(2000),
            ..v1.clone()
        };
        assert_eq!(default_label(&v1, &v2, "x"), "KV blocks 1000 → 2000");
    }

    #[test]
    fn another_engine_is_refused_a_model_is_not() {
        let a = look("llamacpp", Some(2));
        assert!(refusal(&a, &look("ollama", None)).is_some_and(|r| r.contains("now ollama")));
        assert_eq!(refusal(&a, &look("llamacpp", Some(8))), None);
        // Nothing known on one side: not refused.
        assert_eq!(refusal(&a, &look("openai-compatible", None)), None);
    }
}
