//! Synthetic runs for snapshot tests, screenshots and the render benchmark:
//! an `App` fed the driver events a real sweep would produce, with fixed
//! times and deterministic jitter, so every screen is reproducible.
//!
//! The shape is the seed article's illustrative sweep (docs/decide.md, "From numbers to a decision"):
//! per-stream speed falling, total throughput rising, p99 TTFT climbing.

// The scenes are test fixtures; outside tests only `article_run` is used
// (by the render bench), so the rest is dead there by design.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]

use std::time::Duration;

use crate::load::driver::{DriverEvent, LevelInfo, Mode};
use crate::record::{ErrorClass, FinishReason, Outcome, RequestRecord, TokenSource};

use super::app::{App, CostView, LevelRow, Phase, RunView, TuneView};
use super::theme::{ColorMode, Palette};
use crate::analysis::cost::cost;

/// One level of the illustrative sweep.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub concurrency: u32,
    /// Decode speed of one stream, tok/s.
    pub stream_tok_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
}

impl Shape {
    /// A row of the article's table: streams, tok/s per stream, p50 and
    /// p99 TTFT (ms).
    pub(crate) const fn new(
        concurrency: u32,
        stream_tok_s: f64,
        ttft_p50_ms: f64,
        ttft_p99_ms: f64,
    ) -> Shape {
        Shape {
            concurrency,
            stream_tok_s,
            ttft_p50_ms,
            ttft_p99_ms,
        }
    }
}

/// The article's table.
pub(crate) const ARTICLE: [Shape; 6] = [
    Shape::new(1, 92.0, 48.0, 61.0),
    Shape::new(4, 88.0, 71.0, 96.0),
    Shape::new(16, 71.0, 152.0, 244.0),
    Shape::new(32, 54.0, 287.0, 498.0),
    Shape::new(64, 34.0, 611.0, 1240.0),
    Shape::new(128, 18.0, 1490.0, 3820.0),
];

/// Deterministic jitter (a 64-bit LCG): the same scene every time.
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: u64) -> Jitter {
        Jitter(seed.wrapping_mul(6364136223846793005).wrapping_add(1))
    }
    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Builds a run event by event, keeping the clock and the ids.
pub(crate) struct Scene {
    pub app: App,
    /// Seconds since the run started.
    pub now: f64,
    next_id: u64,
    next_level: usize,
    jitter: Jitter,
    pub output_len: u32,
}

/// How a level's failures look.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    /// One request in `every` fails, cycling through 503, 429, timeout, closed.
    pub every: Option<u32>,
}

fn d(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.max(0.0))
}

impl Scene {
    pub(crate) fn new(run: RunView, mode: ColorMode) -> Scene {
        let output_len = run.output_len;
        Scene {
            app: App::new(run, Palette::new(mode)),
            now: 0.0,
            next_id: 0,
            next_level: 0,
            jitter: Jitter::new(7),
            output_len,
        }
    }

    pub(crate) fn feed(&mut self, event: DriverEvent) {
        self.app.on_driver_event(&event);
    }

    /// Warmup at the first level's concurrency, taking `secs`.
    pub(crate) fn warmup(&mut self, requests: u32, concurrency: u32, secs: f64) {
        self.feed(DriverEvent::WarmupStarted {
            requests,
            concurrency,
        });
        self.now += secs;
        self.feed(DriverEvent::WarmupFinished {
            ok: requests as usize,
            failed: 0,
            calibration: crate::workload::Calibration::default(),
            reported_prompt_tokens: Vec::new(),
        });
    }

    /// Start a level now; returns its index.
    pub(crate) fn start(
        &mut self,
        concurrency: u32,
        mode: Mode,
        plan_index: Option<usize>,
    ) -> usize {
        let index = self.next_level;
        self.next_level += 1;
        let num_prompts = plan_index.map(|_| concurrency * 10);
        self.feed(DriverEvent::LevelStarted(LevelInfo {
            num_prompts,
            plan_index,
            ..LevelInfo::new(index, concurrency, mode, d(self.now))
        }));
        self.feed(DriverEvent::TargetChanged {
            at: d(self.now),
            target: concurrency,
        });
        index
    }

