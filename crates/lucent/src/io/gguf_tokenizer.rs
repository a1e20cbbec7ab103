//! Tokenizers rebuilt from a GGUF file's `tokenizer.ggml.*` metadata, tokenising as
//! llama.cpp does.
//!
//! Two kinds, named by `tokenizer.ggml.model`:
//!
//! - `gpt2`: **byte-level BPE** (SmolLM2). Text is split by the pre-tokeniser that
//!   `tokenizer.ggml.pre` names (for `smollm`, llama.cpp applies two regexes in turn:
//!   `\p{N}` isolates every digit, then GPT-2's
//!   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`), each
//!   piece's bytes are mapped to printable characters (GPT-2's byte ↔ unicode table) and
//!   merged by the ranked `tokenizer.ggml.merges`. This part runs on the `tokenizers`
//!   crate (its BPE model with a `Split` + `ByteLevel` pre-tokeniser).
//! - `llama`: **SentencePiece-style** (Gemma 3). Spaces become `▁` (U+2581); the text
//!   starts as one symbol per character; repeatedly the adjacent pair whose concatenation
//!   is a vocabulary token with the highest `tokenizer.ggml.scores` entry is merged (ties:
//!   the leftmost pair); a final symbol that is not a token falls back to its bytes as
//!   `<0xNN>` tokens. The `tokenizers` crate cannot express this directly (its BPE wants
//!   ranked merges, which GGUF does not store for this kind, and deriving them from scores
//!   changes tie-breaking), so it is written here, from that definition.
//!
//! For both, special tokens — `token_type` 3 (control) and 4 (user-defined), e.g.
//! `<|im_start|>`, `<start_of_turn>`, Gemma's runs of `\n` — are split out of the text
//! first and become one token each, longest first, as llama.cpp's partitioning does.
//! BOS/EOS are added per `tokenizer.ggml.add_bos_token` / `add_eos_token`.
//!
//! Decoding maps each token back to bytes (byte-level table, `▁` → space, `<0xNN>` → the
//! byte) and then to UTF-8; [`TokenStream`] does it token by token without ever
//! splitting a multi-byte character.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use aho_corasick::AhoCorasick;

use crate::io::gguf::GgufFile;
use crate::io::pre_tokenizers::{self, pre_tokenizer, PreTokenizer};
use crate::io::tokenizer::{byte_to_unicode, Tokenizer};
use crate::{Error, Result};

/// A token's role, from `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0: not given.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (BOS, EOS, `<|im_start|>`): split out of text, hidden when
    /// decoding with `skip_special`.
    Control,
    /// 4: a user-defined token: split out of text, always decoded as its text.
    UserDefined,
    /// 5: unused.
    Unused,
    /// 6: a byte (`<0x0A>`), for byte fallback.
    Byte,
}

impl TokenType {
    fn from_code(c: i64) -> TokenType {
        match c {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Which algorithm a [`GgufTokenizer`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-level BPE (`tokenizer.ggml.model = gpt2`).
    ByteLevelBpe,
    /// SentencePiece-style score merging with byte fallback (`tokenizer.ggml.model = llama`).
    SentencePiece,
}

/// Token texts of end-of-generation tokens that llama.cpp recognises by name.
const EOG_TEXTS: [&str; 8] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
];

/// A tokenizer built from GGUF metadata ([`GgufTokenizer::from_gguf`]).
pub struct GgufTokenizer {
    kind: TokenizerKind,
    tokens: Vec<String>,
    types: Vec<TokenType>,
    scores: Vec<f32>,
    ids: HashMap<String, u32>,
    /// The BPE model and pre-tokeniser (ByteLevelBpe only).
    bpe: Option<tokenizers::Tokenizer>,
    /// Special (control and user-defined) tokens, longest first; and a matcher over them.
    specials: Vec<Special>,
    special_matcher: Option<AhoCorasick>,
    /// Control tokens, matched ASCII-case-insensitively, for [`GgufTokenizer::quote_text`].
    quote_matcher: Option<AhoCorasick>,
    byte_tokens: Vec<Option<u32>>,
    unicode_to_byte: HashMap<char, u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    eog: Vec<u32>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GgufTokenizer({:?}, {} tokens)",
            self.kind,
            self.tokens.len()
        )
    }
}

