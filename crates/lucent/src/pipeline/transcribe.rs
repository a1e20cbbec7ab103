//! Speech to text with Whisper: audio → 30-second log-mel windows → the encoder (once
//! per window) → the decoder, one token at a time, under Whisper's decoding rules.
//!
//! What a window's decoding does, as CTranslate2 (faster-whisper's engine) does it, so
//! that greedy ids equal its ids:
//! - **the start-of-transcript sequence**: `<|startoftranscript|>`, then for a
//!   multilingual model the language (`<|en|>`, detected from the first step's logits
//!   over the language tokens when not given) and the task (`<|transcribe|>`), then
//!   `<|notimestamps|>` unless timestamps are wanted;
//! - **suppressed tokens**: `config.json`'s `suppress_ids` at every step and
//!   `suppress_ids_begin` (blank, end of text) at the first;
//! - **timestamp rules** (timestamp mode): `<|notimestamps|>` never; the first token is
//!   a timestamp ≤ `max_initial_timestamp_index` (1 s); timestamps come in pairs (after
//!   one timestamp only another or the end of text, after a pair only text); they never
//!   decrease; and when the probability of all timestamps together exceeds that of the
//!   likeliest text token, a timestamp is taken;
//! - **search**: greedy (temperature 0), sampling at a temperature, or beam search;
//! - **temperature fallback**: a window whose text compresses too well (zlib ratio >
//!   2.4: repetition) or whose average log-probability is below −1 is decoded again at
//!   the next temperature (0, 0.2, …, 1.0), unless the window is judged silent
//!   (`<|nospeech|>` probability > 0.6 and average log-probability below −1);
//! - **silence**: a window whose `<|nospeech|>` probability is above
//!   `no_speech_threshold` (0.6), unless its average log-probability is above
//!   `logprob_threshold` (−1), gives no text: it is skipped, and the transcript says so
//!   ([`Transcript::silent`], [`Transcript::notes`]). These are openai-whisper's
//!   `transcribe()` rules and defaults (its `needs_fallback` and `should_skip`);
//! - **long audio**: windows at `seek`; in timestamp mode the next window starts at the
//!   last complete segment's end, so speech cut by a window's end is heard again whole.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rand::{Rng, SeedableRng};

use crate::autograd::no_grad;
use crate::io::ctranslate2::{Ct2Folder, WhisperConfig};
use crate::io::fetch;
use crate::io::mel::{MelStream, N_FRAMES};
use crate::io::tokenizer::HfTokenizer;
use crate::model::family::whisper;
use crate::model::EncoderDecoderModel;
use crate::nn::KvCache;
use crate::ops::screened_head::HeadRules;
use crate::pipeline::constrain::{Constraint, Vocabulary};
use crate::pipeline::generate::{log_softmax, logsumexp, LogitRules, Sampler, Sampling};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Seconds per timestamp token step (20 ms).
pub const TIME_PRECISION: f64 = 0.02;
/// Seconds per mel frame (10 ms).
pub const FRAME_SECONDS: f64 = 0.01;

/// The special tokens of a Whisper vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `<|endoftext|>`.
    pub eot: u32,
    /// `<|startoftranscript|>`.
    pub sot: u32,
    /// `<|startofprev|>` (before the previous window's text).
    pub sot_prev: Option<u32>,
    /// `<|notimestamps|>`.
    pub no_timestamps: u32,
    /// `<|nospeech|>` (or `<|nocaptions|>` in older vocabularies).
    pub no_speech: Option<u32>,
    /// `<|transcribe|>`.
    pub transcribe: Option<u32>,
    /// `<|translate|>`.
    pub translate: Option<u32>,
    /// The first timestamp, `<|0.00|>` (= `no_timestamps` + 1).
    pub timestamp_begin: u32,
    /// The last id of the vocabulary (the last timestamp).
    pub timestamp_end: u32,
}

impl SpecialTokens {
    /// The special tokens of `tokenizer`, for a model of `vocab` rows.
    pub fn new(tokenizer: &HfTokenizer, vocab: usize) -> Result<Self> {
        let need = |t: &str| {
            tokenizer
                .token_to_id(t)
                .ok_or_else(|| Error::Tokenizer(format!("the Whisper tokenizer has no {t} token")))
        };
        let no_timestamps = need("<|notimestamps|>")?;
        let timestamp_end = u32::try_from(vocab.saturating_sub(1)).unwrap_or(u32::MAX);
        if timestamp_end <= no_timestamps {
            return Err(Error::Config(format!(
                "the model's vocabulary ({vocab}) has no room for timestamp tokens after <|notimestamps|> ({no_timestamps})"
            )));
        }
        Ok(SpecialTokens {
            eot: need("<|endoftext|>")?,
            sot: need("<|startoftranscript|>")?,
            sot_prev: tokenizer.token_to_id("<|startofprev|>"),
            no_timestamps,
            no_speech: tokenizer
                .token_to_id("<|nospeech|>")
                .or_else(|| tokenizer.token_to_id("<|nocaptions|>")),
            transcribe: tokenizer.token_to_id("<|transcribe|>"),
            translate: tokenizer.token_to_id("<|translate|>"),
            timestamp_begin: no_timestamps + 1,
            timestamp_end,
        })
    }

