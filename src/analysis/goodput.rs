//! Goodput (issue 5 item 2): the share and rate of requests meeting every
//! given SLO, with vLLM's `--goodput ttft:500 tpot:50 e2el:30000` syntax
//! (milliseconds). Reported per level; not used for capacity.

use std::time::Duration;

use serde_json::{json, Value};

use super::words::{num, opt_num, round_to};
use crate::record::RequestRecord;

/// The `--goodput` SLOs, each in milliseconds; `None` is not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

/// Why a `--goodput` value was refused, in one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct GoodputParseError(pub String);

impl Slo {
    /// Parses `metric:ms` pairs separated by spaces; `args` may be one string
    /// or clap's several values (each is split on whitespace too). Metrics:
    /// `ttft`, `tpot`, `e2el`; values: finite, non-negative milliseconds.
    /// Each metric at most once, at least one pair.
    pub(crate) fn parse<I, S>(args: I) -> Result<Slo, GoodputParseError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut slo = Slo::default();
        let mut any = false;
        for arg in args {
            for pair in arg.as_ref().split_whitespace() {
                let (metric, value) = pair.split_once(':').ok_or_else(|| {
                    GoodputParseError(format!(
                        "--goodput: '{pair}' is not metric:ms (e.g. ttft:500)"
                    ))
                })?;
                let ms: f64 = value.trim().parse().map_err(|_| {
                    GoodputParseError(format!(
                        "--goodput: '{value}' in '{pair}' is not a number of milliseconds"
                    ))
                })?;
                if !ms.is_finite() || ms < 0.0 {
                    return Err(GoodputParseError(format!(
                        "--goodput: '{pair}' must be a non-negative number of milliseconds"
                    )));
                }
                let slot = match metric.trim().to_ascii_lowercase().as_str() {
                    "ttft" => &mut slo.ttft_ms,
                    "tpot" => &mut slo.tpot_ms,
                    "e2el" => &mut slo.e2el_ms,
                    _ => {
                        return Err(GoodputParseError(format!(
                        "--goodput: unknown metric '{metric}' in '{pair}': use ttft, tpot or e2el"
                    )))
                    }
                };
                if slot.is_some() {
                    return Err(GoodputParseError(format!(
                        "--goodput: '{metric}' is given twice"
                    )));
                }
                *slot = Some(ms);
                any = true;
            }
        }
        if any {
            Ok(slo)
        } else {
            Err(GoodputParseError(
                "--goodput: no SLO given (e.g. --goodput ttft:500 tpot:50)".into(),
            ))
        }
    }

    /// `{"ttft_ms", "tpot_ms", "e2el_ms"}`, null where not given.
    pub(crate) fn to_json(self) -> Value {
        json!({"ttft_ms": opt_num(self.ttft_ms), "tpot_ms": opt_num(self.tpot_ms),
               "e2el_ms": opt_num(self.e2el_ms)})
    }

    /// Does one request meet every given SLO? Failed and cancelled requests
    /// never do. As vLLM: a request without TPOT (one output token) counts
    /// as TPOT 0; a completed request without TTFT or E2EL fails a TTFT or
    /// E2EL SLO.
    pub(crate) fn is_good(&self, r: &RequestRecord) -> bool {
        if !r.is_ok() {
            return false;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let within = |limit: Option<f64>, value: Option<f64>| match limit {
            None => true,
            Some(l) => value.is_some_and(|v| v <= l),
        };
        within(self.ttft_ms, r.ttft.map(ms))
            && within(self.tpot_ms, Some(r.tpot.map_or(0.0, ms)))
            && within(self.e2el_ms, r.e2el.map(ms))
    }
}

impl Slo {
    /// `TTFT<=500 ms, TPOT<=50 ms`: the SLOs given, in the order vLLM
    /// names them.
    pub(crate) fn words(&self) -> String {
        [
            ("TTFT", self.ttft_ms),
            ("TPOT", self.tpot_ms),
            ("E2EL", self.e2el_ms),
        ]
        .into_iter()
        .filter_map(|(name, ms)| ms.map(|ms| format!("{name}<={} ms", trim_ms(ms))))
        .collect::<Vec<_>>()
        .join(", ")
    }

