//! A sweep fitted to the box it meets (`--budget`, or the default budget
//! when no count, duration or budget is given): each planned level ends
//! once it is steady, levels past the knee are skipped, answers are
//! shortened after the warmup only when the first two levels could not fit
//! otherwise, and the budget's end ends the run, its level saved partial.
//! The arithmetic is `analysis::fit`'s; the knee is `analysis::decide`'s;
//! the steady rule is `stats::steady`'s. This file only applies them.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::analysis::decide::{find_knee, sweep_points, LevelPoint};
use crate::analysis::fit::{
    self as model, BudgetFrom, Gain, LevelEnd, Measured, SkipReason, Speed,
};
use crate::stats::steady::{is_steady, RequestRates, SteadyEstimator};
use crate::stats::tally::LevelTally;

/// How a sweep is fitted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitConfig {
    /// The whole run's time, warmup included.
    pub budget: Duration,
    /// The user gave none: this is the default budget.
    pub default_budget: bool,
    /// A tune setting's share of the tune's `--budget`.
    pub tune_share: bool,
    /// The steady rule: completions per stream ...
    pub per_stream: u32,
    /// ... and the largest relative standard error of per-second throughput.
    pub max_rse: f64,
}

/// What the fit tells the faces and the recorder.
#[derive(Clone, Debug, PartialEq)]
pub enum FitEvent {
    /// After the warmup: the plan's cost in one line, the answer length
    /// when it was shortened to fit (`from`, `to`), and a budget that would
    /// fit a long fixed plan.
    Estimate {
        line: String,
        /// Expected seconds for the run after the warmup.
        seconds: f64,
        shortened: Option<(u32, u32)>,
        suggestion: Option<String>,
        speed: Speed,
    },
    /// Seconds the rest of the run is expected to take, as of `at` (run
    /// clock): after the warmup and after each level.
    TimeLeft { seconds: f64, at: Duration },
    /// Why a fitted level ended, just before its `LevelFinished`.
    LevelEnded { index: usize, end: LevelEnd },
    /// Planned levels that will not run, and why.
    Skipped {
        concurrencies: Vec<u32>,
        reason: SkipReason,
    },
}

/// A fitted level as it runs.
pub(super) struct LevelFit {
    steady: SteadyEstimator,
    /// Each request's own rate, the first wave left out: a level whose
    /// seconds alternate between prefill and decode settles by these.
    rates: RequestRates,
    /// Its records folded the recorder's way: its throughput and p99 TTFT
    /// are what the knee is judged on.
    tally: LevelTally,
    floor: u32,
    end: Option<LevelEnd>,
}

/// The fit of the run (`--budget`, or the default budget).
pub(super) struct FitState {
    pub(super) cfg: FitConfig,
    deadline: Instant,
    /// The budget ran out: the run stops, and not by the user.
    pub(super) spent: bool,
}

impl FitState {
    pub(super) fn new(cfg: FitConfig, run_start: Instant) -> FitState {
        FitState {
            cfg,
            deadline: run_start + cfg.budget,
            spent: false,
        }
    }

    /// When the budget ends, while it has not.
    pub(super) fn deadline(&self) -> Option<Instant> {
        (!self.spent).then_some(self.deadline)
    }

    fn left_s(&self) -> f64 {
        self.deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    }
}

/// What any closed plan knows of the server's pace: the warmup's speed and
/// the planned levels as they finish. The time left is computed from it
/// for every closed plan; a fitted one also ends, skips and shortens by it.
#[derive(Default)]
pub(super) struct Pace {
    speed: Option<Speed>,
    /// The last planned level that finished whole in this series.
    last: Option<LevelPoint>,
    levels: HashMap<usize, LevelFit>,
}

impl Pace {
    fn measured(&self) -> Option<Measured> {
        self.last.as_ref().map(|p| Measured {
            concurrency: p.concurrency,
            tok_s: p.figures.output_throughput,
        })
    }
}

