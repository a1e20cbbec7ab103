//! Attention in llama.cpp's CPU arithmetic ([`Numerics::LlamaCpp`] and
//! [`Numerics::RowInvariant`]), reproduced operation for operation, so that a GGUF model
//! gives the very numbers the engine its files come from gives. The same file holds the
//! pieces of llama.cpp's arithmetic only attention uses (the weighing of V); the others
//! sit beside their own op: its f16 products in [`crate::ops::f16_dot`], its softmax in
//! [`crate::ops::softmax::llama_cpp`], its exp and SiLU in
//! [`crate::ops::activation::llama_cpp`], its RoPE in [`crate::ops::rope::llama_cpp`].
//!
//! With 8-bit activations a model is chaotic at the level of rounding: one ulp moved
//! early on can push an activation across a quantisation boundary and the change grows
//! layer by layer (to ~0.1–0.5 of a logit on SmolLM2). Agreeing with llama.cpp to a few
//! hundredths of a logit therefore means computing what it computes, in its order. For
//! attention with its default f16 KV cache that is (ggml-cpu built for x86 AVX2, as the
//! golden files in tests/data were made):
//!
//! 1. Q, K and V rounded to f16 (the cache stores K and V in f16; Q is converted to the
//!    cache's type for the product);
//! 2. scores `Q·Kᵀ` as f16 × f16 dot products summed in f32 in one of two orders: a
//!    prompt of several tokens goes through its GEMM (tinyBLAS: one 8-lane FMA chain
//!    over the row, then a tree sum of the lanes), a single token through its dot
//!    product (`ggml_vec_dot_f16`: four 8-lane accumulators over 32-number steps) —
//!    [`F16Order`]; [`Numerics::RowInvariant`] takes the single token's order for every row;
//! 3. the softmax of `scores · scale` (masked positions −∞) with its vector exp
//!    ([`crate::ops::activation::llama_cpp::expf`]), the exps summed eight at a time by
//!    the tree and the eight-sums in f64, then each exp multiplied by `(f32)(1 / sum)`
//!    ([`softmax_row`]);
//! 4. the weights rounded to f16, and `weights · V` summed over the positions in the same
//!    order as step 2 (V is stored transposed, so each output number is one dot product
//!    over positions).
//!
//! The cache holds a padded number of positions (a multiple of 256); the padding
//! contributes exact zeros, so it is left out here. An AVX-512 build of llama.cpp sums
//! 16 lanes at a time and differs from the AVX2 one in the last bits (measured: 0.11 and
//! 0.50 of a logit on two of the six SmolLM2 golden prompts). The plain functions here
//! are scalar and say which of llama.cpp's operations they stand for; their SIMD twins
//! (`…_avx2`, `…_avx512`: eight keys' scores at once, eight or sixteen softmax numbers
//! at once)
//! compute the same bits, and tests hold each to its plain function bit for bit.

use crate::ops::attention::{
    bias_row, check_dims, check_shapes, round_f16_in_place, visible_keys, AttentionDims,
    AttentionOutput, AttentionParams,
};
use crate::ops::f16_dot::{dot_f16, F16Held, F16Order, LANES};
#[cfg(target_arch = "x86_64")]
use crate::ops::f16_dot::{dots_f16_avx2, load16, load8};
use crate::ops::softmax::llama_cpp::softmax_row;
#[cfg(target_arch = "x86_64")]
use crate::ops::softmax::llama_cpp::{softmax_row_avx2, softmax_row_avx512};
use crate::ops::{avx512_at, fma_at};
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::Result;

/// The summation order of `numerics` for a product of `t_q` query rows: a single token's
/// dot order for every row under [`Numerics::RowInvariant`], llama.cpp's own choice by the
/// number of rows ([`F16Order::for_rows`]) otherwise.
pub fn order(numerics: Numerics, t_q: usize) -> F16Order {
    if numerics.row_invariant() {
        F16Order::Dot
    } else {
        F16Order::for_rows(t_q)
    }
}

/// Multiply-adds (t_q · t_k · (d_k + d_v) · heads) from which attention splits its heads
/// over threads: a decoded token's attention over a few hundred positions already gains
/// (SmolLM2, 2 threads: decode ×1.06 with 2¹⁵ instead of 2¹⁸, 8 alternating rounds).
const PARALLEL_MIN: usize = 1 << 15;

/// Scaled dot-product attention in llama.cpp's arithmetic (the module doc's steps 2–4),
/// with the order `p.numerics` takes ([`order`]). Q, K and V must hold f16 values already (step 1 is
/// the caller's: [`crate::nn::AttentionConfig::f16`]). Same contract and masks as
/// [`crate::ops::attention()`]; the weights returned are the f16 ones that weighted V.
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
    let d = check_dims(q, k, v, p)?;
    run(q, k.data(), v.data(), d, p)
}

