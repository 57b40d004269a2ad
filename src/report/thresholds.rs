//! `--threshold FIGURE OP VALUE[@WHERE]`: pass/fail checks on a run
//! (docs/thresholds.md). Parsed and checked against the plan before
//! anything is sent ([`parse`], [`check_plan`]); judged at the end over
//! the finished run's saved data, a pure function of `summary.json`'s
//! levels and decision ([`evaluate`]). The result is summary.json's
//! `thresholds` ([`ThresholdEntry`]), what the faces print, what
//! `--events` sends and what `report --format junit` turns into test cases.

use color_eyre::eyre::{bail, eyre, Result};
use serde_json::Value;

use super::schema::{self, LevelFile, SummaryFile, ThresholdEntry};
use crate::analysis::decide::error_rate;

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

impl Op {
    /// Longest first, so `<=` is not read as `<`.
    const ALL: [(&'static str, Op); 5] = [
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("==", Op::Eq),
        ("<", Op::Lt),
        (">", Op::Gt),
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Eq => "==",
        }
    }

    fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Op::Lt => value < limit,
            Op::Le => value <= limit,
            Op::Gt => value > limit,
            Op::Ge => value >= limit,
            Op::Eq => value == limit,
        }
    }

    /// Of two values, the one further on the wrong side of the limit (for
    /// `==`, one that misses it).
    fn worse(self, a: f64, b: f64, limit: f64) -> bool {
        match self {
            Op::Lt | Op::Le => a > b,
            Op::Gt | Op::Ge => a < b,
            Op::Eq => a != limit && b == limit,
        }
    }
}

/// What a threshold reads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Figure {
    /// A latency statistic of a level: `metric` (`ttft`, `tpot`, `itl`,
    /// `e2el`), and the saved key's statistic: `mean`, or a percentile as
    /// typed (`99`, `99.9`).
    Latency {
        metric: &'static str,
        stat: String,
    },
    /// `tok_s`: output throughput.
    TokS,
    /// `req_s`: requests per second.
    ReqS,
    PerStreamTokS,
    StreamDecodeTokS,
    ErrorRate,
    /// `--goodput`'s good requests per second, and their share.
    GoodputReqS,
    GoodputShare,
    /// Run-level: the capacity's concurrency.
    Capacity,
    /// Run-level: the highest output tok/s of a whole level.
    PeakTokS,
    /// Run-level: dollars per million output tokens at capacity.
    CostPerM,
}

const METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];

/// The names a threshold knows, as an error lists them.
pub(crate) const KNOWN_FIGURES: &str = "ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, ttft_mean_ms (and any pNN of --percentiles; the same for tpot_, itl_, e2el_), tok_s, req_s, per_stream_tok_s, stream_decode_tok_s, error_rate, goodput_req_s, goodput_share (per level); capacity, peak_tok_s, cost_per_m (run-level)";

impl Figure {
    fn parse(name: &str) -> Option<Figure> {
        let simple = match name {
            "tok_s" => Some(Figure::TokS),
            "req_s" => Some(Figure::ReqS),
            "per_stream_tok_s" => Some(Figure::PerStreamTokS),
            "stream_decode_tok_s" => Some(Figure::StreamDecodeTokS),
            "error_rate" => Some(Figure::ErrorRate),
            "goodput_req_s" => Some(Figure::GoodputReqS),
            "goodput_share" => Some(Figure::GoodputShare),
            "capacity" => Some(Figure::Capacity),
            "peak_tok_s" => Some(Figure::PeakTokS),
            "cost_per_m" => Some(Figure::CostPerM),
            _ => None,
        };
        if simple.is_some() {
            return simple;
        }
        let rest = name.strip_suffix("_ms")?;
        let (metric, stat) = rest.split_once('_')?;
        let metric = METRICS.into_iter().find(|m| *m == metric)?;
        let stat = match stat {
            "mean" => "mean".to_string(),
            p => {
                let digits = p.strip_prefix('p')?;
                let v: f64 = digits.parse().ok()?;
                if !(v > 0.0 && v < 100.0) || digits.starts_with('.') {
                    return None;
                }
                digits.to_string()
            }
        };
        Some(Figure::Latency { metric, stat })
    }

