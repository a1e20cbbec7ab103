//! Scaled dot-product attention (Vaswani et al. 2017, eq. 1), as one kernel:
//!
//! Attention(Q, K, V) = softmax(Q·Kᵀ · scale + bias) · V,   scale usually 1/√d_k
//!
//! optionally with the scaled scores soft-capped before the bias (Gemma 2):
//! s ← c·tanh(s / c).
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
//!
//! The fused kernel ([`attention`]) works per (batch, head). A few queries (a decode
//! step) go one row at a time: SIMD dot products with the keys the row may see, four
//! keys at a time (masked keys are skipped, not computed), scale and bias into a
//! per-thread row buffer of t_k scores, softmax in place, then the weighted sum of the
//! visible V rows (a vector-matrix product). Many queries go in
//! blocks of 64: the block's scores come from one small GEMM into a per-thread
//! (64 × t_k) buffer, are scaled, masked and softmaxed row by row, and multiply V in a
//! second GEMM. No (t_q × t_k) scores tensor exists unless the weights are asked for.
//! Work is split over (batch, head) pairs across threads when it is large enough.
//!
//! Under llama.cpp's numerics ([`AttentionParams::numerics`]) attention runs its
//! arithmetic instead, f16 steps and summation orders included: [`llama_cpp`].

pub(crate) mod llama_cpp;
pub use llama_cpp::attention_f16;

use rayon::prelude::*;

use crate::runtime::pool::in_pool;
use crate::runtime::Numerics;

use crate::ops::matmul::gemm_general;
use crate::ops::{linear_kernel, simd, softmax};
use crate::tensor::tape::{needs_grad, record};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Multiply-adds (t_q·t_k·(d_k + d_v) over all heads) below which attention stays on
/// one thread.
const PARALLEL_MIN: usize = 1 << 17;

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
    /// Packed sequences: boundaries `[0, e₀, e₁, …, t]` of segments laid end to end along
    /// the positions (self-attention, t_q = t_k). A query sees only keys of its own
    /// segment, so several sentences share one (1, h, t, d) call without padding.
    pub segments: Option<&'a [usize]>,
    /// K and V are a preallocated store of more positions (a KV cache of capacity
    /// `cap`: k (b, h_kv, cap, d_k), v (b, h_kv, cap, d_v)) of which only the first
    /// `kv_len` are keys. The kernels read them in place, so a decode step does not
    /// copy the cache.
    pub kv_len: Option<usize>,
    /// How the kernel rounds. [`Numerics::Lucent`]: lucent's own f32 kernels.
    /// [`Numerics::LlamaCpp`] and [`Numerics::RowInvariant`]: as llama.cpp does with its
    /// f16 KV cache ([`llama_cpp`]): Q, K and V are f16 values already; the products are
    /// summed in its orders ([`llama_cpp::order`]), the softmax uses its exp, and the
    /// weights are rounded to f16 before they weight V.
    pub numerics: Numerics,
    /// Soft-capping c of the scaled scores, if set: s ← c·tanh(s / c) before the bias
    /// and the softmax ([`softcap`]). Under llama.cpp's numerics the cap is applied to Q·Kᵀ before
    /// `scale`, as llama.cpp does (its soft-capped models scale Q instead, `scale` = 1).
    pub softcap: Option<f32>,
}

/// The soft-cap of one score as llama.cpp computes it: s · (1/c), tanh, · c.
#[inline(always)]
pub fn softcap(s: f32, c: f32) -> f32 {
    (s * (1.0 / c)).tanh() * c
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
            segments: None,
            kv_len: None,
            numerics: Numerics::Lucent,
            softcap: None,
        }
    }
}

/// `x` rounded to the nearest f16 (ties to even), as f32: what an f16 store keeps.
pub(crate) fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// [`round_f16`] of every number in place, eight at a time with the CPU's f16
/// conversions (F16C) when it has them: the same numbers as one by one.
pub(crate) fn round_f16_in_place(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= crate::runtime::Isa::Avx2 {
        // SAFETY: the AVX2 level includes F16C and AVX; the runtime caps it to the CPU's.
        unsafe { round_f16_f16c(x) };
        return;
    }
    x.iter_mut().for_each(|v| *v = round_f16(*v));
}

