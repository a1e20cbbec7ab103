//! Scaled dot-product attention (Vaswani et al. 2017, eq. 1), as one kernel:
//!
//! Attention(Q, K, V) = softmax(Q·Kᵀ · scale + bias) · V,   scale usually 1/√d_k
//!
//! with an optional causal rule (query i sees keys up to its own position), a sliding
//! window (and only the last `window` of those), and an additive bias (a padding mask
//! as 0 / −∞, ALiBi, or any float mask). Grouped-query attention is built in: with h
//! query heads and h_kv key/value heads, query head j reads kv head j / (h / h_kv).
//! On request the kernel also returns the softmax weights, so the real models can show
//! what they attend to.
//!
//! With a KV cache the queries are the *last* t_q of t_k positions: query i sits at
//! position t_k − t_q + i, which is what the causal and window rules use.

use crate::tensor::Tensor;
use crate::{Error, Result};

/// What [`attention`] computes besides Q, K, V.
#[derive(Clone, Copy, Debug)]
pub struct AttentionParams<'a> {
    /// Multiplies Q·Kᵀ (usually 1/√d_k).
    pub scale: f32,
    /// Query i may only see keys at positions ≤ its own.
    pub causal: bool,
    /// With `causal`, query i sees only the last `window` keys up to its own position.
    pub window: Option<usize>,
    /// Added to the scaled scores: (t_q, t_k), or (b or 1, h or 1, t_q, t_k).
    pub bias: Option<&'a Tensor>,
    /// Also return the softmax weights (b, h, t_q, t_k).
    pub want_weights: bool,
}

impl AttentionParams<'_> {
    /// Plain attention with scale 1/√d_k, no mask, no weights.
    pub fn new(d_k: usize) -> Self {
        AttentionParams {
            scale: 1.0 / (d_k as f32).sqrt(),
            causal: false,
            window: None,
            bias: None,
            want_weights: false,
        }
    }
}

/// The result of [`attention`].
#[derive(Clone, Debug)]
pub struct AttentionOutput {
    /// (b, h, t_q, d_v)
    pub output: Tensor,
    /// (b, h, t_q, t_k), when asked for.
    pub weights: Option<Tensor>,
}

/// Checked dimensions of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionDims {
    /// batch
    pub b: usize,
    /// query heads
    pub h: usize,
    /// key/value heads
    pub h_kv: usize,
    /// query positions
    pub t_q: usize,
    /// key positions
    pub t_k: usize,
    /// query/key features per head
    pub d_k: usize,
    /// value features per head
    pub d_v: usize,
}

/// Check the shapes of an attention call and name its dimensions.
pub fn check_dims(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttentionParams,
) -> Result<AttentionDims> {
    let [b, h, t_q, d_k] = q.dims()?;
    let [bk, h_kv, t_k, dk2] = k.dims()?;
    let [bv, hv, tv, d_v] = v.dims()?;
    if b != bk || d_k != dk2 {
        return Err(Error::mismatch("attention (q vs k)", q.shape(), k.shape()));
    }
    if bv != b || hv != h_kv || tv != t_k {
        return Err(Error::mismatch("attention (k vs v)", k.shape(), v.shape()));
    }
    if h_kv == 0 || h % h_kv != 0 {
        return Err(Error::Shape(format!(
            "attention: {h} query heads cannot share {h_kv} key/value heads (must divide)"
        )));
    }
    if p.causal && t_q > t_k {
        return Err(Error::Shape(format!(
            "causal attention with {t_q} queries but only {t_k} keys"
        )));
    }
    if let Some(bias) = p.bias {
        let s = bias.shape();
        let ok = match s {
            [a, c] => *a == t_q && *c == t_k,
            [bb, hh, a, c] => {
                (*bb == 1 || *bb == b) && (*hh == 1 || *hh == h) && *a == t_q && *c == t_k
            }
            _ => false,
        };
        if !ok {
            return Err(Error::Shape(format!(
                "attention mask/bias of shape {s:?} does not fit scores of shape [{b}, {h}, {t_q}, {t_k}] \
                 (expected [{t_q}, {t_k}] or [b|1, h|1, {t_q}, {t_k}])"
            )));
        }
    }
    Ok(AttentionDims {
        b,
        h,
        h_kv,
        t_q,
        t_k,
        d_k,
        d_v,
    })
}

