//! `--grid np=auto` and `--grid np=2..64`: one whole-number knob searched
//! rather than listed. The value doubles from the low end while each
//! setting still serves more than the one before (more streams within the
//! SLO, or more tok/s there beyond noise), then one value halfway between
//! the last that gained and the first that did not is tried, and the
//! search stops. It stops at once where the server's own account says the
//! knob is no longer the limit: at the setting's knee it ran fewer requests
//! than the setting allows, or its KV cache was nearly full. Pure: the
//! caller runs each setting and hands back what it measured.

use color_eyre::eyre::{bail, Result};

use super::recommend::{Outcome, SettingResult};
use crate::analysis::decide::KNEE_MAX_GAIN;

/// Where `auto` stops doubling when nothing else stops it first.
pub(crate) const AUTO_TOP: u32 = 1024;
/// The server used fewer than this share of the setting's value at its
/// knee: the knob is not what limits it.
const SLOTS_USED_SHARE: f64 = 0.9;
/// A KV cache at least this full at the knee: memory limits, not the knob.
const KV_NEARLY_FULL: f64 = 0.95;

/// A knob to search, and its range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AutoGrid {
    pub name: String,
    pub low: u32,
    pub high: u32,
    /// `auto`: no top was given ([`AUTO_TOP`] is the search's own).
    pub open: bool,
}

impl AutoGrid {
    /// `NAME=auto` or `NAME=LOW..HIGH`; None for a list of values.
    pub(crate) fn parse(text: &str) -> Result<Option<AutoGrid>> {
        let Some((name, values)) = text.split_once('=') else {
            return Ok(None);
        };
        let (name, values) = (name.trim().to_string(), values.trim());
        if values == "auto" {
            return Ok(Some(AutoGrid {
                name,
                low: 1,
                high: AUTO_TOP,
                open: true,
            }));
        }
        let Some((low, high)) = values.split_once("..") else {
            if values.split(',').any(|v| v.trim() == "auto") {
                bail!("--grid {text}: auto stands alone ({name}=auto), not in a list");
            }
            return Ok(None);
        };
        let whole = |v: &str| -> Result<u32> {
            match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => bail!(
                    "--grid {text}: a range takes whole numbers from 1 ({name}=2..64); for other values list them ({name}=a,b,c)"
                ),
            }
        };
        let (low, high) = (whole(low)?, whole(high)?);
        if low > high {
            bail!("--grid {text}: the low end {low} is above the high end {high}; write {name}={high}..{low}");
        }
        Ok(Some(AutoGrid {
            name,
            low,
            high,
            open: false,
        }))
    }

    fn label(&self, value: u32) -> String {
        format!("{}={value}", self.name)
    }

    /// The values the search doubles through: low, 2 low, ..., high.
    fn doubling(&self) -> Vec<u32> {
        let mut values = vec![self.low];
        let mut v = self.low;
        while v < self.high {
            v = v.saturating_mul(2).min(self.high);
            values.push(v);
        }
        values
    }
}

/// One setting the search ran.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tried {
    pub value: u32,
    pub result: SettingResult,
    /// Requests the server ran at once at the setting's knee (its highest
    /// level when there was none), by its own account where it gives one.
    pub slots_used: Option<f64>,
    /// The KV cache's fullest there, 0 to 1.
    pub kv_usage: Option<f64>,
}

/// What the search does next.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Next {
    Try(u32),
    /// Done, and why, in one sentence.
    Done(String),
}

/// Whether `b` serves more than `a` beyond noise: more streams within the
/// SLO, or as many and more tok/s there by more than the rounds' spread
/// (the knee's threshold with one round). The gain in tok/s, as a share.
fn gains(a: &SettingResult, b: &SettingResult) -> (bool, Option<f64>) {
    let tok = |r: &SettingResult| r.tok_s_at_capacity.or(r.peak_tok_s);
    let gain = match (tok(a), tok(b)) {
        (Some(x), Some(y)) if x > 0.0 => Some(y / x - 1.0),
        _ => None,
    };
    let noise = match (a.spread, b.spread) {
        (Some(x), Some(y)) => x.max(y),
        _ => KNEE_MAX_GAIN,
    };
    let more_streams = b.capacity.unwrap_or(0) > a.capacity.unwrap_or(0);
    let same_streams = b.capacity.unwrap_or(0) == a.capacity.unwrap_or(0);
    (
        more_streams || (same_streams && gain.is_some_and(|g| g > noise)),
        gain,
    )
}

