//! Constrained decoding (structured outputs): a [`Constraint`] (a JSON schema, any JSON
//! object, a Lark grammar or a regular expression) becomes a token mask, one link of the
//! [`Sampler`](crate::pipeline::generate::Sampler)'s chain.
//!
//! At each step the constraint says which tokens may come next: those whose bytes keep
//! the text so far a prefix of something the grammar accepts, and the end-of-generation
//! tokens once the text is complete. Every other token's logit becomes -∞ (after the
//! logit bias, before the penalties, temperature and top-k/top-p/min-p), so greedy
//! decoding picks the most likely *allowed* token and a draw never leaves the grammar:
//! where the model's own choice is allowed, nothing changes. The chosen token is fed to
//! the grammar's parser; when the text is complete and only an end token may follow,
//! generation ends without another forward pass.
//!
//! The grammar engine is [llguidance](https://github.com/guidance-ai/llguidance) (the one
//! vLLM and llama.cpp use): an Earley parser over a lexer of derivative-based regexes,
//! walking a trie of the vocabulary's token bytes to compute a mask in well under a
//! millisecond. lucent gives it the vocabulary ([`Vocabulary`], built once per model from
//! the tokenizer's bytes of each token id; special tokens are marked so that no grammar
//! writes them as text) and applies the mask it computes ([`Mask`]).
//!
//! A constraint compiles once: the vocabulary keeps the last [`GRAMMAR_CACHE`] compiled
//! grammars, keyed by the constraint's text, and hands out copies at the start state (a
//! server checks a request's schema when it arrives and its slot takes the same compiled
//! grammar; the next request with that schema compiles nothing).

use std::sync::{Arc, Mutex};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::io::tokenizer::Tokenizer;
use crate::{Error, Result};

/// The whitespace allowed between two JSON tokens: a space, or one or two newlines and
/// up to 20 spaces or tabs (llama.cpp's JSON-schema grammars allow the same). Unbounded
/// whitespace lets a small model loop on newlines until `max_tokens` cuts the document.
pub const JSON_WHITESPACE: &str = r"(\x20|\n{1,2}[\x20\x09]{0,20})";

/// How many compiled grammars a [`Vocabulary`] keeps (least recently used out first).
pub const GRAMMAR_CACHE: usize = 8;

/// What the generated text must match.
///
/// ```
/// use lucent::pipeline::constrain::Constraint;
/// let c = Constraint::json_schema_str(r#"{"type": "object", "required": ["name"],
///     "properties": {"name": {"type": "string"}}}"#)?;
/// assert_eq!(c.kind(), "JSON schema");
/// assert_eq!(Constraint::Regex("[0-9]+".into()).kind(), "regex");
/// # Ok::<(), lucent::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// A JSON document valid under this JSON schema (draft 2020-12 and earlier; see
    /// llguidance's `json_schema.md` for the keywords it honours). Properties are
    /// written in the schema's order.
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// Text in the language of this Lark grammar (llguidance's variant of Lark: a
    /// `start` rule, `%json {...}` for an embedded schema, `/regex/` terminals).
    Lark(String),
    /// Text that matches this regular expression as a whole (Rust `regex` syntax).
    Regex(String),
}

impl Constraint {
    /// A JSON schema from its text; errors name what is wrong with the JSON.
    pub fn json_schema_str(text: &str) -> Result<Constraint> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::Argument(format!("the JSON schema is not valid JSON: {e}")))?;
        Ok(Constraint::JsonSchema(v))
    }

    /// What kind of constraint it is, in words (`JSON schema`, `JSON object`, `Lark
    /// grammar`, `regex`), for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Constraint::JsonSchema(_) => "JSON schema",
            Constraint::JsonObject => "JSON object",
            Constraint::Lark(_) => "Lark grammar",
            Constraint::Regex(_) => "regex",
        }
    }

    /// The text that names it in the grammar cache: its kind and its JSON (keys in the
    /// schema's order, which is the order it writes them), grammar or regex.
    fn key(&self) -> String {
        match self {
            Constraint::JsonSchema(v) => format!("json_schema\0{v}"),
            Constraint::JsonObject => "json_object".into(),
            Constraint::Lark(g) => format!("lark\0{g}"),
            Constraint::Regex(r) => format!("regex\0{r}"),
        }
    }

    /// llguidance's form of it. JSON gets bounded whitespace ([`JSON_WHITESPACE`]) unless
    /// the schema sets its own `x-guidance` options.
    fn grammar(&self) -> TopLevelGrammar {
        let bounded = |mut v: Value| {
            if let Value::Object(o) = &mut v {
                o.entry("x-guidance")
                    .or_insert_with(|| serde_json::json!({"whitespace_pattern": JSON_WHITESPACE}));
            }
            TopLevelGrammar::from_json_schema(v)
        };
        match self {
            Constraint::JsonSchema(v) => bounded(v.clone()),
            Constraint::JsonObject => bounded(serde_json::json!({"type": "object"})),
            Constraint::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            Constraint::Regex(r) => TopLevelGrammar::from_regex(r),
        }
    }
}

