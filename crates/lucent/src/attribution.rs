//! Attribution helpers built on the hook points: which parts of a decoder make it
//! predict a chosen next token.
//!
//! - [`Model::logit_attribution`]: direct logit attribution, TransformerLens's
//!   `logit_attrs` with the cached scale: the target's logit from the final residual
//!   stream split exactly into the embeddings', each head's and each FFN's terms.
//! - [`Model::ablation_effect`] and [`Model::head_ablation_sweep`]: the change in the
//!   target's log-probability when heads (or any interventions) are ablated; the sweep
//!   ablates every head of some layers in turn, one pass per head.
//!
//! ```no_run
//! let model = lucent::open("smollm2")?;
//! let text = "The Eiffel Tower is in";
//! let paris = model.text_model()?.tokenizer.encode_ids(" Paris", false, false)?[0];
//! let dla = model.logit_attribution(text, paris)?;
//! println!("head 23.4 adds {:+.3} to the logit", dla.heads[23][4]);
//! let plain = lucent::log_prob(&model.intervene(&[])?.next_token_logits(text)?, paris)?;
//! let sweep = model.head_ablation_sweep(text, paris, plain, 0..=29, lucent::HeadAblation::Zero, &mut |_, _| {})?;
//! # Ok::<(), lucent::Error>(())
//! ```
//!
//! The patching sweep (layer × position) lives beside the explorer's use of it.

use std::ops::RangeInclusive;

use serde::Serialize;

use crate::api::Model;
use crate::model::family::Param;
use crate::model::hooks::Intervention;
use crate::nn::{NormKind, Trace, TraceFilter};
use crate::pipeline::generate::argmax;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// ln softmax(logits)[id], in f64 (the log-probability of token `id`). Errors if `id`
/// is not a row of `logits`.
pub fn log_prob(logits: &[f32], id: u32) -> Result<f64> {
    let x = *logits.get(id as usize).ok_or_else(|| {
        Error::Argument(format!(
            "token id {id} is out of range (the vocabulary has 0..{})",
            logits.len()
        ))
    })?;
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    Ok(x as f64 - max - sum.ln())
}

/// Direct logit attribution of one token at the last position of a text
/// ([`Model::logit_attribution`]). With s the final norm's scale cached from the run
/// and u = γ ⊙ W_U[target], a part c of the final residual stream adds
/// s · u · c (c centred first for LayerNorm) to the logit; the terms add up to
/// `logit_f32` up to f64 rounding (`sum`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attribution {
    /// The engine's own logit of the target (its head's product, possibly quantised).
    pub logit: f32,
    /// The target's logit from the final residual stream in f32 (dequantised head):
    /// s · u · x_final.
    pub logit_f32: f64,
    /// The final norm's scale s: 1 / RMS of the final residual (RMSNorm) or 1 / its
    /// standard deviation (LayerNorm), eps included.
    pub scale: f64,
    /// The embeddings' term (`hook_embed`, with any absolute positions).
    pub embed: f64,
    /// Each head's term, `[layer][head]`: its `hook_z` row at the last position times
    /// its slice of W_O (dequantised, in f64).
    pub heads: Vec<Vec<f64>>,
    /// Each FFN's term (`hook_mlp_out`), per layer.
    pub mlp: Vec<f64>,
    /// Per layer, the attention output as the engine computed it (`hook_attn_out`,
    /// with the output bias and the product's rounding) minus its heads' sum.
    pub attn_rest: Vec<f64>,
    /// The final residual minus the sum of every part above (the f32 rounding of the
    /// residual sums, and anything a family adds outside attention and FFN).
    pub rest: f64,
    /// Every term added: `embed` + heads + `mlp` + `attn_rest` + `rest`.
    pub sum: f64,
}

/// What a head ablation writes into the head's rows of `blocks.L.attn.hook_z`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadAblation {
    /// Zeros (zero ablation).
    Zero,
    /// The head's mean over the text's positions (mean ablation).
    Mean,
}

impl HeadAblation {
    /// The interventions that ablate `heads` ((layer, head) pairs) together.
    pub fn interventions(self, heads: &[(usize, usize)]) -> Vec<Intervention> {
        heads
            .iter()
            .map(|&(l, h)| {
                let hook = format!("blocks.{l}.attn.hook_z");
                match self {
                    HeadAblation::Zero => Intervention::zero(hook),
                    HeadAblation::Mean => Intervention::mean(hook),
                }
                .head(h)
            })
            .collect()
    }
}

