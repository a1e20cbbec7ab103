//! The engine of one decoder model: continuous batching on a scheduler thread of its
//! own (model compute never runs on tokio's threads).
//!
//! The engine has `--parallel` slots, each with a KV cache of `--ctx-size` positions,
//! allocated once. Requests wait in a bounded queue (`--max-queue`; a request that
//! finds every slot busy and the queue full is refused at once with 429). The
//! scheduler loops over steps:
//!
//! 1. **Admit**: waiting requests take free slots, in arrival order.
//! 2. **Drop**: a request whose client has gone (its event channel closed) or whose
//!    deadline has passed leaves its slot, which is free at the next step.
//! 3. **Decode**: the pending token of every slot that is generating goes through
//!    [`DecoderModel::decode_batch`] as one batch, so each quantised weight is read
//!    once per step for all of them; each row is computed exactly as that token alone
//!    would be, so a request's logits do not depend on what else runs (batch
//!    invariance). Each slot's [`Decoding`] turns its row into a token, text and a
//!    stop decision.
//! 4. **Prefill**: slots still reading their prompt run their next piece
//!    ([`prompt_chunks`], about `--prefill-chunk` tokens, cut so that the logits equal
//!    the whole prompt's), oldest first, up to that many prompt tokens per step; a long
//!    prompt therefore holds the others' decode steps up for one piece at a time.
//!    After its last piece a slot samples its first token and joins the decode batch.
//!
//! A prompt's prefill is the same call `lucent generate` makes (the same pieces'
//! arithmetic), so at temperature 0 the tokens equal `lucent generate`'s and
//! llama.cpp's.
//!
//! **The prompt cache** ([`PromptCache`], `--cache-ram`), shared by every slot: at
//! admission the longest run of the prompt's blocks that any earlier request computed
//! is copied into the slot's cache and the prefill's pieces are cut from the first
//! uncached position (the same cut rules, so the logits are the same bits); after each
//! piece, the whole blocks it completed are kept. Requests that see inside or
//! intervene neither take nor keep blocks (their passes record or change every
//! position).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use lucent::nn::{Edit, KvCache, Trace};
use lucent::pipeline::generate::{
    prompt_chunks, Decoding, Sampling, StopReason, TextModel, TokenLogprob,
};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;
use crate::inside::{InsideSpec, PromptView};
use crate::metrics::ModelMetrics;
use crate::prompt_cache::{usable_blocks, PromptCache, BLOCK};

/// How an engine runs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Slots: sequences generated at once.
    pub slots: usize,
    /// Positions of each slot's KV cache (prompt + generated tokens).
    pub ctx: usize,
    /// Requests that may wait for a slot.
    pub max_queue: usize,
    /// About this many prompt tokens per prefill piece and per step.
    pub prefill_chunk: usize,
    /// Most bytes of the prompt cache shared by the slots (0: no cache).
    pub cache_ram: usize,
}

/// One generation to run: a prompt's ids and how to continue it.
pub struct Job {
    /// The prompt's ids.
    pub prompt: Arc<Vec<u32>>,
    /// Sampling and stopping (its `max_tokens` already capped to the slot's context).
    pub sampling: Sampling,
    /// What to show of the computation, if asked.
    pub inside: Option<Arc<InsideSpec>>,
    /// The request's interventions as whole-sequence edits (cut to each pass's
    /// positions when it runs), if any.
    pub edits: Option<Arc<Vec<Edit>>>,
    /// Which choice of its request this is (the tag of its events).
    pub index: usize,
    /// Where the engine reports, tagged with `index`; the request is cancelled when
    /// the receiver is gone.
    pub events: UnboundedSender<(usize, Event)>,
    /// When the request arrived (for time to first token).
    pub arrived: Instant,
    /// When the request must be done.
    pub deadline: Instant,
}

impl Job {
    /// Report `event` (dropped if the client has gone: the next step frees the slot).
    fn send(&self, event: Event) {
        let _ = self.events.send((self.index, event));
    }
}

