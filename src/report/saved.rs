//! A finished run read back from its `summary.json` (docs/architecture.md section 5),
//! for `report` and `compare`.
//!
//! Reading is tolerant: a summary written by an older or newer tokbench may
//! lack keys, and every field here is then `None` (or a neutral default) so the
//! reports degrade to a `-` instead of failing. Only a file that is not a JSON
//! object with a `levels` list is refused, with one line saying so.

use std::path::{Path, PathBuf};

use color_eyre::eyre::{bail, Result, WrapErr};
use serde_json::{Map, Value};

use super::schema::{
    self, number, Capacity, Cost, DiagnosisEntry, Knee, LevelFile, RunSection, RunSlo, SeriesEntry,
    SummaryFile,
};
use crate::analysis::decide::slo_terms;
use crate::record::Mode;

/// One level object of `levels`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SavedLevel {
    /// The whole object, for the CSV's every-key columns.
    pub raw: Map<String, Value>,
    /// `max_concurrency`.
    pub concurrency: Option<u32>,
    /// `planned`, `manual`, `search`, `rate`, `replay` (`planned` when absent).
    pub mode: String,
    pub partial: bool,
    pub completed: Option<u64>,
    pub failed: Option<u64>,
    pub output_throughput: Option<f64>,
    pub per_stream_tok_s: Option<f64>,
    pub stream_decode_tok_s: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    /// The level file's name (`sweep-c64-r2.json`), when recorded.
    pub file: Option<String>,
    /// Hand-set levels: whether they measured a steady state (None: not
    /// said, as in files from before it was).
    pub steady: Option<bool>,
    /// The series it belongs to (0 when the file does not say).
    pub series: usize,
    pub series_label: Option<String>,
}

impl SavedLevel {
    fn from_value(v: &Value) -> Option<SavedLevel> {
        let raw = v.as_object()?.clone();
        // A level whose keys have unexpected types (hand-edited, or from a
        // tokbench that never wrote them so) still lists, with `-` cells.
        let level: LevelFile = serde_json::from_value(v.clone()).unwrap_or_default();
        let finite = |x: Option<f64>| x.filter(|x| x.is_finite());
        let concurrency = level.max_concurrency;
        let output_throughput = finite(level.output_throughput);
        let open_loop = Mode::parse(level.mode_or_planned()).is_some_and(Mode::is_open_loop);
        let per_stream_tok_s = finite(level.per_stream_tok_s).or_else(|| {
            // Older summaries: the column's definition, output throughput /
            // streams. An open loop's concurrency is only a cap: no figure.
            match (output_throughput, concurrency) {
                (Some(t), Some(c)) if c > 0 && !open_loop => Some(t / f64::from(c)),
                _ => None,
            }
        });
        let tpot_p50_ms = level
            .percentile("tpot", "50")
            .or_else(|| level.stat("median_tpot_ms"));
        let stream_decode_tok_s = finite(level.stream_decode_tok_s)
            .or_else(|| crate::stats::metrics::stream_decode_tok_s(tpot_p50_ms));
        Some(SavedLevel {
            concurrency,
            mode: level.mode_or_planned().to_string(),
            partial: level.partial,
            completed: level.completed,
            failed: level.failed,
            output_throughput,
            per_stream_tok_s,
            stream_decode_tok_s,
            ttft_p50_ms: level
                .percentile("ttft", "50")
                .or_else(|| level.stat("median_ttft_ms")),
            ttft_p99_ms: level.percentile("ttft", "99"),
            tpot_p50_ms,
            tpot_p99_ms: level.percentile("tpot", "99"),
            file: level.file,
            steady: level.steady,
            series: level
                .series
                .and_then(|s| usize::try_from(s).ok())
                .unwrap_or(0),
            series_label: level.series_label,
            raw,
        })
    }

    /// How the level came to be; a mode no tokbench wrote reads as planned.
    pub(crate) fn mode(&self) -> Mode {
        Mode::parse(&self.mode).unwrap_or(Mode::Planned)
    }

    /// Planned and search levels that ran to the end: the ones the knee and
    /// the sweep line are drawn through. Manual and partial levels stand alone.
    /// A mode this version does not know is not one: a level is judged
    /// only when it is known to be a sweep's, as `LevelFile::point` (merge,
    /// `--resume`) has it. A level that names no mode is planned.
    pub(crate) fn is_sweep_point(&self) -> bool {
        !self.partial && Mode::parse(&self.mode).is_some_and(Mode::is_sweep)
    }

