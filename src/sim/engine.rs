//! The simulated continuous-batching engine (docs/architecture.md section 5).
//!
//! Two layers:
//! - [`Scheduler`] is pure: it holds the waiting queue and the running batch, decides
//!   admission and step times, and advances sequences by one token per step. It knows
//!   nothing of time or I/O, so the unit tests drive it with a virtual clock.
//! - [`run`] is the async loop that owns a scheduler, sleeps to each step's absolute
//!   deadline (with a sub-millisecond timer, see [`super::timer`]) and hands tokens to
//!   the sequences' sinks.
//!
//! Timing contract, in short: a step decodes one token for every running sequence, and
//! the sequences admitted at that step do their prefill in it, so
//! `step time = step_ms + step_ms_per_seq * running + prefill_ms_per_1k * admitted_prompt / 1000`.
//! A sequence's first token is emitted at the end of the step that admitted it. A
//! request arriving while the engine is idle starts a step at once; otherwise it waits
//! for the next step boundary.
//!
//! With injected noise ([`Noise`], off by default) each step's time is that formula
//! times a slowly varying speed factor; off, the formula's value is used unchanged.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::metrics::{store_f64, Metrics, GEN_THROUGHPUT_STEPS};
use super::noise::Noise;
use super::timer::PreciseTimer;

/// Step-time parameters, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Timing {
    pub step_ms: f64,
    pub step_ms_per_seq: f64,
    pub prefill_ms_per_1k: f64,
}

/// Step time in ms for a step that runs `seqs` sequences (the newly admitted included)
/// and prefills `admitted_prompt_tokens` prompt tokens.
pub(crate) fn step_time_ms(t: &Timing, seqs: usize, admitted_prompt_tokens: u64) -> f64 {
    t.step_ms
        + t.step_ms_per_seq * seqs as f64
        + t.prefill_ms_per_1k * (admitted_prompt_tokens as f64 / 1000.0)
}

/// Capacity limits of the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// At most this many sequences run at once.
    pub max_num_seqs: usize,
    /// KV budget in tokens; a sequence reserves `prompt + max_tokens` at admission
    /// ([`KvPolicy::Reserve`]).
    pub kv_tokens: u64,
    /// How KV is booked (see [`KvPolicy`]).
    pub kv_policy: KvPolicy,
    /// Tokens per prefix-cache block; 0 turns the prefix cache off.
    pub prefix_block_tokens: u64,
}

/// How the engine books KV for a running sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvPolicy {
    /// `prompt + max_tokens` at admission, for the sequence's whole life: KV never runs
    /// out mid-way and nothing is preempted (the default).
    #[default]
    Reserve,
    /// vLLM's way: the prompt at admission and one more token per generated token.
    /// When the running batch outgrows the budget, the newest running sequence is
    /// preempted: it frees its KV, goes back to the head of the queue and recomputes
    /// its prefill (prompt and tokens so far) when readmitted; its stream pauses.
    Grow,
}

impl std::str::FromStr for KvPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "reserve" => Ok(KvPolicy::Reserve),
            "grow" => Ok(KvPolicy::Grow),
            other => Err(format!("unknown KV policy {other:?} (reserve or grow)")),
        }
    }
}

/// A bounded LRU set of prefix-block hashes (the blocks the KV cache still holds).
#[derive(Debug, Default)]
pub(crate) struct PrefixCache {
    capacity: usize,
    tick: u64,
    by_hash: HashMap<u64, u64>,
    by_tick: BTreeMap<u64, u64>,
}

impl PrefixCache {
    pub(crate) fn new(capacity: usize) -> Self {
        PrefixCache {
            capacity,
            ..PrefixCache::default()
        }
    }

    /// How many of `blocks` are cached, counted from the first one.
    pub(crate) fn leading_hits(&self, blocks: &[u64]) -> usize {
        blocks
            .iter()
            .take_while(|h| self.by_hash.contains_key(h))
            .count()
    }

    /// Mark `blocks` as just used, inserting the missing ones and evicting the least
    /// recently used beyond the capacity.
    pub(crate) fn touch(&mut self, blocks: &[u64]) {
        if self.capacity == 0 {
            return;
        }
        for &h in blocks {
            self.tick += 1;
            if let Some(old) = self.by_hash.insert(h, self.tick) {
                self.by_tick.remove(&old);
            }
            self.by_tick.insert(self.tick, h);
            while self.by_hash.len() > self.capacity {
                let Some((_, evicted)) = self.by_tick.pop_first() else {
                    break;
                };
                self.by_hash.remove(&evicted);
            }
        }
    }
}