impl Driver {
    /// The plan's (concurrency, requests) still to run in this series,
    /// from plan index `from`: a fitted level counts what it is expected to
    /// complete once steady.
    fn plan_left(&self, from: usize) -> Vec<(u32, u32)> {
        let per_stream = self.fit.as_ref().map(|f| f.cfg.per_stream);
        self.cfg
            .plan
            .iter()
            .skip(from)
            .map(|l| match per_stream {
                Some(k) => (
                    l.concurrency,
                    model::fitted_requests(l.concurrency, k, l.num_prompts),
                ),
                None => (l.concurrency, l.num_prompts),
            })
            .collect()
    }

    /// A closed-loop plan of counted levels of one asked length: what the
    /// estimate speaks of (a dataset's lengths are its records').
    fn plan_is_closed(&self) -> bool {
        self.search.is_none()
            && self.cfg.replay.is_none()
            && !self.cfg.workload.uses_dataset()
            && self.cfg.duration.is_none()
            && self.cfg.turns <= 1
            && self.cfg.plan.iter().all(|l| l.rate.is_none())
            && !self.cfg.plan.is_empty()
    }

    /// The warmup's answers, capped for a fitted run (see
    /// `analysis::fit::WARMUP_OUTPUT_LEN`).
    pub(super) fn warmup_output_cap(&self) -> Option<u32> {
        self.fit.as_ref().map(|_| model::WARMUP_OUTPUT_LEN)
    }

    /// After the warmup: the speed it measured, the plan's cost said, and
    /// for a fitted run the answers shortened when the first two levels
    /// could not fit the budget otherwise.
    pub(super) fn after_warmup(&mut self, records: &[RequestRecord]) {
        if !self.plan_is_closed() {
            return;
        }
        let Some(speed) = Speed::of(records) else {
            return;
        };
        self.pace.speed = Some(speed);
        let asked = self.cfg.workload.output_len;
        let levels = self.plan_left(0);
        let fitted = self.fit.as_ref().map(|f| {
            let from = match (f.cfg.default_budget, f.cfg.tune_share) {
                (true, _) => BudgetFrom::Default,
                (false, true) => BudgetFrom::TuneShare,
                (false, false) => BudgetFrom::Given,
            };
            model::budget_words(f.cfg.budget, from)
        });
        let mut shortened = None;
        if let Some(fit) = &self.fit {
            let first_two = &levels[..levels.len().min(2)];
            if let Some(to) = model::fitted_output_len(first_two, asked, speed, fit.left_s()) {
                shortened = Some((asked, to));
                self.cfg.workload.output_len = to;
            }
        }
        let output_len = self.cfg.workload.output_len;
        let (line, seconds) = model::estimate_line(&levels, output_len, speed, fitted.as_deref());
        let suggestion = if fitted.is_some() {
            None
        } else {
            let cost = model::plan_cost(&levels, output_len, speed, None);
            let first_two: Vec<(u32, u32)> = levels
                .iter()
                .take(2)
                .map(|&(c, n)| (c, model::fitted_requests(c, 2, n)))
                .collect();
            (cost.seconds > model::SUGGEST_BUDGET_OVER.as_secs_f64()).then(|| {
                let fits = model::plan_cost(&first_two, output_len, speed, None).seconds;
                format!(
                    "--budget {} would fit a sweep like it in place of the counts: levels end once steady, and levels past the knee are skipped",
                    model::flag_words(model::budget_that_fits(fits))
                )
            })
        };
        self.emit(DriverEvent::Fit(FitEvent::Estimate {
            line,
            seconds,
            shortened,
            suggestion,
            speed,
        }));
        self.say_time_left();
    }

