//! `tokbench report DIR --format junit`: a run's checks as JUnit XML, the
//! report CI systems (GitLab, Jenkins, GitHub's test reporters) show as
//! tests. One `<testsuite>` per run (per setting for a tune); one
//! `<testcase>` per `--threshold` (summary.json's `thresholds`) and, where
//! the user gave an SLO (`--slo-*`), one per level the run judged against
//! it. Valid against Apache Ant's JUnit schema (`tests/fixtures/junit/`).

use std::fmt::Write as _;

use super::saved::SavedRun;
use super::schema::{LevelFile, SummaryFile, ThresholdEntry};
use crate::fmt::threshold;

/// One test case: its name, class, seconds, and the failure's message and
/// text when it failed.
struct Case {
    name: String,
    class: &'static str,
    time_s: f64,
    failure: Option<(String, String)>,
}

pub(crate) fn render_junit(run: &SavedRun) -> String {
    let summary: SummaryFile = serde_json::from_value(run.raw.clone()).unwrap_or_default();
    junit(&summary)
}

/// The XML of a summary (pure, for the tests).
pub(crate) fn junit(summary: &SummaryFile) -> String {
    let tune = summary.tune.as_ref();
    // A tune: one suite per setting's series; a sweep: one suite.
    let suites: Vec<(Option<u64>, String)> = match tune {
        Some(t) => {
            let mut ids: Vec<u64> = summary
                .levels
                .iter()
                .map(|l| l.series.unwrap_or(0))
                .collect();
            ids.extend(t.settings.iter().filter_map(|s| s.series));
            ids.extend(summary.thresholds.iter().filter_map(|e| e.series));
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter()
                .map(|id| {
                    let label = t
                        .settings
                        .iter()
                        .find(|s| s.series == Some(id))
                        .and_then(|s| s.label.clone())
                        .unwrap_or_else(|| format!("series {id}"));
                    (Some(id), format!("tokbench tune {label}"))
                })
                .collect()
        }
        None => vec![(None, "tokbench sweep".to_string())],
    };
    let target = summary.run.target.as_deref().unwrap_or("unknown target");
    let model = summary.run.model.as_deref().unwrap_or("unknown model");
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n");
    for (id, (series, name)) in suites.iter().enumerate() {
        let cases = cases(summary, *series);
        let failures = cases.iter().filter(|c| c.failure.is_some()).count();
        let time: f64 = cases.iter().map(|c| c.time_s).sum();
        let _ = writeln!(
            out,
            "  <testsuite package=\"tokbench\" id=\"{id}\" name=\"{}\" timestamp=\"{}\" hostname=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\">",
            attr(&token(&format!("{name} {target} {model}"))),
            timestamp(summary.run.started_at.as_deref()),
            attr(&token(
                summary
                    .run
                    .shard
                    .as_ref()
                    .and_then(|s| s.host.as_deref())
                    .unwrap_or("localhost")
            )),
            cases.len(),
        );
        out.push_str("    <properties>\n");
        for (key, value) in [
            ("target", Some(target)),
            ("model", Some(model)),
            ("engine", summary.run.engine.as_deref()),
            ("started_at", summary.run.started_at.as_deref()),
        ] {
            if let Some(value) = value {
                let _ = writeln!(
                    out,
                    "      <property name=\"{key}\" value=\"{}\"/>",
                    attr(value)
                );
            }
        }
        out.push_str("    </properties>\n");
        for case in &cases {
            let head = format!(
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
                attr(&token(&case.name)),
                case.class,
                case.time_s
            );
            match &case.failure {
                None => {
                    let _ = writeln!(out, "{head}/>");
                }
                Some((message, text)) => {
                    let _ = writeln!(
                        out,
                        "{head}>\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
                        attr(message),
                        case.class,
                        text_node(text)
                    );
                }
            }
        }
        out.push_str(
            "    <system-out></system-out>\n    <system-err></system-err>\n  </testsuite>\n",
        );
    }
    out.push_str("</testsuites>\n");
    out
}

/// A series' test cases: its thresholds, then its judged levels against
/// the SLO the user gave.
fn cases(summary: &SummaryFile, series: Option<u64>) -> Vec<Case> {
    let mut cases: Vec<Case> = summary
        .thresholds
        .iter()
        .filter(|e| series.is_none() || e.series == series)
        .map(threshold_case)
        .collect();
    let slo = summary.run.slo.clone().unwrap_or_default();
    if !slo.is_given() {
        return cases;
    }
    let capacity_slo = slo.capacity_slo();
    let ours = |l: &&LevelFile| series.is_none_or(|s| l.series.unwrap_or(0) == s);
    for level in summary
        .levels
        .iter()
        .filter(ours)
        .filter(|l| !l.partial && matches!(l.mode_or_planned(), "planned" | "search"))
    {
        let name = match level.max_concurrency {
            Some(c) => format!("concurrency {c} meets the SLO"),
            None => "a level meets the SLO".to_string(),
        };
        let misses = crate::analysis::decide::slo_misses(&level.figures(), &capacity_slo);
        cases.push(Case {
            name,
            class: "tokbench.slo",
            time_s: level
                .duration
                .filter(|d| d.is_finite() && *d >= 0.0)
                .unwrap_or(0.0),
            failure: (!misses.is_empty()).then(|| {
                let message = misses.join(", ");
                (message.clone(), format!("missed: {message}"))
            }),
        });
    }
    cases
}