    /// Whether the figure is the run's, not a level's.
    pub(crate) fn is_run_level(&self) -> bool {
        matches!(self, Figure::Capacity | Figure::PeakTokS | Figure::CostPerM)
    }

    fn unit(&self) -> &'static str {
        match self {
            Figure::Latency { .. } => "ms",
            Figure::TokS | Figure::PerStreamTokS | Figure::StreamDecodeTokS | Figure::PeakTokS => {
                "tok/s"
            }
            Figure::ReqS | Figure::GoodputReqS => "req/s",
            Figure::Capacity => "streams",
            Figure::CostPerM => "$ per M output tokens",
            Figure::ErrorRate | Figure::GoodputShare => "",
        }
    }

    /// A level's value of the figure, or why it has none.
    fn of_level(&self, level: &LevelFile) -> Result<f64, String> {
        let v = match self {
            Figure::Latency { metric, stat } => {
                let key = if stat == "mean" {
                    format!("mean_{metric}_ms")
                } else {
                    format!("p{stat}_{metric}_ms")
                };
                let median = (stat == "50")
                    .then(|| level.stat(&format!("median_{metric}_ms")))
                    .flatten();
                return level.stat(&key).or(median).ok_or_else(|| {
                    if stat != "mean" && !level.stats.contains_key(&key) {
                        format!(
                            "not measured: the level saved no {key} (add {stat} to --percentiles)"
                        )
                    } else {
                        format!(
                            "not measured: the level has no {} sample",
                            metric.to_uppercase()
                        )
                    }
                });
            }
            Figure::TokS => level.output_throughput,
            Figure::ReqS => level.request_throughput,
            Figure::PerStreamTokS => level.per_stream_tok_s,
            Figure::StreamDecodeTokS => level.stream_decode_tok_s,
            Figure::ErrorRate => {
                let (completed, failed) = (level.completed.unwrap_or(0), level.failed.unwrap_or(0));
                if completed + failed == 0 {
                    return Err("not measured: no request of the level came back".into());
                }
                Some(error_rate(completed, failed))
            }
            Figure::GoodputReqS => {
                return level
                    .request_goodput
                    .ok_or_else(|| "not measured: the run was not given --goodput".into());
            }
            Figure::GoodputShare => {
                return level
                    .goodput
                    .as_ref()
                    .and_then(|g| g.get("share"))
                    .and_then(Value::as_f64)
                    .ok_or_else(|| "not measured: the run was not given --goodput".into());
            }
            Figure::Capacity | Figure::PeakTokS | Figure::CostPerM => None,
        };
        v.filter(|x| x.is_finite())
            .ok_or_else(|| "not measured: the level did not save it".into())
    }
}

/// Where a threshold is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Where {
    /// No `@`: the run's answer (run-level figures only).
    Run,
    /// `@N`: the level at concurrency N (a rate plan: N requests/s).
    Level(f64),
    /// `@all`: every level of the plan.
    All,
    /// `@capacity`: the capacity level.
    Capacity,
}

/// One `--threshold`, parsed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Threshold {
    /// As typed, without spaces.
    pub expr: String,
    pub figure: Figure,
    pub op: Op,
    pub limit: f64,
    pub at: Where,
}

