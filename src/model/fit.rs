//! The fit: a series' finished levels into the simulator's physics
//! (docs/predict.md, "What is fitted"). Pure: it reads parsed level files
//! and returns the model with its own error on every level it saw.
//!
//! - Decode step time against the running batch, `step = a + b x running`,
//!   least squares over the levels: each level's p50 TPOT, less the share
//!   of other sequences' prefills a stream waits through (`p x in x
//!   (running - 1) / out`: each of the others is admitted about once per
//!   answer), against its mean running batch (the server's `running`,
//!   `processing` or `slots_busy` gauge; else the client's mean streaming;
//!   else `min(concurrency, cap)`).
//! - Prefill per prompt token: the server's own prompt timings at the
//!   lowest level where it gave them; else the lowest level's p50 TTFT
//!   less one decode step, over the prompt (the client's overhead then
//!   counts as prefill).
//! - The client and network overhead: the lowest level's p50 TTFT less
//!   the TTFT the fitted engine gives it (never below 0).
//! - The cap: the tune knob's value, the server's slots, the running gauge
//!   or the client's streaming at the top level when it stayed below the
//!   level's streams; none where the sweep never reached one.
//! - KV tokens: the top level's running batch x (in + out) over its KV
//!   usage (the server's `kv_cache_usage` gauge), where it gave one.

use serde_json::Value;

use crate::report::schema::LevelFile;

use super::schema::{Errors, Figures3, FitRange, LevelCheck, Params, SeriesModel};
use super::virtual_run::{run_level, Shape};

/// One finished level as the fit reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Measured {
    pub concurrency: u32,
    pub completed: u64,
    pub output_tok_s: f64,
    pub ttft_p50_ms: f64,
    pub tpot_p50_ms: f64,
    pub input_len: f64,
    pub output_len: f64,
    /// The server's running gauge (`running`, `processing`, `slots_busy`).
    pub running_mean: Option<f64>,
    pub running_max: Option<f64>,
    /// The most requests the server said were waiting (`waiting`, or
    /// llama.cpp's `deferred`) at a scrape of the level.
    pub server_waiting_max: Option<f64>,
    /// The client's own count of streams that had their first token.
    pub streaming_mean: Option<f64>,
    pub streaming_max: Option<f64>,
    pub slots_total: Option<f64>,
    /// llama.cpp: each slot's context, tokens (`/slots` `n_ctx`).
    pub slot_context: Option<u64>,
    /// The server's prefill time per prompt token, ms (its own timings:
    /// llama.cpp's `timings`, Ollama's `prompt_eval_duration`).
    pub server_prefill_ms_per_token: Option<f64>,
    /// The server's mean time from a request's admission to its first
    /// token, ms (vLLM's prefill histogram): the whole admitting step.
    pub server_admit_step_ms: Option<f64>,
    pub kv_usage_max: Option<f64>,
    pub preempted: bool,
    pub gpu_share_min: Option<f64>,
}

fn gauge(server: Option<&Value>, name: &str, stat: &str) -> Option<f64> {
    server?
        .get(name)?
        .get(stat)?
        .as_f64()
        .filter(|x| x.is_finite())
}