    /// Whether `id` is a timestamp.
    pub fn is_timestamp(&self, id: u32) -> bool {
        id >= self.timestamp_begin
    }
}

/// How many of a window's `total` encoder positions (20 ms each) a view of `seconds`
/// of audio shows: the audio's own and half a second after; the rest of the 30-second
/// window is padding. `lucent attention` and the explorer crop by it.
pub fn audio_positions(seconds: f64, total: usize) -> usize {
    ((seconds.max(0.0) / 0.02).ceil() as usize + 25).min(total)
}

/// Transcribe in the spoken language, or translate into English.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Task {
    /// `<|transcribe|>`.
    #[default]
    Transcribe,
    /// `<|translate|>`.
    Translate,
}

/// How one window is decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeOptions {
    /// Timestamp tokens and their rules (else `<|notimestamps|>` in the prompt).
    pub timestamps: bool,
    /// 0: greedy (or beam search); above: sampling at this temperature.
    pub temperature: f32,
    /// Beam width (1: greedy); used at temperature 0.
    pub beam_size: usize,
    /// The first timestamp is at most this many steps of 20 ms (50: 1 s).
    pub max_initial_timestamp_index: u32,
    /// Suppress blank and end of text as the first token (`suppress_ids_begin`).
    pub suppress_blank: bool,
    /// Most tokens generated in a window (Whisper: 224, half the decoder's context).
    pub max_tokens: usize,
    /// OpenAI's `logit_bias`, the first link of the sampler's chain (before Whisper's
    /// rules): (token id, bias in [-100, 100]); -100 bans the token.
    pub logit_bias: Vec<(u32, f32)>,
    /// The text must match this regex, grammar or JSON schema (None = free text): the
    /// chain's mask, before Whisper's rules. Timestamp tokens are outside the
    /// tokenizer's vocabulary and so never allowed: use it without timestamps.
    pub constrain: Option<Constraint>,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            timestamps: true,
            temperature: 0.0,
            beam_size: 1,
            max_initial_timestamp_index: 50,
            suppress_blank: true,
            max_tokens: 224,
            logit_bias: Vec::new(),
            constrain: None,
        }
    }
}

/// What a window's decoding gave.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowResult {
    /// The generated ids, without the prompt and the end of text.
    pub tokens: Vec<u32>,
    /// Σ log p of the generated ids and the end of text (under the filtered logits).
    pub sum_logprob: f32,
    /// sum_logprob / (tokens + 1).
    pub avg_logprob: f32,
    /// p(`<|nospeech|>`) at the start-of-transcript position.
    pub no_speech_prob: f32,
    /// The temperature it was decoded at.
    pub temperature: f32,
    /// Bytes of its text over bytes of their zlib compression.
    pub compression_ratio: f32,
    /// Its text (timestamps left out).
    pub text: String,
}

/// One timed piece of a transcript.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Segment {
    /// Start, seconds from the beginning of the audio.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
    /// Its text.
    pub text: String,
    /// Its token ids (timestamps included).
    pub tokens: Vec<u32>,
    /// Average log-probability of its window's decoding.
    pub avg_logprob: f32,
    /// Its window's `<|nospeech|>` probability.
    pub no_speech_prob: f32,
    /// The temperature its window was decoded at.
    pub temperature: f32,
    /// Its window's compression ratio.
    pub compression_ratio: f32,
    /// Its words with their times (with `TranscribeOptions::word_timestamps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<crate::pipeline::words::Word>>,
}

/// A window judged silent and left out of the transcript (module doc: silence).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SilentWindow {
    /// Start, seconds from the beginning of the audio.
    pub start: f64,
    /// End, seconds (the window's end, or the audio's).
    pub end: f64,
    /// Its `<|nospeech|>` probability (above `no_speech_threshold`).
    pub no_speech_prob: f32,
    /// The average log-probability of its decoding (not above `logprob_threshold`).
    pub avg_logprob: f32,
}

/// A whole transcript.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Transcript {
    /// The language transcribed (given or detected), for a multilingual model.
    pub language: Option<String>,
    /// All segments' text.
    pub text: String,
    /// The segments, in order.
    pub segments: Vec<Segment>,
    /// Seconds of audio.
    pub duration: f64,
    /// The audio file's own sample rate (Hz), before it was resampled to 16 kHz.
    pub sample_rate: u32,
    /// The windows judged silent, which gave no text.
    pub silent: Vec<SilentWindow>,
    /// What a reader should know about this transcript, one line each: each silent
    /// window skipped, and audio sampled below [`LOW_SAMPLE_RATE`].
    pub notes: Vec<String>,
}

/// Below this sample rate (Hz) the audio holds nothing above half of it: Whisper hears
/// speech without its consonants, and often writes something else. A transcript of
/// such audio carries a note.
pub const LOW_SAMPLE_RATE: u32 = 8_000;

/// The note for audio sampled at `rate` Hz, when it is below [`LOW_SAMPLE_RATE`].
pub fn sample_rate_note(rate: u32) -> Option<String> {
    (rate < LOW_SAMPLE_RATE).then(|| {
        format!(
            "the audio is sampled at {rate} Hz: below {LOW_SAMPLE_RATE} Hz it holds nothing above {} Hz, and the transcript may be wrong (Whisper hears 16 kHz audio)",
            rate / 2
        )
    })
}