    /// `done` requests of a level shaped like `shape`, every stream sending
    /// back to back from now; the clock ends at the last of them.
    pub(crate) fn play(&mut self, level: usize, shape: Shape, done: u32, faults: Faults) {
        let c = shape.concurrency.max(1);
        let out = self.output_len.max(2);
        let mut records = Vec::with_capacity(done as usize);
        // Streams start spread over one request's time: a closed loop soon
        // loses its lockstep on a real server, and the bars then look it.
        let request_s =
            (shape.ttft_p50_ms + 1000.0 / shape.stream_tok_s * f64::from(out - 1)) / 1000.0;
        let mut stream_clock: Vec<f64> = (0..c)
            .map(|j| self.now + request_s * f64::from(j) / f64::from(c))
            .collect();
        for n in 0..done {
            let stream = (n % c) as usize;
            let u = self.jitter.uniform();
            // Mostly near p50, the top percent near p99.
            let ttft_ms = if u > 0.985 {
                shape.ttft_p99_ms * (0.95 + 0.1 * self.jitter.uniform())
            } else {
                shape.ttft_p50_ms * (0.8 + 0.4 * self.jitter.uniform())
            };
            let tpot_ms = 1000.0 / shape.stream_tok_s * (0.97 + 0.06 * self.jitter.uniform());
            let decode_ms = tpot_ms * f64::from(out - 1);
            let start = stream_clock[stream] + 0.002 * self.jitter.uniform();
            let mut r = RequestRecord::empty(self.next_id, level);
            self.next_id += 1;
            r.start = d(start);
            r.input_tokens_target = 1024;
            r.input_tokens_reported = Some(1024);
            r.output_tokens_requested = out;
            r.token_source = TokenSource::Usage;
            let failure = faults.every.filter(|e| *e > 0 && n % e == e - 1).map(|_| {
                match (n / faults.every.unwrap_or(1)) % 4 {
                    0 => (
                        ErrorClass::Http(503),
                        "server busy, please try again.  maximum pending requests exceeded",
                    ),
                    1 => (ErrorClass::Http(429), "Model is overloaded"),
                    2 => (
                        ErrorClass::Timeout,
                        "no answer within the request timeout (600 s)",
                    ),
                    _ => (
                        ErrorClass::ConnectionClosed,
                        "connection closed before the stream ended",
                    ),
                }
            });
            match failure {
                Some((class, message)) => {
                    r.outcome = Outcome::Failed(class);
                    r.error_message = Some(message.into());
                    r.end = d(start + 0.005 + ttft_ms / 4000.0);
                }
                None => {
                    r.ttfb = Some(d(ttft_ms / 2000.0));
                    r.ttft = Some(d(ttft_ms / 1000.0));
                    r.e2el = Some(d((ttft_ms + decode_ms) / 1000.0));
                    r.tpot = Some(d(tpot_ms / 1000.0));
                    // A sample of the gaps is enough for the live window.
                    r.itl_ms = (0..16)
                        .map(|_| tpot_ms * (0.9 + 0.2 * self.jitter.uniform()))
                        .collect();
                    r.output_tokens = out;
                    r.chunks = out;
                    r.finish_reason = Some(FinishReason::Length);
                    r.end = r.start + d((ttft_ms + decode_ms) / 1000.0);
                }
            }
            stream_clock[stream] = r.end.as_secs_f64();
            records.push(r);
        }
        records.sort_by_key(|r| r.end);
        for r in records {
            self.now = self.now.max(r.end.as_secs_f64());
            self.feed(DriverEvent::Record(r));
        }
    }

    pub(crate) fn finish_level(&mut self, level: usize, partial: bool) {
        self.feed(DriverEvent::LevelFinished {
            index: level,
            partial,
        });
    }

    /// Set the clock, the gauge and the client figure, and bring the
    /// derived figures up to date, as the loop does before a frame.
    pub(crate) fn settle(&mut self, at: f64, in_flight: u32) -> &App {
        self.now = self.now.max(at);
        self.app.set_queue(in_flight, in_flight);
        self.app.set_client_cpu(Some(4.0));
        self.app.on_tick(d(self.now));
        self.app.recompute(d(self.now));
        &self.app
    }
}

/// The header of the article's setup.
pub fn article_run(simulated: bool) -> RunView {
    RunView {
        target: "http://gpu-box:8000".into(),
        engine: "vLLM".into(),
        engine_version: Some("0.11.2".into()),
        model: "Qwen/Qwen3-8B".into(),
        input_len: 1024,
        output_len: 1024,
        length_ask: Some(crate::engine::LengthAsk::IgnoreEos),
        knobs: None,
        simulated,
        plan: ARTICLE.iter().map(|s| s.concurrency).collect(),
        result_dir: "results/20261129-191400".into(),
        started_at: None,
        profile: None,
        gpus: None,
        ramp: None,
    }
}

