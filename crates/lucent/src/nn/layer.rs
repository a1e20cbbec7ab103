//! `EncoderLayer` and `DecoderLayer`: attention and a feed-forward network, each wrapped
//! in a residual connection with a norm (Vaswani et al. 2017, §3.1).
//!
//! Where the norm sits ([`NormPlacement`]):
//! - Post (the paper, BERT):  x ← norm(x + f(x))
//! - Pre (GPT-2, LLaMA):      x ← x + f(norm(x))        (the stack ends with a final norm)
//! - Sandwich (Gemma 2/3):    x ← x + post_norm(f(pre_norm(x)))
//! - OnOutput (OLMo 2):        x ← x + norm(f(x))            (the stack ends with a final norm)
//!
//! A decoder layer may also scale each sub-layer's output before the sum (Granite's
//! residual multiplier s): x ← x + s·f(…).
//!
//! An encoder layer is self-attention then FFN. A decoder layer is masked (causal)
//! self-attention, then cross-attention to the encoder output (the "memory"; absent in
//! decoder-only models), then FFN.

use crate::nn::attention::{AttentionOptions, MultiHeadAttention};
use crate::nn::feed_forward::FeedForward;
use crate::nn::kv_cache::LayerKvCache;
use crate::nn::norm::Norm;
use crate::nn::trace::{hook, record_rows, scoped, scoped_each, Trace};
use crate::tensor::Tensor;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Where the norm sits relative to each residual sub-layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormPlacement {
    /// x + f(norm(x)) (GPT-2, LLaMA); a final norm follows the stack.
    Pre,
    /// norm(x + f(x)) (the original paper, BERT).
    Post,
    /// x + norm₂(f(norm₁(x))): pre-norm plus a norm on the sub-layer's output (Gemma 2/3).
    Sandwich,
    /// x + norm(f(x)): the norm on the sub-layer's output only (OLMo 2); a final norm
    /// follows the stack.
    OnOutput,
}

/// One residual sub-layer, with its norm placed per `placement`, inside trace `scope`.
fn residual(
    placement: NormPlacement,
    x: &Tensor,
    norm: &Norm,
    post_norm: Option<&Norm>,
    trace: Option<&mut Trace>,
    scope: &str,
    f: impl FnOnce(&Tensor, Option<&mut Trace>) -> Result<Tensor>,
) -> Result<Tensor> {
    scaled_residual(placement, x, norm, post_norm, None, trace, scope, f)
}

/// [`residual`], the sub-layer's output multiplied by `scale` (if any) before the sum:
/// x ← x + s·f(…) (Granite's residual multiplier).
#[allow(clippy::too_many_arguments)]
fn scaled_residual(
    placement: NormPlacement,
    x: &Tensor,
    norm: &Norm,
    post_norm: Option<&Norm>,
    scale: Option<f32>,
    trace: Option<&mut Trace>,
    scope: &str,
    f: impl FnOnce(&Tensor, Option<&mut Trace>) -> Result<Tensor>,
) -> Result<Tensor> {
    let scaled = |y: Tensor| match scale {
        Some(s) => y.scale(s),
        None => y,
    };
    scoped(trace, scope, |tr| match placement {
        NormPlacement::Pre => x.add(&scaled(f(&norm.forward(x)?, tr)?)),
        NormPlacement::Post => norm.forward(&x.add(&scaled(f(x, tr)?))?),
        NormPlacement::Sandwich => {
            let post = post_norm.ok_or_else(|| {
                Error::Config(format!(
                    "{scope}: sandwich norm placement needs a post-norm on every sub-layer"
                ))
            })?;
            x.add(&scaled(post.forward(&f(&norm.forward(x)?, tr)?)?))
        }
        NormPlacement::OnOutput => x.add(&scaled(norm.forward(&f(x, tr)?)?)),
    })
}

