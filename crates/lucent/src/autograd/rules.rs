//! The backward rule of every recorded operation, one function per op.
//!
//! Each public tensor op calls its function here with its freshly computed output and
//! its inputs. When nothing needs a gradient ([`needs_grad`] is false) the output is
//! returned as it is, with no history: that is the whole cost for inference. Otherwise
//! the output gets a node whose rule maps ∂L/∂y to ∂L/∂xᵢ:
//!
//! | op | rule |
//! | --- | --- |
//! | y = a + b, a − b | ∂a = g, ∂b = ±Σ_leading g (b broadcast over leading dims) |
//! | y = a ⊙ b | ∂a = g ⊙ b, ∂b = Σ_leading g ⊙ a |
//! | y = s·x | ∂x = s·g |
//! | reshape, permute, narrow, cat, select_rows | move g back to where x's values came from (scatter-add for gathers) |
//! | C = A·B, C = A·Bᵀ | ∂A = G·Bᵀ (or G·B), ∂B = Aᵀ·G (or Gᵀ·A), summed over batches for a shared B |
//! | y = softmax(x/T) | ∂x = y ⊙ (g − Σ g ⊙ y) / T |
//! | LayerNorm y = γ x̂ + β | ∂x = (1/σ)(ĝ − mean ĝ − x̂ mean(ĝ x̂)), ĝ = γ ⊙ g; ∂γ = Σ g x̂; ∂β = Σ g |
//! | RMSNorm y = γ x / r | ∂x = (1/r)(ĝ − x mean(ĝ x)/r²); ∂γ = Σ g x / r |
//! | activations f(x) | ∂x = g ⊙ f′(x) |
//! | RoPE y = R(θ)x | ∂x = R(θ)ᵀ g = P R(θ) P g, P swapping the two halves of each rotated pair |
//! | attention O = softmax(s QKᵀ + bias) V | ∂V = Pᵀ ∂O; ∂S = P ⊙ (∂P − rowsum(∂P ⊙ P)); ∂Q = s ∂S K; ∂K = s ∂Sᵀ Q |

use crate::autograd::{needs_grad, record};
use crate::ops::simd;
use rayon::prelude::*;

use crate::runtime::pool::in_pool;

use crate::ops::attention::{bias_row, check_dims, visible_keys, AttentionOutput, AttentionParams};
use crate::ops::{Activation, RopeConvention};
use crate::tensor::Tensor;
use crate::Result;

/// Sum `g` over its leading dimensions down to `shape` (a suffix of g's shape): the
/// gradient of a broadcast operand.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let n: usize = shape.iter().product();
    let mut out = vec![0.0f32; n];
    if n > 0 {
        for chunk in g.data().chunks(n) {
            for (o, &x) in out.iter_mut().zip(chunk) {
                *o += x;
            }
        }
    }
    Tensor::new(out, shape)
}

/// Elementwise a·b where b may be a suffix-broadcast of a, as a constant.
fn mul_plain(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.zip_with(b, "mul (backward)", |x, y| x * y)
}

/// Recording for [`Tensor::add`].
pub fn add(out: Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let b_shape = b.shape().to_vec();
    record(out, "add", &[a, b], move |g| {
        Ok(vec![Some(g.clone()), Some(sum_to(g, &b_shape)?)])
    })
}

/// Recording for [`Tensor::sub`].
pub fn sub(out: Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let b_shape = b.shape().to_vec();
    record(out, "sub", &[a, b], move |g| {
        Ok(vec![
            Some(g.clone()),
            Some(sum_to(g, &b_shape)?.map(|x| -x)),
        ])
    })
}

