//! Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, §3.2).
//!
//! Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + M) · V
//!
//! MultiHead(X_q, X_kv) = Concat(head₁, …, head_h) · W_Oᵀ,
//! headᵢ = Attention(X_q W_Qᵢᵀ, X_kv W_Kᵢᵀ, X_kv W_Vᵢᵀ)
//!
//! [`scaled_dot_product_attention`] is the guides' pure function; [`MultiHeadAttention`]
//! projects, splits into heads, attends and projects back. It covers the variants real
//! models use:
//! - self-attention (X_kv = X_q) and cross-attention (X_kv = the encoder output),
//! - grouped-query (GQA, Ainslie et al. 2023) and multi-query attention: h query heads
//!   share h_kv key/value heads, query head j reading kv head j / (h / h_kv),
//! - QK-norm (Gemma 3): RMSNorm over each head's queries and keys, before RoPE,
//! - RoPE (Su et al. 2021) on queries and keys, at positions offset by what the
//!   [`LayerKvCache`] already holds,
//! - projections with or without biases; PyTorch's fused `in_proj_weight` (3d, d) is
//!   split into separate Q, K, V projections by [`MultiHeadAttention::from_in_proj`].
//!
//! The arithmetic is [`ops::attention()`]; masks are its causal/window rule plus an
//! additive bias (0 keeps, −∞ removes; ALiBi or any float mask also fits).

use rand::Rng;

use crate::nn::edit::{edit, edits};
use crate::nn::kv_cache::{KvStore, LayerKvCache};
use crate::nn::linear::Linear;
use crate::nn::norm::RmsNorm;
use crate::nn::trace::{hook, record, record_rows, wants, Trace};
use crate::ops::attention::{bias_row, check_dims, round_f16_in_place, visible_keys};
use crate::ops::rope::{RopeFreqs, RopeScaling};
use crate::ops::{self, AttentionParams, RopeConvention};
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Masking and position options for one attention call.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionOptions<'a> {
    /// Query i may only see keys at positions ≤ its own (decoder self-attention).
    pub causal: bool,
    /// With `causal`: only the last `window` keys up to its own position (sliding
    /// window); combined with a layer's own window, this one wins.
    pub window: Option<usize>,
    /// Added to the scaled scores: (t_q, t_k) or (b|1, h|1, t_q, t_k); 0 keeps a key,
    /// −∞ removes it (padding), other values shift it (ALiBi).
    pub bias: Option<&'a Tensor>,
    /// RoPE position of the first query (and, for self-attention, of the first new key);
    /// with a KV cache the cached length is added to it.
    pub position_offset: usize,
    /// Also return the per-head softmax weights.
    pub want_weights: bool,
    /// Packed sequences in self-attention: segment boundaries `[0, e₀, …, t]` along the
    /// positions of a batch of one; a query sees only its own segment's keys (see
    /// [`AttentionParams::segments`]). Positions (learned or sinusoidal) are the caller's
    /// to restart per segment; RoPE layers refuse segments.
    pub segments: Option<&'a [usize]>,
    /// How the arithmetic rounds ([`Numerics`]): lucent's own f32 (the default), or
    /// llama.cpp's with its f16 steps (Q, K, V rounded to f16 after RoPE, its RoPE
    /// angles, its f16 products, exp and summation orders: [`crate::ops::attention::llama_cpp`]), where a
    /// prompt's products are summed in another order than a single token's unless every
    /// row is computed alike ([`Numerics::RowInvariant`]: a KV-cached decode then equals
    /// the full forward bit for bit). Passed on to the projections' products.
    pub numerics: Numerics,
}

impl<'a> AttentionOptions<'a> {
    /// No mask: every query sees every key.
    pub fn none() -> Self {
        AttentionOptions::default()
    }

    /// The causal rule.
    pub fn causal() -> Self {
        AttentionOptions {
            causal: true,
            ..AttentionOptions::default()
        }
    }

    /// These options with an additive bias/mask.
    pub fn with_bias(self, bias: &'a Tensor) -> Self {
        AttentionOptions {
            bias: Some(bias),
            ..self
        }
    }

    /// These options, also returning the weights.
    pub fn with_weights(self) -> Self {
        AttentionOptions {
            want_weights: true,
            ..self
        }
    }
}

