//! The position-wise feed-forward network (Vaswani et al. 2017, §3.3), and its gated form.
//!
//! MLP:   FFN(x) = W₂ · act(W₁ x + b₁) + b₂          (the paper: ReLU; BERT, GPT-2: GELU)
//! Gated: FFN(x) = W_down · (act(W_gate x) ⊙ W_up x)  (Shazeer 2020: SwiGLU with SiLU in
//! LLaMA, GeGLU with tanh-GELU in Gemma)
//!
//! Applied to every position alone; d_ff is usually 4·d (MLP) or about 8/3·d (gated).
//!
//! Experts: MoE(x) = Σ_j w_j · FFN_{E_j}(x) over the k experts a router picks
//! ([`MixtureOfExperts`], `nn/moe.rs`), each a gated FFN; a layer holds it where it would
//! hold one FFN.

use rand::Rng;

use crate::nn::linear::Linear;
use crate::nn::moe::MixtureOfExperts;
use crate::nn::trace::{hook, Trace};
use crate::ops::{self, Activation};
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// The feed-forward network's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FfnKind {
    /// W₂ · act(W₁ x + b₁) + b₂ (the paper, BERT, GPT-2).
    Mlp,
    /// W_down · (act(W_gate x) ⊙ W_up x): SwiGLU with SiLU, GeGLU with GELU.
    Gated,
}

/// A feed-forward network, plain or gated.
#[derive(Clone, Debug)]
pub enum FeedForward {
    /// W₂ · act(W₁ x + b₁) + b₂
    Mlp {
        /// W₁: (d_ff, d)
        w1: Linear,
        /// W₂: (d, d_ff)
        w2: Linear,
        /// act
        activation: Activation,
    },
    /// W_down · (act(W_gate x) ⊙ W_up x)
    Gated {
        /// W_gate: (d_ff, d)
        gate: Linear,
        /// W_up: (d_ff, d)
        up: Linear,
        /// W_down: (d, d_ff)
        down: Linear,
        /// act (SiLU: SwiGLU, GELU: GeGLU)
        activation: Activation,
    },
    /// Σ_j w_j · FFN_{E_j}(x): a router's top-k of n gated experts ([`MixtureOfExperts`]).
    Experts(Box<MixtureOfExperts>),
}

impl FeedForward {
    /// Its linear layers (W₁, W₂; or gate, up, down; or the router and every expert's
    /// gate, up, down), to adjust them after loading.
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            FeedForward::Mlp { w1, w2, .. } => vec![w1, w2],
            FeedForward::Gated { gate, up, down, .. } => vec![gate, up, down],
            FeedForward::Experts(m) => {
                let m = &mut **m;
                let mut all = vec![&mut m.router];
                for e in &mut m.experts {
                    all.extend(e.linears_mut());
                }
                all
            }
        }
    }

    /// A plain MLP from W₁ (d_ff, d) and W₂ (d, d_ff); errors name both shapes.
    pub fn mlp(w1: Linear, w2: Linear, activation: Activation) -> Result<Self> {
        if w2.weight.shape() != [w1.in_features(), w1.out_features()] {
            return Err(Error::mismatch(
                "FeedForward W₁ (d_ff, d) vs W₂ (d, d_ff)",
                w1.weight.shape(),
                w2.weight.shape(),
            ));
        }
        Ok(FeedForward::Mlp { w1, w2, activation })
    }

    /// A gated FFN from W_gate (d_ff, d), W_up (d_ff, d), W_down (d, d_ff).
    pub fn gated(gate: Linear, up: Linear, down: Linear, activation: Activation) -> Result<Self> {
        if up.weight.shape() != gate.weight.shape() {
            return Err(Error::mismatch(
                "FeedForward W_gate vs W_up",
                gate.weight.shape(),
                up.weight.shape(),
            ));
        }
        if down.weight.shape() != [gate.in_features(), gate.out_features()] {
            return Err(Error::mismatch(
                "FeedForward W_gate (d_ff, d) vs W_down (d, d_ff)",
                gate.weight.shape(),
                down.weight.shape(),
            ));
        }
        Ok(FeedForward::Gated {
            gate,
            up,
            down,
            activation,
        })
    }

    /// Random weights N(0, 0.02²) in, N(0, out_std²) for the output projection
    /// (W₂ / W_down), biases zero.
    #[allow(clippy::too_many_arguments)]
    pub fn new_random(
        kind: FfnKind,
        activation: Activation,
        d_model: usize,
        d_ff: usize,
        bias: bool,
        out_std: f32,
        rng: &mut impl Rng,
    ) -> Self {
        match kind {
            FfnKind::Mlp => FeedForward::Mlp {
                w1: Linear::new_random(d_model, d_ff, bias, 0.02, rng),
                w2: Linear::new_random(d_ff, d_model, bias, out_std, rng),
                activation,
            },
            FfnKind::Gated => FeedForward::Gated {
                gate: Linear::new_random(d_model, d_ff, bias, 0.02, rng),
                up: Linear::new_random(d_model, d_ff, bias, 0.02, rng),
                down: Linear::new_random(d_ff, d_model, bias, out_std, rng),
                activation,
            },
        }
    }

    /// Plain or gated (a mixture of experts is gated: each of its experts is).
    pub fn kind(&self) -> FfnKind {
        match self {
            FeedForward::Mlp { .. } => FfnKind::Mlp,
            FeedForward::Gated { .. } | FeedForward::Experts(_) => FfnKind::Gated,
        }
    }

    /// The model width d.
    pub fn d_model(&self) -> usize {
        match self {
            FeedForward::Mlp { w1, .. } => w1.in_features(),
            FeedForward::Gated { gate, .. } => gate.in_features(),
            FeedForward::Experts(m) => m.d_model(),
        }
    }

    /// The hidden width d_ff (of each expert, in a mixture of experts).
    pub fn d_ff(&self) -> usize {
        match self {
            FeedForward::Mlp { w1, .. } => w1.out_features(),
            FeedForward::Gated { gate, .. } => gate.out_features(),
            FeedForward::Experts(m) => m.d_ff(),
        }
    }

    /// The mixture of experts, if this FFN is one.
    pub fn experts(&self) -> Option<&MixtureOfExperts> {
        match self {
            FeedForward::Experts(m) => Some(m),
            _ => None,
        }
    }

    /// Apply the network to every position; records (and applies the trace's edits to)
    /// `input`, `hidden` (after the activation / gating) and `output`. With llama.cpp's [`Numerics`], a gated network's activation
    /// is llama.cpp's own (tanh-GELU from its f16 table, [`ops::activation::gelu_tanh_f16`];
    /// SiLU with its vector exp, [`ops::activation::llama_cpp::silu`]; other activations are unaffected),
    /// and the products follow the numerics' orders. A mixture of experts records its
    /// own leaves instead of `hidden` ([`MixtureOfExperts::forward`]).
    ///
    /// # Shapes
    /// x: (..., d) → (..., d); hidden (..., d_ff)
    pub fn forward(
        &self,
        x: &Tensor,
        numerics: Numerics,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        if let FeedForward::Experts(m) = self {
            return m.forward(x, numerics, trace);
        }
        let mut trace = trace;
        let x = &hook(&mut trace, "input", x.clone())?;
        let out = match self {
            FeedForward::Mlp { w1, w2, activation } => {
                let hidden = activation.apply(&w1.forward_with(x, numerics)?); // (..., d_ff)
                let hidden = hook(&mut trace, "hidden", hidden)?;
                w2.forward_with(&hidden, numerics)?
            }
            FeedForward::Gated {
                gate,
                up,
                down,
                activation,
            } => {
                // Gate and up read the same x (one pass for a decoded token, one
                // quantisation of a prompt).
                let mut gu = Linear::forward_group(&[gate, up], x, numerics)?;
                let (Some(u), Some(g)) = (gu.pop(), gu.pop()) else {
                    return Err(Error::Config("gated FFN: gate and up missing".into()));
                }; // (..., d_ff) each

                // llama.cpp's gated activations (f16 GELU table, its SiLU): in place and
                // over the threads for a prompt, act(g) · u number by number.
                let hidden = match ops::activation::in_place_for(*activation, numerics) {
                    Some(act) => {
                        let mut g = g;
                        let silu = *activation == Activation::Silu;
                        let tails = if silu { swiglu_tails(&g) } else { Vec::new() };
                        ops::activation::gated_in_place(g.data_mut(), u.data(), act)?;
                        if silu {
                            put_swiglu_tails(&mut g, &u, &tails);
                        }
                        g
                    }
                    None => activation.apply(&g).mul(&u)?,
                }; // (..., d_ff)
                let hidden = hook(&mut trace, "hidden", hidden)?;
                down.forward_with(&hidden, numerics)?
            }
            FeedForward::Experts(m) => return m.forward(x, numerics, trace),
        };
        hook(&mut trace, "output", out)
    }
}