/// [`round_f16_in_place`] with F16C: to f16 with ties to even, and back.
///
/// # Safety
/// The CPU must have F16C and AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn round_f16_f16c(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(8);
    for ch in &mut chunks {
        let v = _mm256_loadu_ps(ch.as_ptr());
        let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(v);
        _mm256_storeu_ps(ch.as_mut_ptr(), _mm256_cvtph_ps(h));
    }
    chunks
        .into_remainder()
        .iter_mut()
        .for_each(|v| *v = round_f16(*v));
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
pub(crate) struct AttentionDims {
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
    /// positions stored per key/value head in K and V (t_k, or a cache's capacity
    /// with [`AttentionParams::kv_len`]): the stride between heads
    pub t_cap: usize,
    /// query/key features per head
    pub d_k: usize,
    /// value features per head
    pub d_v: usize,
}

/// Check the shapes of an attention call and name its dimensions.
pub(crate) fn check_dims(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttentionParams,
) -> Result<AttentionDims> {
    check_shapes(q.shape(), k.shape(), v.shape(), p)
}

/// [`check_dims`] of the shapes of Q, K and V.
pub(crate) fn check_shapes(
    q: &[usize],
    k: &[usize],
    v: &[usize],
    p: &AttentionParams,
) -> Result<AttentionDims> {
    let four = |s: &[usize], name: &str| -> Result<[usize; 4]> {
        <[usize; 4]>::try_from(s).map_err(|_| {
            Error::Shape(format!(
                "attention: {name} must be 4-D (b, h, t, d), got {s:?}"
            ))
        })
    };
    let [b, h, t_q, d_k] = four(q, "q")?;
    let [bk, h_kv, t_cap, dk2] = four(k, "k")?;
    let [bv, hv, tv, d_v] = four(v, "v")?;
    if b != bk || d_k != dk2 {
        return Err(Error::mismatch("attention (q vs k)", q, k));
    }
    if bv != b || hv != h_kv || tv != t_cap {
        return Err(Error::mismatch("attention (k vs v)", k, v));
    }
    let t_k = p.kv_len.unwrap_or(t_cap);
    if t_k > t_cap {
        return Err(Error::Shape(format!(
            "attention: kv_len {t_k} but K and V hold only {t_cap} positions"
        )));
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
    if let Some(seg) = p.segments {
        let ok = t_q == t_k
            && seg.first() == Some(&0)
            && seg.last() == Some(&t_k)
            && seg.windows(2).all(|w| w[0] <= w[1]);
        if !ok {
            return Err(Error::Shape(format!(
                "attention segments must rise from 0 to {t_k} over {t_q} queries and {t_k} keys, got {seg:?}"
            )));
        }
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
        t_cap,
        d_k,
        d_v,
    })
}

/// The bias row for (batch bi, head hi, query i), or None.
pub(crate) fn bias_row<'a>(
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

/// The range of keys query i may see under the causal, window and segment rules.
pub(crate) fn visible_keys(
    p: &AttentionParams,
    d: &AttentionDims,
    i: usize,
) -> std::ops::Range<usize> {
    let (lo, hi) = match p.segments {
        Some(seg) => {
            let s = segment_of(seg, i);
            (seg[s], seg[s + 1])
        }
        None => (0, d.t_k),
    };
    if !p.causal {
        return lo..hi;
    }
    let pos = d.t_k - d.t_q + i; // absolute position of query i
    let start = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    start.max(lo)..(pos + 1).min(hi)
}

/// The index of the segment holding position i (boundaries as in
/// [`AttentionParams::segments`]; empty segments are skipped).
fn segment_of(seg: &[usize], i: usize) -> usize {
    seg.partition_point(|&e| e <= i)
        .saturating_sub(1)
        .min(seg.len().saturating_sub(2))
}

/// The query blocks of the blocked path: runs of at most [`BLOCK`] queries that never
/// cross a segment boundary (so a block's key range is its own segment).
fn query_blocks<'a>(
    p: &'a AttentionParams,
    d: &AttentionDims,
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let t_q = d.t_q;
    // segment s spans bound(s)..bound(s + 1); without segments there is one, 0..t_q
    let parts = p.segments.map_or(1, |seg| seg.len().saturating_sub(1));
    let bound = move |s: usize| {
        p.segments
            .map_or(if s == 0 { 0 } else { t_q }, |seg| seg[s])
    };
    (0..parts).flat_map(move |s| {
        let (start, end) = (bound(s), bound(s + 1));
        (start..end)
            .step_by(BLOCK)
            .map(move |i0| (i0, (i0 + BLOCK).min(end)))
    })
}