/// The guides' `attention(Q, K, V, mask)`: softmax(Q·Kᵀ/√d_k + mask) · V, returning the
/// output and (when `opts.want_weights`) the weights. A thin wrapper over
/// [`ops::attention()`] that also takes the guides' single matrices.
///
/// # Shapes
/// q: (t_q, d_k) | (b, t_q, d_k) | (b, h, t_q, d_k); k, v of the same rank with t_k keys
/// (and h_kv heads) → output as q with d_v, weights (…, t_q, t_k) of the same rank
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttentionOptions,
) -> Result<(Tensor, Option<Tensor>)> {
    let rank = q.rank();
    if k.rank() != rank || v.rank() != rank || !(2..=4).contains(&rank) {
        return Err(Error::Shape(format!(
            "attention needs q, k, v of one rank 2, 3 or 4; got {:?}, {:?}, {:?}",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    let as4 = |t: &Tensor| -> Result<Tensor> {
        let s = t.shape();
        match rank {
            2 => t.reshape(&[1, 1, s[0], s[1]]),    // (1, 1, t, d)
            3 => t.reshape(&[s[0], 1, s[1], s[2]]), // (b, 1, t, d)
            _ => Ok(t.clone()),
        }
    };
    let d_k = q.last_dim();
    let params = AttentionParams {
        scale: 1.0 / (d_k as f32).sqrt(),
        causal: opts.causal,
        window: opts.window,
        bias: opts.bias,
        want_weights: opts.want_weights,
        segments: opts.segments,
        kv_len: None,
        numerics: Numerics::Lucent,
        softcap: None,
    };
    let out = ops::attention(&as4(q)?, &as4(k)?, &as4(v)?, &params)?;
    let back = |t: Tensor| -> Result<Tensor> {
        let [b, h, r, c] = t.dims()?;
        match rank {
            2 => t.reshape(&[r, c]),        // (t_q, ·)
            3 => t.reshape(&[b * h, r, c]), // (b, t_q, ·)
            _ => Ok(t),
        }
    };
    Ok((back(out.output)?, out.weights.map(back).transpose()?))
}

/// RoPE settings of an attention layer.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    /// θ base (10 000 in the paper).
    pub base: f32,
    /// Which features are rotated together.
    pub convention: RopeConvention,
    /// Linear or YaRN scaling of the angles, if any ([`crate::ops::rope`]'s formulas).
    pub scaling: RopeScaling,
    /// (d_k/2) divisors fᵢ of the angles (Llama 3.1's `rope_freqs`), if any.
    pub freq_factors: Option<std::sync::Arc<[f32]>>,
}

impl RopeSpec {
    /// Plain RoPE at `base`: no scaling, no frequency factors.
    pub fn plain(base: f32, convention: RopeConvention) -> RopeSpec {
        RopeSpec {
            base,
            convention,
            scaling: RopeScaling::None,
            freq_factors: None,
        }
    }

    /// The angles this spec sets, for the RoPE ops.
    pub fn freqs(&self) -> RopeFreqs<'_> {
        RopeFreqs {
            base: self.base,
            scaling: self.scaling,
            freq_factors: self.freq_factors.as_deref(),
        }
    }
}

/// The shape of a [`MultiHeadAttention`] and the variants it uses.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionConfig {
    /// Model width d (input and output of the layer).
    pub d_model: usize,
    /// Query heads h.
    pub n_heads: usize,
    /// Key/value heads h_kv (h: multi-head, 1: multi-query, between: grouped-query).
    pub n_kv_heads: usize,
    /// Features per head d_k.
    pub head_dim: usize,
    /// Biases on the Q, K, V projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub out_bias: bool,
    /// RMSNorm on each head's queries and keys (Gemma 3); a norm whose γ spans all heads
    /// (h·d_k, h_kv·d_k) normalises all heads of a position together (OLMo 2).
    pub qk_norm: bool,
    /// ε of the QK-norm.
    pub norm_eps: f32,
    /// RoPE on queries and keys, if any.
    pub rope: Option<RopeSpec>,
    /// This layer's sliding window (local layers), if any; applies with the causal rule.
    pub window: Option<usize>,
    /// Multiplies Q·Kᵀ (usually 1/√d_k).
    pub scale: f32,
    /// Soft-capping c of the scaled scores (Gemma 2): s ← c·tanh(s / c) before the mask
    /// and the softmax ([`crate::ops::attention::softcap`]).
    pub softcap: Option<f32>,
    /// With llama.cpp's numerics ([`AttentionOptions::numerics`]): multiply Q by `scale`
    /// before the product and leave the scores unscaled, as llama.cpp runs a model with
    /// an explicit attention scale (Gemma's `query_pre_attn_scalar`). Equal to scaling
    /// the scores but for rounding.
    pub scale_queries: bool,
}

impl AttentionConfig {
    /// Plain multi-head attention as the paper and `torch.nn.MultiheadAttention` have it:
    /// d_k = d / h, biases everywhere, no RoPE. Errors if h does not divide d.
    pub fn new(d_model: usize, n_heads: usize) -> Result<Self> {
        if n_heads == 0 || !d_model.is_multiple_of(n_heads) {
            return Err(Error::Config(format!(
                "d_model ({d_model}) must be divisible by heads ({n_heads}): each head gets d_model / heads features"
            )));
        }
        let head_dim = d_model / n_heads;
        Ok(AttentionConfig {
            d_model,
            n_heads,
            n_kv_heads: n_heads,
            head_dim,
            qkv_bias: true,
            out_bias: true,
            qk_norm: false,
            norm_eps: 1e-6,
            rope: None,
            window: None,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            scale_queries: false,
        })
    }

    /// The same with `n_kv_heads` key/value heads (checked to divide the query heads).
    pub fn with_kv_heads(mut self, n_kv_heads: usize) -> Result<Self> {
        self.n_kv_heads = n_kv_heads;
        self.validate()?;
        Ok(self)
    }

    /// Check the constraints the forward relies on; errors name the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.d_model == 0 || self.n_heads == 0 || self.head_dim == 0 {
            return bad(format!(
                "attention needs d_model, heads and head_dim > 0 (got {}, {}, {})",
                self.d_model, self.n_heads, self.head_dim
            ));
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "heads ({}) must be divisible by kv_heads ({}): each key/value head serves a whole group of query heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.rope.is_some() && !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "RoPE needs an even head_dim, got {}",
                self.head_dim
            ));
        }
        Ok(())
    }

    /// h · d_k
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// h_kv · d_k
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// The result of [`MultiHeadAttention::forward`].
#[derive(Clone, Debug)]
pub struct MhaOutput {
    /// (b, t_q, d)
    pub output: Tensor,
    /// Per-head softmax weights (b, h, t_q, t_k), when asked for.
    pub weights: Option<Tensor>,
}