/// [`crate::ops::attention()`] over an f16 KV cache read in place (llama.cpp's own cache type, and so
/// under its arithmetic only, [`Numerics::llama_cpp`]): K and V as f16 bits, K of shape
/// `k_shape` (b, h_kv, t_cap, d_k) and V (b, h_kv, t_cap, `d_v`), of which `p.kv_len`
/// positions are read. The same numbers as [`crate::ops::attention()`] over the same values held as
/// f32, bit for bit, from half the bytes. Not differentiable (a cache serves inference).
///
/// # Shapes
/// q: (b, h, t_q, d_k), k: (b, h_kv, t_cap, d_k), v: (b, h_kv, t_cap, d_v)
/// → output (b, h, t_q, d_v), weights (b, h, t_q, t_k)
pub fn attention_f16(
    q: &Tensor,
    k: &[u16],
    v: &[u16],
    k_shape: [usize; 4],
    d_v: usize,
    p: &AttentionParams,
) -> Result<AttentionOutput> {
    if !p.numerics.llama_cpp() {
        return Err(crate::Error::Argument(format!(
            "attention over an f16 KV cache runs llama.cpp's arithmetic only, not {:?}; \
             keep an f32 cache (KvStorage::F32) for this model",
            p.numerics
        )));
    }
    let [b, h_kv, t_cap, _] = k_shape;
    let v_shape = [b, h_kv, t_cap, d_v];
    let d = check_shapes(q.shape(), &k_shape, &v_shape, p)?;
    let numel = |s: &[usize; 4]| s.iter().product::<usize>();
    if k.len() != numel(&k_shape) || v.len() != numel(&v_shape) {
        return Err(crate::Error::Shape(format!(
            "attention_f16: K holds {} numbers for {k_shape:?}, V {} for {v_shape:?}",
            k.len(),
            v.len()
        )));
    }
    if d.t_q > 1 {
        // A prompt reads every key and value once per query row: they are widened to
        // f32 once (the same numbers) instead of at each read (SmolLM2's 128-token
        // prefill: −5 % with the f16 reads).
        let widen = |xs: &[u16], dd: usize| -> Vec<f32> {
            let mut out = Vec::with_capacity(d.b * d.h_kv * d.t_k * dd);
            for head in xs.chunks_exact((d.t_cap * dd).max(1)).take(d.b * d.h_kv) {
                out.extend(head[..d.t_k * dd].iter().map(|&x| x.widen()));
            }
            out
        };
        let (kf, vf) = (widen(k, d.d_k), widen(v, d.d_v));
        return run(q, &kf, &vf, AttentionDims { t_cap: d.t_k, ..d }, p);
    }
    run(q, k, v, d, p)
}

/// The heads of one attention call over K and V held as `E`.
fn run<E: F16Held>(
    q: &Tensor,
    k: &[E],
    v: &[E],
    d: AttentionDims,
    p: &AttentionParams,
) -> Result<AttentionOutput> {
    let isa = crate::runtime::isa();
    let job = Job {
        d,
        p,
        q: q.data(),
        k,
        v,
        order: order(p.numerics, d.t_q),
        fma: fma_at(isa),
        avx512: avx512_at(isa),
        v_f16: (0..d.b * d.h_kv)
            .map(|_| std::sync::OnceLock::new())
            .collect(),
    };
    let heads = d.b * d.h;
    let (o_len, w_len) = (
        d.t_q * d.d_v,
        if p.want_weights { d.t_q * d.t_k } else { 0 },
    );
    let mut out = vec![0.0f32; heads * o_len];
    let mut weights = vec![0.0f32; heads * w_len];
    let work = heads * d.t_q * d.t_k * (d.d_k + d.d_v);
    if crate::threads::threads() > 1 && work >= PARALLEL_MIN && heads > 1 {
        // Heads are independent: each writes only its own rows.
        let ws_chunks: Vec<&mut [f32]> = if w_len > 0 {
            weights.chunks_mut(w_len).collect()
        } else {
            (0..heads).map(|_| <&mut [f32]>::default()).collect()
        };
        let mut parts: Vec<(usize, &mut [f32], &mut [f32])> = out
            .chunks_mut(o_len)
            .zip(ws_chunks)
            .enumerate()
            .map(|(bh, (o, w))| (bh, o, w))
            .collect();
        // One task per thread's share of the heads, each with its own working rows.
        let per = heads.div_ceil(crate::threads::threads());
        crate::threads::for_each_chunk_mut(&mut parts, per, |_, group| {
            let mut sc = job.scratch();
            for (bh, o, w) in group.iter_mut() {
                job.head(*bh, o, w, &mut sc);
            }
        });
    } else {
        let mut sc = job.scratch();
        for bh in 0..heads {
            let w: &mut [f32] = if w_len > 0 {
                &mut weights[bh * w_len..][..w_len]
            } else {
                &mut []
            };
            job.head(bh, &mut out[bh * o_len..][..o_len], w, &mut sc);
        }
    }
    Ok(AttentionOutput {
        output: Tensor::new(out, &[d.b, d.h, d.t_q, d.d_v])?,
        weights: p
            .want_weights
            .then(|| Tensor::new(weights, &[d.b, d.h, d.t_q, d.t_k]))
            .transpose()?,
    })
}