    pub(crate) fn is_manual(&self) -> bool {
        self.mode == "manual"
    }

    /// A hand-set level left before it settled: listed, never a result
    /// (chart, knee, capacity, cost, compare).
    pub(crate) fn is_unsteady(&self) -> bool {
        self.steady == Some(false)
    }

    /// `-r2` -> 2 from the file name; 1 for a first (or unnamed) level.
    pub(crate) fn round(&self) -> u32 {
        self.file
            .as_deref()
            .and_then(|f| f.strip_suffix(".json"))
            .and_then(|f| f.rsplit_once("-r"))
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(1)
    }

    /// What sets the level apart in a table: `manual`, `partial`, `round 2`.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.mode != "planned" {
            notes.push(self.mode.clone());
        }
        if self.partial {
            notes.push("partial".into());
        }
        if self.is_unsteady() {
            notes.push("not steady".into());
        }
        if self.series > 0 {
            notes.push(
                self.series_label
                    .clone()
                    .unwrap_or_else(|| crate::analysis::series::default_label(self.series)),
            );
        }
        let round = self.round();
        if round > 1 {
            notes.push(format!("round {round}"));
        }
        notes
    }
}

/// One way two runs' workloads differ ([`SavedRun::shape_differences`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShapeDifference {
    Lengths,
    Profile,
    RangeRatio,
    Dataset,
    IgnoreEos,
}

/// A run as its `summary.json` tells it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SavedRun {
    /// The summary file it was read from (or `-` when built from a value).
    pub source: PathBuf,
    /// The file as read, for `--format json`.
    pub raw: Value,
    pub tokbench_version: Option<String>,
    /// `run`: target, model, engine, shape, start time, GPUs, ... as read,
    /// but for three things: its `slo` is taken out into [`SavedRun::slo`]
    /// (and is `None` here), `model` falls back to the first level's
    /// `model_id` (files from before `run.model`), and `gpus` is `None`
    /// unless positive (`report --gpus` sets it; throughput is then also
    /// given per GPU).
    pub run: RunSection,
    /// `run.labels` as text pairs.
    pub labels: Vec<(String, String)>,
    /// The SLOs the run was judged against (`run.slo`).
    pub slo: RunSlo,
    /// In run order.
    pub levels: Vec<SavedLevel>,
    pub knee: Option<Knee>,
    pub capacity: Option<Capacity>,
    /// `capacity_reason`: "capacity: ..." or "no capacity: ...".
    pub capacity_reason: Option<String>,
    pub cost: Option<Cost>,
    /// Those with a message.
    pub diagnoses: Vec<DiagnosisEntry>,
    /// `series`: each stretch against one server configuration, judged alone.
    pub series: Vec<SeriesEntry>,
    /// `tokbench tune`'s section, when the run was a tune.
    pub tune: Option<super::schema::TuneSection>,
}

impl SavedRun {
    /// `summary.json`'s `series`: each one's label, capacity and knee, and
    /// the highest throughput of its whole, settled levels.
    pub(crate) fn series_results(&self) -> Vec<crate::analysis::series::SeriesResult> {
        self.series
            .iter()
            .filter_map(|s| {
                let index = usize::try_from(s.index?).ok()?;
                let peak = self
                    .levels
                    .iter()
                    .filter(|l| l.series == index && !l.partial && !l.is_unsteady())
                    .filter_map(|l| l.output_throughput)
                    .reduce(f64::max);
                Some(crate::analysis::series::SeriesResult {
                    index,
                    label: s.label.clone()?,
                    capacity: s.capacity.as_ref().and_then(|c| c.concurrency),
                    knee: s
                        .knee
                        .as_ref()
                        .and_then(|k| k.from_concurrency.zip(k.to_concurrency)),
                    peak_tok_s: peak,
                })
            })
            .collect()
    }