/// How a file is transcribed.
#[derive(Clone, Debug, PartialEq)]
pub struct TranscribeOptions {
    /// The spoken language (`en`, `de`, …); None: detected in the first window.
    pub language: Option<String>,
    /// Transcribe or translate.
    pub task: Task,
    /// Timestamp mode (segments timed by the model) or one segment per window.
    pub timestamps: bool,
    /// Beam width at temperature 0 (1: greedy).
    pub beam_size: usize,
    /// Temperatures tried in turn while a window's decoding fails the thresholds.
    pub temperatures: Vec<f32>,
    /// Fall back when the text's compression ratio exceeds this (repetition).
    pub compression_ratio_threshold: Option<f32>,
    /// Fall back when the average log-probability is below this; a window with a
    /// high `<|nospeech|>` probability is silent unless its average log-probability is
    /// above this.
    pub logprob_threshold: Option<f32>,
    /// With a `<|nospeech|>` probability above this and an average log-probability not
    /// above `logprob_threshold`, the window is silence: skipped (module doc).
    pub no_speech_threshold: Option<f32>,
    /// Seed of the sampler (temperatures above 0).
    pub seed: u64,
    /// Give each segment its words with times (cross-attention of the alignment heads
    /// and dynamic time warping, `pipeline::words`).
    pub word_timestamps: bool,
}

impl Default for TranscribeOptions {
    fn default() -> Self {
        TranscribeOptions {
            language: None,
            task: Task::Transcribe,
            timestamps: true,
            beam_size: 1,
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            compression_ratio_threshold: Some(2.4),
            logprob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            seed: 0,
            word_timestamps: false,
        }
    }
}

/// A Whisper model ready to transcribe: the generic encoder-decoder, its decoding
/// settings (`config.json`) and its tokenizer.
pub struct Transcriber {
    /// The encoder-decoder (with its convolutional front-end).
    pub model: EncoderDecoderModel,
    /// `config.json`: suppressed ids, language ids, alignment heads.
    pub whisper: WhisperConfig,
    /// The tokenizer (`tokenizer.json`; timestamps are named by the decoder).
    pub tokenizer: HfTokenizer,
    /// Its special tokens.
    pub tokens: SpecialTokens,
    /// Mel bins the front-end reads.
    pub n_mels: usize,
    /// The vocabulary as the grammar engine sees it, built for the first constrained
    /// window ([`Transcriber::vocabulary`]).
    vocabulary: OnceLock<Arc<Vocabulary>>,
}

impl std::fmt::Debug for Transcriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcriber")
            .field("d_model", &self.model.config.d_model)
            .field("n_mels", &self.n_mels)
            .field("multilingual", &self.is_multilingual())
            .finish()
    }
}

/// Bytes of `text` over bytes of its zlib compression (Whisper's repetition measure).
pub fn compression_ratio(text: &str) -> f32 {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return 0.0;
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let compressed = z.write_all(bytes).and_then(|_| z.finish());
    match compressed {
        Ok(c) if !c.is_empty() => bytes.len() as f32 / c.len() as f32,
        _ => 0.0,
    }
}

/// One hypothesis of a decoding: its ids so far, its cache, its log-probability and its
/// sampler (the chain's state: a constraint fed this hypothesis's tokens).
#[derive(Clone)]
struct Hypothesis {
    tokens: Vec<u32>,
    cache: KvCache,
    logits: Vec<f32>,
    sum_logprob: f32,
    sampler: Sampler,
}

/// Whisper's decoding rules (module doc) as a link of the sampler's chain
/// ([`LogitRules`]): suppressed ids, the first step's ids, and in timestamp mode the
/// timestamp rules. The history it reads is the window's generated ids (after the
/// prompt).
#[derive(Clone, Debug, PartialEq)]
pub struct WhisperRules {
    /// The vocabulary's special tokens.
    pub tokens: SpecialTokens,
    /// Ids never generated (`config.json`'s `suppress_ids`).
    pub suppress_ids: Vec<u32>,
    /// Ids not generated first (`suppress_ids_begin`), with `suppress_blank`.
    pub suppress_ids_begin: Vec<u32>,
    /// Timestamp mode: the timestamp rules apply.
    pub timestamps: bool,
    /// Suppress `suppress_ids_begin` at the first step.
    pub suppress_blank: bool,
    /// The first timestamp is at most this many steps of 20 ms.
    pub max_initial_timestamp_index: u32,
}