/// One attention call's inputs, shared by its heads (K and V held as `E`).
struct Job<'a, E> {
    d: AttentionDims,
    p: &'a AttentionParams<'a>,
    q: &'a [f32],
    k: &'a [E],
    v: &'a [E],
    order: F16Order,
    /// AVX2 and FMA: the FMA-compiled head and the eight-key scores.
    fma: bool,
    /// AVX-512F as well: the sixteen-wide softmax.
    avx512: bool,
    /// Per key/value head (b · h_kv): whether its V allows [`weigh_values`]' skipping of
    /// zero weights, found once by the first of its query heads.
    v_f16: Vec<std::sync::OnceLock<bool>>,
}

/// A head's working rows, reused from head to head: the scores / weights of one query
/// (t_k) and the lane accumulators of [`weigh_values`] (32 · d_v). llama.cpp's padding
/// of the positions to whole 32s is not stored: its zeros enter [`softmax_row`] as a
/// short last eight and [`weigh_values`] as lanes that receive nothing.
struct Scratch {
    row: Vec<f32>,
    acc: Vec<f32>,
}

impl<E: F16Held> Job<'_, E> {
    /// Whether V of key/value head `kv` (its rows `vs`) holds only finite multiples of
    /// 2⁻²⁴ (f16 numbers are), so that zero weights may be skipped ([`weigh_values`]):
    /// scanned once per key/value head, not once per query head.
    #[inline(always)]
    fn v_skips_zeros(&self, kv: usize, vs: &[E]) -> bool {
        *self.v_f16[kv].get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if self.fma {
                // SAFETY: `fma` says the CPU has AVX2 and FMA.
                return unsafe { f16_multiples_avx2(vs) };
            }
            E::all_f16_multiples(vs)
        })
    }

    /// Working rows for [`Job::head`].
    fn scratch(&self) -> Scratch {
        Scratch {
            row: vec![0.0; self.d.t_k],
            acc: vec![0.0; 4 * LANES * self.d.d_v],
        }
    }

    /// Head `bh` (batch · h + head): its t_q rows of output into `out` and, when asked
    /// for, of weights into `ws`.
    fn head(&self, bh: usize, out: &mut [f32], ws: &mut [f32], sc: &mut Scratch) {
        #[cfg(target_arch = "x86_64")]
        if self.fma {
            // SAFETY: `fma` says the CPU has AVX2 and FMA.
            unsafe { self.head_fma(bh, out, ws, sc) };
            return;
        }
        self.head_with(
            bh,
            out,
            ws,
            sc,
            |keys, q, order, s| {
                let mut row = Vec::with_capacity(q.len());
                for (krow, s) in keys.chunks_exact(q.len()).zip(s.iter_mut()) {
                    row.clear();
                    row.extend(krow.iter().map(|&x| x.widen()));
                    *s = dot_f16(&row, q, order);
                }
            },
            |row| softmax_row(row, 1.0),
            weigh_values,
        );
    }

    /// [`Job::head`] compiled with FMA instructions: the scores eight keys at a time
    /// ([`dots_f16_avx2`]), the softmax eight numbers at a time ([`softmax_row_avx2`];
    /// sixteen with AVX-512, [`softmax_row_avx512`]), and V weighed in registers
    /// ([`weigh_values_fma`]);
    /// the same bits as the plain twin.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn head_fma(&self, bh: usize, out: &mut [f32], ws: &mut [f32], sc: &mut Scratch) {
        let avx512 = self.avx512;
        // SAFETY (both closures): this function runs only where AVX2 and FMA are (its
        // own contract), and AVX-512F where `avx512` says so.
        self.head_with(
            bh,
            out,
            ws,
            sc,
            |keys, q, order, s| unsafe { dots_f16_avx2(keys, q, order, s) },
            |row| {
                if avx512 {
                    unsafe { softmax_row_avx512(row) }
                } else {
                    unsafe { softmax_row_avx2(row) }
                }
            },
            |p, v, order, skip, acc, out| {
                if avx512 {
                    unsafe { weigh_values_avx512(p, v, order, skip, acc, out) }
                } else {
                    unsafe { weigh_values_fma(p, v, order, skip, acc, out) }
                }
            },
        );
    }

    /// One head with its scoring, softmax and weighing kernels: `dots(keys, q, order, s)`
    /// writes `s[j] = dot_f16(key j, q, order)` for the rows of `keys` (each `q.len()`
    /// long); `softmax(row)` is [`softmax_row`] with scale 1; `weigh` is
    /// [`weigh_values`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn head_with(
        &self,
        bh: usize,
        out: &mut [f32],
        ws: &mut [f32],
        sc: &mut Scratch,
        dots: impl Fn(&[E], &[f32], F16Order, &mut [f32]),
        softmax: impl Fn(&mut [f32]),
        weigh: impl Fn(&[f32], &[E], F16Order, bool, &mut [f32], &mut [f32]),
    ) {
        let (d, p, order) = (&self.d, self.p, self.order);
        let (bi, hi) = (bh / d.h, bh % d.h);
        let kv = bi * d.h_kv + hi / (d.h / d.h_kv);
        let ks = &self.k[kv * d.t_cap * d.d_k..][..d.t_k * d.d_k]; // (t_k, d_k)
        let vs = &self.v[kv * d.t_cap * d.d_v..][..d.t_k * d.d_v]; // (t_k, d_v)
        let Scratch { row, acc } = sc;
        // A prompt's zero weights (its masked keys) may be left out of the weighing of V
        // when every value in V is a finite multiple of 2⁻²⁴ (as f16 numbers are):
        // see weigh_values. One token has no masked keys to skip.
        let skip_zeros = d.t_q > 1 && self.v_skips_zeros(kv, vs);
        for i in 0..d.t_q {
            let qrow = &self.q[(bh * d.t_q + i) * d.d_k..][..d.d_k];
            let vis = visible_keys(p, d, i);
            let bias = bias_row(p.bias, d, bi, hi, i);
            // Every score is written: −∞ outside the visible keys, a dot inside.
            let scores = &mut row[..d.t_k];
            scores[..vis.start].fill(f32::NEG_INFINITY);
            scores[vis.end..].fill(f32::NEG_INFINITY);
            let (keys, seen) = (
                &ks[vis.start * d.d_k..vis.end * d.d_k],
                &mut scores[vis.clone()],
            );
            dots(keys, qrow, order, seen);
            if let Some(c) = p.softcap {
                // llama.cpp's soft-cap of the product: ggml_scale(1/c), ggml_tanh, ggml_scale(c).
                seen.iter_mut()
                    .for_each(|s| *s = crate::ops::attention::softcap(*s, c));
            }
            match bias {
                Some(b) => {
                    for (s, &b) in seen.iter_mut().zip(&b[vis.clone()]) {
                        *s = *s * p.scale + b;
                    }
                }
                None => seen.iter_mut().for_each(|s| *s = *s * p.scale + 0.0),
            }
            softmax(&mut row[..d.t_k]);
            round_f16_in_place(&mut row[..d.t_k]);
            // Skipping zero weights, the positions past the visible ones (all weighted 0)
            // need not be visited at all; an empty view keeps its whole row (its NaNs).
            let weighed = if skip_zeros && !vis.is_empty() {
                vis.end
            } else {
                d.t_k
            };
            weigh(
                &row[..weighed],
                vs,
                order,
                skip_zeros,
                acc,
                &mut out[i * d.d_v..][..d.d_v],
            );
            if !ws.is_empty() {
                ws[i * d.t_k..][..d.t_k].copy_from_slice(&row[..d.t_k]);
            }
        }
    }
}

