//! Text generation with a decoder-only model: prefill, then decode token by token
//! through a KV cache, sampling each next token from the logits.
//!
//! 1. **Prefill**: the prompt's ids go through the model at once; every layer's keys
//!    and values land in the preallocated [`KvCache`]; the logits of the last position
//!    give the first new token.
//! 2. **Decode**: each new token alone goes through the model (t = 1), attending over
//!    the cache; its logits give the next token. One step reads every weight once.
//! 3. **Sampling** ([`Sampler`]), applied to the logits z in this order (llama.cpp's):
//!    - repetition penalty r over the last `repeat_last_n` tokens (CTRL, Keskar et al.
//!      2019): z ← z / r if z > 0, else z · r;
//!    - temperature T = 0: greedy, argmax z. Otherwise:
//!    - top-k: keep the k largest; top-p (nucleus): keep the smallest set of the most
//!      likely tokens whose probabilities sum to ≥ p; min-p: keep tokens with
//!      p ≥ min_p · p_max;
//!    - p = softmax(z / T) over what is left; draw one token with a seeded RNG (the same
//!      `--seed` gives the same text).
//! 4. **Stopping**: at an end-of-generation token (EOS, `<|im_end|>`, `<end_of_turn>`;
//!    unless `ignore_eos`), when the text contains a stop string (cut before it), after
//!    `max_tokens`, or when the context is full.
//!
//! Text streams out as tokens arrive: bytes of a character split across tokens are held
//! back until complete, and text that could still become a stop string is held back
//! until it cannot.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use std::path::{Path, PathBuf};

use crate::io::gguf::GgufFile;
use crate::io::gguf_tokenizer::GgufTokenizer;
use crate::model::DecoderModel;
use crate::nn::KvCache;
use crate::pipeline::chat::{ChatTemplate, Message};
use crate::{Error, Result};

/// A decoder model with its tokenizer and chat template, all from one GGUF file.
pub struct TextModel {
    /// The file it came from.
    pub path: PathBuf,
    /// The network.
    pub model: DecoderModel,
    /// Text ↔ ids.
    pub tokenizer: GgufTokenizer,
    /// Conversation → prompt.
    pub template: ChatTemplate,
}

impl TextModel {
    /// Load a GGUF file (weights memory-mapped).
    pub fn load(path: &Path) -> Result<TextModel> {
        let f = GgufFile::open(path)?;
        let tokenizer = GgufTokenizer::from_gguf(&f)?;
        let template = ChatTemplate::from_gguf(&f, &tokenizer)?;
        Ok(TextModel {
            path: path.to_path_buf(),
            model: DecoderModel::from_gguf(&f)?,
            tokenizer,
            template,
        })
    }

    /// Prompt ids of plain text (BOS as the file says).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, true)
    }

    /// Prompt ids of a conversation through the chat template, ending with the
    /// assistant's cue. Control-token text inside the messages stays text: only the
    /// template's own control tokens are parsed ([`ChatTemplate::encode_messages`]).
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.template
            .encode_messages(&self.tokenizer, messages, true)
    }

    /// [`generate`] with this model and tokenizer: `prompt_ids` into an emptied `cache`,
    /// then new tokens, each piece of text passed to `on_text` as it arrives.
    pub fn generate(
        &self,
        prompt_ids: &[u32],
        opts: &GenerateOptions,
        cache: &mut KvCache,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        generate(
            &self.model,
            &self.tokenizer,
            prompt_ids,
            opts,
            cache,
            on_text,
        )
    }
}

/// How the next token is chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// T: 0 = greedy (argmax); otherwise logits are divided by T before softmax.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Nucleus: keep the most likely tokens up to cumulative probability p (1 = off).
    pub top_p: f32,
    /// Keep tokens with p ≥ min_p · p_max (0 = off).
    pub min_p: f32,
    /// Repetition penalty r (1 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams::greedy()
    }
}

impl SamplingParams {
    /// Argmax every step.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
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
        Ok(())
    }
}

/// The sampler chain with its RNG and scratch space (allocated once, reused each step).
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// (logit, id) of the candidates still in play.
    cand: Vec<(f32, u32)>,
}

impl Sampler {
    /// A sampler seeded with `params.seed`; errors if a parameter is out of range.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        Ok(Sampler {
            rng: StdRng::seed_from_u64(params.seed),
            params,
            cand: Vec::new(),
        })
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Apply the repetition penalty to `logits` for the tokens in the window of `history`.
    pub fn penalize(&self, logits: &mut [f32], history: &[u32]) {
        let r = self.params.repeat_penalty;
        if r == 1.0 {
            return;
        }
        let start = history.len().saturating_sub(self.params.repeat_last_n);
        let recent = &history[start..];
        for (i, &id) in recent.iter().enumerate() {
            if recent[..i].contains(&id) {
                continue; // each distinct token is penalised once
            }
            if let Some(z) = logits.get_mut(id as usize) {
                *z = if *z > 0.0 { *z / r } else { *z * r };
            }
        }
    }

    /// Choose the next token from `logits` (modified in place by the penalty), given the
    /// tokens so far (for the penalty).
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(Error::Argument("no logits to sample from".into()));
        }
        self.penalize(logits, history);
        let p = &self.params;
        if p.temperature == 0.0 {
            return Ok(argmax(logits));
        }
        let cand = &mut self.cand;
        cand.clear();
        cand.extend(logits.iter().enumerate().map(|(i, &z)| (z, i as u32)));
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

/// The index of the largest logit (the first, on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
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

/// What to generate and when to stop.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most new tokens.
    pub max_tokens: usize,
    /// The sampler chain.
    pub sampling: SamplingParams,
    /// Stop when the text contains any of these (the text is cut before it).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// Also return the k largest logits of the first step.
    pub top_logits: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 128,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logits: 0,
        }
    }
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