impl Measured {
    /// A finished sweep level with its three figures; `None` otherwise.
    pub(crate) fn from_level(level: &LevelFile) -> Option<Measured> {
        let point = level.point()?;
        if point.partial || !point.kind.is_sweep() || level.steady == Some(false) {
            return None;
        }
        let ttft = level
            .percentile("ttft", "50")
            .or_else(|| level.stat("median_ttft_ms"))?;
        let tpot = level
            .percentile("tpot", "50")
            .or_else(|| level.stat("median_tpot_ms"))?;
        let mean_of = |v: &Option<Value>| {
            v.as_ref()
                .and_then(|v| v.get("mean"))
                .and_then(Value::as_f64)
                .filter(|x| *x > 0.0)
        };
        let input_len = mean_of(&level.input_len)
            .or(level.input_len_target.map(f64::from))
            .unwrap_or(0.0);
        let output_len = mean_of(&level.output_len)
            .or(level.output_len_target.map(f64::from))
            .unwrap_or(0.0);
        let server = level.server.as_ref();
        let running = |stat: &str| {
            ["running", "processing", "slots_busy"]
                .iter()
                .find_map(|g| gauge(server, g, stat))
        };
        let timings = level.server_timings.as_ref();
        let prefill = timings
            .and_then(|t| t.get("prefill_tok_s_median"))
            .and_then(Value::as_f64)
            .filter(|x| *x > 0.0 && x.is_finite())
            .map(|tok_s| 1000.0 / tok_s);
        let admit_step = level
            .server_account
            .as_ref()
            .and_then(|a| a.pointer("/prefill_ms/mean"))
            .and_then(Value::as_f64)
            .filter(|ms| *ms > 0.0 && ms.is_finite());
        let streaming = level.streaming.as_ref();
        Some(Measured {
            concurrency: point.concurrency,
            completed: level.completed.unwrap_or(0),
            output_tok_s: point.figures.output_throughput,
            ttft_p50_ms: ttft,
            tpot_p50_ms: tpot,
            input_len,
            output_len,
            running_mean: running("mean"),
            running_max: running("max"),
            server_waiting_max: ["waiting", "deferred"]
                .iter()
                .filter_map(|g| gauge(server, g, "max"))
                .reduce(f64::max),
            streaming_mean: streaming
                .and_then(|s| s.get("mean"))
                .and_then(Value::as_f64),
            streaming_max: streaming.and_then(|s| s.get("max")).and_then(Value::as_f64),
            slots_total: gauge(server, "slots_total", "max"),
            slot_context: gauge(server, "slot_context_tokens", "min")
                .filter(|n| *n >= 1.0)
                .map(|n| n as u64),
            server_prefill_ms_per_token: prefill,
            server_admit_step_ms: admit_step,
            kv_usage_max: gauge(server, "kv_cache_usage", "max"),
            preempted: gauge(server, "preemptions_total", "max").is_some_and(|p| p > 0.0)
                || gauge(server, "preemptions", "max").is_some_and(|p| p > 0.0),
            gpu_share_min: gauge(server, "gpu_share", "min"),
        })
    }
}

/// What is known of the server beside its levels (a tune setting's).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Known {
    /// The tune knob that sets the batch cap, and its value here.
    pub knob: Option<(String, u32)>,
    /// llama.cpp's context per slot (`/props`).
    pub slot_context_tokens: Option<u64>,
}

/// Least squares line `y = a + b x` through the points; `None` when the
/// x values do not spread (every level ran the same batch).
pub(crate) fn line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx < 0.1 {
        return None;
    }
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

/// `(predicted - measured) / measured`, %.
fn error_pct(predicted: f64, measured: f64) -> f64 {
    if measured.abs() < 1e-12 {
        return 0.0;
    }
    (predicted - measured) / measured * 100.0
}

/// The smallest error a fit claims, %: no fit is better than its noise.
pub(crate) const ERROR_FLOOR_PCT: f64 = 2.0;

