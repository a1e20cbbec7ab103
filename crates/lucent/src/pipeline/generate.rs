//! Text generation with a decoder-only model: prefill, then decode token by token
//! through a KV cache, sampling each next token from the logits.
//!
//! 1. **Prefill**: the prompt's ids go through the model at once; every layer's keys
//!    and values land in the preallocated [`KvCache`]; the logits of the last position
//!    give the first new token.
//! 2. **Decode**: each new token alone goes through the model (t = 1), attending over
//!    the cache; its logits give the next token. One step reads every weight once.
//! 3. **Sampling** ([`Sampler`], configured by [`Sampling`]), applied to the logits z in
//!    this order (llama.cpp's):
//!    - logit bias (OpenAI's `logit_bias`): z ← z + b for the listed tokens; b = -100
//!      bans the token (z ← -∞);
//!    - the constraint's mask (a JSON schema, a grammar or a regex; see
//!      [`constrain`](crate::pipeline::constrain)): z ← -∞ for every token that would
//!      take the text out of the grammar;
//!    - a model kind's rules ([`LogitRules`]; Whisper's suppressed tokens and timestamp
//!      rules), given the tokens so far;
//!    - repetition penalty r over the last `repeat_last_n` tokens (CTRL, Keskar et al.
//!      2019): z ← z / r if z > 0, else z · r; then OpenAI's presence and frequency
//!      penalties: z ← z − count · α_f − α_p;
//!    - temperature T = 0: greedy, argmax z. Otherwise:
//!    - top-k: keep the k largest; top-p (nucleus): keep the smallest set of the most
//!      likely tokens whose probabilities sum to ≥ p; min-p: keep tokens with
//!      p ≥ min_p · p_max;
//!    - p = softmax(z / T) over what is left; draw one token with a seeded RNG (the same
//!      `--seed` gives the same text).
//! 4. **Stopping**: at an end-of-generation token (EOS, `<|im_end|>`, `<end_of_turn>`;
//!    unless `ignore_eos`), when a constraint's text is complete and only an end token
//!    may follow, when the text contains a stop string (cut before it), after
//!    `max_tokens`, or when the context is full.
//!
//! Text streams out as tokens arrive: bytes of a character split across tokens are held
//! back until complete, and text that could still become a stop string is held back
//! until it cannot.
//!
//! [`Sampler::step`] is the one decoding step of every loop: the CLI's and the library's
//! streams (through [`Decoding::next`]), the server's batched scheduler (the same),
//! Whisper's greedy and sampled windows, trained encoder-decoders
//! (`EncoderDecoderModel::decode_with`); Whisper's beam search takes each beam's
//! candidates after the same links ([`Sampler::candidates`]).
//!
//! The loop is split in two so that one sequence's bookkeeping does not care where its
//! forward passes run: [`Decoding`] turns each step's logits into a token, text and a
//! stop decision; [`continue_generation`] (and the public `Generator`) runs the model
//! for one sequence, and a server can run many sequences' steps as one batch.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::io::gguf_tokenizer::GgufTokenizer;
use crate::io::tokenizer::{HfTokenizer, TokenStream, Tokenizer};
use crate::model::DecoderModel;
use crate::nn::KvCache;
use crate::pipeline::chat::{ChatTemplate, Message};
use crate::pipeline::constrain::{Constraint, Mask, Vocabulary};
use crate::{Error, Result};

/// A decoder model ready to write text: the network, its tokenizer, and the chat
/// template of its conversations (none for a base model or one trained on plain text).
/// Cloning shares the weights.
#[derive(Clone)]
pub struct TextModel {
    /// Where it came from (a .gguf file, a training run's folder).
    pub path: PathBuf,
    /// The network.
    pub model: DecoderModel,
    /// Text ↔ ids.
    pub tokenizer: Arc<dyn Tokenizer>,
    /// Conversation → prompt, for instruct models; None for a base model, whose file
    /// carries no template (it continues text).
    pub template: Option<ChatTemplate>,
    /// Whether a raw prompt starts with the BOS token (as the file says).
    pub add_bos: bool,
    /// The BOS and EOS token texts a chat template may write (empty where none).
    pub special_texts: (String, String),
    /// The vocabulary as the grammar engine of constraints sees it, built on the first
    /// constrained generation ([`TextModel::vocabulary`]) and shared by clones (start
    /// empty: `Default::default()`).
    pub vocabulary: Arc<OnceLock<Arc<Vocabulary>>>,
}

impl std::fmt::Debug for TextModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextModel")
            .field("path", &self.path)
            .field("family", &self.model.config.family)
            .field("tokenizer", &self.tokenizer)
            .field("chat_template", &self.template.is_some())
            .finish()
    }
}

impl TextModel {
    /// Load a GGUF file (its weights held as [`DecoderModel::open_to_run`] holds them), with
    /// its tokenizer and chat template (if the file carries one).
    pub fn load(path: &Path) -> Result<TextModel> {
        let f = DecoderModel::open_to_run(path)?;
        let tokenizer = GgufTokenizer::from_gguf(&f)?;
        let template = ChatTemplate::from_gguf(&f, &tokenizer)?;
        Ok(TextModel {
            path: path.to_path_buf(),
            model: DecoderModel::from_gguf(&f)?,
            add_bos: tokenizer.add_bos(),
            special_texts: crate::pipeline::chat::special_texts(&tokenizer),
            tokenizer: Arc::new(tokenizer),
            template,
            vocabulary: Default::default(),
        })
    }

    /// The same model with another chat template (`--chat-template`): `spec` is `chatml`,
    /// `gemma` or a Jinja file ([`ChatTemplate::from_spec`]); the weights are shared,
    /// not copied.
    pub fn with_chat_template(&self, spec: &str) -> Result<TextModel> {
        let (bos, eos) = &self.special_texts;
        Ok(TextModel {
            template: Some(ChatTemplate::from_spec(spec, bos, eos)?),
            ..self.clone()
        })
    }

    /// The same model keeping (`true`) or leaving out (`false`, the default) a system
    /// message its chat template writes when a conversation has none
    /// ([`ChatTemplate::keeping_default_system`]; `true` renders as llama.cpp does).
    pub fn keeping_default_system(&self, keep: bool) -> TextModel {
        TextModel {
            template: self
                .template
                .clone()
                .map(|t| t.keeping_default_system(keep)),
            ..self.clone()
        }
    }

