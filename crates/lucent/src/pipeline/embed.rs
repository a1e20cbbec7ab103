//! Sentence embeddings, as sentence-transformers defines them for a model folder:
//!
//! text → tokenizer (truncated to `max_seq_length`) → encoder → hidden states H (t, d)
//! → pooling → (optional) L2 normalisation → one vector e (d).
//!
//! Pooling over the real (non-padding) tokens, as `1_Pooling/config.json` says:
//! - mean:  e = Σₜ mₜ Hₜ / Σₜ mₜ          (all-MiniLM-L6-v2)
//! - cls:   e = H₀ (the `[CLS]` token)
//! - max:   eᵢ = maxₜ{Hₜᵢ : mₜ = 1}
//! - mean_sqrt_len: e = Σₜ mₜ Hₜ / √(Σₜ mₜ)
//!
//! Normalise (when `modules.json` lists a `Normalize` module): e ← e / ‖e‖₂, so that the
//! dot product of two embeddings is their cosine similarity.
//!
//! [`Embedder`] loads once and embeds many texts: it sorts inputs by token count so that
//! each batch pads little, runs batches, and returns vectors in input order.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::io::tokenizer::{pad_right, Encoding, HfTokenizer};
use crate::model::encoder::PositionIds;
use crate::model::EncoderModel;
use crate::nn::Trace;
use crate::runtime::Precision;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's vector (`[CLS]`).
    Cls,
    /// The mean over real tokens.
    Mean,
    /// The element-wise maximum over real tokens.
    Max,
    /// The sum over real tokens divided by √(number of tokens).
    MeanSqrtLen,
}

impl Pooling {
    /// The name used in sentence-transformers' config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Cls => "cls",
            Pooling::Mean => "mean",
            Pooling::Max => "max",
            Pooling::MeanSqrtLen => "mean_sqrt_len",
        }
    }
}

#[derive(Deserialize)]
struct PoolingFile {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
}

/// The sentence-transformers pipeline settings of a model folder.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbedConfig {
    /// Pooling over token vectors.
    pub pooling: Pooling,
    /// L2-normalise the pooled vector.
    pub normalize: bool,
    /// Longest input in tokens (special tokens included); longer inputs are truncated.
    pub max_seq_length: usize,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::format(path, format!("bad JSON: {e}")))
}

impl EmbedConfig {
    /// Read `modules.json`, the pooling module's `config.json` and
    /// `sentence_bert_config.json` from `dir`. Without sentence-transformers files:
    /// mean pooling, no normalisation, max_seq_length from the position table
    /// (`max_positions`, usually 512).
    pub fn read(dir: &Path, max_positions: usize) -> Result<Self> {
        let mut cfg = EmbedConfig {
            pooling: Pooling::Mean,
            normalize: false,
            max_seq_length: max_positions,
        };
        let modules_path = dir.join("modules.json");
        let mut pooling_dir: Option<PathBuf> = None;
        if modules_path.is_file() {
            let modules: Vec<ModuleEntry> = read_json(&modules_path)?;
            for m in &modules {
                let kind = m.kind.rsplit('.').next().unwrap_or(&m.kind);
                match kind {
                    "Pooling" => pooling_dir = Some(dir.join(&m.path)),
                    "Normalize" => cfg.normalize = true,
                    "Transformer" => {}
                    other => {
                        return Err(Error::format(
                            &modules_path,
                            format!("module type '{other}' is not supported; lucent runs Transformer, Pooling and Normalize"),
                        ))
                    }
                }
            }
        } else if dir.join("1_Pooling").is_dir() {
            pooling_dir = Some(dir.join("1_Pooling"));
        }
        if let Some(pd) = pooling_dir {
            let path = pd.join("config.json");
            let p: PoolingFile = read_json(&path)?;
            let modes = [
                (p.pooling_mode_cls_token, Pooling::Cls),
                (p.pooling_mode_mean_tokens, Pooling::Mean),
                (p.pooling_mode_max_tokens, Pooling::Max),
                (p.pooling_mode_mean_sqrt_len_tokens, Pooling::MeanSqrtLen),
            ];
            let on: Vec<Pooling> = modes.iter().filter(|m| m.0).map(|m| m.1).collect();
            cfg.pooling = match on.as_slice() {
                [one] => *one,
                _ => {
                    return Err(Error::format(
                        &path,
                        format!(
                            "exactly one pooling mode must be set (cls, mean, max or mean_sqrt_len); found {}",
                            on.len()
                        ),
                    ))
                }
            };
        }
        let sb = dir.join("sentence_bert_config.json");
        if sb.is_file() {
            let s: SentenceBertFile = read_json(&sb)?;
            if let Some(m) = s.max_seq_length {
                cfg.max_seq_length = m.min(max_positions);
            }
        }
        Ok(cfg)
    }
}