/// The checks every layer shares: the FFN is as wide as the attention (d), every norm
/// present normalises d features, and the post-norms are there exactly when the
/// placement is sandwich (`has_post`: every sub-layer has one).
fn check_sublayers(
    layer: &str,
    placement: NormPlacement,
    d: usize,
    ffn_width: usize,
    norms: &[(&str, Option<&Norm>)],
    has_post: bool,
) -> Result<()> {
    if ffn_width != d {
        return Err(Error::Weights(format!(
            "{layer}: attention width {d} but FFN width {ffn_width}"
        )));
    }
    for &(what, n) in norms {
        check_norm(what, n, d)?;
    }
    if (placement == NormPlacement::Sandwich) != has_post {
        return Err(Error::Config(format!(
            "{layer}: post-norms belong to sandwich placement exactly (all of them, and only then)"
        )));
    }
    Ok(())
}

fn check_norm(what: &str, norm: Option<&Norm>, d: usize) -> Result<()> {
    match norm {
        Some(n) if n.dim() != d => Err(Error::Weights(format!(
            "{what} normalises {} features but the layer's d_model is {d}",
            n.dim()
        ))),
        _ => Ok(()),
    }
}

/// An encoder layer: self-attention and FFN, each with a residual connection and norm.
#[derive(Clone, Debug)]
pub struct EncoderLayer {
    /// Where the norms sit.
    pub placement: NormPlacement,
    /// Bidirectional self-attention.
    pub self_attn: MultiHeadAttention,
    /// The attention sub-layer's norm (PyTorch `norm1`; before f for Pre/Sandwich, after
    /// the residual sum for Post).
    pub self_attn_norm: Norm,
    /// Sandwich only: the norm on the attention's output.
    pub self_attn_post_norm: Option<Norm>,
    /// The feed-forward network.
    pub ffn: FeedForward,
    /// The FFN sub-layer's norm (PyTorch `norm2`).
    pub ffn_norm: Norm,
    /// Sandwich only: the norm on the FFN's output.
    pub ffn_post_norm: Option<Norm>,
}

impl EncoderLayer {
    /// A pre- or post-norm layer from its parts (for sandwich, add
    /// [`EncoderLayer::with_post_norms`]); checks that the widths agree.
    pub fn new(
        placement: NormPlacement,
        self_attn: MultiHeadAttention,
        self_attn_norm: Norm,
        ffn: FeedForward,
        ffn_norm: Norm,
    ) -> Result<Self> {
        let layer = EncoderLayer {
            placement,
            self_attn,
            self_attn_norm,
            self_attn_post_norm: None,
            ffn,
            ffn_norm,
            ffn_post_norm: None,
        };
        if placement != NormPlacement::Sandwich {
            layer.validate()?;
        }
        Ok(layer)
    }

    /// This layer in sandwich form, with norms on the attention's and the FFN's outputs.
    pub fn with_post_norms(
        mut self,
        self_attn_post_norm: Norm,
        ffn_post_norm: Norm,
    ) -> Result<Self> {
        self.placement = NormPlacement::Sandwich;
        self.self_attn_post_norm = Some(self_attn_post_norm);
        self.ffn_post_norm = Some(ffn_post_norm);
        self.validate()?;
        Ok(self)
    }

    /// Check widths and that sandwich placement has its post-norms.
    pub fn validate(&self) -> Result<()> {
        check_sublayers(
            "encoder layer",
            self.placement,
            self.self_attn.config.d_model,
            self.ffn.d_model(),
            &[
                ("self_attn_norm", Some(&self.self_attn_norm)),
                ("self_attn_post_norm", self.self_attn_post_norm.as_ref()),
                ("ffn_norm", Some(&self.ffn_norm)),
                ("ffn_post_norm", self.ffn_post_norm.as_ref()),
            ],
            self.self_attn_post_norm.is_some() && self.ffn_post_norm.is_some(),
        )
    }