/// Recording for [`Tensor::mul`].
pub fn mul(out: Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let (a_needs, b_needs) = (a.tracks_grad(), b.tracks_grad());
    let (a_saved, b_saved) = (a.detach(), b.detach());
    record(out, "mul", &[a, b], move |g| {
        let ga = if a_needs {
            Some(mul_plain(g, &b_saved)?)
        } else {
            None
        };
        let gb = if b_needs {
            Some(sum_to(&mul_plain(g, &a_saved)?, b_saved.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// Recording for [`Tensor::scale`].
pub fn scale(out: Tensor, x: &Tensor, s: f32) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    record(out, "scale", &[x], move |g| {
        Ok(vec![Some(g.map(|v| v * s))])
    })
}

/// Recording for [`Tensor::reshape`].
pub fn reshape(out: Tensor, x: &Tensor) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let shape = x.shape().to_vec();
    record(out, "reshape", &[x], move |g| {
        Ok(vec![Some(g.detach().reshape(&shape)?)])
    })
}

/// Recording for [`Tensor::permute`] (and `transpose`).
pub fn permute(out: Tensor, x: &Tensor, perm: &[usize]) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    record(out, "permute", &[x], move |g| {
        Ok(vec![Some(g.permute(&inverse)?)])
    })
}

/// Recording for [`Tensor::narrow`]: the gradient is g placed back at `start` in zeros.
pub fn narrow(out: Tensor, x: &Tensor, dim: usize, start: usize) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let shape = x.shape().to_vec();
    record(out, "narrow", &[x], move |g| {
        let outer: usize = shape[..dim].iter().product();
        let inner: usize = shape[dim + 1..].iter().product();
        let (d, len) = (shape[dim], g.shape()[dim]);
        let mut full = vec![0.0f32; shape.iter().product()];
        let src = g.data();
        for o in 0..outer {
            let dst = (o * d + start) * inner;
            full[dst..dst + len * inner]
                .copy_from_slice(&src[o * len * inner..(o + 1) * len * inner]);
        }
        Ok(vec![Some(Tensor::new(full, &shape)?)])
    })
}

/// Recording for [`Tensor::cat`]: each input gets its slice of g.
pub fn cat(out: Tensor, inputs: &[&Tensor], dim: usize) -> Tensor {
    if !needs_grad(inputs) {
        return out.with_grad_node(None);
    }
    let lens: Vec<usize> = inputs.iter().map(|t| t.shape()[dim]).collect();
    record(out, "cat", inputs, move |g| {
        let mut start = 0;
        let mut grads = Vec::with_capacity(lens.len());
        for &len in &lens {
            grads.push(Some(g.detach().narrow(dim, start, len)?));
            start += len;
        }
        Ok(grads)
    })
}

/// Recording for [`Tensor::select_rows`] (embedding lookup): scatter-add g's rows into a
/// zero table.
pub fn select_rows(out: Tensor, table: &Tensor, ids: &[usize]) -> Tensor {
    if !needs_grad(&[table]) {
        return out.with_grad_node(None);
    }
    let shape = table.shape().to_vec();
    let ids = ids.to_vec();
    record(out, "select_rows", &[table], move |g| {
        let d = shape[1];
        let mut full = vec![0.0f32; shape[0] * d];
        for (row, &i) in g.data().chunks(d.max(1)).zip(&ids) {
            for (o, &x) in full[i * d..(i + 1) * d].iter_mut().zip(row) {
                *o += x;
            }
        }
        Ok(vec![Some(Tensor::new(full, &shape)?)])
    })
}

/// C = α·op(A)·op(B) (+ C if `accumulate`), with A (m, k) stored row-major as (m, k) or,
/// when `trans_a`, as (k, m); B (k, n) stored as (k, n) or, when `trans_b`, as (n, k).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_general(
    c: &mut [f32],
    a: &[f32],
    trans_a: bool,
    b: &[f32],
    trans_b: bool,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
) {
    crate::ops::matmul::gemm_strided(
        c,
        a,
        trans_a,
        b,
        trans_b,
        m,
        k,
        n,
        accumulate,
        crate::threads::gemm_parallelism(m * n * k),
    )
}

/// Recording for [`crate::ops::matmul`] (C = A·B) and [`crate::ops::matmul_t`]
/// (C = A·Bᵀ); B may be shared by every batch.
pub fn matmul(out: Tensor, a: &Tensor, b: &Tensor, transpose_b: bool) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let (a_needs, b_needs) = (a.tracks_grad(), b.tracks_grad());
    let (a_saved, b_saved) = (a.detach(), b.detach());
    let op = if transpose_b { "matmul_t" } else { "matmul" };
    record(out, op, &[a, b], move |g| {
        let (ra, rb) = (a_saved.rank(), b_saved.rank());
        let (m, k) = (a_saved.shape()[ra - 2], a_saved.shape()[ra - 1]);
        let n = g.shape()[g.rank() - 1];
        let shared = rb == 2;
        let batches = a_saved.numel() / (m * k).max(1);
        let (ad, bd, gd) = (a_saved.data(), b_saved.data(), g.data());
        let ga = if a_needs {
            // ∂A = G·Bᵀ (C = A·B) or G·B (C = A·Bᵀ): (m, n)·(n, k).
            let mut ga = vec![0.0f32; a_saved.numel()];
            for i in 0..batches {
                let bi = if shared { 0 } else { i };
                gemm_general(
                    &mut ga[i * m * k..(i + 1) * m * k],
                    &gd[i * m * n..(i + 1) * m * n],
                    false,
                    &bd[bi * k * n..(bi + 1) * k * n],
                    !transpose_b,
                    m,
                    n,
                    k,
                    false,
                );
            }
            Some(Tensor::new(ga, a_saved.shape())?)
        } else {
            None
        };
        let gb = if b_needs {
            let mut gbv = vec![0.0f32; b_saved.numel()];
            if shared {
                // Every batch shares B: stack the batches as rows, one product.
                let rows = batches * m;
                if transpose_b {
                    // ∂B (n, k) = Gᵀ·A
                    gemm_general(&mut gbv, gd, true, ad, false, n, rows, k, false);
                } else {
                    // ∂B (k, n) = Aᵀ·G
                    gemm_general(&mut gbv, ad, true, gd, false, k, rows, n, false);
                }
            } else {
                for i in 0..batches {
                    let (a_i, g_i) = (
                        &ad[i * m * k..(i + 1) * m * k],
                        &gd[i * m * n..(i + 1) * m * n],
                    );
                    let dst = &mut gbv[i * k * n..(i + 1) * k * n];
                    if transpose_b {
                        gemm_general(dst, g_i, true, a_i, false, n, m, k, false);
                    } else {
                        gemm_general(dst, a_i, true, g_i, false, k, m, n, false);
                    }
                }
            }
            Some(Tensor::new(gbv, b_saved.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// Recording for [`crate::ops::softmax`] and [`crate::ops::softmax_with_temperature`]:
/// ∂x = y ⊙ (g − Σ g ⊙ y) / T, row by row.
pub fn softmax(out: Tensor, x: &Tensor, temperature: f32) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let y = out.detach();
    record(out, "softmax", &[x], move |g| {
        let n = y.last_dim().max(1);
        let mut gx = vec![0.0f32; y.numel()];
        for ((dst, yr), gr) in gx
            .chunks_mut(n)
            .zip(y.data().chunks(n))
            .zip(g.data().chunks(n))
        {
            let dot: f32 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
            for ((d, &yv), &gv) in dst.iter_mut().zip(yr).zip(gr) {
                *d = yv * (gv - dot) / temperature;
            }
        }
        Ok(vec![Some(Tensor::new(gx, y.shape())?)])
    })
}

/// Recording for [`crate::ops::layer_norm`].
pub fn layer_norm(
    out: Tensor,
    x: &Tensor,
    gamma: &Tensor,
    beta: Option<&Tensor>,
    eps: f32,
) -> Tensor {
    let mut inputs = vec![x, gamma];
    inputs.extend(beta);
    if !needs_grad(&inputs) {
        return out.with_grad_node(None);
    }
    let (xs, gs) = (x.detach(), gamma.detach());
    let has_beta = beta.is_some();
    record(out, "layer_norm", &inputs, move |g| {
        let d = xs.last_dim();
        let n = d as f32;
        let gamma = gs.data();
        let mut gx = vec![0.0f32; xs.numel()];
        // Row statistics (mean, 1/σ) as the forward computes them, and ∂x, in parallel
        // over rows; `xhat` is each worker's scratch row for x̂.
        let mut stats = vec![(0.0f32, 0.0f32); xs.numel() / d.max(1)];
        in_pool(|| {
            gx.par_chunks_mut(d)
                .zip(stats.par_iter_mut())
                .zip(xs.data().par_chunks(d).zip(g.data().par_chunks(d)))
                .for_each_init(
                    || vec![0.0f32; d],
                    |xhat, ((dst, st), (xr, gr))| {
                        let mean = simd::sum(xr) / n;
                        let var = simd::sum_sq_diff(xr, mean) / n;
                        let inv = (1.0 / (var as f64 + eps as f64).sqrt()) as f32;
                        *st = (mean, inv);
                        // dst ← ĝ = g·γ, xhat ← x̂ = (x − μ)/σ
                        for i in 0..d {
                            dst[i] = gr[i] * gamma[i];
                            xhat[i] = (xr[i] - mean) * inv;
                        }
                        // ∂x = (ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) / σ
                        let mean_g = simd::sum(dst) / n;
                        let mean_gx = simd::dot(dst, xhat) / n;
                        for i in 0..d {
                            dst[i] = inv * (dst[i] - mean_g - xhat[i] * mean_gx);
                        }
                    },
                )
        });
        // ∂γ = Σ g x̂, ∂β = Σ g over rows (accumulated in f64: there are many rows).
        let mut ggamma = vec![0.0f64; d];
        let mut gbeta = vec![0.0f64; d];
        for ((xr, gr), &(mean, inv)) in xs.data().chunks(d).zip(g.data().chunks(d)).zip(&stats) {
            for i in 0..d {
                ggamma[i] += (gr[i] * ((xr[i] - mean) * inv)) as f64;
                gbeta[i] += gr[i] as f64;
            }
        }
        let to_t = |v: Vec<f64>| Tensor::new(v.into_iter().map(|x| x as f32).collect(), &[d]);
        let mut grads = vec![Some(Tensor::new(gx, xs.shape())?), Some(to_t(ggamma)?)];
        if has_beta {
            grads.push(Some(to_t(gbeta)?));
        }
        Ok(grads)
    })
}

/// Recording for [`crate::ops::rms_norm`].
pub fn rms_norm(out: Tensor, x: &Tensor, gamma: &Tensor, eps: f32) -> Tensor {
    if !needs_grad(&[x, gamma]) {
        return out.with_grad_node(None);
    }
    let (xs, gs) = (x.detach(), gamma.detach());
    record(out, "rms_norm", &[x, gamma], move |g| {
        let d = xs.last_dim();
        let gamma = gs.data();
        let mut gx = vec![0.0f32; xs.numel()];
        let mut ggamma = vec![0.0f64; d];
        for ((dst, xr), gr) in gx
            .chunks_mut(d)
            .zip(xs.data().chunks(d))
            .zip(g.data().chunks(d))
        {
            let n = d as f64;
            let ms = xr.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            let mut dot = 0.0f64;
            for i in 0..d {
                let gh = gr[i] as f64 * gamma[i] as f64;
                dot += gh * xr[i] as f64;
                ggamma[i] += gr[i] as f64 * xr[i] as f64 * inv;
            }
            for i in 0..d {
                let gh = gr[i] as f64 * gamma[i] as f64;
                dst[i] = (inv * (gh - xr[i] as f64 * dot * inv * inv / n)) as f32;
            }
        }
        let ggamma: Vec<f32> = ggamma.into_iter().map(|v| v as f32).collect();
        Ok(vec![
            Some(Tensor::new(gx, xs.shape())?),
            Some(Tensor::new(ggamma, &[d])?),
        ])
    })
}

/// f′(x) of each activation (f64 arithmetic: the plain twin of [`activation_grad_row`]).
pub fn activation_derivative(act: Activation, x: f32) -> f32 {
    let x = x as f64;
    let d = match act {
        Activation::Relu => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        Activation::Gelu => {
            // d/dx [x Φ(x)] = Φ(x) + x φ(x)
            let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            cdf + x * pdf
        }
        Activation::GeluTanh => crate::ops::simd::reference::gelu_tanh_derivative(x as f32) as f64,
        Activation::Silu => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
    };
    d as f32
}

/// gx = g ⊙ f′(x) over a row, in f32 (tanh through one `exp`), for speed; held to
/// [`activation_derivative`] in the tests.
pub fn activation_grad_row(act: Activation, x: &[f32], g: &[f32], gx: &mut [f32]) {
    match act {
        Activation::GeluTanh => crate::ops::simd::gelu_tanh_backward(x, g, gx),
        Activation::Silu => {
            for ((d, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                let s = 1.0 / (1.0 + (-xv).exp());
                *d = gv * s * (1.0 + xv * (1.0 - s));
            }
        }
        Activation::Relu => {
            for ((d, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                *d = if xv > 0.0 { gv } else { 0.0 };
            }
        }
        Activation::Gelu => {
            for ((d, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                *d = gv * activation_derivative(act, xv);
            }
        }
    }
}

/// Recording for the activations ([`crate::ops::relu`], `gelu`, `gelu_tanh`, `silu`).
pub fn activation(out: Tensor, x: &Tensor, act: Activation) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let xs = x.detach();
    record(out, act.name(), &[x], move |g| {
        let mut gx = vec![0.0f32; xs.numel()];
        in_pool(|| {
            gx.par_chunks_mut(4096)
                .zip(xs.data().par_chunks(4096).zip(g.data().par_chunks(4096)))
                .for_each(|(dst, (x, g))| activation_grad_row(act, x, g, dst))
        });
        Ok(vec![Some(Tensor::new(gx, xs.shape())?)])
    })
}

/// Swap the two members of every rotated pair of each row (halves for rotate-half,
/// neighbours for interleaved): the P with R(θ)ᵀ = P R(θ) P.
fn swap_pairs(t: &Tensor, convention: RopeConvention) -> Result<Tensor> {
    let d = t.last_dim();
    let half = d / 2;
    let mut out = t.data().to_vec();
    for row in out.chunks_mut(d.max(1)) {
        for i in 0..half {
            match convention {
                RopeConvention::RotateHalf => row.swap(i, i + half),
                RopeConvention::Interleaved => row.swap(2 * i, 2 * i + 1),
            }
        }
    }
    Tensor::new(out, t.shape())
}

/// Recording for [`crate::ops::rope`]: ∂x = R(θ)ᵀ g = P R(θ) P g.
pub fn rope(
    out: Tensor,
    x: &Tensor,
    positions: &[usize],
    base: f32,
    convention: RopeConvention,
) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let positions = positions.to_vec();
    record(out, "rope", &[x], move |g| {
        let swapped = swap_pairs(g, convention)?;
        let rotated = crate::ops::rope(&swapped, &positions, base, convention)?;
        Ok(vec![Some(swap_pairs(&rotated, convention)?)])
    })
}

/// Recording for [`crate::ops::attention`]. Without a gradient to record it runs
/// `kernel`. With one it computes the forward itself — S = s·QKᵀ + bias (masked keys
/// −∞), P = softmax(S), O = P·V, with GEMMs, in parallel over (batch, key/value head) —
/// keeping P for the backward of O = softmax(s·QKᵀ + bias)·V.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttentionParams,
    kernel: impl Fn(&Tensor, &Tensor, &Tensor, &AttentionParams) -> Result<AttentionOutput>,
) -> Result<AttentionOutput> {
    if !needs_grad(&[q, k, v]) {
        let out = kernel(q, k, v, p)?;
        return Ok(AttentionOutput {
            output: out.output.with_grad_node(None),
            weights: out.weights,
        });
    }
    if let Some(n) = p.kv_len {
        // Keys in a larger store (a KV cache): record over exactly the keys.
        let plain = AttentionParams { kv_len: None, ..*p };
        return attention(q, &k.narrow(2, 0, n)?, &v.narrow(2, 0, n)?, &plain, kernel);
    }
    let d = check_dims(q, k, v, p)?;
    let group = d.h / d.h_kv;
    let (qd, kd, vd) = (q.data(), k.data(), v.data());
    let mut out = vec![0.0f32; d.b * d.h * d.t_q * d.d_v];
    let mut probs = vec![0.0f32; d.b * d.h * d.t_q * d.t_k];
    let (qt, pt, ot) = (d.t_q * d.d_k, d.t_q * d.t_k, d.t_q * d.d_v);
    in_pool(|| {
        out.par_chunks_mut(group * ot)
            .zip(probs.par_chunks_mut(group * pt))
            .enumerate()
            .for_each(|(kv, (o_grp, p_grp))| {
                let bi = kv / d.h_kv;
                let k_kv = &kd[kv * d.t_k * d.d_k..][..d.t_k * d.d_k];
                let v_kv = &vd[kv * d.t_k * d.d_v..][..d.t_k * d.d_v];
                for g in 0..group {
                    let bh = kv * group + g;
                    let hi = bh - bi * d.h;
                    let p_bh = &mut p_grp[g * pt..(g + 1) * pt];
                    gemm_general(
                        p_bh,
                        &qd[bh * qt..(bh + 1) * qt],
                        false,
                        k_kv,
                        true,
                        d.t_q,
                        d.d_k,
                        d.t_k,
                        false,
                    );
                    for (i, row) in p_bh.chunks_mut(d.t_k).enumerate() {
                        // Only the visible keys take part; the others get probability 0.
                        let vis = visible_keys(p, &d, i);
                        let seen = &mut row[vis.clone()];
                        crate::ops::simd::scale(seen, p.scale);
                        if let Some(b) = bias_row(p.bias, &d, bi, hi, i) {
                            for (x, &bj) in seen.iter_mut().zip(&b[vis.clone()]) {
                                *x += bj;
                            }
                        }
                        crate::ops::softmax::softmax_row(seen, 1.0);
                        row[..vis.start].fill(0.0);
                        row[vis.end..].fill(0.0);
                    }
                    gemm_general(
                        &mut o_grp[g * ot..(g + 1) * ot],
                        p_bh,
                        false,
                        v_kv,
                        false,
                        d.t_q,
                        d.t_k,
                        d.d_v,
                        false,
                    );
                }
            })
    });
    let output = Tensor::new(out, &[d.b, d.h, d.t_q, d.d_v])?;
    let weights = Tensor::new(probs, &[d.b, d.h, d.t_q, d.t_k])?;
    let probs = weights.clone();
    let (qs, ks, vs) = (q.detach(), k.detach(), v.detach());
    let scale = p.scale;
    let output = record(output, "attention", &[q, k, v], move |g| {
        let (qd, kd, vd, pd, gd) = (qs.data(), ks.data(), vs.data(), probs.data(), g.data());
        let mut gq = vec![0.0f32; qs.numel()];
        let mut gk = vec![0.0f32; ks.numel()];
        let mut gv = vec![0.0f32; vs.numel()];
        let (kt, vt) = (d.t_k * d.d_k, d.t_k * d.d_v);
        in_pool(|| {
            gq.par_chunks_mut(group * qt)
                .zip(gk.par_chunks_mut(kt))
                .zip(gv.par_chunks_mut(vt))
                .enumerate()
                .for_each(|(kv, ((gq_grp, gk_kv), gv_kv))| {
                    let k_kv = &kd[kv * kt..(kv + 1) * kt];
                    let v_kv = &vd[kv * vt..(kv + 1) * vt];
                    let mut dp = vec![0.0f32; pt];
                    for gi in 0..group {
                        let bh = kv * group + gi;
                        let p_bh = &pd[bh * pt..(bh + 1) * pt];
                        let g_bh = &gd[bh * ot..(bh + 1) * ot];
                        let q_bh = &qd[bh * qt..(bh + 1) * qt];
                        // ∂V += Pᵀ ∂O: (t_k, t_q)·(t_q, d_v)
                        gemm_general(gv_kv, p_bh, true, g_bh, false, d.t_k, d.t_q, d.d_v, true);
                        // ∂P = ∂O Vᵀ: (t_q, d_v)·(d_v, t_k)
                        gemm_general(&mut dp, g_bh, false, v_kv, true, d.t_q, d.d_v, d.t_k, false);
                        // ∂S = P ⊙ (∂P − rowsum(∂P ⊙ P)), times the score scale s.
                        for (dr, pr) in dp.chunks_mut(d.t_k).zip(p_bh.chunks(d.t_k)) {
                            let dot = crate::ops::simd::dot(dr, pr);
                            for (x, &pv) in dr.iter_mut().zip(pr) {
                                *x = pv * (*x - dot) * scale;
                            }
                        }
                        // ∂Q = ∂S K: (t_q, t_k)·(t_k, d_k)
                        gemm_general(
                            &mut gq_grp[gi * qt..(gi + 1) * qt],
                            &dp,
                            false,
                            k_kv,
                            false,
                            d.t_q,
                            d.t_k,
                            d.d_k,
                            false,
                        );
                        // ∂K += ∂Sᵀ Q: (t_k, t_q)·(t_q, d_k)
                        gemm_general(gk_kv, &dp, true, q_bh, false, d.t_k, d.t_q, d.d_k, true);
                    }
                })
        });
        Ok(vec![
            Some(Tensor::new(gq, qs.shape())?),
            Some(Tensor::new(gk, ks.shape())?),
            Some(Tensor::new(gv, vs.shape())?),
        ])
    });
    Ok(AttentionOutput {
        output,
        weights: p.want_weights.then_some(weights),
    })
}