    /// Load a Hugging Face GPT-2 folder (`config.json`, `model.safetensors`,
    /// `tokenizer.json`), such as one `lucent export hf` wrote: no chat template, no BOS
    /// (GPT-2's tokenizer adds none).
    pub fn load_hf_gpt2(dir: &Path) -> Result<TextModel> {
        let model = crate::model::family::gpt2::load_model(dir)?;
        let tokenizer = HfTokenizer::from_file(dir.join("tokenizer.json"))?;
        if tokenizer.vocab_size() > model.config.vocab_size {
            return Err(Error::format(
                dir.join("tokenizer.json"),
                format!(
                    "the tokenizer has {} tokens but the model's vocabulary {} (config.json vocab_size)",
                    tokenizer.vocab_size(),
                    model.config.vocab_size
                ),
            ));
        }
        Ok(TextModel {
            path: dir.to_path_buf(),
            model,
            tokenizer: Arc::new(tokenizer),
            template: None,
            add_bos: false,
            special_texts: Default::default(),
            vocabulary: Default::default(),
        })
    }

    /// Prompt ids of raw text: special-token text (`<|im_start|>`) is parsed into its
    /// token, as llama.cpp does, and BOS comes first if the model wants it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode_ids(text, self.add_bos, true)
    }

    /// Prompt ids of a conversation through the chat template, ending with the
    /// assistant's cue. Control-token text inside the messages stays text: only the
    /// template's own control tokens are parsed ([`ChatTemplate::encode_messages`]).
    /// Errors for a model without a template.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.encode_chat_tools(messages, &[])
    }

    /// [`TextModel::encode_chat`] for a conversation that offers `tools` or carries
    /// calls and their results: the template renders them where it can, else they take
    /// lucent's generic form ([`ChatTemplate::encode_tools`]).
    pub fn encode_chat_tools(
        &self,
        messages: &[Message],
        tools: &[crate::pipeline::tools::Tool],
    ) -> Result<Vec<u32>> {
        let template = self.template.as_ref().ok_or_else(|| {
            Error::Argument(format!(
                "{} has no chat template (tokenizer.chat_template): it is a base model that \
                 continues text and has no chat turns; give it text to continue (a raw prompt: \
                 `lucent generate` without --chat, /v1/completions), or a chat template \
                 (--chat-template FILE|chatml|gemma)",
                self.path
                    .file_name()
                    .unwrap_or(self.path.as_os_str())
                    .to_string_lossy()
            ))
        })?;
        template.encode_tools(self.tokenizer.as_ref(), messages, tools, true)
    }

    /// The form this model's answers write tool calls in: its chat template's own
    /// ([`ChatTemplate::tool_call_format`]) where the template renders tools, else the
    /// Hermes form of lucent's generic prompt. The constraint and the reading back of a
    /// conversation with tools take it ([`crate::pipeline::tools::constraint_in`]).
    pub fn tool_call_format(&self) -> crate::pipeline::tools::CallFormat {
        self.template
            .as_ref()
            .and_then(ChatTemplate::tool_call_format)
            .unwrap_or(crate::pipeline::tools::CallFormat::Hermes)
    }

    /// The tokenizer's vocabulary as the grammar engine sees it (a trie of every token's
    /// bytes), built on first use and kept: constraints compile against it.
    pub fn vocabulary(&self) -> Result<Arc<Vocabulary>> {
        if let Some(v) = self.vocabulary.get() {
            return Ok(v.clone());
        }
        let v = Arc::new(Vocabulary::new(self.tokenizer.as_ref())?);
        Ok(self.vocabulary.get_or_init(|| v).clone())
    }

    /// Compile `c` against this model's vocabulary (a check before a generation: errors
    /// say what is wrong with the schema, grammar or regex).
    pub fn compile(&self, c: &Constraint) -> Result<Mask> {
        self.vocabulary()?.compile(c)
    }

    /// A [`Decoding`] of this model after `prompt_ids` with `opts`; a constraint in
    /// `opts` is compiled against the model's vocabulary.
    pub fn decoding(&self, prompt_ids: &[u32], opts: &Sampling) -> Result<Decoding> {
        let vocab = match &opts.constrain {
            Some(_) => Some(self.vocabulary()?),
            None => None,
        };
        Decoding::with_vocabulary(prompt_ids, opts, vocab.as_deref())
    }

    /// A KV cache for up to `max_t` positions (capped at the model's context).
    pub fn new_cache(&self, max_t: usize) -> KvCache {
        self.model.new_cache(max_t)
    }

    /// [`generate`] with this model and tokenizer: `prompt_ids` into an emptied `cache`,
    /// then new tokens, each piece of text passed to `on_text` as it arrives.
    pub fn generate(
        &self,
        prompt_ids: &[u32],
        opts: &Sampling,
        cache: &mut KvCache,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        cache.clear();
        continue_generation(self, prompt_ids, opts, cache, on_text)
    }
}

/// How to generate: the sampler chain (applied to the logits in llama.cpp's order:
/// logit bias, the constraint's mask, penalties, then temperature 0 = greedy, else
/// top-k, top-p, min-p and a seeded draw at temperature T) and when to stop.
///
/// ```
/// let s = lucent::Sampling::greedy().max_tokens(16);
/// assert_eq!((s.temperature, s.max_tokens), (0.0, 16));
/// let t = lucent::Sampling::default().temperature(0.7).seed(42);
/// assert!(t.top_p < 1.0 && t.seed == 42);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// T: 0 = greedy (argmax); otherwise logits are divided by T before softmax.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Nucleus: keep the most likely tokens up to cumulative probability p (1 = off).
    pub top_p: f32,
    /// Keep tokens with p ≥ min_p · p_max (0 = off).
    pub min_p: f32,
    /// Repetition penalty r (1 = off): z ← z / r if z > 0, else z · r.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub repeat_last_n: usize,
    /// OpenAI's presence penalty: z ← z − α_p for every token already seen (0 = off).
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty: z ← z − α_f · count (0 = off).
    pub frequency_penalty: f32,
    /// RNG seed (the same seed gives the same text).
    pub seed: u64,
    /// Most new tokens.
    pub max_tokens: usize,
    /// Stop when the text contains any of these (the text is cut before it).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// Report the chosen token's log-probability and this many alternatives per step
    /// (`None`: none; log-softmax of the model's raw logits, before penalties).
    pub logprobs: Option<usize>,
    /// Also return the k largest logits of the first step.
    pub top_logits: usize,
    /// When the context is full, keep writing: the cache is refilled with the last half
    /// of the context's tokens (the oldest are forgotten), as `llama-cli` shifts its
    /// context. Off: generation ends at a full context (`ContextFull`).
    pub context_shift: bool,
    /// Write special tokens' text into the output (`<|im_end|>`, `<start_of_image>`);
    /// off (the default), they are left out of the text (the ids keep them).
    pub special: bool,
    /// OpenAI's `logit_bias`: (token id, bias in [-100, 100]) added to that token's logit
    /// before anything else of the chain (as llama.cpp orders it); a bias of -100 bans
    /// the token outright (its logit becomes -∞), +100 all but forces it.
    pub logit_bias: Vec<(u32, f32)>,
    /// Structured output: the text must match this JSON schema, grammar or regex
    /// (None = free text). Tokens that would leave it get -∞ right after the logit bias;
    /// generation ends once the text is complete. Needs the model's vocabulary:
    /// [`TextModel::decoding`] (or [`Sampler::with_vocabulary`]).
    pub constrain: Option<Constraint>,
}

