//! Training data: tokenizers trained on the corpus, the token stream with its held-out
//! tail, random batches of windows, and the synthetic sequence-to-sequence tasks.
//!
//! - [`CharTokenizer`]: one id per distinct character of the corpus (sorted).
//! - [`TextTokenizer::train_bpe`]: byte-level BPE learned from the corpus with the
//!   `tokenizers` crate's `BpeTrainer` (GPT-2's scheme: bytes mapped to printable
//!   characters, then the most frequent adjacent pair merged, repeatedly, until the
//!   vocabulary has the asked-for size).
//! - [`TokenStream`]: the corpus as ids, split into the first 90% (train) and the last
//!   10% (validation); a batch is `b` random windows of `block + 1` ids from one part,
//!   the inputs being the first `block` and the targets the last `block` (shifted by one).
//! - [`Task`]: reverse, sort, copy, add — examples drawn from a seeded generator; the
//!   held-out set is drawn first and never trained on.

use std::collections::HashSet;
use std::path::Path;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::io::tokenizer::{HfTokenizer, Tokenizer};
use crate::{Error, Result};

/// One id per distinct character, in sorted order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharTokenizer {
    /// The vocabulary: character of each id.
    pub chars: Vec<char>,
}

impl CharTokenizer {
    /// The characters of `text`, sorted.
    pub fn fit(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect::<HashSet<_>>().into_iter().collect();
        chars.sort_unstable();
        CharTokenizer { chars }
    }

    /// Ids of `text`; an error names the first character outside the vocabulary.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        text.chars()
            .map(|c| {
                self.chars.binary_search(&c).map_err(|_| {
                    Error::Tokenizer(format!(
                        "character {c:?} is not in this model's vocabulary of {} characters (seen in its training corpus)",
                        self.chars.len()
                    ))
                })
            })
            .collect()
    }

    /// Text of `ids` (ids outside the vocabulary become U+FFFD).
    pub fn decode(&self, ids: &[usize]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i).copied().unwrap_or('\u{fffd}'))
            .collect()
    }
}

/// The tokenizer of a trained language model.
#[derive(Clone)]
pub enum TextTokenizer {
    /// Characters.
    Char(CharTokenizer),
    /// Byte-level BPE (saved as `tokenizer.json`).
    Bpe(Box<HfTokenizer>),
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TextTokenizer::Char(c) => write!(f, "Char({} symbols)", c.chars.len()),
            TextTokenizer::Bpe(t) => write!(f, "Bpe({} tokens)", t.vocab_size()),
        }
    }
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

impl TextTokenizer {
    /// Learn a byte-level BPE of `vocab_size` tokens from `text`.
    pub fn train_bpe(text: &str, vocab_size: usize) -> Result<Self> {
        use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
        use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
        use tokenizers::models::TrainerWrapper;
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        if vocab_size < 257 {
            return Err(Error::Argument(format!(
                "a byte-level BPE needs a vocabulary of at least 257 (256 bytes + merges), got {vocab_size}"
            )));
        }
        let mut trainer = TrainerWrapper::BpeTrainer(
            BpeTrainerBuilder::new()
                .vocab_size(vocab_size)
                .min_frequency(2)
                .show_progress(false)
                .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
                .build(),
        );
        let mut tok = tokenizers::Tokenizer::new(BPE::default());
        tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tok.with_decoder(Some(ByteLevelDecoder::default()));
        // Train on lines (the trainer counts words within each sequence).
        tok.train(&mut trainer, text.lines()).map_err(tok_err)?;
        Ok(TextTokenizer::Bpe(Box::new(HfTokenizer::from_tokenizers(
            tok,
        )?)))
    }

    /// The number of ids.
    pub fn vocab_size(&self) -> usize {
        match self {
            TextTokenizer::Char(c) => c.chars.len(),
            TextTokenizer::Bpe(t) => t.vocab_size(),
        }
    }

