//! The merged `summary.json`: knee, capacity, cost and the diagnoses that
//! can be recomputed from merged levels.

// More of the merge: the parent's items, private ones included.
use super::*;

/// Seconds to add to a shard's wall clock to read the server's: its
/// `clock_offset_ms` (server minus host), when that is larger than the
/// offset's own uncertainty; 0 otherwise. A `Date` header has whole
/// seconds, so an offset of -300 +- 500 ms says the clocks agree as far as
/// it can tell, and shifting by it would scatter synchronized hosts.
pub(crate) fn clock_correction_s(shard: &ShardSection) -> f64 {
    let Some(offset) = shard.clock_offset_ms.filter(|o| o.is_finite()) else {
        return 0.0;
    };
    let error = shard
        .clock_offset_error_ms
        .filter(|e| e.is_finite() && *e >= 0.0)
        .unwrap_or(0.0);
    if offset.abs() > error {
        offset / 1000.0
    } else {
        0.0
    }
}

pub(super) fn slo_of(run: &schema::RunSection) -> CapacitySlo {
    run.slo.clone().unwrap_or_default().capacity_slo()
}

/// The levels of one series judged as the shards were: by the SLO the
/// user gave, or by the knee where they gave none (`run.slo.given`).
pub(super) fn decision_of(
    levels: &[(String, LevelFile)],
    series: u64,
    slo: &CapacitySlo,
    slo_given: bool,
) -> Decision {
    let points: Vec<LevelPoint> = levels
        .iter()
        .filter(|(_, l)| l.series.unwrap_or(0) == series && l.steady != Some(false))
        .filter_map(|(_, l)| l.point())
        .collect();
    decide_judged(&points, slo, slo_given)
}

pub(super) fn diagnosis(id: &str, message: String, evidence: Value) -> DiagnosisEntry {
    DiagnosisEntry {
        id: id.into(),
        message,
        evidence,
    }
}