/// Pool the hidden states of a padded batch: one vector per row, over its first
/// `lengths[b]` (real) tokens.
///
/// # Shapes
/// hidden: (b, t, d), lengths: b → b vectors of d
pub fn pool(hidden: &Tensor, lengths: &[usize], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
    let [b, t, d] = hidden.dims()?;
    if lengths.len() != b || lengths.iter().any(|&n| n == 0 || n > t) {
        return Err(Error::Shape(format!(
            "pool: {b} rows of {t} tokens but lengths {lengths:?}"
        )));
    }
    let starts: Vec<(usize, usize)> = lengths
        .iter()
        .enumerate()
        .map(|(row, &n)| (row * t, n))
        .collect();
    Ok(pool_runs(hidden.data(), d, &starts, pooling))
}

/// Pool packed hidden states: one vector per segment `[segments[i], segments[i+1])`
/// (boundaries as [`EncoderModel::forward_packed`] returns them).
///
/// # Shapes
/// hidden: (1, T, d) → segments.len() − 1 vectors of d
pub fn pool_packed(hidden: &Tensor, segments: &[usize], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
    let [_, t, d] = hidden.dims()?;
    if segments.last() != Some(&t) || segments.windows(2).any(|w| w[1] <= w[0]) {
        return Err(Error::Shape(format!(
            "pool_packed: segments {segments:?} do not cover {t} tokens"
        )));
    }
    let runs: Vec<(usize, usize)> = segments.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
    Ok(pool_runs(hidden.data(), d, &runs, pooling))
}

/// One pooled vector per run of `(first token, tokens)` rows of width d in `h`.
fn pool_runs(h: &[f32], d: usize, runs: &[(usize, usize)], pooling: Pooling) -> Vec<Vec<f32>> {
    runs.iter()
        .map(|&(first, n)| {
            let tok = |i: usize| &h[(first + i) * d..(first + i + 1) * d];
            match pooling {
                Pooling::Cls => tok(0).to_vec(),
                Pooling::Max => {
                    let mut e = tok(0).to_vec();
                    for i in 1..n {
                        for (m, &x) in e.iter_mut().zip(tok(i)) {
                            *m = m.max(x);
                        }
                    }
                    e
                }
                Pooling::Mean | Pooling::MeanSqrtLen => {
                    let mut e = vec![0.0f32; d];
                    for i in 0..n {
                        for (s, &x) in e.iter_mut().zip(tok(i)) {
                            *s += x;
                        }
                    }
                    let div = if pooling == Pooling::Mean {
                        n as f32
                    } else {
                        (n as f32).sqrt()
                    };
                    e.iter_mut().for_each(|x| *x /= div);
                    e
                }
            }
        })
        .collect()
}

/// e / ‖e‖₂ in place (a zero vector stays zero).
pub fn l2_normalize(e: &mut [f32]) {
    let norm = e.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        e.iter_mut().for_each(|x| *x /= norm);
    }
}

/// cos(a, b) = a·b / (‖a‖ ‖b‖) (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// A sentence-embedding model, loaded once, called many times.
#[derive(Clone)]
pub struct Embedder {
    model: EncoderModel,
    tokenizer: HfTokenizer,
    config: EmbedConfig,
    name: String,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish()
    }
}

/// Default number of texts per forward pass.
pub const DEFAULT_BATCH: usize = 32;

impl Embedder {
    /// Open an encoder by name (`minilm`, fetched on first use) or folder.
    pub fn open(spec: &str) -> Result<Embedder> {
        let model = crate::api::open(spec)?;
        Ok(model.embedder()?.as_ref().clone())
    }

