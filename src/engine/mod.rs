//! One home per engine (docs/architecture.md, "How to add an engine"): for
//! each server tokbench knows, its saved name, how it is recognised, which
//! gauges the probe reads, the advice a diagnosis gives, and the simulator
//! personality that plays it.
//!
//! Each engine is one file here with one [`Spec`]; [`Engine::spec`] is the
//! only match on the engine, so a new variant is a compile error until it
//! has its file. Everything here is pure: detection takes the fetch as an
//! argument (the probe passes its HTTP GET), and nothing reads a clock.
//!
//! Result files keep the engine as a string (`run.engine`: `"vllm"`, ...):
//! [`Engine::name`] writes it and [`Engine::from_name`] reads it back. A name
//! given with `--engine` that no engine here has is kept as given and behaves
//! as [`Engine::OpenaiCompatible`] ([`Engine::of`]).

mod length;
mod llamacpp;
mod ollama;
mod openai_compatible;
mod sglang;
mod sim;
mod tgi;
mod vllm;

use std::future::Future;

use serde_json::Value;

use crate::sim::SimEngine;

pub(crate) use self::length::LengthAsk;
pub(crate) use self::tgi::CONCURRENCY_CAP;

/// A server tokbench knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Engine {
    Ollama,
    /// llama.cpp's `llama-server`.
    Llamacpp,
    Sglang,
    /// Hugging Face text-generation-inference.
    Tgi,
    /// tokbench's own simulator playing vLLM (`tokbench sim`, `demo`).
    TokbenchSim,
    Vllm,
    /// Anything else that speaks OpenAI's API: never detected, the fallback.
    OpenaiCompatible,
}

/// What one engine is, in its own file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    /// The name saved in result files (`run.engine`, a series' `server`) and
    /// shown in the header.
    pub name: &'static str,
    /// How it is recognised; None: never by itself (the fallback).
    pub detect: Option<Detect>,
    /// What the probe scrapes during a run, in this order.
    pub gauges: &'static [GaugeSource],
    /// The settings and limits a diagnosis names.
    pub advice: Advice,
    /// The simulator personality that plays it, where one exists. Only the
    /// engine tests read it (each personality must play its engine), so it
    /// is dead outside them by design.
    #[cfg_attr(not(test), allow(dead_code))]
    pub sim: Option<SimEngine>,
    /// Its `/metrics` says how many KV-cache blocks it has
    /// (`vllm:cache_config_info{num_gpu_blocks}`): a series label shows a change.
    pub kv_blocks: bool,
}

/// How an engine is recognised: an endpoint only it has, and what of that
/// endpoint's JSON body says it is this engine.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Detect {
    /// GET this path of the server root.
    pub path: &'static str,
    /// None: not this engine. Some(version): this engine, with its version
    /// when the body says it.
    pub recognize: fn(&Value) -> Option<Option<String>>,
}

impl Detect {
    /// An engine's `detect`: recognised by `recognize` on the body at `path`.
    const fn at(
        path: &'static str,
        recognize: fn(&Value) -> Option<Option<String>>,
    ) -> Option<Detect> {
        Some(Detect { path, recognize })
    }
}

/// A document the live probe scrapes; `probe::live` reads each kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GaugeSource {
    /// vLLM's Prometheus names (`vllm:num_requests_running`, ...).
    VllmMetrics,
    /// `llama-server --metrics` (`llamacpp:requests_processing`, ...).
    LlamacppMetrics,
    /// llama.cpp's `/slots`: busy slots of all.
    LlamacppSlots,
    /// Ollama's `/api/ps`: models loaded, share in GPU memory.
    OllamaPs,
    /// SGLang's Prometheus names (`sglang:num_running_reqs`, ...).
    SglangMetrics,
    /// TGI's Prometheus names (`tgi_queue_size`, ...).
    TgiMetrics,
}

impl GaugeSource {
    /// The path scraped, under the server root.
    pub(crate) fn path(self) -> &'static str {
        match self {
            GaugeSource::VllmMetrics
            | GaugeSource::LlamacppMetrics
            | GaugeSource::SglangMetrics
            | GaugeSource::TgiMetrics => "/metrics",
            GaugeSource::LlamacppSlots => "/slots",
            GaugeSource::OllamaPs => "/api/ps",
        }
    }
}

/// What a diagnosis says of an engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Advice {
    /// The setting for how many requests run at once.
    pub slots: Option<Slots>,
    /// What an HTTP 503 from it means; None: nothing known of this engine
    /// (a generic sentence).
    pub on_503: Option<&'static str>,
}

/// An engine's parallel-slot setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slots {
    /// As the user sets it: `OLLAMA_NUM_PARALLEL`, `-np`, `--max-num-seqs`.
    pub setting: &'static str,
    /// One slot, as a flat sweep's diagnosis suggests it (`llama-server -np 1`).
    pub one_slot: &'static str,
    /// A slot-queueing diagnosis names the setting and guesses its value
    /// (Ollama, whose default of 1 slot is the usual cause).
    pub named_when_queueing: bool,
}