/// Why the knob no longer limits the server at `t`, where its own account
/// says so.
fn not_the_limit(grid: &AutoGrid, t: &Tried) -> Option<String> {
    if let Some(kv) = t.kv_usage.filter(|kv| *kv >= KV_NEARLY_FULL) {
        return Some(format!(
            "its KV cache was {:.0}% full at the knee: memory is the limit, not {}; a smaller model, a shorter context or quantisation leaves room for more",
            kv * 100.0,
            grid.name
        ));
    }
    let used = t.slots_used?;
    (used < SLOTS_USED_SHARE * f64::from(t.value)).then(|| {
        format!(
            "the server ran {used:.0} of {} at the knee: compute is the limit, not {}; try a smaller model or quantisation",
            t.value, grid.name
        )
    })
}

fn percent(gain: Option<f64>) -> String {
    gain.map_or_else(
        || "nothing measurable".into(),
        |g| format!("{:+.0}%", g * 100.0),
    )
}

/// The next value to try, given what was tried so far in the order run.
pub(crate) fn next(grid: &AutoGrid, tried: &[Tried]) -> Next {
    let doubling = grid.doubling();
    let find = |v: u32| tried.iter().find(|t| t.value == v);
    let run: Vec<&Tried> = doubling.iter().map_while(|&v| find(v)).collect();
    let Some(last) = run.last().copied() else {
        return Next::Try(grid.low);
    };
    if let Outcome::Partial(why) | Outcome::Failed(why) = &last.result.outcome {
        return Next::Done(format!(
            "{} did not finish ({why}): the search stops below it",
            grid.label(last.value)
        ));
    }
    let next_double = doubling.get(run.len()).copied();
    let Some(&prev) = run.len().checked_sub(2).and_then(|i| run.get(i)) else {
        if let Some(reason) = not_the_limit(grid, last) {
            return Next::Done(format!("{}: {reason}", grid.label(last.value)));
        }
        return match next_double {
            Some(v) => Next::Try(v),
            None => Next::Done(format!(
                "{} is the whole range: nothing else to try",
                grid.label(last.value)
            )),
        };
    };
    let (gained, gain) = gains(&prev.result, &last.result);
    let versus = format!(
        "{} adds {} over {}",
        grid.label(last.value),
        percent(gain),
        grid.label(prev.value)
    );
    if gained {
        if let Some(reason) = not_the_limit(grid, last) {
            return Next::Done(format!("{versus}, but {reason}"));
        }
        return match next_double {
            Some(v) => Next::Try(v),
            None if grid.open => Next::Done(format!(
                "{versus} and is the search's top ({}): the search stops there",
                AUTO_TOP
            )),
            None => Next::Done(format!(
                "{versus} and is the top of the range: try a range above {}",
                grid.high
            )),
        };
    }
    // No gain. Where the server says the knob is not its limit, more of
    // it cannot help; else, once, the value halfway between.
    if let Some(reason) = not_the_limit(grid, last) {
        return Next::Done(format!("{versus} and {reason}"));
    }
    let mid = prev.value + (last.value - prev.value) / 2;
    if mid > prev.value && mid < last.value && find(mid).is_none() {
        return Next::Try(mid);
    }
    let streams = |r: &SettingResult| r.capacity.unwrap_or(0);
    let (now, before) = (streams(&last.result), streams(&prev.result));
    Next::Done(format!(
        "{versus} ({now} stream{} within the SLO against {before}): more {} only queue",
        if now == 1 { "" } else { "s" },
        grid.name
    ))
}

#[cfg(test)]
#[path = "auto_tests.rs"]
mod tests;