/// The screens the snapshot tests and the screenshots show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Screen {
    FirstLevel,
    MidSweep,
    Manual,
    Paused,
    Errors,
    Help,
    Finished,
    /// Mid-sweep with the chart panel on the frontier (`v`).
    Frontier,
    /// The finished sweep on the frontier, its capacity starred.
    FrontierFinished,
    /// A tune at its second setting, the first one's curve beside it.
    Tune,
    /// A tune while the second setting's server starts.
    TuneStarting,
}

impl Screen {
    pub(crate) const ALL: [Screen; 11] = [
        Screen::FirstLevel,
        Screen::MidSweep,
        Screen::Manual,
        Screen::Paused,
        Screen::Errors,
        Screen::Help,
        Screen::Finished,
        Screen::Frontier,
        Screen::FrontierFinished,
        Screen::Tune,
        Screen::TuneStarting,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Screen::FirstLevel => "first-level",
            Screen::MidSweep => "mid-sweep",
            Screen::Manual => "manual",
            Screen::Paused => "paused",
            Screen::Errors => "errors",
            Screen::Help => "help",
            Screen::Finished => "finished",
            Screen::Frontier => "frontier",
            Screen::FrontierFinished => "frontier-finished",
            Screen::Tune => "tune",
            Screen::TuneStarting => "tune-starting",
        }
    }

    pub(crate) fn build(self, mode: ColorMode) -> App {
        let finished = matches!(self, Screen::Finished | Screen::FrontierFinished);
        let mut s = Scene::new(article_run(finished), mode);
        s.warmup(4, 1, 3.0);
        match self {
            // Built by `tune_scene` below.
            Screen::Tune | Screen::TuneStarting => {}
            Screen::FirstLevel => {
                let l = s.start(1, Mode::Planned, Some(0));
                s.play(l, ARTICLE[0], 5, Faults::default());
                s.settle(s.now + 0.4, 1);
            }
            Screen::MidSweep | Screen::Paused | Screen::Help | Screen::Frontier => {
                mid_sweep(&mut s, Faults::default());
                if self == Screen::Paused {
                    s.feed(DriverEvent::Paused(true));
                }
                if self == Screen::Help {
                    s.app.show_help = true;
                }
                let in_flight = if self == Screen::Paused { 7 } else { 32 };
                s.settle(s.now + 0.6, in_flight);
            }
            Screen::Errors => {
                mid_sweep(&mut s, Faults { every: Some(9) });
                s.settle(s.now + 0.6, 32);
            }
            Screen::Manual => {
                for (k, shape) in ARTICLE[..2].iter().enumerate() {
                    let l = s.start(shape.concurrency, Mode::Planned, Some(k));
                    s.play(l, *shape, shape.concurrency * 10, Faults::default());
                    s.finish_level(l, false);
                }
                // At 16 the user pressed `+`: the planned level is cut short.
                let l = s.start(16, Mode::Planned, Some(2));
                s.play(l, ARTICLE[2], 70, Faults::default());
                let m = s.start(17, Mode::Manual, None);
                s.finish_level(l, true);
                let shape17 = Shape::new(17, 69.0, 160.0, 262.0);
                s.play(m, shape17, 85, Faults::default());
                // Then `]`: a second manual level at 34, running.
                let m2 = s.start(34, Mode::Manual, None);
                s.finish_level(m, false);
                let shape34 = Shape::new(34, 52.0, 301.0, 540.0);
                s.play(m2, shape34, 60, Faults::default());
                s.settle(s.now + 0.3, 34);
            }
            Screen::Finished | Screen::FrontierFinished => {
                for (k, shape) in ARTICLE.iter().enumerate() {
                    let l = s.start(shape.concurrency, Mode::Planned, Some(k));
                    s.play(l, *shape, shape.concurrency * 10, Faults::default());
                    s.finish_level(l, false);
                }
                // What the analysis says of this shape (see analysis::decide).
                s.app.set_verdict(
                    Some(32),
                    Some((64, 128)),
                    vec![
                        "capacity: 32 streams: the level before the knee (64 -> 128 streams; no TTFT SLO given), meeting decode >= 20 tok/s per stream: 54 tok/s; 76% of the peak 2,034 tok/s at 128 streams".into(),
                        "knee: 64 -> 128 streams adds 4.7% throughput while p99 TTFT grows 3.1x: KV cache or batch full, requests queue".into(),
                        "note: one round per level: run --rounds 3 to see how stable the numbers are".into(),
                    ],
                );
                // --gpu-price-per-hour 2 --api-price-per-m 0.65 at the
                // capacity's 1,551 tok/s.
                let capacity_tok_s = s.app.shown.levels[3].figures.output_tok_s;
                s.app.set_cost(Some(CostView::from_cost(&cost(
                    capacity_tok_s,
                    2.0,
                    Some(0.65),
                    None,
                ))));
                s.feed(DriverEvent::Finished {
                    stopped_by_user: false,
                    error: None,
                });
                s.settle(s.now + 0.2, 0);
            }
        }
        if let Screen::Tune | Screen::TuneStarting = self {
            tune_scene(&mut s, self == Screen::TuneStarting, mode);
        }
        if matches!(self, Screen::Frontier | Screen::FrontierFinished) {
            s.app.frontier = true;
        }
        if self == Screen::FrontierFinished {
            // `--gpus 8`: the frontier's throughput per GPU.
            s.app.shown.run.gpus = Some(8);
        }
        s.app
    }
}