/// Multi-head attention with separate Q, K, V and output projections.
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    /// Shape and variants.
    pub config: AttentionConfig,
    /// W_Q: (h·d_k, d)
    pub q_proj: Linear,
    /// W_K: (h_kv·d_k, d)
    pub k_proj: Linear,
    /// W_V: (h_kv·d_k, d)
    pub v_proj: Linear,
    /// W_O: (d, h·d_k)
    pub o_proj: Linear,
    /// RMSNorm over each query head's d_k features (QK-norm), if any.
    pub q_norm: Option<RmsNorm>,
    /// RMSNorm over each key head's d_k features (QK-norm), if any.
    pub k_norm: Option<RmsNorm>,
}

impl MultiHeadAttention {
    /// From its parts; checks every projection's shape against `config`, naming both.
    pub fn new(
        config: AttentionConfig,
        q_proj: Linear,
        k_proj: Linear,
        v_proj: Linear,
        o_proj: Linear,
        q_norm: Option<RmsNorm>,
        k_norm: Option<RmsNorm>,
    ) -> Result<Self> {
        config.validate()?;
        let c = &config;
        let checks = [
            ("q_proj", &q_proj, [c.q_dim(), c.d_model]),
            ("k_proj", &k_proj, [c.kv_dim(), c.d_model]),
            ("v_proj", &v_proj, [c.kv_dim(), c.d_model]),
            ("o_proj", &o_proj, [c.d_model, c.q_dim()]),
        ];
        for (name, lin, want) in checks {
            if lin.weight.shape() != want {
                return Err(Error::Weights(format!(
                    "attention {name} weight has shape {:?}, expected {want:?} (d_model {}, heads {}, kv_heads {}, head_dim {})",
                    lin.weight.shape(),
                    c.d_model,
                    c.n_heads,
                    c.n_kv_heads,
                    c.head_dim
                )));
            }
        }
        for (name, n, all) in [
            ("q_norm", &q_norm, c.q_dim()),
            ("k_norm", &k_norm, c.kv_dim()),
        ] {
            if let Some(n) = n {
                if n.weight.shape() != [c.head_dim] && n.weight.shape() != [all] {
                    return Err(Error::Weights(format!(
                        "attention {name} weight has shape {:?}, expected [{}] (head_dim) or [{all}] (all heads)",
                        n.weight.shape(),
                        c.head_dim
                    )));
                }
            }
        }
        let whole = |n: &Option<RmsNorm>| n.as_ref().map(|n| n.weight.shape() != [c.head_dim]);
        if whole(&q_norm) != whole(&k_norm) {
            return Err(Error::Weights(
                "QK-norm: q_norm and k_norm must both be per head or both over all heads".into(),
            ));
        }
        if q_norm.is_some() != k_norm.is_some() {
            return Err(Error::Weights(
                "QK-norm needs both q_norm and k_norm".into(),
            ));
        }
        let mut config = config;
        config.qk_norm = q_norm.is_some();
        Ok(MultiHeadAttention {
            config,
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            q_norm,
            k_norm,
        })
    }

