//! Render cost of the live view: CPU share of one core that the view's work
//! takes with 1,000 request records a second flowing in and 10 frames a
//! second drawn, the way the real loop does it (a tokio loop that drains the
//! event channel in batches and draws on a frame interval).
//!
//! Run: `cargo bench --bench render` (prints a table; asserts nothing).
//!
//! Each record carries 128 output tokens and 127 ITL samples, as a
//! `--random-output-len 128` run would. The producer of the records runs on
//! the same thread, so a "no view" row measures it alone; the view's cost is
//! the difference. Two outputs: ratatui's `TestBackend` (cells only), and
//! crossterm writing real escape sequences into a byte counter (what an SSH
//! session would carry; the bytes per frame are printed too). The recorder's
//! file writing is not counted: headless runs pay it too.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::backend::{Backend, CrosstermBackend, TestBackend};
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use tokbench::load::driver::{DriverEvent, LevelInfo, Mode};
use tokbench::probe::client::process_cpu_time;
use tokbench::record::{FinishReason, RequestRecord, TokenSource};
use tokbench::ui::app::App;
use tokbench::ui::draw;
use tokbench::ui::scenes::article_run;
use tokbench::ui::theme::{ColorMode, Palette};

const RECORDS_PER_SECOND: u64 = 1000;
const FPS: u64 = 10;
const SECONDS: u64 = 10;
const OUTPUT_TOKENS: u32 = 128;
const CONCURRENCY: u32 = 256;

/// Counts what would go down the wire.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicU64>);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn record(id: u64, now: Duration) -> RequestRecord {
    // Jitter from the id: the bars and quantiles have something to show.
    let wobble = (id.wrapping_mul(2654435761) % 1000) as f64 / 1000.0;
    let ttft = Duration::from_micros(80_000 + (wobble * 40_000.0) as u64);
    let tpot_ms = 20.0 + 5.0 * wobble;
    let e2el = ttft + Duration::from_secs_f64(tpot_ms * f64::from(OUTPUT_TOKENS - 1) / 1000.0);
    let mut r = RequestRecord::empty(id, 0);
    r.end = now;
    r.start = now.saturating_sub(e2el);
    r.ttfb = Some(ttft / 2);
    r.ttft = Some(ttft);
    r.e2el = Some(e2el);
    r.tpot = Some(Duration::from_secs_f64(tpot_ms / 1000.0));
    r.itl_ms = (0..OUTPUT_TOKENS - 1)
        .map(|k| tpot_ms * (0.9 + 0.2 * ((k as f64 * 0.37 + wobble) % 1.0)))
        .collect();
    r.input_tokens_target = 128;
    r.input_tokens_reported = Some(128);
    r.output_tokens_requested = OUTPUT_TOKENS;
    r.output_tokens = OUTPUT_TOKENS;
    r.token_source = TokenSource::Usage;
    r.chunks = OUTPUT_TOKENS;
    r.finish_reason = Some(FinishReason::Length);
    r
}

struct Outcome {
    cpu_percent: f64,
    frames: usize,
    records: u64,
    frame_mean_us: f64,
    frame_p99_us: f64,
    bytes_per_frame: Option<f64>,
}

/// How frames are drawn, if at all.
enum Face {
    None,
    Cells(Terminal<TestBackend>),
    Wire(Terminal<CrosstermBackend<Counter>>, Counter),
}

fn draw_on<B: Backend>(terminal: &mut Terminal<B>, app: &App) {
    terminal.draw(|frame| draw::draw(frame, app)).expect("draw");
}

