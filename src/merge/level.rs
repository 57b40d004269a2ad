//! One level of every shard made into one level file.

// More of the merge: the parent's items, private ones included.
use super::*;
use crate::analysis::goodput::Goodput;

/// The recorder's name for a merged level, at its merged concurrency or
/// rate (a mode no tokbench wrote is named as a planned level).
pub(super) fn file_base(level: &LevelFile) -> String {
    let mode = Mode::parse(level.mode_or_planned()).unwrap_or(Mode::Planned);
    let rate = level.request_rate.as_ref().and_then(Value::as_f64);
    let series = level
        .series
        .and_then(|s| usize::try_from(s).ok())
        .unwrap_or(0);
    let ramp = level.trace.as_ref().is_some_and(|t| t["format"] == "ramp");
    level_file_base(
        mode,
        ramp,
        rate,
        level.max_concurrency.unwrap_or(0),
        series,
        level.partial,
    )
}

pub(super) fn sum<I: IntoIterator<Item = Option<u64>>>(values: I) -> Option<u64> {
    values.into_iter().fold(None, |acc, v| match (acc, v) {
        (a, None) => a,
        (None, Some(v)) => Some(v),
        (Some(a), Some(v)) => Some(a + v),
    })
}

/// `{min, mean, max}` of lengths over the union: the mean weighted by
/// each shard's completed requests (the values it averaged).
pub(super) fn merge_lengths(parts: &[(&LevelFile, Option<&Value>)]) -> Option<Value> {
    let (mut min, mut max, mut weighted, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0u64);
    for (level, len) in parts {
        let Some(len) = len else { continue };
        let completed = level.completed.unwrap_or(0);
        if completed == 0 {
            continue;
        }
        let get = |k: &str| len.get(k).and_then(Value::as_f64);
        let (Some(lo), Some(mean), Some(hi)) = (get("min"), get("mean"), get("max")) else {
            return None;
        };
        min = min.min(lo);
        max = max.max(hi);
        weighted += mean * completed as f64;
        n += completed;
    }
    (n > 0).then(|| json!({"min": min, "mean": weighted / n as f64, "max": max}))
}

/// The same value in every part, or None.
pub(super) fn agreed<T: PartialEq + Clone>(
    values: impl IntoIterator<Item = Option<T>>,
) -> Option<T> {
    let mut it = values.into_iter();
    let first = it.next()??;
    it.all(|v| v.as_ref() == Some(&first)).then_some(first)
}