    /// From `torch.nn.MultiheadAttention`'s weights: `in_proj_weight` (3d, d) stacks
    /// W_Q, W_K, W_V (and `in_proj_bias` (3d) their biases); `out_proj` is W_O.
    pub fn from_in_proj(
        n_heads: usize,
        in_proj_weight: &Tensor,
        in_proj_bias: Option<&Tensor>,
        out_weight: Tensor,
        out_bias: Option<Tensor>,
    ) -> Result<Self> {
        let [three_d, d] = in_proj_weight.dims()?;
        if three_d != 3 * d {
            return Err(Error::Weights(format!(
                "in_proj_weight must be (3·d, d) stacking W_Q, W_K, W_V; got {:?}",
                in_proj_weight.shape()
            )));
        }
        if let Some(b) = in_proj_bias {
            if b.shape() != [3 * d] {
                return Err(Error::mismatch(
                    "in_proj_bias vs in_proj_weight",
                    b.shape(),
                    in_proj_weight.shape(),
                ));
            }
        }
        let mut config = AttentionConfig::new(d, n_heads)?;
        config.qkv_bias = in_proj_bias.is_some();
        config.out_bias = out_bias.is_some();
        let part = |i: usize| -> Result<Linear> {
            let w = in_proj_weight.narrow(0, i * d, d)?; // (d, d)
            let b = in_proj_bias.map(|b| b.narrow(0, i * d, d)).transpose()?; // (d)
            Linear::new(w, b)
        };
        let (q, k, v) = (part(0)?, part(1)?, part(2)?);
        MultiHeadAttention::new(
            config,
            q,
            k,
            v,
            Linear::new(out_weight, out_bias)?,
            None,
            None,
        )
    }

    /// Random weights: N(0, 0.02²) for Q, K, V, N(0, out_std²) for W_O (GPT-2 scales the
    /// residual projections by 1/√(2N)); biases zero, QK-norm γ = 1.
    pub fn new_random(config: &AttentionConfig, out_std: f32, rng: &mut impl Rng) -> Result<Self> {
        config.validate()?;
        let c = config;
        let q = Linear::new_random(c.d_model, c.q_dim(), c.qkv_bias, 0.02, rng);
        let k = Linear::new_random(c.d_model, c.kv_dim(), c.qkv_bias, 0.02, rng);
        let v = Linear::new_random(c.d_model, c.kv_dim(), c.qkv_bias, 0.02, rng);
        let o = Linear::new_random(c.q_dim(), c.d_model, c.out_bias, out_std, rng);
        let norms = c.qk_norm.then(|| RmsNorm::identity(c.head_dim, c.norm_eps));
        MultiHeadAttention::new(c.clone(), q, k, v, o, norms.clone(), norms)
    }

    /// Attend from `x_q` to `x_kv` (None: self-attention to `x_q`). With a `cache`
    /// (self-attention only) the new keys and values are appended and the queries attend
    /// over everything cached; RoPE positions start at `opts.position_offset` plus the
    /// cached length. Records q, k, v, scores, scaled, mask, weights, context and output
    /// into `trace` (scores, scaled and mask are computed only when the trace wants them).
    ///
    /// # Shapes
    /// x_q: (b, t_q, d), x_kv: (b, t_k, d) → output (b, t_q, d), weights (b, h, t_q, t_k)
    pub fn forward(
        &self,
        x_q: &Tensor,
        x_kv: Option<&Tensor>,
        opts: &AttentionOptions,
        cache: Option<&mut LayerKvCache>,
        trace: Option<&mut Trace>,
    ) -> Result<MhaOutput> {
        let mut trace = trace;
        let c = &self.config;
        let (h, h_kv, d_k) = (c.n_heads, c.n_kv_heads, c.head_dim);
        let [b, t_q, _] = self.check_input("x_q", x_q)?;
        let kv_in = x_kv.unwrap_or(x_q);
        let [bk, t_k, _] = self.check_input("x_kv", kv_in)?;
        if bk != b {
            return Err(Error::mismatch(
                "attention: batch of x_q vs x_kv",
                x_q.shape(),
                kv_in.shape(),
            ));
        }
        if x_kv.is_some() && cache.is_some() {
            return Err(Error::Argument(
                "a KV cache serves self-attention only; pass x_kv = None or no cache".into(),
            ));
        }

        // The sub-layer's input (after a pre-norm): a hook point.
        let x_q = &hook(&mut trace, "input", x_q.clone())?;
        let kv_in = x_kv.unwrap_or(x_q);
        let split = |x: Tensor, heads: usize, t: usize| -> Result<Tensor> {
            x.reshape(&[b, t, heads, d_k])? // (b, t, heads, d_k)
                .transpose(1, 2) // (b, heads, t, d_k)
        };
        let (q, k, v) = if x_kv.is_none() {
            // Self-attention: Q, K and V read the same x (one pass for a decoded token,
            // one quantisation of a prompt).
            let mut qkv = Linear::forward_group(
                &[&self.q_proj, &self.k_proj, &self.v_proj],
                x_q,
                opts.numerics,
            )?;
            let v = qkv.pop();
            let k = qkv.pop();
            match (qkv.pop(), k, v) {
                (Some(q), Some(k), Some(v)) => (q, k, v),
                _ => {
                    return Err(Error::Config(
                        "attention: Q, K, V projections missing".into(),
                    ))
                }
            }
        } else {
            (
                self.q_proj.forward_with(x_q, opts.numerics)?,
                self.k_proj.forward_with(kv_in, opts.numerics)?,
                self.v_proj.forward_with(kv_in, opts.numerics)?,
            )
        };
        let q = split(q, h, t_q)?; // (b, h, t_q, d_k)
        let k = split(k, h_kv, t_k)?; // (b, h_kv, t_k, d_k)
        let v = split(v, h_kv, t_k)?; // (b, h_kv, t_k, d_k)
        let attended = self.attend(q, k, v, x_kv.is_some(), opts, cache, &mut trace)?;
        self.project_heads(attended, opts, &mut trace)
    }

