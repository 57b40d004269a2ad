//! `tune --reset-cache`: the server's prefix cache emptied before each
//! level after the first, through the driver's work between levels, where
//! the engine offers a way (vLLM, SGLang). Each reset's answer is counted,
//! and the setting's result says what was done.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::load::driver::BetweenLevels;
use crate::server::EngineHint;

/// The route that empties an engine's prefix cache, if it has one.
pub(crate) fn reset_route(engine: EngineHint) -> Option<&'static str> {
    match engine {
        // Served only with VLLM_SERVER_DEV_MODE=1 (tune sets it).
        EngineHint::Vllm => Some("/reset_prefix_cache"),
        EngineHint::Sglang => Some("/flush_cache"),
        _ => None,
    }
}

/// How the resets of one setting went.
#[derive(Debug, Default)]
pub(crate) struct Resets {
    route: &'static str,
    ok: AtomicU32,
    failed: AtomicU32,
    first_error: Mutex<Option<String>>,
}

impl Resets {
    fn failed_with(&self, why: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first_error.lock() {
            first.get_or_insert(why);
        }
    }

    /// In words, for the setting's result.
    pub(crate) fn text(&self) -> String {
        let ok = self.ok.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        let first = self.first_error.lock().ok().and_then(|f| f.clone());
        match (ok, failed) {
            (0, 0) => format!("POST {} was never needed: one level", self.route),
            (ok, 0) => format!(
                "reset before each level after the first: POST {} answered {ok} of {ok}",
                self.route
            ),
            (ok, failed) => format!(
                "POST {} answered {ok} of {}; the rest failed ({}): those levels may have found a warm cache",
                self.route,
                ok + failed,
                first.unwrap_or_else(|| "no answer".into())
            ),
        }
    }
}

/// The work between levels that resets the cache of the server at `base`;
/// None where its engine has no route for it.
pub(crate) fn between_levels(
    engine: EngineHint,
    client: &reqwest::Client,
    base: &str,
) -> Option<(BetweenLevels, Arc<Resets>)> {
    let route = reset_route(engine)?;
    let resets = Arc::new(Resets {
        route,
        ..Resets::default()
    });
    let url = format!("{}{route}", base.trim_end_matches('/'));
    let (client, tally) = (client.clone(), resets.clone());
    let work = BetweenLevels(Arc::new(move || {
        let (client, url, tally) = (client.clone(), url.clone(), tally.clone());
        Box::pin(async move {
            // Bounded: a server that hangs here must not hold the sweep.
            let answer = client
                .post(&url)
                .timeout(Duration::from_secs(30))
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => {
                    tally.ok.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r) => tally.failed_with(format!("HTTP {}", r.status().as_u16())),
                Err(e) => {
                    use crate::load::request::{classify_transport_error, transport_message};
                    tally.failed_with(transport_message(&e, classify_transport_error(&e)));
                }
            }
        })
    }));
    Some((work, resets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_count_what_answered() {
        let r = Resets {
            route: "/reset_prefix_cache",
            ..Resets::default()
        };
        assert_eq!(
            r.text(),
            "POST /reset_prefix_cache was never needed: one level"
        );
        r.ok.fetch_add(3, Ordering::Relaxed);
        assert_eq!(
            r.text(),
            "reset before each level after the first: POST /reset_prefix_cache answered 3 of 3"
        );
        r.failed_with("HTTP 404".into());
        r.failed_with("HTTP 500".into());
        assert_eq!(
            r.text(),
            "POST /reset_prefix_cache answered 3 of 5; the rest failed (HTTP 404): those levels may have found a warm cache"
        );
        assert_eq!(reset_route(EngineHint::Ollama), None);
        assert_eq!(reset_route(EngineHint::Sglang), Some("/flush_cache"));
    }
}