async fn run(mut face: Face) -> Outcome {
    let (tx, mut rx) = mpsc::unbounded_channel::<DriverEvent>();
    let start = Instant::now();
    // The driver's stand-in: 1,000 records a second in 10 ms batches.
    let producer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let per_tick = RECORDS_PER_SECOND / 100;
        let mut id = 0;
        loop {
            tick.tick().await;
            for _ in 0..per_tick {
                if tx
                    .send(DriverEvent::Record(record(id, start.elapsed())))
                    .is_err()
                {
                    return;
                }
                id += 1;
            }
        }
    });
    let mut app = App::new(article_run(false), Palette::new(ColorMode::Ansi16));
    app.on_driver_event(&DriverEvent::LevelStarted(LevelInfo {
        rate: None,
        timeline: None,
        index: 0,
        concurrency: CONCURRENCY,
        mode: Mode::Manual,
        num_prompts: None,
        plan_index: None,
        started_at: Duration::ZERO,
        series: 0,
    }));
    app.on_driver_event(&DriverEvent::TargetChanged {
        at: Duration::ZERO,
        target: CONCURRENCY,
    });
    let mut frames = tokio::time::interval(Duration::from_millis(1000 / FPS));
    frames.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut frame_times: Vec<Duration> = Vec::new();
    let mut records = 0u64;
    let cpu_before = process_cpu_time();
    let wall = Instant::now();
    let view = !matches!(face, Face::None);
    loop {
        tokio::select! {
            Some(event) = rx.recv() => {
                records += 1;
                if view {
                    app.on_driver_event(&event);
                }
                while let Ok(event) = rx.try_recv() {
                    records += 1;
                    if view {
                        app.on_driver_event(&event);
                    }
                }
            }
            _ = frames.tick() => {
                let t = Instant::now();
                app.set_in_flight(CONCURRENCY);
                app.on_tick(start.elapsed());
                match &mut face {
                    Face::None => {}
                    Face::Cells(terminal) => draw_on(terminal, &app),
                    Face::Wire(terminal, _) => draw_on(terminal, &app),
                }
                frame_times.push(t.elapsed());
                if wall.elapsed() >= Duration::from_secs(SECONDS) {
                    break;
                }
            }
        }
    }
    let cpu = process_cpu_time().saturating_sub(cpu_before);
    let wall = wall.elapsed();
    producer.abort();
    frame_times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = frame_times.len().max(1);
    Outcome {
        cpu_percent: cpu.as_secs_f64() / wall.as_secs_f64() * 100.0,
        frames: frame_times.len(),
        records,
        frame_mean_us: frame_times.iter().map(|d| us(*d)).sum::<f64>() / n as f64,
        frame_p99_us: frame_times
            .get((n * 99 / 100).min(n - 1))
            .map_or(0.0, |d| us(*d)),
        bytes_per_frame: match &face {
            Face::Wire(_, counter) => {
                Some(counter.0.load(Ordering::Relaxed) as f64 / frame_times.len().max(1) as f64)
            }
            _ => None,
        },
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "live view render cost: {RECORDS_PER_SECOND} records/s ({OUTPUT_TOKENS} tokens, {} ITL samples each), {FPS} fps, {SECONDS} s a row, one thread",
        OUTPUT_TOKENS - 1
    );
    println!(
        "{:<28} {:>8} {:>9} {:>8} {:>13} {:>12} {:>12}",
        "face", "size", "records", "frames", "CPU % 1 core", "frame mean", "frame p99"
    );
    let baseline = runtime.block_on(run(Face::None));
    let row = |name: &str, size: &str, o: &Outcome| {
        println!(
            "{:<28} {:>8} {:>9} {:>8} {:>12.2}% {:>10.0}us {:>10.0}us{}",
            name,
            size,
            o.records,
            o.frames,
            o.cpu_percent,
            o.frame_mean_us,
            o.frame_p99_us,
            o.bytes_per_frame
                .map_or_else(String::new, |b| format!("  {b:.0} bytes/frame"))
        );
    };
    row("no view (records only)", "-", &baseline);
    for (w, h) in [(80u16, 24u16), (160, 48)] {
        let size = format!("{w}x{h}");
        let cells = Terminal::new(TestBackend::new(w, h)).expect("test backend");
        let o = runtime.block_on(run(Face::Cells(cells)));
        row("TestBackend", &size, &o);
        println!(
            "{:<28} {:>8} {:>49.2}% of one core for the view",
            "  view alone",
            "",
            o.cpu_percent - baseline.cpu_percent
        );
        let counter = Counter::default();
        let wire = Terminal::with_options(
            CrosstermBackend::new(counter.clone()),
            TerminalOptions {
                viewport: Viewport::Fixed(Rect::new(0, 0, w, h)),
            },
        )
        .expect("crossterm backend");
        let o = runtime.block_on(run(Face::Wire(wire, counter)));
        row("crossterm escape sequences", &size, &o);
        println!(
            "{:<28} {:>8} {:>49.2}% of one core for the view",
            "  view alone",
            "",
            o.cpu_percent - baseline.cpu_percent
        );
    }
}