pub(super) fn merge_level(
    key: u64,
    parts: &[(&ShardRun, &Holds, &LevelFile)],
    percentiles: &[f64],
) -> Result<(LevelFile, Vec<String>), MergeError> {
    let (base_run, _, base) = parts[0];
    let shown = level_name(base, key);
    let mut warnings = Vec::new();
    // The plan of the level: the same in every shard.
    for (run, _, level) in &parts[1..] {
        let plan = |l: &LevelFile| {
            (
                l.mode_or_planned().to_string(),
                l.series.unwrap_or(0),
                l.duration_target.map(f64::to_bits),
                l.request_rate.as_ref().map(Value::is_number),
            )
        };
        if plan(level) != plan(base) {
            return refuse(format!(
                "level {} differs between {} ({}) and {} ({}): mode, series, duration target or loop kind; they are not shards of one run",
                key + 1,
                base_run.name,
                shown,
                run.name,
                level_name(level, key)
            ));
        }
    }
    for (run, _, level) in parts {
        if level.histograms.is_none() {
            return refuse(format!(
                "{}/{} has no histograms: an older tokbench wrote it, and it cannot be merged exactly",
                run.name,
                level_name(level, key)
            ));
        }
        if fields::started_unix_s(level).is_none() {
            return refuse(format!(
                "{}/{} has no started_unix_s: an older tokbench wrote it, and its level cannot be placed on the other shards' clock",
                run.name,
                level_name(level, key)
            ));
        }
    }

    // The union's window on one clock.
    let offset_s = |run: &ShardRun, level: &LevelFile| {
        level
            .shard
            .as_ref()
            .or(run.summary.run.shard.as_ref())
            .map_or(0.0, clock_correction_s)
    };
    let mut starts: Vec<(f64, &Holds)> = Vec::new();
    let (mut first_start, mut last_end) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut run_start = f64::INFINITY;
    for (run, h, level) in parts {
        let Some(t) = fields::started_unix_s(level) else {
            continue;
        };
        let start = t + offset_s(run, level);
        starts.push((start, *h));
        if let Some(at) = level.started_at_s {
            run_start = run_start.min(start - at);
        }
        let answered = level.completed.unwrap_or(0) + level.failed.unwrap_or(0);
        if let Some(d) = level.duration.filter(|d| d.is_finite() && *d >= 0.0) {
            if answered > 0 {
                first_start = first_start.min(start);
                last_end = last_end.max(start + d);
            }
        }
    }
    let level_start = starts.iter().map(|s| s.0).reduce(f64::min);
    if let (Some(lo), Some(late)) = (
        level_start,
        starts.iter().max_by(|a, b| a.0.total_cmp(&b.0)),
    ) {
        let skew = late.0 - lo;
        if skew > START_SKEW_WARN_S {
            warnings.push(format!(
                "level {} ({} streams in all): the shards' starts differ by {:.0} ms, more than {:.0} ms ({} started last): its throughput is over the union's {:.3} s",
                key + 1,
                parts
                    .iter()
                    .filter_map(|p| p.2.max_concurrency)
                    .sum::<u32>(),
                skew * 1000.0,
                START_SKEW_WARN_S * 1000.0,
                label(&late.1.indexes, late.1.count),
                (last_end - first_start).max(0.0)
            ));
        }
    }
    let duration = (last_end >= first_start).then_some(last_end - first_start);

    let completed = sum(parts.iter().map(|p| p.2.completed));
    let failed = sum(parts.iter().map(|p| p.2.failed));
    let input_tokens = sum(parts.iter().map(|p| p.2.total_input_tokens));
    let output_tokens = sum(parts.iter().map(|p| p.2.total_output_tokens));
    let concurrency: u32 = parts.iter().filter_map(|p| p.2.max_concurrency).sum();
    let rate = |amount: Option<u64>| {
        let d = duration?;
        let a = amount? as f64;
        Some(if d > 0.0 { a / d } else { 0.0 })
    };
    let output_throughput = rate(output_tokens);
    let request_rate = if parts
        .iter()
        .all(|p| p.2.request_rate.as_ref().is_some_and(Value::is_number))
    {
        let total: f64 = parts
            .iter()
            .filter_map(|p| p.2.request_rate.as_ref().and_then(Value::as_f64))
            .sum();
        Some(json!(total))
    } else {
        base.request_rate.clone()
    };

    // Latencies.
    let named: Vec<String> = parts
        .iter()
        .map(|(run, _, l)| format!("{}/{}", run.name, level_name(l, key)))
        .collect();
    let metric_parts: Vec<Part<'_>> = parts
        .iter()
        .zip(&named)
        .map(|((_, _, level), name)| Part { name, level })
        .collect();
    let mut stats = Map::new();
    let mut histograms = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let mut merged: BTreeMap<&str, MergedMetric> = BTreeMap::new();
    // Which percentiles are numpy-linear over every value and which are
    // the merged histogram's (within 0.1%): a reader can tell.
    let mut source = Map::new();
    for metric in LATENCY_METRICS {
        let m = merge_metric(metric, &metric_parts, percentiles)?;
        if m.count == 0 {
            // ttfc's keys only when some request reasoned first.
            if metric != "ttfc" {
                MergedMetric::insert_nulls(metric, percentiles, &mut stats);
            }
            continue;
        }
        m.insert_keys(metric, &mut stats);
        source.insert(
            metric.into(),
            json!(if m.exact { "samples" } else { "histogram" }),
        );
        histograms.insert(format!("{metric}_ms"), m.histogram.to_base64()?);
        if let Some(values) = &m.samples {
            samples.insert(format!("{metric}_ms"), values.clone());
        }
        merged.insert(metric, m);
    }
    stats.insert("percentiles_from".into(), Value::Object(source));
    let stream_decode_tok_s =
        crate::stats::metrics::stream_decode_tok_s(merged.get("tpot").and_then(|m| m.median));

    let errors = parts.iter().try_fold(BTreeMap::new(), |mut acc, p| {
        for (class, n) in p.2.errors.as_ref()? {
            *acc.entry(class.clone()).or_insert(0) += n;
        }
        Some(acc)
    });
    let goodput = parts
        .iter()
        .map(|p| p.2.goodput.as_ref()?.get("good")?.as_u64())
        .collect::<Option<Vec<u64>>>()
        .map(|good| {
            let answered = completed.unwrap_or(0) + failed.unwrap_or(0);
            let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            Goodput::from_counts(count(good.iter().sum()), count(answered), duration)
        });
    let lengths = |pick: fn(&LevelFile) -> Option<&Value>| {
        merge_lengths(&parts.iter().map(|p| (p.2, pick(p.2))).collect::<Vec<_>>())
    };
    let rx = |k: &str| {
        sum(parts
            .iter()
            .map(|p| p.2.rx_clock.as_ref().and_then(|r| r.get(k)?.as_u64())))
    };
    let mean_of = |tokens: Option<u64>| {
        let c = completed.filter(|c| *c > 0)?;
        Some(round3(tokens? as f64 / c as f64))
    };
    let mut traffic = json!({
        "profile": base.profile,
        "input_mean": mean_of(input_tokens),
        "output_mean": mean_of(output_tokens),
    });
    if let (Value::Object(t), Some(r)) = (
        &mut traffic,
        base.traffic.as_ref().and_then(|t| t.get("range_ratio")),
    ) {
        t.insert("range_ratio".into(), r.clone());
    }

    let mut shards: Vec<ShardEntry> = Vec::new();
    for (run, h, level) in parts {
        if let Some(inner) = fields::level_shards(level).filter(|_| h.merged) {
            shards.extend(inner);
            continue;
        }
        let shard = level
            .shard
            .clone()
            .or_else(|| run.summary.run.shard.clone());
        shards.push(ShardEntry {
            index: h.indexes[0],
            host: shard.as_ref().and_then(|s| s.host.clone()),
            completed: level.completed,
            clock_offset_ms: shard.as_ref().and_then(|s| s.clock_offset_ms),
            clock_offset_error_ms: shard.and_then(|s| s.clock_offset_error_ms),
            client: level.client.clone().filter(|c| *c != ClientLoad::default()),
        });
    }
    shards.sort_by_key(|s| s.index);

    let mut level = LevelFile {
        schema_version: Some(SCHEMA_VERSION),
        date: base.date.clone(),
        backend: base.backend.clone(),
        model_id: base.model_id.clone(),
        num_prompts: sum(parts.iter().map(|p| p.2.num_prompts)),
        max_concurrency: Some(concurrency),
        request_rate,
        burstiness: base.burstiness,
        duration,
        completed,
        failed,
        total_input_tokens: input_tokens,
        total_output_tokens: output_tokens,
        request_throughput: rate(completed),
        output_throughput,
        total_token_throughput: rate(sum([input_tokens, output_tokens])),
        request_goodput: goodput.and_then(|g| g.rate_per_s).map(round3),
        mode: base.mode.clone(),
        partial: parts.iter().any(|p| p.2.partial),
        level_index: base.level_index,
        started_at_s: level_start
            .filter(|_| run_start.is_finite())
            .map(|s| round3(s - run_start)),
        series: base.series,
        series_label: base.series_label.clone(),
        transition_requests: sum(parts.iter().map(|p| p.2.transition_requests)),
        steady: agreed(parts.iter().map(|p| p.2.steady)),
        steady_reason: None,
        cancelled: sum(parts.iter().map(|p| p.2.cancelled)),
        short_outputs: sum(parts.iter().map(|p| p.2.short_outputs)),
        per_stream_tok_s: output_throughput
            .filter(|_| concurrency > 0)
            .map(|t| t / f64::from(concurrency)),
        stream_decode_tok_s,
        errors,
        token_count_source: agreed(parts.iter().map(|p| p.2.token_count_source.clone())),
        input_len: lengths(|l| l.input_len.as_ref()),
        output_len: lengths(|l| l.output_len.as_ref()),
        rx_clock: match (rx("kernel"), rx("user")) {
            (None, None) => None,
            (k, u) => Some(json!({"kernel": k.unwrap_or(0), "user": u.unwrap_or(0)})),
        },
        goodput: goodput.map(Goodput::to_json),
        traffic: Some(traffic),
        engine: base.engine.clone(),
        engine_version: base.engine_version.clone(),
        profile: base.profile.clone(),
        input_len_target: base.input_len_target,
        output_len_target: base.output_len_target,
        ignore_eos: base.ignore_eos,
        extra_body: base.extra_body.clone(),
        labels: base.labels.clone(),
        histograms: Some(histograms),
        samples: Some(samples),
        stats,
        ..LevelFile::default()
    };
    level.started_unix_s = level_start;
    level.duration_target = base.duration_target;
    // The union's last answer is the latest shard's.
    level.drain_overrun_s = parts
        .iter()
        .filter_map(|p| p.2.drain_overrun_s)
        .reduce(f64::max);
    fields::set_level_shards(&mut level, &shards);
    Ok((level, warnings))
}