impl Default for Sampling {
    /// llama.cpp's defaults (`llama-cli`): T = 0.8, top-k 40, top-p 0.95, min-p 0.05,
    /// no penalties, 128 new tokens.
    fn default() -> Self {
        Sampling {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            ..Sampling::greedy()
        }
    }
}

impl Sampling {
    /// Argmax every step (deterministic; equal to llama.cpp's greedy tokens), 128 new
    /// tokens at most.
    pub fn greedy() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
            max_tokens: 128,
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            top_logits: 0,
            context_shift: false,
            special: false,
            logit_bias: Vec::new(),
            constrain: None,
        }
    }

    /// With at most `n` new tokens.
    pub fn max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n;
        self
    }

    /// With temperature `t` (0 = greedy).
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = t;
        self
    }

    /// With RNG seed `seed`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Stopping also at the text `s`.
    pub fn stop(mut self, s: impl Into<String>) -> Self {
        self.stop.push(s.into());
        self
    }

    /// Check the ranges; errors name the flag.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Argument(m));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!(
                "--temperature must be ≥ 0 (0 = greedy), got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("--top-p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("--min-p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad(format!(
                "--repeat-penalty must be > 0 (1 = off), got {}",
                self.repeat_penalty
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if let Some((id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return bad(format!(
                "logit_bias of token {id} must be in [-100, 100], got {b}"
            ));
        }
        Ok(())
    }
}

/// Rules of a model kind that edit the next position's logits given the tokens so far:
/// a link of the [`Sampler`]'s chain, after the logit bias and the constraint's mask and
/// before the penalties. Whisper's decoding rules (suppressed tokens, timestamp rules;
/// [`WhisperRules`](crate::pipeline::transcribe::WhisperRules)) are one; a loop with
/// rules of its own gives them with [`Sampler::with_rules`], and every decoding loop's
/// greedy, sampled and beam decoding then sees them through the same step.
pub trait LogitRules: Send + Sync {
    /// Edit `logits` (z ← -∞ for a token that may not come next) given `history`, the
    /// tokens the loop gave the sampler (Whisper's: those generated in this window).
    fn apply(&self, logits: &mut [f32], history: &[u32]) -> Result<()>;
}

/// One decoding step's choice ([`Sampler::step`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// The token chosen.
    pub id: u32,
    /// Its log-probability under the logits the chain's links left (logit bias, mask,
    /// rules, penalties) at temperature 1, before top-k, top-p and min-p: what Whisper
    /// sums into a window's score. (The `logprobs` of [`Sampling`] are of the raw logits
    /// instead, as OpenAI reports them.)
    pub logprob: f32,
}

/// The sampler chain with its RNG and scratch space (allocated once, reused each step):
/// the one decoding step of every loop (the CLI's, the library's streams, the server's
/// batched scheduler, Whisper's greedy, sampled and beam decoding, trained
/// encoder-decoders'). Its links, in order: logit bias, the constraint's mask, a model
/// kind's [`LogitRules`], the penalties; then the choice (greedy at T = 0, else top-k,
/// top-p, min-p and a seeded draw). Cloning gives an independent copy at the same point
/// (one per beam of a beam search).
#[derive(Clone)]
pub struct Sampler {
    params: Sampling,
    rng: StdRng,
    /// (logit, id) of the candidates still in play.
    cand: Vec<(f32, u32)>,
    /// The constraint's mask (a link of the chain), fed each chosen token.
    mask: Option<Mask>,
    /// A model kind's rules (a link of the chain, after the mask).
    rules: Option<Arc<dyn LogitRules>>,
}

impl Sampler {
    /// A sampler seeded with `params.seed`; errors if a parameter is out of range, or
    /// if `params` has a constraint (it needs a vocabulary: [`Sampler::with_vocabulary`]).
    pub fn new(params: &Sampling) -> Result<Self> {
        Sampler::with_vocabulary(params, None)
    }

    /// A sampler whose constraint (if `params` has one) is compiled against `vocab`, the
    /// model's vocabulary ([`TextModel::vocabulary`]).
    pub fn with_vocabulary(params: &Sampling, vocab: Option<&Vocabulary>) -> Result<Self> {
        params.validate()?;
        let mask = match (&params.constrain, vocab) {
            (None, _) => None,
            (Some(c), Some(v)) => Some(v.compile(c)?),
            (Some(c), None) => {
                return Err(Error::Argument(format!(
                    "a {} constraint needs the model's vocabulary (TextModel::decoding)",
                    c.kind()
                )))
            }
        };
        Ok(Sampler {
            rng: StdRng::seed_from_u64(params.seed),
            params: params.clone(),
            cand: Vec::new(),
            mask,
            rules: None,
        })
    }

    /// The same sampler with a model kind's rules as the link after the mask
    /// ([`LogitRules`]; replaces rules given before).
    pub fn with_rules(mut self, rules: Arc<dyn LogitRules>) -> Self {
        self.rules = Some(rules);
        self
    }