/// `FIGURE OP VALUE[@WHERE]`, e.g. `ttft_p99_ms<500@16`; spaces are
/// ignored. The error is one line naming what is wrong and what is known.
pub(crate) fn parse(raw: &str) -> Result<Threshold> {
    let expr: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    let ops = "<, <=, >, >=, ==";
    let at = expr
        .char_indices()
        .find(|(_, c)| matches!(c, '<' | '>' | '='))
        .map(|(i, _)| i);
    let Some(at) = at else {
        bail!("--threshold {raw:?}: no comparison; write FIGURE OP VALUE[@WHERE] with OP one of {ops}, e.g. ttft_p99_ms<500@16");
    };
    let (name, rest) = expr.split_at(at);
    let figure = Figure::parse(name).ok_or_else(|| {
        eyre!("--threshold {raw:?}: unknown figure {name:?}; known: {KNOWN_FIGURES}")
    })?;
    let (op, rest) = Op::ALL
        .iter()
        .find_map(|(s, op)| rest.strip_prefix(s).map(|r| (*op, r)))
        .filter(|(_, r)| !r.starts_with(['<', '>', '=']))
        .ok_or_else(|| {
            let bad: String = rest.chars().take_while(|c| "<>=!".contains(*c)).collect();
            eyre!("--threshold {raw:?}: unknown operator {bad:?}; known: {ops}")
        })?;
    let (value, place) = match rest.split_once('@') {
        Some((v, p)) => (v, Some(p)),
        None => (rest, None),
    };
    let limit: f64 = value
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| eyre!("--threshold {raw:?}: {value:?} is not a number"))?;
    let at = match place {
        None => Where::Run,
        Some("all") => Where::All,
        Some("capacity") => Where::Capacity,
        Some(n) => match n.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Where::Level(v),
            _ => bail!("--threshold {raw:?}: @{n} is not a level; write @N (the level at concurrency N, or N req/s in a rate plan), @all or @capacity"),
        },
    };
    match (figure.is_run_level(), at) {
        (true, Where::Run) | (false, Where::Level(_) | Where::All | Where::Capacity) => {}
        (true, _) => {
            bail!("--threshold {raw:?}: {name} is the run's figure, not a level's: drop the @")
        }
        (false, _) => bail!(
            "--threshold {raw:?}: {name} is a level's figure: add @N (a level), @all or @capacity"
        ),
    }
    Ok(Threshold {
        expr,
        figure,
        op,
        limit,
        at,
    })
}

/// The levels a plan has before it runs: what `@N` may name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Planned {
    /// Closed loop: the concurrencies.
    Concurrency(Vec<u32>),
    /// Open loop: the rates, requests/s.
    Rate(Vec<f64>),
    /// No levels known before the run (`--find-capacity`, `--replay`,
    /// `--ramp`): the words for it.
    Unfixed(&'static str),
}

impl Planned {
    fn has(&self, n: f64) -> bool {
        match self {
            Planned::Concurrency(c) => c.iter().any(|c| f64::from(*c) == n),
            Planned::Rate(r) => r.contains(&n),
            Planned::Unfixed(_) => false,
        }
    }

    /// `concurrency 16`, `rate 4 req/s`.
    fn name(&self, n: f64) -> String {
        match self {
            Planned::Rate(_) => format!("rate {} req/s", crate::fmt::threshold(n)),
            _ => format!("concurrency {}", crate::fmt::threshold(n)),
        }
    }

    fn listed(&self) -> String {
        match self {
            Planned::Concurrency(c) => {
                let c: Vec<String> = c.iter().map(u32::to_string).collect();
                format!("concurrency {}", c.join(","))
            }
            Planned::Rate(r) => {
                let r: Vec<String> = r.iter().map(|r| crate::fmt::threshold(*r)).collect();
                format!("--request-rate {}", r.join(","))
            }
            Planned::Unfixed(what) => what.to_string(),
        }
    }

    /// The planned levels in order, as numbers.
    fn keys(&self) -> Vec<f64> {
        let mut keys: Vec<f64> = match self {
            Planned::Concurrency(c) => c.iter().map(|c| f64::from(*c)).collect(),
            Planned::Rate(r) => r.clone(),
            Planned::Unfixed(_) => Vec::new(),
        };
        let mut seen: Vec<f64> = Vec::new();
        keys.retain(|k| {
            let new = !seen.contains(k);
            seen.push(*k);
            new
        });
        keys
    }
}