impl WhisperRules {
    /// Apply the rules to one step's logits; `generated` are the ids generated so far
    /// (after the prompt). Suppressed logits become −∞.
    pub fn apply_to(&self, logits: &mut [f32], generated: &[u32]) {
        let t = &self.tokens;
        let v = logits.len();
        let off = |range: std::ops::Range<usize>, logits: &mut [f32]| {
            for x in &mut logits[range.start.min(v)..range.end.min(v)] {
                *x = f32::NEG_INFINITY;
            }
        };
        for &id in &self.suppress_ids {
            off(id as usize..id as usize + 1, logits);
        }
        if generated.is_empty() && self.suppress_blank {
            for &id in &self.suppress_ids_begin {
                off(id as usize..id as usize + 1, logits);
            }
        }
        if !self.timestamps {
            return;
        }
        let (tb, te, eot) = (
            t.timestamp_begin as usize,
            t.timestamp_end as usize,
            t.eot as usize,
        );
        off(
            t.no_timestamps as usize..t.no_timestamps as usize + 1,
            logits,
        );
        let mut check_timestamp_mass = false;
        match generated {
            [] => {
                off(0..tb, logits);
                off(
                    tb + self.max_initial_timestamp_index as usize + 1..te + 1,
                    logits,
                );
            }
            [.., last] => {
                if t.is_timestamp(*last) {
                    let penultimate = if generated.len() >= 2 {
                        generated[generated.len() - 2]
                    } else {
                        *last
                    };
                    if t.is_timestamp(penultimate) {
                        off(tb..te + 1, logits); // after a pair: text
                    } else {
                        off(0..eot, logits); // a segment's end: its pair or the end
                        check_timestamp_mass = true;
                    }
                } else {
                    check_timestamp_mass = true;
                }
                // Timestamps never decrease.
                if let Some(&last_ts) = generated.iter().rev().find(|&&id| t.is_timestamp(id)) {
                    off(tb..last_ts as usize, logits);
                }
            }
        }
        if check_timestamp_mass {
            let lp = log_softmax(logits);
            let text_max = lp[..tb.min(v)]
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max);
            if logsumexp(&lp[tb.min(v)..(te + 1).min(v)]) > text_max {
                off(0..tb, logits);
            }
        }
    }
}

impl LogitRules for WhisperRules {
    fn apply(&self, logits: &mut [f32], history: &[u32]) -> Result<()> {
        self.apply_to(logits, history);
        Ok(())
    }
}

impl Transcriber {
    /// Open a Whisper model by name (`whisper-tiny.en`, `whisper-base`; fetched on first
    /// use) or as a CTranslate2 folder.
    pub fn open(spec: &str) -> Result<Self> {
        let dir = fetch::resolve(spec, &mut fetch::Silent)?;
        Self::load(&dir)
    }

    /// Load a CTranslate2 Whisper folder (`model.bin`, `config.json`, `tokenizer.json`).
    pub fn load(dir: &Path) -> Result<Self> {
        let folder = Ct2Folder::open(dir)?;
        let whisper = folder.whisper_config()?;
        let mut model = whisper::load(&folder)?;
        let n_mels = model.front_end.as_ref().map_or(0, |f| f.in_channels());
        let tokens = SpecialTokens::new(&folder.tokenizer, model.config.vocab_size)?;
        // An int8 head computes the special and timestamp tokens exactly at every step
        // (the timestamp rules mask them as whole ranges) and leaves the suppressed ids
        // in int8 (every step masks them).
        let suppressed: Vec<usize> = whisper.suppress_ids.iter().map(|&i| i as usize).collect();
        model.head_rules =
            HeadRules::new(tokens.eot as usize..model.config.vocab_size, &suppressed);
        Ok(Transcriber {
            model,
            whisper,
            tokenizer: folder.tokenizer,
            tokens,
            n_mels,
            vocabulary: OnceLock::new(),
        })
    }

    /// Compute the model's weight products in `precision` (the encoder's, the decoder's
    /// and the vocabulary head's; [`EncoderDecoderModel::set_precision`]): copies made
    /// once, here.
    pub fn set_precision(&mut self, precision: crate::Precision) {
        self.model.set_precision(precision);
    }

    /// The precision its products are computed in.
    pub fn precision(&self) -> crate::Precision {
        self.model.precision
    }

    /// Whether the model knows languages (its prompt names one): Whisper's multilingual
    /// vocabulary has 51865 tokens (and more for large-v3), English-only ones 51864.
    pub fn is_multilingual(&self) -> bool {
        self.model.config.vocab_size >= 51865 && !self.whisper.lang_ids.is_empty()
    }

    /// The id of language `code` (`en`), or an error listing what the model knows.
    pub fn language_id(&self, code: &str) -> Result<u32> {
        let id = self
            .tokenizer
            .token_to_id(&format!("<|{code}|>"))
            .filter(|id| self.whisper.lang_ids.contains(id));
        id.ok_or_else(|| {
            Error::Argument(format!(
                "--language {code}: not a language of this model ({} languages, e.g. en, de, fr, es, ja)",
                self.whisper.lang_ids.len()
            ))
        })
    }

    /// The start-of-transcript sequence: SOT, then (multilingual) language and task,
    /// then `<|notimestamps|>` unless `timestamps`.
    pub fn prompt(&self, language: Option<&str>, task: Task, timestamps: bool) -> Result<Vec<u32>> {
        let t = &self.tokens;
        let mut p = vec![t.sot];
        if self.is_multilingual() {
            let lang = language.ok_or_else(|| {
                Error::Argument(
                    "a multilingual model's prompt needs a language (detect it first)".into(),
                )
            })?;
            p.push(self.language_id(lang)?);
            let task_id = match task {
                Task::Transcribe => t.transcribe,
                Task::Translate => t.translate,
            };
            p.push(task_id.ok_or_else(|| {
                Error::Tokenizer(format!("the tokenizer has no token for the task {task:?}"))
            })?);
        } else if let Some(l) = language.filter(|l| *l != "en") {
            return Err(Error::Argument(format!(
                "--language {l}: this model is English-only; use a multilingual model such as whisper-base"
            )));
        } else if task == Task::Translate {
            return Err(Error::Argument(
                "translation needs a multilingual model such as whisper-base".into(),
            ));
        }
        if !timestamps {
            p.push(t.no_timestamps);
        }
        Ok(p)
    }