    /// Seconds the rest of the run is expected to take: a fixed plan's
    /// levels left, each at the last measured throughput (before any, one
    /// stream at a time); a fitted run's next level (its first two before
    /// any is measured, the knee being expected there), within what is
    /// left of the budget.
    pub(super) fn say_time_left(&mut self) {
        if !self.plan_is_closed() || self.stopping {
            return;
        }
        let Some(speed) = self.pace.speed else { return };
        let output_len = self.cfg.workload.output_len;
        let left = self.plan_left(self.next_plan);
        let measured = self.pace.measured();
        let seconds = match &self.fit {
            None => model::plan_cost(&left, output_len, speed, measured).seconds,
            Some(fit) => {
                let take = if measured.is_none() { 2 } else { 1 };
                let next = &left[..left.len().min(take)];
                let expected = model::plan_cost(next, output_len, speed, measured).seconds;
                expected.min(fit.left_s())
            }
        };
        self.emit(DriverEvent::Fit(FitEvent::TimeLeft {
            seconds,
            at: self.now(),
        }));
    }

    /// Before a fitted planned level starts: whether what is left of the
    /// budget can hold it even if it gained with every stream; if not, it
    /// and the rest of the plan are skipped (said), and false is returned.
    pub(super) fn fit_level_may_start(&mut self, plan_index: usize) -> bool {
        let Some(fit) = &self.fit else { return true };
        let Some(step) = self.cfg.plan.get(plan_index) else {
            return true;
        };
        let left = fit.left_s();
        let floor = model::floor_completions(step.concurrency, fit.cfg.per_stream);
        let needs = self.pace.speed.map_or(0.0, |speed| {
            model::level_seconds(
                step.concurrency,
                floor,
                self.cfg.workload.output_len,
                speed,
                self.pace.measured(),
                Gain::Full,
            )
        });
        if left > 0.0 && needs <= left {
            return true;
        }
        self.skip_rest(
            plan_index,
            SkipReason::Budget {
                left_s: left,
                needs_s: needs,
            },
        );
        false
    }

    /// Skip the plan from `plan_index` on in this series, and say so.
    fn skip_rest(&mut self, plan_index: usize, reason: SkipReason) {
        let concurrencies: Vec<u32> = self
            .cfg
            .plan
            .iter()
            .skip(plan_index)
            .map(|l| l.concurrency)
            .collect();
        self.next_plan = self.cfg.plan.len();
        // A spent budget is said even with nothing left to skip.
        if !concurrencies.is_empty() || matches!(reason, SkipReason::Spent { .. }) {
            self.emit(DriverEvent::Fit(FitEvent::Skipped {
                concurrencies,
                reason,
            }));
        }
    }

    /// A planned level of a closed plan starts: followed from now.
    pub(super) fn pace_level_started(&mut self, index: usize) {
        if !self.plan_is_closed() {
            return;
        }
        let Some(level) = self.levels.get(index) else {
            return;
        };
        if level.info.mode != Mode::Planned {
            return;
        }
        let mut steady = SteadyEstimator::default();
        steady.start(level.info.started_at);
        let per_stream = self.fit.as_ref().map_or(0, |f| f.cfg.per_stream);
        self.pace.levels.insert(
            index,
            LevelFit {
                steady,
                rates: RequestRates::new(level.info.concurrency),
                tally: LevelTally::new(),
                floor: model::floor_completions(level.info.concurrency, per_stream),
                end: None,
            },
        );
    }