/// How many sequences from the head of the waiting queue (given as their KV needs, in
/// queue order) can be admitted now. Strict FIFO: the first one that does not fit stops
/// admission, so a large request at the head is never overtaken by smaller ones.
pub(crate) fn admissible(
    waiting_kv_needs: impl IntoIterator<Item = u64>,
    running: usize,
    kv_used: u64,
    limits: Limits,
) -> usize {
    let mut admitted = 0;
    let mut kv = kv_used;
    for need in waiting_kv_needs {
        if running + admitted >= limits.max_num_seqs {
            break;
        }
        match kv.checked_add(need) {
            Some(total) if total <= limits.kv_tokens => kv = total,
            _ => break,
        }
        admitted += 1;
    }
    admitted
}

/// One sequence: its sizes, its progress and whatever the caller attached (a sink).
#[derive(Debug)]
pub(crate) struct Seq<T> {
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    /// Tokens emitted so far.
    pub generated: u64,
    pub payload: T,
    /// Chained hashes of the prompt's whole prefix-cache blocks (empty: none).
    pub blocks: Vec<u64>,
    /// KV booked while running (0 while waiting).
    pub booked: u64,
    /// Preempted at least once (its readmissions stay out of the prefix-cache
    /// counters, as vLLM keeps them out of its main ones).
    pub preempted: bool,
    /// Prompt tokens the prefix cache answered at admission (None: no cache).
    pub cached: Option<u64>,
}

impl<T> Seq<T> {
    pub(crate) fn new(prompt_tokens: u64, max_tokens: u64, payload: T) -> Self {
        Seq {
            prompt_tokens,
            max_tokens,
            generated: 0,
            payload,
            blocks: Vec::new(),
            cached: None,
            booked: 0,
            preempted: false,
        }
    }

    /// With the prompt's prefix-block hashes.
    pub(crate) fn with_blocks(mut self, blocks: Vec<u64>) -> Self {
        self.blocks = blocks;
        self
    }

    /// KV booked at admission under `policy` (Grow: the prompt, the tokens generated
    /// before a preemption, and the token this step generates).
    fn admit_need(&self, policy: KvPolicy) -> u64 {
        match policy {
            KvPolicy::Reserve => self.kv_need(),
            KvPolicy::Grow => self
                .prompt_tokens
                .saturating_add(self.generated)
                .saturating_add(1),
        }
    }

    /// KV tokens reserved while the sequence runs.
    pub(crate) fn kv_need(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.max_tokens)
    }
}

/// What [`Scheduler::begin_step`] decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepPlan {
    /// Sequences moved from the queue into the batch at this step.
    pub admitted: usize,
    /// Their prompt tokens.
    pub admitted_prompt_tokens: u64,
    /// Tokens prefilled in this step: the admitted prompts (and, after a preemption,
    /// the tokens generated before it, recomputed) less the prefix-cache hits.
    pub prefill_tokens: u64,
    /// Prompt tokens looked up in the prefix cache, and those found.
    pub cache_queries: u64,
    pub cache_hits: u64,
    /// Running sequences preempted (back to the queue) at the start of this step.
    pub preempted: usize,
    /// Sequences in the batch for this step, the admitted included.
    pub running: usize,
    /// Step duration in ms.
    pub duration_ms: f64,
}

/// What [`Scheduler::end_step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StepOutcome {
    /// Tokens handed to live sinks.
    pub tokens: u64,
    /// Sequences that emitted their last token.
    pub finished: usize,
    /// Sequences dropped because their receiver was gone.
    pub dropped: usize,
}

/// The pure scheduling state: FIFO waiting queue, running batch and KV accounting.
#[derive(Debug)]
pub(crate) struct Scheduler<T> {
    limits: Limits,
    waiting: VecDeque<Seq<T>>,
    running: Vec<Seq<T>>,
    kv_used: u64,
    cache: PrefixCache,
}