    /// The encoder's output for one window of features.
    ///
    /// # Shapes
    /// features: (n_mels, 3000) → (1, 1500, d)
    pub fn encode(&self, features: &Tensor) -> Result<Tensor> {
        let [n_mels, frames] = features.dims()?;
        let x = features.reshape(&[1, n_mels, frames])?; // (1, n_mels, frames)
        no_grad(|| self.model.encode_features(&x, None))
    }

    /// A decoder cache for one sequence of Whisper's context.
    fn new_cache(&self) -> KvCache {
        self.model.new_cache(1, self.model.config.max_positions)
    }

    /// Decoder logits of `ids` after what `cache` holds: one row per id.
    ///
    /// # Shapes
    /// memory: (1, s, d) → (ids.len(), V)
    fn step(&self, ids: &[u32], memory: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        if cache.len() + ids.len() > self.model.config.max_positions {
            return Err(Error::Argument(format!(
                "the decoder's context is {} positions; {} were asked for",
                self.model.config.max_positions,
                cache.len() + ids.len()
            )));
        }
        let tgt = vec![ids.iter().map(|&i| i as usize).collect::<Vec<_>>()];
        let logits = no_grad(|| self.model.decode(&tgt, memory, None, Some(cache), None))?; // (1, t, V)
        let v = self.model.config.vocab_size;
        logits.reshape(&[ids.len(), v])
    }

    /// The language probabilities of a window (softmax of the first step's logits over
    /// the language tokens), likeliest first.
    pub fn detect_language(&self, memory: &Tensor) -> Result<Vec<(String, f32)>> {
        if !self.is_multilingual() {
            return Err(Error::Argument(
                "language detection needs a multilingual model".into(),
            ));
        }
        let mut cache = self.new_cache();
        let logits = self.step(&[self.tokens.sot], memory, &mut cache)?;
        let row = logits.row(0);
        let ids = &self.whisper.lang_ids;
        let sel: Vec<f32> = ids.iter().map(|&i| row[i as usize]).collect();
        let lp = log_softmax(&sel);
        let mut out: Vec<(String, f32)> = ids
            .iter()
            .zip(lp)
            .map(|(&id, l)| {
                let tok = self.tokenizer.id_to_token(id).unwrap_or_default();
                let code = tok
                    .trim_start_matches("<|")
                    .trim_end_matches("|>")
                    .to_string();
                (code, l.exp())
            })
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(out)
    }

    /// Whisper's decoding rules for windows decoded with `opts` ([`WhisperRules`]).
    pub fn rules(&self, opts: &DecodeOptions) -> WhisperRules {
        WhisperRules {
            tokens: self.tokens.clone(),
            suppress_ids: self.whisper.suppress_ids.clone(),
            suppress_ids_begin: self.whisper.suppress_ids_begin.clone(),
            timestamps: opts.timestamps,
            suppress_blank: opts.suppress_blank,
            max_initial_timestamp_index: opts.max_initial_timestamp_index,
        }
    }

    /// Apply the decoding rules to one step's logits (module doc): suppressed ids, the
    /// first step's ids, and in timestamp mode the timestamp rules; `generated` are the
    /// ids generated so far (after the prompt). Suppressed logits become −∞.
    pub fn apply_rules(&self, logits: &mut [f32], generated: &[u32], opts: &DecodeOptions) {
        self.rules(opts).apply_to(logits, generated);
    }

    /// The tokenizer's vocabulary as the grammar engine sees it, built on first use and
    /// kept (a window's constraint compiles against it).
    pub fn vocabulary(&self) -> Result<Arc<Vocabulary>> {
        if let Some(v) = self.vocabulary.get() {
            return Ok(v.clone());
        }
        let v = Arc::new(Vocabulary::new(&self.tokenizer)?);
        Ok(self.vocabulary.get_or_init(|| v).clone())
    }

    /// The sampler of a window decoded with `opts`: the one chain of every decoding loop
    /// (`pipeline::generate`), with `opts`' logit bias and constraint, then Whisper's
    /// rules, at `opts.temperature` (greedy at 0, else a draw from softmax(z / T) over
    /// every token the links leave: no top-k / top-p / min-p, Whisper samples from the
    /// whole distribution), seeded with `seed`.
    pub fn sampler(&self, opts: &DecodeOptions, seed: u64) -> Result<Sampler> {
        let sampling = Sampling {
            temperature: opts.temperature,
            seed,
            logit_bias: opts.logit_bias.clone(),
            constrain: opts.constrain.clone(),
            ..Sampling::greedy()
        };
        let vocab = match &opts.constrain {
            Some(_) => Some(self.vocabulary()?),
            None => None,
        };
        Ok(Sampler::with_vocabulary(&sampling, vocab.as_deref())?
            .with_rules(Arc::new(self.rules(opts))))
    }