/// Fit the series' finished levels. The error says in one line why
/// nothing can be fitted.
pub(crate) fn fit(
    levels: &[Measured],
    known: &Known,
) -> Result<(Params, FitRange, Vec<String>, Vec<String>), String> {
    let mut levels: Vec<&Measured> = levels
        .iter()
        .filter(|l| l.output_tok_s > 0.0 && l.tpot_p50_ms > 0.0)
        .collect();
    levels.sort_by_key(|l| l.concurrency);
    let mut distinct: Vec<u32> = levels.iter().map(|l| l.concurrency).collect();
    distinct.dedup();
    if distinct.len() < 2 {
        return Err(format!(
            "nothing can be fitted: {} finished level{} at {} concurrenc{}, and a model needs two at different concurrencies",
            levels.len(),
            if levels.len() == 1 { "" } else { "s" },
            distinct.len(),
            if distinct.len() == 1 { "y" } else { "ies" },
        ));
    }
    let (low, top) = (levels[0], levels[levels.len() - 1]);
    let n = levels.len() as f64;
    let input_len = levels.iter().map(|l| l.input_len).sum::<f64>() / n;
    let output_len = levels.iter().map(|l| l.output_len).sum::<f64>().max(n) / n;
    let mut sources = Vec::new();
    let mut warnings = Vec::new();

    let server_gauges = levels.iter().any(|l| l.running_mean.is_some());
    let (cap, cap_source) = if let Some((name, v)) = &known.knob {
        (Some(*v), format!("the setting {name}={v}"))
    } else if let Some(s) = levels.iter().find_map(|l| l.slots_total) {
        (Some(s.round() as u32), "the server's slots".to_string())
    } else if let Some(m) = top.running_max.filter(|m| {
        // A short level's few scrapes can miss its busiest moment: the
        // gauge's top is a cap only where others waited beside it, or
        // where the client (whose count misses no moment) never had more
        // streaming at once.
        let waited = top.server_waiting_max.is_some_and(|w| w >= 1.0);
        let never_more = top.streaming_max.is_some_and(|s| s <= *m + 0.5);
        *m < f64::from(top.concurrency) - 0.5 && (waited || never_more)
    }) {
        (
            Some(m.round().max(1.0) as u32),
            "the server's running gauge at the top level".to_string(),
        )
    } else if let Some(m) = top
        .streaming_max
        .filter(|m| !server_gauges && *m < f64::from(top.concurrency) - 0.5)
    {
        (
            Some(m.round().max(1.0) as u32),
            "the client's streams at the top level".to_string(),
        )
    } else {
        (None, "none seen up to the top level".to_string())
    };
    sources.push(format!(
        "cap: {}",
        cap.map_or("none".into(), |c| c.to_string()) + " (" + &cap_source + ")"
    ));
    let batch = |l: &Measured| {
        l.running_mean
            .or(l.streaming_mean.filter(|s| *s > 0.0))
            .unwrap_or_else(|| f64::from(cap.map_or(l.concurrency, |c| c.min(l.concurrency))))
            .max(1.0)
    };
    sources.push(
        if server_gauges {
            "running batch: the server's gauge"
        } else if levels.iter().any(|l| l.streaming_mean.is_some()) {
            "running batch: the client's mean streaming (the server reported none)"
        } else {
            "running batch: min(streams, cap)"
        }
        .to_string(),
    );

    let server_prefill = low.server_prefill_ms_per_token;
    let mut prefill = server_prefill.unwrap_or(0.0);
    let mut ab = (low.tpot_p50_ms, 0.0);
    for _ in 0..8 {
        let points: Vec<(f64, f64)> = levels
            .iter()
            .map(|l| {
                let r = batch(l);
                let others = prefill * l.input_len * (r - 1.0).max(0.0) / l.output_len.max(1.0);
                (r, l.tpot_p50_ms - others)
            })
            .collect();
        ab = match line(&points) {
            Some((a, b)) if b >= 0.0 => (a.max(0.0), b),
            _ => (points.iter().map(|p| p.1).sum::<f64>() / n, 0.0),
        };
        if server_prefill.is_none() && low.input_len > 0.0 {
            prefill = prefill_from_ttft(&levels, cap, ab, low);
        }
    }
    sources.push(format!(
        "step: least squares of p50 TPOT against the running batch over {} levels",
        levels.len()
    ));
    if line(&levels.iter().map(|l| (batch(l), 0.0)).collect::<Vec<_>>()).is_none() {
        warnings.push(
            "every level ran about the same batch: the per-sequence step cost is not fitted (0)"
                .into(),
        );
    }
    let server_timed = server_prefill.is_some() || low.server_admit_step_ms.is_some();
    sources.push(if server_prefill.is_some() {
        "prefill: the server's own prompt timings at the lowest level".into()
    } else {
        "prefill: how TTFT grows with the streams below the cap (they start together and prefill together)".into()
    });
    let kv_tokens = top
        .kv_usage_max
        .filter(|u| *u > 0.05)
        .zip(top.running_max)
        .map(|(u, r)| (r * (top.input_len + top.output_len) / u).round() as u64);
    if kv_tokens.is_some() {
        sources.push("KV tokens: the top level's running batch over its KV usage".into());
    }
    if !server_gauges && !server_timed && levels.iter().all(|l| l.slots_total.is_none()) {
        sources.push(
            "fitted from the client's figures alone: the server reported no timings and no gauges"
                .into(),
        );
    }
    if cap.is_none() {
        warnings.push(format!(
            "no batch cap seen up to {} streams: a cap the server has above that is not known to the model",
            top.concurrency
        ));
    }
    if levels.iter().any(|l| l.preempted) {
        warnings.push("the server preempted requests (its KV cache filled): levels past that are not predicted".into());
    }
    if levels
        .iter()
        .any(|l| l.gpu_share_min.is_some_and(|s| s < 0.999))
    {
        warnings.push("the model spilled to the CPU (size_vram < size): another setting may spill more, and is not predicted".into());
    }
    let mut params = Params {
        step_ms: ab.0,
        step_ms_per_seq: ab.1,
        prefill_ms_per_token: prefill,
        overhead_ms: 0.0,
        cap,
        knob: known.knob.as_ref().map(|k| k.0.clone()),
        knob_value: known.knob.as_ref().map(|k| k.1),
        kv_tokens,
        // A tune's setting says it; else the slots the run scraped.
        slot_context_tokens: known
            .slot_context_tokens
            .or_else(|| levels.iter().find_map(|l| l.slot_context)),
    };
    if let Some(o) = run_level(&params, &shape_of(low)) {
        params.overhead_ms = (low.ttft_p50_ms - o.ttft_p50_ms).max(0.0);
    }
    let range = FitRange {
        concurrency_min: low.concurrency,
        concurrency_max: top.concurrency,
        batch_min: levels
            .iter()
            .map(|l| batch(l))
            .fold(f64::INFINITY, f64::min),
        // The largest batch the server ran: its gauge's top, else the
        // streams the cap let run.
        batch_max: levels
            .iter()
            .map(|l| {
                l.running_max.unwrap_or_else(|| {
                    f64::from(cap.map_or(l.concurrency, |c| c.min(l.concurrency)))
                })
            })
            .fold(0.0, f64::max),
        input_len,
        output_len,
    };
    Ok((params, range, sources, warnings))
}