    /// The end token to stop with, when a constraint's text is complete and only an end
    /// token may follow (None without a constraint, or while it can go on).
    pub fn finished(&mut self) -> Result<Option<u32>> {
        match &mut self.mask {
            Some(m) => m.finished(),
            None => Ok(None),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &Sampling {
        &self.params
    }

    /// Apply the penalties to `logits` for the tokens in the window of `history`: the
    /// repetition penalty r (z ← z / r if z > 0, else z · r), then the presence and
    /// frequency penalties (z ← z − count · α_f − α_p), each distinct token once.
    pub fn penalize(&self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        let (r, a_p, a_f) = (p.repeat_penalty, p.presence_penalty, p.frequency_penalty);
        if r == 1.0 && a_p == 0.0 && a_f == 0.0 {
            return;
        }
        let start = history.len().saturating_sub(p.repeat_last_n);
        let recent = &history[start..];
        for (i, &id) in recent.iter().enumerate() {
            if recent[..i].contains(&id) {
                continue; // each distinct token is penalised once
            }
            if let Some(z) = logits.get_mut(id as usize) {
                if r != 1.0 {
                    *z = if *z > 0.0 { *z / r } else { *z * r };
                }
                if a_p != 0.0 || a_f != 0.0 {
                    let count = recent[i..].iter().filter(|&&x| x == id).count();
                    *z -= count as f32 * a_f + a_p;
                }
            }
        }
    }

    /// Add the logit bias, the chain's first link: z ← z + b for each biased token, -∞
    /// for a bias of -100 (a ban). Ids outside the vocabulary are refused.
    pub fn bias(&self, logits: &mut [f32]) -> Result<()> {
        for &(id, b) in &self.params.logit_bias {
            let vocab = logits.len();
            let z = logits.get_mut(id as usize).ok_or_else(|| {
                Error::Argument(format!(
                    "logit_bias names token {id}, outside the vocabulary of {vocab} tokens"
                ))
            })?;
            *z = if b <= -100.0 {
                f32::NEG_INFINITY
            } else {
                *z + b
            };
        }
        Ok(())
    }

    /// The chain's links on `logits`, in place: logit bias, the constraint's mask (not
    /// fed), the model kind's rules, the penalties. What is left is what the choice
    /// ([`Sampler::step`]) and the candidates ([`Sampler::candidates`]) read.
    pub fn links(&mut self, logits: &mut [f32], history: &[u32]) -> Result<()> {
        if logits.is_empty() {
            return Err(Error::Argument("no logits to sample from".into()));
        }
        self.bias(logits)?;
        if let Some(m) = &mut self.mask {
            m.apply(logits)?;
        }
        if let Some(r) = &self.rules {
            r.apply(logits, history)?;
        }
        self.penalize(logits, history);
        Ok(())
    }

    /// Choose the next token from `logits` (modified in place by the chain's links),
    /// given the tokens so far (for the penalties and the rules). The chosen token is
    /// fed to the constraint. [`Sampler::step`] without the log-probability.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32> {
        self.links(logits, history)?;
        let next = self.choose(logits)?;
        self.accept(next)?;
        Ok(next)
    }

    /// The one decoding step: the chain's links on `logits` (in place), the token's
    /// choice, and its log-probability under the logits the links left ([`Choice`]);
    /// the token is fed to the constraint.
    pub fn step(&mut self, logits: &mut [f32], history: &[u32]) -> Result<Choice> {
        self.links(logits, history)?;
        let lse = logsumexp(logits);
        let id = self.choose(logits)?;
        self.accept(id)?;
        let logprob = logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&z| z - lse);
        Ok(Choice { id, logprob })
    }

    /// Beam search's step: the chain's links on `logits` (in place), then the `n` most
    /// likely tokens the links leave, as (id, log p under what they leave), most likely
    /// first (banned and masked tokens are never candidates). Nothing is fed to the
    /// constraint: the beam that takes a candidate feeds it ([`Sampler::accept`], on its
    /// own clone).
    pub fn candidates(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        n: usize,
    ) -> Result<Vec<(u32, f32)>> {
        self.links(logits, history)?;
        let lp = log_softmax(logits);
        let mut order: Vec<usize> = (0..lp.len()).filter(|&i| lp[i].is_finite()).collect();
        order.sort_unstable_by(|&a, &b| lp[b].total_cmp(&lp[a]));
        Ok(order
            .into_iter()
            .take(n)
            .map(|i| (i as u32, lp[i]))
            .collect())
    }

    /// Feed the token chosen (by this sampler's step, or a beam's candidate) to the
    /// constraint, if there is one.
    pub fn accept(&mut self, id: u32) -> Result<()> {
        match &mut self.mask {
            Some(m) => m.accept(id),
            None => Ok(()),
        }
    }

    /// The choice after the links: the argmax at T = 0, else a draw.
    fn choose(&mut self, logits: &[f32]) -> Result<u32> {
        let p = &self.params;
        if p.temperature == 0.0 {
            return Ok(argmax(logits));
        }
        let cand = &mut self.cand;
        cand.clear();
        // Banned and masked tokens (-∞) are no candidates: a draw never returns one.
        cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, &z)| z > f32::NEG_INFINITY)
                .map(|(i, &z)| (z, i as u32)),
        );
        if cand.is_empty() {
            return Err(Error::Argument(
                "every token is banned (logit_bias -100 or the constraint): nothing to sample"
                    .into(),
            ));
        }
        keep_candidates(p, cand);
        let total: f32 = cand.iter().map(|c| c.0).sum();
        let mut u = self.rng.random::<f32>() * total;
        for c in cand.iter() {
            if u < c.0 {
                return Ok(c.1);
            }
            u -= c.0;
        }
        Ok(cand[cand.len() - 1].1)
    }
}

/// Turn `cand`, every token's (logit, id), into the tokens a draw at `p.temperature`
/// (> 0) may pick, as (probability before renormalising, id), most likely first: top-k
/// on the logits, then softmax(z / T), then top-p, then min-p ([`Sampler::sample`]'s
/// rules; the draw renormalises what is left).
fn keep_candidates(p: &Sampling, cand: &mut Vec<(f32, u32)>) {
    let by_logit = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0);
    if p.top_k > 0 && p.top_k < cand.len() {
        cand.select_nth_unstable_by(p.top_k - 1, by_logit);
        cand.truncate(p.top_k);
    }
    cand.sort_unstable_by(by_logit);
    // Probabilities at temperature T, in place of the logits.
    let zmax = cand[0].0;
    let mut sum = 0.0f64;
    for c in cand.iter_mut() {
        c.0 = ((c.0 - zmax) / p.temperature).exp();
        sum += c.0 as f64;
    }
    for c in cand.iter_mut() {
        c.0 = (c.0 as f64 / sum) as f32;
    }
    if p.top_p < 1.0 {
        let mut acc = 0.0f32;
        let mut keep = cand.len();
        for (i, c) in cand.iter().enumerate() {
            acc += c.0;
            if acc >= p.top_p {
                keep = i + 1;
                break;
            }
        }
        cand.truncate(keep.max(1));
    }
    if p.min_p > 0.0 {
        let floor = p.min_p * cand[0].0;
        let keep = cand.iter().take_while(|c| c.0 >= floor).count();
        cand.truncate(keep.max(1));
    }
}

/// The distribution [`Sampler::sample`] draws the next token from, for `logits` and no
/// penalties: the tokens top-k, top-p and min-p keep, each with its probability at
/// temperature T renormalised over what is kept, most likely first. Temperature 0 is
/// greedy: the argmax with probability 1. (The explorer's sliders apply these rules in
/// the browser; its test holds them to this function.)
///
/// ```
/// let s = lucent::Sampling { top_k: 2, ..lucent::Sampling::default().temperature(1.0) };
/// let d = lucent::pipeline::generate::distribution(&s, &[1.0, 3.0, 2.0])?;
/// assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2]);
/// assert!((d[0].1 + d[1].1 - 1.0).abs() < 1e-6);
/// # Ok::<(), lucent::Error>(())
/// ```
pub fn distribution(params: &Sampling, logits: &[f32]) -> Result<Vec<(u32, f32)>> {
    params.validate()?;
    if logits.is_empty() {
        return Err(Error::Argument("no logits to sample from".into()));
    }
    if params.temperature == 0.0 {
        return Ok(vec![(argmax(logits), 1.0)]);
    }
    let mut cand: Vec<(f32, u32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &z)| (z, i as u32))
        .collect();
    keep_candidates(params, &mut cand);
    let total: f32 = cand.iter().map(|c| c.0).sum();
    Ok(cand.into_iter().map(|(p, id)| (id, p / total)).collect())
}