/// What the engine reports about a job, in order: `Prompt`, then `Step`s, then `Done`
/// (or `Failed` at any point).
#[derive(Debug)]
pub enum Event {
    /// The prompt has been read; what was asked to be shown of its pass.
    Prompt {
        /// The prompt's inside view (`None` unless asked).
        inside: Option<serde_json::Value>,
    },
    /// One step of generation.
    Step {
        /// The token chosen (None at a step that ended without a token).
        token: Option<u32>,
        /// Text that became final.
        text: String,
        /// The token's log-probability and the top alternatives, if asked.
        logprob: Option<TokenLogprob>,
        /// What was asked to be shown of the pass whose logits gave this token.
        inside: Option<serde_json::Value>,
    },
    /// The generation ended.
    Done {
        /// Why: OpenAI's `finish_reason` (`stop`, `length`).
        finish_reason: &'static str,
        /// The prompt's tokens.
        prompt_tokens: usize,
        /// Tokens generated.
        completion_tokens: usize,
        /// Prompt tokens taken from the prompt cache (OpenAI's
        /// `usage.prompt_tokens_details.cached_tokens`).
        cached_tokens: usize,
    },
    /// The generation failed (the error to answer with).
    Failed(ApiError),
}

/// The queue and the figures the HTTP side reads.
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Slots generating or prefilling now.
    busy: AtomicUsize,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// No new jobs; the thread ends when the last slot is done.
    closed: bool,
}

/// A decoder model's engine: its queue, and the thread that runs its slots.
pub struct Engine {
    name: String,
    model: Arc<TextModel>,
    config: EngineConfig,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish()
    }
}

/// Bytes of one cached position of `model` (keys and values of every layer, f32).
pub fn kv_bytes_per_position(model: &TextModel) -> usize {
    let c = &model.model.config;
    c.decoder_layers * 2 * c.n_kv_heads * c.head_dim * std::mem::size_of::<f32>()
}

