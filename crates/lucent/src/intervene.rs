//! [`Model::intervene`]: a view of a model whose forward passes write
//! [`Intervention`]s at their hook points (ablation, activation patching, steering), and
//! [`Model::steering_vector`], a steering vector from contrasting prompts.
//!
//! ```no_run
//! use lucent::Intervention;
//! let model = lucent::open("smollm2")?;
//! // Head 3 of layer 5 zero-ablated: its output rows (hook_z) are zeros.
//! let view = model.intervene(&[Intervention::zero("blocks.5.attn.hook_z").head(3)])?;
//! let logits = view.next_token_logits("The Eiffel Tower is in")?;
//! // Steering: add the mean difference of two prompts' residual streams at layer 10.
//! let v = model.steering_vector(&[("I love this", "I hate this")], 10)?;
//! let happy = model.intervene(&[Intervention::add("blocks.10.hook_resid_post", v)])?;
//! println!("{}", happy.generate("My day was", &lucent::Sampling::greedy().max_tokens(20))?);
//! # Ok::<(), lucent::Error>(())
//! ```
//!
//! One mechanism: the interventions become [`Edit`]s carried by a [`Trace`], which every
//! forward already takes; a pass without interventions runs the plain (untraced) path and
//! pays nothing. A pass with them runs the traced path (the same kernels on the same
//! team of threads, only the hooks added), so everything not intervened on keeps its
//! bits, and one intervention costs about nothing (`lucent bench interventions`).
//! Generation prefills the prompt with the edits and decodes over the KV cache, each
//! edit cut to the absolute positions of each pass ([`edits_for_positions`]): `positions`
//! always mean positions of the whole text, as in a pass that recomputes everything
//! ([`Intervened::generate_recomputed`], the reference it is tested against).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::Model;
use crate::model::hooks::{hook_points, HookPoint, Intervention, InterventionOp};
use crate::model::ModelKind;
use crate::nn::edit::{per_head, Edit, EditOp};
use crate::nn::KvCache;
use crate::nn::{Trace, TraceFilter};
use crate::pipeline::generate::{Sampler, Sampling, TextModel};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A trace that records nothing (edits still apply).
fn records_nothing() -> Trace {
    Trace::with_filter(TraceFilter {
        leaves: Some(Vec::new()),
        ..TraceFilter::default()
    })
}

/// Check `interventions` against `points` and make them [`Edit`]s; a `patch` runs its
/// `from` text through `run` (once per distinct text, recording only the leaves its
/// patches read) and keeps what it recorded at the patched points.
fn resolve(
    points: &[HookPoint],
    interventions: &[Intervention],
    mut run: impl FnMut(&str, Trace) -> Result<Trace>,
) -> Result<Vec<Edit>> {
    let mut checked = Vec::with_capacity(interventions.len());
    for iv in interventions {
        checked.push((iv, iv.check(points)?));
    }
    let mut sources: BTreeMap<String, Trace> = BTreeMap::new();
    for (iv, _) in &checked {
        if let (InterventionOp::Patch, Some(from)) = (iv.op, &iv.from) {
            if sources.contains_key(from) {
                continue;
            }
            let leaves: Vec<String> = checked
                .iter()
                .filter(|(o, _)| o.from.as_ref() == Some(from))
                .filter_map(|(_, p)| p.trace_name.rsplit('.').next().map(str::to_string))
                .collect();
            let trace = run(
                from,
                Trace::with_filter(TraceFilter {
                    leaves: Some(leaves),
                    ..TraceFilter::default()
                }),
            )?;
            sources.insert(from.clone(), trace);
        }
    }
    checked
        .iter()
        .map(|(iv, point)| {
            let source = iv
                .from
                .as_ref()
                .and_then(|f| sources.get(f))
                .and_then(|t| t.get(&point.trace_name))
                .cloned();
            iv.to_edit(point, source)
        })
        .collect()
}

