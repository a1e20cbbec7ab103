//! `Generator`: a decoder model with its own KV cache, writing text from a prompt or a
//! conversation — all at once ([`Generator::complete`]), piece by piece as an iterator
//! ([`Generator::stream`]), or with a callback and the run's figures
//! ([`Generator::generate`]).
//!
//! ```no_run
//! let mut gen = lucent::Generator::open("smollm2")?;
//! let text = gen.complete("The capital of France is", &lucent::Sampling::greedy().max_tokens(16))?;
//! for piece in gen.stream("Once upon a time", &lucent::Sampling::default())? {
//!     print!("{}", piece?);
//! }
//! # Ok::<(), lucent::Error>(())
//! ```
//!
//! Every decoder lucent runs goes through here and through the one loop of
//! [`crate::pipeline::generate`]: a GGUF model, a Hugging Face GPT-2 folder, a model you
//! trained. The cache grows as a conversation does (up to the model's context), so a
//! short prompt never pays for the longest one.

use std::sync::Arc;

use crate::io::tokenizer::Tokenizer;
use crate::nn::KvCache;
use crate::pipeline::chat::Message;
use crate::pipeline::generate::{
    continue_generation, shift_context, Decoding, Generation, Sampling, StopReason, TextModel,
    TokenLogprob,
};
use crate::{Error, Result};

/// A decoder model that writes text, owning the KV cache of its current sequence.
pub struct Generator {
    model: Arc<TextModel>,
    cache: KvCache,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("model", &self.model)
            .field("cached", &self.cache.len())
            .finish()
    }
}

impl Generator {
    /// Open a decoder model by name (`smollm2`, `gemma3`) or path (a `.gguf` file, a
    /// training run's folder, a Hugging Face GPT-2 folder), fetching a known one on
    /// first use.
    pub fn open(spec: &str) -> Result<Generator> {
        crate::api::open(spec)?.generator()
    }

    /// A generator over an already loaded model (models are shared: each generator has
    /// its own cache).
    pub fn new(model: Arc<TextModel>) -> Generator {
        let cache = model.new_cache(1);
        Generator { model, cache }
    }

    /// The model.
    pub fn model(&self) -> &Arc<TextModel> {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.model.tokenizer.as_ref()
    }

    /// Positions held in the KV cache (the conversation so far).
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Forget the conversation.
    pub fn reset(&mut self) {
        self.cache.clear();
    }