    /// Load a model folder in Hugging Face layout (config.json, model.safetensors,
    /// tokenizer.json, and optionally sentence-transformers' modules.json,
    /// 1_Pooling/config.json, sentence_bert_config.json).
    pub fn load(dir: &Path) -> Result<Self> {
        let model = crate::model::family::load_hf_encoder(dir)?;
        // Positions usable by tokens: RoBERTa-style numbering starts after the padding row.
        let usable = match model.embeddings.position_ids {
            PositionIds::FromZero => model.config.max_positions,
            PositionIds::AfterPadding { padding_idx } => {
                model.config.max_positions.saturating_sub(padding_idx + 1)
            }
        };
        let config = EmbedConfig::read(dir, usable)?;
        let mut tokenizer = HfTokenizer::from_file(dir.join("tokenizer.json"))?;
        tokenizer.set_max_length(Some(config.max_seq_length))?;
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(Embedder {
            model,
            tokenizer,
            config,
            name,
        })
    }

    /// The display name (the folder's name unless set).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Set the display name (e.g. the known model's name).
    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// Compute the encoder's products in `precision` ([`EncoderModel::set_precision`]):
    /// [`Precision::Int8`] is faster and lands near exact (`lucent bench precision`
    /// measures how near), [`Precision::Exact`] is sentence-transformers' numbers.
    pub fn set_precision(&mut self, precision: Precision) {
        self.model.set_precision(precision);
    }

    /// The precision its products are computed in.
    pub fn precision(&self) -> Precision {
        self.model.precision
    }

    /// Embedding width d.
    pub fn dim(&self) -> usize {
        self.model.config.d_model
    }

    /// The pipeline settings.
    pub fn config(&self) -> &EmbedConfig {
        &self.config
    }

    /// The tokenizer (truncating to `max_seq_length`).
    pub fn tokenizer(&self) -> &HfTokenizer {
        &self.tokenizer
    }

    /// The encoder.
    pub fn model(&self) -> &EncoderModel {
        &self.model
    }

    /// The encoder, to change in place (one layer's product in another precision, to
    /// measure what each costs); the tokenizer and the pooling stay as they are.
    pub fn model_mut(&mut self) -> &mut EncoderModel {
        &mut self.model
    }

    /// Tokenize texts (with special tokens, truncated).
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<Encoding>> {
        self.tokenizer.encode_batch(texts, true)
    }

    /// Hidden states of a set of encodings as one padded batch, with an optional trace.
    ///
    /// # Shapes
    /// b encodings, longest t → (b, t, d)
    pub fn hidden_states(
        &self,
        encodings: &[&Encoding],
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let p = pad_right(encodings, self.tokenizer.pad_id());
        let rows = |v: &[u32]| -> Vec<Vec<usize>> {
            v.chunks(p.t.max(1))
                .map(|r| r.iter().map(|&x| x as usize).collect())
                .collect()
        };
        let ids = rows(&p.ids);
        let types = rows(&p.type_ids);
        let mask: Vec<Vec<bool>> = p
            .mask
            .chunks(p.t.max(1))
            .map(|r| r.iter().map(|&m| m == 1).collect())
            .collect();
        self.model.forward(&ids, Some(&types), Some(&mask), trace)
    }

    /// Embed encodings already made, as one packed batch (no padding: see
    /// [`EncoderModel::forward_packed`]).
    pub fn embed_encodings(&self, encodings: &[&Encoding]) -> Result<Vec<Vec<f32>>> {
        if self.model.relative_bias.is_some() {
            // A relative-position bias spans all positions of a row, so these models
            // run padded batches (the batches are length-sorted: little padding).
            let hidden = self.hidden_states(encodings, None)?; // (b, t, d)
            let lengths: Vec<usize> = encodings.iter().map(|e| e.len()).collect();
            let mut out = pool(&hidden, &lengths, self.config.pooling)?;
            if self.config.normalize {
                out.iter_mut().for_each(|e| l2_normalize(e));
            }
            return Ok(out);
        }
        let ids: Vec<Vec<usize>> = encodings
            .iter()
            .map(|e| e.ids.iter().map(|&x| x as usize).collect())
            .collect();
        let types: Vec<Vec<usize>> = encodings
            .iter()
            .map(|e| e.type_ids.iter().map(|&x| x as usize).collect())
            .collect();
        let (hidden, segments) = self.model.forward_packed(&ids, Some(&types))?; // (1, T, d)
        let mut out = pool_packed(&hidden, &segments, self.config.pooling)?;
        if self.config.normalize {
            out.iter_mut().for_each(|e| l2_normalize(e));
        }
        Ok(out)
    }

