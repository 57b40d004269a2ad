//! The schema's tests: the structs against `assets/schema/`, and old files.

use super::*;
use serde_json::json;

const V0_LEVEL: &str = include_str!("../../tests/fixtures/schema_v0/sweep-c2.json");
const V0_SUMMARY: &str = include_str!("../../tests/fixtures/schema_v0/summary.json");
const V0_REQUESTS: &str = include_str!("../../tests/fixtures/schema_v0/requests.jsonl");

#[test]
fn a_version_0_level_file_loads_and_writes_back_unchanged() {
    let raw: Value = serde_json::from_str(V0_LEVEL).expect("json");
    let level: LevelFile = serde_json::from_value(raw.clone()).expect("loads");
    assert_eq!(level.schema_version, None);
    assert_eq!(level.max_concurrency, Some(2));
    assert_eq!(level.completed, Some(4));
    assert_eq!(level.mode_or_planned(), "planned");
    assert!(level.percentile("ttft", "99").is_some());
    assert!(level.percentile("e2el", "90").is_some());
    assert_eq!(level.to_value(), raw, "every key kept, none added");
}

#[test]
fn a_version_0_summary_loads_and_writes_back_unchanged() {
    let raw: Value = serde_json::from_str(V0_SUMMARY).expect("json");
    let summary: SummaryFile = serde_json::from_value(raw.clone()).expect("loads");
    assert_eq!(summary.schema_version, None);
    assert_eq!(summary.levels.len(), 2);
    assert_eq!(summary.levels[1].file.as_deref(), Some("sweep-c2.json"));
    assert_eq!(summary.diagnoses[0].id, "single_round");
    assert_eq!(summary.target_changes.len(), 2);
    assert_eq!((summary.run.seed, summary.run.gpus), (Some(7), Some(1)));
    assert_eq!(summary.run.other["prompt_source"], "random");
    let capacity = summary.capacity.as_ref().expect("a capacity");
    assert_eq!(capacity.concurrency, Some(2));
    assert_eq!(number(&capacity.share_of_peak), Some(1.0));
    assert_eq!(
        summary
            .cost
            .as_ref()
            .and_then(|c| number(&c.gpu_price_per_hour)),
        Some(2.0)
    );
    assert_eq!(
        summary.to_value(),
        raw,
        "numbers keep their form (1, not 1.0)"
    );
}

#[test]
fn version_0_request_lines_load_and_write_back_unchanged() {
    for line in V0_REQUESTS.lines() {
        let raw: Value = serde_json::from_str(line).expect("json");
        let r: RequestLine = serde_json::from_value(raw.clone()).expect("loads");
        assert!(r.level.is_some() && r.id.is_some());
        assert_eq!(serde_json::to_value(&r).expect("serializes"), raw);
    }
}

/// Every key a struct can write, found in the schema kept by hand.
fn assert_named(value: &Value, schema: &str, what: &str) {
    let schema: Value = serde_json::from_str(schema).expect("schema json");
    let props = schema["properties"].as_object().expect("properties");
    for key in value.as_object().expect("an object").keys() {
        assert!(
            props.contains_key(key),
            "{what}: {key} is not in its assets/schema/ file"
        );
    }
}

#[test]
fn the_schemas_name_every_key_the_structs_write() {
    let some = Some(Value::Null);
    let level = LevelFile {
        schema_version: Some(SCHEMA_VERSION),
        burstiness: Some(1.0),
        request_goodput: Some(1.0),
        steady: Some(true),
        steady_reason: some.clone(),
        goodput: some.clone(),
        waiting: some.clone(),
        streaming: some.clone(),
        send_lateness: some.clone(),
        turns: Some(Vec::new()),
        prefix_cache_hit_rate: Some(0.0),
        replay_timeline_s: Some(0.0),
        gpu: some,
        histograms: Some(BTreeMap::new()),
        samples: Some(BTreeMap::new()),
        file: Some("sweep-c1.json".into()),
        ..LevelFile::default()
    };
    let level_schema = include_str!("../../assets/schema/level.schema.json");
    assert_named(&level.to_value(), level_schema, "LevelFile");
    let summary = SummaryFile {
        schema_version: Some(SCHEMA_VERSION),
        ..SummaryFile::default()
    };
    let summary_schema = include_str!("../../assets/schema/summary.schema.json");
    assert_named(&summary.to_value(), summary_schema, "SummaryFile");
    let entry = serde_json::to_value(SeriesEntry::default()).expect("serializes");
    let items: Value = serde_json::from_str(summary_schema).expect("schema json");
    let items = items["properties"]["series"]["items"].to_string();
    assert_named(&entry, &items, "SeriesEntry");
    let threshold = ThresholdEntry {
        value: Some(1.0),
        level: Some(Value::from(4)),
        series: Some(0),
        reason: Some("x".into()),
        ..ThresholdEntry::default()
    };
    let threshold = serde_json::to_value(threshold).expect("serializes");
    let items: Value = serde_json::from_str(summary_schema).expect("schema json");
    let items = items["properties"]["thresholds"]["items"].to_string();
    assert_named(&threshold, &items, "ThresholdEntry");
    let line = RequestLine {
        prompt: Some("hi".into()),
        ..RequestLine::default()
    };
    let line = serde_json::to_value(line).expect("serializes");
    let request_schema = include_str!("../../assets/schema/request.schema.json");
    assert_named(&line, request_schema, "RequestLine");
}