    /// The SLOs from a summary's `run.goodput_slo` object; None without one.
    pub(crate) fn from_json(v: &Value) -> Option<Slo> {
        let ms = |k: &str| v.get(k).and_then(Value::as_f64);
        let slo = Slo {
            ttft_ms: ms("ttft_ms"),
            tpot_ms: ms("tpot_ms"),
            e2el_ms: ms("e2el_ms"),
        };
        (slo != Slo::default()).then_some(slo)
    }
}

/// `500`, `250.5`: milliseconds as the user would have typed them.
fn trim_ms(ms: f64) -> String {
    if ms.fract() == 0.0 && ms.abs() < 1e15 {
        format!("{ms:.0}")
    } else {
        format!("{ms}")
    }
}

/// `goodput 3.2 req/s (81% of requests within TTFT<=500 ms, TPOT<=50 ms)`:
/// a level's goodput with the SLOs it was judged by. The rate is left out
/// where the level's duration is unknown; the share is of completed and
/// failed requests.
pub(crate) fn goodput_text(rate_per_s: Option<f64>, share: Option<f64>, slo: &Slo) -> String {
    let rate = rate_per_s
        .filter(|r| r.is_finite())
        .map(|r| format!(" {r:.1} req/s"))
        .unwrap_or_default();
    let share = share
        .filter(|s| s.is_finite())
        .map(|s| format!("{:.0}% of requests ", s * 100.0))
        .unwrap_or_else(|| "requests ".into());
    format!("goodput{rate} ({share}within {})", slo.words())
}

/// Goodput of one level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Goodput {
    /// Completed requests meeting every SLO.
    pub good: usize,
    /// good / (completed + failed); 0 with no such request.
    pub share: f64,
    /// good / duration_s (vLLM's `request_goodput`); 0 for a level that
    /// lasted no time, None when its duration is unknown (a merge of shards
    /// whose times do not line up).
    pub rate_per_s: Option<f64>,
}

impl Goodput {
    /// `{"good", "share", "rate_per_s"}`.
    pub(crate) fn to_json(self) -> Value {
        json!({"good": self.good, "share": num(round_to(self.share, 4)),
               "rate_per_s": opt_num(self.rate_per_s.map(|r| round_to(r, 4)))})
    }
}

/// Counts the good requests of one level. Cancelled requests are left out
/// of the share; `duration_s` is the level's (`LevelStats::duration_s`).
#[cfg(test)]
pub(crate) fn request_goodput(records: &[RequestRecord], slo: &Slo, duration_s: f64) -> Goodput {
    let good = records.iter().filter(|r| slo.is_good(r)).count();
    let counted = records
        .iter()
        .filter(|r| r.is_ok() || r.is_failed())
        .count();
    Goodput::from_counts(good, counted, Some(duration_s))
}