    /// "char" or "bpe".
    pub fn kind(&self) -> &'static str {
        match self {
            TextTokenizer::Char(_) => "char",
            TextTokenizer::Bpe(_) => "bpe",
        }
    }

    /// Ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        match self {
            TextTokenizer::Char(c) => c.encode(text),
            TextTokenizer::Bpe(t) => Ok(t
                .encode_ids(text, false, false)?
                .into_iter()
                .map(|i| i as usize)
                .collect()),
        }
    }

    /// Text of `ids`.
    pub fn decode(&self, ids: &[usize]) -> Result<String> {
        match self {
            TextTokenizer::Char(c) => Ok(c.decode(ids)),
            TextTokenizer::Bpe(t) => {
                let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
                t.decode(&ids, false)
            }
        }
    }

    /// Write into `dir` (`vocab.json` for characters, `tokenizer.json` for BPE).
    pub fn save(&self, dir: &Path) -> Result<()> {
        match self {
            TextTokenizer::Char(c) => {
                let path = dir.join("vocab.json");
                let json =
                    serde_json::to_string(c).map_err(|e| Error::format(&path, e.to_string()))?;
                std::fs::write(&path, json).map_err(|e| Error::io(&path, e))
            }
            TextTokenizer::Bpe(t) => t.save(&dir.join("tokenizer.json")),
        }
    }

    /// Read what [`TextTokenizer::save`] wrote, by `kind`.
    pub fn load(dir: &Path, kind: &str) -> Result<Self> {
        match kind {
            "char" => {
                let path = dir.join("vocab.json");
                let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
                let c: CharTokenizer =
                    serde_json::from_str(&text).map_err(|e| Error::format(&path, e.to_string()))?;
                Ok(TextTokenizer::Char(c))
            }
            "bpe" => {
                let t = HfTokenizer::from_file(dir.join("tokenizer.json"))?;
                Ok(TextTokenizer::Bpe(Box::new(t)))
            }
            other => Err(Error::Format {
                path: dir.to_path_buf(),
                msg: format!("unknown tokenizer kind '{other}' (expected char or bpe)"),
            }),
        }
    }
}

impl Tokenizer for TextTokenizer {
    fn vocab_size(&self) -> usize {
        TextTokenizer::vocab_size(self)
    }

    fn encode_ids(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        match self {
            TextTokenizer::Char(c) => Ok(c.encode(text)?.into_iter().map(|i| i as u32).collect()),
            TextTokenizer::Bpe(t) => t.encode_ids(text, add_special, parse_special),
        }
    }

    fn token_bytes(&self, id: u32, skip_special: bool) -> Result<Vec<u8>> {
        match self {
            TextTokenizer::Char(c) => match c.chars.get(id as usize) {
                Some(ch) => Ok(ch.to_string().into_bytes()),
                None => Err(Error::Tokenizer(format!(
                    "token id {id} is outside the vocabulary of {} characters",
                    c.chars.len()
                ))),
            },
            TextTokenizer::Bpe(t) => t.token_bytes(id, skip_special),
        }
    }

    fn token_piece(&self, id: u32) -> Option<String> {
        match self {
            TextTokenizer::Char(c) => c.chars.get(id as usize).map(|ch| ch.to_string()),
            TextTokenizer::Bpe(t) => t.token_piece(id),
        }
    }

    fn is_special(&self, id: u32) -> bool {
        match self {
            TextTokenizer::Char(_) => false,
            TextTokenizer::Bpe(t) => t.is_special(id),
        }
    }

    fn is_end_of_generation(&self, _id: u32) -> bool {
        // A model trained on a plain corpus has no end-of-text token: it writes on.
        false
    }
}

/// A corpus as ids: the first 90% for training, the last 10% held out.
#[derive(Clone, Debug)]
pub struct TokenStream {
    /// Training ids.
    pub train: Vec<usize>,
    /// Validation ids (the corpus's last 10%).
    pub val: Vec<usize>,
}

impl TokenStream {
    /// Split `ids` 90/10; errors if either part is shorter than one window of
    /// `block + 1` ids.
    pub fn split(ids: Vec<usize>, block: usize) -> Result<Self> {
        let n = ids.len();
        let cut = n - n / 10;
        let (train, val) = (ids[..cut].to_vec(), ids[cut..].to_vec());
        let need = block + 1;
        if val.len() < need || train.len() < need {
            return Err(Error::Argument(format!(
                "the corpus has {n} tokens: {} for training and {} held out, but one window needs block + 1 = {need}; use a smaller --block (at most {}) or a larger corpus",
                train.len(),
                val.len(),
                (val.len().min(train.len())).saturating_sub(1)
            )));
        }
        Ok(TokenStream { train, val })
    }
}

/// `b` random windows from `ids`: inputs `ids[s .. s+block]`, targets
/// `ids[s+1 .. s+block+1]`. `ids` must hold at least block + 1 ids.
pub fn random_batch(
    ids: &[usize],
    b: usize,
    block: usize,
    rng: &mut impl Rng,
) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let max_start = ids.len() - block - 1;
    (0..b)
        .map(|_| {
            let s = rng.random_range(0..=max_start);
            (
                ids[s..s + block].to_vec(),
                ids[s + 1..s + block + 1].to_vec(),
            )
        })
        .unzip()
}