/// The [`Edit`]s of `interventions` on a decoder (what [`Model::intervene`] makes, for a
/// caller that holds the [`TextModel`] itself, as the server's engine does): checked
/// against its hook points (an error names the intervention's field), each `patch`'s
/// `from` text run once. Cut them per pass with [`edits_for_positions`].
pub fn decoder_edits(tm: &TextModel, interventions: &[Intervention]) -> Result<Vec<Edit>> {
    resolve(
        &hook_points(&tm.model.config),
        interventions,
        |from, mut trace| {
            let ids = tm.encode(from)?;
            tm.model.forward(&ids, None, false, Some(&mut trace))?;
            Ok(trace)
        },
    )
}

/// The edits of a whole-sequence intervention, cut for a pass that computes positions
/// `start..start + len` of the sequence (a prompt's prefill: `0..n`; a cached decode
/// step at position p: `p..p + 1`), so that the cached passes together write what one
/// pass over the whole sequence writes:
///
/// - `positions` are absolute: an edit applies in this pass only at the selected
///   positions that fall in it (renumbered from 0), and not at all if none do;
/// - `keys` (of a pattern) are absolute already (a pass attends to every key so far);
///   only those that exist yet (`< start + len`) are kept;
/// - a `patch` copies only the positions its source run has: the source is cut to this
///   pass's positions, and a pass past its end is not patched;
/// - `mean` is refused: the mean over every position of the run changes as the run
///   grows, so the positions already in the cache would need rewriting at every step
///   (no cache can do that); [`Intervened::generate_recomputed`] runs it.
pub fn edits_for_positions(edits: &[Edit], start: usize, len: usize) -> Result<Vec<Edit>> {
    cut_edits(edits, start, len, false)
}

/// [`edits_for_positions`]; `keep_mean` lets `mean` through (for a pass over the whole
/// sequence so far, `start` 0).
fn cut_edits(edits: &[Edit], start: usize, len: usize, keep_mean: bool) -> Result<Vec<Edit>> {
    let end = start + len;
    let mut out = Vec::with_capacity(edits.len());
    for e in edits {
        let mut e = e.clone();
        if matches!(e.op, EditOp::Mean) && !keep_mean {
            return Err(Error::Argument(format!(
                "edit at {}: a mean ablation takes its mean over every position of the run, which \
                 changes with each generated token; cached decoding cannot follow it (use zero, set \
                 with the mean you want, or Intervened::generate, which recomputes the run)",
                e.name
            )));
        }
        if let Some(ps) = &e.positions {
            let inside: Vec<usize> = ps
                .iter()
                .filter(|&&p| (start..end).contains(&p))
                .map(|&p| p - start)
                .collect();
            if inside.is_empty() {
                continue;
            }
            e.positions = Some(inside);
        }
        if let Some(ks) = &e.keys {
            let known: Vec<usize> = ks.iter().copied().filter(|&k| k < end).collect();
            if known.is_empty() {
                continue;
            }
            e.keys = Some(known);
        }
        if let EditOp::Patch(src) = &e.op {
            let leaf = e.name.rsplit('.').next().unwrap_or(&e.name);
            let axis = if per_head(leaf) { 2 } else { 1 }; // positions: (b, h, t, x) or (b, t, x)
            let have = src.shape().get(axis).copied().unwrap_or(0);
            if start >= have {
                continue;
            }
            let cut = src.narrow(axis, start, len.min(have - start))?;
            e.op = EditOp::Patch(cut);
        }
        out.push(e);
    }
    Ok(out)
}

impl Model {
    /// Every hook point of this model ([`hook_points`]: TransformerLens's names and the
    /// trace's).
    pub fn hook_points(&self) -> Vec<HookPoint> {
        hook_points(self.config())
    }

    /// The TransformerLens names of this model's hook points (`hook_embed`,
    /// `blocks.0.hook_resid_pre`, `blocks.0.attn.hook_z`, …), in the order a pass
    /// reaches them.
    pub fn hook_names(&self) -> Vec<String> {
        self.hook_points().into_iter().map(|p| p.name).collect()
    }