/// Prefill per prompt token from the client's TTFT. A level's streams
/// start together and, with answers of one length, stay in step: below
/// the cap, each admitting step prefills all `c` prompts, so TTFT is
/// `overhead + a + (b + p x in) x c`. The slope over the levels below
/// the cap, less `b`, over the prompt is `p`, whatever the fixed overhead
/// (the server's own admitting step, or the network). With one such
/// level: its TTFT less one step, over the prompt (the overhead then
/// counts as prefill).
fn prefill_from_ttft(
    levels: &[&Measured],
    cap: Option<u32>,
    (a, b): (f64, f64),
    low: &Measured,
) -> f64 {
    let under: Vec<(f64, f64)> = levels
        .iter()
        .filter(|l| cap.is_none_or(|c| l.concurrency <= c))
        .map(|l| (f64::from(l.concurrency), l.ttft_p50_ms))
        .collect();
    let per_token = match line(&under) {
        Some((_, slope)) => (slope - b) / low.input_len,
        None => {
            let first = low.server_admit_step_ms.unwrap_or(low.ttft_p50_ms);
            (first - a - b * f64::from(cap.map_or(low.concurrency, |c| c.min(low.concurrency))))
                / low.input_len
        }
    };
    per_token.max(0.0)
}

/// The level `m` was, for the virtual run.
pub(crate) fn shape_of(m: &Measured) -> Shape {
    Shape {
        concurrency: m.concurrency,
        requests: m.completed.max(u64::from(m.concurrency)),
        input_len: m.input_len.round().max(1.0) as u64,
        output_len: m.output_len.round().max(1.0) as u64,
    }
}

/// The fitted model run at each measured level, beside what was measured.
pub(crate) fn checks(params: &Params, levels: &[Measured]) -> (Vec<LevelCheck>, Errors) {
    let mut out = Vec::new();
    for m in levels {
        let Some(p) = run_level(params, &shape_of(m)) else {
            continue;
        };
        let measured = Figures3 {
            output_tok_s: m.output_tok_s,
            ttft_p50_ms: m.ttft_p50_ms,
            tpot_p50_ms: m.tpot_p50_ms,
        };
        let predicted = Figures3 {
            output_tok_s: p.output_tok_s,
            ttft_p50_ms: p.ttft_p50_ms,
            tpot_p50_ms: p.tpot_p50_ms,
        };
        out.push(LevelCheck {
            concurrency: m.concurrency,
            error_pct: Errors {
                output_tok_s: error_pct(p.output_tok_s, m.output_tok_s),
                ttft_p50_ms: error_pct(p.ttft_p50_ms, m.ttft_p50_ms),
                tpot_p50_ms: error_pct(p.tpot_p50_ms, m.tpot_p50_ms),
            },
            measured,
            predicted,
        });
    }
    let mean_abs = |f: fn(&Errors) -> f64| {
        let n = out.len().max(1) as f64;
        (out.iter().map(|c| f(&c.error_pct).abs()).sum::<f64>() / n).max(ERROR_FLOOR_PCT)
    };
    let errors = Errors {
        output_tok_s: mean_abs(|e| e.output_tok_s),
        ttft_p50_ms: mean_abs(|e| e.ttft_p50_ms),
        tpot_p50_ms: mean_abs(|e| e.tpot_p50_ms),
    };
    (out, errors)
}

/// The whole model of one series.
pub(crate) fn series_model(
    series: u64,
    series_label: Option<String>,
    engine: Option<String>,
    levels: &[Measured],
    known: &Known,
) -> Result<SeriesModel, String> {
    let (params, range, sources, warnings) = fit(levels, known)?;
    let (checks, error_pct) = checks(&params, levels);
    Ok(SeriesModel {
        series,
        series_label,
        engine,
        params,
        range,
        sources,
        warnings,
        levels: checks,
        error_pct,
    })
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