/// The effect of one ablation on the target's next-token log-probability
/// ([`Model::ablation_effect`], a cell of [`Model::head_ablation_sweep`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AblationEffect {
    /// The heads ablated, as (layer, head) (empty for other interventions).
    pub heads: Vec<(usize, usize)>,
    /// The interventions run.
    pub interventions: Vec<Intervention>,
    /// ln p(target) under them.
    pub logprob: f64,
    /// `logprob` minus the plain run's.
    pub delta: f64,
    /// The greedy next token under them.
    pub top: u32,
}

impl Model {
    /// The effect of `interventions` on ln p(`target`) after `text` (decoders), against
    /// `plain_logprob` (the plain run's, e.g. [`log_prob`] of
    /// `intervene(&[])?.next_token_logits(text)`); `heads` is recorded as given (the
    /// heads the interventions ablate, if they do).
    pub fn ablation_effect(
        &self,
        text: &str,
        target: u32,
        plain_logprob: f64,
        heads: &[(usize, usize)],
        interventions: Vec<Intervention>,
    ) -> Result<AblationEffect> {
        let logits = self.intervene(&interventions)?.next_token_logits(text)?;
        let logprob = log_prob(&logits, target)?;
        Ok(AblationEffect {
            heads: heads.to_vec(),
            interventions,
            logprob,
            delta: logprob - plain_logprob,
            top: argmax(&logits),
        })
    }

