//! Perplexity of a decoder on a text, by llama.cpp's `llama-perplexity` procedure, so
//! that the two engines' numbers can be set side by side:
//!
//! PPL = exp( (1/N) Σᵢ −log p(xᵢ | x_<i) )
//!
//! over the scored tokens xᵢ, with llama-perplexity's windows (its
//! `tools/perplexity/perplexity.cpp`, `perplexity()`):
//! - the whole text is tokenised once, BOS first where the vocabulary adds it (special
//!   token text in the text stays text);
//! - it is cut into n_chunk = ⌊n_tokens / n_ctx⌋ windows of n_ctx tokens (the tail is
//!   dropped; `--chunks N` keeps the first N); each window runs from an empty KV cache, its first token replaced by BOS
//!   (where the vocabulary adds BOS), in pieces of at most 512 tokens (llama.cpp's batch);
//! - only the second half of a window is scored: the logits at positions
//!   first = n_ctx / 2 … n_ctx − 2 predict the tokens after them, so that every scored
//!   token has at least n_ctx / 2 tokens of context (n_ctx − first − 1 tokens a window);
//! - each −log p as llama.cpp's `log_softmax`: the max in f32, Σ exp(z − max) in f64,
//!   log p = (z_tok − max) − log Σ; the sums of nll and nll² in f64;
//! - after each window the running estimate exp(Σ nll / count) (llama-perplexity prints
//!   `[i]x,`); at the end PPL = exp(μ) with μ = Σ nll / N, and its error
//!   sqrt((Σ nll² / N − μ²) / (N − 1)) · PPL (`Final estimate: PPL = x +/- y`).
//!
//! llama-perplexity puts several windows in one batch as separate sequences when its
//! batch is larger than a window; each sequence's rows are computed apart, so the numbers
//! are those of one window at a time, which is how lucent runs them.

use crate::model::DecoderModel;
use crate::pipeline::generate::TextModel;
use crate::{Error, Result};

/// The fewest positions a window may have.
pub const MIN_CTX: usize = 16;

/// How many tokens llama.cpp evaluates at once (its default `n_batch` / `n_ubatch`); a
/// window longer than this runs in pieces of this many through the KV cache, as
/// llama.cpp's does, so that every row is summed as llama.cpp sums it.
pub const BATCH: usize = 512;

/// The perplexity of a model on a text, with what went into it.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// n_ctx: positions per window.
    pub ctx: usize,
    /// Tokens of the whole text (BOS included).
    pub n_tokens: usize,
    /// Windows evaluated: ⌊n_tokens / n_ctx⌋, or fewer when asked.
    pub chunks: usize,
    /// Tokens scored: chunks · (n_ctx − n_ctx/2 − 1).
    pub tokens_scored: usize,
    /// The running estimate exp(Σ nll / count) after each window.
    pub running: Vec<f64>,
    /// exp(mean nll).
    pub ppl: f64,
    /// The estimate's standard error, llama-perplexity's `+/-`.
    pub ppl_err: f64,
    /// Σ nll over the scored tokens (nats).
    pub nll_sum: f64,
    /// Σ nll² over the scored tokens.
    pub nll2_sum: f64,
}

impl Perplexity {
    /// Mean negative log-likelihood per scored token, in nats (log PPL).
    pub fn mean_nll(&self) -> f64 {
        self.nll_sum / self.tokens_scored as f64
    }
}

/// −log p(`tok`) under `logits`, as llama.cpp's `log_softmax` computes it: the max in
/// f32, Σ exp(z − max) in f64 of f32 terms, (z_tok − max) − log Σ.
pub fn token_nll(logits: &[f32], tok: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&z| f64::from((z - max).exp())).sum();
    -(f64::from(logits[tok] - max) - sum.ln())
}

/// Check a window length against the model before any work: at least [`MIN_CTX`], at
/// most the model's context.
pub fn check_ctx(model: &DecoderModel, ctx: usize) -> Result<()> {
    let max = model.context_len();
    if ctx < MIN_CTX {
        return Err(Error::Argument(format!(
            "--ctx {ctx}: a window needs at least {MIN_CTX} positions (half of it is context, \
             half is scored); llama-perplexity's default is 512"
        )));
    }
    if ctx > max {
        return Err(Error::Argument(format!(
            "--ctx {ctx} is longer than the model's context ({max} positions); give at most {max}"
        )));
    }
    Ok(())
}