    /// A view of this model whose passes write `interventions` (checked here against
    /// the model: an error names the intervention's field at fault). A `patch` runs its
    /// `from` text now, once, and keeps what it recorded at the patched points.
    pub fn intervene(&self, interventions: &[Intervention]) -> Result<Intervened<'_>> {
        let edits = resolve(&self.hook_points(), interventions, |from, trace| {
            self.trace_with(from, trace)
        })?;
        Ok(Intervened {
            model: self,
            interventions: interventions.to_vec(),
            edits,
        })
    }

    /// A steering vector for layer `layer`: the mean, over `pairs` (a, b), of the
    /// residual stream after block `layer` (`blocks.{layer}.hook_resid_post`) at the last
    /// position of a minus that of b (d_model numbers; add it with
    /// `Intervention::add("blocks.{layer}.hook_resid_post", v)`). Errors for no pairs or a
    /// layer out of range.
    pub fn steering_vector(&self, pairs: &[(&str, &str)], layer: usize) -> Result<Vec<f32>> {
        if pairs.is_empty() {
            return Err(Error::Argument(
                "steering_vector needs at least one pair of contrasting prompts".into(),
            ));
        }
        let hook = format!("blocks.{layer}.hook_resid_post");
        let points = self.hook_points();
        let point = Intervention::zero(hook.as_str()).check(&points)?;
        let last_row = |text: &str| -> Result<Vec<f32>> {
            let filter = TraceFilter {
                prefix: Some(point.trace_name.clone()),
                ..TraceFilter::default()
            };
            let trace = self.trace_with(text, Trace::with_filter(filter))?;
            let t = trace.get(&point.trace_name).ok_or_else(|| {
                Error::Argument(format!(
                    "{hook}: the pass over {text:?} recorded nothing there"
                ))
            })?;
            let [_, n, d] = t.dims()?; // (1, t, d)
            Ok(t.data()[(n - 1) * d..n * d].to_vec())
        };
        let mut sum = vec![0.0f32; self.config().d_model];
        for (a, b) in pairs {
            let (ra, rb) = (last_row(a)?, last_row(b)?);
            for ((s, x), y) in sum.iter_mut().zip(&ra).zip(&rb) {
                *s += x - y;
            }
        }
        let n = pairs.len() as f32;
        Ok(sum.into_iter().map(|s| s / n).collect())
    }
}

/// A model seen through interventions ([`Model::intervene`]): its traces, logits and
/// generations are those of the edited passes.
pub struct Intervened<'m> {
    model: &'m Model,
    interventions: Vec<Intervention>,
    edits: Vec<Edit>,
}

