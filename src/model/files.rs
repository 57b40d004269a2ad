//! The model's files and its command: a run folder's levels fitted,
//! `model.json` written beside `summary.json` (after a sweep, and after
//! each setting of a tune), and `tokbench predict` (docs/predict.md).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use color_eyre::eyre::{Result, WrapErr};
use serde_json::Value;

use crate::analysis::decide::CapacitySlo;
use crate::cli::PredictArgs;
use crate::exit::{EXIT_OK, EXIT_REFUSED};
use crate::report::schema::SummaryFile;

use super::fit::{series_model, Known, Measured};
use super::predict::{self, knobs, Ask, Row};
use super::schema::{compatible, ModelFile, Params, SeriesModel, FILE_NAME, MODEL_VERSION};

/// Every knob name of every engine (a tune's grid names its own).
fn is_cap_knob(name: &str) -> bool {
    ["llamacpp", "ollama", "vllm", "sglang", "tgi"]
        .iter()
        .any(|e| knobs(e).contains(&name))
}

/// The summary's series fitted, each on its own levels: the models, and
/// for each series that could not be fitted, why.
pub(crate) fn fit_summary(summary: &SummaryFile) -> (ModelFile, Vec<(u64, String)>) {
    let mut by_series: BTreeMap<u64, Vec<Measured>> = BTreeMap::new();
    let mut labels: BTreeMap<u64, Option<String>> = BTreeMap::new();
    for level in &summary.levels {
        let s = level.series.unwrap_or(0);
        labels
            .entry(s)
            .or_insert_with(|| level.series_label.clone());
        let entry = by_series.entry(s).or_default();
        if let Some(m) = Measured::from_level(level) {
            entry.push(m);
        }
    }
    let mut models = Vec::new();
    let mut failed = Vec::new();
    for (series, levels) in &by_series {
        let known = known_of(summary, *series);
        match series_model(
            *series,
            labels.get(series).cloned().flatten(),
            summary.run.engine.clone(),
            levels,
            &known,
        ) {
            Ok(m) => models.push(m),
            Err(why) => failed.push((*series, why)),
        }
    }
    (
        ModelFile {
            version: MODEL_VERSION,
            tokbench_version: env!("CARGO_PKG_VERSION").to_string(),
            models,
        },
        failed,
    )
}

/// What a tune's setting says of the series: its knob and slot context.
fn known_of(summary: &SummaryFile, series: u64) -> Known {
    let Some(setting) = summary
        .tune
        .as_ref()
        .and_then(|t| t.settings.iter().find(|s| s.series == Some(series)))
    else {
        return Known::default();
    };
    let knob = setting.values.iter().find_map(|(k, v)| {
        let value = v.as_str()?.trim().parse::<u32>().ok()?;
        is_cap_knob(k).then(|| (k.clone(), value))
    });
    Known {
        knob,
        slot_context_tokens: setting
            .memory
            .get("slot_context_tokens")
            .and_then(Value::as_u64)
            .filter(|n| *n > 0),
    }
}

fn read_summary_file(dir: &Path) -> Result<SummaryFile> {
    let (path, text) = crate::report::saved::read_summary(dir)?;
    serde_json::from_str(&text)
        .wrap_err_with(|| format!("{} is not a tokbench summary", path.display()))
}

