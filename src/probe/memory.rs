//! What a server says of its memory at one setting (a tune's), with a
//! warning where it matters: Ollama's `/api/ps` (a model spilled to CPU),
//! llama.cpp's `/props` (each slot's context), vLLM's `cache_config_info`
//! (how many tokens of KV the setting leaves).

use serde_json::{json, Value};

use crate::server::EngineHint;

/// The memory figures, a warning, and (llama.cpp) each slot's context.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SettingMemory {
    pub memory: Value,
    pub warning: Option<String>,
    /// Tokens each slot holds: a prompt and its output must fit.
    pub slot_context: Option<u64>,
}

/// Ask the server; a server that says nothing gives empty figures.
pub(crate) async fn of_setting(
    client: &reqwest::Client,
    base_url: &str,
    engine: EngineHint,
    label: &str,
) -> SettingMemory {
    match engine {
        EngineHint::Ollama => match super::get_json(client, &format!("{base_url}/api/ps")).await {
            Ok(Some(ps)) => ollama(&ps, label),
            _ => SettingMemory::default(),
        },
        EngineHint::Llamacpp => match super::get_json(client, &format!("{base_url}/props")).await {
            Ok(Some(props)) => llamacpp(&props),
            _ => SettingMemory::default(),
        },
        EngineHint::Vllm | EngineHint::Unknown => {
            let Ok(response) = client.get(format!("{base_url}/metrics")).send().await else {
                return SettingMemory::default();
            };
            let Ok(text) = response.text().await else {
                return SettingMemory::default();
            };
            vllm(&text)
        }
        EngineHint::Sglang | EngineHint::Tgi => SettingMemory::default(),
    }
}

/// `/api/ps`: the first model's `size` and `size_vram`; less in VRAM
/// than in all means part of it runs on the CPU.
pub(crate) fn ollama(ps: &Value, label: &str) -> SettingMemory {
    let Some(model) = ps
        .get("models")
        .and_then(Value::as_array)
        .and_then(|m| m.first())
    else {
        return SettingMemory::default();
    };
    let size = model.get("size").and_then(Value::as_u64);
    let vram = model.get("size_vram").and_then(Value::as_u64);
    let warning = match (size, vram) {
        (Some(size), Some(vram)) if size > 0 && vram < size => {
            let on_cpu = (size - vram) as f64 / size as f64 * 100.0;
            Some(format!(
                "{label}: {on_cpu:.0}% of the model on CPU: its figures are not a GPU's"
            ))
        }
        _ => None,
    };
    SettingMemory {
        memory: json!({"size": size, "size_vram": vram}),
        warning,
        slot_context: None,
    }
}

/// `/props`: `default_generation_settings.n_ctx` is what each slot holds.
pub(crate) fn llamacpp(props: &Value) -> SettingMemory {
    let n_ctx = props
        .pointer("/default_generation_settings/n_ctx")
        .and_then(Value::as_u64);
    let slots = props.get("total_slots").and_then(Value::as_u64);
    SettingMemory {
        memory: json!({"slot_context_tokens": n_ctx, "total_slots": slots}),
        warning: None,
        slot_context: n_ctx.filter(|n| *n > 0),
    }
}

/// `vllm:cache_config_info`'s `num_gpu_blocks` × `block_size`: the KV
/// cache's tokens at this setting.
pub(crate) fn vllm(metrics: &str) -> SettingMemory {
    let m = super::prometheus::parse(metrics);
    let Some(info) = m.samples_named("vllm:cache_config_info").next() else {
        return SettingMemory::default();
    };
    let number = |k: &str| info.label(k).and_then(|v| v.parse::<u64>().ok());
    let (blocks, block_size) = (number("num_gpu_blocks"), number("block_size"));
    let tokens = blocks.zip(block_size).map(|(b, s)| b.saturating_mul(s));
    SettingMemory {
        memory: json!({"num_gpu_blocks": blocks, "block_size": block_size, "kv_tokens": tokens}),
        warning: None,
        slot_context: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3 GB in VRAM of 4 GB: 25% on the CPU.
    #[test]
    fn ollama_spilled_to_cpu_is_warned() {
        let ps = json!({"models": [{"name": "m", "size": 4_000_000_000u64, "size_vram": 3_000_000_000u64}]});
        let m = ollama(&ps, "np=8");
        assert_eq!(
            m.warning.as_deref(),
            Some("np=8: 25% of the model on CPU: its figures are not a GPU's")
        );
        let whole = json!({"models": [{"size": 10, "size_vram": 10}]});
        assert_eq!(ollama(&whole, "np=1").warning, None);
        assert_eq!(
            ollama(&json!({"models": []}), "x"),
            SettingMemory::default()
        );
    }

    #[test]
    fn llamacpp_slot_context() {
        let props = json!({"default_generation_settings": {"n_ctx": 2048}, "total_slots": 4});
        let m = llamacpp(&props);
        assert_eq!(m.slot_context, Some(2048));
        assert_eq!(m.memory["total_slots"], 4);
    }

    /// 1,000 blocks of 16 tokens: 16,000 tokens of KV.
    #[test]
    fn vllm_kv_tokens() {
        let text = "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1.0\n";
        assert_eq!(vllm(text).memory["kv_tokens"], 16_000);
        assert_eq!(vllm("").memory, Value::Null);
    }
}