    /// The first step's logits of `prompt` after the rules (what CTranslate2 returns as
    /// its first `logits_vocab`), and the logits at the start-of-transcript position.
    pub fn first_step(
        &self,
        memory: &Tensor,
        prompt: &[u32],
        opts: &DecodeOptions,
    ) -> Result<Vec<f32>> {
        let mut cache = self.new_cache();
        let logits = self.step(prompt, memory, &mut cache)?;
        let mut row = logits.row(prompt.len() - 1).to_vec();
        self.apply_rules(&mut row, &[], opts);
        Ok(row)
    }

    /// Decode one window: the prompt, then tokens until the end of text (greedy, sampled
    /// or by beam search).
    pub fn decode_window(
        &self,
        memory: &Tensor,
        prompt: &[u32],
        opts: &DecodeOptions,
        rng: &mut impl Rng,
    ) -> Result<WindowResult> {
        if prompt.is_empty() {
            return Err(Error::Argument(
                "an empty prompt (it starts with <|startoftranscript|>)".into(),
            ));
        }
        let mut cache = self.new_cache();
        let logits = self.step(prompt, memory, &mut cache)?;
        let sot_pos = prompt
            .iter()
            .position(|&i| i == self.tokens.sot)
            .unwrap_or(0);
        let no_speech_prob = match self.tokens.no_speech {
            Some(ns) => log_softmax(logits.row(sot_pos))[ns as usize].exp(),
            None => 0.0,
        };
        let max_tokens = opts
            .max_tokens
            .min(self.model.config.max_positions.saturating_sub(prompt.len()));
        let beam = opts.beam_size > 1 && opts.temperature == 0.0;
        // Only a sampled window draws from the transcription's RNG (its sampler's seed),
        // so that a seed gives the same transcript.
        let seed = if beam { 0 } else { rng.random() };
        let start = Hypothesis {
            tokens: Vec::new(),
            cache,
            logits: logits.row(prompt.len() - 1).to_vec(),
            sum_logprob: 0.0,
            sampler: self.sampler(opts, seed)?,
        };
        let (tokens, sum_logprob) = if beam {
            self.beam_search(memory, start, opts, max_tokens)?
        } else {
            self.sample(memory, start, max_tokens)?
        };
        let text = self.text(&tokens)?;
        Ok(WindowResult {
            avg_logprob: sum_logprob / (tokens.len() + 1) as f32,
            sum_logprob,
            no_speech_prob,
            temperature: opts.temperature,
            compression_ratio: compression_ratio(&text),
            text,
            tokens,
        })
    }

    /// Greedy (temperature 0) or sampled decoding of one hypothesis: each step is the
    /// sampler's one step (logit bias, mask, Whisper's rules, the choice), and the
    /// window's score sums the chosen tokens' log-probabilities under what the links
    /// left.
    fn sample(
        &self,
        memory: &Tensor,
        start: Hypothesis,
        max_tokens: usize,
    ) -> Result<(Vec<u32>, f32)> {
        let Hypothesis {
            mut tokens,
            mut cache,
            mut logits,
            mut sum_logprob,
            mut sampler,
        } = start;
        for _ in 0..max_tokens {
            let choice = sampler.step(&mut logits, &tokens)?;
            sum_logprob += choice.logprob;
            let next = choice.id;
            if next == self.tokens.eot {
                break;
            }
            tokens.push(next);
            if tokens.len() == max_tokens {
                break;
            }
            logits = self.step(&[next], memory, &mut cache)?.row(0).to_vec();
        }
        Ok((tokens, sum_logprob))
    }

    /// Beam search (Whisper's: each step keeps the `beam_size` likeliest continuations;
    /// finished ones are collected until there are `beam_size`; the best by average
    /// log-probability wins). Each beam's candidates come from its sampler
    /// ([`Sampler::candidates`]): they pass the same links as a greedy step's.
    fn beam_search(
        &self,
        memory: &Tensor,
        start: Hypothesis,
        opts: &DecodeOptions,
        max_tokens: usize,
    ) -> Result<(Vec<u32>, f32)> {
        let n = opts.beam_size;
        let mut beams = vec![start];
        let mut finished: Vec<(Vec<u32>, f32)> = Vec::new();
        for _ in 0..max_tokens {
            let mut candidates: Vec<(usize, u32, f32)> = Vec::new(); // (beam, id, score)
            for (bi, h) in beams.iter_mut().enumerate() {
                for (id, lp) in h.sampler.candidates(&mut h.logits, &h.tokens, n + 1)? {
                    candidates.push((bi, id, h.sum_logprob + lp));
                }
            }
            candidates.sort_by(|a, b| b.2.total_cmp(&a.2));
            let mut next = Vec::new();
            for (bi, id, score) in candidates {
                if id == self.tokens.eot {
                    if finished.len() < n {
                        finished.push((beams[bi].tokens.clone(), score));
                    }
                } else if next.len() < n {
                    let mut h = beams[bi].clone();
                    h.tokens.push(id);
                    h.sum_logprob = score;
                    h.sampler.accept(id)?;
                    next.push(h);
                }
                if next.len() >= n && finished.len() >= n {
                    break;
                }
            }
            if finished.len() >= n || next.is_empty() {
                break;
            }
            for h in &mut next {
                if h.tokens.len() < max_tokens {
                    let last = h.tokens[h.tokens.len() - 1];
                    h.logits = self.step(&[last], memory, &mut h.cache)?.row(0).to_vec();
                }
            }
            beams = next;
            if beams.iter().all(|h| h.tokens.len() >= max_tokens) {
                break;
            }
        }
        if finished.is_empty() {
            finished = beams
                .into_iter()
                .map(|h| (h.tokens, h.sum_logprob))
                .collect();
        }
        let score = |(t, s): &(Vec<u32>, f32)| s / (t.len() + 1) as f32;
        let best = finished
            .into_iter()
            .max_by(|a, b| score(a).total_cmp(&score(b)))
            .ok_or_else(|| Error::Argument("beam search found no hypothesis".into()))?;
        Ok(best)
    }