impl Engine {
    /// Every engine, in detection order: the first that recognises the
    /// server wins (Ollama before llama.cpp before SGLang before TGI before
    /// the simulator before vLLM); the fallback last.
    pub(crate) const ALL: [Engine; 7] = [
        Engine::Ollama,
        Engine::Llamacpp,
        Engine::Sglang,
        Engine::Tgi,
        Engine::TokbenchSim,
        Engine::Vllm,
        Engine::OpenaiCompatible,
    ];

    /// Its file's [`Spec`]: the one match on the engine.
    pub(crate) fn spec(self) -> &'static Spec {
        match self {
            Engine::Ollama => &ollama::SPEC,
            Engine::Llamacpp => &llamacpp::SPEC,
            Engine::Sglang => &sglang::SPEC,
            Engine::Tgi => &tgi::SPEC,
            Engine::TokbenchSim => &sim::SPEC,
            Engine::Vllm => &vllm::SPEC,
            Engine::OpenaiCompatible => &openai_compatible::SPEC,
        }
    }

    /// The name saved in result files.
    pub(crate) fn name(self) -> &'static str {
        self.spec().name
    }

    /// The engine a saved name is; None for a name no engine has.
    pub(crate) fn from_name(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == name)
    }

    /// How a saved name behaves: its engine, or OpenAI-compatible for a name
    /// no engine has (an `--engine` of the user's own).
    pub(crate) fn of(name: &str) -> Engine {
        Engine::from_name(name).unwrap_or(Engine::OpenaiCompatible)
    }

    /// What a user calls it: `vLLM`, `llama.cpp's llama-server`.
    pub(crate) fn display_name(self) -> &'static str {
        match self {
            Engine::Ollama => "Ollama",
            Engine::Llamacpp => "llama.cpp's llama-server",
            Engine::Sglang => "SGLang",
            Engine::Tgi => "TGI",
            Engine::TokbenchSim => "tokbench's simulator (vLLM-like)",
            Engine::Vllm => "vLLM",
            Engine::OpenaiCompatible => "an OpenAI-compatible server",
        }
    }

    /// The `--backend`s it answers, the one to use first; empty for an
    /// engine not recognised (nothing is known of its routes).
    pub(crate) fn backends(self) -> &'static [&'static str] {
        match self {
            Engine::Ollama => &["ollama-chat", "ollama-generate", "openai-chat"],
            Engine::Tgi => &["openai-chat", "tgi-generate"],
            Engine::Llamacpp | Engine::Sglang | Engine::TokbenchSim | Engine::Vllm => {
                &["openai-chat", "openai-completions"]
            }
            Engine::OpenaiCompatible => &[],
        }
    }

    pub(crate) fn gauge_sources(self) -> &'static [GaugeSource] {
        self.spec().gauges
    }

    pub(crate) fn advice(self) -> Advice {
        self.spec().advice
    }

    /// The simulator personality that plays it.
    #[cfg(test)]
    pub(crate) fn sim_personality(self) -> Option<SimEngine> {
        self.spec().sim
    }

    /// What detection calls a simulator of this personality.
    #[cfg(test)]
    pub(crate) fn played_by(personality: SimEngine) -> Engine {
        match personality {
            SimEngine::Vllm => Engine::TokbenchSim,
            SimEngine::Ollama => Engine::Ollama,
            SimEngine::Llamacpp => Engine::Llamacpp,
            SimEngine::Sglang => Engine::Sglang,
            SimEngine::Tgi => Engine::Tgi,
        }
    }

    /// Which engine answers, and its version: each engine's endpoint in
    /// [`Engine::ALL`]'s order, each path fetched at most once. `get` fetches
    /// a path of the server root: its JSON body, None on any failure.
    pub(crate) async fn detect<F, Fut>(mut get: F) -> (Engine, Option<String>)
    where
        F: FnMut(&'static str) -> Fut,
        Fut: Future<Output = Option<Value>>,
    {
        let mut fetched: Vec<(&'static str, Option<Value>)> = Vec::new();
        for engine in Engine::ALL {
            let Some(detect) = engine.spec().detect else {
                continue;
            };
            let body = match fetched.iter().find(|(path, _)| *path == detect.path) {
                Some((_, body)) => body.clone(),
                None => {
                    let body = get(detect.path).await;
                    fetched.push((detect.path, body.clone()));
                    body
                }
            };
            if let Some(version) = body.as_ref().and_then(detect.recognize) {
                return (engine, version);
            }
        }
        (Engine::OpenaiCompatible, None)
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The one-slot settings of every engine that has one, for a sweep that
/// does not rise: `OLLAMA_NUM_PARALLEL=1, llama-server -np 1, vLLM --max-num-seqs 1`.
pub(crate) fn one_slot_settings() -> String {
    Engine::ALL
        .into_iter()
        .filter_map(|e| e.advice().slots.map(|s| s.one_slot))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A string field of a JSON body.
fn str_field(body: &Value, key: &str) -> Option<String> {
    body.get(key).and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests;
