use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;

/// Detection against a fake server: `bodies` by path; every path asked is
/// logged.
fn detect_on(bodies: &[(&str, Value)]) -> ((Engine, Option<String>), Vec<&'static str>) {
    let bodies: BTreeMap<&str, Value> = bodies.iter().cloned().collect();
    let mut asked = Vec::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let found = runtime.block_on(Engine::detect(|path| {
        asked.push(path);
        std::future::ready(bodies.get(path).cloned())
    }));
    (found, asked)
}

#[test]
fn every_engine_round_trips_its_saved_name() {
    let names: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
    assert_eq!(
        names,
        [
            "ollama",
            "llamacpp",
            "sglang",
            "tgi",
            "tokbench-sim",
            "vllm",
            "openai-compatible"
        ]
    );
    for engine in Engine::ALL {
        assert_eq!(Engine::from_name(engine.name()), Some(engine));
        assert_eq!(Engine::of(engine.name()), engine);
        assert_eq!(engine.to_string(), engine.name());
    }
    // A name of the user's own (`--engine trtllm`) behaves as OpenAI-compatible.
    assert_eq!(Engine::from_name("trtllm"), None);
    assert_eq!(Engine::of("trtllm"), Engine::OpenaiCompatible);
    assert_eq!(Engine::of(""), Engine::OpenaiCompatible);
}

/// A captured answer of a real server (tests/fixtures/).
fn captured(path: &str) -> Value {
    let file = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(&file).expect("fixture")).expect("JSON")
}

#[test]
fn captured_answers_name_their_engine_and_version() {
    let ((engine, version), _) = detect_on(&[("/api/version", captured("ollama/version.json"))]);
    assert_eq!(
        (engine, version.as_deref()),
        (Engine::Ollama, Some("0.9.0"))
    );
    let ((engine, version), _) =
        detect_on(&[("/props", captured("captures/llama-server/props.json"))]);
    assert_eq!(
        (engine, version.as_deref()),
        (Engine::Llamacpp, Some("b0-unknown"))
    );
}

#[test]
fn detection_keeps_its_order_and_asks_each_path_once() {
    let ollama = ("/api/version", json!({"version": "0.9.0"}));
    let llama = ("/props", json!({"total_slots": 4, "build_info": "b6400"}));
    let sglang = ("/get_server_info", json!({"version": "0.4.6"}));
    let tgi = (
        "/info",
        json!({"router": "text-generation-router", "version": "3.0"}),
    );
    let vllm = ("/version", json!({"version": "0.12.0"}));
    let sim = ("/version", json!({"version": crate::sim::SIM_VERSION}));
    let all = [
        ollama.clone(),
        llama.clone(),
        sglang.clone(),
        tgi.clone(),
        vllm.clone(),
    ];
    // Every endpoint answers: each engine wins over all after it.
    for (i, expected) in [
        Engine::Ollama,
        Engine::Llamacpp,
        Engine::Sglang,
        Engine::Tgi,
        Engine::Vllm,
    ]
    .into_iter()
    .enumerate()
    {
        let ((engine, _), _) = detect_on(&all[i..]);
        assert_eq!(engine, expected, "from {:?}", all[i].0);
    }
    assert_eq!(
        detect_on(&[ollama]).0,
        (Engine::Ollama, Some("0.9.0".into()))
    );
    assert_eq!(
        detect_on(&[llama]).0,
        (Engine::Llamacpp, Some("b6400".into()))
    );
    assert_eq!(
        detect_on(&[sglang]).0,
        (Engine::Sglang, Some("0.4.6".into()))
    );
    assert_eq!(detect_on(&[tgi]).0, (Engine::Tgi, Some("3.0".into())));
    assert_eq!(
        detect_on(&[sim]).0,
        (Engine::TokbenchSim, Some(crate::sim::SIM_VERSION.into()))
    );
    assert_eq!(detect_on(&[vllm]).0, (Engine::Vllm, Some("0.12.0".into())));
    // Nothing answers: every path asked once, in order (/version once for
    // the simulator and vLLM both).
    let (found, asked) = detect_on(&[]);
    assert_eq!(found, (Engine::OpenaiCompatible, None));
    assert_eq!(
        asked,
        [
            "/api/version",
            "/props",
            "/get_server_info",
            "/info",
            "/version"
        ]
    );
}

