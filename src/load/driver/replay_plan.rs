//! The schedule of a `--replay` or `--ramp` level: its entries, its pace,
//! what the trace was and how it was fitted to the server's context.

use std::sync::Arc;

use crate::load::replay::ReplayEntry;

/// A request log to send on its own timeline.
#[derive(Clone, Debug)]
pub struct Replay {
    pub entries: Arc<Vec<ReplayEntry>>,
    /// 2.0 sends twice as fast as recorded.
    pub speed: f64,
    /// Most requests in flight.
    pub max_in_flight: u32,
    /// The file's shape.
    pub format: crate::load::trace::TraceFormat,
    /// Prompt tokens per hash id, for a trace that has them.
    pub block_tokens: Option<u32>,
    /// The trace's own prefix reuse (share of prompt tokens in blocks seen before).
    pub reuse: Option<f64>,
    /// `--strict-lengths`: refuse requests longer than the server's context.
    pub strict_lengths: bool,
    /// Requests cut to the server's context, and that context.
    pub clipped: usize,
    pub context_tokens: Option<u32>,
    /// `--ramp`: the schedule is this ramp's, not a file's.
    pub ramp: Option<crate::load::ramp::Ramp>,
}

impl Replay {
    /// A tokbench log's schedule, with nothing clipped yet.
    pub fn new(entries: Vec<ReplayEntry>, speed: f64, max_in_flight: u32) -> Replay {
        Replay {
            entries: Arc::new(entries),
            speed,
            max_in_flight,
            format: crate::load::trace::TraceFormat::Tokbench,
            block_tokens: None,
            reuse: None,
            strict_lengths: false,
            clipped: 0,
            context_tokens: None,
            ramp: None,
        }
    }

    /// `--ramp`: one request at each of the ramp's send times, of the run's lengths.
    pub fn of_ramp(ramp: crate::load::ramp::Ramp, max_in_flight: u32) -> Replay {
        let entries = ramp
            .schedule()
            .into_iter()
            .map(|t| ReplayEntry {
                t,
                input_len: None,
                output_len: None,
                prompt: None,
                blocks: None,
            })
            .collect();
        Replay {
            ramp: Some(ramp),
            ..Replay::new(entries, 1.0, max_in_flight)
        }
    }

    /// Fit every entry to a server context of `context` tokens: count those
    /// longer and clip them, or refuse the trace under `--strict-lengths`.
    pub fn fit_to_context(&mut self, context: u32) -> Result<(), String> {
        self.context_tokens = Some(context);
        let (over, first) = crate::load::trace::over_context(&self.entries, context);
        if over == 0 {
            return Ok(());
        }
        if self.strict_lengths {
            let at = first.unwrap_or(0);
            return Err(format!(
                "--strict-lengths: {over} requests of the trace are longer than the server's context of {context} tokens (the first is request {} of the schedule); leave out --strict-lengths to clip them",
                at + 1
            ));
        }
        let mut entries = self.entries.as_ref().clone();
        for e in &mut entries {
            crate::load::trace::clip(e, context);
        }
        self.entries = Arc::new(entries);
        self.clipped = over;
        Ok(())
    }

    /// What the level file says of the trace.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "format": if self.ramp.is_some() { "ramp" } else { self.format.name() },
            "ramp": self.ramp.map(|r| r.to_json()),
            "requests": self.entries.len(),
            "block_tokens": self.block_tokens,
            "reuse": self.reuse.map(crate::fmt::round4),
            "clipped": self.clipped,
            "context_tokens": self.context_tokens,
        })
    }
}