/// Evenly spaced windows covering `ids` (at most `max_windows`), for a deterministic
/// validation loss.
pub fn eval_windows(
    ids: &[usize],
    block: usize,
    max_windows: usize,
) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let max_start = ids.len() - block - 1;
    let n = (max_start / block + 1).min(max_windows).max(1);
    (0..n)
        .map(|i| {
            let s = if n == 1 { 0 } else { i * max_start / (n - 1) };
            (
                ids[s..s + block].to_vec(),
                ids[s + 1..s + block + 1].to_vec(),
            )
        })
        .unzip()
}

/// A synthetic sequence-to-sequence task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Output the input backwards.
    Reverse,
    /// Output the input's symbols in ascending order.
    Sort,
    /// Output the input unchanged.
    Copy,
    /// Input "a+b" in decimal digits, output the sum.
    Add,
}

/// Padding id (ignored by the loss).
pub const PAD: usize = 0;
/// Begin-of-sequence id (the decoder's first input).
pub const BOS: usize = 1;
/// End-of-sequence id.
pub const EOS: usize = 2;
/// Ids of the task's symbols start here.
pub const FIRST_SYMBOL: usize = 3;

impl Task {
    /// Parse "reverse", "sort", "copy" or "add".
    pub fn parse(s: &str) -> Result<Task> {
        match s {
            "reverse" => Ok(Task::Reverse),
            "sort" => Ok(Task::Sort),
            "copy" => Ok(Task::Copy),
            "add" => Ok(Task::Add),
            _ => Err(Error::Argument(format!(
                "unknown task '{s}'; choose reverse, sort, copy or add"
            ))),
        }
    }

    /// The task's name.
    pub fn name(self) -> &'static str {
        match self {
            Task::Reverse => "reverse",
            Task::Sort => "sort",
            Task::Copy => "copy",
            Task::Add => "add",
        }
    }

    /// The symbols (id FIRST_SYMBOL + i is symbols[i]): `n` letters, or digits and '+'.
    pub fn symbols(self, n: usize) -> Vec<char> {
        match self {
            Task::Add => "0123456789+".chars().collect(),
            _ => ('a'..='z').take(n.clamp(2, 26)).collect(),
        }
    }

    /// Vocabulary size: PAD, BOS, EOS and the symbols.
    pub fn vocab_size(self, n: usize) -> usize {
        FIRST_SYMBOL + self.symbols(n).len()
    }

    /// One example (source ids, target ids, without BOS/EOS) of length in
    /// `min_len ..= max_len` over `n` symbols.
    pub fn example(
        self,
        n: usize,
        min_len: usize,
        max_len: usize,
        rng: &mut impl Rng,
    ) -> (Vec<usize>, Vec<usize>) {
        let n = self.symbols(n).len();
        match self {
            Task::Add => {
                let max_digits = ((max_len.max(3) - 1) / 2).clamp(1, 9);
                let number = |rng: &mut dyn rand::RngCore| -> u64 {
                    let digits = rng.random_range(1..=max_digits) as u32;
                    rng.random_range(0..10u64.pow(digits))
                };
                let (a, b) = (number(rng), number(rng));
                let digit_ids = |s: String| -> Vec<usize> {
                    s.chars()
                        .map(|c| {
                            if c == '+' {
                                FIRST_SYMBOL + 10
                            } else {
                                FIRST_SYMBOL + c as usize - '0' as usize
                            }
                        })
                        .collect()
                };
                (
                    digit_ids(format!("{a}+{b}")),
                    digit_ids((a + b).to_string()),
                )
            }
            _ => {
                let len = rng.random_range(min_len.max(1)..=max_len.max(min_len.max(1)));
                let src: Vec<usize> = (0..len)
                    .map(|_| FIRST_SYMBOL + rng.random_range(0..n))
                    .collect();
                let tgt = match self {
                    Task::Reverse => src.iter().rev().copied().collect(),
                    Task::Sort => {
                        let mut t = src.clone();
                        t.sort_unstable();
                        t
                    }
                    _ => src.clone(),
                };
                (src, tgt)
            }
        }
    }

    /// Text of ids (symbols only; PAD/BOS/EOS are skipped).
    pub fn render(self, n: usize, ids: &[usize]) -> String {
        let symbols = self.symbols(n);
        ids.iter()
            .filter_map(|&i| i.checked_sub(FIRST_SYMBOL).and_then(|s| symbols.get(s)))
            .collect()
    }

    /// Ids of a text of the task's symbols; an error names a stray character.
    pub fn parse_input(self, n: usize, text: &str) -> Result<Vec<usize>> {
        let symbols = self.symbols(n);
        text.chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| {
                symbols
                    .iter()
                    .position(|&s| s == c)
                    .map(|i| FIRST_SYMBOL + i)
                    .ok_or_else(|| {
                        Error::Argument(format!(
                            "{c:?} is not a symbol of the {} task (symbols: {})",
                            self.name(),
                            symbols.iter().collect::<String>()
                        ))
                    })
            })
            .collect()
    }
}