    /// The layer. `opts` masks the self-attention (a padding bias, ALiBi...); attention
    /// weights come out through the trace (`attn.weights`), which also gets `attn.*`,
    /// `ffn.*` and the layer's `output`.
    ///
    /// # Shapes
    /// x: (b, t, d) → (b, t, d)
    pub fn forward(
        &self,
        x: &Tensor,
        opts: &AttentionOptions,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let opts = AttentionOptions {
            want_weights: false,
            ..*opts
        };
        let x = residual(
            self.placement,
            x,
            &self.self_attn_norm,
            self.self_attn_post_norm.as_ref(),
            trace.as_deref_mut(),
            "attn",
            |h, tr| Ok(self.self_attn.forward(h, None, &opts, None, tr)?.output),
        )?;
        let x = residual(
            self.placement,
            &x,
            &self.ffn_norm,
            self.ffn_post_norm.as_ref(),
            trace.as_deref_mut(),
            "ffn",
            |h, tr| self.ffn.forward(h, opts.numerics, tr),
        )?;
        hook(&mut trace, "output", x)
    }
}

/// A decoder layer: causal self-attention, optional cross-attention to the encoder
/// output, and FFN, each with a residual connection and norm.
#[derive(Clone, Debug)]
pub struct DecoderLayer {
    /// Where the norms sit.
    pub placement: NormPlacement,
    /// Masked (causal) self-attention.
    pub self_attn: MultiHeadAttention,
    /// Its norm (PyTorch `norm1`).
    pub self_attn_norm: Norm,
    /// Sandwich only: the norm on its output.
    pub self_attn_post_norm: Option<Norm>,
    /// Cross-attention: queries from the decoder, keys and values from the memory
    /// (PyTorch `multihead_attn`); None in decoder-only models.
    pub cross_attn: Option<MultiHeadAttention>,
    /// Its norm (PyTorch `norm2`); present with `cross_attn`.
    pub cross_attn_norm: Option<Norm>,
    /// Sandwich only: the norm on its output.
    pub cross_attn_post_norm: Option<Norm>,
    /// The feed-forward network.
    pub ffn: FeedForward,
    /// Its norm (PyTorch `norm3`, or `norm2` without cross-attention).
    pub ffn_norm: Norm,
    /// Sandwich only: the norm on its output.
    pub ffn_post_norm: Option<Norm>,
    /// Each sub-layer's output multiplied by this before the residual sum, if set
    /// (Granite): x ← x + s·f(…).
    pub residual_scale: Option<f32>,
}

impl DecoderLayer {
    /// A pre- or post-norm layer from its parts; `cross` is the cross-attention and its
    /// norm (None for decoder-only). For sandwich, add [`DecoderLayer::with_post_norms`].
    pub fn new(
        placement: NormPlacement,
        self_attn: MultiHeadAttention,
        self_attn_norm: Norm,
        cross: Option<(MultiHeadAttention, Norm)>,
        ffn: FeedForward,
        ffn_norm: Norm,
    ) -> Result<Self> {
        let (cross_attn, cross_attn_norm) = match cross {
            Some((a, n)) => (Some(a), Some(n)),
            None => (None, None),
        };
        let layer = DecoderLayer {
            placement,
            self_attn,
            self_attn_norm,
            self_attn_post_norm: None,
            cross_attn,
            cross_attn_norm,
            cross_attn_post_norm: None,
            ffn,
            ffn_norm,
            ffn_post_norm: None,
            residual_scale: None,
        };
        if placement != NormPlacement::Sandwich {
            layer.validate()?;
        }
        Ok(layer)
    }

    /// This layer with each sub-layer's output multiplied by `scale` before the
    /// residual sum (x ← x + s·f(…)).
    pub fn with_residual_scale(mut self, scale: f32) -> Self {
        self.residual_scale = Some(scale);
        self
    }

