//! A level file: its object (vLLM's keys, tokbench's, the run's identity),
//! its name, and its atomic, streamed writing.

// More of the recorder: the parent's items, private ones included.
use super::*;

/// A level file's `histograms`: every latency metric with a value.
pub(super) fn histograms(tally: &LevelTally) -> Result<BTreeMap<String, String>> {
    let mut histograms = BTreeMap::new();
    for (key, set) in tally.metric_sets() {
        if !set.is_empty() {
            histograms.insert(key.to_string(), set.histogram().to_base64()?);
        }
    }
    Ok(histograms)
}

/// A level file as written: its keys in order (`head`, everything but
/// `samples`) and its `samples` streamed from the tally, so a level of
/// 250,000 requests never holds its samples a second time as JSON values.
struct LevelFileOut<'a> {
    head: &'a Map<String, Value>,
    tally: &'a LevelTally,
}

/// `samples`: the per-request metrics still held exactly (ITL never).
struct SamplesOut<'a>(&'a LevelTally);

struct ValuesOut<'a>(&'a Samples);

impl serde::Serialize for LevelFileOut<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = ser.serialize_map(Some(self.head.len() + 1))?;
        let mut samples_written = false;
        // The head is sorted (serde_json's map): `samples` goes in its place.
        for (key, value) in self.head {
            if !samples_written && key.as_str() > "samples" {
                map.serialize_entry("samples", &SamplesOut(self.tally))?;
                samples_written = true;
            }
            map.serialize_entry(key, value)?;
        }
        if !samples_written {
            map.serialize_entry("samples", &SamplesOut(self.tally))?;
        }
        map.end()
    }
}

impl serde::Serialize for SamplesOut<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = ser.serialize_map(None)?;
        for (key, set) in self.0.metric_sets() {
            if key != "itl_ms" && !set.is_empty() && set.is_exact() {
                map.serialize_entry(key, &ValuesOut(set))?;
            }
        }
        map.end()
    }
}

impl serde::Serialize for ValuesOut<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = ser.serialize_seq(Some(self.0.len() as usize))?;
        for v in self.0.exact_iter().into_iter().flatten() {
            seq.serialize_element(&v)?;
        }
        seq.end()
    }
}

/// Write a level file atomically: `file` with its `samples` from `tally`.
pub(super) fn write_level_file(
    path: &Path,
    file: &LevelFile,
    tally: &LevelTally,
) -> std::io::Result<()> {
    let head = match file.to_value() {
        Value::Object(head) => head,
        _ => Map::new(),
    };
    write_atomic_with(path, |w| {
        serde_json::to_writer_pretty(&mut *w, &LevelFileOut { head: &head, tally })
            .map_err(std::io::Error::from)?;
        w.write_all(b"\n")
    })
}