/// A model's vocabulary as the grammar engine sees it: a trie of every token id's bytes
/// (special tokens marked with a 0xFF byte in front, so that no grammar writes them as
/// text), the end-of-generation tokens, and the parser factory that compiles
/// constraints against them. Built once per model ([`TextModel::vocabulary`]) and shared.
///
/// [`TextModel::vocabulary`]: crate::pipeline::generate::TextModel::vocabulary
pub struct Vocabulary {
    factory: ParserFactory,
    /// The tokens that end a generation (EOS, `<|im_end|>`, `<end_of_turn>`).
    end: Vec<u32>,
    /// Tokens in the trie (the tokenizer's vocabulary; a model's logits may be longer).
    size: usize,
    /// The last compiled constraints, most recently used first: (key, the start state).
    grammars: Mutex<Vec<(String, Mask)>>,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary")
            .field("size", &self.size)
            .field("end", &self.end)
            .finish()
    }
}

/// The trie with llguidance's view of tokenization (greedy over the trie: lucent never
/// asks llguidance to force tokens, so it only needs a valid tokenization).
struct TrieEnv {
    trie: TokTrie,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

impl Vocabulary {
    /// The vocabulary of `tok`: each id's bytes (a byte-level BPE token's bytes, a
    /// SentencePiece piece with `▁` as a space and `<0x0A>` as its byte), special tokens
    /// (control, unused, unknown) marked. Errors if the tokenizer has no
    /// end-of-generation token (a constrained text could never end).
    pub fn new(tok: &dyn Tokenizer) -> Result<Vocabulary> {
        let size = tok.vocab_size();
        let mut words = Vec::with_capacity(size);
        let mut end = Vec::new();
        for id in 0..size as u32 {
            let text = tok.token_bytes(id, false)?;
            // A token that disappears when special tokens are skipped is one (this also
            // catches SentencePiece's unknown token, which prints as "▅").
            let special = tok.is_special(id) || tok.token_bytes(id, true)?.is_empty();
            if tok.is_end_of_generation(id) {
                end.push(id);
            }
            words.push(if special {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                if text.is_empty() {
                    w.extend_from_slice(format!("<[{id}]>").as_bytes());
                } else {
                    w.extend_from_slice(&text);
                }
                w
            } else {
                text
            });
        }
        let Some(&first_end) = end.first() else {
            return Err(Error::Tokenizer(
                "the vocabulary has no end-of-generation token (EOS), so a constrained text \
                 could never end; constraints need a model with one"
                    .into(),
            ));
        };
        // The trie asserts its own invariants; a vocabulary that breaks one is an error.
        let trie = std::panic::catch_unwind(|| {
            TokTrie::from(&TokRxInfo::new(size as u32, first_end), &words).with_eos_tokens(&end)
        })
        .map_err(|_| {
            Error::Tokenizer(format!(
                "the grammar engine could not index this vocabulary of {size} tokens"
            ))
        })?;
        let env: TokEnv = Arc::new(TrieEnv { trie });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| Error::Tokenizer(format!("the grammar engine's vocabulary: {e:#}")))?;
        // Errors come back as values; nothing is printed.
        factory.quiet();
        Ok(Vocabulary {
            factory,
            end,
            size,
            grammars: Mutex::new(Vec::new()),
        })
    }

    /// The end-of-generation tokens.
    pub fn end_tokens(&self) -> &[u32] {
        &self.end
    }