    /// This layer in sandwich form (`cross_attn_post_norm` is needed iff it has
    /// cross-attention).
    pub fn with_post_norms(
        mut self,
        self_attn_post_norm: Norm,
        cross_attn_post_norm: Option<Norm>,
        ffn_post_norm: Norm,
    ) -> Result<Self> {
        self.placement = NormPlacement::Sandwich;
        self.self_attn_post_norm = Some(self_attn_post_norm);
        self.cross_attn_post_norm = cross_attn_post_norm;
        self.ffn_post_norm = Some(ffn_post_norm);
        self.validate()?;
        Ok(self)
    }

    /// Check widths, that cross-attention comes with its norm, and that sandwich
    /// placement has its post-norms.
    pub fn validate(&self) -> Result<()> {
        let d = self.self_attn.config.d_model;
        if let Some(c) = &self.cross_attn {
            if c.config.d_model != d {
                return Err(Error::Weights(format!(
                    "decoder layer: self-attention width {d} but cross-attention width {}",
                    c.config.d_model
                )));
            }
        }
        if self.cross_attn.is_some() != self.cross_attn_norm.is_some() {
            return Err(Error::Config(
                "decoder layer: cross_attn and cross_attn_norm come together".into(),
            ));
        }
        check_sublayers(
            "decoder layer",
            self.placement,
            d,
            self.ffn.d_model(),
            &[
                ("self_attn_norm", Some(&self.self_attn_norm)),
                ("self_attn_post_norm", self.self_attn_post_norm.as_ref()),
                ("cross_attn_norm", self.cross_attn_norm.as_ref()),
                ("cross_attn_post_norm", self.cross_attn_post_norm.as_ref()),
                ("ffn_norm", Some(&self.ffn_norm)),
                ("ffn_post_norm", self.ffn_post_norm.as_ref()),
            ],
            self.self_attn_post_norm.is_some()
                && self.ffn_post_norm.is_some()
                && (self.cross_attn.is_none() || self.cross_attn_post_norm.is_some()),
        )
    }

    /// The layer. Self-attention is always causal (`opts` adds a bias, a window or a
    /// RoPE offset); `memory` is the encoder output for cross-attention, masked by
    /// `memory_bias` (e.g. source padding). With a `cache`, `x` holds only the new
    /// positions. The trace gets `attn.*`, `cross_attn.*`, `ffn.*` and `output`.
    ///
    /// # Shapes
    /// x: (b, t, d), memory: (b, t_src, d), memory_bias: (t, t_src) or (b|1, h|1, t, t_src)
    /// → (b, t, d)
    pub fn forward(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        opts: &AttentionOptions,
        memory_bias: Option<&Tensor>,
        cache: Option<&mut LayerKvCache>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        self.forward_rows(x, memory, opts, memory_bias, cache, trace, false)
    }