fn tok_err(f: &GgufFile, msg: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("{}: {msg}", f.path().display()))
}

impl GgufTokenizer {
    /// Build the tokenizer that `f`'s metadata describes. Errors name the missing or
    /// malformed key.
    pub fn from_gguf(f: &GgufFile) -> Result<GgufTokenizer> {
        let model = f.get_str("tokenizer.ggml.model")?;
        let kind = match model {
            "gpt2" => TokenizerKind::ByteLevelBpe,
            "llama" => TokenizerKind::SentencePiece,
            other => {
                return Err(tok_err(
                    f,
                    format!("tokenizer.ggml.model = '{other}' is not supported; lucent reads 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)"),
                ))
            }
        };
        let tokens = f.get_str_array("tokenizer.ggml.tokens")?.to_vec();
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(tok_err(f, format!("tokenizer.ggml.tokens has {n} entries")));
        }
        let types: Vec<TokenType> = match f.get("tokenizer.ggml.token_type") {
            Some(_) => f
                .get_int_array("tokenizer.ggml.token_type")?
                .into_iter()
                .map(TokenType::from_code)
                .collect(),
            None => vec![TokenType::Normal; n],
        };
        if types.len() != n {
            return Err(tok_err(
                f,
                format!(
                    "tokenizer.ggml.token_type has {} entries but there are {n} tokens",
                    types.len()
                ),
            ));
        }
        let scores = match f.get("tokenizer.ggml.scores") {
            Some(_) => f.get_f32_array("tokenizer.ggml.scores")?.to_vec(),
            None if kind == TokenizerKind::SentencePiece => {
                return Err(tok_err(
                    f,
                    "tokenizer.ggml.scores is missing; a SentencePiece vocabulary needs scores",
                ))
            }
            None => vec![0.0; n],
        };
        if scores.len() != n {
            return Err(tok_err(
                f,
                format!(
                    "tokenizer.ggml.scores has {} entries but there are {n} tokens",
                    scores.len()
                ),
            ));
        }
        let mut ids = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            ids.insert(t.clone(), i as u32);
        }
        let id_key = |key: &str| -> Result<Option<u32>> {
            match f.opt_u32(key)? {
                Some(id) if (id as usize) < n => Ok(Some(id)),
                Some(id) => Err(tok_err(
                    f,
                    format!("{key} = {id} is outside the vocabulary of {n} tokens"),
                )),
                None => Ok(None),
            }
        };
        let bos = id_key("tokenizer.ggml.bos_token_id")?;
        let eos = id_key("tokenizer.ggml.eos_token_id")?;
        let unk = id_key("tokenizer.ggml.unknown_token_id")?;
        let eot = id_key("tokenizer.ggml.eot_token_id")?;
        let eom = id_key("tokenizer.ggml.eom_token_id")?;
        // Absent the key, llama.cpp adds BOS for SentencePiece and for the BPE
        // pre-tokenizers that say so (Llama 3, Tekken, Chameleon).
        let bos_by_default = match kind {
            TokenizerKind::SentencePiece => true,
            TokenizerKind::ByteLevelBpe => pre_tokenizer_of(f)?.add_bos,
        };
        let add_bos = f
            .opt_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(bos_by_default);
        let add_eos = f.opt_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
        let add_space_prefix = f
            .opt_bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(kind == TokenizerKind::SentencePiece);

        let mut eog: Vec<u32> = [eos, eot, eom].into_iter().flatten().collect();
        for t in EOG_TEXTS {
            if let Some(&id) = ids.get(t) {
                if types[id as usize] == TokenType::Control && !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }

        let mut specials: Vec<Special> = tokens
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                matches!(types[*i], TokenType::Control | TokenType::UserDefined) && !t.is_empty()
            })
            .map(|(i, t)| Special {
                text: t.clone(),
                id: i as u32,
                control: types[i] == TokenType::Control,
            })
            .collect();
        // Longest first (then by id), the order in which llama.cpp carves them out.
        specials.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let special_matcher = if specials.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::new(specials.iter().map(|s| s.text.as_str()))
                    .map_err(|e| tok_err(f, format!("special tokens: {e}")))?,
            )
        };
        let quotable: Vec<&str> = specials
            .iter()
            .filter(|s| s.quotable())
            .map(|s| s.text.as_str())
            .collect();
        let quote_matcher = if quotable.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .build(quotable)
                    .map_err(|e| tok_err(f, format!("control tokens: {e}")))?,
            )
        };

        let mut byte_tokens = vec![None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = ids.get(&format!("<0x{b:02X}>")).copied();
        }
        let table = byte_to_unicode();
        let unicode_to_byte = table
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();

        let bpe = if kind == TokenizerKind::ByteLevelBpe {
            Some(build_bpe(f, &tokens)?)
        } else {
            None
        };

        Ok(GgufTokenizer {
            kind,
            tokens,
            types,
            scores,
            ids,
            bpe,
            specials,
            special_matcher,
            quote_matcher,
            byte_tokens,
            unicode_to_byte,
            bos,
            eos,
            unk,
            add_bos,
            add_eos,
            add_space_prefix,
            eog,
        })
    }

    /// The algorithm this tokenizer runs.
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The text of token `id` as stored (byte-level or `▁`-escaped), if it exists.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(|s| s.as_str())
    }

    /// The id of the token whose stored text is `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The role of token `id`.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// The score of token `id` (SentencePiece merge priority; 0 for BPE files without scores).
    pub fn score(&self, id: u32) -> Option<f32> {
        self.scores.get(id as usize).copied()
    }

    /// Beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether [`GgufTokenizer::encode`] with `add_special` puts BOS first.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Tokens that end generation: EOS, EOT/EOM if given, and control tokens such as
    /// `<|im_end|>` or `<end_of_turn>`.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// Token ids of `text`, special tokens parsed (`<|im_start|>` is one token); with
    /// `add_special`, BOS/EOS are added as the file's flags say.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.encode_with(text, add_special, true)
    }

    /// Like [`GgufTokenizer::encode`], choosing whether special-token text in `text` is
    /// parsed as special tokens (`parse_special`) or tokenised as plain text. As in
    /// llama.cpp, plain text still has its user-defined tokens (Gemma's runs of `\n`)
    /// carved out: they stand for text; only control tokens are left unparsed.
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let carve = if parse_special {
            Carve::All
        } else {
            Carve::UserDefined
        };
        let mut out = Vec::new();
        self.push_bos(add_special, &mut out);
        let mut prev_special = true;
        let fragments = self.partition(text, carve);
        self.encode_fragments(text, &fragments, &mut out, &mut prev_special)?;
        self.push_eos(add_special, &mut out);
        Ok(out)
    }

    /// `text` marked so that [`GgufTokenizer::encode_quoted`] reads every control token
    /// spelled in it as plain text: [`QUOTE_MARK`] goes before each place where a control
    /// token's text begins (matched ASCII-case-insensitively, so that a template's
    /// `upper` or `lower` cannot make one), and a `QUOTE_MARK` already in `text` is
    /// doubled. Text without control-token spellings or marks comes back unchanged.
    ///
    /// This is how a chat keeps what a person writes in its place: message texts are
    /// quoted, the template is rendered around them, and only the template's own control
    /// tokens become control tokens ([`crate::pipeline::ChatTemplate::encode_messages`]).
    pub fn quote_text(&self, text: &str) -> String {
        let mut starts = Vec::new();
        if let Some(m) = &self.quote_matcher {
            starts = vec![false; text.len()];
            for hit in m.find_overlapping_iter(text) {
                starts[hit.start()] = true;
            }
        }
        let mut out = String::with_capacity(text.len() + 8);
        for (i, c) in text.char_indices() {
            if starts.get(i).copied().unwrap_or(false) {
                out.push(QUOTE_MARK);
            }
            if c == QUOTE_MARK {
                out.push(QUOTE_MARK);
            }
            out.push(c);
        }
        out
    }

    /// Token ids of text in which some stretches were quoted by
    /// [`GgufTokenizer::quote_text`] (a rendered chat template): a control token is
    /// parsed where it is spelled outside quoted text — after an even run of
    /// [`QUOTE_MARK`]s — and read as plain text where it was quoted. The text between
    /// control tokens loses its marks (a doubled mark becomes one) and is encoded as
    /// plain text, as [`GgufTokenizer::encode_with`] does without `parse_special`.
    /// With `add_special`, BOS/EOS are added as the file's flags say.
    pub fn encode_quoted(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.push_bos(add_special, &mut out);
        let mut prev_special = true;
        for frag in self.partition(text, Carve::UnquotedControl) {
            match frag {
                Fragment::Special(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(a, b) => {
                    let plain = unquote(&text[a..b]);
                    let inner = self.partition(&plain, Carve::UserDefined);
                    self.encode_fragments(&plain, &inner, &mut out, &mut prev_special)?;
                }
            }
        }
        self.push_eos(add_special, &mut out);
        Ok(out)
    }

    fn push_bos(&self, add_special: bool, out: &mut Vec<u32>) {
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
    }

    fn push_eos(&self, add_special: bool, out: &mut Vec<u32>) {
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
    }

    /// Encode `fragments` of `text` onto `out`. SentencePiece: a space is prefixed to the
    /// first text (and to text after a special token) when the file asks for it;
    /// `prev_special` carries that state from one call to the next.
    fn encode_fragments(
        &self,
        text: &str,
        fragments: &[Fragment],
        out: &mut Vec<u32>,
        prev_special: &mut bool,
    ) -> Result<()> {
        for &frag in fragments {
            match frag {
                Fragment::Special(id) => {
                    out.push(id);
                    *prev_special = true;
                }
                Fragment::Text(a, b) => {
                    let piece = &text[a..b];
                    match self.kind {
                        TokenizerKind::ByteLevelBpe => self.encode_bpe(piece, out)?,
                        TokenizerKind::SentencePiece => {
                            let mut s = String::with_capacity(piece.len() + 3);
                            if self.add_space_prefix && *prev_special {
                                s.push(' ');
                            }
                            s.push_str(piece);
                            self.encode_spm(&s.replace(' ', "\u{2581}"), out);
                        }
                    }
                    *prev_special = false;
                }
            }
        }
        Ok(())
    }

    /// Split `text` into special tokens and the text between them: each special token
    /// that `carve` admits, longest first, is carved out of every text fragment that
    /// still contains it (llama.cpp's partitioning).
    fn partition(&self, text: &str, carve: Carve) -> Vec<Fragment> {
        let mut frags = vec![Fragment::Text(0, text.len())];
        let Some(matcher) = &self.special_matcher else {
            return frags;
        };
        // Which special tokens occur at all (most texts hold none of Gemma's thousands);
        // a flag per token, so that a text full of overlapping matches costs no memory.
        let mut present = vec![false; self.specials.len()];
        let mut any = false;
        for m in matcher.find_overlapping_iter(text) {
            let p = m.pattern().as_usize();
            if carve.admits(&self.specials[p]) {
                present[p] = true;
                any = true;
            }
        }
        if !any {
            return frags;
        }
        // For quoted text: whether an odd run of marks ends just before each byte.
        let quoted = (carve == Carve::UnquotedControl).then(|| odd_mark_runs(text));
        let is_quoted = |at: usize| quoted.as_ref().is_some_and(|q| q[at]);
        // Pattern order is already longest first.
        for (p, special) in self.specials.iter().enumerate() {
            if !present[p] {
                continue;
            }
            let (tok, id) = (special.text.as_str(), special.id);
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(a, b) = f else {
                    next.push(f);
                    continue;
                };
                let (mut start, mut search) = (a, a);
                while let Some(k) = text[search..b].find(tok) {
                    let at = search + k;
                    if is_quoted(at) {
                        // Spelled inside quoted text: stays text; look further on.
                        search = at + text[at..].chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    if at > start {
                        next.push(Fragment::Text(start, at));
                    }
                    next.push(Fragment::Special(id));
                    start = at + tok.len();
                    search = start;
                }
                if start < b {
                    next.push(Fragment::Text(start, b));
                }
            }
            frags = next;
        }
        frags
    }

    fn encode_bpe(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        let Some(bpe) = &self.bpe else {
            return Err(Error::Tokenizer("byte-level BPE model missing".into()));
        };
        let enc = crate::io::tokenizer::guarded(|| bpe.encode(piece, false))
            .map_err(|e| Error::Tokenizer(format!("BPE encoding failed: {e}")))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// SentencePiece-style merging of `text` (spaces already `▁`), from the definition in
    /// the module doc.
    fn encode_spm(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        // One symbol per character, in a doubly linked list.
        let mut syms: Vec<Sym> = Vec::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            let k = syms.len();
            syms.push(Sym {
                start: i,
                len: c.len_utf8(),
                prev: k.checked_sub(1),
                next: chars.peek().map(|_| k + 1),
            });
        }
        let mut queue = BinaryHeap::new();
        let push = |q: &mut BinaryHeap<Bigram>, syms: &[Sym], l: usize, r: usize| {
            let s = &text[syms[l].start..syms[r].start + syms[r].len];
            if let Some(id) = self.piece_id(s) {
                q.push(Bigram {
                    score: self.scores[id as usize],
                    left: l,
                    right: r,
                    len: s.len(),
                });
            }
        };
        for i in 1..syms.len() {
            push(&mut queue, &syms, i - 1, i);
        }
        while let Some(bg) = queue.pop() {
            let (l, r) = (bg.left, bg.right);
            // Skip pairs whose symbols have changed since the pair was queued.
            if syms[l].len == 0 || syms[r].len == 0 || syms[l].len + syms[r].len != bg.len {
                continue;
            }
            syms[l].len += syms[r].len;
            syms[r].len = 0;
            syms[l].next = syms[r].next;
            if let Some(nx) = syms[r].next {
                syms[nx].prev = Some(l);
            }
            if let Some(pv) = syms[l].prev {
                push(&mut queue, &syms, pv, l);
            }
            if let Some(nx) = syms[l].next {
                push(&mut queue, &syms, l, nx);
            }
        }
        let mut i = Some(0);
        while let Some(k) = i {
            let s = &text[syms[k].start..syms[k].start + syms[k].len];
            match self.piece_id(s) {
                Some(id) => out.push(id),
                None => {
                    for &b in s.as_bytes() {
                        match self.byte_tokens[b as usize] {
                            Some(id) => out.push(id),
                            None => out.extend(self.unk),
                        }
                    }
                }
            }
            i = syms[k].next;
        }
    }

    /// The id of text piece `s` for SentencePiece merging: any token but a control
    /// token, which text never becomes (in a raw prompt a control token's spelling is
    /// carved out before merging, so this changes nothing there; in quoted chat text it
    /// keeps a person's `<start_of_turn>` from merging into the real one).
    fn piece_id(&self, s: &str) -> Option<u32> {
        let id = *self.ids.get(s)?;
        (self.types[id as usize] != TokenType::Control).then_some(id)
    }

    /// The bytes token `id` stands for; control tokens give their text, or nothing with
    /// `skip_special`. Errors if `id` is outside the vocabulary.
    pub fn token_bytes(&self, id: u32, skip_special: bool) -> Result<Vec<u8>> {
        let text = self.tokens.get(id as usize).ok_or_else(|| {
            Error::Tokenizer(format!(
                "token id {id} is outside the vocabulary of {} tokens",
                self.tokens.len()
            ))
        })?;
        let ty = self.types[id as usize];
        Ok(match ty {
            TokenType::Control | TokenType::Unused | TokenType::Unknown if skip_special => {
                Vec::new()
            }
            TokenType::UserDefined if skip_special && is_marker(text) => Vec::new(),
            TokenType::Control | TokenType::Unused => text.as_bytes().to_vec(),
            TokenType::Unknown if self.kind == TokenizerKind::SentencePiece => {
                "\u{2585}".as_bytes().to_vec()
            }
            TokenType::Byte if self.kind == TokenizerKind::SentencePiece => {
                match u8::from_str_radix(text.trim_start_matches("<0x").trim_end_matches('>'), 16) {
                    Ok(b) => vec![b],
                    Err(_) => text.as_bytes().to_vec(),
                }
            }
            TokenType::UserDefined => text.as_bytes().to_vec(),
            _ => match self.kind {
                TokenizerKind::SentencePiece => text.replace('\u{2581}', " ").into_bytes(),
                TokenizerKind::ByteLevelBpe => text
                    .chars()
                    .flat_map(|c| match self.unicode_to_byte.get(&c) {
                        Some(&b) => vec![b],
                        None => c.to_string().into_bytes(),
                    })
                    .collect(),
            },
        })
    }

    /// The text of `ids` (invalid UTF-8 becomes U+FFFD); with `skip_special`, control
    /// tokens (BOS, `<|im_end|>`) are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.token_bytes(id, skip_special)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The character [`GgufTokenizer::quote_text`] marks quoted text with: U+FDD0, a Unicode
/// noncharacter (reserved for a program's internal use, never text a person means).
pub const QUOTE_MARK: char = '\u{FDD0}';

/// A control or user-defined token, carved out of text before tokenising.
#[derive(Clone, Debug)]
struct Special {
    text: String,
    id: u32,
    /// A control token (`<|im_start|>`), not a user-defined one (Gemma's `\n\n`).
    control: bool,
}

impl Special {
    /// Whether quoting can keep this token out of quoted text: a control token whose
    /// text holds no [`QUOTE_MARK`] (one that does is never parsed from quoted text).
    fn quotable(&self) -> bool {
        self.control && !self.text.contains(QUOTE_MARK)
    }
}

/// Which special tokens [`GgufTokenizer::partition`] carves out of text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carve {
    /// Control and user-defined tokens wherever they are spelled: a raw prompt
    /// (llama.cpp's `parse_special`).
    All,
    /// User-defined tokens only: plain text (llama.cpp without `parse_special`).
    UserDefined,
    /// Quotable control tokens, where not quoted: the first pass over a rendered chat.
    UnquotedControl,
}