pub(super) fn merged_summary(
    runs: &[ShardRun],
    held: &[(usize, Holds)],
    levels: &[(String, LevelFile)],
    missing: &[u32],
    warnings: &[String],
) -> SummaryFile {
    let (first_i, first) = (&held[0].0, &held[0].1);
    let base = &runs[*first_i].summary;
    let mut run = base.run.clone();
    let mut indexes: Vec<u32> = held
        .iter()
        .flat_map(|(_, h)| h.indexes.iter().copied())
        .collect();
    indexes.sort_unstable();
    // A merged folder is no one shard: `run.shard` gives way to
    // `run.merged`, which says which shards it holds.
    run.shard = None;
    fields::set_run_merged(
        &mut run,
        &MergedFrom {
            merged_from: Some(indexes.len() as u32),
            count: Some(first.count),
            indexes: Some(indexes.clone()),
            missing: Some(missing.to_vec()),
            other: Map::new(),
        },
    );
    // The earliest shard's start (RFC 3339 UTC strings sort as times).
    run.started_at = held
        .iter()
        .filter_map(|(i, _)| runs[*i].summary.run.started_at.clone())
        .min();
    // Over when every shard merged is over: the latest end, else none.
    run.ended_at = held
        .iter()
        .map(|(i, _)| runs[*i].summary.run.ended_at.clone())
        .collect::<Option<Vec<String>>>()
        .and_then(|ends| ends.into_iter().max());

    let slo = slo_of(&run);
    let slo_given = run.slo.as_ref().is_none_or(RunSlo::is_given);
    let latest = levels
        .iter()
        .map(|(_, l)| l.series.unwrap_or(0))
        .max()
        .unwrap_or(0);
    let decision = decision_of(levels, latest, &slo, slo_given);
    let all_points: Vec<LevelPoint> = levels.iter().filter_map(|(_, l)| l.point()).collect();
    let rounds: Vec<Value> = rounds_spread(&all_points)
        .iter()
        .map(|s| s.to_json())
        .collect();

    // Cost: the price the shards were given (in shard 0's cost object),
    // at the merged capacity. The utilization is not saved on its own:
    // cost per million at full use over the effective one gives it back.
    let cost_json = base.cost.as_ref().and_then(|c| {
        let price = number(&c.gpu_price_per_hour)?;
        let capacity = decision.capacity.as_ref().ok()?;
        let utilization = crate::analysis::cost::utilization_of(
            number(&c.cost_per_m_output),
            number(&c.effective_cost_per_m),
        );
        let figured = cost(
            capacity.output_throughput,
            price,
            number(&c.api_price_per_m),
            utilization,
        );
        schema::typed(figured.to_json())
    });

    let mut diagnoses: Vec<DiagnosisEntry> = [
        run.rounds.and_then(single_round),
        no_rise(&decision),
        no_capacity(&decision),
    ]
    .into_iter()
    .flatten()
    .map(|d| diagnosis(d.id, d.message, d.evidence))
    .collect();
    if !missing.is_empty() {
        diagnoses.push(diagnosis(
            "shards_missing",
            format!(
                "merged without {} (--allow-missing): counts and throughputs are of the {} shards given",
                label(missing, first.count),
                first.count as usize - missing.len()
            ),
            json!({"missing": missing, "count": first.count}),
        ));
    }
    let skews: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("starts differ"))
        .collect();
    if let Some(w) = skews.first() {
        diagnoses.push(diagnosis(
            "shard_start_skew",
            (*w).clone(),
            json!({"levels": skews.len(), "threshold_ms": START_SKEW_WARN_S * 1000.0}),
        ));
    }

    let series: Vec<SeriesEntry> = levels
        .iter()
        .map(|(_, l)| l.series.unwrap_or(0))
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .map(|index| {
            let d = decision_of(levels, index, &slo, slo_given);
            let shard0 = base.series.iter().find(|s| s.index == Some(index));
            let label = levels
                .iter()
                .find(|(_, l)| l.series.unwrap_or(0) == index)
                .and_then(|(_, l)| l.series_label.clone());
            SeriesEntry {
                index: Some(index),
                label,
                server: shard0.map_or(Value::Null, |s| s.server.clone()),
                knee: schema::typed(d.knee_json()),
                capacity: schema::typed(d.capacity_json()),
                other: Map::new(),
            }
        })
        .collect();

    let (mut completed, mut input, mut output) = (0u64, 0u64, 0u64);
    for (_, l) in levels {
        completed += l.completed.unwrap_or(0);
        input += l.total_input_tokens.unwrap_or(0);
        output += l.total_output_tokens.unwrap_or(0);
    }
    let mean = |t: u64| (completed > 0).then(|| round3(t as f64 / completed as f64));
    let mut traffic = json!({
        "profile": run.profile,
        "input_mean": mean(input),
        "output_mean": mean(output),
    });
    if let (Value::Object(t), Some(r)) = (&mut traffic, base.traffic.get("range_ratio")) {
        t.insert("range_ratio".into(), r.clone());
    }

    let mut other = Map::new();
    other.insert(
        "merge".into(),
        json!({
            "inputs": held.iter().map(|(i, _)| runs[*i].name.clone()).collect::<Vec<_>>(),
            "missing": missing,
            "warnings": warnings,
        }),
    );
    SummaryFile {
        schema_version: Some(SCHEMA_VERSION),
        tokbench_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        run,
        traffic,
        dataset: base.dataset.clone(),
        levels: levels
            .iter()
            .map(|(name, l)| LevelFile {
                histograms: None,
                samples: None,
                file: Some(name.clone()),
                ..l.clone()
            })
            .collect(),
        knee: schema::typed(decision.knee_json()),
        capacity: schema::typed(decision.capacity_json()),
        series,
        capacity_reason: Some(decision.capacity_line()),
        cost: cost_json,
        diagnoses,
        rounds,
        warmup: Value::Null,
        search: None,
        resumed: None,
        target_changes: Vec::new(),
        tune: None,
        fit: None,
        // A merged run was not judged: its shards' thresholds stay theirs.
        thresholds: Vec::new(),
        other,
    }
}