/// The index of the largest logit (the first, on ties): [`crate::ops::softmax::argmax`]
/// as a token id.
pub fn argmax(logits: &[f32]) -> u32 {
    crate::ops::softmax::argmax(logits) as u32
}

/// The `k` largest logits as (id, logit), largest first.
pub fn top_logits(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut all: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &z)| (i as u32, z))
        .collect();
    let k = k.min(all.len());
    if k == 0 {
        return Vec::new();
    }
    all.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    all.truncate(k);
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    all
}

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token (not included in the text).
    EndOfGeneration(u32),
    /// A stop string appeared (the text is cut before it).
    StopString(String),
    /// `max_tokens` new tokens.
    MaxTokens,
    /// The context (KV cache) is full.
    ContextFull(usize),
}

impl StopReason {
    /// OpenAI's `finish_reason`: `stop` (an end token or a stop string) or `length`.
    pub fn finish_reason(&self) -> &'static str {
        match self {
            StopReason::EndOfGeneration(_) | StopReason::StopString(_) => "stop",
            StopReason::MaxTokens | StopReason::ContextFull(_) => "length",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::EndOfGeneration(id) => write!(f, "end of generation (token {id})"),
            StopReason::StopString(s) => write!(f, "stop string {s:?}"),
            StopReason::MaxTokens => write!(f, "max tokens"),
            StopReason::ContextFull(n) => {
                write!(f, "the context of {n} positions is full")
            }
        }
    }
}

/// A token's log-probability, with the most likely alternatives at that step.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token chosen.
    pub id: u32,
    /// log p(id) under softmax of the model's raw logits.
    pub logprob: f32,
    /// The most likely tokens at this step, (id, log p), most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The result of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The prompt's ids.
    pub prompt_ids: Vec<u32>,
    /// The new ids (an end-of-generation token that stopped it is not included).
    pub ids: Vec<u32>,
    /// The new text (cut before a stop string).
    pub text: String,
    /// The first step's largest logits (id, logit), if asked for.
    pub top_logits: Vec<(u32, f32)>,
    /// Per new token, its log-probability, if asked for ([`Sampling::logprobs`]).
    pub logprobs: Vec<TokenLogprob>,
    /// Why it ended.
    pub stop: StopReason,
    /// Seconds of the prefill (prompt through the model, first logits).
    pub prefill_secs: f64,
    /// Seconds of the decode steps.
    pub decode_secs: f64,
    /// Decode steps run (each one forward of one token).
    pub decode_steps: usize,
}

impl Generation {
    /// Prompt tokens per second of prefill.
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill_secs.max(1e-9)
    }

    /// Tokens per second of decoding.
    pub fn decode_tok_s(&self) -> f64 {
        if self.decode_steps == 0 {
            return 0.0;
        }
        self.decode_steps as f64 / self.decode_secs.max(1e-9)
    }
}

/// Streams text out while holding back what could still turn into a stop string.
struct StopWatch {
    stops: Vec<String>,
    text: String,
    sent: usize,
}

impl StopWatch {
    /// Add text; returns Some(stop) if a stop string now appears (text cut before it).
    fn push(&mut self, s: &str) -> Option<String> {
        let from = self.sent;
        self.text.push_str(s);
        for stop in &self.stops {
            if stop.is_empty() {
                continue;
            }
            // A match may start in the held-back tail.
            let begin = from.saturating_sub(stop.len());
            let begin = (0..=begin)
                .rev()
                .find(|&i| self.text.is_char_boundary(i))
                .unwrap_or(0);
            if let Some(at) = self.text[begin..].find(stop.as_str()) {
                self.text.truncate(begin + at);
                return Some(stop.clone());
            }
        }
        None
    }

    /// Text safe to send now (cannot be the start of a stop string any more).
    fn ready(&mut self, all: bool) -> &str {
        let hold = if all {
            0
        } else {
            self.stops
                .iter()
                .map(|s| s.len().saturating_sub(1))
                .max()
                .unwrap_or(0)
        };
        let mut end = self.text.len().saturating_sub(hold).max(self.sent);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let out = &self.text[self.sent..end.max(self.sent)];
        self.sent = end.max(self.sent);
        out
    }
}

/// What one step of [`Decoding::next`] gives.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The token chosen, to be fed to the model next (None when the step ended the
    /// generation without a new token: an end-of-generation token, or `max_tokens` 0).
    pub token: Option<u32>,
    /// Text that became final at this step (possibly empty).
    pub text: String,
    /// The chosen token's log-probability, if asked for.
    pub logprob: Option<TokenLogprob>,
    /// Set when the generation has ended.
    pub stop: Option<StopReason>,
}

/// Most new ids a [`Decoding`] makes room for ahead (its vectors grow past it as needed).
const RESERVE_LIMIT: usize = 1 << 16;

/// One sequence's generation, apart from the forward passes: given the logits of the
/// next position it samples a token, turns it into text, watches for stop strings and
/// end tokens, and says when to stop. The caller runs the model (alone, or batched with
/// other sequences) and feeds each step's logits in.
pub struct Decoding {
    sampler: Sampler,
    max_tokens: usize,
    ignore_eos: bool,
    logprobs: Option<usize>,
    history: Vec<u32>,
    ids: Vec<u32>,
    stream: TokenStream,
    special: bool,
    watch: StopWatch,
    stop: Option<StopReason>,
    logprob_log: Vec<TokenLogprob>,
}

impl Decoding {
    /// A generation after `prompt_ids` (which the repetition penalty sees) with `opts`.
    pub fn new(prompt_ids: &[u32], opts: &Sampling) -> Result<Self> {
        Decoding::with_vocabulary(prompt_ids, opts, None)
    }