    /// Compile `c` against this vocabulary: errors name the constraint's kind and what
    /// llguidance found wrong (for a schema, the keyword or the part at fault). A
    /// constraint compiled lately (one of the last [`GRAMMAR_CACHE`]) is not compiled
    /// again: the result is a copy of the kept start state.
    pub fn compile(&self, c: &Constraint) -> Result<Mask> {
        let key = c.key();
        // A poisoned lock only means another thread panicked mid-update: the list is
        // still a list of whole entries.
        let mut kept = self.grammars.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = kept.iter().position(|(k, _)| *k == key) {
            let entry = kept.remove(i);
            let mask = entry.1.clone();
            kept.insert(0, entry);
            return Ok(mask);
        }
        drop(kept);
        let mask = self.compile_fresh(c)?;
        let mut kept = self.grammars.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(k, _)| *k != key);
        kept.insert(0, (key, mask.clone()));
        kept.truncate(GRAMMAR_CACHE);
        Ok(mask)
    }

    /// How many compiled grammars are kept now (at most [`GRAMMAR_CACHE`]).
    pub fn kept_grammars(&self) -> usize {
        self.grammars.lock().map_or(0, |k| k.len())
    }

    /// [`Vocabulary::compile`] without the cache. A schema's error also says where in
    /// the schema the fault lies ([`Vocabulary::fault_path`]).
    fn compile_fresh(&self, c: &Constraint) -> Result<Mask> {
        match self.matcher(c) {
            Ok(matcher) => Ok(Mask {
                matcher,
                end: self.end.clone(),
                size: self.size,
                next: None,
            }),
            Err(e) => Err(Error::Argument(match c {
                Constraint::JsonSchema(root) => format!(
                    "the JSON schema cannot be used (at {}): {e}",
                    self.fault_path(root, &e)
                ),
                _ => format!("the {} cannot be used: {e}", c.kind()),
            })),
        }
    }

    /// llguidance's matcher for `c`, or its words for what is wrong.
    fn matcher(&self, c: &Constraint) -> std::result::Result<Matcher, String> {
        let parser = self
            .factory
            .create_parser(c.grammar())
            .map_err(|e| format!("{e:#}"))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(e.to_string()),
            None => Ok(matcher),
        }
    }

    /// Where in the schema `root` the fault that the grammar engine reported as `fault`
    /// lies, as a JSON pointer (`#/properties/a/items`; `#` for the root): the deepest
    /// subschema that, compiled alone, fails with the same words. Subschemas are tried
    /// first as they are (so that a `$ref` is not blamed for the schema it points to),
    /// then with the root's `$defs` / `definitions` beside them (so that a fault next to
    /// a reference is found). Only run for a schema that failed; at most
    /// [`FAULT_PROBES`] compilations.
    fn fault_path(&self, root: &Value, fault: &str) -> String {
        let mut subs = Vec::new();
        subschemas(root, "#".to_string(), &mut subs);
        // Deepest first: a fault in `#/properties/a` is also a fault of `#`.
        subs.sort_by_key(|(pointer, _)| std::cmp::Reverse(pointer.matches('/').count()));
        let defs: Vec<(&str, &Value)> = ["$defs", "definitions"]
            .into_iter()
            .filter_map(|k| root.get(k).map(|v| (k, v)))
            .collect();
        let mut probes = 0;
        for with_defs in [false, true] {
            for (pointer, sub) in &subs {
                if probes == FAULT_PROBES {
                    return "#".to_string();
                }
                let mut alone = (*sub).clone();
                if let (true, Value::Object(o)) = (with_defs, &mut alone) {
                    for (k, v) in &defs {
                        o.entry(*k).or_insert_with(|| (*v).clone());
                    }
                }
                probes += 1;
                if let Err(e) = self.matcher(&Constraint::JsonSchema(alone)) {
                    if e == fault {
                        return pointer.clone();
                    }
                }
            }
        }
        "#".to_string()
    }
}

/// How many subschemas [`Vocabulary::fault_path`] compiles at most to place a fault.
const FAULT_PROBES: usize = 256;

/// Every subschema below `schema` (not `schema` itself), with its JSON pointer from the
/// root: under the keywords of JSON Schema that hold schemas (`properties`, `items`,
/// `anyOf`, `$defs`, …).
fn subschemas<'a>(schema: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    let Value::Object(o) = schema else {
        return;
    };
    // RFC 6901's escapes for a key inside a pointer.
    let step = |key: &str| key.replace('~', "~0").replace('/', "~1");
    let add = |pointer: String, sub: &'a Value, out: &mut Vec<(String, &'a Value)>| {
        if sub.is_object() {
            out.push((pointer.clone(), sub));
            subschemas(sub, pointer, out);
        }
    };
    for (key, value) in o {
        let here = format!("{at}/{}", step(key));
        match (key.as_str(), value) {
            (
                "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas",
                Value::Object(map),
            ) => {
                for (name, sub) in map {
                    add(format!("{here}/{}", step(name)), sub, out);
                }
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems" | "items", Value::Array(list)) => {
                for (i, sub) in list.iter().enumerate() {
                    add(format!("{here}/{i}"), sub, out);
                }
            }
            (
                "items"
                | "additionalProperties"
                | "additionalItems"
                | "contains"
                | "not"
                | "if"
                | "then"
                | "else"
                | "propertyNames"
                | "unevaluatedItems"
                | "unevaluatedProperties",
                Value::Object(_),
            ) => add(here, value, out),
            _ => {}
        }
    }
}

