//! Text → token ids and back, from a Hugging Face `tokenizer.json`.
//!
//! A small wrapper over the `tokenizers` crate: the file's normaliser, pre-tokeniser,
//! model (WordPiece, BPE, Unigram) and post-processor (e.g. BERT's `[CLS] … [SEP]`) run
//! exactly as in Python. lucent adds what the models need around it:
//!
//! - truncation to the model's longest input (`max_length`, counted with the special
//!   tokens, cutting from the end as sentence-transformers does);
//! - padding of a batch to its longest member, with the attention mask
//!   (1 = real token, 0 = padding) that keeps padding out of attention and pooling.
//!
//! The padding and truncation settings stored inside `tokenizer.json` are switched off:
//! the caller's `max_length` and [`Tokenizer::pad`] decide instead.

use std::path::Path;

use crate::{Error, Result};

/// The largest `tokenizer.json` lucent reads: a bigger file is refused before it is
/// read (the largest real vocabularies, ~260 000 tokens, take about 35 MB).
pub const MAX_TOKENIZER_JSON_BYTES: u64 = 128 << 20;

/// One encoded text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    /// Token ids, special tokens included when asked for.
    pub ids: Vec<u32>,
    /// Segment (token type) ids: 0 for a single text.
    pub type_ids: Vec<u32>,
    /// The token strings (`"[CLS]"`, `"play"`, `"##ing"`, …).
    pub tokens: Vec<String>,
    /// 1 for every real token (an unpadded encoding is all ones).
    pub attention_mask: Vec<u32>,
    /// Byte range of each token in the input text ((0, 0) for special tokens).
    pub offsets: Vec<(usize, usize)>,
}

impl Encoding {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no tokens at all.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// A batch of encodings padded to one length `t`, row-major (b, t).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaddedBatch {
    /// Batch size b.
    pub b: usize,
    /// Padded length t (the longest encoding).
    pub t: usize,
    /// Token ids (b·t), padding filled with the pad id.
    pub ids: Vec<u32>,
    /// Token type ids (b·t), padding 0.
    pub type_ids: Vec<u32>,
    /// Attention mask (b·t): 1 real token, 0 padding.
    pub mask: Vec<u32>,
    /// Real length of each row.
    pub lengths: Vec<usize>,
}

/// A tokenizer loaded from `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    max_length: Option<usize>,
    pad_id: u32,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("max_length", &self.max_length)
            .field("pad_id", &self.pad_id)
            .finish()
    }
}

fn tok_err(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("{}: {what}: {e}", path.display()))
}

impl Tokenizer {
    /// Load `tokenizer.json`. No truncation until [`Tokenizer::set_max_length`]. A file
    /// over [`MAX_TOKENIZER_JSON_BYTES`] is refused unread.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::Tokenizer(format!(
                "{}: no such file; a model folder needs the tokenizer.json that came with it",
                path.display()
            )));
        }
        let len = std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len();
        if len > MAX_TOKENIZER_JSON_BYTES {
            return Err(Error::format(
                path,
                format!(
                    "tokenizer.json is {len} bytes; lucent reads at most {MAX_TOKENIZER_JSON_BYTES} \
                     (the largest vocabularies' files are about 35 MB)"
                ),
            ));
        }
        let json = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&json, path)
    }

    /// Load a tokenizer from the bytes of a `tokenizer.json`.
    pub fn from_bytes(json: &[u8]) -> Result<Self> {
        Self::parse(json, Path::new("<bytes>"))
    }

    fn parse(json: &[u8], path: &Path) -> Result<Self> {
        if json.len() as u64 > MAX_TOKENIZER_JSON_BYTES {
            return Err(Error::format(
                path,
                format!(
                    "tokenizer.json is {} bytes; lucent reads at most {MAX_TOKENIZER_JSON_BYTES}",
                    json.len()
                ),
            ));
        }
        let inner = guarded(|| tokenizers::Tokenizer::from_bytes(json))
            .map_err(|e| tok_err(path, "not a valid tokenizer.json", e))?;
        Self::wrap(inner, path)
    }

    fn wrap(mut inner: tokenizers::Tokenizer, path: &Path) -> Result<Self> {
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| tok_err(path, "cannot switch truncation off", e))?;
        let pad_id = ["[PAD]", "<pad>", "<|padding|>"]
            .iter()
            .find_map(|t| inner.token_to_id(t))
            .unwrap_or(0);
        Ok(Tokenizer {
            inner,
            max_length: None,
            pad_id,
        })
    }

    /// Truncate every encoding to at most `max_length` tokens (special tokens included),
    /// keeping the start; `None`: no limit.
    pub fn set_max_length(&mut self, max_length: Option<usize>) -> Result<()> {
        if max_length == Some(0) {
            return Err(Error::Argument(
                "max_length must be at least 1 (the model needs room for its special tokens)"
                    .into(),
            ));
        }
        let params = max_length.map(|m| tokenizers::TruncationParams {
            max_length: m,
            strategy: tokenizers::TruncationStrategy::LongestFirst,
            stride: 0,
            direction: tokenizers::TruncationDirection::Right,
        });
        self.inner
            .with_truncation(params)
            .map_err(|e| Error::Tokenizer(format!("max_length {max_length:?}: {e}")))?;
        self.max_length = max_length;
        Ok(())
    }

    /// The truncation length, if any.
    pub fn max_length(&self) -> Option<usize> {
        self.max_length
    }

    /// The id used for padding (`[PAD]` when the vocabulary has it, else 0).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn convert(e: tokenizers::Encoding) -> Encoding {
        Encoding {
            ids: e.get_ids().to_vec(),
            type_ids: e.get_type_ids().to_vec(),
            tokens: e.get_tokens().to_vec(),
            attention_mask: e.get_attention_mask().to_vec(),
            offsets: e.get_offsets().to_vec(),
        }
    }

    /// Encode one text; `add_special` adds the model's special tokens (BERT: `[CLS]`,
    /// `[SEP]`).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Encoding> {
        let e = guarded(|| self.inner.encode(text, add_special))
            .map_err(|e| Error::Tokenizer(format!("cannot encode {:?}: {e}", short(text))))?;
        Ok(Self::convert(e))
    }

    /// Encode many texts (in parallel); one [`Encoding`] per text, in order.
    pub fn encode_batch(&self, texts: &[&str], add_special: bool) -> Result<Vec<Encoding>> {
        let inputs: Vec<tokenizers::EncodeInput> = texts.iter().map(|t| (*t).into()).collect();
        let out = guarded(|| self.inner.encode_batch(inputs, add_special))
            .map_err(|e| Error::Tokenizer(format!("cannot encode a batch: {e}")))?;
        Ok(out.into_iter().map(Self::convert).collect())
    }

    /// Ids back to text; `skip_special` drops special tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        guarded(|| self.inner.decode(ids, skip_special))
            .map_err(|e| Error::Tokenizer(format!("cannot decode {} ids: {e}", ids.len())))
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token string of an id, if the id is in the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Pad `encodings` to the longest one with [`Tokenizer::pad_id`] on the right.
    pub fn pad(&self, encodings: &[&Encoding]) -> PaddedBatch {
        pad_right(encodings, self.pad_id)
    }
}