    /// The text of `ids` (timestamps and special tokens left out).
    pub fn text(&self, ids: &[u32]) -> Result<String> {
        let text: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&i| i < self.tokens.eot)
            .collect();
        self.tokenizer.decode(&text, true)
    }

    /// Decode a window at each temperature in turn until one passes the thresholds
    /// (module doc).
    pub fn decode_with_fallback(
        &self,
        memory: &Tensor,
        prompt: &[u32],
        opts: &TranscribeOptions,
        rng: &mut impl Rng,
    ) -> Result<WindowResult> {
        let temps: &[f32] = if opts.temperatures.is_empty() {
            &[0.0]
        } else {
            &opts.temperatures
        };
        let mut last = None;
        for &temperature in temps {
            let d = DecodeOptions {
                timestamps: opts.timestamps,
                temperature,
                beam_size: opts.beam_size.max(1),
                ..DecodeOptions::default()
            };
            let r = self.decode_window(memory, prompt, &d, rng)?;
            let too_repetitive = opts
                .compression_ratio_threshold
                .is_some_and(|t| r.compression_ratio > t);
            let too_unlikely = opts.logprob_threshold.is_some_and(|t| r.avg_logprob < t);
            // Silence needs no other temperature: a high <|nospeech|> probability and a
            // low log-probability (openai-whisper's rule).
            let silent = opts
                .no_speech_threshold
                .is_some_and(|t| r.no_speech_prob > t)
                && too_unlikely;
            let done = !(too_repetitive || too_unlikely) || silent;
            last = Some(r);
            if done {
                break;
            }
        }
        last.ok_or_else(|| Error::Argument("no temperature to decode at".into()))
    }

    /// Transcribe a WAV file (any common rate and channel count), window by window in
    /// bounded memory.
    pub fn transcribe(&self, path: &Path, opts: &TranscribeOptions) -> Result<Transcript> {
        let rate = crate::io::AudioStream::open(path)?.info().sample_rate;
        let mut stream = MelStream::open_wav(path, self.n_mels)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
        let mut segments = Vec::new();
        let mut silent_windows = Vec::new();
        let mut seek = 0usize;
        let mut language = opts.language.clone();
        let mut last_speech = 0.0f64;
        while let Some(window) = stream.window(seek)? {
            let memory = self.encode(&window.features)?;
            if self.is_multilingual() && language.is_none() {
                let langs = self.detect_language(&memory)?;
                language = langs.first().map(|(l, _)| l.clone());
            }
            let prompt = self.prompt(language.as_deref(), opts.task, opts.timestamps)?;
            let r = self.decode_with_fallback(&memory, &prompt, opts, &mut rng)?;
            let segment_frames = window.frames.max(1);
            let offset = seek as f64 * FRAME_SECONDS;
            // Skipped as silence unless the log-probability is high enough despite the
            // <|nospeech|> probability (openai-whisper's rule).
            let silent = opts
                .no_speech_threshold
                .is_some_and(|t| r.no_speech_prob > t)
                && !opts.logprob_threshold.is_some_and(|t| r.avg_logprob > t);
            if silent {
                silent_windows.push(SilentWindow {
                    start: offset,
                    end: (seek + segment_frames) as f64 * FRAME_SECONDS,
                    no_speech_prob: r.no_speech_prob,
                    avg_logprob: r.avg_logprob,
                });
                seek += segment_frames;
                continue;
            }
            let first_new = segments.len();
            let advance = self.segments(&r, offset, segment_frames, &mut segments)?;
            if opts.word_timestamps {
                let sot_sequence: Vec<u32> = prompt
                    .iter()
                    .copied()
                    .filter(|&id| id != self.tokens.no_timestamps)
                    .collect();
                let lang = if self.is_multilingual() {
                    language.as_deref()
                } else {
                    Some("en")
                };
                self.add_word_timestamps(
                    &mut segments[first_new..],
                    &memory,
                    &sot_sequence,
                    segment_frames.min(N_FRAMES),
                    offset,
                    lang,
                    &mut last_speech,
                )?;
            }
            seek += advance.max(1);
        }
        let duration = stream.content_frames().unwrap_or(seek) as f64 * FRAME_SECONDS;
        let text = segments
            .iter()
            .map(|s: &Segment| s.text.as_str())
            .collect::<String>();
        let mut notes: Vec<String> = sample_rate_note(rate).into_iter().collect();
        for w in &mut silent_windows {
            w.end = w.end.min(duration.max(w.start));
            let logprob = match opts.logprob_threshold {
                Some(t) => format!(" ≤ {t}"),
                None => String::new(),
            };
            notes.push(format!(
                "{:.2}–{:.2} s: no speech (p(<|nospeech|>) {:.2} > {}, average log-probability {:.2}{logprob}): no text",
                w.start,
                w.end,
                w.no_speech_prob,
                opts.no_speech_threshold.unwrap_or(f32::NAN),
                w.avg_logprob
            ));
        }
        Ok(Transcript {
            language: if self.is_multilingual() {
                language
            } else {
                Some("en".into())
            },
            text,
            segments,
            duration,
            sample_rate: rate,
            silent: silent_windows,
            notes,
        })
    }

    /// Cut a window's tokens into segments (pairs of timestamps around text) and say how
    /// many frames the next window moves on (to the last complete segment's end).
    fn segments(
        &self,
        r: &WindowResult,
        offset: f64,
        segment_frames: usize,
        out: &mut Vec<Segment>,
    ) -> Result<usize> {
        let t = &self.tokens;
        let toks = &r.tokens;
        let seg = |ids: &[u32], start: f64, end: f64| -> Result<Segment> {
            Ok(Segment {
                start,
                end,
                text: self.text(ids)?,
                tokens: ids.to_vec(),
                avg_logprob: r.avg_logprob,
                no_speech_prob: r.no_speech_prob,
                temperature: r.temperature,
                compression_ratio: r.compression_ratio,
                words: None,
            })
        };
        let time = |id: u32| offset + f64::from(id - t.timestamp_begin) * TIME_PRECISION;
        let is_ts: Vec<bool> = toks.iter().map(|&i| t.is_timestamp(i)).collect();
        let single_ending = is_ts.len() >= 2 && !is_ts[is_ts.len() - 2] && is_ts[is_ts.len() - 1];
        let mut slices: Vec<usize> = (1..toks.len())
            .filter(|&i| is_ts[i - 1] && is_ts[i])
            .collect();
        if !slices.is_empty() {
            if single_ending {
                slices.push(toks.len());
            }
            let mut last = 0;
            for &cut in &slices {
                let piece = &toks[last..cut];
                if let (Some(&a), Some(&b)) = (piece.first(), piece.last()) {
                    if t.is_timestamp(a) && t.is_timestamp(b) {
                        out.push(seg(piece, time(a), time(b))?);
                    }
                }
                last = cut;
            }
            if single_ending {
                return Ok(segment_frames);
            }
            let last_ts = toks[last - 1] - t.timestamp_begin;
            // A timestamp step is 20 ms, two mel frames.
            return Ok(last_ts as usize * 2);
        }
        let mut duration = segment_frames as f64 * FRAME_SECONDS;
        if let Some(&last_ts) = toks.iter().rev().find(|&&i| t.is_timestamp(i)) {
            if last_ts != t.timestamp_begin {
                duration = f64::from(last_ts - t.timestamp_begin) * TIME_PRECISION;
            }
        }
        if toks.iter().any(|&i| i < t.eot) {
            out.push(seg(toks, offset, offset + duration)?);
        }
        Ok(segment_frames)
    }
}