/// Scaled dot-product attention. Runs the fused kernel, causal or not (llama.cpp's
/// arithmetic under its numerics, see below); when Q, K or V track gradients
/// (training), the autograd rule records it for the backward pass.
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
    // A GGUF model's attention follows llama.cpp's arithmetic (`llama_cpp`). All other
    // attention, causal included (trained GPTs, Whisper's decoder, GPT-2 folders), runs
    // the fused kernel: a query row gets the same bits in a prompt's block, in a later
    // piece of the prompt over the cache and alone as a decode step, so cached decoding
    // equals the full forward bit for bit (kernel tests:
    // fused_causal_rows_equal_their_decode_steps, a_query_row_is_the_same_bits_in_any_block).
    let kernel = if p.numerics.llama_cpp() {
        llama_cpp::attention
    } else {
        fused
    };
    record_attention(q, k, v, p, kernel)
}

/// The fused kernel behind [`attention`]: per (batch, head), blocks of queries as two
/// small GEMMs (prompts) or one SIMD dot per key (decode steps); weights on request.
/// Crate-visible so the kernel tests hold it, causal or not, to the plain twin.
pub(crate) fn fused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttentionParams,
) -> Result<AttentionOutput> {
    let d = check_dims(q, k, v, p)?;
    let (bh, out_len, w_len) = (d.b * d.h, d.t_q * d.d_v, d.t_q * d.t_k);
    let mut out = vec![0.0f32; bh * out_len];
    let mut weights = if p.want_weights {
        vec![0.0f32; bh * w_len]
    } else {
        Vec::new()
    };
    let work = bh * d.t_q * d.t_k * (d.d_k + d.d_v);
    let parts = simd::parts_for(work, bh, PARALLEL_MIN);
    let (qd, kd, vd) = (q.data(), k.data(), v.data());
    let one_head = |idx: usize, o: &mut [f32], w: Option<&mut [f32]>, buf: &mut Vec<f32>| {
        head(qd, kd, vd, p, &d, idx, o, w, buf);
    };
    thread_local! {
        /// This thread's scratch for a head, reused from head to head and call to call
        /// (a decode step attends once per layer).
        static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    if parts > 1 && out_len > 0 && (!p.want_weights || w_len > 0) {
        // One task per (batch, head), on the pass's team when one runs, else the pool.
        let mut ws = weights.chunks_mut(w_len.max(1));
        let mut heads: Vec<(&mut [f32], Option<&mut [f32]>)> = out
            .chunks_mut(out_len)
            .map(|o| (o, if p.want_weights { ws.next() } else { None }))
            .collect();
        crate::threads::for_each_mut(&mut heads, |idx, (o, w)| {
            let mut buf = SCRATCH.take();
            one_head(idx, o, w.as_deref_mut(), &mut buf);
            SCRATCH.set(buf);
        });
    } else {
        let mut buf = SCRATCH.take();
        for idx in 0..bh {
            let o = &mut out[idx * out_len..(idx + 1) * out_len];
            let w = p
                .want_weights
                .then(|| &mut weights[idx * w_len..(idx + 1) * w_len]);
            one_head(idx, o, w, &mut buf);
        }
        SCRATCH.set(buf);
    }
    Ok(AttentionOutput {
        output: Tensor::new(out, &[d.b, d.h, d.t_q, d.d_v])?, // (b, h, t_q, d_v)
        weights: p
            .want_weights
            .then(|| Tensor::new(weights, &[d.b, d.h, d.t_q, d.t_k])) // (b, h, t_q, t_k)
            .transpose()?,
    })
}

/// Queries per block on the blocked path (one scores buffer of BLOCK × t_k per thread).
const BLOCK: usize = 64;
/// Query rows from which a head runs blocked (two small GEMMs per block) rather than
/// one dot product per key.
const BLOCKED_MIN_T_Q: usize = 8;

/// One (batch, head) pair, `idx = bi·h + hi`: every query row of it.
/// `out` is that head's (t_q, d_v) block, `weights` its (t_q, t_k) block (zeroed).
///
/// Few queries (a decode step) take a matrix-vector product with the visible keys and
/// a vector-matrix product with the visible values. Many queries (a prompt, an encoder)
/// go in blocks of [`BLOCK`]: the block's scores S = Q_blk · K_rangeᵀ and its output
/// P · V_range are two products over the range of keys any query of the block may see;
/// keys a query may not see are masked to −∞ before its softmax.
///
/// Both paths sum every number in one order ([`linear_kernel`]: each score a fixed
/// 8-lane dot product, each output a chain over the keys in order, where masked keys add
/// exactly 0), so a query row's output does not depend on the other rows, the path, or
/// padding after its keys: a sentence attends the same alone or padded in a batch.
#[allow(clippy::too_many_arguments)]
fn head(
    qd: &[f32],
    kd: &[f32],
    vd: &[f32],
    p: &AttentionParams,
    d: &AttentionDims,
    idx: usize,
    out: &mut [f32],
    mut weights: Option<&mut [f32]>,
    buf: &mut Vec<f32>,
) {
    let (bi, hi) = (idx / d.h, idx % d.h);
    let kv = bi * d.h_kv + hi / (d.h / d.h_kv); // the kv head this query head reads
    let keys = &kd[kv * d.t_cap * d.d_k..][..d.t_k * d.d_k]; // (t_k, d_k)
    let values = &vd[kv * d.t_cap * d.d_v..][..d.t_k * d.d_v]; // (t_k, d_v)
    let queries = &qd[idx * d.t_q * d.d_k..][..d.t_q * d.d_k]; // (t_q, d_k)
    if d.t_q >= BLOCKED_MIN_T_Q && d.d_k > 0 {
        thread_local! {
            /// This thread's keys of a head packed once for all its query blocks.
            static KEYS: std::cell::RefCell<Option<linear_kernel::PackedNt>> =
                const { std::cell::RefCell::new(None) };
        }
        // Every query sees every key (an encoder, cross-attention of a prompt): the
        // head's keys are packed once for all its query blocks instead of once per
        // block (a pure copy: the same numbers).
        let packed = (!p.causal && p.segments.is_none() && d.t_q > BLOCK).then(|| {
            let mut k = KEYS.take().unwrap_or_default();
            k.repack(keys, d.t_k, d.d_k); // (t_k, d_k) into panels
            k
        });
        buf.resize(BLOCK.min(d.t_q) * d.t_k, 0.0);
        for (i0, i1) in query_blocks(p, d) {
            let bq = i1 - i0;
            // keys any query of the block may see
            let (first, last) = (visible_keys(p, d, i0), visible_keys(p, d, i1 - 1));
            let (lo, hi_k) = (first.start, last.end);
            let kn = hi_k - lo;
            if kn == 0 {
                continue;
            }
            let scores = &mut buf[..bq * kn]; // (bq, kn)
            match &packed {
                // all keys: lo = 0, hi_k = t_k
                Some(pk) => linear_kernel::matmul_nt_packed_serial(
                    scores,
                    &queries[i0 * d.d_k..i1 * d.d_k],
                    pk,
                    None,
                    bq,
                ),
                None => linear_kernel::matmul_nt_serial(
                    scores,
                    &queries[i0 * d.d_k..i1 * d.d_k],
                    &keys[lo * d.d_k..hi_k * d.d_k],
                    None,
                    bq,
                    d.d_k,
                    kn,
                ),
            }
            for (r, row) in scores.chunks_mut(kn).enumerate() {
                let i = i0 + r;
                let vis = visible_keys(p, d, i);
                let bias = bias_row(p.bias, d, bi, hi, i);
                // row holds keys lo..hi_k; this query sees vis ⊆ that range
                let (a, z) = (vis.start - lo, vis.end - lo);
                row[..a].fill(f32::NEG_INFINITY);
                row[z..].fill(f32::NEG_INFINITY);
                let seen = &mut row[a..z];
                match (bias, p.softcap) {
                    (b, Some(c)) => {
                        for (j, s) in seen.iter_mut().enumerate() {
                            *s = softcap(*s * p.scale, c) + b.map_or(0.0, |b| b[vis.start + j]);
                        }
                    }
                    (Some(b), None) => {
                        for (s, &bj) in seen.iter_mut().zip(&b[vis]) {
                            *s = *s * p.scale + bj;
                        }
                    }
                    (None, None) => simd::scale(seen, p.scale),
                }
                softmax::softmax_row(row, 1.0);
                if let Some(ws) = weights.as_deref_mut() {
                    ws[i * d.t_k + lo..i * d.t_k + hi_k].copy_from_slice(row);
                }
            }
            linear_kernel::weighted_rows(
                &mut out[i0 * d.d_v..i1 * d.d_v],
                scores,
                &values[lo * d.d_v..hi_k * d.d_v],
                bq,
                kn,
                d.d_v,
            );
        }
        if packed.is_some() {
            KEYS.set(packed);
        }
        return;
    }
    buf.resize(d.t_k, 0.0);
    for i in 0..d.t_q {
        let q = &queries[i * d.d_k..][..d.d_k];
        let vis = visible_keys(p, d, i);
        let bias = bias_row(p.bias, d, bi, hi, i);
        let scores = &mut buf[vis.clone()];
        // scores = K_vis · q, in the order of the blocked path's products
        let n_vis = vis.len();
        linear_kernel::matmul_nt_serial(
            scores,
            q,
            &keys[vis.start * d.d_k..vis.end * d.d_k],
            None,
            1,
            d.d_k,
            n_vis,
        );
        match (bias, p.softcap) {
            (b, Some(c)) => {
                for (j, s) in scores.iter_mut().enumerate() {
                    *s = softcap(*s * p.scale, c) + b.map_or(0.0, |b| b[vis.start + j]);
                }
            }
            (Some(b), None) => {
                for (s, &bj) in scores.iter_mut().zip(&b[vis.clone()]) {
                    *s = *s * p.scale + bj;
                }
            }
            (None, None) => simd::scale(scores, p.scale),
        }
        softmax::softmax_row(scores, 1.0);
        // out = weightsᵀ · V_vis
        let o = &mut out[i * d.d_v..][..d.d_v];
        linear_kernel::weighted_rows(
            o,
            scores,
            &values[vis.start * d.d_v..vis.end * d.d_v],
            1,
            n_vis,
            d.d_v,
        );
        if let Some(ws) = weights.as_deref_mut() {
            ws[i * d.t_k..][..d.t_k][vis].copy_from_slice(scores);
        }
    }
}

/// The plain twin: scores, scale, mask, softmax, weighted sum, one query at a time.
pub(crate) mod reference {
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
                        let krow = &kd[(kv * d.t_cap + j) * d.d_k..][..d.d_k];
                        let dot: f32 = qrow.iter().zip(krow).map(|(a, b)| a * b).sum();
                        let scaled = match p.softcap {
                            Some(c) => softcap(dot * p.scale, c),
                            None => dot * p.scale,
                        };
                        *s = scaled + bias.map_or(0.0, |b| b[j]);
                    }
                    softmax_row(&mut row, 1.0);
                    let o = &mut out[((bi * d.h + hi) * d.t_q + i) * d.d_v..][..d.d_v];
                    for (j, &w) in row.iter().enumerate() {
                        if w != 0.0 {
                            let vrow = &vd[(kv * d.t_cap + j) * d.d_v..][..d.d_v];
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

// ------------------------------------------------------------------ backward

// The recording of attention on the tape.
/// Recording for [`crate::ops::attention`]. Without a gradient to record it runs
/// `kernel`. With one it computes the forward itself — S = s·QKᵀ + bias (masked keys
/// −∞), P = softmax(S), O = P·V, with GEMMs, in parallel over (batch, key/value head) —
/// keeping P for the backward of O = softmax(s·QKᵀ + bias)·V.
pub(crate) fn record_attention(
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
    if p.softcap.is_some() {
        return Err(Error::Config(
            "attention soft-capping has no backward rule yet; train without attn_softcap".into(),
        ));
    }
    if let Some(n) = p.kv_len {
        // Keys in a larger store (a KV cache): record over exactly the keys.
        let plain = AttentionParams { kv_len: None, ..*p };
        return record_attention(q, &k.narrow(2, 0, n)?, &v.narrow(2, 0, n)?, &plain, kernel);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_f16_in_place_equals_round_f16() {
        // Every f32 exponent, with mantissas that land on, beside and between f16 ties,
        // the f16 overflow and subnormal edges, and a tail shorter than a vector.
        let mut x: Vec<f32> = Vec::new();
        for e in 0..255u32 {
            for m in [0u32, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x7F_FFFF] {
                let b = (e << 23) | m;
                x.push(f32::from_bits(b));
                x.push(-f32::from_bits(b));
            }
        }
        x.extend([
            65504.0,
            65519.0,
            65520.0,
            6.0e-8,
            2.9e-8,
            3.0e-8,
            f32::NAN,
            f32::INFINITY,
        ]);
        x.push(1.5);
        crate::ops::assert_in_place_equals_one_by_one(
            &x,
            round_f16_in_place,
            round_f16,
            "round_f16",
        );
    }
}