/// A compiled constraint during one generation: the link of the sampler chain that sets
/// the logits of disallowed tokens to -∞, fed each chosen token. Cloning gives an
/// independent copy at the same point (one per sequence of a batch).
#[derive(Clone)]
pub struct Mask {
    matcher: Matcher,
    end: Vec<u32>,
    size: usize,
    /// The allowed set for the next token, computed once per step.
    next: Option<SimpleVob>,
}

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mask")
            .field("stopped", &self.matcher.is_stopped())
            .finish()
    }
}

impl Mask {
    /// The tokens allowed next (computed on first ask, then kept until a token is fed).
    fn allowed(&mut self) -> Result<&SimpleVob> {
        if self.next.is_none() {
            let m = self
                .matcher
                .compute_mask_or_eos()
                .map_err(|e| Error::Argument(format!("the constraint: {e}")))?;
            self.next = Some(m);
        }
        // Just set above when it was empty.
        self.next
            .as_ref()
            .ok_or_else(|| Error::Argument("the constraint has no mask".into()))
    }

    /// The chain's link: z ← -∞ for every token the constraint does not allow next
    /// (and for ids past the tokenizer's vocabulary). Errors if nothing is allowed
    /// (a grammar that cannot go on).
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<()> {
        let size = self.size;
        let allowed = self.allowed()?;
        if allowed.is_zero() {
            return Err(Error::Argument(
                "the constraint allows no token here (the grammar cannot continue)".into(),
            ));
        }
        mask_logits(allowed.as_slice(), size, logits);
        Ok(())
    }

    /// Feed the chosen token (one the mask allowed).
    pub fn accept(&mut self, id: u32) -> Result<()> {
        self.next = None;
        if self.end.contains(&id) && self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher
            .consume_token(id)
            .map_err(|e| Error::Argument(format!("the constraint refused token {id}: {e}")))
    }

    /// The end token to stop with if the text is complete and nothing but an end token
    /// may follow (None while the grammar can go on).
    pub fn finished(&mut self) -> Result<Option<u32>> {
        let end = self.end.clone();
        let allowed = self.allowed()?;
        let only_end = allowed.num_set() > 0
            && end.iter().any(|&e| allowed.is_allowed(e))
            && allowed.num_set() == end.iter().filter(|&&e| allowed.is_allowed(e)).count();
        Ok(only_end
            .then(|| end.iter().copied().find(|&e| allowed.is_allowed(e)))
            .flatten())
    }
}

/// z ← -∞ for every id i of `logits` that is not allowed: bit i % 32 of `words[i / 32]`
/// unset, or i ≥ `size`. A word at a time: a word with every bit set leaves its 32
/// logits alone and an empty one fills them, so a mask that allows a few tokens costs a
/// pass over the words, not a test per token. [`mask_logits_plain`] is its twin.
fn mask_logits(words: &[u32], size: usize, logits: &mut [f32]) {
    for (w, zs) in logits.chunks_mut(32).enumerate() {
        let mut bits = words.get(w).copied().unwrap_or(0);
        // Ids past the vocabulary are never allowed.
        let room = size.saturating_sub(w * 32);
        if room < 32 {
            bits &= (1u32 << room) - 1;
        }
        if bits == u32::MAX {
            continue;
        }
        if bits == 0 {
            zs.fill(f32::NEG_INFINITY);
            continue;
        }
        for (j, z) in zs.iter_mut().enumerate() {
            if bits >> j & 1 == 0 {
                *z = f32::NEG_INFINITY;
            }
        }
    }
}

/// [`mask_logits`] a token at a time, as the rule reads.
#[cfg(test)]
fn mask_logits_plain(words: &[u32], size: usize, logits: &mut [f32]) {
    for (i, z) in logits.iter_mut().enumerate() {
        let allowed = i < size && words.get(i / 32).is_some_and(|w| w >> (i % 32) & 1 == 1);
        if !allowed {
            *z = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_a_word_at_a_time_equals_a_token_at_a_time() {
        // Awkward lengths (not multiples of 32, logits longer and shorter than the
        // vocabulary) and words that are empty, full and mixed.
        let mut seed = 0x9e37_79b9_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for (n, size) in [
            (1, 1usize),
            (31, 40),
            (33, 33),
            (100, 70),
            (1000, 997),
            (4096, 5000),
        ] {
            let words: Vec<u32> = (0..size.div_ceil(32))
                .map(|w| match w % 4 {
                    0 => 0,
                    1 => u32::MAX,
                    _ => next(),
                })
                .collect();
            let logits: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
            let (mut fast, mut plain) = (logits.clone(), logits);
            mask_logits(&words, size, &mut fast);
            mask_logits_plain(&words, size, &mut plain);
            let bits = |v: &[f32]| v.iter().map(|z| z.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&plain), "n {n} size {size}");
        }
    }
}