    /// The heads' contexts concatenated and projected back to d_model (W_O), recorded
    /// as `output`; the weights kept when `opts.want_weights`.
    ///
    /// # Shapes
    /// context (b, h, t_q, d_k) → output (b, t_q, d)
    fn project_heads(
        &self,
        attended: ops::AttentionOutput,
        opts: &AttentionOptions,
        trace: &mut Option<&mut Trace>,
    ) -> Result<MhaOutput> {
        let [b, h, t_q, d_k] = attended.output.dims()?;
        let concat = attended
            .output
            .transpose(1, 2)? // (b, t_q, h, d_k)
            .reshape(&[b, t_q, h * d_k])?; // (b, t_q, h·d_k)
        let output = self.o_proj.forward_with(&concat, opts.numerics)?; // (b, t_q, d)
        let output = hook(trace, "output", output)?;
        Ok(MhaOutput {
            output,
            weights: if opts.want_weights {
                attended.weights
            } else {
                None
            },
        })
    }

    /// The keys and values of a fixed `memory` (an encoder-decoder's source), computed
    /// once and handed to [`MultiHeadAttention::forward_kv`] at every decoding step:
    /// cross-attention's K and V do not change while the decoder generates.
    ///
    /// # Shapes
    /// memory: (b, s, d) → k (b, h_kv, s, d_k), v (b, h_kv, s, d_k)
    pub fn memory_kv(&self, memory: &Tensor, numerics: Numerics) -> Result<(Tensor, Tensor)> {
        let c = &self.config;
        let [b, s, _] = self.check_input("memory", memory)?;
        let split = |x: Tensor| -> Result<Tensor> {
            x.reshape(&[b, s, c.n_kv_heads, c.head_dim])? // (b, s, h_kv, d_k)
                .transpose(1, 2) // (b, h_kv, s, d_k)
        };
        let mut kv = Linear::forward_group(&[&self.k_proj, &self.v_proj], memory, numerics)?;
        let (v, k) = match (kv.pop(), kv.pop()) {
            (Some(v), Some(k)) => (v, k),
            _ => return Err(Error::Config("attention: K, V projections missing".into())),
        };
        let mut k = split(k)?;
        if let Some(kn) = &self.k_norm {
            k = norm_heads(kn, &k)?;
        }
        Ok((k, split(v)?))
    }

    /// Attend from `x_q` to keys and values computed before ([`MultiHeadAttention::memory_kv`]):
    /// the decoding step of cross-attention. Same result as [`MultiHeadAttention::forward`]
    /// with `x_kv` = the memory they came from.
    ///
    /// # Shapes
    /// x_q: (b, t_q, d), k, v: (b, h_kv, s, d_k) → output (b, t_q, d), weights (b, h, t_q, s)
    pub fn forward_kv(
        &self,
        x_q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        opts: &AttentionOptions,
        trace: Option<&mut Trace>,
    ) -> Result<MhaOutput> {
        let mut trace = trace;
        let c = &self.config;
        let (h, d_k) = (c.n_heads, c.head_dim);
        let [b, t_q, _] = self.check_input("x_q", x_q)?;
        let [kb, kh, _, kd] = k.dims()?;
        if kb != b || kh != c.n_kv_heads || kd != d_k || v.shape() != k.shape() {
            return Err(Error::mismatch(
                "attention: precomputed K, V must be (b, h_kv, s, d_k)",
                k.shape(),
                &[b, c.n_kv_heads, 0, d_k],
            ));
        }
        if c.rope.is_some() || opts.numerics.llama_cpp() {
            return Err(Error::Config(
                "attention over precomputed K, V serves cross-attention without RoPE, in lucent's own numerics".into(),
            ));
        }
        let x_q = &hook(&mut trace, "input", x_q.clone())?;
        let q = self.q_proj.forward_with(x_q, opts.numerics)?;
        let mut q = q
            .reshape(&[b, t_q, h, d_k])? // (b, t_q, h, d_k)
            .transpose(1, 2)?; // (b, h, t_q, d_k)
        if let Some(qn) = &self.q_norm {
            q = norm_heads(qn, &q)?;
        }
        // Hook points, recorded below with the steps.
        let q = edit(&mut trace, "q", q)?;
        let k = &edit(&mut trace, "k", k.clone())?;
        let v = &edit(&mut trace, "v", v.clone())?;
        let params = AttentionParams {
            scale: c.scale,
            causal: opts.causal,
            window: opts.window.or(c.window),
            bias: opts.bias,
            want_weights: opts.want_weights || wants(&trace, "weights") || edits(&trace, "weights"),
            segments: opts.segments,
            kv_len: None,
            numerics: Numerics::Lucent,
            softcap: c.softcap,
        };
        let mut attended = ops::attention(&q, k, v, &params)?;
        if trace.is_some() {
            self.record_steps(&mut trace, &q, k, v, &params)?;
            self.hook_pattern_and_context(&mut trace, &mut attended, v)?;
        }
        self.project_heads(attended, opts, &mut trace)
    }

