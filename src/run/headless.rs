//! The headless face: progress on stderr, a block per level and the
//! closing table on stdout.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use color_eyre::eyre::Result;

use super::prepare::Prepared;
use super::start::{start_run, Running};
use super::timing::TimingPlan;
use super::{interrupted, one_line, EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::export::Exports;
use crate::load::driver::{Command, DriverEvent, FitEvent, Mode};
use crate::load::ramp::Ramp;
use crate::report::recorder::rate_label;
use crate::report::recorder::Recorder;
use crate::report::text;
use crate::report::timing::rfc3339_ms;

/// The headless face: progress on stderr, a block per level and the final
/// table on stdout (on stderr when `--events -` takes stdout). Returns the
/// exit code.
pub async fn run_headless(prepared: Prepared) -> Result<i32> {
    let end = run_headless_with(prepared, |_| {}, std::future::pending()).await?;
    Ok(end.code)
}

/// How a headless run ended: its exit code, and what stopped it early
/// when `stop_when` did.
pub(crate) struct HeadlessEnd {
    pub code: i32,
    pub stopped_by: Option<String>,
}

/// The headless face with two hooks for a face built over it (`tune`):
/// `before_load` sees the recorder before anything is sent, and when
/// `stop_when` resolves (the server it started died) the run is stopped
/// and saved as for Ctrl-C, the reason kept.
pub(crate) async fn run_headless_with(
    prepared: Prepared,
    before_load: impl FnOnce(&mut Recorder),
    stop_when: impl std::future::Future<Output = String>,
) -> Result<HeadlessEnd> {
    let mut exports = Exports::open(&prepared.export_plan())?;
    let result = headless(prepared, &mut exports, before_load, stop_when).await;
    if let Err(e) = &result {
        exports.failed(&one_line(e), EXIT_FAILED);
    }
    result
}

async fn headless(
    prepared: Prepared,
    exports: &mut Exports,
    before_load: impl FnOnce(&mut Recorder),
    stop_when: impl std::future::Future<Output = String>,
) -> Result<HeadlessEnd> {
    let mut out: Box<dyn Write> = if exports.events_on_stdout() {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let (
        Running {
            mut recorder,
            mut driver,
            mut server_samples,
            run_start,
        },
        (),
    ) = start_run(&prepared, exports, false, before_load)?;
    let progress = Progress::new(
        prepared.plan.levels.len(),
        prepared.plan.timing.start_at,
        prepared.run.ramp,
    );
    crate::say!(
        "tokbench: {} ({}), model {}, {}; results in {}",
        prepared.plan.display_target,
        match prepared.identity.engine_version.as_deref() {
            Some(version) => format!("{} {version}", prepared.identity.engine),
            None => prepared.identity.engine.clone(),
        },
        prepared.model,
        text::shape_line(&prepared.run),
        recorder.dir().display()
    );
    if let Some(addr) = exports.metrics_addr() {
        crate::say!("tokbench: live metrics at http://{addr}/metrics");
    }

    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut interrupt = std::pin::pin!(interrupted());
    let mut was_interrupted = false;
    let mut stop_when = std::pin::pin!(stop_when);
    let mut stopped_by: Option<String> = None;
    let mut state = ProgressState::default();
    let mut run_error = None;
    loop {
        tokio::select! {
            event = driver.events.recv() => {
                let Some(event) = event else { break };
                state.observe(&event);
                let finished = recorder.on_event(&event)?.map(|l| l.info.index);
                exports.on_event(&event, finished, &recorder)?;
                if let Some(level) = finished
                    .and_then(|i| recorder.finished().iter().rev().find(|l| l.info.index == i))
                    .filter(|l| l.file.is_some())
                {
                    progress.clear();
                    // The recorder's run: its shape is the one the levels
                    // ran with, answers shortened to fit included.
                    let _ = write!(out, "{}", text::level_block(level, recorder.run()));
                    let _ = out.flush();
                    // On a schedule the next level started on time anyway.
                    let overrun = level.saved.as_ref().and_then(|l| l["drain_overrun_s"].as_f64());
                    if let Some(over) = overrun.filter(|s| *s > 0.0) {
                        crate::say!(
                            "tokbench: this level's last answers came {over:.3} s after the next level started on schedule (longer than --level-gap); see drain_overrun_s"
                        );
                    }
                }
                match event {
                    DriverEvent::Finished { error, .. } => {
                        run_error = error;
                        break;
                    }
                    DriverEvent::WarmupFinished { ok, failed, calibration, .. } => {
                        progress.clear();
                        crate::say!(
                            "tokbench: warmup done ({ok} ok, {failed} failed); prompts calibrated at {:.2} tokens/word + {:.0} template tokens",
                            calibration.tokens_per_word, calibration.overhead_tokens
                        );
                        if let Some(line) = start_at_line(&prepared.plan.timing, SystemTime::now()) {
                            crate::say!("tokbench: {line}");
                        }
                    }
                    DriverEvent::Fit(fit) => {
                        progress.clear();
                        for line in fit_lines(&fit) {
                            crate::say!("tokbench: {line}");
                        }
                    }
                    _ => {}
                }
            }
            Some(sample) = server_samples.recv() => recorder.on_server_sample(&sample),
            _ = ticker.tick() => {
                recorder.flush_if_due()?;
                progress.show(&state, driver.in_flight.load(Ordering::Relaxed), run_start.elapsed());
            }
            why = &mut stop_when, if stopped_by.is_none() => {
                progress.clear();
                crate::say!("tokbench: {why}; stopping and saving what was measured");
                stopped_by = Some(why);
                let _ = driver.commands.send(Command::Stop);
            }
            _ = &mut interrupt, if !was_interrupted => {
                was_interrupted = true;
                progress.clear();
                crate::say!("tokbench: interrupted, saving what was measured");
                let _ = driver.commands.send(Command::Stop);
            }
        }
    }
    progress.clear();
    recorder.finish()?;
    if let Some(error) = run_error {
        let error = super::failure_line(&error, recorder.run());
        crate::say!("tokbench: {error}");
        exports
            .finish(&recorder, EXIT_FAILED, Some(&error), was_interrupted)
            .await?;
        return Ok(HeadlessEnd {
            code: EXIT_FAILED,
            stopped_by,
        });
    }
    let _ = writeln!(out);
    print_results(&recorder, &mut out);
    let failed = print_thresholds(&recorder, &mut out);
    let code = if was_interrupted {
        EXIT_INTERRUPTED
    } else if failed {
        EXIT_CHECK_FAILED
    } else {
        EXIT_OK
    };
    exports
        .finish(&recorder, code, None, was_interrupted)
        .await?;
    Ok(HeadlessEnd { code, stopped_by })
}

/// What a fitted run's event says on stderr as it comes: the estimate
/// after the warmup, answers shortened to fit, the budget that would fit a
/// long fixed plan, and planned levels skipped.
pub(crate) fn fit_lines(event: &FitEvent) -> Vec<String> {
    match event {
        FitEvent::Estimate {
            line,
            shortened,
            suggestion,
            ..
        } => {
            let mut lines = vec![line.clone()];
            if let Some((asked, used)) = shortened {
                lines.push(format!(
                    "answers shortened to {used} tokens (from {asked}) so that the first two levels fit the budget; every table and file shows {used}"
                ));
            }
            lines.extend(suggestion.iter().cloned());
            lines
        }
        FitEvent::Skipped {
            concurrencies,
            reason,
        } => vec![reason.line(concurrencies)],
        FitEvent::TimeLeft { .. } | FitEvent::LevelEnded { .. } => Vec::new(),
    }
}

/// The closing lines every face prints after the run: the sweep table, the
/// capacity, the knee, the cost verdict, the notes and the result folder.
/// A closed stdout is not the run's failure: the files hold the same.
pub(crate) fn print_results(recorder: &Recorder, out: &mut dyn Write) {
    let _ = write!(
        out,
        "{}",
        text::sweep_table(
            recorder.finished(),
            &recorder.tally().kept_levels(),
            recorder.run(),
            &|s| recorder.tally().series_label(s)
        )
    );
    let decision = recorder.tally().decision();
    for line in recorder.tally().verdict_lines(&decision, true) {
        let _ = writeln!(out, "{line}");
    }
    // Levels a fitted plan did not run, once per reason.
    if let Some(fit) = recorder.tally().fit_section() {
        let mut said: Vec<&str> = Vec::new();
        for line in fit.skipped.iter().filter_map(|s| s.line.as_deref()) {
            if !said.contains(&line) {
                said.push(line);
                let _ = writeln!(out, "{line}");
            }
        }
    }
    crate::model::files::fit_and_save(recorder.dir(), out);
    let _ = writeln!(out, "results: {}", recorder.dir().display());
    let _ = out.flush();
}

/// Each `--threshold` with its value and verdict, after the results;
/// true when one failed. A tune's settings are judged at the tune's end
/// (`run::tune`), not here.
pub(crate) fn print_thresholds(recorder: &Recorder, out: &mut dyn Write) -> bool {
    if recorder.tally().tune().is_some() {
        return false;
    }
    let entries = recorder.thresholds();
    for entry in &entries {
        let _ = writeln!(out, "{}", crate::report::thresholds::line(entry, None));
    }
    let _ = out.flush();
    entries.iter().any(|e| !e.ok)
}

/// The line said before the wait for `--start-at`: when level 1 starts,
/// or that the warmup ran past that time.
fn start_at_line(timing: &TimingPlan, now: SystemTime) -> Option<String> {
    let at = timing.start_at?;
    Some(match at.duration_since(now) {
        Ok(wait) => format!(
            "level 1 starts at {} (in {:.1} s; Ctrl-C cancels)",
            rfc3339_ms(at),
            wait.as_secs_f64()
        ),
        Err(late) => format!(
            "the warmup ended {:.1} s after --start-at {}: level 1 starts now{}",
            late.duration().as_secs_f64(),
            rfc3339_ms(at),
            if timing.duration.is_some() {
                ", and ends on schedule (shorter)"
            } else {
                ""
            }
        ),
    })
}

/// What the progress line shows, folded from driver events.
#[derive(Default)]
struct ProgressState {
    /// The level now running: its index, concurrency, count, kind, rate
    /// and start (run clock).
    level: Option<(usize, u32, Option<u32>)>,
    mode: Option<Mode>,
    rate: Option<f64>,
    started_at: Duration,
    plan_position: Option<usize>,
    done_in_level: u32,
    failed_total: u64,
    warmup: bool,
    /// The driver's last word on the time left: when (run clock), seconds.
    time_left: Option<(Duration, f64)>,
}

impl ProgressState {
    fn observe(&mut self, event: &DriverEvent) {
        match event {
            DriverEvent::WarmupStarted { .. } => self.warmup = true,
            DriverEvent::WarmupFinished { .. } => self.warmup = false,
            DriverEvent::Fit(FitEvent::TimeLeft { seconds, at }) => {
                self.time_left = Some((*at, *seconds));
            }
            DriverEvent::LevelStarted(info) => {
                self.level = Some((info.index, info.concurrency, info.num_prompts));
                self.mode = Some(info.mode);
                self.rate = info.rate;
                self.started_at = info.started_at;
                self.plan_position = info.plan_index;
                self.done_in_level = 0;
            }
            DriverEvent::Record(r) => {
                if self.level.is_some_and(|(i, _, _)| i == r.level) {
                    self.done_in_level += 1;
                }
                if r.is_failed() {
                    self.failed_total += 1;
                }
            }
            _ => {}
        }
    }
}

/// The progress line of a running level: what it is (`level 2/5
/// concurrency 4`, `search step 8 concurrency 20`, `rate 4 req/s`, `ramp
/// 2 -> 20 req/s, at 7.3 req/s`, `replay`), then its count. A position
/// `k/n` is said only where the plan has its `n` levels; a search has no
/// fixed count and says its step, an open loop its rate.
fn progress_line(
    state: &ProgressState,
    levels: usize,
    ramp: Option<Ramp>,
    in_flight: u32,
    elapsed: Duration,
) -> String {
    let Some((_, concurrency, total)) = state.level else {
        return String::new();
    };
    let step = state.plan_position.map(|p| p + 1);
    let what = match (state.mode, ramp) {
        (Some(Mode::Search), _) => match step {
            Some(k) => format!("search step {k} concurrency {concurrency}"),
            None => format!("search concurrency {concurrency}"),
        },
        (Some(Mode::Rate), _) => match state.rate {
            Some(r) => format!("rate {} req/s", rate_label(r)),
            None => "rate".into(),
        },
        (Some(Mode::Replay), Some(r)) => {
            let t = elapsed.saturating_sub(state.started_at).as_secs_f64();
            format!(
                "ramp {} -> {} req/s, at {:.1} req/s",
                rate_label(r.from),
                rate_label(r.to),
                r.rate_at(t.min(r.duration_s))
            )
        }
        (Some(Mode::Replay), None) => "replay".into(),
        _ => match step {
            Some(k) if k <= levels => format!("level {k}/{levels} concurrency {concurrency}"),
            Some(k) => format!("level {k} concurrency {concurrency}"),
            None => format!("concurrency {concurrency}"),
        },
    };
    let total = total.map_or_else(|| "-".into(), |t| t.to_string());
    let left = state
        .time_left
        .map(|(at, seconds)| {
            let left = (seconds - elapsed.saturating_sub(at).as_secs_f64()).max(0.0);
            format!(", ~{} left", crate::analysis::fit::duration_words(left))
        })
        .unwrap_or_default();
    format!(
        "{what}: {}/{total} done, {in_flight} in flight, {} failed{left}",
        state.done_in_level, state.failed_total
    )
}

/// The one-line progress display on stderr: rewritten in place on a
/// terminal, a line every few seconds otherwise.
struct Progress {
    levels: usize,
    /// `--ramp`: the replayed level is this ramp.
    ramp: Option<Ramp>,
    /// `--start-at`: the line counts down to it before level 1.
    start_at: Option<SystemTime>,
    tty: bool,
    last_plain: std::cell::Cell<Option<Instant>>,
}

impl Progress {
    fn new(levels: usize, start_at: Option<SystemTime>, ramp: Option<Ramp>) -> Progress {
        Progress {
            levels,
            ramp,
            start_at,
            tty: std::io::stderr().is_terminal(),
            last_plain: std::cell::Cell::new(None),
        }
    }

    fn show(&self, state: &ProgressState, in_flight: u32, elapsed: Duration) {
        let line = if state.warmup {
            format!("warmup: {in_flight} in flight")
        } else if state.level.is_some() {
            progress_line(state, self.levels, self.ramp, in_flight, elapsed)
        } else if let Some(wait) = self
            .start_at
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
        {
            format!(
                "waiting for --start-at: level 1 in {:.1} s",
                wait.as_secs_f64()
            )
        } else {
            return;
        };
        let clock = format!("[{:>4.0}s] ", elapsed.as_secs_f64());
        if self.tty {
            crate::say_inline!("\r\x1b[2K{clock}{line}");
        } else if self
            .last_plain
            .get()
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5))
        {
            self.last_plain.set(Some(Instant::now()));
            crate::say!("{clock}{line}");
        }
    }

    fn clear(&self) {
        if self.tty {
            crate::say_inline!("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::driver::LevelInfo;
    use crate::load::ramp::RampKind;

    fn state(info: LevelInfo) -> ProgressState {
        let mut state = ProgressState::default();
        state.observe(&DriverEvent::LevelStarted(info));
        state
    }

    fn info(index: usize, concurrency: u32, mode: Mode, started_s: u64) -> LevelInfo {
        LevelInfo {
            num_prompts: Some(10),
            plan_index: Some(index),
            ..LevelInfo::new(index, concurrency, mode, Duration::from_secs(started_s))
        }
    }

    /// A planned level says its place in the plan; a search, which has no
    /// fixed count, its step: never `level 8/6`.
    #[test]
    fn a_position_is_never_past_its_count() {
        let at = Duration::from_secs(1);
        let planned = state(info(1, 4, Mode::Planned, 0));
        assert_eq!(
            progress_line(&planned, 6, None, 2, at),
            "level 2/6 concurrency 4: 0/10 done, 2 in flight, 0 failed"
        );
        let search = state(info(7, 20, Mode::Search, 0));
        let line = progress_line(&search, 6, None, 2, at);
        assert!(line.starts_with("search step 8 concurrency 20: "), "{line}");
        // A planned level past the plan's count (a resumed run) says no count.
        let past = state(info(7, 20, Mode::Planned, 0));
        assert!(progress_line(&past, 6, None, 2, at).starts_with("level 8 concurrency 20: "));
    }

    /// A ramp reads as its rates and where it is now, not as the
    /// concurrency cap it runs under.
    #[test]
    fn a_ramp_says_its_rate_now() {
        let ramp = Ramp {
            kind: RampKind::Linear,
            from: 2.0,
            to: 20.0,
            duration_s: 10.0,
        };
        let ramping = state(info(0, 4096, Mode::Replay, 1));
        // 5 s into a 10 s linear ramp from 2 to 20: 11 req/s.
        let line = progress_line(&ramping, 1, Some(ramp), 3, Duration::from_secs(6));
        assert!(
            line.starts_with("ramp 2 -> 20 req/s, at 11.0 req/s: "),
            "{line}"
        );
        assert!(!line.contains("4096") && !line.contains("level"), "{line}");
        let mut rate = info(0, 4096, Mode::Rate, 0);
        rate.rate = Some(4.0);
        let line = progress_line(&state(rate), 1, None, 3, Duration::from_secs(1));
        assert!(line.starts_with("rate 4 req/s: "), "{line}");
    }
}
