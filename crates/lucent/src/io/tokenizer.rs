//! Text → token ids and back: the one [`Tokenizer`] trait every model's tokenizer
//! implements, and [`HfTokenizer`], the Hugging Face `tokenizer.json` one.
//!
//! [`Tokenizer`] is what the pipelines ask of a tokenizer, whatever file it came from
//! (a `tokenizer.json`, a GGUF vocabulary, a model lucent trained): the ids of a text,
//! with or without special-token text parsed as special tokens, and the bytes each id
//! stands for, from which [`TokenStream`] builds text as generated ids arrive (holding
//! back the bytes of a character that is not complete yet).
//!
//! [`HfTokenizer`] is a small wrapper over the `tokenizers` crate: the file's normaliser,
//! pre-tokeniser, model (WordPiece, BPE, Unigram) and post-processor (e.g. BERT's
//! `[CLS] … [SEP]`) run exactly as in Python. lucent adds what the models need around it:
//!
//! - truncation to the model's longest input (`max_length`, counted with the special
//!   tokens, cutting from the end as sentence-transformers does);
//! - padding of a batch to its longest member, with the attention mask
//!   (1 = real token, 0 = padding) that keeps padding out of attention and pooling.
//!
//! The padding and truncation settings stored inside `tokenizer.json` are switched off:
//! the caller's `max_length` and [`HfTokenizer::pad`] decide instead.

use std::path::Path;

use crate::{Error, Result};

/// What lucent asks of every tokenizer (a `tokenizer.json`, a GGUF vocabulary, a trained
/// model's characters or BPE): one trait, so one generation loop and one server serve them
/// all.
pub trait Tokenizer: Send + Sync + std::fmt::Debug {
    /// Number of ids (the rows of the model's embedding table it was made for).
    fn vocab_size(&self) -> usize;

    /// The ids of `text`. `add_special`: add what the model puts around a text (BOS,
    /// `[CLS] … [SEP]`). `parse_special`: special-token text inside `text`
    /// (`<|im_start|>`) becomes that token's id, as in a raw prompt; false keeps it plain
    /// text, as user content in a chat must be.
    fn encode_ids(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>>;

    /// The bytes token `id` stands for (a byte-level token may be part of a character);
    /// special tokens give their text, or nothing with `skip_special`. Errors if `id` is
    /// outside the vocabulary.
    fn token_bytes(&self, id: u32, skip_special: bool) -> Result<Vec<u8>>;

    /// The token's piece as the vocabulary stores it (`"Ġcat"`, `"##ing"`, `"<|im_end|>"`).
    fn token_piece(&self, id: u32) -> Option<String>;

    /// Whether `id` is a special (control) token.
    fn is_special(&self, id: u32) -> bool;

    /// Whether generating `id` ends the text (EOS, `<|im_end|>`, `<end_of_turn>`).
    fn is_end_of_generation(&self, id: u32) -> bool;

    /// `text` marked so that [`Tokenizer::encode_quoted`] reads every control-token
    /// spelling in it as plain text (a chat message's text, before the template is
    /// rendered around it). Text without such spellings comes back unchanged.
    fn quote_text(&self, text: &str) -> String {
        text.to_string()
    }

    /// Token ids of a rendered chat template whose messages were quoted with
    /// [`Tokenizer::quote_text`]: only the template's own control tokens are parsed.
    /// With `add_special`, BOS/EOS as the tokenizer's flags say. Tokenizers that cannot
    /// keep quoted text apart refuse (the default), rather than parse what a person wrote.
    fn encode_quoted(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let _ = (text, add_special);
        Err(Error::Tokenizer(
            "this tokenizer cannot keep chat messages apart from the template's control tokens; \
             chat templates run with GGUF vocabularies (give a raw prompt instead)"
                .into(),
        ))
    }

    /// The text of `ids` (invalid UTF-8 becomes U+FFFD).
    fn decode_ids(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.token_bytes(id, skip_special)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Turns generated ids into text as they arrive, returning only whole characters: the
/// bytes of a character split across tokens wait for the rest.
#[derive(Clone, Debug, Default)]
pub struct TokenStream {
    pending: Vec<u8>,
    skip_special: bool,
}

impl TokenStream {
    /// An empty stream; `skip_special` leaves special tokens out of the text.
    pub fn new(skip_special: bool) -> Self {
        TokenStream {
            pending: Vec::new(),
            skip_special,
        }
    }

    /// Add token `id` of `tok`; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tok: &dyn Tokenizer, id: u32) -> Result<String> {
        let b = tok.token_bytes(id, self.skip_special)?;
        Ok(self.push_bytes(&b))
    }

    /// Add raw bytes; returns the whole characters now available. Invalid bytes become
    /// U+FFFD; an incomplete sequence at the end waits for the next call.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // The prefix up to valid_up_to is valid UTF-8 by definition.
                    out.push_str(std::str::from_utf8(&self.pending[..good]).unwrap_or_default());
                    match e.error_len() {
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// The bytes still held back (an incomplete character), as text with U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

/// GPT-2's table from bytes to printable characters (byte-level BPE vocabularies store
/// tokens in it): printable Latin-1 bytes stand for themselves, the other 68 bytes map to
/// U+0100 onwards in byte order.
pub fn byte_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap_or('\0') // 256..=323 are valid scalars
        };
    }
    table
}

/// The inverse of [`byte_to_unicode`].
pub fn unicode_to_byte() -> std::collections::HashMap<char, u8> {
    byte_to_unicode()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

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
#[derive(Clone)]
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    /// The same tokenizer with special-token text encoded as plain text (user content).
    plain: tokenizers::Tokenizer,
    max_length: Option<usize>,
    pad_id: u32,
    /// Byte-level BPE: each token's characters stand for bytes (GPT-2's table).
    byte_level: Option<std::collections::HashMap<char, u8>>,
    /// Ids that end generation (EOS-like special tokens present in the vocabulary).
    end_ids: Vec<u32>,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("max_length", &self.max_length)
            .field("pad_id", &self.pad_id)
            .finish()
    }
}