    /// The heads' part of [`MultiHeadAttention::forward`], after the projections:
    /// QK-norm, RoPE (queries from `opts.position_offset` plus the cached length; keys
    /// from there too for self-attention, from 0 for cross-attention), llama.cpp's f16
    /// rounding, the cache append, and the attention itself; records q, k, v, the steps
    /// the trace wants, the weights and the context.
    ///
    /// # Shapes
    /// q: (b, h, t_q, d_k), k, v: (b, h_kv, t_k, d_k) → output (b, h, t_q, d_v),
    /// weights (b, h, t_q, t_k)
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cross: bool,
        opts: &AttentionOptions,
        cache: Option<&mut LayerKvCache>,
        trace: &mut Option<&mut Trace>,
    ) -> Result<ops::AttentionOutput> {
        let c = &self.config;
        let d_k = c.head_dim;
        let (t_q, t_k) = (q.shape()[2], k.shape()[2]);
        let (mut q, mut k, mut v) = (q, k, v);
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = norm_heads(qn, &q)?;
            k = norm_heads(kn, &k)?;
        }
        let start = opts.position_offset + cache.as_ref().map_or(0, |c| c.len());
        // llama.cpp's f16 steps (its RoPE, Q, K and V rounded to f16, its attention).
        let f16 = opts.numerics.llama_cpp();
        if c.rope.is_some() && opts.segments.is_some() {
            return Err(Error::Config(
                "packed segments with RoPE would rotate by positions across segments; run the sequences as a padded batch".into(),
            ));
        }
        if let Some(r) = &c.rope {
            let q_pos: Vec<usize> = (start..start + t_q).collect();
            let k_start = if cross { 0 } else { start };
            let k_pos: Vec<usize> = (k_start..k_start + t_k).collect();
            let freqs = r.freqs();
            freqs.check(d_k)?;
            // Under llama.cpp's numerics, its angles and rounding.
            if q_pos == k_pos {
                let qk = &mut [&mut q, &mut k];
                ops::rope::apply_shared(qk, &q_pos, &freqs, r.convention, opts.numerics)?;
            } else {
                ops::rope::apply(&mut q, &q_pos, &freqs, r.convention, opts.numerics)?;
                ops::rope::apply(&mut k, &k_pos, &freqs, r.convention, opts.numerics)?;
            }
        }
        if f16 {
            if c.scale_queries {
                q = q.scale(c.scale);
            }
            round_f16_in_place(q.data_mut());
            round_f16_in_place(k.data_mut());
            round_f16_in_place(v.data_mut());
        }
        // Hook points (recorded below with the steps): Q, K and V as attention reads them.
        let q = edit(trace, "q", q)?;
        let k = edit(trace, "k", k)?;
        let v = edit(trace, "v", v)?;
        let mut params = AttentionParams {
            scale: if f16 && c.scale_queries { 1.0 } else { c.scale },
            causal: opts.causal,
            window: opts.window.or(c.window),
            bias: opts.bias,
            want_weights: opts.want_weights || wants(trace, "weights") || edits(trace, "weights"),
            segments: opts.segments,
            kv_len: None,
            numerics: opts.numerics,
            softcap: c.softcap,
        };
        // With a cache, K and V are its whole store (b, h_kv, max_t, d_k), read in place
        // up to the cached length (`kv_len`), not copied out each step.
        let (mut attended, k, v) = match cache {
            Some(cache) => {
                cache.append(&k, &v)?;
                params.kv_len = Some(cache.len());
                let attended = match cache.kv_store() {
                    KvStore::F32 { k, v } => ops::attention(&q, k, v, &params)?,
                    KvStore::F16 { k, v, shape, d_v } => {
                        ops::attention::attention_f16(&q, k, v, shape, d_v, &params)?
                    }
                };
                // The step-by-step record works on exactly the keys: (b, h_kv, t_k, d_k).
                let (k, v) = if trace.is_some() {
                    cache.positions(0, cache.len())?
                } else {
                    (k, v)
                };
                (attended, k, v)
            }
            None => (ops::attention(&q, &k, &v, &params)?, k, v),
        };
        if trace.is_some() {
            let plain = AttentionParams {
                kv_len: None,
                ..params
            };
            self.record_steps(trace, &q, &k, &v, &plain)?;
            self.hook_pattern_and_context(trace, &mut attended, &v)?;
        }
        Ok(attended)
    }

    /// One decoding step of `n` sequences at once, each at its own position over its
    /// own cache: row i of `x` is sequence i's new token, `caches[i]` its keys and
    /// values. The Q, K, V and output projections take the n rows together (one read of
    /// each weight for all of them; under row-invariant products each row is computed
    /// exactly as a lone row is); RoPE, the cache append and the attention run per
    /// sequence, each exactly as [`MultiHeadAttention::forward`] runs a lone token.
    /// `traces` is empty or holds one optional trace per sequence, which gets what a
    /// lone token's forward records (`input`, `q`, `k`, `v`, `weights`, `context`,
    /// `output`, and the steps it asks for).
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
        let c = &self.config;
        let (h, h_kv, d_k) = (c.n_heads, c.n_kv_heads, c.head_dim);
        let [n, t, _] = self.check_input("x", x)?;
        if t != 1 || caches.len() != n || !(traces.is_empty() || traces.len() == n) {
            return Err(Error::Argument(format!(
                "MultiHeadAttention::decode_batch: x {:?} must be one new token per sequence (n, 1, d) with one \
                 cache per sequence (got {} caches) and 0 or n traces (got {})",
                x.shape(),
                caches.len(),
                traces.len()
            )));
        }
        record_rows(traces, "input", x)?;
        let mut qkv = Linear::forward_group(
            &[&self.q_proj, &self.k_proj, &self.v_proj],
            x,
            opts.numerics,
        )?;
        let (Some(v), Some(k), Some(q)) = (qkv.pop(), qkv.pop(), qkv.pop()) else {
            return Err(Error::Config(
                "attention: Q, K, V projections missing".into(),
            ));
        };
        let (qd, kd) = (h * d_k, h_kv * d_k);
        let head = |t: &Tensor, i: usize, width: usize, heads: usize| {
            // (1, 1, heads, d_k) is (1, heads, 1, d_k): one position.
            Tensor::new(
                t.data()[i * width..(i + 1) * width].to_vec(),
                &[1, heads, 1, d_k],
            )
        };
        let self_opts = AttentionOptions {
            causal: true,
            ..*opts
        };
        // The sequences' attentions side by side over the threads, one sequence to a
        // call (each computes what it computes alone: its heads' numbers do not depend
        // on how the heads are shared out).
        struct One<'c, 't> {
            cache: &'c mut LayerKvCache,
            trace: Option<&'t mut Trace>,
            out: Result<Vec<f32>>,
        }
        let mut each_trace = traces.iter_mut().map(|t| t.as_deref_mut());
        let mut ones: Vec<One> = caches
            .iter_mut()
            .map(|cache| One {
                cache,
                trace: each_trace.next().flatten(),
                out: Ok(Vec::new()),
            })
            .collect();
        let attend_one = |i: usize, one: &mut One| {
            one.out = (|| {
                let (qi, ki, vi) = (
                    head(&q, i, qd, h)?,
                    head(&k, i, kd, h_kv)?,
                    head(&v, i, kd, h_kv)?,
                );
                let mut tr = one.trace.as_deref_mut();
                let attended = self.attend(
                    qi,
                    ki,
                    vi,
                    false,
                    &self_opts,
                    Some(&mut *one.cache),
                    &mut tr,
                )?;
                Ok(attended.output.into_vec()) // (1, h, 1, d_k) = h·d_k
            })();
        };
        if let [one] = ones.as_mut_slice() {
            // One sequence: its heads shared over the threads, as a lone token's are.
            attend_one(0, one);
        } else {
            crate::threads::for_each_mut(&mut ones, attend_one);
        }
        let mut concat = Vec::with_capacity(n * qd); // (n, h·d_k)
        for one in ones {
            concat.extend_from_slice(&one.out?);
        }
        let concat = Tensor::new(concat, &[n, 1, qd])?; // (n, 1, h·d_k)
        let output = self.o_proj.forward_with(&concat, opts.numerics)?; // (n, 1, d)
        record_rows(traces, "output", &output)?;
        Ok(output)
    }

    /// Self-attention without cache: `forward(x, None, opts, None, trace)`.
    ///
    /// # Shapes
    /// x: (b, t, d) → output (b, t, d), weights (b, h, t, t)
    pub fn forward_self(
        &self,
        x: &Tensor,
        opts: &AttentionOptions,
        trace: Option<&mut Trace>,
    ) -> Result<MhaOutput> {
        self.forward(x, None, opts, None, trace)
    }

    fn check_input(&self, name: &str, x: &Tensor) -> Result<[usize; 3]> {
        let d = self.config.d_model;
        match x.dims::<3>() {
            Ok([b, t, dx]) if dx == d => Ok([b, t, dx]),
            _ => Err(Error::mismatch(
                format!("MultiHeadAttention: {name} must be (b, t, d_model = {d})"),
                x.shape(),
                &[d],
            )),
        }
    }

    /// The hook points after attention: the softmax weights (`weights`) and the heads'
    /// outputs (`context`), edited and recorded. A pattern an edit changed is applied
    /// again, context = weights · V per head (the plain product, in f32), since the
    /// kernel's output was computed from the unedited one; an edit that leaves every bit
    /// as it was leaves the kernel's output as it was.
    ///
    /// # Shapes
    /// attended: output (b, h, t_q, d_v), weights (b, h, t_q, t_k); v: (b, h_kv, t_k, d_v)
    fn hook_pattern_and_context(
        &self,
        trace: &mut Option<&mut Trace>,
        attended: &mut ops::AttentionOutput,
        v: &Tensor,
    ) -> Result<()> {
        if let Some(w) = attended.weights.take() {
            let edited = edit(trace, "weights", w.clone())?;
            let same = edited
                .data()
                .iter()
                .zip(w.data())
                .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                let v = repeat_kv(v, self.config.n_heads)?; // (b, h, t_k, d_v)
                attended.output = ops::matmul(&edited, &v)?; // (b, h, t_q, d_v)
            }
            record(trace, "weights", &edited);
            attended.weights = Some(edited);
        }
        let context = std::mem::replace(&mut attended.output, Tensor::zeros(&[0]));
        attended.output = hook(trace, "context", context)?;
        Ok(())
    }

    /// Record Q, K, V and, when wanted, the raw and scaled scores and the mask (these
    /// three are recomputed here, outside the fused kernel).
    fn record_steps(
        &self,
        trace: &mut Option<&mut Trace>,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        p: &AttentionParams,
    ) -> Result<()> {
        record(trace, "q", q);
        record(trace, "k", k);
        record(trace, "v", v);
        let want_scores = wants(trace, "scores") || wants(trace, "scaled");
        if want_scores {
            let scores = ops::matmul_t(q, &repeat_kv(k, self.config.n_heads)?)?; // (b, h, t_q, t_k)
            record(trace, "scores", &scores);
            record(trace, "scaled", &scores.scale(p.scale));
        }
        if wants(trace, "mask") {
            record(trace, "mask", &full_mask(q, k, v, p)?);
        }
        Ok(())
    }
}