impl Carve {
    fn admits(self, s: &Special) -> bool {
        match self {
            Carve::All => true,
            Carve::UserDefined => !s.control,
            Carve::UnquotedControl => s.quotable(),
        }
    }
}

/// For each byte position of `text` (and its end), whether an odd number of
/// [`QUOTE_MARK`]s ends right before it: a control token starting there was quoted.
fn odd_mark_runs(text: &str) -> Vec<bool> {
    let mut odd = vec![false; text.len() + 1];
    let mut run_odd = false;
    for (i, c) in text.char_indices() {
        odd[i] = run_odd;
        run_odd = c == QUOTE_MARK && !run_odd;
    }
    odd[text.len()] = run_odd;
    odd
}

/// Quoted text back to what was quoted: a doubled [`QUOTE_MARK`] becomes one, a single
/// one (put before a control token's spelling) goes.
fn unquote(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending = false;
    for c in text.chars() {
        if c == QUOTE_MARK {
            if pending {
                out.push(QUOTE_MARK);
            }
            pending = !pending;
        } else {
            pending = false;
            out.push(c);
        }
    }
    out
}

/// A piece of text to tokenise: a byte range, or a special token already found.
#[derive(Clone, Copy, Debug)]
enum Fragment {
    Text(usize, usize),
    Special(u32),
}