/// After a sweep (or a tune's setting): fit the folder's series, write
/// `model.json`, and print the last series' fit and its own error in one
/// short block. Best effort: a model that cannot be fitted or saved is
/// said in one line and never fails the run.
pub(crate) fn fit_and_save(dir: &Path, out: &mut dyn Write) {
    let summary = match read_summary_file(dir) {
        Ok(s) => s,
        Err(_) => return,
    };
    let (file, failed) = fit_summary(&summary);
    let last_series = summary
        .levels
        .iter()
        .filter_map(|l| l.series)
        .max()
        .unwrap_or(0);
    // Said only where the series had a sweep level to fit: an open-loop
    // or replayed run has none, and is no model's to fit.
    let swept = summary
        .levels
        .iter()
        .any(|l| l.series.unwrap_or(0) == last_series && Measured::from_level(l).is_some());
    if let Some((_, why)) = failed
        .iter()
        .find(|(s, _)| *s == last_series)
        .filter(|_| swept)
    {
        let _ = writeln!(out, "model: {why}");
    }
    if file.models.is_empty() {
        return;
    }
    let path = dir.join(FILE_NAME);
    let value = serde_json::to_value(&file).unwrap_or(Value::Null);
    if let Err(e) = crate::report::atomic::write_json_atomic(&path, &value) {
        let _ = writeln!(out, "model: cannot write {}: {e}", path.display());
        return;
    }
    // The chart again, with the predicted line beside the measured one.
    if let Some(value) = crate::report::saved::read_summary(dir)
        .ok()
        .and_then(|(_, text)| serde_json::from_str::<Value>(&text).ok())
    {
        for (path, why) in crate::report::formats::try_run_reports(dir, &value) {
            let _ = writeln!(out, "model: cannot redraw {}: {why}", path.display());
        }
    }
    if let Some(m) = file.models.iter().find(|m| m.series == last_series) {
        for line in fit_block(m) {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// The fit in words, and its own error on each level.
pub(crate) fn fit_block(m: &SeriesModel) -> Vec<String> {
    let p = &m.params;
    let cap = p
        .cap
        .map_or("no cap seen".to_string(), |c| format!("cap {c}"));
    let mut lines = vec![format!(
        "model ({FILE_NAME}): step {:.2} ms + {:.3} ms per running sequence, prefill {:.4} ms per prompt token, overhead {:.1} ms, {cap}",
        p.step_ms, p.step_ms_per_seq, p.prefill_ms_per_token, p.overhead_ms
    )];
    let e = &m.error_pct;
    lines.push(format!(
        "model's own error, predicted vs measured (mean, 2% at least): tok/s ±{:.1}%, TTFT p50 ±{:.1}%, TPOT p50 ±{:.1}% (by streams: {})",
        e.output_tok_s,
        e.ttft_p50_ms,
        e.tpot_p50_ms,
        m.levels
            .iter()
            .map(|l| format!(
                "{}: {:+.1}% {:+.1}% {:+.1}%",
                l.concurrency, l.error_pct.output_tok_s, l.error_pct.ttft_p50_ms, l.error_pct.tpot_p50_ms
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for w in &m.warnings {
        lines.push(format!("model: {w}"));
    }
    lines
}

/// A folder's `model.json`, or the folder fitted now when it has none.
/// A file of another version is refused, naming both.
pub(crate) fn load_model(dir: &Path) -> Result<(ModelFile, SummaryFile), String> {
    let summary = read_summary_file(dir).map_err(|e| format!("{e:#}"))?;
    let path = dir.join(FILE_NAME);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        let version = value.get("version").and_then(Value::as_u64).unwrap_or(0);
        if !u32::try_from(version).is_ok_and(compatible) {
            return Err(format!(
                "{} is model version {version}; this tokbench reads version {MODEL_VERSION}: delete it and run predict again to refit from summary.json",
                path.display()
            ));
        }
        let file: ModelFile = serde_json::from_value(value)
            .map_err(|e| format!("{} does not read as a model: {e}", path.display()))?;
        return Ok((file, summary));
    }
    let (file, failed) = fit_summary(&summary);
    if file.models.is_empty() {
        let why = failed
            .first()
            .map_or("the run has no finished levels".to_string(), |(_, w)| {
                w.clone()
            });
        return Err(why);
    }
    Ok((file, summary))
}

/// `--set NAME=V` read against the engine's knobs.
fn parse_set(set: &str, engine: &str) -> Result<(String, u32), String> {
    let (name, value) = set
        .split_once('=')
        .ok_or_else(|| format!("--set {set}: give KNOB=VALUE, e.g. np=8"))?;
    let known = knobs(engine);
    if !known.contains(&name.trim()) {
        return Err(if known.is_empty() {
            format!("--set {name}: the run's engine ({engine}) has no knob tokbench can predict")
        } else {
            format!(
                "--set {name}: not a knob tokbench knows for {engine}; it knows {}",
                known.join(", ")
            )
        });
    }
    let v = value
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("--set {set}: the value must be a whole number"))?;
    Ok((name.trim().to_string(), v))
}

fn slo_of(summary: &SummaryFile, args: &PredictArgs) -> (CapacitySlo, bool) {
    let mut slo = CapacitySlo::default();
    let mut given = false;
    if let Some(s) = &summary.run.slo {
        slo.ttft_p99_ms = s.ttft_p99_ms;
        slo.tpot_p99_ms = s.tpot_p99_ms;
        slo.min_stream_tok_s = s.min_stream_tok_s;
        if let Some(e) = s.max_error_rate {
            slo.max_error_rate = e;
        }
        given = s.is_given();
    }
    if args.slo_ttft_p99_ms.is_some()
        || args.slo_tpot_p99_ms.is_some()
        || args.slo_min_stream_tok_s.is_some()
    {
        given = true;
        slo.ttft_p99_ms = args.slo_ttft_p99_ms.or(slo.ttft_p99_ms);
        slo.tpot_p99_ms = args.slo_tpot_p99_ms.or(slo.tpot_p99_ms);
        slo.min_stream_tok_s = args.slo_min_stream_tok_s.or(slo.min_stream_tok_s);
    }
    (slo, given)
}

/// `tokbench predict RUN_DIR`.
pub fn run_predict_command(args: &PredictArgs) -> Result<i32> {
    let refuse = |why: String| {
        crate::say!("tokbench predict: {why}");
        Ok(EXIT_REFUSED)
    };
    let (file, summary) = match load_model(&args.dir) {
        Ok(x) => x,
        Err(why) => return refuse(why),
    };
    let model = match args.series {
        Some(n) => file.models.iter().find(|m| m.series + 1 == n),
        None => file.models.last(),
    };
    let Some(model) = model else {
        return refuse(format!(
            "no model of series {} in {}",
            args.series.unwrap_or(0),
            args.dir.display()
        ));
    };
    let engine = model.engine.clone().unwrap_or_else(|| "unknown".into());
    let set = match args
        .set
        .as_deref()
        .map(|s| parse_set(s, &engine))
        .transpose()
    {
        Ok(s) => s,
        Err(why) => return refuse(why),
    };
    let (pin, pout) = args.profile.map_or((None, None), |p| {
        let (i, o) = p.lengths();
        (Some(i), Some(o))
    });
    let mut concurrency = args.concurrency.clone();
    if concurrency.is_empty() {
        concurrency = model.levels.iter().map(|l| l.concurrency).collect();
    }
    concurrency.sort_unstable();
    concurrency.dedup();
    let ask = Ask {
        concurrency,
        input_len: u64::from(
            args.random_input_len
                .or(pin)
                .unwrap_or(model.range.input_len.round() as u32),
        ),
        output_len: u64::from(
            args.random_output_len
                .or(pout)
                .unwrap_or(model.range.output_len.round() as u32),
        ),
        set,
    };
    let mut out = std::io::stdout();
    let text = match prediction_text(model, &ask, &summary, args) {
        Ok(lines) => lines,
        Err(why) => return refuse(why),
    };
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    Ok(EXIT_OK)
}

fn plus_minus(x: f64) -> String {
    format!("±{:.0}%", x.max(1.0))
}

/// The predicted table, knee, capacity and cost, every line labelled.
fn prediction_text(
    model: &SeriesModel,
    ask: &Ask,
    summary: &SummaryFile,
    args: &PredictArgs,
) -> Result<String, String> {
    let params = predict::with_setting(model, ask)?;
    let rows = predict::rows(model, &params, ask);
    let mut s = String::new();
    let setting = ask
        .set
        .as_ref()
        .map_or(String::new(), |(k, v)| format!(", {k}={v}"));
    s += &format!(
        "predicted from {} (series {}{}), in {} / out {}{setting}: not measured\n",
        args.dir.display(),
        model.series + 1,
        model
            .series_label
            .as_deref()
            .filter(|l| !l.starts_with("series "))
            .map_or(String::new(), |l| format!(" {l}")),
        ask.input_len,
        ask.output_len,
    );
    for src in &model.sources {
        if src.contains("client's figures alone") {
            s += &format!("note: {src}\n");
        }
    }
    for w in &model.warnings {
        s += &format!("note: {w}\n");
    }
    if let Some(line) = past_the_batch(model, &params, ask) {
        s += &format!("note: {line}\n");
    }
    s += " streams  predicted tok/s      TTFT p50 ms      TPOT p50 ms  note\n";
    for r in &rows {
        s += &row_line(r);
    }
    let (slo, given) = slo_of(summary, args);
    let decision = predict::decide(&rows, &slo, given);
    let mut knee = decision.knee.clone();
    if let Some(k) = knee.as_mut() {
        // The model knows its own limits: the cause is no guess.
        match params.cap {
            Some(cap) if k.to_concurrency > cap && k.from_concurrency >= cap => {
                let name = params
                    .knob
                    .as_deref()
                    .map_or(String::new(), |n| format!(", {n}={cap}"));
                k.told_by_server(&format!(
                    "the model runs at most {cap} at once{name}, the rest queue"
                ));
            }
            None if params.kv_tokens.is_none() => k.told_by_server(
                "in the model the step time grows with the batch, so more streams add little",
            ),
            _ => {}
        }
    }
    if let Some(k) = &knee {
        let step = format!("{} -> {} streams", k.from_concurrency, k.to_concurrency);
        if k.reason.starts_with(&step) {
            s += &format!("predicted knee: {}\n", of_predicted_levels(&k.reason));
        } else {
            s += &format!(
                "predicted knee: {step}: {}\n",
                of_predicted_levels(&k.reason)
            );
        }
    } else {
        s += "predicted knee: none within these levels\n";
    }
    match &decision.capacity {
        Ok(c) => {
            s += &format!("predicted capacity: {}\n", of_predicted_levels(&c.reason));
            let price = summary
                .cost
                .as_ref()
                .and_then(|c| crate::report::schema::number(&c.gpu_price_per_hour));
            if let Some(price) = price {
                let cost = crate::analysis::cost::cost(c.output_throughput, price, None, None);
                if let Some(per_m) = cost.cost_per_m_output {
                    s += &format!(
                        "predicted cost: {} per million output tokens at the predicted capacity ({} per GPU-hour)\n",
                        crate::fmt::dollars(per_m),
                        crate::fmt::dollars(price)
                    );
                }
            }
        }
        Err(no) => {
            s += &format!(
                "predicted capacity: none: {}\n",
                of_predicted_levels(&no.reason)
            )
        }
    }
    Ok(s)
}

fn row_line(r: &Row) -> String {
    match &r.outcome {
        Ok(o) => format!(
            "{:>8}  {:>9.1} {:<5}  {:>8.1} {:<5}  {:>8.2} {:<5}  predicted{}\n",
            r.concurrency,
            o.output_tok_s,
            plus_minus(r.expected_pct.output_tok_s),
            o.ttft_p50_ms,
            plus_minus(r.expected_pct.ttft_p50_ms),
            o.tpot_p50_ms,
            plus_minus(r.expected_pct.tpot_p50_ms),
            r.extrapolating
                .as_deref()
                .map_or(String::new(), |e| format!(", {e}")),
        ),
        Err(why) => format!("{:>8}  {why}\n", r.concurrency),
    }
}

/// A setting's predicted peak output tok/s over the asked levels, and its
/// expected error there, % (the widest of the levels'), for `tune
/// --predict`; why not, where it is not predicted.
pub(crate) fn predicted_peak(model: &SeriesModel, ask: &Ask) -> Result<(f64, f64), String> {
    predicted_levels(model, ask)?
        .into_iter()
        .fold(None, |best: Option<(u32, f64, f64)>, level| match best {
            Some(b) if b.1 >= level.1 => Some(b),
            _ => Some(level),
        })
        .map(|(_, tok_s, error)| (tok_s, error))
        .ok_or_else(|| "no level to predict".to_string())
}

/// Each asked level's predicted output tok/s and its expected error, %:
/// (streams, tok/s, error); why not, where a level is not predicted.
pub(crate) fn predicted_levels(
    model: &SeriesModel,
    ask: &Ask,
) -> Result<Vec<(u32, f64, f64)>, String> {
    let params = predict::with_setting(model, ask)?;
    predict::rows(model, &params, ask)
        .into_iter()
        .map(|r| match r.outcome {
            Ok(o) => Ok((r.concurrency, o.output_tok_s, r.expected_pct.output_tok_s)),
            Err(why) => Err(why),
        })
        .collect()
}

/// Where an asked level runs a larger batch than the run measured: the
/// step's growth with the batch is extrapolated there. On real servers a
/// fit over a batch of 1-2 got that growth wrong (it cannot tell it from
/// the other streams' prefill stalls) while the knee held.
fn past_the_batch(model: &SeriesModel, params: &Params, ask: &Ask) -> Option<String> {
    let measured = model.range.batch_max.max(1.0);
    let past = ask
        .concurrency
        .iter()
        .any(|&c| f64::from(params.cap.map_or(c, |cap| cap.min(c))) > measured + 0.5);
    past.then(|| {
        format!(
            "the run measured a running batch of {:.0} to {measured:.0}: past {measured:.0}, how the step grows with the batch is extrapolated; read those figures as a direction and the knee as the answer (docs/predict.md, \"How far to trust it\")",
            model.range.batch_min.max(1.0).floor()
        )
    })
}

/// The decision's words are written for measured levels; over predicted
/// ones, the level a capacity rests on was predicted, not measured.
fn of_predicted_levels(reason: &str) -> String {
    reason.replace("level measured", "level predicted")
}