/// [`F16Held::all_f16_multiples`] (the condition of [`weigh_values`]' `skip_zeros`)
/// compiled for AVX2 (a vector rounding instruction for
/// `fract`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn f16_multiples_avx2<E: F16Held>(xs: &[E]) -> bool {
    E::all_f16_multiples(xs)
}

/// `out_c = Σ_j p_j · v_jc` for every column c of V (t, d_v), each as the f16 dot
/// product [`dot_f16`] of V's column c (llama.cpp stores V transposed) with `p`, padded
/// with zeros to whole 32s, in `order` — computed for all columns at once: the lane an
/// addend falls in depends only on j, so each lane is a row of d_v accumulators, and V
/// is read row by row. `acc` is scratch of at least 32 · d_v numbers.
///
/// `skip_zeros` leaves out the positions whose weight is 0 (a causal prompt's masked
/// keys). That changes no bit when the weights and V are finite multiples of 2⁻²⁴ (f16
/// numbers are): every product and every sum is then a multiple of 2⁻⁴⁸, so an
/// accumulator, which starts at +0, is either nonzero or +0 (an exact cancellation rounds
/// to +0; nothing is small enough to round to −0), and adding a ±0 product to it leaves it
/// as it is. With an infinity in V, 0 · ∞ would be NaN: callers pass false then.
///
/// V is held as `E`: f32 numbers, or the f16 bits of an f16 cache (the same values).
#[inline(always)]
pub(crate) fn weigh_values<E: F16Held>(
    p: &[f32],
    v: &[E],
    order: F16Order,
    skip_zeros: bool,
    acc: &mut [f32],
    out: &mut [f32],
) {
    let dv = out.len();
    let lanes = weigh_lanes(order);
    let acc = &mut acc[..lanes * dv];
    weigh_columns(p, v, dv, 0, lanes, skip_zeros, acc);
    lane_sums(acc, order, out);
}

/// [`weigh_values`]' lane accumulators (`acc`: lanes × d_v) for columns `c0..dv`,
/// started at zero: position j's products into lane row j % lanes — the GEMM's chain
/// (j % 8), or the dot's accumulator (j % 32) / 8 and its lane j % 8, i.e. j % 32.
fn weigh_columns<E: F16Held>(
    p: &[f32],
    v: &[E],
    dv: usize,
    c0: usize,
    lanes: usize,
    skip_zeros: bool,
    acc: &mut [f32],
) {
    for l in 0..lanes {
        acc[l * dv + c0..(l + 1) * dv].fill(0.0);
    }
    for (j, (&pj, vj)) in p.iter().zip(v.chunks_exact(dv)).enumerate() {
        if skip_zeros && pj == 0.0 {
            continue;
        }
        let a = &mut acc[(j % lanes) * dv..][c0..dv];
        for (x, &y) in a.iter_mut().zip(&vj[c0..]) {
            *x = y.widen().mul_add(pj, *x);
        }
    }
}