/// Frames in a 30-second window (re-exported for callers sizing windows).
pub const WINDOW_FRAMES: usize = N_FRAMES;

impl Transcriber {
    /// Trace the first 30-second window of a WAV file: decode it greedily (no
    /// timestamps), then run the prompt and the transcript through the decoder once more
    /// with `trace`, so that it holds the encoder's and the decoder's self-attention and
    /// the cross-attention of every generated token over the 1500 audio positions
    /// (`decoder.layer.i.cross_attn.weights`: (1, h, t, 1500)). Returns the decoder's
    /// token labels (prompt and transcript).
    pub fn trace_audio(&self, path: &Path, trace: &mut crate::nn::Trace) -> Result<Vec<String>> {
        let mut stream = MelStream::open_wav(path, self.n_mels)?;
        let window = stream
            .window(0)?
            .ok_or_else(|| Error::Argument(format!("{}: no audio to trace", path.display())))?;
        let memory = self.encode(&window.features)?;
        let language = if self.is_multilingual() {
            self.detect_language(&memory)?
                .first()
                .map(|(l, _)| l.clone())
        } else {
            None
        };
        let prompt = self.prompt(language.as_deref(), Task::Transcribe, false)?;
        let opts = DecodeOptions {
            timestamps: false,
            ..DecodeOptions::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let r = self.decode_window(&memory, &prompt, &opts, &mut rng)?;
        let ids: Vec<u32> = prompt.iter().chain(&r.tokens).copied().collect();
        let x = window.features.reshape(&[1, self.n_mels, N_FRAMES])?; // (1, n_mels, 3000)
        let tgt = vec![ids.iter().map(|&i| i as usize).collect::<Vec<_>>()];
        no_grad(|| -> Result<()> {
            let memory = self.model.encode_features(&x, Some(&mut *trace))?;
            let logits = self
                .model
                .decode(&tgt, &memory, None, None, Some(&mut *trace))?;
            trace.record("logits", &logits);
            Ok(())
        })?;
        Ok(ids
            .iter()
            .map(|&id| {
                if self.tokens.is_timestamp(id) {
                    format!(
                        "<|{:.2}|>",
                        f64::from(id - self.tokens.timestamp_begin) * TIME_PRECISION
                    )
                } else {
                    self.tokenizer.decode(&[id], false).unwrap_or_default()
                }
            })
            .collect())
    }
}