impl<T> Scheduler<T> {
    pub(crate) fn new(limits: Limits) -> Self {
        Scheduler {
            limits,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            cache: PrefixCache::new(
                limits
                    .kv_tokens
                    .checked_div(limits.prefix_block_tokens)
                    .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            ),
        }
    }

    /// Queue a sequence. Refused (handed back) when it could never run: no output
    /// tokens, or a KV need larger than the whole budget (it would block the queue
    /// head forever).
    pub(crate) fn enqueue(&mut self, seq: Seq<T>) -> Result<(), Seq<T>> {
        if seq.max_tokens == 0 || seq.kv_need() > self.limits.kv_tokens {
            return Err(seq);
        }
        self.waiting.push_back(seq);
        Ok(())
    }

    /// No work at all: the engine loop may go to sleep until a request arrives.
    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }

    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// vLLM's `reset_prefix_cache`: no block is cached any more.
    pub(crate) fn clear_prefix_cache(&mut self) {
        self.cache = PrefixCache::new(self.cache.capacity);
    }

    pub(crate) fn kv_used(&self) -> u64 {
        self.kv_used
    }

    /// The payloads of the last `n` sequences to join the batch (those a
    /// [`Scheduler::begin_step`] that admitted `n` has just added).
    pub(crate) fn newest_running_mut(
        &mut self,
        n: usize,
    ) -> impl Iterator<Item = (&mut T, Option<u64>)> {
        let from = self.running.len().saturating_sub(n);
        self.running[from..]
            .iter_mut()
            .map(|s| (&mut s.payload, s.cached))
    }

    /// Drop waiting sequences for which `keep` is false (e.g. the client went away).
    /// Returns how many were dropped. They hold no KV yet.
    pub(crate) fn retain_waiting(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|s| keep(&s.payload));
        before - self.waiting.len()
    }

    /// Start a step: admit from the queue head (FIFO, within `max_num_seqs` and the KV
    /// budget) and compute the step's duration.
    pub(crate) fn begin_step(&mut self, timing: &Timing) -> StepPlan {
        let policy = self.limits.kv_policy;
        let mut preempted = 0;
        if policy == KvPolicy::Grow {
            // Each running sequence has booked the token this step generates: preempt
            // the newest until that fits (the oldest always fits: enqueue checked it).
            while self.running.len() > 1 && self.kv_used > self.limits.kv_tokens {
                let Some(mut seq) = self.running.pop() else {
                    break;
                };
                self.kv_used -= seq.booked;
                seq.booked = 0;
                seq.preempted = true;
                self.waiting.push_front(seq);
                preempted += 1;
            }
        }
        let n = admissible(
            self.waiting.iter().map(|s| s.admit_need(policy)),
            self.running.len(),
            self.kv_used,
            self.limits,
        );
        let mut admitted_prompt_tokens = 0u64;
        let mut prefill_tokens = 0u64;
        let mut cache_queries = 0u64;
        let mut cache_hits = 0u64;
        let block = self.limits.prefix_block_tokens;
        for mut seq in self.waiting.drain(..n) {
            seq.booked = seq.admit_need(policy);
            self.kv_used += seq.booked;
            admitted_prompt_tokens = admitted_prompt_tokens.saturating_add(seq.prompt_tokens);
            let mut hit = 0;
            if block > 0 {
                let blocks = self.cache.leading_hits(&seq.blocks) as u64;
                // The last prompt token is always computed (it yields the first token).
                hit = blocks
                    .saturating_mul(block)
                    .min(seq.prompt_tokens.saturating_sub(1));
                if !seq.preempted {
                    cache_queries = cache_queries.saturating_add(seq.prompt_tokens);
                    cache_hits += hit;
                    seq.cached = Some(hit);
                }
                self.cache.touch(&seq.blocks);
            }
            prefill_tokens = prefill_tokens
                .saturating_add((seq.prompt_tokens + seq.generated).saturating_sub(hit));
            self.running.push(seq);
        }
        let running = self.running.len();
        StepPlan {
            admitted: n,
            admitted_prompt_tokens,
            prefill_tokens,
            cache_queries,
            cache_hits,
            preempted,
            running,
            duration_ms: step_time_ms(timing, running, prefill_tokens),
        }
    }

    /// End a step: every running sequence emits one token through
    /// `emit(payload, index, last)` (index 0 is the first token; `emit` returns false
    /// when the receiver is gone). Finished and abandoned sequences leave the batch and
    /// free their KV.
    pub(crate) fn end_step(
        &mut self,
        mut emit: impl FnMut(&mut T, u64, bool) -> bool,
    ) -> StepOutcome {
        let mut out = StepOutcome::default();
        let mut freed = 0u64;
        let mut grown = 0u64;
        let grow = self.limits.kv_policy == KvPolicy::Grow;
        self.running.retain_mut(|seq| {
            let index = seq.generated;
            let last = index + 1 >= seq.max_tokens;
            let alive = emit(&mut seq.payload, index, last);
            seq.generated += 1;
            if !alive {
                out.dropped += 1;
                freed += seq.booked;
                return false;
            }
            out.tokens += 1;
            if last {
                out.finished += 1;
                freed += seq.booked;
                return false;
            }
            if grow {
                // Room for the token the next step generates.
                seq.booked += 1;
                grown += 1;
            }
            true
        });
        self.kv_used = self.kv_used - freed + grown;
        out
    }
}