/// The result of [`generate`].
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
struct StopWatch<'a> {
    stops: &'a [String],
    text: String,
    sent: usize,
}

impl StopWatch<'_> {
    /// Add text; returns Some(stop) if a stop string now appears (text cut before it).
    fn push(&mut self, s: &str) -> Option<String> {
        let from = self.sent;
        self.text.push_str(s);
        for stop in self.stops {
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

/// Generate from `prompt_ids` (the cache is cleared first and holds the whole
/// conversation afterwards). `on_text` receives the text as it becomes final.
pub fn generate(
    model: &DecoderModel,
    tokenizer: &GgufTokenizer,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    cache: &mut KvCache,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation> {
    cache.clear();
    continue_generation(model, tokenizer, prompt_ids, opts, cache, on_text)
}

/// Like [`generate`], but `new_ids` follow what `cache` already holds (a chat turn):
/// only they are prefilled. The repetition penalty sees only this turn.
pub fn continue_generation(
    model: &DecoderModel,
    tokenizer: &GgufTokenizer,
    new_ids: &[u32],
    opts: &GenerateOptions,
    cache: &mut KvCache,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation> {
    let mut sampler = Sampler::new(opts.sampling.clone())?;
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

    let mut history: Vec<u32> = new_ids.to_vec();
    history.reserve(opts.max_tokens + 1);
    let mut ids = Vec::with_capacity(opts.max_tokens);
    let mut stream = tokenizer.stream(true);
    let mut watch = StopWatch {
        stops: &opts.stop,
        text: String::new(),
        sent: 0,
    };
    let t1 = Instant::now();
    let mut steps = 0;
    let stop = loop {
        if ids.len() >= opts.max_tokens {
            break StopReason::MaxTokens;
        }
        let next = sampler.sample(&mut row, &history)?;
        if tokenizer.is_eog(next) && !opts.ignore_eos {
            break StopReason::EndOfGeneration(next);
        }
        ids.push(next);
        history.push(next);
        let piece = stream.push(next)?;
        if let Some(s) = watch.push(&piece) {
            on_text(watch.ready(true));
            break StopReason::StopString(s);
        }
        on_text(watch.ready(false));
        if ids.len() >= opts.max_tokens {
            break StopReason::MaxTokens;
        }
        if cache.len() >= capacity {
            break StopReason::ContextFull(capacity);
        }
        row = model.forward(&[next], Some(cache), true, None)?.into_vec();
        steps += 1;
    };
    let decode_secs = t1.elapsed().as_secs_f64();
    let mut stop = stop;
    if !matches!(stop, StopReason::StopString(_)) {
        if let Some(s) = watch.push(&stream.finish()) {
            stop = StopReason::StopString(s);
        }
        on_text(watch.ready(true));
    }
    Ok(Generation {
        prompt_ids: new_ids.to_vec(),
        ids,
        text: watch.text,
        top_logits: top,
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

    fn sampler(p: SamplingParams) -> Result<Sampler> {
        Sampler::new(p)
    }

    #[test]
    fn greedy_and_top_k_one_pick_the_argmax() -> TestResult {
        let logits = [0.1, 3.0, -1.0, 2.9];
        let mut g = sampler(SamplingParams::greedy())?;
        assert_eq!(g.sample(&mut logits.clone(), &[])?, 1);
        let mut k1 = sampler(SamplingParams {
            temperature: 1.5,
            top_k: 1,
            seed: 3,
            ..SamplingParams::greedy()
        })?;
        for _ in 0..20 {
            assert_eq!(k1.sample(&mut logits.clone(), &[])?, 1);
        }
        Ok(())
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative() -> TestResult {
        let s = sampler(SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        })?;
        let mut z = [4.0, -1.0, 3.0];
        s.penalize(&mut z, &[0, 1, 0]);
        assert_eq!(z, [2.0, -2.0, 3.0]); // token 0 penalised once though it appears twice
        let mut g = sampler(SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        })?;
        assert_eq!(g.sample(&mut [4.0, -1.0, 3.0], &[0])?, 2);
        Ok(())
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() -> TestResult {
        // p ≈ [0.665, 0.245, 0.090]: min_p 0.5 keeps only token 0; top_p 0.6 too.
        let logits = [2.0, 1.0, 0.0];
        for p in [
            SamplingParams {
                temperature: 1.0,
                min_p: 0.5,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 1.0,
                top_p: 0.6,
                ..SamplingParams::greedy()
            },
        ] {
            let mut s = sampler(p)?;
            for _ in 0..50 {
                assert_eq!(s.sample(&mut logits.clone(), &[])?, 0);
            }
        }
        // top_p 0.95 keeps all three: every token appears in 400 draws.
        let mut s = sampler(SamplingParams {
            temperature: 1.0,
            top_p: 0.95,
            seed: 1,
            ..SamplingParams::greedy()
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
        let e = Sampler::new(SamplingParams {
            top_p: 0.0,
            ..SamplingParams::greedy()
        })
        .err()
        .ok_or("expected an error")?
        .to_string();
        assert!(e.contains("--top-p"), "{e}");
        let e = Sampler::new(SamplingParams {
            temperature: -1.0,
            ..SamplingParams::greedy()
        })
        .err()
        .ok_or("expected an error")?
        .to_string();
        assert!(e.contains("--temperature"), "{e}");
        Ok(())
    }

    #[test]
    fn stop_strings_are_held_back_then_cut() {
        let stops = vec!["END".to_string()];
        let mut w = StopWatch {
            stops: &stops,
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
