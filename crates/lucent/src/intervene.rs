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
//! pays nothing. A pass with them runs the traced path (the same kernels, on the calling
//! thread's pool instead of a team), so everything not intervened on keeps its bits.
//! Generation recomputes the whole sequence at every step (no KV cache), so that
//! `positions` always mean positions of the whole text.

use std::collections::BTreeMap;

use crate::api::Model;
use crate::model::hooks::{hook_points, HookPoint, Intervention, InterventionOp};
use crate::model::ModelKind;
use crate::nn::edit::Edit;
use crate::nn::{Trace, TraceFilter};
use crate::pipeline::generate::{Sampler, Sampling};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A trace that records nothing (edits still apply).
fn records_nothing() -> Trace {
    Trace::with_filter(TraceFilter {
        leaves: Some(Vec::new()),
        ..TraceFilter::default()
    })
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
        let points = self.hook_points();
        let mut checked = Vec::with_capacity(interventions.len());
        for iv in interventions {
            checked.push((iv.clone(), iv.check(&points)?.clone()));
        }
        // One run per distinct `from`, recording the leaves its patches read.
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
                let trace = self.trace_with(
                    from,
                    Trace::with_filter(TraceFilter {
                        leaves: Some(leaves),
                        ..TraceFilter::default()
                    }),
                )?;
                sources.insert(from.clone(), trace);
            }
        }
        let edits = checked
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
            .collect::<Result<Vec<Edit>>>()?;
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
    /// strings); returns the new text. Each step runs the whole sequence so far.
    pub fn generate(&self, text: &str, sampling: &Sampling) -> Result<String> {
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
            let logits = self.logits_of(&ids)?;
            let [t, v] = logits.dims()?;
            let mut last = logits.data()[(t - 1) * v..t * v].to_vec();
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