/// Where a sequence's tokens go.
pub(crate) trait TokenSink: Send + 'static {
    /// Deliver token `index` (0-based; `last` on the final one). Returns false when the
    /// receiver is gone, and the engine then drops the sequence and frees its KV.
    fn emit(&mut self, index: u64, last: bool) -> bool;
    /// The receiver is gone (checked for waiting sequences before admission).
    fn is_closed(&self) -> bool;
    /// The sequence joined the batch at `at`, in a step whose first `prefill_ms`
    /// (the prefill of the prompts admitted with it, noise included) were prefill: the
    /// personalities that report server-side timings start their clocks here.
    fn admitted(&mut self, _at: Instant, _prefill_ms: f64) {}
    /// The prefix cache answered `tokens` of the prompt (vLLM reports them in
    /// `usage.prompt_tokens_details.cached_tokens`).
    fn prompt_cached(&mut self, _tokens: u64) {}
}

/// A request handed to the engine.
pub(crate) struct Submission<S> {
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    /// The prompt's prefix-block hashes (empty: no prefix caching).
    pub blocks: Vec<u64>,
    pub sink: S,
}

/// The engine loop. Runs until `shutdown` changes or its sender is dropped, or until
/// every submission sender is gone and the engine is idle.
///
/// The caller counts a submission into `metrics.waiting` before sending it; this loop
/// takes it out again at admission or when the request is dropped. `noise` stretches or
/// shrinks each step's contract time (see [`Noise`]); off, it leaves it as it is.
pub(crate) async fn run<S: TokenSink>(
    timing: Timing,
    limits: Limits,
    mut noise: Noise,
    mut rx: mpsc::UnboundedReceiver<Submission<S>>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<()>,
) {
    let mut sched: Scheduler<S> = Scheduler::new(limits);
    let mut timer = PreciseTimer::new();
    // Absolute schedule: `origin` is when the current busy period began and `elapsed_ms`
    // the summed step times since. Each step sleeps until `origin + elapsed_ms`, so a
    // late wake-up (~0.1 ms; a busy machine can make it more) shortens the next sleep
    // instead of adding up over hundreds of steps.
    let mut origin = Instant::now();
    let mut elapsed_ms = 0.0f64;
    let mut resets_seen = metrics.cache_resets.load(Ordering::Relaxed);
    // SGLang's `gen_throughput`: tokens over the wall time of the last
    // GEN_THROUGHPUT_STEPS decode steps.
    let mut window_start = Instant::now();
    let mut window_tokens = 0u64;
    let mut window_steps = 0u32;

    loop {
        if sched.is_idle() {
            // Idle: block until a request arrives; it starts a step at once.
            let sub = tokio::select! {
                sub = rx.recv() => sub,
                _ = shutdown.changed() => return,
            };
            let Some(sub) = sub else { return };
            accept(&mut sched, sub, &metrics);
            origin = Instant::now();
            elapsed_ms = 0.0;
            // Idle time is no decode time: a window starts with the work.
            window_start = origin;
            window_tokens = 0;
            window_steps = 0;
        }
        // Requests that arrived during the previous step join at this boundary.
        while let Ok(sub) = rx.try_recv() {
            accept(&mut sched, sub, &metrics);
        }
        // A reset asked for over HTTP: the cache is empty for what follows.
        let resets = metrics.cache_resets.load(Ordering::Relaxed);
        if resets != resets_seen {
            resets_seen = resets;
            sched.clear_prefix_cache();
        }
        let gone = sched.retain_waiting(|sink| !sink.is_closed());
        metrics.waiting.fetch_sub(gone as u64, Ordering::Relaxed);

        let plan = sched.begin_step(&timing);
        metrics
            .waiting
            .fetch_add(plan.preempted as u64, Ordering::Relaxed);
        metrics
            .waiting
            .fetch_sub(plan.admitted as u64, Ordering::Relaxed);
        metrics
            .preemptions
            .fetch_add(plan.preempted as u64, Ordering::Relaxed);
        metrics
            .prefix_cache_queries
            .fetch_add(plan.cache_queries, Ordering::Relaxed);
        metrics
            .prefix_cache_hits
            .fetch_add(plan.cache_hits, Ordering::Relaxed);
        if plan.cache_queries > 0 {
            store_f64(
                &metrics.cache_hit_rate_bits,
                plan.cache_hits as f64 / plan.cache_queries as f64,
            );
        }
        metrics
            .prompt_tokens
            .fetch_add(plan.admitted_prompt_tokens, Ordering::Relaxed);
        metrics
            .running
            .store(plan.running as u64, Ordering::Relaxed);
        metrics.kv_used.store(sched.kv_used(), Ordering::Relaxed);
        if plan.running == 0 {
            // Only reachable when everything waiting was dropped just now.
            continue;
        }

        let step_ms = noise.step_ms(plan.duration_ms.max(0.0));
        if plan.admitted > 0 {
            // The prefill's share of this (possibly noisy) step.
            let nominal_prefill =
                step_time_ms(&timing, 0, plan.prefill_tokens) - step_time_ms(&timing, 0, 0);
            let prefill_ms = if plan.duration_ms > 0.0 {
                step_ms * (nominal_prefill / plan.duration_ms)
            } else {
                0.0
            };
            let at = Instant::now();
            for (sink, cached) in sched.newest_running_mut(plan.admitted) {
                sink.admitted(at, prefill_ms);
                if let Some(tokens) = cached {
                    sink.prompt_cached(tokens);
                }
            }
        }
        elapsed_ms += step_ms;
        let deadline = origin + Duration::from_secs_f64(elapsed_ms / 1000.0);
        if deadline > Instant::now() {
            tokio::select! {
                _ = timer.sleep_until(deadline) => {}
                _ = shutdown.changed() => return,
            }
        } else {
            // Zero step time, or behind schedule: run the step now, but let the other
            // tasks (the HTTP connections, a client sharing the runtime) run first, or
            // a zero-time engine would starve them. This also paces a zero-time engine
            // to what the HTTP side can write: about one step per turn of the runtime,
            // instead of queueing up tokens no one can send yet.
            tokio::task::yield_now().await;
        }

        let out = sched.end_step(|sink, index, last| sink.emit(index, last));
        metrics
            .generation_tokens
            .fetch_add(out.tokens, Ordering::Relaxed);
        window_tokens += out.tokens;
        window_steps += 1;
        if window_steps >= GEN_THROUGHPUT_STEPS {
            let now = Instant::now();
            let secs = now.saturating_duration_since(window_start).as_secs_f64();
            if secs > 0.0 {
                store_f64(&metrics.gen_throughput_bits, window_tokens as f64 / secs);
            }
            window_start = now;
            window_tokens = 0;
            window_steps = 0;
        }
        metrics
            .running
            .store(sched.running() as u64, Ordering::Relaxed);
        metrics.kv_used.store(sched.kv_used(), Ordering::Relaxed);
    }
}

/// Queue a submission, or drop it (closing its stream) when it could never run.
fn accept<S: TokenSink>(sched: &mut Scheduler<S>, sub: Submission<S>, metrics: &Metrics) {
    let seq = Seq::new(sub.prompt_tokens, sub.max_tokens, sub.sink).with_blocks(sub.blocks);
    if sched.enqueue(seq).is_err() {
        // The HTTP layer rejects these with a 400 first; this is only a guard against
        // a request that would block the queue head forever.
        metrics.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