/// The perplexity of `model` on `text` by llama-perplexity's procedure (module docs),
/// with windows of `ctx` tokens, at most `max_chunks` of them (llama-perplexity's
/// `--chunks`; None: every whole window of the text). `on_chunk(done, chunks,
/// running_ppl)` is called after each window. Errors, before any work, for an empty
/// text, a `ctx` the model cannot run ([`check_ctx`]), a text shorter than two windows,
/// or `max_chunks` of 0.
pub fn perplexity(
    model: &TextModel,
    text: &str,
    ctx: usize,
    max_chunks: Option<usize>,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Perplexity> {
    if text.trim().is_empty() {
        return Err(Error::Argument(
            "the text is empty: perplexity needs text to score (at least two windows of --ctx tokens)"
                .into(),
        ));
    }
    check_ctx(&model.model, ctx)?;
    // llama-perplexity: common_tokenize(ctx, text, add_special = true), specials unparsed.
    let ids = model.tokenizer.encode_ids(text, true, false)?;
    let bos = match (model.add_bos, ids.first()) {
        (true, Some(&b)) => Some(b),
        _ => None,
    };
    perplexity_of_ids(&model.model, &ids, bos, ctx, max_chunks, on_chunk)
}

/// [`perplexity`] of token ids already made: `ids` is the whole tokenised text and `bos`
/// the token that replaces each window's first (None: windows are taken as they are).
pub fn perplexity_of_ids(
    model: &DecoderModel,
    ids: &[u32],
    bos: Option<u32>,
    ctx: usize,
    max_chunks: Option<usize>,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Perplexity> {
    check_ctx(model, ctx)?;
    if max_chunks == Some(0) {
        return Err(Error::Argument(
            "--chunks 0: give at least 1 window, or leave it out for every window of the text"
                .into(),
        ));
    }
    let vocab = model.config.vocab_size;
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
        return Err(Error::Argument(format!(
            "token id {bad} is outside the model's vocabulary of {vocab}"
        )));
    }
    if ids.len() < 2 * ctx {
        return Err(Error::Argument(format!(
            "the text is {} tokens; perplexity with a window (--ctx) of {ctx} needs at least {} \
             (two windows): give a longer text or a smaller --ctx",
            ids.len(),
            2 * ctx
        )));
    }
    // llama-perplexity: n_chunk = min(--chunks, n_tokens / n_ctx).
    let chunks = (ids.len() / ctx).min(max_chunks.unwrap_or(usize::MAX));
    let first = ctx / 2;
    let mut cache = model.new_cache(ctx);
    let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
    let mut running = Vec::with_capacity(chunks);
    for c in 0..chunks {
        let start = c * ctx;
        let mut window = ids[start..start + ctx].to_vec();
        if let Some(b) = bos {
            window[0] = b;
        }
        cache.clear();
        for a in (0..ctx).step_by(BATCH) {
            let b = (a + BATCH).min(ctx);
            if b <= first {
                // Only fills the cache: llama.cpp asks no logits of these rows.
                model.forward(&window[a..b], Some(&mut cache), true, None)?;
                continue;
            }
            let from = first.max(a);
            // The rows from..b of the window: (b − from, V)
            let logits = model.forward_from(&window[a..b], Some(&mut cache), from - a)?;
            for pos in from..b.min(ctx - 1) {
                let v = token_nll(logits.row(pos - from), ids[start + pos + 1] as usize);
                nll += v;
                nll2 += v * v;
            }
        }
        count += ctx - first - 1;
        running.push((nll / count as f64).exp());
        on_chunk(c + 1, chunks, (nll / count as f64).exp());
    }
    let n = count as f64;
    let mean = nll / n;
    let var = nll2 / n - mean * mean;
    let ppl = mean.exp();
    Ok(Perplexity {
        ctx,
        n_tokens: ids.len(),
        chunks,
        tokens_scored: count,
        running,
        ppl,
        ppl_err: (var.max(0.0) / (n - 1.0)).sqrt() * ppl,
        nll_sum: nll,
        nll2_sum: nll2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_nll_is_minus_log_softmax() {
        let z = [1.0f32, 2.0, 3.0];
        let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((token_nll(&z, 0) - (lse - 1.0)).abs() < 1e-6);
        assert!((token_nll(&z, 2) - (lse - 3.0)).abs() < 1e-6);
    }
}