/// The bias row for (batch bi, head hi, query i), or None.
pub fn bias_row<'a>(
    bias: Option<&'a Tensor>,
    d: &AttentionDims,
    bi: usize,
    hi: usize,
    i: usize,
) -> Option<&'a [f32]> {
    bias.map(|t| {
        let s = t.shape();
        let off = match s {
            [_, _] => i * d.t_k,
            _ => {
                let bb = if s[0] == 1 { 0 } else { bi };
                let hh = if s[1] == 1 { 0 } else { hi };
                ((bb * s[1] + hh) * d.t_q + i) * d.t_k
            }
        };
        &t.data()[off..off + d.t_k]
    })
}

/// The range of keys query i may see under the causal and window rules.
pub fn visible_keys(p: &AttentionParams, d: &AttentionDims, i: usize) -> std::ops::Range<usize> {
    if !p.causal {
        return 0..d.t_k;
    }
    let pos = d.t_k - d.t_q + i; // absolute position of query i
    let start = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    start..pos + 1
}

/// Scaled dot-product attention.
///
/// # Shapes
/// q: (b, h, t_q, d_k), k: (b, h_kv, t_k, d_k), v: (b, h_kv, t_k, d_v)
/// → output (b, h, t_q, d_v), weights (b, h, t_q, t_k)
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttentionParams,
) -> Result<AttentionOutput> {
    crate::autograd::rules::attention(q, k, v, p, reference::attention)
}

/// The plain twin: scores, scale, mask, softmax, weighted sum, one query at a time.
pub mod reference {
    use super::*;
    use crate::ops::softmax::reference::softmax_row;

    /// Scaled dot-product attention, step by step.
    pub fn attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        p: &AttentionParams,
    ) -> Result<AttentionOutput> {
        let d = check_dims(q, k, v, p)?;
        let group = d.h / d.h_kv;
        let (qd, kd, vd) = (q.data(), k.data(), v.data());
        let mut out = vec![0.0f32; d.b * d.h * d.t_q * d.d_v];
        let mut weights = p
            .want_weights
            .then(|| vec![0.0f32; d.b * d.h * d.t_q * d.t_k]);
        let mut row = vec![0.0f32; d.t_k];
        for bi in 0..d.b {
            for hi in 0..d.h {
                let kv = bi * d.h_kv + hi / group;
                for i in 0..d.t_q {
                    let qrow = &qd[((bi * d.h + hi) * d.t_q + i) * d.d_k..][..d.d_k];
                    let vis = visible_keys(p, &d, i);
                    let bias = bias_row(p.bias, &d, bi, hi, i);
                    for (j, s) in row.iter_mut().enumerate() {
                        if !vis.contains(&j) {
                            *s = f32::NEG_INFINITY;
                            continue;
                        }
                        let krow = &kd[(kv * d.t_k + j) * d.d_k..][..d.d_k];
                        let dot: f32 = qrow.iter().zip(krow).map(|(a, b)| a * b).sum();
                        *s = dot * p.scale + bias.map_or(0.0, |b| b[j]);
                    }
                    softmax_row(&mut row, 1.0);
                    let o = &mut out[((bi * d.h + hi) * d.t_q + i) * d.d_v..][..d.d_v];
                    for (j, &w) in row.iter().enumerate() {
                        if w != 0.0 {
                            let vrow = &vd[(kv * d.t_k + j) * d.d_v..][..d.d_v];
                            for (o, &x) in o.iter_mut().zip(vrow) {
                                *o += w * x;
                            }
                        }
                    }
                    if let Some(ws) = weights.as_mut() {
                        ws[((bi * d.h + hi) * d.t_q + i) * d.t_k..][..d.t_k].copy_from_slice(&row);
                    }
                }
            }
        }
        Ok(AttentionOutput {
            output: Tensor::new(out, &[d.b, d.h, d.t_q, d.d_v])?,
            weights: weights
                .map(|w| Tensor::new(w, &[d.b, d.h, d.t_q, d.t_k]))
                .transpose()?,
        })
    }
}