/// `tokbench tune --grid np=1,2,4` at np=2: np=1 was the finished sweep
/// at 60% of its throughput; np=2 is mid-sweep, or (`starting`) its server
/// is starting and nothing of it is measured yet.
fn tune_scene(s: &mut Scene, starting: bool, mode: ColorMode) {
    let earlier: Vec<LevelRow> = Screen::Finished
        .build(mode)
        .shown
        .levels
        .into_iter()
        .map(|mut l| {
            l.figures.output_tok_s *= 0.6;
            l.info.series = 0;
            l
        })
        .collect();
    if starting {
        s.app.phase = Phase::Starting;
    } else {
        mid_sweep(s, Faults::default());
        s.settle(s.now + 0.6, 32);
        for l in &mut s.app.shown.levels {
            l.info.series = 1;
        }
    }
    s.app.series = 1;
    s.app.earlier = earlier;
    s.app.set_series_label(0, "np=1");
    s.app.set_series_label(1, "np=2");
    s.app.tune = Some(TuneView {
        line: if starting {
            "setting 2/3 np=2 · starting server 14 s".into()
        } else {
            "setting 2/3 np=2 · ready in 15.2 s".into()
        },
        log_line: starting.then(|| "INFO: loading model weights took 11.3 s".into()),
        rows: vec![
            // Worded as the tune words a finished setting, its vLLM's KV
            // cache included.
            crate::report::tune_text::setting_line(&finished_np1()),
            format!("np=2: {}", if starting { "starting" } else { "running" }),
            "np=4: waiting".into(),
        ],
        recommendation: Some(
            "keep np=1: capacity 32 streams within decode >= 20 tok/s per stream (931 tok/s); this rests on one round (--rounds 3 measures the noise)".into(),
        ),
    });
}

/// np=1 as `summary.json`'s `tune` holds it once finished: 17,000 KV
/// blocks of 16 tokens, as vLLM leaves for an 8B model on an 80 GB GPU.
fn finished_np1() -> crate::report::schema::TuneSetting {
    use serde_json::Number;
    crate::report::schema::TuneSetting {
        label: Some("np=1".into()),
        status: Some("finished".into()),
        ready_s: Number::from_f64(14.8),
        capacity: Some(crate::report::schema::Capacity {
            concurrency: Some(32),
            output_throughput: Number::from_f64(931.0),
            ..Default::default()
        }),
        peak: Number::from_f64(1220.0),
        memory: serde_json::json!({"num_gpu_blocks": 17_000, "block_size": 16, "kv_tokens": 272_000}),
        ..Default::default()
    }
}

/// Levels 1, 4 and 16 done; 32 running at 214 of 320.
fn mid_sweep(s: &mut Scene, faults: Faults) {
    for (k, shape) in ARTICLE[..3].iter().enumerate() {
        let l = s.start(shape.concurrency, Mode::Planned, Some(k));
        s.play(l, *shape, shape.concurrency * 10, faults);
        s.finish_level(l, false);
    }
    // What the analysis says of the three finished levels.
    s.app.set_verdict(
        Some(16),
        None,
        vec![
            "capacity: 16 streams: the highest level meeting the SLO (decode >= 20 tok/s per stream: 71 tok/s); 100% of the peak 1,029 tok/s at 16 streams".into(),
            "note: one round per level: run --rounds 3 to see how stable the numbers are".into(),
        ],
    );
    let l = s.start(32, Mode::Planned, Some(3));
    s.play(l, ARTICLE[3], 214, faults);
}