impl Intervened<'_> {
    /// The interventions, as given.
    pub fn interventions(&self) -> &[Intervention] {
        &self.interventions
    }

    /// The trace edits they became (trace names, patch sources resolved).
    pub fn edits(&self) -> &[Edit] {
        &self.edits
    }

    /// The intervened pass's [`Trace`] over `text` (what [`Model::trace`] records; the
    /// recorded values are the edited ones).
    pub fn trace(&self, text: &str) -> Result<Trace> {
        self.trace_with(text, Trace::new())
    }

    /// [`Intervened::trace`] into a given trace (e.g. one that keeps only some leaves).
    pub fn trace_with(&self, text: &str, trace: Trace) -> Result<Trace> {
        self.check_lengths(text)?;
        self.model
            .trace_with(text, trace.with_edits(self.edits.clone()))
    }

    /// The sentence embedding of `text` through the intervened pass (encoders): the
    /// encoder's last hidden states with the edits applied at their hooks, pooled and
    /// normalised as the model's sentence-transformers config says (the steps of
    /// [`Embedder::hidden_states`](crate::pipeline::embed::Embedder::hidden_states) and
    /// [`pool`](crate::pipeline::embed::pool) for one text).
    pub fn embed(&self, text: &str) -> Result<Vec<f32>> {
        let e = self.model.embedder()?;
        let n = e.tokenizer().encode(text, true)?.len();
        let trace = self.trace(text)?;
        let hidden = trace.get("encoder.output").ok_or_else(|| {
            Error::Argument(format!(
                "{}: the intervened pass recorded no encoder.output",
                self.model.name()
            ))
        })?; // (1, t, d)
        let mut v = crate::pipeline::embed::pool(hidden, &[n], e.config().pooling)?
            .pop()
            .ok_or_else(|| Error::Argument("no embedding came back".into()))?; // (d)
        if e.config().normalize {
            crate::pipeline::embed::l2_normalize(&mut v);
        }
        Ok(v)
    }

    /// A patch copies position by position: the texts must have as many tokens.
    fn check_lengths(&self, text: &str) -> Result<()> {
        if self.model.kind() == ModelKind::EncoderDecoder {
            return Ok(()); // a speech model's "text" is a file; Edit::apply checks shapes
        }
        let n = self.model.tokens(text)?.len();
        for iv in &self.interventions {
            if let Some(from) = &iv.from {
                let m = self.model.tokens(from)?.len();
                if m != n {
                    return Err(Error::Argument(format!(
                        "intervention at {}: from: {from:?} has {m} tokens but {text:?} has {n}; patching \
                         copies position by position, so give texts of the same number of tokens",
                        iv.hook
                    )));
                }
            }
        }
        Ok(())
    }

    /// The logits at every position of `text` (decoders).
    ///
    /// # Shapes
    /// → (t, V)
    pub fn logits(&self, text: &str) -> Result<Tensor> {
        self.check_lengths(text)?;
        let tm = self.model.text_model()?;
        let ids = tm.encode(text)?;
        self.logits_of(&ids)
    }

    /// The logits at every position of `ids` (decoders); the plain untraced pass when
    /// there is no intervention. A patch needs `ids` as long as its `from` text (an
    /// error says so otherwise).
    ///
    /// # Shapes
    /// ids: t → (t, V)
    pub fn logits_of(&self, ids: &[u32]) -> Result<Tensor> {
        let tm = self.model.text_model()?;
        if self.edits.is_empty() {
            return tm.model.forward(ids, None, false, None);
        }
        let mut trace = records_nothing().with_edits(self.edits.clone());
        tm.model.forward(ids, None, false, Some(&mut trace))
    }

    /// The next-token logits after `text` (decoders): the last row of
    /// [`Intervened::logits`].
    pub fn next_token_logits(&self, text: &str) -> Result<Vec<f32>> {
        let logits = self.logits(text)?;
        let [t, v] = logits.dims()?;
        Ok(logits.data()[(t - 1) * v..t * v].to_vec())
    }

    /// Continue `text` under the interventions (decoders), with `sampling`'s sampler and
    /// stopping rules (`max_tokens`, end of generation unless `ignore_eos`, stop
    /// strings); returns the new text. The prompt is prefilled with the edits and each
    /// new token decoded over the KV cache ([`Intervened::cached`]), every edit at its
    /// absolute positions ([`edits_for_positions`]); the tokens equal
    /// [`Intervened::generate_recomputed`]'s. A `mean` ablation cannot be cached (its
    /// mean moves with every token), so with one this recomputes the run at each step.
    pub fn generate(&self, text: &str, sampling: &Sampling) -> Result<String> {
        if self.edits.iter().any(|e| matches!(e.op, EditOp::Mean)) {
            return self.generate_recomputed(text, sampling);
        }
        let tm = self.model.text_model()?;
        let prompt = tm.encode(text)?.len();
        let mut run = self.cached(prompt + sampling.max_tokens)?;
        self.generate_by(text, sampling, |ids| {
            let fed = run.len();
            run.feed(&ids[fed..])
        })
    }

    /// [`Intervened::generate`] without a KV cache: each step runs the whole sequence so
    /// far, the edits cut to its length (a `positions` or `patch` beyond it applies from
    /// the step that reaches it). The reference that the cached generation is held to.
    pub fn generate_recomputed(&self, text: &str, sampling: &Sampling) -> Result<String> {
        let tm = self.model.text_model()?;
        self.generate_by(text, sampling, |ids| {
            let edits = cut_edits(&self.edits, 0, ids.len(), true)?;
            let logits = if edits.is_empty() {
                tm.model.forward(ids, None, false, None)?
            } else {
                let mut trace = records_nothing().with_edits(edits);
                tm.model.forward(ids, None, false, Some(&mut trace))?
            };
            let [t, v] = logits.dims()?; // (t, V)
            Ok(logits.data()[(t - 1) * v..t * v].to_vec())
        })
    }

    /// A cached decoding under these interventions, for sequences of up to `max_t`
    /// positions (capped at the model's context): feed it the prompt, then one token at
    /// a time. Errors for a `mean` ablation ([`edits_for_positions`] says why) and for
    /// models that are not decoders.
    pub fn cached(&self, max_t: usize) -> Result<CachedDecoding<'_>> {
        let tm = self.model.text_model()?;
        // Refuse what cannot be cached before any work.
        edits_for_positions(&self.edits, 0, 0)?;
        let cache = tm.model.new_cache(max_t);
        Ok(CachedDecoding {
            tm,
            edits: &self.edits,
            cache,
        })
    }

    /// The sampling loop shared by both generations: `next_logits` gets the ids so far
    /// and gives the next token's logits.
    fn generate_by(
        &self,
        text: &str,
        sampling: &Sampling,
        mut next_logits: impl FnMut(&[u32]) -> Result<Vec<f32>>,
    ) -> Result<String> {
        sampling.validate()?;
        let tm = self.model.text_model()?;
        let mut ids = tm.encode(text)?;
        let prompt = ids.len();
        let mut sampler = Sampler::new(sampling)?;
        let context = tm.model.context_len();
        let mut out = String::new();
        for _ in 0..sampling.max_tokens {
            if ids.len() >= context {
                break;
            }
            let mut last = next_logits(&ids)?;
            let next = sampler.sample(&mut last, &ids)?;
            if tm.tokenizer.is_end_of_generation(next) && !sampling.ignore_eos {
                break;
            }
            ids.push(next);
            out = tm.tokenizer.decode_ids(&ids[prompt..], !sampling.special)?;
            if let Some(cut) = sampling
                .stop
                .iter()
                .filter_map(|s| out.find(s.as_str()))
                .min()
            {
                out.truncate(cut);
                break;
            }
        }
        Ok(out)
    }
}