/// How many lane accumulators [`weigh_values`] keeps per column: the GEMM's chain of
/// eight lanes, or the dot's four accumulators of eight.
fn weigh_lanes(order: F16Order) -> usize {
    match order {
        F16Order::Gemm => LANES,
        F16Order::Dot => 4 * LANES,
    }
}

/// [`weigh_values`] with AVX2 registers as its accumulators: for each run of up to 64
/// columns and each lane row, the row's accumulators stay in registers while the
/// positions of that lane add into them, instead of being loaded and stored for every
/// position. Each accumulator meets the same FMAs in the same order (its positions in
/// increasing order), so the result is `weigh_values`' bit for bit. Columns past the
/// last whole eight take the plain loop.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weigh_values_fma<E: F16Held>(
    p: &[f32],
    v: &[E],
    order: F16Order,
    skip_zeros: bool,
    acc: &mut [f32],
    out: &mut [f32],
) {
    let dv = out.len();
    if dv == 0 {
        return;
    }
    let lanes = weigh_lanes(order);
    let acc = &mut acc[..lanes * dv];
    let n = p.len().min(v.len() / dv);
    let wide = dv - dv % LANES;
    let mut c0 = 0;
    while c0 < wide {
        let regs = ((wide - c0) / LANES).min(8);
        for l in 0..lanes {
            let to = &mut acc[l * dv + c0..][..LANES * regs];
            let at = LaneAt {
                p,
                v,
                dv,
                c0,
                l,
                lanes,
                n,
                skip_zeros,
            };
            // SAFETY: columns c0 .. c0 + 8 · regs ≤ wide ≤ dv of rows j < n of v, into
            // 8 · regs numbers of acc.
            unsafe {
                match regs {
                    8 => weigh_lane::<E, 8>(at, to),
                    7 => weigh_lane::<E, 7>(at, to),
                    6 => weigh_lane::<E, 6>(at, to),
                    5 => weigh_lane::<E, 5>(at, to),
                    4 => weigh_lane::<E, 4>(at, to),
                    3 => weigh_lane::<E, 3>(at, to),
                    2 => weigh_lane::<E, 2>(at, to),
                    _ => weigh_lane::<E, 1>(at, to),
                }
            }
        }
        c0 += LANES * regs;
    }
    if wide < dv {
        weigh_columns(p, v, dv, wide, lanes, skip_zeros, acc);
    }
    // SAFETY: this function's own contract.
    unsafe { lane_sums_avx2(acc, order, out) };
}

/// [`weigh_values_fma`] with AVX-512 registers: sixteen columns a register, up to 128
/// columns a run, and two lane rows a pass (`l`, `l + 1`: positions `j`, `j + 1`), so a
/// pass reads each position's whole row once and keeps twice the independent chains
/// in flight (a lane row's positions are 32 rows apart, so one row's chain alone waited
/// on its loads). Each accumulator meets the same FMAs in the same order as there, so
/// the result is `weigh_values`' bit for bit.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn weigh_values_avx512<E: F16Held>(
    p: &[f32],
    v: &[E],
    order: F16Order,
    skip_zeros: bool,
    acc: &mut [f32],
    out: &mut [f32],
) {
    let dv = out.len();
    if dv == 0 {
        return;
    }
    let lanes = weigh_lanes(order);
    let acc = &mut acc[..lanes * dv];
    let n = p.len().min(v.len() / dv);
    let wide = dv - dv % 16;
    let mut c0 = 0;
    while c0 < wide {
        let regs = ((wide - c0) / 16).min(8);
        for l in (0..lanes).step_by(2) {
            let at = LaneAt {
                p,
                v,
                dv,
                c0,
                l,
                lanes,
                n,
                skip_zeros,
            };
            let to = acc.as_mut_ptr().add(l * dv + c0);
            // SAFETY: columns c0 .. c0 + 16 · regs ≤ wide ≤ dv of rows j < n of v, into
            // lane rows l and l + 1 (< lanes, which is even) of acc.
            unsafe {
                match regs {
                    8 => weigh_lane_pair::<E, 8>(at, to),
                    7 => weigh_lane_pair::<E, 7>(at, to),
                    6 => weigh_lane_pair::<E, 6>(at, to),
                    5 => weigh_lane_pair::<E, 5>(at, to),
                    4 => weigh_lane_pair::<E, 4>(at, to),
                    3 => weigh_lane_pair::<E, 3>(at, to),
                    2 => weigh_lane_pair::<E, 2>(at, to),
                    _ => weigh_lane_pair::<E, 1>(at, to),
                }
            }
        }
        c0 += 16 * regs;
    }
    if wide < dv {
        weigh_columns(p, v, dv, wide, lanes, skip_zeros, acc);
    }
    // SAFETY: this function's own contract.
    unsafe { lane_sums_avx2(acc, order, out) };
}

