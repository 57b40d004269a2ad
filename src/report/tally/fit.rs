//! What a fitted run said as it went (`load::driver::FitEvent`), kept for
//! the result files: the estimate, the answers shortened, the levels
//! skipped and why each level ended.

use std::collections::HashMap;

use crate::analysis::fit::LevelEnd;
use crate::fmt::round3;
use crate::load::driver::FitEvent;
use crate::report::schema::{FitSection, SkippedLevel};

#[derive(Default)]
pub(crate) struct FitLog {
    section: Option<FitSection>,
    ends: HashMap<usize, LevelEnd>,
}

impl FitLog {
    /// Take one event of the series `series`; the answer length the run
    /// now asks for when it was shortened.
    pub(crate) fn on_event(&mut self, event: &FitEvent, series: usize) -> Option<u32> {
        match event {
            FitEvent::Estimate {
                line,
                seconds,
                shortened,
                speed,
                ..
            } => {
                let section = self.section.get_or_insert_with(FitSection::default);
                section.estimate = Some(line.clone());
                section.estimate_s = Some(round3(*seconds));
                section.decode_tok_s = Some(round3(speed.decode_tok_s));
                section.ttft_ms = Some(round3(speed.ttft_s * 1e3));
                if let Some((asked, used)) = shortened {
                    section.output_len_asked = Some(*asked);
                    section.output_len = Some(*used);
                    return Some(*used);
                }
            }
            FitEvent::Skipped {
                concurrencies,
                reason,
            } => {
                let section = self.section.get_or_insert_with(FitSection::default);
                let line = reason.line(concurrencies);
                section
                    .skipped
                    .extend(concurrencies.iter().map(|&c| SkippedLevel {
                        concurrency: Some(c),
                        series: Some(series as u64),
                        reason: Some(reason.as_str().to_string()),
                        line: Some(line.clone()),
                    }));
            }
            FitEvent::LevelEnded { index, end } => {
                self.ends.insert(*index, *end);
            }
            FitEvent::TimeLeft { .. } => {}
        }
        None
    }

    /// Why level `index` ended, in a fitted run.
    pub(crate) fn end_reason(&self, index: usize) -> Option<&'static str> {
        self.ends.get(&index).map(|e| e.as_str())
    }

    pub(crate) fn section(&self) -> Option<&FitSection> {
        self.section.as_ref()
    }
}