fn tok_err(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("{}: {what}: {e}", path.display()))
}

impl HfTokenizer {
    /// Load `tokenizer.json`. No truncation until [`HfTokenizer::set_max_length`]. A file
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

    /// Wrap a tokenizer built in memory (e.g. a BPE trained on a corpus).
    pub fn from_tokenizers(inner: tokenizers::Tokenizer) -> Result<Self> {
        Self::wrap(inner, Path::new("<trained>"))
    }

    /// Write as `tokenizer.json` to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, false)
            .map_err(|e| Error::format(path, e.to_string()))
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
        let byte_level = is_byte_level(&inner).then(unicode_to_byte);
        let end_ids = [
            "<|endoftext|>",
            "</s>",
            "<|im_end|>",
            "<end_of_turn>",
            "<eos>",
            "[SEP]",
        ]
        .iter()
        .filter_map(|t| inner.token_to_id(t))
        .collect();
        let mut plain = inner.clone();
        plain.set_encode_special_tokens(true);
        Ok(HfTokenizer {
            inner,
            plain,
            max_length: None,
            pad_id,
            byte_level,
            end_ids,
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
            .with_truncation(params.clone())
            .map_err(|e| Error::Tokenizer(format!("max_length {max_length:?}: {e}")))?;
        self.plain
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

    /// Pad `encodings` to the longest one with [`HfTokenizer::pad_id`] on the right.
    pub fn pad(&self, encodings: &[&Encoding]) -> PaddedBatch {
        pad_right(encodings, self.pad_id)
    }
}

/// Whether `tok` is a byte-level BPE (GPT-2, RoBERTa, Whisper): its pre-tokeniser or
/// decoder is `ByteLevel`, so token strings spell bytes through GPT-2's table.
fn is_byte_level(tok: &tokenizers::Tokenizer) -> bool {
    use tokenizers::{DecoderWrapper, PreTokenizerWrapper};
    let dec = match tok.get_decoder() {
        Some(DecoderWrapper::ByteLevel(_)) => true,
        Some(DecoderWrapper::Sequence(seq)) => seq
            .get_decoders()
            .iter()
            .any(|d| matches!(d, DecoderWrapper::ByteLevel(_))),
        _ => false,
    };
    let pre = match tok.get_pre_tokenizer() {
        Some(PreTokenizerWrapper::ByteLevel(_)) => true,
        Some(PreTokenizerWrapper::Sequence(seq)) => seq
            .as_ref()
            .iter()
            .any(|p| matches!(p, PreTokenizerWrapper::ByteLevel(_))),
        _ => false,
    };
    dec || pre
}

impl Tokenizer for HfTokenizer {
    fn vocab_size(&self) -> usize {
        HfTokenizer::vocab_size(self)
    }

    fn encode_ids(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let tok = if parse_special {
            &self.inner
        } else {
            &self.plain
        };
        let e = guarded(|| tok.encode(text, add_special))
            .map_err(|e| Error::Tokenizer(format!("cannot encode {:?}: {e}", short(text))))?;
        Ok(e.get_ids().to_vec())
    }

    fn token_bytes(&self, id: u32, skip_special: bool) -> Result<Vec<u8>> {
        let piece = self.inner.id_to_token(id).ok_or_else(|| {
            Error::Tokenizer(format!(
                "token id {id} is outside the vocabulary of {} tokens",
                self.vocab_size()
            ))
        })?;
        if self.is_special(id) {
            return Ok(if skip_special {
                Vec::new()
            } else {
                piece.into_bytes()
            });
        }
        Ok(match &self.byte_level {
            Some(table) => piece
                .chars()
                .flat_map(|c| match table.get(&c) {
                    Some(&b) => vec![b],
                    None => c.to_string().into_bytes(),
                })
                .collect(),
            None => self.decode(&[id], false)?.into_bytes(),
        })
    }

    fn token_piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    fn is_special(&self, id: u32) -> bool {
        self.inner
            .get_added_vocabulary()
            .simple_id_to_token(id)
            .is_some_and(|t| self.inner.get_added_vocabulary().is_special_token(&t))
    }

    fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_ids.contains(&id)
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