    /// [`Decoding::new`] with the model's vocabulary, against which a constraint in
    /// `opts` is compiled ([`TextModel::decoding`] passes its own).
    pub fn with_vocabulary(
        prompt_ids: &[u32],
        opts: &Sampling,
        vocab: Option<&Vocabulary>,
    ) -> Result<Self> {
        // Room for the new ids up front, but never more than a context's worth: a
        // `max_tokens` of 10^10 is a limit, not an allocation.
        let room = opts.max_tokens.min(RESERVE_LIMIT);
        let mut history = prompt_ids.to_vec();
        history.reserve(room + 1);
        Ok(Decoding {
            sampler: Sampler::with_vocabulary(opts, vocab)?,
            max_tokens: opts.max_tokens,
            ignore_eos: opts.ignore_eos,
            logprobs: opts.logprobs,
            history,
            ids: Vec::with_capacity(room),
            stream: TokenStream::new(!opts.special),
            special: opts.special,
            watch: StopWatch {
                stops: opts.stop.clone(),
                text: String::new(),
                sent: 0,
            },
            stop: None,
            logprob_log: Vec::new(),
        })
    }

    /// The new ids so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The text so far (cut before a stop string).
    pub fn text(&self) -> &str {
        &self.watch.text
    }

    /// Why it ended, once it has.
    pub fn stop_reason(&self) -> Option<&StopReason> {
        self.stop.as_ref()
    }

    /// Each new token's log-probability, if asked for.
    pub fn logprobs(&self) -> &[TokenLogprob] {
        &self.logprob_log
    }

    /// The prompt's ids followed by the new ones.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Choose the next token from the logits of the next position (modified in place by
    /// the penalties). When the returned step has no `stop`, run the model on its
    /// token and call again with the new logits.
    pub fn next(&mut self, tok: &dyn Tokenizer, logits: &mut [f32]) -> Result<Step> {
        if let Some(stop) = &self.stop {
            return Err(Error::Argument(format!(
                "this generation has already ended ({stop})"
            )));
        }
        if self.ids.len() >= self.max_tokens {
            let text = self.end(tok, StopReason::MaxTokens)?;
            return Ok(self.step(None, text, None));
        }
        // The raw logits are kept for the log-probabilities: the sampler changes them.
        let raw = self
            .logprobs
            .map(|k| (logprobs_of(logits, k), logits.to_vec()));
        let next = self.sampler.sample(logits, &self.history)?;
        let lp = raw.map(|((lse, top), raw)| TokenLogprob {
            id: next,
            logprob: raw
                .get(next as usize)
                .map_or(f32::NEG_INFINITY, |&z| z - lse),
            top,
        });
        if tok.is_end_of_generation(next) && !self.ignore_eos {
            let text = self.end(tok, StopReason::EndOfGeneration(next))?;
            return Ok(self.step(None, text, None));
        }
        self.ids.push(next);
        self.history.push(next);
        if let Some(lp) = &lp {
            self.logprob_log.push(lp.clone());
        }
        let piece = self.stream.push(tok, next)?;
        if let Some(s) = self.watch.push(&piece) {
            let text = self.watch.ready(true).to_string();
            self.stop = Some(StopReason::StopString(s));
            return Ok(self.step(Some(next), text, lp));
        }
        let mut text = self.watch.ready(false).to_string();
        // A constraint whose text is complete ends here: the next forward pass could only
        // give an end token.
        if let Some(end) = self.sampler.finished()? {
            text.push_str(&self.end(tok, StopReason::EndOfGeneration(end))?);
        } else if self.ids.len() >= self.max_tokens {
            text.push_str(&self.end(tok, StopReason::MaxTokens)?);
        }
        Ok(self.step(Some(next), text, lp))
    }

    /// End the generation for `reason` (e.g. the context is full); returns the text
    /// held back until now.
    pub fn end(&mut self, _tok: &dyn Tokenizer, reason: StopReason) -> Result<String> {
        if self.stop.is_some() {
            return Ok(String::new());
        }
        let rest = std::mem::replace(&mut self.stream, TokenStream::new(!self.special)).finish();
        let reason = match self.watch.push(&rest) {
            Some(s) => StopReason::StopString(s),
            None => reason,
        };
        self.stop = Some(reason);
        Ok(self.watch.ready(true).to_string())
    }

    fn step(&self, token: Option<u32>, text: String, logprob: Option<TokenLogprob>) -> Step {
        Step {
            token,
            text,
            logprob,
            stop: self.stop.clone(),
        }
    }
}

/// log Σ exp(z) of `logits`: the largest z plus the log of the exps' sum taken in f64
/// (−∞ when every z is −∞). Every decoding loop's log-probabilities (the `logprobs` of
/// generation and the server, Whisper's scores and beam search) use this one.
pub fn logsumexp(logits: &[f32]) -> f32 {
    let zmax = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if zmax == f32::NEG_INFINITY {
        return zmax;
    }
    let sum: f64 = logits.iter().map(|&z| ((z - zmax) as f64).exp()).sum();
    zmax + sum.ln() as f32
}

/// log softmax of `logits`: z − [`logsumexp`]`(z)` for each (−∞ stays −∞).
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let lse = logsumexp(logits);
    logits.iter().map(|&z| z - lse).collect()
}

/// log Σ exp(z) of `logits` and the `k` most likely tokens as (id, log p).
fn logprobs_of(logits: &[f32], k: usize) -> (f32, Vec<(u32, f32)>) {
    let lse = logsumexp(logits);
    let top = top_logits(logits, k)
        .into_iter()
        .map(|(id, z)| (id, z - lse))
        .collect();
    (lse, top)
}

/// The fewest rows a prompt chunk of [`prompt_chunks`] has (llama.cpp's products change
/// their summation order for the K-quant types below 8 rows).
pub const MIN_PROMPT_CHUNK: usize = 8;

/// Where to cut a prompt of `t` tokens for a prefill in pieces of about `chunk` tokens
/// (each piece through the KV cache after the ones before), so that a long prompt does
/// not hold up other sequences' decode steps for long, and the last position's logits
/// equal the whole prompt's at once bit for bit. With llama.cpp's arithmetic a prompt
/// row is summed in an order that depends on its product's row count only through
/// these rules, which the cuts respect: K-quant products of 8 rows or more take a tiled
/// order (every piece has at least [`MIN_PROMPT_CHUNK`] rows: a short tail joins the
/// piece before it), a repacked Q4_K matrix sums whole fours of rows its own way (every
/// piece but the last is a multiple of 4 rows, so the fours stay where they were), and
/// attention takes its GEMM order from two query rows up. `chunk` is rounded down to a
/// multiple of 4, at least 8; a prompt of at most `chunk` tokens is one piece.
///
/// ```
/// use lucent::pipeline::generate::prompt_chunks;
/// assert_eq!(prompt_chunks(10, 64), vec![0..10]);
/// assert_eq!(prompt_chunks(134, 64), vec![0..64, 64..134]); // a tail of 6 joins
/// assert_eq!(prompt_chunks(140, 66), vec![0..64, 64..128, 128..140]);
/// ```
pub fn prompt_chunks(t: usize, chunk: usize) -> Vec<std::ops::Range<usize>> {
    let chunk = (chunk / 4 * 4).max(MIN_PROMPT_CHUNK);
    let mut cuts = Vec::new();
    let mut start = 0;
    while t - start > chunk {
        let end = if t - (start + chunk) < MIN_PROMPT_CHUNK {
            t
        } else {
            start + chunk
        };
        cuts.push(start..end);
        start = end;
    }
    if start < t || t == 0 {
        cuts.push(start..t);
    }
    cuts
}