    /// Ablate every head of `layers`, one at a time (layer by layer, head by head), and
    /// report each one's [`AblationEffect`] on ln p(`target`) after `text` against
    /// `plain_logprob`: one intervened pass per head (SmolLM2: 270). `progress(done,
    /// total)` is called after each head. Errors for a layer out of range, before any
    /// pass.
    pub fn head_ablation_sweep(
        &self,
        text: &str,
        target: u32,
        plain_logprob: f64,
        layers: RangeInclusive<usize>,
        op: HeadAblation,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<AblationEffect>> {
        let cfg = self.config();
        let n_layers = cfg.decoder_layers;
        if layers.is_empty() || *layers.end() >= n_layers {
            return Err(Error::Argument(format!(
                "head ablation sweep: layers {}-{} are not within 0-{} (this model has {n_layers} layers)",
                layers.start(),
                layers.end(),
                n_layers.max(1) - 1
            )));
        }
        let heads = cfg.n_heads;
        let total = (layers.end() - layers.start() + 1) * heads;
        let mut out = Vec::with_capacity(total);
        for l in layers {
            for h in 0..heads {
                let ivs = op.interventions(&[(l, h)]);
                out.push(self.ablation_effect(text, target, plain_logprob, &[(l, h)], ivs)?);
                progress(out.len(), total);
            }
        }
        Ok(out)
    }

    /// Direct logit attribution of token `target` at the last position of `text`
    /// ([`Attribution`]; decoders with a final norm, no logit scale or soft-cap, whose
    /// layers add their attention and FFN outputs to the residual stream: post-norms'
    /// terms would land in `rest`). One traced pass recording each layer's `hook_z`,
    /// `hook_attn_out`, `hook_mlp_out` and the residual stream, and one plain pass for
    /// the engine's logit.
    pub fn logit_attribution(&self, text: &str, target: u32) -> Result<Attribution> {
        let cfg = self.config().clone();
        let tm = self.text_model()?;
        let dm = &tm.model;
        if cfg.logit_scale.is_some() || cfg.final_softcap.is_some() || !cfg.final_norm {
            return Err(Error::Argument(format!(
                "{}: direct logit attribution here needs a final norm and no logit scale or soft-cap",
                self.name()
            )));
        }
        let (d, h, dk, layers) = (cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.decoder_layers);
        let vocab = cfg.vocab_size;
        if target as usize >= vocab {
            return Err(Error::Argument(format!(
                "logit attribution: target token id {target} is out of range (the vocabulary has 0..{vocab})"
            )));
        }
        let trace = self.trace_with(
            text,
            Trace::with_filter(TraceFilter {
                leaves: Some(vec!["input".into(), "context".into(), "output".into()]),
                prefix: Some("decoder.".into()),
                ..Default::default()
            }),
        )?;
        let get = |name: &str| {
            trace.get(name).ok_or_else(|| {
                Error::Argument(format!("logit attribution: the trace has no {name}"))
            })
        };
        let last_row = |t: &Tensor| -> Result<Vec<f64>> {
            let [_, n, w] = t.dims()?; // (1, t, w)
            Ok(t.data()[(n - 1) * w..n * w]
                .iter()
                .map(|&x| x as f64)
                .collect())
        };
        let x_final = last_row(get(&format!("decoder.layer.{}.output", layers - 1))?)?;
        // The final norm's scale, cached from the run, and u = γ ⊙ W_U[target].
        let mean = match cfg.norm {
            NormKind::LayerNorm => x_final.iter().sum::<f64>() / d as f64,
            NormKind::RmsNorm => 0.0,
        };
        let var = x_final.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / d as f64;
        let scale = 1.0 / (var + cfg.norm_eps as f64).sqrt();
        let gamma = dm.parameter(Param::FinalNormWeight, 0)?.ok_or_else(|| {
            Error::Argument("logit attribution: the model has no final norm weight".into())
        })?;
        let table = match dm.parameter(Param::OutputWeight, 0)? {
            Some(w) => w,
            None => dm
                .parameter(Param::TokenEmbedding, 0)?
                .ok_or_else(|| Error::Argument("logit attribution: no unembedding".into()))?,
        }; // (V, d)
        let row = table
            .data()
            .get(target as usize * d..(target as usize + 1) * d)
            .ok_or_else(|| {
                Error::Argument(format!(
                    "logit attribution: the unembedding has no row {target}"
                ))
            })?;
        let u: Vec<f64> = row
            .iter()
            .zip(gamma.data())
            .map(|(&w, &g)| w as f64 * g as f64)
            .collect();
        // A term's share of the logit: s · u · (c − mean(c) for LayerNorm).
        let project = |c: &[f64]| -> f64 {
            let m = match cfg.norm {
                NormKind::LayerNorm => c.iter().sum::<f64>() / d as f64,
                NormKind::RmsNorm => 0.0,
            };
            scale * c.iter().zip(&u).map(|(x, w)| (x - m) * w).sum::<f64>()
        };
        let logit_f32 = project(&x_final);
        let x0 = last_row(get("decoder.input")?)?;
        let embed = project(&x0);
        let (mut heads, mut mlp, mut attn_rest) = (Vec::new(), Vec::new(), Vec::new());
        let mut summed = x0.clone(); // the residual rebuilt from its terms
        for l in 0..layers {
            let z = get(&format!("decoder.layer.{l}.attn.context"))?; // (1, h, t, d_k)
            let [_, _, n, _] = z.dims()?;
            let w_o = dm.parameter(Param::AttnOutWeight, l)?.ok_or_else(|| {
                Error::Argument(format!("logit attribution: layer {l} has no W_O"))
            })?; // (d, h·d_k)
            let mut row = Vec::with_capacity(h);
            let mut heads_sum = 0.0;
            for hi in 0..h {
                let zh = &z.data()[(hi * n + n - 1) * dk..(hi * n + n) * dk];
                let c: Vec<f64> = (0..d)
                    .map(|i| {
                        let w = &w_o.data()[i * h * dk + hi * dk..i * h * dk + (hi + 1) * dk];
                        zh.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum()
                    })
                    .collect();
                let v = project(&c);
                heads_sum += v;
                row.push(v);
            }
            heads.push(row);
            let attn_out = last_row(get(&format!("decoder.layer.{l}.attn.output"))?)?;
            attn_rest.push(project(&attn_out) - heads_sum);
            let mlp_out = last_row(get(&format!("decoder.layer.{l}.ffn.output"))?)?;
            mlp.push(project(&mlp_out));
            for i in 0..d {
                summed[i] += attn_out[i] + mlp_out[i];
            }
        }
        // What the terms miss: the f32 rounding of the residual sums (and any norm bias
        // or residual scaling a family has): the final residual minus the rebuilt one.
        let gap: Vec<f64> = x_final.iter().zip(&summed).map(|(a, b)| a - b).collect();
        let rest = project(&gap);
        let sum = embed
            + heads.iter().flatten().sum::<f64>()
            + mlp.iter().sum::<f64>()
            + attn_rest.iter().sum::<f64>()
            + rest;
        let logits = self.intervene(&[])?.next_token_logits(text)?;
        let logit = *logits.get(target as usize).ok_or_else(|| {
            Error::Argument(format!(
                "logit attribution: the model gave {} logits, no row {target}",
                logits.len()
            ))
        })?;
        Ok(Attribution {
            logit,
            logit_f32,
            scale,
            embed,
            heads,
            mlp,
            attn_rest,
            rest,
            sum,
        })
    }
}