fn threshold_case(e: &ThresholdEntry) -> Case {
    let limit = match (&e.op, e.limit) {
        (Some(op), Some(limit)) => format!("limit {op} {}", threshold(limit)),
        _ => "limit unknown".to_string(),
    };
    let unit = e.unit.as_deref().filter(|u| !u.is_empty());
    let figure = super::thresholds::parse(&e.expr).ok().map(|t| t.figure);
    let measured = match (e.value, figure) {
        (Some(v), Some(f)) => format!("measured {}", super::thresholds::shown(v, &f)),
        (Some(v), None) => format!(
            "measured {v}{}",
            unit.map_or(String::new(), |u| format!(" {u}"))
        ),
        (None, _) => "not measured".to_string(),
    };
    let series = e.series.map_or(String::new(), |s| format!(" (series {s})"));
    Case {
        name: format!("threshold {}{series}", e.expr),
        class: "tokbench.threshold",
        time_s: 0.0,
        failure: (!e.ok).then(|| {
            (
                format!("{measured}, {limit}"),
                e.reason
                    .clone()
                    .unwrap_or_else(|| format!("{measured}, {limit}")),
            )
        }),
    }
}

/// The schema's timestamp: `YYYY-MM-DDTHH:MM:SS`, no zone.
fn timestamp(started_at: Option<&str>) -> String {
    let ok = |s: &str| {
        s.len() == 19
            && s.char_indices().all(|(i, c)| match i {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 => c == ':',
                _ => c.is_ascii_digit(),
            })
    };
    started_at
        .and_then(|s| s.get(..19))
        .filter(|s| ok(s))
        .unwrap_or("1970-01-01T00:00:00")
        .to_string()
}

/// An `xs:token`: no line breaks or tabs, single spaces, none at the ends.
fn token(s: &str) -> String {
    let t = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.is_empty() {
        "-".into()
    } else {
        t
    }
}

/// XML 1.0 text: the markup characters escaped, characters XML cannot
/// hold (control characters but tab and line breaks) left out.
fn text_node(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || matches!(c, '\u{FFFE}' | '\u{FFFF}') => {}
            c => out.push(c),
        }
    }
    out
}

/// An attribute's value: as text, with quotes and whitespace kept as
/// character references (a parser would fold a raw line break to a space).
fn attr(s: &str) -> String {
    text_node(s)
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
        .replace('\t', "&#9;")
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::report::schema::RunSlo;

    #[test]
    fn markup_is_escaped_and_what_xml_cannot_hold_is_dropped() {
        assert_eq!(text_node("a<b & c>d\u{1}"), "a&lt;b &amp; c&gt;d");
        assert_eq!(
            attr("say \"hi\"\n'x'"),
            "say &quot;hi&quot;&#10;&apos;x&apos;"
        );
        assert_eq!(token("  a \t b\nc "), "a b c");
        assert_eq!(
            timestamp(Some("2026-12-06T08:25:09.123Z")),
            "2026-12-06T08:25:09"
        );
        assert_eq!(timestamp(Some("yesterday")), "1970-01-01T00:00:00");
    }

    #[test]
    fn one_case_per_threshold_and_per_level_under_the_slo() {
        // Two thresholds (one failed); an SLO of p99 TTFT <= 500 ms, which
        // level 1 (300 ms) meets and level 4 (700 ms) misses.
        let level = |c: u32, ttft: f64| {
            let mut l = LevelFile {
                max_concurrency: Some(c),
                completed: Some(10),
                failed: Some(0),
                output_throughput: Some(100.0),
                stream_decode_tok_s: Some(50.0),
                duration: Some(1.5),
                ..LevelFile::default()
            };
            l.stats.insert("p99_ttft_ms".into(), json!(ttft));
            l
        };
        let summary = SummaryFile {
            levels: vec![level(1, 300.0), level(4, 700.0)],
            thresholds: vec![
                ThresholdEntry {
                    expr: "ttft_p99_ms<500@4".into(),
                    op: Some("<".into()),
                    limit: Some(500.0),
                    unit: Some("ms".into()),
                    value: Some(700.0),
                    ok: false,
                    reason: Some("measured 700.0 ms, limit < 500".into()),
                    ..ThresholdEntry::default()
                },
                ThresholdEntry {
                    expr: "capacity>=1".into(),
                    ok: true,
                    ..ThresholdEntry::default()
                },
            ],
            run: crate::report::schema::RunSection {
                target: Some("http://h:1/?a=1&b=<2>".into()),
                slo: Some(RunSlo {
                    ttft_p99_ms: Some(500.0),
                    given: Some(true),
                    ..RunSlo::default()
                }),
                ..Default::default()
            },
            ..SummaryFile::default()
        };
        let xml = junit(&summary);
        assert!(xml.contains("tests=\"4\" failures=\"2\""), "{xml}");
        assert!(
            xml.contains("<testcase name=\"threshold ttft_p99_ms&lt;500@4\""),
            "{xml}"
        );
        assert!(
            xml.contains("message=\"measured 700.0 ms, limit &lt; 500\""),
            "{xml}"
        );
        assert!(
            xml.contains("message=\"p99 TTFT &lt;= 500 ms (700 ms)\""),
            "{xml}"
        );
        assert!(
            xml.contains("value=\"http://h:1/?a=1&amp;b=&lt;2&gt;\""),
            "{xml}"
        );
        // Without an SLO the user gave, only the thresholds.
        let mut none = summary.clone();
        none.run.slo = Some(RunSlo {
            given: Some(false),
            ..RunSlo::default()
        });
        assert!(junit(&none).contains("tests=\"2\" failures=\"1\""));
    }
}