    /// Embed texts, [`DEFAULT_BATCH`] at a time; one vector per text, in input order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_batched(texts, DEFAULT_BATCH)
    }

    /// Embed one text.
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        let mut v = self.embed_batched(&[text], 1)?;
        v.pop()
            .ok_or_else(|| Error::Argument("no embedding came back".into()))
    }

    /// Embed texts `batch` at a time. Texts are sorted by token count (longest first) so
    /// that each batch pads little; the vectors come back in input order.
    pub fn embed_batched(&self, texts: &[&str], batch: usize) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Err(Error::Argument(
                "no input texts: give at least one text to embed".into(),
            ));
        }
        if batch == 0 {
            return Err(Error::Argument("batch size must be at least 1".into()));
        }
        let encodings = self.encode(texts)?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].len()));
        let groups: Vec<&[usize]> = order.chunks(batch).collect();
        let run = |chunk: &[usize]| -> Result<Vec<Vec<f32>>> {
            let group: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            self.embed_encodings(&group)
        };
        let workers = crate::threads::threads().min(groups.len());
        let done: Vec<(usize, Vec<Vec<f32>>)> = if workers <= 1 {
            groups
                .iter()
                .enumerate()
                .map(|(g, chunk)| Ok((g, run(chunk)?)))
                .collect::<Result<_>>()?
        } else {
            parallel_batches(groups.len(), workers, |g| run(groups[g]))?
        };
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for (g, vecs) in done {
            for (&i, v) in groups[g].iter().zip(vecs) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// Run `n` batches on `workers` threads, each worker taking the next batch when free and
/// running it with single-threaded kernels (its own one-thread lucent runtime): data
/// parallelism, so no kernel pays for waking threads, and every op runs in parallel, not
/// only the matrix products. Results come back tagged with their batch index.
fn parallel_batches<T: Send>(
    n: usize,
    workers: usize,
    run: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<(usize, T)>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    // The workers' runtimes keep the caller's instruction set.
    let isa = crate::runtime::isa();
    let worker = || -> Result<Vec<(usize, T)>> {
        let pool = crate::Runtime::builder().threads(1).isa(isa).build()?;
        pool.install(|| {
            let mut mine = Vec::new();
            loop {
                let g = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if g >= n {
                    return Ok(mine);
                }
                mine.push((g, run(g)?));
            }
        })
    };
    let results: Vec<Result<Vec<(usize, T)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(worker)).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Argument(
                        "an embedding worker thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut all = Vec::with_capacity(n);
    for r in results {
        all.extend(r?);
    }
    Ok(all)
}

/// One term of a vector-arithmetic query: `+ word` or `- word`.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// +1 or −1.
    pub sign: f32,
    /// The text.
    pub text: String,
}

/// Parse `king - man + woman` (words and `+`/`-` as separate arguments, or glued:
/// `king-man+woman`). The first term is positive unless preceded by `-`.
pub fn parse_terms(args: &[String]) -> Result<Vec<Term>> {
    let joined = args.join(" ");
    let mut terms = Vec::new();
    let mut sign = 1.0f32;
    let mut current = String::new();
    let mut pending_sign = false;
    let flush = |current: &mut String, sign: f32, terms: &mut Vec<Term>| {
        let w = current.trim();
        if !w.is_empty() {
            terms.push(Term {
                sign,
                text: w.to_string(),
            });
        }
        current.clear();
    };
    for ch in joined.chars() {
        match ch {
            '+' | '-' => {
                if current.trim().is_empty() && pending_sign {
                    return Err(Error::Argument(format!(
                        "two operators in a row in '{joined}': write terms like king - man + woman"
                    )));
                }
                flush(&mut current, sign, &mut terms);
                sign = if ch == '+' { 1.0 } else { -1.0 };
                pending_sign = true;
            }
            _ => {
                if !ch.is_whitespace() || !current.is_empty() {
                    if !ch.is_whitespace() {
                        pending_sign = false;
                    }
                    current.push(ch);
                }
            }
        }
    }
    if pending_sign {
        return Err(Error::Argument(format!(
            "'{joined}' ends with an operator: write terms like king - man + woman"
        )));
    }
    flush(&mut current, sign, &mut terms);
    if terms.is_empty() {
        return Err(Error::Argument(
            "no terms: write an expression like king - man + woman".into(),
        ));
    }
    Ok(terms)
}