/// Numbers per step of llama.cpp's vector SwiGLU (`ggml_vec_swiglu_f32`, AVX2 build).
const SWIGLU_LANES: usize = 8;

/// The gate's raw numbers past the last whole eight of each row (`d_ff mod 8` a row),
/// row after row: the ones llama.cpp's SwiGLU takes one at a time ([`put_swiglu_tails`]).
///
/// # Shapes
/// g: (..., d_ff) → (rows · (d_ff mod 8))
fn swiglu_tails(g: &Tensor) -> Vec<f32> {
    let d_ff = g.last_dim();
    let rem = d_ff % SWIGLU_LANES;
    if rem == 0 || d_ff == 0 {
        return Vec::new();
    }
    g.data()
        .chunks_exact(d_ff)
        .flat_map(|r| r[d_ff - rem..].iter().copied())
        .collect()
}

/// llama.cpp's SwiGLU (`ggml_vec_swiglu_f32`, AVX2 build) takes its vector SiLU eight
/// numbers at a time, and the `d_ff mod 8` numbers past the last eight of a row one at a
/// time as `x / (1 + expf(−x)) · u` with the C library's `expf` (`ggml_silu_f32`), which
/// can differ from the vector `expf` in the last bit: those numbers of `h = silu(g) · u`
/// recomputed so, from the gate's raw `tails` ([`swiglu_tails`]).
///
/// # Shapes
/// h, u: (..., d_ff); tails: (rows · (d_ff mod 8))
fn put_swiglu_tails(h: &mut Tensor, u: &Tensor, tails: &[f32]) {
    let d_ff = h.last_dim();
    let rem = d_ff % SWIGLU_LANES;
    if tails.is_empty() || rem == 0 {
        return;
    }
    let rows = h.data_mut().chunks_exact_mut(d_ff);
    for ((hr, ur), tr) in rows
        .zip(u.data().chunks_exact(d_ff))
        .zip(tails.chunks_exact(rem))
    {
        for (j, &x) in tr.iter().enumerate() {
            let i = d_ff - rem + j;
            hr[i] = x / (1.0 + (-x).exp()) * ur[i];
        }
    }
}

/// GPT-2's initialisation scale for projections that feed the residual stream:
/// 0.02 / √(2N) for a stack of N layers (each layer adds two such projections).
pub fn residual_std(n_layers: usize) -> f32 {
    0.02 / ((2 * n_layers.max(1)) as f32).sqrt()
}