impl Goodput {
    /// From the good requests and the completed plus failed ones of a
    /// level, folded as they came back.
    pub(crate) fn from_counts(good: usize, counted: usize, duration_s: Option<f64>) -> Goodput {
        let share = if counted > 0 {
            good as f64 / counted as f64
        } else {
            0.0
        };
        let rate_per_s = duration_s.map(|d| {
            if d > 0.0 && d.is_finite() {
                good as f64 / d
            } else {
                0.0
            }
        });
        Goodput {
            good,
            share,
            rate_per_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ErrorClass, Outcome};

    #[test]
    fn goodput_reads_with_its_slos() {
        let slo = Slo::parse(["ttft:500 tpot:50"]).expect("valid");
        assert_eq!(slo.words(), "TTFT<=500 ms, TPOT<=50 ms");
        assert_eq!(
            goodput_text(Some(3.2), Some(0.81), &slo),
            "goodput 3.2 req/s (81% of requests within TTFT<=500 ms, TPOT<=50 ms)"
        );
        // A merged level of unknown duration: the share alone.
        let e2el = Slo::parse(["e2el:250.5"]).expect("valid");
        assert_eq!(
            goodput_text(None, Some(0.5), &e2el),
            "goodput (50% of requests within E2EL<=250.5 ms)"
        );
        // The summary's object reads back; null everywhere is no SLO.
        assert_eq!(Slo::from_json(&slo.to_json()), Some(slo));
        assert_eq!(Slo::from_json(&Slo::default().to_json()), None);
    }

    #[test]
    fn parses_vllm_syntax() {
        let slo = Slo::parse(["ttft:500 tpot:50 e2el:30000"]).expect("valid");
        assert_eq!(
            slo,
            Slo {
                ttft_ms: Some(500.0),
                tpot_ms: Some(50.0),
                e2el_ms: Some(30000.0)
            }
        );
        // clap's several values, and fractions.
        let slo = Slo::parse(["ttft:250.5", "e2el:0"]).expect("valid");
        assert_eq!(slo.ttft_ms, Some(250.5));
        assert_eq!(slo.tpot_ms, None);
        assert_eq!(slo.e2el_ms, Some(0.0));
    }

    #[test]
    fn refuses_bad_values_in_one_line() {
        let err = |s: &str| Slo::parse([s]).expect_err(s).to_string();
        assert_eq!(
            err("itl:5"),
            "--goodput: unknown metric 'itl' in 'itl:5': use ttft, tpot or e2el"
        );
        assert_eq!(
            err("ttft:-1"),
            "--goodput: 'ttft:-1' must be a non-negative number of milliseconds"
        );
        assert_eq!(
            err("ttft:fast"),
            "--goodput: 'fast' in 'ttft:fast' is not a number of milliseconds"
        );
        assert_eq!(
            err("ttft:inf"),
            "--goodput: 'ttft:inf' must be a non-negative number of milliseconds"
        );
        assert_eq!(
            err("ttft500"),
            "--goodput: 'ttft500' is not metric:ms (e.g. ttft:500)"
        );
        assert_eq!(err("ttft:1 ttft:2"), "--goodput: 'ttft' is given twice");
        assert!(err("  ").contains("no SLO given"));
        assert!(!err("itl:5").contains('\n'));
    }

    fn req(id: u64, ttft_ms: u64, tpot_ms: Option<u64>, e2el_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::empty(id, 0);
        r.ttft = Some(Duration::from_millis(ttft_ms));
        r.tpot = tpot_ms.map(Duration::from_millis);
        r.e2el = Some(Duration::from_millis(e2el_ms));
        r
    }

    #[test]
    fn hand_counted_goodput() {
        // SLO: ttft <= 500, tpot <= 50.
        let slo = Slo::parse(["ttft:500 tpot:50"]).expect("valid");
        let mut failed = req(7, 100, Some(10), 1000);
        failed.outcome = Outcome::Failed(ErrorClass::Http(503));
        let mut cancelled = req(8, 100, Some(10), 1000);
        cancelled.outcome = Outcome::Cancelled;
        let records = vec![
            req(1, 120, Some(30), 3000), // good
            req(2, 500, Some(50), 5000), // good: limits are inclusive
            req(3, 501, Some(20), 2500), // TTFT over
            req(4, 300, Some(51), 5400), // TPOT over
            req(5, 80, None, 80),        // good: one token, TPOT counts as 0
            req(6, 200, Some(45), 4700), // good
            failed,                      // never good, counted in the share
            cancelled,                   // left out entirely
        ];
        // good = 1, 2, 5, 6 = 4; counted = 6 completed + 1 failed = 7;
        // share 4/7 = 0.5714; over 8 s: 0.5 good requests per second.
        let g = request_goodput(&records, &slo, 8.0);
        assert_eq!(g.good, 4);
        assert!((g.share - 4.0 / 7.0).abs() < 1e-12);
        assert_eq!(g.rate_per_s, Some(0.5));
        assert_eq!(g.to_json()["share"], json!(0.5714));
        // Adding e2el <= 5000 drops request 4 (already out) and nothing else:
        // 1 (3000), 2 (5000), 5 (80), 6 (4700) stay.
        let slo = Slo::parse(["ttft:500 tpot:50 e2el:5000"]).expect("valid");
        assert_eq!(request_goodput(&records, &slo, 8.0).good, 4);
        // e2el <= 4000: 2 (5000) and 6 (4700) fall out -> 2.
        let slo = Slo::parse(["ttft:500 tpot:50 e2el:4000"]).expect("valid");
        assert_eq!(request_goodput(&records, &slo, 8.0).good, 2);
        // No duration, no records: zeros, not NaN.
        let g = request_goodput(&[], &slo, 0.0);
        assert_eq!((g.good, g.share, g.rate_per_s), (0, 0.0, Some(0.0)));
    }
}