    /// [`DecoderLayer::forward`]; with `last_only`, the feed-forward block runs on the
    /// last position only and the layer returns that one (b, 1, d): what the last layer
    /// of a generating model needs (llama.cpp's graph cuts the rows there too, so its
    /// feed-forward products see one row).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward_rows(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        opts: &AttentionOptions,
        memory_bias: Option<&Tensor>,
        cache: Option<&mut LayerKvCache>,
        trace: Option<&mut Trace>,
        last_only: bool,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let mut cache = cache;
        // Cross-attention's K and V of the memory: computed once per cache (the first
        // step), then read from it.
        let memory_kv = match (&self.cross_attn, memory, cache.as_deref_mut()) {
            (Some(cross), Some(m), Some(c)) => {
                if c.memory_kv().is_none() {
                    let (k, v) = cross.memory_kv(m, opts.numerics)?;
                    c.set_memory_kv(k, v);
                }
                c.memory_kv().cloned()
            }
            _ => None,
        };
        let self_opts = AttentionOptions {
            causal: true,
            want_weights: false,
            ..*opts
        };
        let x = scaled_residual(
            self.placement,
            x,
            &self.self_attn_norm,
            self.self_attn_post_norm.as_ref(),
            self.residual_scale,
            trace.as_deref_mut(),
            "attn",
            |h, tr| {
                Ok(self
                    .self_attn
                    .forward(h, None, &self_opts, cache, tr)?
                    .output)
            },
        )?;
        let x =
            match (&self.cross_attn, &self.cross_attn_norm, memory) {
                (Some(cross), Some(norm), Some(memory)) => {
                    let cross_opts = AttentionOptions {
                        bias: memory_bias,
                        ..AttentionOptions::none()
                    };
                    scaled_residual(
                        self.placement,
                        &x,
                        norm,
                        self.cross_attn_post_norm.as_ref(),
                        self.residual_scale,
                        trace.as_deref_mut(),
                        "cross_attn",
                        |h, tr| {
                            Ok(match &memory_kv {
                                Some((k, v)) => cross.forward_kv(h, k, v, &cross_opts, tr)?,
                                None => cross.forward(h, Some(memory), &cross_opts, None, tr)?,
                            }
                            .output)
                        },
                    )?
                }
                (Some(_), _, None) => return Err(Error::Argument(
                    "this decoder layer has cross-attention and needs the encoder output (memory)"
                        .into(),
                )),
                (None, _, Some(_)) => return Err(Error::Argument(
                    "memory given to a decoder layer without cross-attention (decoder-only model)"
                        .into(),
                )),
                (Some(_), None, Some(_)) => {
                    return Err(Error::Config(
                        "decoder layer: cross_attn has no cross_attn_norm".into(),
                    ))
                }
                (None, _, None) => x,
            };
        let x = match (last_only, x.shape()[1]) {
            (false, _) => x,
            (true, 0) => {
                return Err(Error::Argument(
                    "the last position of an empty sequence was asked for".into(),
                ))
            }
            (true, t) => x.narrow(1, t - 1, 1)?, // (b, 1, d)
        };
        let x = scaled_residual(
            self.placement,
            &x,
            &self.ffn_norm,
            self.ffn_post_norm.as_ref(),
            self.residual_scale,
            trace.as_deref_mut(),
            "ffn",
            |h, tr| self.ffn.forward(h, opts.numerics, tr),
        )?;
        hook(&mut trace, "output", x)
    }

    /// One decoding step of `n` sequences at once (decoder-only layers): row i of `x`
    /// is sequence i's new token, attending over `caches[i]` at its own position
    /// ([`MultiHeadAttention::decode_batch`]); the norms and the feed-forward block
    /// take the n rows together, each row computed as it would be alone. Each trace
    /// gets `attn.*`, `ffn.input`, `ffn.output` and `output` as a lone token's forward
    /// records them.
    ///
    /// # Shapes
    /// x: (n, 1, d) → (n, 1, d)
    pub fn decode_batch(
        &self,
        x: &Tensor,
        caches: &mut [&mut LayerKvCache],
        opts: &AttentionOptions,
        traces: &mut [Option<&mut Trace>],
    ) -> Result<Tensor> {
        if self.cross_attn.is_some() {
            return Err(Error::Argument(
                "decode_batch serves decoder-only layers; this one has cross-attention".into(),
            ));
        }
        let self_opts = AttentionOptions {
            causal: true,
            want_weights: false,
            ..*opts
        };
        let x = scaled_residual(
            self.placement,
            x,
            &self.self_attn_norm,
            self.self_attn_post_norm.as_ref(),
            self.residual_scale,
            None,
            "attn",
            |h, _| {
                scoped_each(traces, "attn", |tr| {
                    self.self_attn.decode_batch(h, caches, &self_opts, tr)
                })
            },
        )?;
        let x = scaled_residual(
            self.placement,
            &x,
            &self.ffn_norm,
            self.ffn_post_norm.as_ref(),
            self.residual_scale,
            None,
            "ffn",
            |h, _| {
                scoped_each(traces, "ffn", |tr| {
                    record_rows(tr, "input", h)?;
                    let out = self.ffn.forward(h, opts.numerics, None)?;
                    record_rows(tr, "output", &out)?;
                    Ok(out)
                })
            },
        )?;
        record_rows(traces, "output", &x)?;
        Ok(x)
    }
}