impl Default for Planned {
    fn default() -> Self {
        Planned::Concurrency(Vec::new())
    }
}

/// A run's `--threshold`s and the levels its plan had: what the recorder
/// judges at the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checks {
    pub(crate) list: Vec<Threshold>,
    pub(crate) planned: Planned,
}

impl Checks {
    /// Parse each `--threshold` and check its level against the plan.
    pub(crate) fn parse(raw: &[String], planned: Planned) -> Result<Checks> {
        let list = raw.iter().map(|r| parse(r)).collect::<Result<Vec<_>>>()?;
        check_plan(&list, &planned)?;
        Ok(Checks { list, planned })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every threshold judged on `summary`: on the whole run, or for a
    /// tune (`per_series`) on each series in turn.
    pub(crate) fn judge(&self, summary: &SummaryFile, per_series: bool) -> Vec<ThresholdEntry> {
        let series: Vec<Option<u64>> = if per_series {
            let mut ids: Vec<u64> = summary
                .levels
                .iter()
                .map(|l| l.series.unwrap_or(0))
                .collect();
            ids.extend(summary.series.iter().filter_map(|s| s.index));
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        series
            .into_iter()
            .flat_map(|s| {
                self.list
                    .iter()
                    .map(move |t| evaluate(t, summary, s, &self.planned))
            })
            .collect()
    }
}

/// Refuse, before anything is sent, a threshold at a level the plan does
/// not have.
pub(crate) fn check_plan(thresholds: &[Threshold], planned: &Planned) -> Result<()> {
    for t in thresholds {
        if let Where::Level(n) = t.at {
            if let Planned::Unfixed(what) = planned {
                bail!("--threshold {}: {what} has no levels known before it runs; use @all or @capacity", t.expr);
            }
            if !planned.has(n) {
                bail!(
                    "--threshold {}: {} is not in the plan ({}); name a planned level, @all or @capacity",
                    t.expr,
                    planned.name(n),
                    planned.listed()
                );
            }
        }
    }
    Ok(())
}

/// A saved level's place in the plan: its rate in a rate run, its
/// concurrency otherwise.
fn level_key(level: &LevelFile, planned: &Planned) -> Option<f64> {
    match planned {
        Planned::Rate(_) => level.request_rate.as_ref().and_then(Value::as_f64),
        _ => level.max_concurrency.map(f64::from),
    }
}

/// Levels of `series` (None: every level) that the run measured in
/// full: not hand-set, not cut short.
fn judged(summary: &SummaryFile, series: Option<u64>) -> Vec<&LevelFile> {
    summary
        .levels
        .iter()
        .filter(|l| series.is_none_or(|s| l.series.unwrap_or(0) == s))
        .filter(|l| l.mode_or_planned() != "manual" && !l.partial)
        .collect()
}

/// Why a planned level has no whole measurement: cut short, skipped by
/// the fit, or never reached.
fn missing_reason(
    summary: &SummaryFile,
    series: Option<u64>,
    key: f64,
    planned: &Planned,
) -> String {
    let name = planned.name(key);
    let ours = |s: Option<u64>| series.is_none_or(|want| s.unwrap_or(0) == want);
    if let Some(level) = summary
        .levels
        .iter()
        .find(|l| ours(l.series) && l.partial && level_key(l, planned) == Some(key))
    {
        return match level.end_reason.as_deref() {
            Some("budget") => format!("{name} did not finish: it ran out of the budget (partial)"),
            _ => format!("{name} did not finish: the run was stopped during it (partial)"),
        };
    }
    let skipped = summary.fit.as_ref().and_then(|f| {
        f.skipped
            .iter()
            .find(|s| ours(s.series) && s.concurrency.map(f64::from) == Some(key))
    });
    match skipped.and_then(|s| s.reason.as_deref()) {
        Some(reason) => format!("{name} did not run: skipped ({reason})"),
        None => format!("{name} did not run: the run ended before it"),
    }
}

/// A level's key as saved: a whole number as an integer (`16`, not `16.0`).
fn key_value(key: f64) -> Value {
    if key.fract() == 0.0 && (0.0..9.0e15).contains(&key) {
        Value::from(key as u64)
    } else {
        Value::from(key)
    }
}

/// The value of a number in summary.json's decision.
fn num(n: &Option<serde_json::Number>) -> Option<f64> {
    schema::number(n)
}

/// Judge one threshold over a finished run (`series`: one series of a
/// tune; None: the whole run). Pure: the summary as saved, the plan.
pub(crate) fn evaluate(
    t: &Threshold,
    summary: &SummaryFile,
    series: Option<u64>,
    planned: &Planned,
) -> ThresholdEntry {
    let capacity = match series {
        Some(s) => summary
            .series
            .iter()
            .find(|e| e.index == Some(s))
            .and_then(|e| e.capacity.clone())
            .or_else(|| {
                (s == 0 && summary.series.is_empty())
                    .then(|| summary.capacity.clone())
                    .flatten()
            }),
        None => summary.capacity.clone(),
    };
    let capacity_at = capacity.as_ref().and_then(|c| c.concurrency);
    let levels = judged(summary, series);
    let mut entry = ThresholdEntry {
        expr: t.expr.clone(),
        op: Some(t.op.as_str().to_string()),
        limit: Some(t.limit),
        unit: Some(t.figure.unit().to_string()),
        series,
        ..ThresholdEntry::default()
    };
    let no_capacity = || {
        let why = summary
            .capacity_reason
            .clone()
            .unwrap_or_else(|| "no level met the SLO".into());
        format!("no capacity: {why}")
    };
    // The run-level figures.
    let run_value: Option<Result<f64, String>> = match t.figure {
        Figure::Capacity => Some(capacity_at.map(f64::from).ok_or_else(no_capacity)),
        Figure::PeakTokS => Some(
            levels
                .iter()
                .filter_map(|l| l.output_throughput)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                .ok_or_else(|| "not measured: no level ran to its end".to_string()),
        ),
        Figure::CostPerM => Some(
            cost_per_m(summary, series, capacity.as_ref()).ok_or_else(|| {
                if summary.cost.is_none() {
                    "not measured: the run was not given --gpu-price-per-hour".to_string()
                } else {
                    no_capacity()
                }
            }),
        ),
        _ => None,
    };
    if let Some(value) = run_value {
        entry.level = match t.figure {
            Figure::CostPerM => capacity_at.map(Value::from),
            _ => None,
        };
        return settle(entry, t, value);
    }
    // Per-level: which levels, then the worst of them.
    let keys: Vec<f64> = match t.at {
        Where::Level(n) => vec![n],
        Where::All => planned.keys(),
        Where::Capacity => match capacity_at {
            Some(c) => vec![f64::from(c)],
            None => return settle(entry, t, Err(no_capacity())),
        },
        Where::Run => {
            return settle(
                entry,
                t,
                Err("a level's figure needs @N, @all or @capacity".into()),
            )
        }
    };
    // @all over a plan of unknown levels (a search, a replay): the levels
    // it ran.
    let keys = if keys.is_empty() && t.at == Where::All {
        let mut ran: Vec<f64> = Vec::new();
        for key in levels.iter().filter_map(|l| level_key(l, planned)) {
            if !ran.contains(&key) {
                ran.push(key);
            }
        }
        ran
    } else {
        keys
    };
    if keys.is_empty() {
        return settle(entry, t, Err("no level ran to its end".into()));
    }
    let mut worst: Option<(f64, f64)> = None;
    for key in keys {
        let at_key: Vec<&&LevelFile> = levels
            .iter()
            .filter(|l| level_key(l, planned) == Some(key))
            .collect();
        if at_key.is_empty() {
            entry.level = Some(key_value(key));
            return settle(entry, t, Err(missing_reason(summary, series, key, planned)));
        }
        for level in at_key {
            match t.figure.of_level(level) {
                Ok(v) => {
                    if worst.is_none_or(|(_, w)| t.op.worse(v, w, t.limit)) {
                        worst = Some((key, v));
                    }
                }
                Err(why) => {
                    entry.level = Some(key_value(key));
                    return settle(entry, t, Err(format!("{}: {why}", planned.name(key))));
                }
            }
        }
    }
    let Some((key, value)) = worst else {
        return settle(entry, t, Err("no level ran to its end".into()));
    };
    entry.level = Some(key_value(key));
    settle(entry, t, Ok(value))
}

/// The entry's value, verdict and reason.
fn settle(mut entry: ThresholdEntry, t: &Threshold, value: Result<f64, String>) -> ThresholdEntry {
    match value {
        Ok(v) => {
            entry.value = Some(crate::fmt::round4(v));
            entry.ok = t.op.holds(v, t.limit);
            if !entry.ok {
                entry.reason = Some(format!(
                    "measured {}, limit {} {}",
                    shown(v, &t.figure),
                    t.op.as_str(),
                    crate::fmt::threshold(t.limit)
                ));
            }
        }
        Err(why) => {
            entry.ok = false;
            entry.reason = Some(why);
        }
    }
    entry
}

/// The cost per million output tokens at the capacity: the run's saved
/// cost, or for one series of a tune its own capacity's throughput at the
/// run's GPU price (`analysis::cost`).
fn cost_per_m(
    summary: &SummaryFile,
    series: Option<u64>,
    capacity: Option<&schema::Capacity>,
) -> Option<f64> {
    let cost = summary.cost.as_ref()?;
    if series.is_none() || summary.series.len() <= 1 {
        return num(&cost.cost_per_m_output);
    }
    let tok_s = capacity.and_then(|c| num(&c.output_throughput))?;
    let price = num(&cost.gpu_price_per_hour)?;
    crate::analysis::cost::cost(tok_s, price, None, None).cost_per_m_output
}

/// A value as the line shows it, with its unit: `312.4 ms`, `0.0123`.
pub(crate) fn shown(v: f64, figure: &Figure) -> String {
    match figure {
        Figure::ErrorRate | Figure::GoodputShare => format!("{v:.4}"),
        Figure::Capacity if v == 1.0 => "1 stream".to_string(),
        Figure::Capacity => format!("{} streams", crate::fmt::threshold(v)),
        Figure::CostPerM => format!("${v:.4} per M output tokens"),
        Figure::ReqS | Figure::GoodputReqS => format!("{v:.2} {}", figure.unit()),
        _ => format!("{v:.1} {}", figure.unit()),
    }
}

/// The line a face prints for one result: `threshold ttft_p99_ms<500@16:
/// 312.4 ms  pass`, with the series of a tune and the reason of a failure.
pub(crate) fn line(entry: &ThresholdEntry, series_label: Option<&str>) -> String {
    let figure = parse(&entry.expr).map(|t| t.figure).ok();
    let value = match (entry.value, &figure) {
        (Some(v), Some(f)) => shown(v, f),
        _ => "not measured".to_string(),
    };
    // `@all` says which level it judged: the worst.
    let value = match (&entry.level, entry.value) {
        (Some(level), Some(_)) if entry.expr.ends_with("@all") => format!("{value} at @{level}"),
        _ => value,
    };
    let setting = series_label.map_or(String::new(), |l| format!(" [{l}]"));
    let verdict = if entry.ok { "pass" } else { "FAIL" };
    let reason = match (&entry.reason, entry.value) {
        (Some(r), None) => format!(" ({r})"),
        _ => String::new(),
    };
    format!(
        "threshold {}{setting}: {value}  {verdict}{reason}",
        entry.expr
    )
}

#[cfg(test)]
#[path = "thresholds_tests.rs"]
mod tests;