/// Lane rows `l` and `l + 1` of [`weigh_values_avx512`]: columns `c0 .. c0 + 16 W`
/// summed over the positions `l, l + lanes, ...` (and `l + 1, l + 1 + lanes, ...`)
/// below `n`, in `W` registers each, written to `to` (row l) and `to + dv` (row l + 1).
///
/// # Safety
/// AVX-512F and FMA; `v` holds rows `j < n` of `dv` numbers with `c0 + 16 W ≤ dv`; `to`
/// and `to + dv` each start `16 W` writable numbers.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn weigh_lane_pair<E: F16Held, const W: usize>(at: LaneAt<E>, to: *mut f32) {
    use std::arch::x86_64::*;
    let LaneAt {
        p,
        v,
        dv,
        c0,
        l,
        lanes,
        n,
        skip_zeros,
    } = at;
    let mut ra = [_mm512_setzero_ps(); W];
    let mut rb = [_mm512_setzero_ps(); W];
    let mut j = l;
    while j < n {
        let pa = p[j];
        if !(skip_zeros && pa == 0.0) {
            let pv = _mm512_set1_ps(pa);
            let vj = v.as_ptr().add(j * dv + c0);
            for (k, rk) in ra.iter_mut().enumerate() {
                // y · p_j + x, as weigh_values' y.mul_add(p_j, x).
                *rk = _mm512_fmadd_ps(load16(vj.add(16 * k)), pv, *rk);
            }
        }
        if j + 1 < n {
            let pb = p[j + 1];
            if !(skip_zeros && pb == 0.0) {
                let pv = _mm512_set1_ps(pb);
                let vj = v.as_ptr().add((j + 1) * dv + c0);
                for (k, rk) in rb.iter_mut().enumerate() {
                    *rk = _mm512_fmadd_ps(load16(vj.add(16 * k)), pv, *rk);
                }
            }
        }
        j += lanes;
    }
    for k in 0..W {
        _mm512_storeu_ps(to.add(16 * k), ra[k]);
        _mm512_storeu_ps(to.add(dv + 16 * k), rb[k]);
    }
}

/// Where [`weigh_lane`] reads.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct LaneAt<'a, E> {
    /// The weights of the positions.
    p: &'a [f32],
    /// V, rows of `dv` numbers.
    v: &'a [E],
    dv: usize,
    /// The first column.
    c0: usize,
    /// The lane row, of `lanes`.
    l: usize,
    lanes: usize,
    /// Positions.
    n: usize,
    /// Whether zero weights are skipped.
    skip_zeros: bool,
}

/// One lane row of [`weigh_values_fma`]: columns `c0 .. c0 + 8 W` summed over the
/// positions `l, l + lanes, ...` below `n`, in `W` registers, written to `to`.
///
/// # Safety
/// AVX2 and FMA; `v` holds rows `j < n` of `dv` numbers with `c0 + 8 W ≤ dv`; `to`
/// holds `8 W` numbers.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weigh_lane<E: F16Held, const W: usize>(at: LaneAt<E>, to: &mut [f32]) {
    use std::arch::x86_64::*;
    let LaneAt {
        p,
        v,
        dv,
        c0,
        l,
        lanes,
        n,
        skip_zeros,
    } = at;
    let mut r = [_mm256_setzero_ps(); W];
    let mut j = l;
    while j < n {
        let pj = p[j];
        if !(skip_zeros && pj == 0.0) {
            let pv = _mm256_set1_ps(pj);
            let vj = v.as_ptr().add(j * dv + c0);
            for (k, rk) in r.iter_mut().enumerate() {
                // y · p_j + x, as weigh_values' y.mul_add(p_j, x).
                *rk = _mm256_fmadd_ps(load8(vj.add(LANES * k)), pv, *rk);
            }
        }
        j += lanes;
    }
    for (k, rk) in r.iter().enumerate() {
        _mm256_storeu_ps(to.as_mut_ptr().add(LANES * k), *rk);
    }
}

/// The horizontal sums of [`weigh_values`]' lane accumulators (`acc`: lanes × d_v) into
/// `out`, all columns at once: each step adds whole lane rows (d_v numbers) in place, so
/// every column meets the same additions in the same order as its own [`dot_f16`]
/// ending. Kept out of line: inlined, it changed how the weighing loop above compiled
/// (slower at long contexts).
#[inline(never)]
fn lane_sums(acc: &mut [f32], order: F16Order, out: &mut [f32]) {
    lane_sums_body(acc, order, out);
}

/// [`lane_sums`] compiled for AVX2 (the same additions per column, eight columns a
/// step).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
#[target_feature(enable = "avx2,fma")]
unsafe fn lane_sums_avx2(acc: &mut [f32], order: F16Order, out: &mut [f32]) {
    lane_sums_body(acc, order, out);
}