/// Run a call into the `tokenizers` crate, turning a panic into an error. The crate
/// panics on some malformed `tokenizer.json` files instead of returning an error, at
/// load time (0.22: `expect("Helper")` on a decoder that does not parse,
/// `expect("Precompiled")` on a Precompiled normalizer without its map) and at encode
/// time (a template post-processor naming a special token it does not define); found by
/// fuzzing, kept in `tests/data/fuzz/tokenizer_json/`. lucent's boundary stops them.
pub(crate) fn guarded<T>(
    f: impl FnOnce() -> tokenizers::Result<T>,
) -> std::result::Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("the tokenizers crate failed on this file ({why})"))
        }
    }
}

/// Pad encodings on the right to the longest, filling ids with `pad_id`, mask with 0.
pub fn pad_right(encodings: &[&Encoding], pad_id: u32) -> PaddedBatch {
    let b = encodings.len();
    let t = encodings.iter().map(|e| e.len()).max().unwrap_or(0);
    let mut ids = vec![pad_id; b * t];
    let mut type_ids = vec![0; b * t];
    let mut mask = vec![0; b * t];
    let mut lengths = Vec::with_capacity(b);
    for (row, e) in encodings.iter().enumerate() {
        let n = e.len();
        ids[row * t..row * t + n].copy_from_slice(&e.ids);
        type_ids[row * t..row * t + n].copy_from_slice(&e.type_ids);
        mask[row * t..row * t + n].fill(1);
        lengths.push(n);
    }
    PaddedBatch {
        b,
        t,
        ids,
        type_ids,
        mask,
        lengths,
    }
}

fn short(text: &str) -> String {
    let s: String = text.chars().take(40).collect();
    if s.len() < text.len() {
        format!("{s}…")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_fills_right_and_masks() {
        let e = |ids: &[u32]| Encoding {
            ids: ids.to_vec(),
            type_ids: vec![0; ids.len()],
            tokens: vec![String::new(); ids.len()],
            attention_mask: vec![1; ids.len()],
            offsets: vec![(0, 0); ids.len()],
        };
        let (a, b) = (e(&[5, 6, 7]), e(&[8]));
        let p = pad_right(&[&a, &b], 0);
        assert_eq!((p.b, p.t), (2, 3));
        assert_eq!(p.ids, vec![5, 6, 7, 8, 0, 0]);
        assert_eq!(p.mask, vec![1, 1, 1, 1, 0, 0]);
        assert_eq!(p.lengths, vec![3, 1]);
        let empty = pad_right(&[], 0);
        assert_eq!((empty.b, empty.t), (0, 0));
    }
}