impl Engine {
    /// Start the engine of `model` (named `name` in requests): allocates the slots' KV
    /// caches and starts the scheduler thread.
    pub fn start(
        name: &str,
        model: Arc<TextModel>,
        config: EngineConfig,
        metrics: ModelMetrics,
    ) -> lucent::Result<Arc<Engine>> {
        if config.slots == 0 || config.ctx == 0 {
            return Err(lucent::Error::Argument(format!(
                "--parallel and --ctx-size must be at least 1 (got {} and {})",
                config.slots, config.ctx
            )));
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            wake: Condvar::new(),
            busy: AtomicUsize::new(0),
        });
        let slots: Vec<Slot> = (0..config.slots)
            .map(|_| Slot {
                cache: model.new_cache(config.ctx),
                active: None,
            })
            .collect();
        metrics.slots.set(config.slots as i64);
        metrics
            .kv_capacity_bytes
            .set((config.slots * config.ctx * kv_bytes_per_position(&model)) as i64);
        metrics
            .prompt_cache
            .capacity_bytes
            .set(config.cache_ram as i64);
        let scheduler = Scheduler {
            model: model.clone(),
            prompt_cache: PromptCache::new(config.cache_ram),
            config: config.clone(),
            shared: shared.clone(),
            metrics,
            slots,
        };
        let thread = std::thread::Builder::new()
            .name(format!("lucent-engine-{name}"))
            .spawn(move || scheduler.run())
            .map_err(|e| lucent::Error::Argument(format!("cannot start the engine thread: {e}")))?;
        Ok(Arc::new(Engine {
            name: name.to_string(),
            model,
            config,
            shared,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// The model.
    pub fn model(&self) -> &Arc<TextModel> {
        &self.model
    }

    /// How it runs.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Queue `jobs` (the `n` choices of one request) together, or refuse them all: 429
    /// when the slots and the queue cannot take them, 503 once the engine is closed.
    pub fn submit(&self, jobs: Vec<Job>) -> Result<(), ApiError> {
        let mut q = lock(&self.shared.queue);
        if q.closed {
            return Err(ApiError::unavailable(
                "the server is shutting down and takes no new requests; retry on another replica",
            ));
        }
        let busy = self.shared.busy.load(Ordering::Relaxed);
        let room = self.config.slots + self.config.max_queue;
        if busy + q.jobs.len() + jobs.len() > room {
            if jobs.len() > room {
                return Err(ApiError::invalid_param(
                    "n",
                    format!(
                        "n = {} choices cannot fit this server's {} slots and {} queue places",
                        jobs.len(),
                        self.config.slots,
                        self.config.max_queue
                    ),
                ));
            }
            let retry = 1 + (q.jobs.len() / self.config.slots) as u64;
            return Err(ApiError::overloaded(
                &self.name,
                self.config.slots,
                q.jobs.len(),
                retry,
            ));
        }
        q.jobs.extend(jobs);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Take no new jobs; the thread ends once the queued and running ones are done.
    pub fn close(&self) {
        lock(&self.shared.queue).closed = true;
        self.shared.wake.notify_all();
    }

    /// Wait for the thread to end (after [`Engine::close`]).
    pub fn join(&self) {
        let handle = lock(&self.thread).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// Lock a mutex, also after a panic on another thread (the data stays usable: every
/// critical section here leaves it consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A slot: a KV cache, and the job it runs, if any.
struct Slot {
    cache: KvCache,
    active: Option<Active>,
}

/// A job in a slot.
struct Active {
    job: Job,
    decoding: Decoding,
    /// Prompt pieces, and how many have been run.
    chunks: Vec<std::ops::Range<usize>>,
    done_chunks: usize,
    /// The token to feed at the next decode step (None while prefilling).
    next: Option<u32>,
    /// The recorder of the current pass, when the request wants to see inside.
    trace: Option<Trace>,
    /// The prompt's view being assembled, piece by piece.
    prompt_view: Option<PromptView>,
    /// When the last token went out.
    last_token: Option<Instant>,
    /// Whether its prompt takes and keeps prompt-cache blocks.
    cacheable: bool,
    /// Prompt tokens taken from the prompt cache.
    cached_tokens: usize,
    /// The prompt's leading whole blocks that are in the prompt cache already (taken
    /// or kept); the next piece keeps those it completes after them.
    blocks_kept: usize,
}

struct Scheduler {
    model: Arc<TextModel>,
    /// The prompt blocks every slot shares (only this thread touches it).
    prompt_cache: PromptCache,
    config: EngineConfig,
    shared: Arc<Shared>,
    metrics: ModelMetrics,
    slots: Vec<Slot>,
}

impl Scheduler {
    fn run(mut self) {
        loop {
            if !self.admit() {
                return;
            }
            self.drop_gone();
            self.decode();
            self.prefill();
            self.report();
        }
    }

    /// Move waiting jobs into free slots; wait while there is nothing to do. False when
    /// the engine is closed and idle (the thread ends).
    fn admit(&mut self) -> bool {
        let shared = self.shared.clone();
        let mut q = lock(&shared.queue);
        loop {
            while let Some(i) = self.slots.iter().position(|s| s.active.is_none()) {
                let Some(job) = q.jobs.pop_front() else { break };
                if job.events.is_closed() {
                    self.metrics.cancelled.inc();
                    continue;
                }
                if Instant::now() >= job.deadline {
                    self.metrics.timed_out.inc();
                    let secs = job.deadline.duration_since(job.arrived).as_secs_f64();
                    job.send(Event::Failed(ApiError::timeout(secs)));
                    continue;
                }
                self.start(i, job);
            }
            let busy = self.slots.iter().filter(|s| s.active.is_some()).count();
            self.shared.busy.store(busy, Ordering::Relaxed);
            self.metrics.queue_depth.set(q.jobs.len() as i64);
            self.metrics.busy_slots.set(busy as i64);
            if busy > 0 {
                return true;
            }
            if q.closed {
                return false;
            }
            self.report();
            q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Put `job` into slot `i`.
    fn start(&mut self, i: usize, job: Job) {
        // A constraint compiles against the model's vocabulary once: the request's check
        // (when it was planned) compiled it, and this takes a copy of that grammar's
        // start state from the vocabulary's cache (constrain::GRAMMAR_CACHE).
        let decoding = match self.model.decoding(&job.prompt, &job.sampling) {
            Ok(d) => d,
            Err(e) => {
                job.send(Event::Failed(e.into()));
                return;
            }
        };
        let slot = &mut self.slots[i];
        slot.cache.clear();
        let cacheable = self.prompt_cache.is_on() && job.inside.is_none() && job.edits.is_none();
        let t = job.prompt.len();
        let blocks = if cacheable {
            self.prompt_cache
                .take(&job.prompt, usable_blocks(t), &mut slot.cache)
        } else {
            0
        };
        // The rest of the prompt, cut from the first uncached position (a multiple of
        // 4, leaving at least MIN_PROMPT_CHUNK tokens): the same rules as a whole
        // prefill's cuts, so the same bits.
        let cached_tokens = blocks * BLOCK;
        let chunks = prompt_chunks(t - cached_tokens, self.config.prefill_chunk)
            .into_iter()
            .map(|r| r.start + cached_tokens..r.end + cached_tokens)
            .collect();
        // A request with interventions always runs traced: its trace carries the edits
        // (and records nothing unless the request also asks to see inside).
        let trace = match (&job.inside, &job.edits) {
            (Some(s), _) => Some(Trace::with_filter(s.filter())),
            (None, Some(_)) => Some(Trace::only(&[])),
            (None, None) => None,
        };
        let prompt_view = job
            .inside
            .as_ref()
            .map(|s| PromptView::new(s.clone(), &self.model, &job.prompt));
        slot.active = Some(Active {
            chunks,
            cacheable,
            cached_tokens,
            blocks_kept: blocks,
            done_chunks: 0,
            next: None,
            trace,
            prompt_view,
            last_token: None,
            decoding,
            job,
        });
    }

    /// Free the slots of jobs whose client has gone or whose time is up.
    fn drop_gone(&mut self) {
        let now = Instant::now();
        for slot in &mut self.slots {
            let Some(a) = &slot.active else { continue };
            if a.job.events.is_closed() {
                self.metrics.cancelled.inc();
                slot.active = None;
            } else if now >= a.job.deadline {
                self.metrics.timed_out.inc();
                let secs = a.job.deadline.duration_since(a.job.arrived).as_secs_f64();
                a.job.send(Event::Failed(ApiError::timeout(secs)));
                slot.active = None;
            }
        }
    }

    /// One decode step for every slot with a token to feed.
    fn decode(&mut self) {
        let tok = self.model.tokenizer.clone();
        // A slot whose cache is full ends here (its context is used up).
        for slot in &mut self.slots {
            let full = slot.cache.len() >= slot.cache.capacity();
            if let Some(a) = slot.active.as_mut().filter(|a| a.next.is_some() && full) {
                let cap = slot.cache.capacity();
                let text = a
                    .decoding
                    .end(tok.as_ref(), StopReason::ContextFull(cap))
                    .unwrap_or_default();
                if !text.is_empty() {
                    a.job.send(Event::Step {
                        token: None,
                        text,
                        logprob: None,
                        inside: None,
                    });
                }
                finish(a);
                slot.active = None;
            }
        }
        self.cut_edits_for_decode();
        let mut ids = Vec::new();
        let mut caches: Vec<&mut KvCache> = Vec::new();
        let mut traces: Vec<Option<&mut Trace>> = Vec::new();
        let mut which = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Slot { cache, active } = slot;
            if let Some(a) = active.as_mut() {
                if let Some(next) = a.next {
                    ids.push(next);
                    caches.push(cache);
                    traces.push(a.trace.as_mut());
                    which.push(i);
                }
            }
        }
        if ids.is_empty() {
            return;
        }
        self.metrics.batch_size.observe(ids.len() as f64);
        let traced = traces.iter().any(Option::is_some);
        let result = if traced {
            self.model
                .model
                .decode_batch(&ids, &mut caches, &mut traces)
        } else {
            self.model.model.decode_batch(&ids, &mut caches, &mut [])
        };
        drop((caches, traces));
        let logits = match result {
            Ok(l) => l.into_vec(), // (n, V)
            Err(e) => {
                for &i in &which {
                    if let Some(a) = self.slots[i].active.take() {
                        a.job.send(Event::Failed(ApiError::internal(format!(
                            "the decode step failed: {e}"
                        ))));
                    }
                }
                return;
            }
        };
        let v = logits.len() / which.len();
        let mut logits = logits;
        for (r, &i) in which.iter().enumerate() {
            let row = &mut logits[r * v..(r + 1) * v];
            let slot = &mut self.slots[i];
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            let inside = match (&a.job.inside, a.trace.as_mut()) {
                (Some(spec), Some(tr)) => {
                    let view = spec.step_view(tr);
                    tr.clear();
                    Some(view)
                }
                _ => None,
            };
            if self.sample(i, row, inside) {
                self.slots[i].active = None;
            }
        }
    }

    /// Give each generating slot with interventions its edits for this decode step (the
    /// position its cache reaches); a slot whose edits cannot be cut fails.
    fn cut_edits_for_decode(&mut self) {
        for slot in &mut self.slots {
            let Slot { cache, active } = slot;
            let Some(a) = active.as_mut().filter(|a| a.next.is_some()) else {
                continue;
            };
            let (Some(edits), Some(tr)) = (&a.job.edits, a.trace.as_mut()) else {
                continue;
            };
            match lucent::edits_for_positions(edits, cache.len(), 1) {
                Ok(cut) => set_edits(tr, cut),
                Err(e) => {
                    a.job.send(Event::Failed(e.into()));
                    *active = None;
                }
            }
        }
    }

    /// Sample slot `i`'s next token from `row` and report it; true when its
    /// generation has ended.
    fn sample(&mut self, i: usize, row: &mut [f32], inside: Option<serde_json::Value>) -> bool {
        let tok = self.model.tokenizer.clone();
        let Some(a) = self.slots[i].active.as_mut() else {
            return true;
        };
        let step = match a.decoding.next(tok.as_ref(), row) {
            Ok(s) => s,
            Err(e) => {
                a.job.send(Event::Failed(e.into()));
                return true;
            }
        };
        let now = Instant::now();
        if step.token.is_some() {
            match a.last_token {
                None => self
                    .metrics
                    .ttft
                    .observe(now.duration_since(a.job.arrived).as_secs_f64()),
                Some(t) => self
                    .metrics
                    .itl
                    .observe(now.duration_since(t).as_secs_f64()),
            }
            a.last_token = Some(now);
            self.metrics.generated_tokens.inc();
        }
        a.job.send(Event::Step {
            token: step.token,
            text: step.text,
            logprob: step.logprob,
            inside,
        });
        match (step.token, step.stop) {
            (Some(id), None) => {
                a.next = Some(id);
                false
            }
            _ => {
                finish(a);
                true
            }
        }
    }

    /// Run prompt pieces, oldest request first, up to about one piece's worth of
    /// tokens (at least one piece).
    fn prefill(&mut self) {
        let mut budget = self.config.prefill_chunk.max(1) as isize;
        loop {
            let pick = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    s.active
                        .as_ref()
                        .filter(|a| a.next.is_none())
                        .map(|a| (i, a.job.arrived))
                })
                .min_by_key(|&(_, t)| t)
                .map(|(i, _)| i);
            let Some(i) = pick else { return };
            if budget <= 0 {
                return;
            }
            budget -= self.prefill_piece(i) as isize;
        }
    }

    /// Run slot `i`'s next prompt piece; the number of tokens it read.
    fn prefill_piece(&mut self, i: usize) -> usize {
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else {
            return 0;
        };
        let range = a.chunks[a.done_chunks].clone();
        let len = range.len();
        // With interventions, this piece's edits; the pass computes every row's logits
        // (an edit may select any of its positions, the last layer's included) and the
        // last row is kept.
        let edited = match (&a.job.edits, a.trace.as_mut()) {
            (Some(edits), Some(tr)) => match lucent::edits_for_positions(edits, range.start, len) {
                Ok(cut) => {
                    set_edits(tr, cut);
                    true
                }
                Err(e) => {
                    a.job.send(Event::Failed(e.into()));
                    slot.active = None;
                    return len;
                }
            },
            _ => false,
        };
        let result = self.model.model.forward(
            &a.job.prompt[range.clone()],
            Some(&mut slot.cache),
            !edited,
            a.trace.as_mut(),
        );
        let row = match result {
            Ok(l) if edited => {
                let v = l.shape().last().copied().unwrap_or(0);
                let mut all = l.into_vec(); // (t, V)
                all.split_off(all.len() - v) // (V)
            }
            Ok(l) => l.into_vec(), // (V)
            Err(e) => {
                a.job.send(Event::Failed(e.into()));
                slot.active = None;
                return len;
            }
        };
        if let (Some(view), Some(tr)) = (a.prompt_view.as_mut(), a.trace.as_mut()) {
            view.add_piece(range.start, tr);
            tr.clear();
        }
        a.done_chunks += 1;
        if a.cacheable {
            // Keep the whole blocks this piece completed (a failure only means they are
            // not kept).
            let done = range.end / BLOCK;
            if done > a.blocks_kept {
                let _ = self
                    .prompt_cache
                    .insert(&a.job.prompt, a.blocks_kept, done, &slot.cache);
                a.blocks_kept = done;
            }
        }
        if a.done_chunks < a.chunks.len() {
            return len;
        }
        self.metrics.prompt_tokens.inc_by(a.job.prompt.len() as u64);
        let pc = &self.metrics.prompt_cache;
        pc.cached_tokens.inc_by(a.cached_tokens as u64);
        pc.computed_tokens
            .inc_by((a.job.prompt.len() - a.cached_tokens) as u64);
        let view = a.prompt_view.take();
        let first_inside = view.as_ref().map(PromptView::last_row_view);
        a.job.send(Event::Prompt {
            inside: view.map(PromptView::into_json),
        });
        let mut row = row;
        if self.sample(i, &mut row, first_inside) {
            self.slots[i].active = None;
        }
        len
    }

    /// Publish the KV-cache figures.
    fn report(&self) {
        let per = kv_bytes_per_position(&self.model);
        let used: usize = self
            .slots
            .iter()
            .filter(|s| s.active.is_some())
            .map(|s| s.cache.len() * per)
            .sum();
        self.metrics.kv_used_bytes.set(used as i64);
        let busy = self.slots.iter().filter(|s| s.active.is_some()).count();
        self.metrics.busy_slots.set(busy as i64);
        self.shared.busy.store(busy, Ordering::Relaxed);
        let pc = &self.metrics.prompt_cache;
        pc.bytes.set(self.prompt_cache.bytes() as i64);
        pc.blocks.set(self.prompt_cache.len() as i64);
    }
}

/// Make `edits` the ones `trace` writes (its filter and records kept).
fn set_edits(trace: &mut Trace, edits: Vec<Edit>) {
    *trace = std::mem::take(trace).with_edits(edits);
}

/// Report the end of `a`'s generation.
fn finish(a: &Active) {
    let reason = a
        .decoding
        .stop_reason()
        .map_or("length", StopReason::finish_reason);
    a.job.send(Event::Done {
        finish_reason: reason,
        prompt_tokens: a.job.prompt.len(),
        completion_tokens: a.decoding.ids().len(),
        cached_tokens: a.cached_tokens,
    });
}