impl Recorder {
    /// The level file (`report::schema::LevelFile`), as written.
    pub(super) fn level_file(&self, level: &FinishedLevel, num_prompts: usize) -> LevelFile {
        let tally = &self.tally;
        let run = tally.run();
        let stats = &level.stats;
        let finite = |x: f64| Some(x).filter(|x| x.is_finite());
        // vLLM writes "inf" for a closed loop; an open loop's rate is a number.
        let (request_rate, burstiness) = match level.info.rate {
            Some(rate) if rate.is_finite() => (json!(rate), Some(run.burstiness)),
            _ => (json!("inf"), None),
        };
        // What the requests really had: profile, means and spread of the lengths.
        let mut traffic = level.achieved.to_json(&run.profile);
        if let Value::Object(t) = &mut traffic {
            t.insert("range_ratio".into(), json!(run.traffic.range_ratio));
        }
        let goodput = level.goodput.as_ref();
        LevelFile {
            schema_version: Some(SCHEMA_VERSION),
            date: Some(run.date.clone()),
            backend: Some(run.backend.clone()),
            model_id: Some(run.model.clone()),
            num_prompts: Some(num_prompts as u64),
            max_concurrency: Some(level.info.concurrency),
            request_rate: Some(request_rate),
            burstiness,
            duration: finite(stats.duration_s),
            completed: Some(stats.completed as u64),
            failed: Some(stats.failed as u64),
            total_input_tokens: Some(stats.total_input_tokens),
            total_output_tokens: Some(stats.total_output_tokens),
            request_throughput: finite(stats.request_throughput),
            output_throughput: finite(stats.output_throughput),
            total_token_throughput: finite(stats.total_token_throughput),
            // vLLM's `request_goodput` is a rate; the whole count rides beside it.
            request_goodput: goodput.and_then(|g| g.rate_per_s).map(round3),
            mode: Some(level.info.mode.as_str().to_string()),
            partial: level.partial,
            level_index: Some((level.info.index + tally.level_offset()) as u64),
            started_at_s: Some(round3(level.info.started_at.as_secs_f64())),
            duration_target: run.timing.duration_target(level.info.mode),
            started_unix_s: run.timing.started_unix_s(level.info.started_at),
            drain_overrun_s: run.timing.drain_overrun_s(
                level.info.started_at
                    + Duration::try_from_secs_f64(stats.duration_s).unwrap_or_default(),
                tally.next_start(level.info.index),
            ),
            shard: run.timing.shard.clone(),
            series: Some(level.info.series as u64),
            series_label: Some(tally.series_label(level.info.series)),
            transition_requests: Some(level.transition as u64),
            throughput_rse: level.throughput_rse.map(round4),
            steady: level.steadiness.as_ref().map(|s| s.steady),
            steady_reason: level.steadiness.as_ref().map(|s| json!(s.reason)),
            end_reason: tally.end_reason(level.info.index).map(str::to_string),
            cancelled: Some(stats.cancelled as u64),
            short_outputs: Some(stats.short_outputs as u64),
            per_stream_tok_s: finite(stats.per_stream_tok_s),
            stream_decode_tok_s: stats.stream_decode_tok_s.and_then(finite),
            errors: Some(
                stats
                    .errors
                    .iter()
                    .map(|(k, v)| (k.clone(), *v as u64))
                    .collect(),
            ),
            token_count_source: stats.token_count_source.map(|s| s.as_str().to_string()),
            input_len: stats.input_len.map(|m| m.to_json()),
            output_len: stats.output_len.map(|m| m.to_json()),
            client_rx_lag_ms: stats.client_rx_lag.map(|l| l.to_json()),
            connect_ms: stats.connect.map(|c| c.connect.to_json()),
            ttft_after_connect_ms: stats.connect.map(|c| c.ttft_after_connect.to_json()),
            rx_clock: Some(json!({"kernel": stats.rx_kernel, "user": stats.rx_user})),
            client: Some(ClientLoadJson {
                cpu_percent: level.client.cpu_percent.map(round3),
                loop_lag_ms_p99: level.client.loop_lag_ms_p99.map(round3),
            }),
            // The server's own gauges over the level; empty without a probe.
            server: Some(level.server.to_json()),
            // What the server said of each request (llama.cpp timings, Ollama
            // durations), beside what the client measured.
            server_timings: Some(level.server_timings.clone()),
            server_account: level.server_account.clone(),
            goodput: goodput.copied().map(Goodput::to_json),
            waiting: level.occupancy.as_ref().map(|o| o.waiting_json()),
            streaming: level.occupancy.as_ref().map(|o| o.streaming_json()),
            send_lateness: level.lateness.as_ref().map(|l| l.to_json()),
            probe: level.probes.as_ref().map(probe_section),
            turns: (!level.turns.is_empty())
                .then(|| level.turns.iter().map(TurnStats::to_json).collect()),
            prefix_cache_hit_rate: level.cache_hit_rate.map(round4),
            replay_timeline_s: level.info.timeline.map(|t| round3(t.as_secs_f64())),
            trace: run.trace.clone().filter(|_| level.info.timeline.is_some()),
            rate_series: level.rate_series.clone(),
            // Power and energy per million output tokens, on a GPU host.
            gpu: level_gpu_json(&level.server, stats.duration_s, stats.total_output_tokens),
            traffic: Some(traffic),
            engine: Some(run.engine.clone()),
            engine_version: run.engine_version.clone(),
            profile: Some(run.profile.clone()),
            input_len_target: Some(run.input_len),
            output_len_target: Some(run.output_len),
            ignore_eos: Some(run.ignore_eos),
            extra_body: run.extra_body.clone(),
            labels: match json!(run.labels) {
                Value::Object(m) => Some(m),
                _ => None,
            },
            histograms: None,
            samples: None,
            file: None,
            stats: stats.latency_json(&run.percentiles),
        }
    }
}

/// `sweep-c{C}[-s{S}][-manual][-partial]` (open loop: `sweep-rate{R}`, a
/// replay `sweep-replay`, a ramp `sweep-ramp`): a level file's name before
/// its round suffix. The
/// recorder names a level by its `LevelInfo`, the merge a merged level by
/// its file; both through here, so a merged folder names its files as a
/// shard does.
pub(crate) fn level_file_base(
    mode: Mode,
    ramp: bool,
    rate: Option<f64>,
    concurrency: u32,
    series: usize,
    partial: bool,
) -> String {
    let mut name = match (mode, rate) {
        (Mode::Replay, _) if ramp => "sweep-ramp".to_string(),
        (Mode::Replay, _) => "sweep-replay".to_string(),
        (Mode::Rate | Mode::Manual, Some(rate)) => format!("sweep-rate{}", rate_label(rate)),
        _ => format!("sweep-c{concurrency}"),
    };
    if series > 0 {
        // `series` may come from a file (merge): saturate rather than overflow.
        name.push_str(&format!("-s{}", series.saturating_add(1)));
    }
    if mode == Mode::Manual {
        name.push_str("-manual");
    }
    if partial {
        name.push_str("-partial");
    }
    name
}

/// A rate as a file name and label: `2`, `2.5`, `0.333`, `inf`.
pub(crate) fn rate_label(rate: f64) -> String {
    if !rate.is_finite() {
        return "inf".into();
    }
    let text = format!("{:.3}", rate);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The first level of a kind keeps the base name; the second gets `-r2`, and so on.
pub(crate) fn level_file_name(base: &str, nth: u32) -> String {
    if nth <= 1 {
        format!("{base}.json")
    } else {
        format!("{base}-r{nth}.json")
    }
}

/// The level file's `probe` key, rounded as every saved figure is.
fn probe_section(p: &crate::stats::probes::ProbeStats) -> crate::report::schema::ProbeSection {
    use crate::report::schema::{ProbeLatency, ProbeSection};
    let ms = |x: f64| x.is_finite().then(|| round3(x));
    ProbeSection {
        count: Some(p.count),
        failed: Some(p.failed),
        send_lateness_p99_ms: p.lateness_p99_ms.and_then(ms),
        ttft: p.ttft.map(|t| ProbeLatency {
            p50: ms(t.p50),
            p99: ms(t.p99),
            mean: ms(t.mean),
        }),
        e2el: p.e2el.map(|t| ProbeLatency {
            p50: ms(t.p50),
            p99: ms(t.p99),
            mean: None,
        }),
    }
}