/// A batch of seq2seq examples, padded: encoder input, decoder input (BOS + target),
/// decoder output (target + EOS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seq2SeqBatch {
    /// Source ids, padded with PAD to the longest.
    pub src: Vec<Vec<usize>>,
    /// BOS + target, padded.
    pub tgt_in: Vec<Vec<usize>>,
    /// target + EOS, padded (PAD is ignored by the loss).
    pub tgt_out: Vec<Vec<usize>>,
}

/// Pad examples into one batch.
pub fn pad_batch(examples: &[(Vec<usize>, Vec<usize>)]) -> Seq2SeqBatch {
    let s = examples.iter().map(|e| e.0.len()).max().unwrap_or(0);
    let t = examples.iter().map(|e| e.1.len() + 1).max().unwrap_or(1);
    let pad = |mut v: Vec<usize>, n: usize| {
        v.resize(n, PAD);
        v
    };
    let mut batch = Seq2SeqBatch {
        src: Vec::new(),
        tgt_in: Vec::new(),
        tgt_out: Vec::new(),
    };
    for (src, tgt) in examples {
        batch.src.push(pad(src.clone(), s));
        batch.tgt_in.push(pad([&[BOS], tgt.as_slice()].concat(), t));
        batch
            .tgt_out
            .push(pad([tgt.as_slice(), &[EOS]].concat(), t));
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn tokenizers_round_trip() -> TestResult {
        let text = "Call me Ishmael. Some years ago—never mind how long precisely.\n".repeat(20);
        let c = TextTokenizer::Char(CharTokenizer::fit(&text));
        let ids = c.encode(&text)?;
        assert_eq!(c.decode(&ids)?, text);
        assert!(c.encode("Z").is_err(), "unseen character");
        let bpe = TextTokenizer::train_bpe(&text, 300)?;
        assert!(bpe.vocab_size() > 256 && bpe.vocab_size() <= 300);
        let ids = bpe.encode(&text)?;
        assert!(
            ids.len() < text.len() / 2,
            "merges shorten the text: {} ids",
            ids.len()
        );
        assert_eq!(bpe.decode(&ids)?, text);
        assert!(TextTokenizer::train_bpe(&text, 100).is_err());
        Ok(())
    }

    #[test]
    fn split_batches_and_tasks() -> TestResult {
        let s = TokenStream::split((0..100).collect(), 5)?;
        assert_eq!((s.train.len(), s.val.len()), (90, 10));
        assert_eq!(s.val[0], 90, "the last 10% is held out");
        assert!(TokenStream::split((0..100).collect(), 10).is_err());
        let mut rng = StdRng::seed_from_u64(1);
        let (x, y) = random_batch(&s.train, 3, 5, &mut rng);
        for (xi, yi) in x.iter().zip(&y) {
            assert_eq!(xi.len(), 5);
            assert_eq!(&xi[1..], &yi[..4], "targets are the inputs shifted by one");
        }
        for task in [Task::Reverse, Task::Sort, Task::Copy, Task::Add] {
            let (src, tgt) = task.example(10, 3, 7, &mut rng);
            let (s, t) = (task.render(10, &src), task.render(10, &tgt));
            match task {
                Task::Reverse => assert_eq!(t, s.chars().rev().collect::<String>()),
                Task::Copy => assert_eq!(t, s),
                Task::Sort => {
                    let mut c: Vec<char> = s.chars().collect();
                    c.sort_unstable();
                    assert_eq!(t, c.into_iter().collect::<String>());
                }
                Task::Add => {
                    let (a, b) = s.split_once('+').ok_or("no '+' in the input")?;
                    let sum = a.parse::<u64>()? + b.parse::<u64>()?;
                    assert_eq!(t, sum.to_string());
                }
            }
            assert_eq!(task.parse_input(10, &s)?, src);
        }
        let b = pad_batch(&[(vec![3, 4], vec![4, 3]), (vec![5], vec![5])]);
        assert_eq!(b.src, vec![vec![3, 4], vec![5, PAD]]);
        assert_eq!(b.tgt_in, vec![vec![BOS, 4, 3], vec![BOS, 5, PAD]]);
        assert_eq!(b.tgt_out, vec![vec![4, 3, EOS], vec![5, EOS, PAD]]);
        Ok(())
    }
}