/// The logits after `history` (whose last token is not in the cache yet) when the cache
/// is full: the cache is refilled with the last half of the context's tokens, ending
/// with that last token.
pub(crate) fn shift_context(
    model: &DecoderModel,
    cache: &mut KvCache,
    history: &[u32],
    capacity: usize,
) -> Result<Vec<f32>> {
    let keep = (capacity / 2).max(1).min(history.len());
    cache.clear();
    Ok(model
        .forward(&history[history.len() - keep..], Some(cache), true, None)?
        .into_vec()) // (V)
}

/// Generate from `prompt_ids` (the cache is cleared first and holds the whole
/// conversation afterwards). `on_text` receives the text as it becomes final.
pub fn generate(
    model: &TextModel,
    prompt_ids: &[u32],
    opts: &Sampling,
    cache: &mut KvCache,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation> {
    cache.clear();
    continue_generation(model, prompt_ids, opts, cache, on_text)
}

/// Like [`generate`], but `new_ids` follow what `cache` already holds (a chat turn):
/// only they are prefilled. The penalties see only this turn.
pub fn continue_generation(
    tm: &TextModel,
    new_ids: &[u32],
    opts: &Sampling,
    cache: &mut KvCache,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation> {
    let model = &tm.model;
    let tok = tm.tokenizer.as_ref();
    let mut decoding = tm.decoding(new_ids, opts)?;
    let capacity = cache
        .layer(0)
        .map_or(0, |l| l.capacity())
        .min(model.config.max_positions);
    if cache.len() + new_ids.len() > capacity {
        return Err(Error::Argument(format!(
            "the prompt has {} tokens ({} already in context) but the context holds {capacity}; \
             shorten the prompt (or start a new conversation)",
            new_ids.len(),
            cache.len()
        )));
    }
    let t0 = Instant::now();
    let logits = model.forward(new_ids, Some(cache), true, None)?;
    let mut row = logits.into_vec(); // (V)
    let prefill_secs = t0.elapsed().as_secs_f64();
    let top = top_logits(&row, opts.top_logits);

    let t1 = Instant::now();
    let mut steps = 0;
    loop {
        let step = decoding.next(tok, &mut row)?;
        on_text(&step.text);
        let Some(next) = step.token else { break };
        if step.stop.is_some() {
            break;
        }
        if cache.len() >= capacity {
            if !opts.context_shift || capacity < 2 {
                on_text(&decoding.end(tok, StopReason::ContextFull(capacity))?);
                break;
            }
            row = shift_context(model, cache, decoding.history(), capacity)?;
        } else {
            row = model.forward(&[next], Some(cache), true, None)?.into_vec();
        }
        steps += 1;
    }
    let decode_secs = t1.elapsed().as_secs_f64();
    let stop = decoding.stop.take().unwrap_or(StopReason::MaxTokens);
    Ok(Generation {
        prompt_ids: new_ids.to_vec(),
        ids: decoding.ids,
        text: decoding.watch.text,
        top_logits: top,
        logprobs: decoding.logprob_log,
        stop,
        prefill_secs,
        decode_secs,
        decode_steps: steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn sampler(p: Sampling) -> Result<Sampler> {
        Sampler::new(&p)
    }

    #[test]
    fn logit_bias_bans_at_minus_100_and_forces_at_plus_100() -> TestResult {
        let logits = [0.1f32, 3.0, -1.0, 0.5];
        // Greedy: the argmax is token 1; -100 bans it, +100 on token 2 forces that one.
        let ban = Sampling {
            logit_bias: vec![(1, -100.0)],
            ..Sampling::greedy()
        };
        let mut z = logits;
        assert_eq!(sampler(ban.clone())?.sample(&mut z, &[])?, 3);
        assert_eq!(z[1], f32::NEG_INFINITY);
        let force = Sampling {
            logit_bias: vec![(2, 100.0)],
            ..Sampling::greedy()
        };
        assert_eq!(sampler(force)?.sample(&mut logits.clone(), &[])?, 2);
        // Sampled, on every seed: a banned token is never drawn, a forced one always.
        for seed in 0..200 {
            let banned = Sampling {
                logit_bias: vec![(1, -100.0)],
                ..Sampling::default().seed(seed)
            };
            assert_ne!(sampler(banned)?.sample(&mut logits.clone(), &[])?, 1);
            let forced = Sampling {
                logit_bias: vec![(0, 100.0)],
                ..Sampling::default().seed(seed)
            };
            assert_eq!(sampler(forced)?.sample(&mut logits.clone(), &[])?, 0);
        }
        // Out of range or outside the vocabulary: errors naming the token.
        let wild = Sampling {
            logit_bias: vec![(0, 150.0)],
            ..Sampling::greedy()
        };
        assert!(Sampler::new(&wild).is_err());
        let far = Sampling {
            logit_bias: vec![(99, 1.0)],
            ..Sampling::greedy()
        };
        let e = sampler(far)?.sample(&mut logits.clone(), &[]).unwrap_err();
        assert!(e.to_string().contains("token 99"), "{e}");
        Ok(())
    }

    /// Rules that ban odd ids (a model kind's link).
    struct EvenOnly;

    impl LogitRules for EvenOnly {
        fn apply(&self, logits: &mut [f32], _history: &[u32]) -> Result<()> {
            for (i, z) in logits.iter_mut().enumerate() {
                if i % 2 == 1 {
                    *z = f32::NEG_INFINITY;
                }
            }
            Ok(())
        }
    }

    #[test]
    fn the_step_and_the_candidates_pass_the_same_links() -> TestResult {
        // The bias bans 2, the rules every odd id: 0 (z 0.5) and 4 (z 1.5) are left,
        // log p(4) = 1.5 − ln(e^0.5 + e^1.5), log p(0) = 0.5 − the same.
        let logits = [0.5f32, 3.0, 2.0, 1.0, 1.5, -1.0];
        let lse = (0.5f64.exp() + 1.5f64.exp()).ln();
        let p = Sampling {
            logit_bias: vec![(2, -100.0)],
            ..Sampling::greedy()
        };
        let mut s = Sampler::new(&p)?.with_rules(Arc::new(EvenOnly));
        let c = s.step(&mut logits.clone(), &[])?;
        assert_eq!(c.id, 4);
        assert!((c.logprob as f64 - (1.5 - lse)).abs() < 1e-6, "{c:?}");
        assert_eq!(s.sample(&mut logits.clone(), &[])?, 4);
        let cands = s.candidates(&mut logits.clone(), &[], 5)?;
        assert_eq!(cands.iter().map(|c| c.0).collect::<Vec<_>>(), [4, 0]);
        assert!((cands[1].1 as f64 - (0.5 - lse)).abs() < 1e-6, "{cands:?}");
        // A draw at T = 1 never leaves what the links allow; a clone draws as the
        // original does.
        let mut t = Sampler::new(&Sampling {
            temperature: 1.0,
            seed: 5,
            ..p
        })?
        .with_rules(Arc::new(EvenOnly));
        let mut u = t.clone();
        let mut seen = [0; 6];
        for _ in 0..200 {
            let a = t.step(&mut logits.clone(), &[])?;
            assert_eq!(a, u.step(&mut logits.clone(), &[])?);
            seen[a.id as usize] += 1;
        }
        assert_eq!(seen[1] + seen[2] + seen[3] + seen[5], 0, "{seen:?}");
        assert!(seen[0] > 0 && seen[4] > seen[0], "{seen:?}");
        Ok(())
    }

    #[test]
    fn greedy_and_top_k_one_pick_the_argmax() -> TestResult {
        let logits = [0.1, 3.0, -1.0, 2.9];
        let mut g = sampler(Sampling::greedy())?;
        assert_eq!(g.sample(&mut logits.clone(), &[])?, 1);
        let mut k1 = sampler(Sampling {
            temperature: 1.5,
            top_k: 1,
            seed: 3,
            ..Sampling::greedy()
        })?;
        for _ in 0..20 {
            assert_eq!(k1.sample(&mut logits.clone(), &[])?, 1);
        }
        Ok(())
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative() -> TestResult {
        let s = sampler(Sampling {
            repeat_penalty: 2.0,
            ..Sampling::greedy()
        })?;
        let mut z = [4.0, -1.0, 3.0];
        s.penalize(&mut z, &[0, 1, 0]);
        assert_eq!(z, [2.0, -2.0, 3.0]); // token 0 penalised once though it appears twice
        let mut g = sampler(Sampling {
            repeat_penalty: 2.0,
            ..Sampling::greedy()
        })?;
        assert_eq!(g.sample(&mut [4.0, -1.0, 3.0], &[0])?, 2);
        Ok(())
    }

    #[test]
    fn distribution_is_what_the_sampler_draws_from() -> TestResult {
        // softmax([2, 1, 0]) = [0.6652, 0.2447, 0.0900]; top-k 2 renormalises the first two.
        let logits = [0.0, 2.0, 1.0];
        let soft = |z: &[f64]| -> Vec<f64> {
            let s: f64 = z.iter().map(|x| x.exp()).sum();
            z.iter().map(|x| x.exp() / s).collect()
        };
        let all = distribution(&Sampling::greedy().temperature(1.0), &logits)?;
        let want = soft(&[2.0, 1.0, 0.0]);
        assert_eq!(all.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2, 0]);
        for (got, w) in all.iter().zip(&want) {
            assert!((got.1 as f64 - w).abs() < 1e-6, "{all:?}");
        }
        let k2 = Sampling {
            top_k: 2,
            ..Sampling::greedy().temperature(1.0)
        };
        let d = distribution(&k2, &logits)?;
        let w = soft(&[2.0, 1.0]);
        assert!(d.len() == 2 && (d[0].1 as f64 - w[0]).abs() < 1e-6, "{d:?}");
        // top-p 0.6 and min-p 0.5 keep the first alone; T = 0 is the argmax.
        for p in [
            Sampling {
                top_p: 0.6,
                ..Sampling::greedy().temperature(1.0)
            },
            Sampling {
                min_p: 0.5,
                ..Sampling::greedy().temperature(1.0)
            },
            Sampling::greedy(),
        ] {
            assert_eq!(distribution(&p, &logits)?, vec![(1, 1.0)]);
        }
        // Every token the sampler draws is in the distribution.
        let mut s = sampler(k2.clone().seed(3))?;
        for _ in 0..100 {
            let id = s.sample(&mut logits.clone(), &[])?;
            assert!(d.iter().any(|x| x.0 == id), "{id} drawn outside {d:?}");
        }
        Ok(())
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() -> TestResult {
        // p ≈ [0.665, 0.245, 0.090]: min_p 0.5 keeps only token 0; top_p 0.6 too.
        let logits = [2.0, 1.0, 0.0];
        for p in [
            Sampling {
                temperature: 1.0,
                min_p: 0.5,
                ..Sampling::greedy()
            },
            Sampling {
                temperature: 1.0,
                top_p: 0.6,
                ..Sampling::greedy()
            },
        ] {
            let mut s = sampler(p)?;
            for _ in 0..50 {
                assert_eq!(s.sample(&mut logits.clone(), &[])?, 0);
            }
        }
        // top_p 0.95 keeps all three: every token appears in 400 draws.
        let mut s = sampler(Sampling {
            temperature: 1.0,
            top_p: 0.95,
            seed: 1,
            ..Sampling::greedy()
        })?;
        let mut seen = [0; 3];
        for _ in 0..400 {
            seen[s.sample(&mut logits.clone(), &[])? as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 0), "{seen:?}");
        assert!(seen[0] > seen[1] && seen[1] > seen[2], "{seen:?}");
        Ok(())
    }

    #[test]
    fn bad_parameters_name_the_flag() -> TestResult {
        let e = Sampler::new(&Sampling {
            top_p: 0.0,
            ..Sampling::greedy()
        })
        .err()
        .ok_or("expected an error")?
        .to_string();
        assert!(e.contains("--top-p"), "{e}");
        let e = Sampler::new(&Sampling {
            temperature: -1.0,
            ..Sampling::greedy()
        })
        .err()
        .ok_or("expected an error")?
        .to_string();
        assert!(e.contains("--temperature"), "{e}");
        Ok(())
    }

    #[test]
    fn stop_strings_are_held_back_then_cut() {
        let mut w = StopWatch {
            stops: vec!["END".to_string()],
            text: String::new(),
            sent: 0,
        };
        assert_eq!(w.push("hello E"), None);
        assert_eq!(w.ready(false), "hello"); // " E" could start "END"
        assert_eq!(w.push("N"), None);
        assert_eq!(w.ready(false), " ");
        assert_eq!(w.push("D and more"), Some("END".into()));
        assert_eq!(w.ready(true), "");
        assert_eq!(w.text, "hello ");
    }

    #[test]
    fn top_logits_are_sorted() {
        assert_eq!(top_logits(&[0.5, 2.0, 1.0], 2), vec![(1, 2.0), (2, 1.0)]);
        assert!(top_logits(&[1.0], 0).is_empty());
    }
}