#[test]
fn detection_needs_each_engines_own_fields() {
    // /props without total_slots, /info without router or cap: not theirs.
    let (found, _) = detect_on(&[
        ("/props", json!({"build_info": "b1"})),
        ("/info", json!({"model_id": "x"})),
    ]);
    assert_eq!(found, (Engine::OpenaiCompatible, None));
    // /api/version without a string version is not Ollama.
    assert_eq!(
        detect_on(&[("/api/version", json!({"version": 3}))]).0,
        (Engine::OpenaiCompatible, None)
    );
    // llama.cpp without build_info, TGI by its cap alone: no version.
    assert_eq!(
        detect_on(&[("/props", json!({"total_slots": 1}))]).0,
        (Engine::Llamacpp, None)
    );
    assert_eq!(
        detect_on(&[("/info", json!({"max_concurrent_requests": 128}))]).0,
        (Engine::Tgi, None)
    );
}

#[test]
fn gauge_sources_of_each_engine() {
    use GaugeSource::*;
    let sources: Vec<(&str, &[GaugeSource])> = Engine::ALL
        .iter()
        .map(|e| (e.name(), e.gauge_sources()))
        .collect();
    assert_eq!(
        sources,
        [
            ("ollama", &[OllamaPs][..]),
            ("llamacpp", &[LlamacppMetrics, LlamacppSlots][..]),
            ("sglang", &[SglangMetrics][..]),
            ("tgi", &[TgiMetrics][..]),
            ("tokbench-sim", &[VllmMetrics][..]),
            ("vllm", &[VllmMetrics][..]),
            ("openai-compatible", &[VllmMetrics][..]),
        ]
    );
    assert_eq!(VllmMetrics.path(), "/metrics");
    assert_eq!(LlamacppMetrics.path(), "/metrics");
    assert_eq!(LlamacppSlots.path(), "/slots");
    assert_eq!(OllamaPs.path(), "/api/ps");
    assert_eq!(SglangMetrics.path(), "/metrics");
    assert_eq!(TgiMetrics.path(), "/metrics");
    let kv: Vec<Engine> = Engine::ALL
        .into_iter()
        .filter(|e| e.spec().kv_blocks)
        .collect();
    assert_eq!(kv, [Engine::Vllm]);
}

#[test]
fn advice_of_each_engine() {
    let setting = |e: Engine| e.advice().slots.map(|s| s.setting);
    assert_eq!(setting(Engine::Ollama), Some("OLLAMA_NUM_PARALLEL"));
    assert_eq!(setting(Engine::Llamacpp), Some("-np"));
    assert_eq!(setting(Engine::Vllm), Some("--max-num-seqs"));
    assert_eq!(setting(Engine::Sglang), Some("--max-running-requests"));
    assert_eq!(setting(Engine::Tgi), Some("--max-batch-total-tokens"));
    for e in [Engine::TokbenchSim, Engine::OpenaiCompatible] {
        assert_eq!(setting(e), None, "{e}");
    }
    let named: Vec<Engine> = Engine::ALL
        .into_iter()
        .filter(|e| e.advice().slots.is_some_and(|s| s.named_when_queueing))
        .collect();
    assert_eq!(named, [Engine::Ollama]);
    assert_eq!(
        one_slot_settings(),
        "OLLAMA_NUM_PARALLEL=1, llama-server -np 1, SGLang --max-running-requests 1, TGI --max-batch-size 1, vLLM --max-num-seqs 1"
    );
    let on_503 = |e: Engine| e.advice().on_503;
    assert!(on_503(Engine::Ollama).is_some_and(|s| s.contains("OLLAMA_MAX_QUEUE")));
    assert!(on_503(Engine::Vllm).is_some_and(|s| s.contains("--max-num-queued-reqs")));
    assert!(on_503(Engine::Llamacpp).is_some_and(|s| s.contains("loads the model")));
    assert_eq!(on_503(Engine::Tgi), Some(CONCURRENCY_CAP));
    for e in [
        Engine::Sglang,
        Engine::TokbenchSim,
        Engine::OpenaiCompatible,
    ] {
        assert_eq!(on_503(e), None, "{e}");
    }
}

#[test]
fn simulator_personalities_play_their_engines() {
    for personality in crate::sim::SimEngine::ALL {
        let engine = Engine::played_by(personality);
        assert_eq!(engine.sim_personality(), Some(personality));
        // The personality's own name on the command line is the engine it plays.
        let played = Engine::from_name(personality.name()).expect("a known engine");
        assert_eq!(played.sim_personality(), Some(personality));
    }
    assert_eq!(
        Engine::played_by(crate::sim::SimEngine::Vllm),
        Engine::TokbenchSim
    );
    assert_eq!(
        Engine::played_by(crate::sim::SimEngine::Sglang),
        Engine::Sglang
    );
    assert_eq!(Engine::played_by(crate::sim::SimEngine::Tgi), Engine::Tgi);
    assert_eq!(Engine::OpenaiCompatible.sim_personality(), None);
}