/// The result of [`analogy`].
#[derive(Clone, Debug)]
pub struct Analogy {
    /// The query vector Σ ± e(term), L2-normalised.
    pub query: Vec<f32>,
    /// Candidates (not among the terms) ranked by cosine with the query, best first.
    pub ranked: Vec<(String, f32)>,
}

/// Vector arithmetic on normalised embeddings: q = Σ sign · e(term), normalised; the
/// candidates ranked by cos(q, e(candidate)), leaving out the terms themselves.
pub fn analogy(embedder: &Embedder, terms: &[Term], candidates: &[String]) -> Result<Analogy> {
    if terms.is_empty() {
        return Err(Error::Argument("an analogy needs at least one term".into()));
    }
    let words: Vec<&str> = terms.iter().map(|t| t.text.as_str()).collect();
    let vecs = embedder.embed(&words)?;
    let mut query = vec![0.0f32; embedder.dim()];
    for (t, v) in terms.iter().zip(&vecs) {
        let mut v = v.clone();
        l2_normalize(&mut v);
        for (q, x) in query.iter_mut().zip(&v) {
            *q += t.sign * x;
        }
    }
    l2_normalize(&mut query);
    let cands: Vec<&str> = candidates
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !words.iter().any(|w| w.eq_ignore_ascii_case(c)))
        .collect();
    let mut ranked = Vec::new();
    if !cands.is_empty() {
        let cv = embedder.embed(&cands)?;
        ranked = cands
            .iter()
            .zip(&cv)
            .map(|(c, v)| (c.to_string(), cosine(&query, v)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    }
    Ok(Analogy { query, ranked })
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn terms_parse() -> TestResult {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let t = parse_terms(&s(&["king", "-", "man", "+", "woman"]))?;
        assert_eq!(
            t.iter()
                .map(|t| (t.sign, t.text.as_str()))
                .collect::<Vec<_>>(),
            vec![(1.0, "king"), (-1.0, "man"), (1.0, "woman")]
        );
        let t = parse_terms(&s(&["king-man+woman"]))?;
        assert_eq!(t.len(), 3);
        let t = parse_terms(&s(&["new york", "-", "usa"]))?;
        assert_eq!(t[0].text, "new york");
        assert!(parse_terms(&s(&["king", "-"])).is_err());
        assert!(parse_terms(&s(&["king", "-", "+", "man"])).is_err());
        assert!(parse_terms(&[]).is_err());
        Ok(())
    }

    #[test]
    fn pooling_modes() -> TestResult {
        // b = 1, t = 3 (last is padding), d = 2
        let h = Tensor::new(vec![1.0, 4.0, 3.0, 2.0, 100.0, 100.0], &[1, 3, 2])?;
        assert_eq!(pool(&h, &[2], Pooling::Mean)?[0], vec![2.0, 3.0]);
        assert_eq!(pool(&h, &[2], Pooling::Max)?[0], vec![3.0, 4.0]);
        assert_eq!(pool(&h, &[2], Pooling::Cls)?[0], vec![1.0, 4.0]);
        let s = pool(&h, &[2], Pooling::MeanSqrtLen)?[0].clone();
        assert!((s[0] - 4.0 / 2f32.sqrt()).abs() < 1e-6);
        assert!(pool(&h, &[4], Pooling::Mean).is_err());
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - 0.70710677).abs() < 1e-6);
        Ok(())
    }
}
