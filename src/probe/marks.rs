//! The server's identity and start marks, for the driver's watch to tell a
//! quick restart from a burst of dropped connections: what the series
//! look shows (version, slots, KV blocks), `/metrics`' start time and
//! counters, and Ollama's `/api/ps` keep-alive deadlines.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::get_json;
use crate::engine::Engine;
use crate::load::driver::{MarksReader, ServerMarks};

/// The reader the driver is given, for the server at `base_url` (no `/v1`).
pub(crate) fn reader(client: reqwest::Client, base_url: String, engine: Engine) -> MarksReader {
    std::sync::Arc::new(move || {
        let (client, base_url) = (client.clone(), base_url.clone());
        Box::pin(async move { read(&client, &base_url, engine).await })
    })
}

/// Read every mark the server shows; None when it showed none.
pub(crate) async fn read(
    client: &reqwest::Client,
    base_url: &str,
    engine: Engine,
) -> Option<ServerMarks> {
    let read_at_unix_s = unix_s(SystemTime::now());
    let look = super::series::look(client, base_url).await;
    let mut identity = Vec::new();
    if let Some(version) = look.engine_version {
        identity.push(("version".to_string(), version));
    }
    if let Some(slots) = look.slots {
        identity.push(("slots".to_string(), slots.to_string()));
    }
    if let Some(blocks) = look.gpu_blocks {
        identity.push(("KV blocks".to_string(), blocks.to_string()));
    }
    let metrics = super::live::fetch(
        client,
        &format!("{base_url}/metrics"),
        Duration::from_secs(2),
    )
    .await
    .map(|body| super::prometheus::parse_bytes(&body));
    let started_unix_s = metrics.as_ref().and_then(|m| {
        m.samples_named("process_start_time_seconds")
            .next()
            .map(|s| s.value)
    });
    let counters = metrics
        .as_ref()
        .map(|m| {
            m.samples
                .iter()
                .filter(|s| s.name.ends_with("_total"))
                .map(|s| (counter_key(s), s.value))
                .collect()
        })
        .unwrap_or_default();
    let loaded_until = if engine == Engine::Ollama {
        match get_json(client, &format!("{base_url}/api/ps")).await {
            Ok(Some(ps)) => Some(loaded_models(&ps)),
            _ => None,
        }
    } else {
        None
    };
    let marks = ServerMarks {
        read_at_unix_s,
        identity,
        started_unix_s,
        counters,
        loaded_until,
    };
    let empty = marks.identity.is_empty()
        && marks.started_unix_s.is_none()
        && marks.counters.is_empty()
        && marks.loaded_until.is_none();
    (!empty).then_some(marks)
}

/// A counter's name with its labels: one key per series of it.
fn counter_key(s: &super::prometheus::Sample) -> String {
    let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}{{{}}}", s.name, labels.join(","))
}

/// `/api/ps`' models and when each unloads (Unix s); one without a
/// readable `expires_at` is left out.
fn loaded_models(ps: &Value) -> Vec<(String, f64)> {
    ps["models"]
        .as_array()
        .map(|models| {
            models
                .iter()
                .filter_map(|m| {
                    let name = m["name"].as_str().or_else(|| m["model"].as_str())?;
                    let until = rfc3339_unix_s(m["expires_at"].as_str()?)?;
                    Some((name.to_string(), until))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// RFC 3339 as Ollama writes it (`2026-12-02T14:38:31.837530-07:00`, or
/// with `Z`), to Unix seconds.
fn rfc3339_unix_s(text: &str) -> Option<f64> {
    let whole = text.get(..19)?;
    let base = unix_s(crate::time::parse_iso8601(&format!("{whole}Z"))?);
    let rest = &text[19..];
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(r) => {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            let frac: f64 = format!("0.{}", &r[..digits]).parse().ok()?;
            (frac, &r[digits..])
        }
        None => (0.0, rest),
    };
    let offset_s = match zone {
        "Z" | "z" => 0.0,
        _ => {
            let sign = match zone.get(..1)? {
                "+" => 1.0,
                "-" => -1.0,
                _ => return None,
            };
            let h: f64 = zone.get(1..3)?.parse().ok()?;
            let m: f64 = zone.get(4..6)?.parse().ok()?;
            sign * (h * 3600.0 + m * 60.0)
        }
    };
    Some(base + fraction - offset_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_deadlines_read_in_any_zone() {
        // 2026-11-29T19:14:00Z = 1795979640 s.
        assert_eq!(
            rfc3339_unix_s("2026-11-29T19:14:00Z"),
            Some(1_795_979_640.0)
        );
        assert_eq!(
            rfc3339_unix_s("2026-11-29T19:14:00.500000000Z"),
            Some(1_795_979_640.5)
        );
        assert_eq!(
            rfc3339_unix_s("2026-11-29T12:14:00.25-07:00"),
            Some(1_795_979_640.25)
        );
        assert_eq!(rfc3339_unix_s("yesterday"), None);
        let ps = serde_json::json!({"models": [
            {"name": "sim", "expires_at": "2026-11-29T19:14:00Z"},
            {"name": "odd", "expires_at": 3},
        ]});
        assert_eq!(
            loaded_models(&ps),
            vec![("sim".to_string(), 1_795_979_640.0)]
        );
        assert_eq!(loaded_models(&serde_json::json!({"models": []})), vec![]);
    }
}