/// The QK-norm of queries or keys split into heads: per head when γ has d_k entries,
/// over all heads of a position together when it has heads·d_k (OLMo 2).
///
/// # Shapes
/// x: (b, heads, t, d_k) → (b, heads, t, d_k)
fn norm_heads(norm: &RmsNorm, x: &Tensor) -> Result<Tensor> {
    let [b, heads, t, d_k] = x.dims()?;
    if norm.weight.numel() == d_k {
        return norm.forward(x);
    }
    let whole = x
        .transpose(1, 2)? // (b, t, heads, d_k)
        .reshape(&[b, t, heads * d_k])?; // (b, t, heads·d_k)
    norm.forward(&whole)?
        .reshape(&[b, t, heads, d_k])? // (b, t, heads, d_k)
        .transpose(1, 2) // (b, heads, t, d_k)
}

/// Repeat each of h_kv key/value heads h / h_kv times, so head j of the result is kv
/// head j / (h / h_kv) (for showing per-query-head scores under GQA).
///
/// # Shapes
/// x: (b, h_kv, t, d) → (b, h, t, d)
pub fn repeat_kv(x: &Tensor, h: usize) -> Result<Tensor> {
    let [b, h_kv, t, d] = x.dims()?;
    if h == h_kv {
        return Ok(x.clone());
    }
    if h_kv == 0 || !h.is_multiple_of(h_kv) {
        return Err(Error::Shape(format!(
            "repeat_kv: {h} heads cannot share {h_kv} key/value heads"
        )));
    }
    let one = x.reshape(&[b, h_kv, 1, t * d])?; // (b, h_kv, 1, t·d)
    let copies: Vec<&Tensor> = std::iter::repeat_n(&one, h / h_kv).collect();
    Tensor::cat(&copies, 2)? // (b, h_kv, group, t·d)
        .reshape(&[b, h, t, d]) // (b, h, t, d)
}

/// The additive mask the kernel applies, written out: −∞ where the causal/window rule
/// hides a key, plus the bias.
///
/// # Shapes
/// → (b, h, t_q, t_k)
fn full_mask(q: &Tensor, k: &Tensor, v: &Tensor, p: &AttentionParams) -> Result<Tensor> {
    let dims = check_dims(q, k, v, p)?;
    let (h, t_q, t_k) = (dims.h, dims.t_q, dims.t_k);
    Ok(Tensor::from_fn(&[dims.b, h, t_q, t_k], |idx| {
        let j = idx % t_k;
        let i = (idx / t_k) % t_q;
        let hi = (idx / (t_k * t_q)) % h;
        let bi = idx / (t_k * t_q * h);
        if !visible_keys(p, &dims, i).contains(&j) {
            return f32::NEG_INFINITY;
        }
        bias_row(p.bias, &dims, bi, hi, i).map_or(0.0, |row| row[j])
    }))
}
