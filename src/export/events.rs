//! `--events FILE` (or `-`): one JSON object per line for scripts and CI
//! jobs, written and flushed as the run goes. The schema is in docs/live-metrics.md
//! ("Events for scripts"); every line has `event`, `time` (UTC) and `elapsed_s` (since
//! the run started), and what the event carries beside them.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use color_eyre::eyre::{Result, WrapErr};
use serde_json::{Map, Value};

use crate::fmt::round3;
use crate::report::time;

/// Where the events go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventsTo {
    /// `--events -`: stdout, and the plain output moves to stderr.
    Stdout,
    File(PathBuf),
}

impl EventsTo {
    pub(crate) fn parse(raw: &str) -> EventsTo {
        if raw == "-" {
            EventsTo::Stdout
        } else {
            EventsTo::File(PathBuf::from(raw))
        }
    }

    fn describe(&self) -> String {
        match self {
            EventsTo::Stdout => "stdout".into(),
            EventsTo::File(path) => path.display().to_string(),
        }
    }
}

pub(crate) struct EventLog {
    out: Box<dyn Write + Send>,
    to: EventsTo,
    started: Instant,
    /// The reader of stdout went away: the run goes on without events.
    closed: bool,
}

impl EventLog {
    /// Create (truncate) the file before any load, so a bad path fails first.
    pub(crate) fn create(to: &EventsTo) -> Result<EventLog> {
        let out: Box<dyn Write + Send> = match to {
            EventsTo::Stdout => Box::new(io::stdout()),
            EventsTo::File(path) => {
                Box::new(BufWriter::new(File::create(path).wrap_err_with(|| {
                    format!("--events: cannot write {}", path.display())
                })?))
            }
        };
        Ok(EventLog {
            out,
            to: to.clone(),
            started: Instant::now(),
            closed: false,
        })
    }

    pub(crate) fn to(&self) -> &EventsTo {
        &self.to
    }

    /// One line: `{"event": kind, "time", "elapsed_s", ...fields}`, flushed
    /// at once (a script tails it).
    pub(crate) fn emit(&mut self, kind: &str, fields: Map<String, Value>) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let line = event_line(
            kind,
            &time::iso8601(SystemTime::now()),
            self.started.elapsed().as_secs_f64(),
            fields,
        );
        let written = writeln!(self.out, "{line}").and_then(|()| self.out.flush());
        match written {
            Ok(()) => Ok(()),
            // `tokbench ... --events - | head`: the reader left; the run's
            // files still matter more than its events.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe && self.to == EventsTo::Stdout => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(e)
                .wrap_err_with(|| format!("cannot write the events to {}", self.to.describe())),
        }
    }
}

/// The JSON text of one event: its kind and clocks, and its fields.
pub(crate) fn event_line(
    kind: &str,
    time: &str,
    elapsed_s: f64,
    fields: Map<String, Value>,
) -> String {
    let mut map = Map::new();
    map.insert("event".into(), Value::from(kind));
    map.insert("time".into(), Value::from(time));
    map.insert("elapsed_s".into(), Value::from(round3(elapsed_s)));
    for (k, v) in fields {
        map.entry(k).or_insert(v);
    }
    Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_is_one_object_with_its_kind_and_fields() {
        let mut fields = Map::new();
        fields.insert("level_index".into(), json!(3));
        // A field cannot overwrite the line's own keys.
        fields.insert("event".into(), json!("forged"));
        let line = event_line("level_started", "2026-12-01T10:00:00Z", 1.23456, fields);
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["event"], "level_started");
        assert_eq!(v["elapsed_s"], 1.235);
        assert_eq!(v["level_index"], 3);
    }

    #[test]
    fn dash_means_stdout() {
        assert_eq!(EventsTo::parse("-"), EventsTo::Stdout);
        assert_eq!(
            EventsTo::parse("ev.jsonl"),
            EventsTo::File(PathBuf::from("ev.jsonl"))
        );
    }
}