/// A decoder's KV-cached run under interventions ([`Intervened::cached`]): each
/// [`CachedDecoding::feed`] runs the next tokens over the cache with the edits cut to
/// their absolute positions ([`edits_for_positions`]), so a prompt fed at once and its
/// continuation fed token by token get what one pass over the whole sequence gets.
pub struct CachedDecoding<'v> {
    tm: Arc<TextModel>,
    edits: &'v [Edit],
    cache: KvCache,
}

impl CachedDecoding<'_> {
    /// Positions run so far (the cache's length).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing has been run yet.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Run `ids` after what the cache holds; the logits of their last position. With
    /// edits the pass computes every row's logits (as [`Intervened::logits_of`] does, so
    /// a prompt's last row equals it to the bit) and keeps the last; without, the plain
    /// cached pass.
    ///
    /// # Shapes
    /// ids: t → V
    pub fn feed(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        let start = self.cache.len();
        let edits = edits_for_positions(self.edits, start, ids.len())?;
        let logits = if self.edits.is_empty() {
            self.tm
                .model
                .forward(ids, Some(&mut self.cache), true, None)? // (1, V)
        } else {
            let mut trace = records_nothing().with_edits(edits);
            self.tm
                .model
                .forward(ids, Some(&mut self.cache), false, Some(&mut trace))? // (t, V)
        };
        let [t, v] = logits.dims()?;
        Ok(logits.data()[(t - 1) * v..t * v].to_vec())
    }
}