    /// The run's identity line in parts — target, backend, EOS policy,
    /// start time, labels — with the format's own quoting: `code` for
    /// literal values, `text` for plain words.
    pub(crate) fn meta_parts(
        &self,
        code: impl Fn(&str) -> String,
        text: impl Fn(&str) -> String,
    ) -> Vec<String> {
        let mut parts = Vec::new();
        if let Some(t) = &self.run.target {
            parts.push(format!("target {}", code(t)));
        }
        // The traffic shape beyond the lengths and profile in the title.
        match self.prompt_source() {
            Some(s) if s != "random" && s != "dataset" => {
                parts.push(format!("prompts {}", text(&s)))
            }
            _ => {}
        }
        if self.range_ratio() > 0.0 {
            parts.push(format!("range ratio {}", self.range_ratio()));
        }
        if let Some(b) = &self.run.backend {
            parts.push(format!("backend {}", text(b)));
        }
        if let Some(ask) = self.length_ask() {
            parts.push(ask.label_seen(self.short_outputs()));
        }
        if let Some(s) = &self.run.started_at {
            parts.push(format!("started {}", text(s)));
        }
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| code(&format!("{k}={v}")))
                .collect();
            parts.push(format!("labels {}", labels.join(" ")));
        }
        parts
    }

    /// Read a result folder's `summary.json`, or the summary file given.
    pub(crate) fn load(path: &Path) -> Result<SavedRun> {
        let (file, text) = read_summary(path)?;
        let value: Value = serde_json::from_str(&text)
            .wrap_err_with(|| format!("{} is not valid JSON", file.display()))?;
        SavedRun::from_value(value, &file)
    }

    /// Interpret a summary already in memory; `source` names it in messages.
    pub(crate) fn from_value(raw: Value, source: &Path) -> Result<SavedRun> {
        let Some(levels) = raw.get("levels").and_then(Value::as_array) else {
            bail!(
                "{} is not a tokbench summary (no \"levels\" list)",
                source.display()
            );
        };
        let levels: Vec<SavedLevel> = levels.iter().filter_map(SavedLevel::from_value).collect();
        let mut run: RunSection =
            schema::typed(raw.get("run").cloned().unwrap_or(Value::Null)).unwrap_or_default();
        let slo = run.slo.take().unwrap_or_default();
        run.gpus = run.gpus.filter(|g| *g > 0);
        if run.model.is_none() {
            run.model = levels.first().and_then(|l| string_map(&l.raw, "model_id"));
        }
        let labels = run
            .labels
            .as_ref()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                        (k.clone(), v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let part = |key: &str| raw.get(key).cloned().unwrap_or(Value::Null);
        let knee = schema::typed::<Knee>(part("knee"));
        let capacity = schema::typed::<Capacity>(part("capacity"));
        let cost = schema::typed::<Cost>(part("cost"));
        // The summary's own keys, typed; a key of an unexpected type reads
        // as absent (`-`), like everything else here.
        let summary: SummaryFile = serde_json::from_value(Value::Object(
            ["tokbench_version", "capacity_reason", "diagnoses"]
                .iter()
                .filter_map(|k| Some((k.to_string(), raw.get(*k)?.clone())))
                .collect(),
        ))
        .unwrap_or_default();
        let diagnoses = summary
            .diagnoses
            .into_iter()
            .filter(|d| !d.message.is_empty())
            .collect();
        Ok(SavedRun {
            source: source.to_path_buf(),
            tokbench_version: summary.tokbench_version,
            labels,
            slo,
            levels,
            knee,
            capacity,
            capacity_reason: summary.capacity_reason,
            cost,
            diagnoses,
            series: SeriesEntry::all_of(&raw),
            tune: raw
                .get("tune")
                .and_then(|t| serde_json::from_value(t.clone()).ok()),
            run,
            raw,
        })
    }

    /// `in 1024 / out 1024` (`?` for a length the file does not give),
    /// then the means the requests really had when the file says:
    /// `in 512 / out 256 (achieved 509 / 256)`.
    pub(crate) fn shape(&self) -> String {
        let asked = self.asked_shape();
        match self.achieved_means() {
            Some((i, o)) if self.dataset().is_some() => {
                format!("{asked} (achieved in {i:.0} / out {o:.0})")
            }
            Some((i, o)) => format!("{asked} (achieved {i:.0} / {o:.0})"),
            None => asked,
        }
    }

    /// `in 1024 / out 1024`: the lengths asked for only; `dataset
    /// FILE` for a `--dataset` run (its prompts are as long as they are).
    pub(crate) fn asked_shape(&self) -> String {
        if let Some(dataset) = self.dataset() {
            return format!("dataset {dataset}");
        }
        format!(
            "in {} / out {}",
            opt_u(self.run.input_len),
            opt_u(self.run.output_len)
        )
    }

    /// Mean input and output tokens of the completed requests
    /// (`traffic.input_mean`, `traffic.output_mean`), when recorded.
    pub(crate) fn achieved_means(&self) -> Option<(f64, f64)> {
        let traffic = self.raw.get("traffic")?;
        Some((
            float(traffic, "input_mean")?,
            float(traffic, "output_mean")?,
        ))
    }

    /// `--random-range-ratio` of the run (0 when the file predates it).
    /// What the run's bodies asked of the answers' length, as its engine
    /// honours it (`engine::LengthAsk`); None for a file that does not say.
    pub(crate) fn length_ask(&self) -> Option<crate::engine::LengthAsk> {
        let ignore_eos = self.run.ignore_eos?;
        Some(crate::engine::LengthAsk::of(
            self.run.engine.as_deref().unwrap_or(""),
            self.run.backend.as_deref().unwrap_or(""),
            ignore_eos,
        ))
    }

    /// Answers that ended before the length they asked for, over the levels.
    pub(crate) fn short_outputs(&self) -> u64 {
        self.levels
            .iter()
            .filter_map(|l| l.raw.get("short_outputs").and_then(Value::as_u64))
            .sum()
    }

    pub(crate) fn range_ratio(&self) -> f64 {
        self.raw
            .get("run")
            .and_then(|r| float(r, "range_ratio"))
            .unwrap_or(0.0)
    }

    /// What keeps this run and `other` from comparing like for like, in the
    /// order `compare` and `view A B` say them: the asked lengths, the
    /// profile, the range ratio, the dataset, and the EOS policy where both
    /// files say it. The prompt source may differ. Empty when they match.
    pub(crate) fn shape_differences(&self, other: &SavedRun) -> Vec<ShapeDifference> {
        let mut out = Vec::new();
        if self.run.input_len != other.run.input_len || self.run.output_len != other.run.output_len
        {
            out.push(ShapeDifference::Lengths);
        }
        if self.run.profile != other.run.profile {
            out.push(ShapeDifference::Profile);
        }
        if self.range_ratio() != other.range_ratio() {
            out.push(ShapeDifference::RangeRatio);
        }
        if self.dataset() != other.dataset() {
            out.push(ShapeDifference::Dataset);
        }
        if self.run.ignore_eos.is_some()
            && other.run.ignore_eos.is_some()
            && self.run.ignore_eos != other.run.ignore_eos
        {
            out.push(ShapeDifference::IgnoreEos);
        }
        out
    }

    /// The `--dataset` file name, when the run had one.
    pub(crate) fn dataset(&self) -> Option<String> {
        string(self.raw.get("run")?, "dataset")
    }

    /// `random`, `prose`, `corpus` or `dataset`; `None` when the file predates it.
    pub(crate) fn prompt_source(&self) -> Option<String> {
        string(self.raw.get("run")?, "prompt_source")
    }

    pub(crate) fn model_name(&self) -> &str {
        self.run.model.as_deref().unwrap_or("unknown model")
    }

    /// `vllm 0.11.0`, `tokbench-sim 0.0.0`, or `unknown engine`.
    pub(crate) fn engine_name(&self) -> String {
        match (&self.run.engine, &self.run.engine_version) {
            (Some(e), Some(v)) if !v.is_empty() => {
                // The simulator says `0.0.0-tokbench-sim`: no need to say it twice.
                let v = v.strip_suffix(&format!("-{e}")).unwrap_or(v);
                format!("{e} {v}")
            }
            (Some(e), _) => e.clone(),
            (None, _) => "unknown engine".into(),
        }
    }

    /// The capacity sentence without its `capacity:` prefix, or why there is none.
    pub(crate) fn capacity_text(&self) -> String {
        if let Some(reason) = self.capacity.as_ref().and_then(|c| c.reason.clone()) {
            return reason;
        }
        match &self.capacity_reason {
            Some(line) => line
                .strip_prefix("no capacity: ")
                .or_else(|| line.strip_prefix("capacity: "))
                .unwrap_or(line)
                .to_string(),
            None if self.capacity.is_some() => "recorded without a reason".into(),
            None => "none recorded in this summary".into(),
        }
    }

    /// The cost verdict in words, or why there is none.
    pub(crate) fn cost_text(&self) -> String {
        match &self.cost {
            Some(c) => c
                .verdict
                .clone()
                .unwrap_or_else(|| match number(&c.cost_per_m_output) {
                    Some(m) => format!("${m:.3} per million output tokens"),
                    None => "no cost figure recorded".into(),
                }),
            None => "no GPU price given (--gpu-price-per-hour)".into(),
        }
    }

    pub(crate) fn knee_text(&self) -> String {
        match &self.knee {
            Some(k) => k.reason.clone().unwrap_or_else(|| {
                format!(
                    "{} -> {} streams",
                    opt_u(k.from_concurrency),
                    opt_u(k.to_concurrency)
                )
            }),
            None => "no knee in the measured levels".into(),
        }
    }

    /// The SLOs in words: `p99 TTFT <= 500 ms, decode >= 20 tok/s per stream, errors < 1%`.
    pub(crate) fn slo_text(&self) -> Option<String> {
        let slo = &self.slo;
        let parts: Vec<String> = [
            slo.ttft_p99_ms.map(slo_terms::ttft),
            slo.min_stream_tok_s.map(slo_terms::decode),
            slo.tpot_p99_ms.map(slo_terms::tpot),
            slo.max_error_rate.map(slo_terms::errors),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// A folder means its `summary.json`; anything else is the file itself.
/// The text of a result folder's `summary.json` (or of the summary file
/// given), and where it was read from; the error says what `path` is not.
/// Every command that reads a finished run starts here.
pub(crate) fn read_summary(path: &Path) -> Result<(PathBuf, String)> {
    let file = summary_path(path);
    let named_a_file = path.extension().is_some_and(|e| e == "json") && !path.is_dir();
    let text = std::fs::read_to_string(&file).wrap_err_with(|| {
        if !named_a_file {
            format!(
                "no readable summary.json in {} (is it a tokbench result folder?)",
                path.display()
            )
        } else {
            format!("cannot read {}", file.display())
        }
    })?;
    Ok((file, text))
}

pub(crate) fn summary_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    }
}

fn float(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64).filter(|x| x.is_finite())
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn string_map(m: &Map<String, Value>, key: &str) -> Option<String> {
    m.get(key).and_then(Value::as_str).map(str::to_string)
}

fn opt_u(x: Option<u32>) -> String {
    x.map_or_else(|| "?".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a path that holds no summary is told: a folder (or a name
    /// that is not a `.json` file) is asked whether it is a result folder;
    /// a missing summary file is named.
    #[test]
    fn a_missing_summary_is_named_for_what_was_given() {
        let message = |p: &str| crate::run::one_line(&read_summary(Path::new(p)).unwrap_err());
        let dir = std::env::temp_dir().join(format!("tokbench-no-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let in_dir = message(dir.to_str().unwrap());
        assert!(
            in_dir.starts_with(&format!(
                "no readable summary.json in {} (is it a tokbench result folder?): ",
                dir.display()
            )),
            "{in_dir}"
        );
        let gone = message("/nonexistent/tokbench-run");
        assert!(
            gone.starts_with("no readable summary.json in /nonexistent/tokbench-run ("),
            "{gone}"
        );
        let file = message("/nonexistent/s.json");
        assert!(
            file.starts_with("cannot read /nonexistent/s.json: "),
            "{file}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    use serde_json::json;

    #[test]
    fn a_bare_summary_degrades_instead_of_failing() {
        let run = SavedRun::from_value(
            json!({"levels": [{"max_concurrency": 4, "output_throughput": 100.0,
                               "median_tpot_ms": 25.0, "median_ttft_ms": 30.0}]}),
            Path::new("old.json"),
        )
        .expect("a summary with levels reads");
        assert_eq!(run.shape(), "in ? / out ?");
        assert_eq!(run.model_name(), "unknown model");
        let l = &run.levels[0];
        assert_eq!(l.per_stream_tok_s, Some(25.0));
        assert_eq!(l.stream_decode_tok_s, Some(40.0));
        assert_eq!(l.ttft_p50_ms, Some(30.0));
        assert_eq!(l.ttft_p99_ms, None);
        assert!(l.is_sweep_point(), "no mode: a planned level");
        assert_eq!(run.capacity_text(), "none recorded in this summary");
        // A mode this version does not know is listed, never judged, as
        // merge and --resume have it; search and planned are judged.
        let with_mode = |mode: &str, partial: bool| {
            let run = SavedRun::from_value(
                json!({"levels": [{"max_concurrency": 4, "output_throughput": 100.0,
                                   "mode": mode, "partial": partial}]}),
                Path::new("m.json"),
            )
            .expect("reads");
            run.levels[0].is_sweep_point()
        };
        assert!(with_mode("planned", false) && with_mode("search", false));
        assert!(!with_mode("burst", false), "unknown mode");
        assert!(!with_mode("manual", false) && !with_mode("planned", true));
    }

    /// Two series: each one's capacity, knee and peak (a level saved
    /// `steady: false` is no peak), and the comparison line; the report
    /// marks only the latest series' capacity row.
    #[test]
    fn a_run_of_two_series_reads_as_two_results() {
        let level = |series: u64, c: u64, tok: f64, steady: Option<bool>| {
            let mut v = json!({"max_concurrency": c, "output_throughput": tok, "mode": "planned",
                               "partial": false, "series": series});
            if let Some(steady) = steady {
                v["steady"] = json!(steady);
                v["mode"] = json!("manual");
            }
            v
        };
        let run = SavedRun::from_value(
            json!({"levels": [level(0, 1, 97.0, None), level(0, 4, 99.0, None),
                              level(0, 8, 500.0, Some(false)),
                              level(1, 1, 97.0, None), level(1, 4, 388.0, None)],
                   "capacity": {"concurrency": 4},
                   "series": [{"index": 0, "label": "NUM_PARALLEL=1", "capacity": {"concurrency": 1},
                               "knee": {"from_concurrency": 1, "to_concurrency": 4}},
                              {"index": 1, "label": "NUM_PARALLEL=4", "capacity": {"concurrency": 4},
                               "knee": null}]}),
            Path::new("two.json"),
        )
        .expect("reads");
        let results = run.series_results();
        assert_eq!(results.len(), 2);
        assert_eq!(
            results[0].peak_tok_s,
            Some(99.0),
            "the unsteady 500 is no peak"
        );
        assert_eq!(results[0].knee, Some((1, 4)));
        let lines = crate::analysis::series::series_lines(&results);
        assert_eq!(
            lines.last().map(String::as_str),
            Some("NUM_PARALLEL=4 vs NUM_PARALLEL=1: capacity 4 vs 1 streams, peak 388 vs 99 tok/s")
        );
        let marks: Vec<bool> = run
            .levels
            .iter()
            .map(|l| super::super::formats::level_marks(&run, l).capacity)
            .collect();
        assert_eq!(
            marks,
            [false, false, false, false, true],
            "series 1's c=4 is not the capacity"
        );
    }

    #[test]
    fn not_a_summary_is_one_clear_line() {
        let err =
            SavedRun::from_value(json!({"a": 1}), Path::new("x.json")).expect_err("no levels list");
        assert_eq!(
            err.to_string(),
            "x.json is not a tokbench summary (no \"levels\" list)"
        );
    }

    #[test]
    fn rounds_come_from_file_names() {
        let level = |file: &str| {
            SavedLevel::from_value(&json!({"max_concurrency": 1, "file": file})).expect("object")
        };
        assert_eq!(level("sweep-c4.json").round(), 1);
        assert_eq!(level("sweep-c4-r3.json").round(), 3);
        assert_eq!(level("sweep-c4-manual-r2.json").notes(), vec!["round 2"]);
    }

    /// The reports' SLO line: each term as the user set it, in the order of
    /// the decision's sentences; none without an SLO.
    #[test]
    fn the_slo_line_reads_as_set() {
        let run = SavedRun::from_value(
            json!({"levels": [], "run": {"slo": {"ttft_p99_ms": 2500, "min_stream_tok_s": 12.5,
                                                 "tpot_p99_ms": 5.0, "max_error_rate": 0.005}}}),
            Path::new("slo.json"),
        )
        .expect("reads");
        assert_eq!(
            run.slo_text().as_deref(),
            Some(
                "p99 TTFT <= 2,500 ms, decode >= 12.5 tok/s per stream, p99 TPOT <= 5 ms, \
                 errors < 0.5%"
            )
        );
        let none = SavedRun::from_value(json!({"levels": []}), Path::new("n.json")).expect("reads");
        assert_eq!(none.slo_text(), None);
    }
}