    /// Keep only the first `len` positions of the conversation (to rewind it).
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
    }

    /// Ids of a raw prompt (special-token text parsed, BOS as the model wants).
    pub fn encode(&self, prompt: &str) -> Result<Vec<u32>> {
        self.model.encode(prompt)
    }

    /// Ids of a conversation through the model's chat template.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.model.encode_chat(messages)
    }

    /// Continue a raw prompt; returns the new text.
    pub fn complete(&mut self, prompt: &str, sampling: &Sampling) -> Result<String> {
        let ids = self.encode(prompt)?;
        Ok(self.generate(&ids, sampling, &mut |_| {})?.text)
    }

    /// The assistant's reply to a conversation (through the chat template).
    pub fn chat(&mut self, messages: &[Message], sampling: &Sampling) -> Result<String> {
        let ids = self.encode_chat(messages)?;
        Ok(self.generate(&ids, sampling, &mut |_| {})?.text)
    }

    /// Continue a raw prompt, piece by piece: an iterator of text pieces, each whole
    /// characters, none part of a stop string.
    pub fn stream(&mut self, prompt: &str, sampling: &Sampling) -> Result<Stream<'_>> {
        let ids = self.encode(prompt)?;
        self.stream_ids(&ids, sampling)
    }

    /// The reply to a conversation, piece by piece.
    pub fn stream_chat(&mut self, messages: &[Message], sampling: &Sampling) -> Result<Stream<'_>> {
        let ids = self.encode_chat(messages)?;
        self.stream_ids(&ids, sampling)
    }

    /// Generate after `prompt_ids` from an empty cache; `on_text` gets the text as it
    /// becomes final. The result has the ids, the text, why it stopped and the timings.
    pub fn generate(
        &mut self,
        prompt_ids: &[u32],
        sampling: &Sampling,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        self.cache.clear();
        self.continue_with(prompt_ids, sampling, on_text)
    }

    /// Generate after what the cache holds followed by `new_ids` (the next turn of a
    /// conversation: the cache keeps every turn, so only the new ids are prefilled).
    pub fn continue_with(
        &mut self,
        new_ids: &[u32],
        sampling: &Sampling,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        self.make_room(new_ids.len(), sampling.max_tokens)?;
        continue_generation(&self.model, new_ids, sampling, &mut self.cache, on_text)
    }

    /// [`Generator::stream`] from prompt ids (the cache is emptied first).
    pub fn stream_ids(&mut self, prompt_ids: &[u32], sampling: &Sampling) -> Result<Stream<'_>> {
        self.cache.clear();
        self.stream_continue(prompt_ids, sampling)
    }

    /// [`Generator::continue_with`] piece by piece: after what the cache holds followed
    /// by `new_ids`. Dropping the stream early (a reply stopped by the person) leaves the
    /// cache holding the prompt and every token fed so far ([`Generator::cached`]).
    pub fn stream_continue(&mut self, new_ids: &[u32], sampling: &Sampling) -> Result<Stream<'_>> {
        self.make_room(new_ids.len(), sampling.max_tokens)?;
        let decoding = self.model.decoding(new_ids, sampling)?;
        let row = self
            .model
            .model
            .forward(new_ids, Some(&mut self.cache), true, None)?
            .into_vec(); // (V)
        Ok(Stream {
            gen: self,
            decoding,
            row,
            feed: None,
            done: false,
            context_shift: sampling.context_shift,
        })
    }

    /// Grow the cache to hold what it has, `new` more prompt ids and `max_tokens` more
    /// tokens, up to the model's context; errors if the prompt alone does not fit.
    fn make_room(&mut self, new: usize, max_tokens: usize) -> Result<()> {
        let context = self.model.model.config.max_positions;
        let have = self.cache.len();
        if have + new > context {
            return Err(Error::Argument(format!(
                "the prompt has {new} tokens ({have} already in context) but the model's context holds {context}; \
                 shorten the prompt (or start a new conversation)"
            )));
        }
        let want = (have + new + max_tokens + 1).min(context);
        if want > self.cache.capacity() {
            self.cache.grow(want)?;
        }
        Ok(())
    }

    /// The positions the cache can hold now.
    fn capacity(&self) -> usize {
        self.cache
            .capacity()
            .min(self.model.model.config.max_positions)
    }
}

/// Text pieces of a generation as they are produced ([`Generator::stream`]).
pub struct Stream<'g> {
    gen: &'g mut Generator,
    decoding: Decoding,
    /// The logits of the next position.
    row: Vec<f32>,
    /// A token to run through the model before the next step.
    feed: Option<u32>,
    done: bool,
    context_shift: bool,
}

impl Stream<'_> {
    /// Why the generation ended (None while it runs).
    pub fn stop_reason(&self) -> Option<&StopReason> {
        self.decoding.stop_reason()
    }

    /// The new ids so far.
    pub fn ids(&self) -> &[u32] {
        self.decoding.ids()
    }

    /// Each new token's log-probability so far, if [`Sampling::logprobs`] asked for them.
    pub fn logprobs(&self) -> &[TokenLogprob] {
        self.decoding.logprobs()
    }

    /// One step: feed the last token, sample the next; the text that became final.
    fn step(&mut self) -> Result<String> {
        let tok = self.gen.model.tokenizer.clone();
        if let Some(id) = self.feed.take() {
            let capacity = self.gen.capacity();
            if self.gen.cache.len() >= capacity {
                if !self.context_shift || capacity < 2 {
                    self.done = true;
                    return self
                        .decoding
                        .end(tok.as_ref(), StopReason::ContextFull(capacity));
                }
                self.row = shift_context(
                    &self.gen.model.model,
                    &mut self.gen.cache,
                    self.decoding.history(),
                    capacity,
                )?;
            } else {
                self.row = self
                    .gen
                    .model
                    .model
                    .forward(&[id], Some(&mut self.gen.cache), true, None)?
                    .into_vec(); // (V)
            }
        }
        let step = self.decoding.next(tok.as_ref(), &mut self.row)?;
        match (step.token, &step.stop) {
            (Some(id), None) => self.feed = Some(id),
            _ => self.done = true,
        }
        Ok(step.text)
    }
}

impl Iterator for Stream<'_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        while !self.done {
            match self.step() {
                Ok(text) if text.is_empty() => continue,
                Ok(text) => return Some(Ok(text)),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