    /// A record of a followed level came back: folded; a fitted level, once
    /// steady, sends no more (what is in flight finishes and counts).
    pub(super) fn pace_record(&mut self, record: &RequestRecord) {
        let now = self.now();
        let Some(level_fit) = self.pace.levels.get_mut(&record.level) else {
            return;
        };
        if record.transition {
            return;
        }
        level_fit.tally.add(record);
        let Some(fit) = &self.fit else { return };
        if let (true, Some(ttft), Some(e2el)) = (record.is_ok(), record.ttft, record.e2el) {
            level_fit.steady.add(
                record.start,
                record.start + ttft,
                record.end.max(record.start + e2el),
                record.output_tokens,
                true,
            );
            level_fit
                .rates
                .add(record.output_tokens, record.start, record.end);
        }
        if level_fit.end.is_some() {
            return;
        }
        // Steady by its seconds, or by its requests' own rates: whichever
        // is first sure of the level's throughput, past the floor.
        let by_seconds = level_fit.steady.estimate(now, false).map(|e| e.rse);
        let by_requests = level_fit.rates.rse();
        let rse = match (by_seconds, by_requests) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if is_steady(
            level_fit.steady.completions,
            level_fit.floor,
            rse,
            fit.cfg.max_rse,
        ) {
            level_fit.end = Some(LevelEnd::Steady);
            if let Some(level) = self.levels.get_mut(record.level) {
                level.sent_enough = true;
            }
        }
    }

    /// A followed level closed. Whole: its throughput is what the next
    /// level is guessed from, and for a fitted run its end is said and the
    /// knee judged against the level before it (past the knee, the rest of
    /// the plan is skipped). Partial: a fitted level cut by the budget says
    /// so; one cut by the user says nothing.
    pub(super) fn pace_level_closed(&mut self, index: usize) {
        let Some(level_fit) = self.pace.levels.remove(&index) else {
            return;
        };
        let Some(level) = self.levels.get(index) else {
            return;
        };
        let (concurrency, partial) = (level.info.concurrency, level.partial);
        let fitted = self.fit.is_some();
        let end = match (level_fit.end, partial) {
            (Some(end), _) => Some(end),
            (None, false) => Some(LevelEnd::Count),
            (None, true) => None,
        };
        if let Some(end) = end.filter(|_| fitted) {
            self.emit(DriverEvent::Fit(FitEvent::LevelEnded { index, end }));
        }
        if partial {
            return;
        }
        let stats = level_fit.tally.stats(concurrency, &[50.0, 99.0]);
        let point = LevelPoint::from_stats(concurrency, Mode::Planned, false, &stats);
        let before = self.pace.last.replace(point.clone());
        let knee = before
            .filter(|b| fitted && b.concurrency < concurrency)
            .and_then(|b| find_knee(&sweep_points(&[b, point])));
        if let Some(knee) = knee {
            self.skip_rest(
                self.next_plan,
                SkipReason::PastKnee {
                    from: knee.from_concurrency,
                    to: knee.to_concurrency,
                },
            );
        }
        self.say_time_left();
    }

    /// The budget's end. It governs the plan: a planned level still
    /// running is cut and saved partial with its reason (one already
    /// steady, only finishing its last requests, is whole: what it measured
    /// is its answer), the rest of the plan is skipped, and a headless run
    /// stops. The live view stays, as after its plan, for the user's hand.
    pub(super) fn budget_spent(&mut self) {
        let Some(fit) = &mut self.fit else { return };
        if fit.spent || self.stopping {
            return;
        }
        fit.spent = true;
        let budget = fit.cfg.budget;
        let planned = self
            .current
            .filter(|&i| self.levels[i].info.mode == Mode::Planned);
        let cut = planned.map(|i| self.levels[i].info.concurrency);
        let steady = planned
            .and_then(|i| self.pace.levels.get(&i))
            .is_some_and(|l| l.end == Some(LevelEnd::Steady));
        if let Some(level_fit) = planned.and_then(|i| self.pace.levels.get_mut(&i)) {
            if !steady {
                level_fit.end = Some(LevelEnd::Budget);
            }
        }
        let watched = self.cfg.watch_server;
        if planned.is_some() || !watched {
            self.skip_rest(
                self.next_plan,
                SkipReason::Spent {
                    budget,
                    cut: cut.filter(|_| !steady),
                },
            );
        }
        if planned.is_some() {
            self.close_current(!steady);
        }
        if !watched {
            self.handle(Command::Stop);
        }
    }

    /// A new series judges the knee afresh: it is another server.
    pub(super) fn pace_new_series(&mut self) {
        self.pace.last = None;
    }
}