#[test]
fn missing_and_unknown_keys_are_tolerated() {
    let level: LevelFile =
        serde_json::from_str(r#"{"max_concurrency": 4, "new_key": [1]}"#).expect("loads");
    assert_eq!(level.max_concurrency, Some(4));
    assert!(!level.partial);
    assert_eq!(level.stats.get("new_key"), Some(&serde_json::json!([1])));
    let odd: LevelFile = serde_json::from_str(
        r#"{"completed": 4.0, "failed": "none", "output_throughput": "fast", "partial": 1}"#,
    )
    .expect("odd types read as absent");
    assert_eq!(odd.completed, Some(4));
    assert_eq!((odd.failed, odd.output_throughput), (None, None));
    assert!(!odd.partial);
    let summary: SummaryFile = serde_json::from_str(r#"{"levels": []}"#).expect("loads");
    assert!(summary.levels.is_empty() && summary.knee.is_none());
}

/// Every optional key of every struct that reads leniently (the
/// `serde_with::apply` on each): set to a value of each JSON type in turn,
/// the file still loads, whatever type the key takes.
#[test]
fn every_optional_key_of_a_lenient_struct_tolerates_a_wrong_type() {
    fn check<T: Default + Serialize + DeserializeOwned>(name: &str) {
        let Value::Object(keys) = serde_json::to_value(T::default()).expect("serializes") else {
            panic!("{name} is not an object");
        };
        let optional = keys.iter().filter(|(_, v)| v.is_null()).map(|(k, _)| k);
        let mut checked = 0;
        for key in optional {
            for wrong in [
                json!(true),
                json!("text"),
                json!(-1.5),
                json!([["a"]]),
                json!({"a": {}}),
            ] {
                let read: Result<T, _> = serde_json::from_value(json!({ key.as_str(): wrong }));
                assert!(read.is_ok(), "{name}.{key} = {wrong}: {:?}", read.err());
            }
            checked += 1;
        }
        assert!(checked > 0, "{name} writes its absent keys as null");
    }
    check::<ClientLoad>("ClientLoad");
    check::<ProbeSection>("ProbeSection");
    check::<ProbeLatency>("ProbeLatency");
    check::<MergedFrom>("MergedFrom");
    check::<ShardEntry>("ShardEntry");
    check::<RunSection>("RunSection");
    check::<ShardSection>("ShardSection");
    check::<RunSlo>("RunSlo");
    check::<Knee>("Knee");
    check::<Capacity>("Capacity");
    check::<Cost>("Cost");
    check::<SeriesEntry>("SeriesEntry");
    check::<RequestLine>("RequestLine");
}

/// `series` is read entry by entry: the entry that is not an object is left
/// out, the two others keep their index, label and capacity; a `series`
/// that is not a list reads as none.
#[test]
fn a_bad_series_entry_leaves_the_others() {
    let summary: SummaryFile = serde_json::from_value(json!({
        "levels": [],
        "series": [
            {"index": 0, "label": "series 1", "capacity": {"concurrency": 8}},
            "not an entry",
            {"index": 1.0, "label": "slots 4", "knee": null, "server": {"total_slots": 4}}
        ]
    }))
    .expect("loads");
    let read: Vec<_> = summary
        .series
        .iter()
        .map(|s| {
            let capacity = s.capacity.as_ref().and_then(|c| c.concurrency);
            (s.index, s.label.as_deref(), capacity)
        })
        .collect();
    assert_eq!(
        read,
        [
            (Some(0), Some("series 1"), Some(8)),
            (Some(1), Some("slots 4"), None)
        ]
    );
    assert_eq!(summary.series[1].server["total_slots"], 4);
    let summary: SummaryFile =
        serde_json::from_value(json!({"levels": [], "series": {"index": 0}})).expect("loads");
    assert!(summary.series.is_empty());
}

/// A saved level as the decision math reads it (`--resume`, `merge`): the
/// median and p99 from their keys, 3 failed of 12 answered = 0.25, and a
/// throughput the file lacks read as 0.
#[test]
fn a_saved_level_gives_its_figures() {
    let level: LevelFile = serde_json::from_value(json!({
        "per_stream_tok_s": 40.5, "stream_decode_tok_s": 52.0,
        "median_ttft_ms": 120.0, "p99_ttft_ms": 310.0, "p99_tpot_ms": 21.5,
        "completed": 9, "failed": 3
    }))
    .expect("loads");
    let f = level.figures();
    assert_eq!(f.output_throughput, 0.0);
    assert_eq!(f.per_stream_tok_s, 40.5);
    assert_eq!(f.stream_decode_tok_s, Some(52.0));
    assert_eq!(
        (f.p50_ttft_ms, f.p99_ttft_ms, f.p99_tpot_ms),
        (Some(120.0), Some(310.0), Some(21.5))
    );
    assert_eq!(f.error_rate, 0.25);
}

/// `--resume` and `merge` judge a saved level through one `point`.
#[test]
fn a_saved_level_is_a_point_when_it_says_enough() {
    let point = |v: Value| {
        serde_json::from_value::<LevelFile>(v)
            .expect("loads")
            .point()
            .map(|p| {
                (
                    p.concurrency,
                    p.kind,
                    p.partial,
                    p.figures.output_throughput,
                )
            })
    };
    // A file from before modes is a planned level.
    assert_eq!(
        point(json!({"max_concurrency": 8, "output_throughput": 640.0})),
        Some((8, crate::record::Mode::Planned, false, 640.0))
    );
    assert_eq!(
        point(
            json!({"max_concurrency": 8, "output_throughput": 0.0, "mode": "manual",
                     "partial": true})
        ),
        Some((8, crate::record::Mode::Manual, true, 0.0))
    );
    // No throughput, no streams, or a mode this version does not know: no point.
    assert_eq!(point(json!({"max_concurrency": 8})), None);
    assert_eq!(point(json!({"output_throughput": 640.0})), None);
    assert_eq!(
        point(json!({"max_concurrency": 8, "output_throughput": 640.0, "mode": "burst"})),
        None
    );
}