/// The body of [`lane_sums`].
#[inline(always)]
fn lane_sums_body(acc: &mut [f32], order: F16Order, out: &mut [f32]) {
    let dv = out.len();
    let add_rows = |acc: &mut [f32], to: usize, a: usize, b: usize| {
        for c in 0..dv {
            acc[to * dv + c] = acc[a * dv + c] + acc[b * dv + c];
        }
    };
    if order == F16Order::Dot {
        // Lane l of the four accumulators: (0 + 2) + (1 + 3), into row l.
        for l in 0..LANES {
            for c in 0..dv {
                let x = |k: usize| acc[(k * LANES + l) * dv + c];
                acc[l * dv + c] = (x(0) + x(2)) + (x(1) + x(3));
            }
        }
    }
    // Halves added: t_m = s_m + s_{m+4}, into row m.
    for m in 0..4 {
        add_rows(acc, m, m, m + 4);
    }
    // hsum8's (t0 + t2) + (t1 + t3), or the dot's (t0 + t1) + (t2 + t3) (its f64 round
    // trip is exact).
    let (a, b) = match order {
        F16Order::Gemm => (2, 1),
        F16Order::Dot => (1, 2),
    };
    for (c, o) in out.iter_mut().enumerate() {
        *o = (acc[c] + acc[a * dv + c]) + (acc[b * dv + c] + acc[3 * dv + c]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::round_f16;
    use crate::ops::f16_dot::dot_f16;
    use crate::runtime::Isa;

    #[test]
    fn weighing_all_columns_equals_one_dot_per_column() {
        // Widths of one register run, of two (past 64 columns), and with a tail.
        for dv in [24usize, 20, 64, 100, 256] {
            weighing_columns(dv);
        }
    }

    fn weighing_columns(dv: usize) {
        let t = 45usize;
        let v: Vec<f32> = (0..t * dv)
            .map(|i| ((i * 29 % 97) as f32 - 48.0) / 32.0)
            .collect();
        // Zero weights inside (every 13th) and a causal row's zeros at the end.
        let p: Vec<f32> = (0..t)
            .map(|j| {
                if j < 37 {
                    ((j * 7 % 13) as f32) / 91.0
                } else {
                    0.0
                }
            })
            .collect();
        let t_pad = t.div_ceil(32) * 32;
        let mut acc = vec![0.0; 32 * dv];
        for order in [F16Order::Gemm, F16Order::Dot] {
            let mut out = vec![0.0; dv];
            weigh_values(&p, &v, order, false, &mut acc, &mut out);
            let mut skipped = vec![0.0; dv];
            weigh_values(&p, &v, order, true, &mut acc, &mut skipped);
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&skipped), "{order:?}: zeros skipped");
            #[cfg(target_arch = "x86_64")]
            for _ in Isa::available().into_iter().filter(|&l| fma_at(l)) {
                for skip in [false, true] {
                    let mut fast = vec![0.0; dv];
                    // SAFETY: an available level with AVX2 and FMA.
                    unsafe { weigh_values_fma(&p, &v, order, skip, &mut acc, &mut fast) };
                    assert_eq!(
                        bits(&fast),
                        bits(&out),
                        "{order:?}: in registers, skip {skip}"
                    );
                }
            }
            #[cfg(target_arch = "x86_64")]
            if Isa::available().into_iter().any(avx512_at) {
                for skip in [false, true] {
                    let mut fast = vec![0.0; dv];
                    // SAFETY: a level with AVX-512F (and AVX2, FMA) is available.
                    unsafe { weigh_values_avx512(&p, &v, order, skip, &mut acc, &mut fast) };
                    assert_eq!(
                        bits(&fast),
                        bits(&out),
                        "{order:?}: in AVX-512 registers, two lane rows a pass, skip {skip}"
                    );
                }
            }
            // V held as f16 bits (an f16 KV cache): the same numbers at every level.
            let vh: Vec<u16> = v
                .iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect();
            for skip in [false, true] {
                let mut halves = vec![0.0; dv];
                weigh_values(&p, &vh, order, skip, &mut acc, &mut halves);
                assert_eq!(
                    bits(&halves),
                    bits(&out),
                    "{order:?}: V as f16 bits, skip {skip}"
                );
                #[cfg(target_arch = "x86_64")]
                if Isa::available().into_iter().any(fma_at) {
                    // SAFETY: a level with AVX2, FMA and F16C is available.
                    unsafe { weigh_values_fma(&p, &vh, order, skip, &mut acc, &mut halves) };
                    assert_eq!(bits(&halves), bits(&out), "{order:?}: f16 bits, AVX2");
                }
                #[cfg(target_arch = "x86_64")]
                if Isa::available().into_iter().any(avx512_at) {
                    // SAFETY: a level with AVX-512F (and AVX2, FMA) is available.
                    unsafe { weigh_values_avx512(&p, &vh, order, skip, &mut acc, &mut halves) };
                    assert_eq!(bits(&halves), bits(&out), "{order:?}: f16 bits, AVX-512");
                }
            }
            let mut pp = p.clone();
            pp.resize(t_pad, 0.0);
            for (c, o) in out.iter().enumerate() {
                let mut col: Vec<f32> = (0..t).map(|j| v[j * dv + c]).collect();
                col.resize(t_pad, 0.0);
                assert_eq!(
                    o.to_bits(),
                    dot_f16(&col, &pp, order).to_bits(),
                    "{order:?} column {c}"
                );
            }
        }
    }

    /// Attention over an f16 cache (K and V as f16 bits, read in place up to `kv_len`)
    /// equals attention over the same values held as f32, bit for bit, output and
    /// weights: a decoded token (the dot order, read in f16) and a prompt (widened once),
    /// with a GQA group, head widths that leave tails to the plain loops (72: not whole
    /// 32s, 16s or 8s), on threads, at every instruction-set level.
    #[test]
    fn f16_cache_equals_f32_cache() -> Result<(), Box<dyn std::error::Error>> {
        let (h, h_kv, cap, dk) = (4, 2, 50, 72);
        let val = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| round_f16((((i * 31 + seed * 17) % 113) as f32 - 56.0) / 40.0))
                .collect()
        };
        let (kf, vf) = (val(h_kv * cap * dk, 2), val(h_kv * cap * dk, 3));
        let half = |xs: &[f32]| -> Vec<u16> {
            xs.iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect()
        };
        let (kh, vh) = (half(&kf), half(&vf));
        let k = Tensor::new(kf, &[1, h_kv, cap, dk])?;
        let v = Tensor::new(vf, &[1, h_kv, cap, dk])?;
        let bits = |t: &Tensor| t.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (t_q, kv_len) in [(1usize, 37usize), (1, 50), (5, 41)] {
            let q = Tensor::new(val(h * t_q * dk, 1), &[1, h, t_q, dk])?;
            for numerics in [Numerics::LlamaCpp, Numerics::RowInvariant] {
                let p = AttentionParams {
                    causal: true,
                    want_weights: true,
                    kv_len: Some(kv_len),
                    numerics,
                    softcap: None,
                    ..AttentionParams::new(dk)
                };
                for isa in Isa::available() {
                    for threads in [1, 2] {
                        let rt = crate::Runtime::builder()
                            .threads(threads)
                            .isa(isa)
                            .build()?;
                        let want = rt.install(|| attention(&q, &k, &v, &p))?;
                        let got =
                            rt.install(|| attention_f16(&q, &kh, &vh, [1, h_kv, cap, dk], dk, &p))?;
                        let what = format!("{isa}, {threads} threads, t_q {t_q}, {numerics:?}");
                        assert_eq!(bits(&got.output), bits(&want.output), "{what}");
                        let (w1, w2) = (got.weights.as_ref(), want.weights.as_ref());
                        let (w1, w2) = (w1.ok_or("weights")?, w2.ok_or("weights")?);
                        assert_eq!(bits(w1), bits(w2), "{what}: weights");
                    }
                }
            }
        }
        // Stores of the wrong size are refused, not read past; so is another arithmetic.
        let q = Tensor::zeros(&[1, h, 1, dk]);
        let p = AttentionParams {
            numerics: Numerics::LlamaCpp,
            ..AttentionParams::new(dk)
        };
        assert!(attention_f16(&q, &kh, &vh, [1, h_kv, cap, dk], dk, &p).is_ok());
        assert!(attention_f16(&q, &kh[1..], &vh, [1, h_kv, cap, dk], dk, &p).is_err());
        let lucent = AttentionParams {
            numerics: Numerics::Lucent,
            ..p
        };
        let e = attention_f16(&q, &kh, &vh, [1, h_kv, cap, dk], dk, &lucent).unwrap_err();
        assert!(e.to_string().contains("llama.cpp's arithmetic only"), "{e}");
        Ok(())
    }

    /// Heads split over threads compute what one thread computes, bit for bit, in both
    /// orders, with a GQA group and causal masking, and every instruction-set level
    /// computes what the scalar one does.
    #[test]
    fn attention_on_threads_equals_one_thread() -> Result<(), Box<dyn std::error::Error>> {
        let (h, h_kv, t, dk) = (4, 2, 40, 64);
        let val = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| round_f16((((i * 31 + seed * 17) % 113) as f32 - 56.0) / 40.0))
                .collect()
        };
        let q = Tensor::new(val(h * t * dk, 1), &[1, h, t, dk])?;
        let k = Tensor::new(val(h_kv * t * dk, 2), &[1, h_kv, t, dk])?;
        let v = Tensor::new(val(h_kv * t * dk, 3), &[1, h_kv, t, dk])?;
        let bits = |t: &Tensor| t.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // A prompt of 40 rows: llama.cpp's GEMM order, and the row-invariant dot order.
        for numerics in [Numerics::LlamaCpp, Numerics::RowInvariant] {
            let order = order(numerics, t);
            let p = AttentionParams {
                causal: true,
                want_weights: true,
                numerics,
                softcap: None,
                ..AttentionParams::new(dk)
            };
            let scalar = crate::Runtime::builder()
                .threads(1)
                .isa(Isa::Scalar)
                .build()?;
            let want = scalar.install(|| attention(&q, &k, &v, &p))?;
            for isa in Isa::available() {
                let rt = crate::Runtime::builder().threads(2).isa(isa).build()?;
                let one = rt.install(|| crate::threads::serial(|| attention(&q, &k, &v, &p)))?;
                let two = rt.install(|| attention(&q, &k, &v, &p))?;
                for (run, what) in [(&one, "one thread"), (&two, "two threads")] {
                    assert_eq!(
                        bits(&run.output),
                        bits(&want.output),
                        "{isa} {what}: {order:?}"
                    );
                    let (w1, w2) = (run.weights.as_ref(), want.weights.as_ref());
                    let (w1, w2) = (w1.ok_or("weights")?, w2.ok_or("weights")?);
                    assert_eq!(bits(w1), bits(w2), "{isa} {what}: {order:?} weights");
                }
            }
        }
        Ok(())
    }
}