/// A symbol of the SentencePiece merge: `len` bytes from `start` (0 once merged away).
struct Sym {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and `right` into a token of `score`.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Highest score first; among equal scores the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
    }
}

/// The pre-tokenizer `tokenizer.ggml.pre` names (`default` when the key is missing, as
/// llama.cpp reads it); an unknown name is refused with the list lucent reads.
fn pre_tokenizer_of(f: &GgufFile) -> Result<&'static PreTokenizer> {
    let name = f.opt_str("tokenizer.ggml.pre")?.unwrap_or("default");
    pre_tokenizer(name).ok_or_else(|| {
        tok_err(
            f,
            format!(
                "tokenizer.ggml.pre = '{name}' is a pre-tokenizer lucent does not read; it reads {}",
                pre_tokenizers::names().join(", ")
            ),
        )
    })
}

/// Build the `tokenizers` BPE with the pre-tokenizer `tokenizer.ggml.pre` names
/// (`io::pre_tokenizers`).
fn build_bpe(f: &GgufFile, tokens: &[String]) -> Result<tokenizers::Tokenizer> {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

    let pre = pre_tokenizer_of(f)?;
    let merges_raw = f.get_str_array("tokenizer.ggml.merges")?;
    let mut merges = Vec::with_capacity(merges_raw.len());
    for (i, m) in merges_raw.iter().enumerate() {
        let (a, b) = m.split_once(' ').ok_or_else(|| {
            tok_err(
                f,
                format!(
                    "tokenizer.ggml.merges[{i}] = {m:?} is not two tokens separated by a space"
                ),
            )
        })?;
        merges.push((a.to_string(), b.to_string()));
    }
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| tok_err(f, format!("cannot build the BPE model: {e}")))?;

    let mut steps = Vec::with_capacity(pre.regexes.len() + 1);
    for r in pre.regexes {
        let split = Split::new(
            SplitPattern::Regex((*r).into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| {
            tok_err(
                f,
                format!("pre-tokenizer '{}': regex {r:?}: {e}", pre.names[0]),
            )
        })?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    // The pieces, byte-encoded (GPT-2's byte → character table); no regex of its own.
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, false, false,
    )));
    let pre_tok = PreTokenizerWrapper::Sequence(Sequence::new(steps));
    let mut tk = tokenizers::Tokenizer::new(model);
    tk.with_pre_tokenizer(Some(pre_tok));
    Ok(tk)
}

