//! What tells one server process from the next: its identity and start
//! marks, read before and after a burst of connection failures, and the
//! rule that says whether they show a restart.
//!
//! The driver reads them through an injected reader (`MarksReader`): `load`
//! does not import `probe`, which knows each engine's documents; the rule
//! lives here, with the server watch that acts on it.

use std::sync::Arc;

use crate::load::executor::BoxFuture;

/// What a server says of itself that a restart changes or resets.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ServerMarks {
    /// When these were read, Unix seconds (the wall clock of the reader).
    pub read_at_unix_s: f64,
    /// What names the process and its settings, by name: the engine's
    /// version, llama.cpp's slots, vLLM's KV blocks.
    pub identity: Vec<(String, String)>,
    /// When the process started, Unix seconds (`process_start_time_seconds`).
    pub started_unix_s: Option<f64>,
    /// Counters that only grow while a process lives (`*_total` of
    /// `/metrics`), by name and labels.
    pub counters: Vec<(String, f64)>,
    /// Ollama `/api/ps`: each loaded model and its `expires_at` (Unix s);
    /// None when the server has no such list.
    pub loaded_until: Option<Vec<(String, f64)>>,
}

/// Reads the server's marks; None when nothing answered.
pub(crate) type MarksReader = Arc<dyn Fn() -> BoxFuture<Option<ServerMarks>> + Send + Sync>;

/// A start time that moved by more than this is another process (the
/// exposition rounds it, and a reader's clock may step a little).
const START_MOVED_S: f64 = 1.0;

impl ServerMarks {
    /// Why `after` is another process than `before`, in words; None when
    /// nothing they both show says so.
    pub(crate) fn restart_sign(before: &ServerMarks, after: &ServerMarks) -> Option<String> {
        for (name, was) in &before.identity {
            if let Some((_, now)) = after.identity.iter().find(|(n, _)| n == name) {
                if now != was {
                    return Some(format!("{name} {was} → {now}"));
                }
            }
        }
        if let (Some(was), Some(now)) = (before.started_unix_s, after.started_unix_s) {
            if (now - was).abs() > START_MOVED_S {
                return Some("the process start time moved".into());
            }
        }
        for (name, was) in &before.counters {
            if let Some((_, now)) = after.counters.iter().find(|(n, _)| n == name) {
                if now < was {
                    return Some(format!("{name} went down"));
                }
            }
        }
        // A model that was to stay loaded well past now and is gone: its
        // keep-alive did not end, the process did (Ollama loads afresh).
        if let (Some(was), Some(now)) = (&before.loaded_until, &after.loaded_until) {
            for (model, until) in was {
                if *until > after.read_at_unix_s + START_MOVED_S
                    && !now.iter().any(|(m, _)| m == model)
                {
                    return Some(format!("{model} unloaded before its keep-alive ended"));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks() -> ServerMarks {
        ServerMarks {
            read_at_unix_s: 1000.0,
            identity: vec![("slots".into(), "1".into())],
            started_unix_s: Some(500.0),
            counters: vec![("vllm:generation_tokens_total".into(), 900.0)],
            loaded_until: Some(vec![("sim".into(), 1300.0)]),
        }
    }

    #[test]
    fn each_mark_of_a_new_process_is_a_sign() {
        let before = marks();
        let mut later = marks();
        later.read_at_unix_s = 1010.0;
        later.counters[0].1 = 1200.0;
        later.loaded_until = Some(vec![("sim".into(), 1310.0)]);
        assert_eq!(ServerMarks::restart_sign(&before, &later), None);

        let mut slots = later.clone();
        slots.identity[0].1 = "4".into();
        assert_eq!(
            ServerMarks::restart_sign(&before, &slots).as_deref(),
            Some("slots 1 → 4")
        );
        let mut started = later.clone();
        started.started_unix_s = Some(1005.0);
        assert!(ServerMarks::restart_sign(&before, &started).is_some());
        let mut counted = later.clone();
        counted.counters[0].1 = 10.0;
        assert_eq!(
            ServerMarks::restart_sign(&before, &counted).as_deref(),
            Some("vllm:generation_tokens_total went down")
        );
        let mut unloaded = later.clone();
        unloaded.loaded_until = Some(vec![]);
        assert_eq!(
            ServerMarks::restart_sign(&before, &unloaded).as_deref(),
            Some("sim unloaded before its keep-alive ended")
        );
        // Its keep-alive over: an unload of its own, not a restart.
        unloaded.read_at_unix_s = 1400.0;
        assert_eq!(ServerMarks::restart_sign(&before, &unloaded), None);
        // What only one side shows says nothing.
        let bare = ServerMarks::default();
        assert_eq!(ServerMarks::restart_sign(&before, &bare), None);
        assert_eq!(ServerMarks::restart_sign(&bare, &slots), None);
    }
}
