//! How far a decoder in one precision lands from the same decoder in exact: the share
//! of greedy continuations equal to exact's and the perplexity beside exact's
//! (`lucent bench precision`, the decoder precision test, docs/precision.md).
//!
//! A greedy continuation here is the prompt through a KV cache as one batch, then one
//! token at a time, each the argmax of the last logits (the lower id on a tie), for
//! `n` tokens or until the model's end-of-generation token: what `lucent generate
//! --temperature 0` produces.

use crate::io::tokenizer::Tokenizer;
use crate::model::DecoderModel;
use crate::pipeline::generate::TextModel;
use crate::pipeline::perplexity;
use crate::{Error, Result};

/// The argmax of one row of logits (the first on a tie).
fn argmax(z: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in z.iter().enumerate() {
        if v > z[best] {
            best = i;
        }
    }
    best as u32
}

/// The greedy continuation of `prompt_ids`: up to `n` new ids, stopping after an
/// end-of-generation id of `tokenizer` (module docs).
///
/// # Shapes
/// prompt_ids: t → up to n ids
pub fn greedy_ids(
    model: &DecoderModel,
    tokenizer: &dyn Tokenizer,
    prompt_ids: &[u32],
    n: usize,
) -> Result<Vec<u32>> {
    if prompt_ids.is_empty() {
        return Err(Error::Argument(
            "greedy_ids: the prompt has no tokens; give at least one".into(),
        ));
    }
    let mut cache = model.new_cache(prompt_ids.len() + n);
    let mut out = Vec::with_capacity(n);
    let mut z = model.forward(prompt_ids, Some(&mut cache), true, None)?; // (1, V)
    while out.len() < n {
        let next = argmax(z.data());
        out.push(next);
        if tokenizer.is_end_of_generation(next) || out.len() == n {
            break;
        }
        z = model.forward(&[next], Some(&mut cache), true, None)?; // (1, V)
    }
    Ok(out)
}

/// The prompts of a prompt file: one a line, `\n` in a line standing for a newline,
/// empty lines left out.
pub fn prompt_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.replace("\\n", "\n"))
        .collect()
}

/// Each prompt's token ids as a raw continuation reads it (BOS as the model's file
/// says, control-token spellings parsed, as `lucent generate --raw` does).
pub fn prompt_ids(model: &TextModel, prompts: &[String]) -> Result<Vec<Vec<u32>>> {
    prompts
        .iter()
        .map(|p| model.tokenizer.encode_ids(p, model.add_bos, true))
        .collect()
}

/// One precision's distance to exact on a prompt set and a text.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderDistance {
    /// Prompts whose greedy continuation equals exact's, id for id.
    pub equal: usize,
    /// Prompts compared.
    pub prompts: usize,
    /// Its perplexity on the text.
    pub ppl: f64,
    /// Exact's perplexity on the same windows.
    pub exact_ppl: f64,
}

impl DecoderDistance {
    /// The share of continuations equal to exact's (0 to 1).
    pub fn equal_share(&self) -> f64 {
        self.equal as f64 / self.prompts.max(1) as f64
    }

    /// Perplexity relative to exact's: ppl / exact_ppl − 1 (0.01 is 1 % above).
    pub fn ppl_change(&self) -> f64 {
        self.ppl / self.exact_ppl - 1.0
    }
}

/// What exact gives on a prompt set and a text, to hold other precisions to.
#[derive(Clone, Debug)]
pub struct ExactRun {
    /// The tokenised prompts.
    pub prompt_ids: Vec<Vec<u32>>,
    /// Exact's greedy continuation of each.
    pub continuations: Vec<Vec<u32>>,
    /// Exact's perplexity on the text.
    pub ppl: f64,
}

/// How the distance is measured: the prompts, the continuation length and the text
/// windows.
#[derive(Clone, Debug)]
pub struct DistanceSpec<'a> {
    /// The prompts (already split: [`prompt_lines`]).
    pub prompts: &'a [String],
    /// New tokens per greedy continuation (32 in the measure).
    pub new_tokens: usize,
    /// The text whose perplexity is measured.
    pub text: &'a str,
    /// Positions per perplexity window.
    pub ctx: usize,
    /// Windows scored (None: every whole window of the text).
    pub chunks: Option<usize>,
}

impl DistanceSpec<'_> {
    /// Run `model` (in whatever precision it was opened) on the prompts and the text.
    pub fn run(&self, model: &TextModel) -> Result<ExactRun> {
        let prompt_ids = prompt_ids(model, self.prompts)?;
        let continuations = prompt_ids
            .iter()
            .map(|ids| greedy_ids(&model.model, &*model.tokenizer, ids, self.new_tokens))
            .collect::<Result<Vec<_>>>()?;
        let p = perplexity::perplexity(model, self.text, self.ctx, self.chunks, &mut |_, _, _| {})?;
        Ok(ExactRun {
            prompt_ids,
            continuations,
            ppl: p.ppl,
        })
    }

    /// `model`'s distance to `exact` (what [`DistanceSpec::run`] gave the exact model).
    pub fn distance(&self, model: &TextModel, exact: &ExactRun) -> Result<DecoderDistance> {
        let run = self.run(model)?;
        let equal = run
            .continuations
            .iter()
            .zip(&exact.continuations)
            .filter(|(a, b)| a == b)
            .count();
        Ok(DecoderDistance {
            equal,
            prompts: exact.continuations.len(),
            ppl: run.ppl,
            exact_ppl: exact.ppl,
        })
    }
}