/// Whether a user-defined token is a marker rather than text: `<start_of_image>`,
/// `<|tool_call|>`, `[multimodal]` (Gemma 3's vocabulary types them user-defined, as it
/// does the HTML tags `<table>`, `</td>` and whitespace runs, which are text). A marker is
/// wrapped in `<…>` or `[…]`, holds no whitespace, and either is `[…]` or holds `_` or
/// `|` (no HTML tag does). Markers are left out of generated text like control tokens,
/// unless special tokens are asked for.
pub fn is_marker(text: &str) -> bool {
    let inner = match (text.chars().next(), text.chars().last()) {
        (Some('<'), Some('>')) | (Some('['), Some(']')) if text.len() > 2 => {
            &text[1..text.len() - 1]
        }
        _ => return false,
    };
    !inner.is_empty()
        && !inner.chars().any(char::is_whitespace)
        && (text.starts_with('[') || inner.contains('_') || inner.contains('|'))
}

impl Tokenizer for GgufTokenizer {
    fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    fn encode_ids(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        self.encode_with(text, add_special, parse_special)
    }

    fn token_bytes(&self, id: u32, skip_special: bool) -> Result<Vec<u8>> {
        GgufTokenizer::token_bytes(self, id, skip_special)
    }

    fn token_piece(&self, id: u32) -> Option<String> {
        self.token_text(id).map(str::to_string)
    }

    fn is_special(&self, id: u32) -> bool {
        match self.token_type(id) {
            Some(TokenType::Control | TokenType::Unused) => true,
            Some(TokenType::UserDefined) => self.token_text(id).is_some_and(is_marker),
            _ => false,
        }
    }

    fn is_end_of_generation(&self, id: u32) -> bool {
        self.is_eog(id)
    }

    fn quote_text(&self, text: &str) -> String {
        GgufTokenizer::quote_text(self, text)
    }

    fn encode_quoted(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        GgufTokenizer::encode_quoted(self, text, add_special)
    }
}

#[cfg(test)]
mod tests {
    use super::is_marker;

    #[test]
    fn markers_are_told_from_html_tags_and_whitespace() {
        for m in [
            "<start_of_image>",
            "<end_of_image>",
            "[multimodal]",
            "<|tool_call|>",
        ] {
            assert!(is_marker(m), "{m}");
        }
        for text in [
            "<table>", "</td>", "<h1>", "<>", "[]", "\n\n", "   ", "a_b", "< a_b >",
        ] {
            assert!(!is_marker(text), "{text:?}");
        }
    }
}
