//! llama.cpp's CPU arithmetic for attention and the gated activations, reproduced
//! operation for operation, so that a GGUF model gives the very numbers the engine its
//! files come from gives.
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
//!    [`F16Order`];
//! 3. the softmax of `scores · scale` (masked positions −∞) with its vector exp
//!    ([`expf`]), the exps summed eight at a time by the tree and the eight-sums in f64,
//!    then each exp multiplied by `(f32)(1 / sum)`;
//! 4. the weights rounded to f16, and `weights · V` summed over the positions in the same
//!    order as step 2 (V is stored transposed, so each output number is one dot product
//!    over positions).
//!
//! The cache holds a padded number of positions (a multiple of 256); the padding
//! contributes exact zeros, so it is left out here. An AVX-512 build of llama.cpp sums
//! 16 lanes at a time and differs from the AVX2 one in the last bits (measured: 0.11 and
//! 0.50 of a logit on two of the six SmolLM2 golden prompts). The plain functions here
//! are scalar and say which of llama.cpp's operations they stand for; their SIMD twins
//! (`…_avx2`, `…_avx512`: eight keys' scores at once, sixteen softmax numbers at once)
//! compute the same bits, and tests hold each to its plain function bit for bit.

use crate::ops::attention::{
    bias_row, check_dims, round_f16_in_place, visible_keys, AttentionDims, AttentionOutput,
    AttentionParams,
};

use crate::ops::rope::{yarn_corr_dims, yarn_ramp, RopeFreqs, RopeScaling};
use crate::ops::RopeConvention;
use crate::runtime::Isa;
use crate::tensor::Tensor;
use crate::Result;

/// Multiply-adds (t_q · t_k · (d_k + d_v) · heads) from which attention splits its heads
/// over threads: a decoded token's attention over a few hundred positions already gains
/// (SmolLM2, 2 threads: decode ×1.06 with 2¹⁵ instead of 2¹⁸, 8 alternating rounds).
const PARALLEL_MIN: usize = 1 << 15;

/// Lanes of one AVX2 register of f32.
const LANES: usize = 8;

/// Which of llama.cpp's two summation orders an f16 product follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F16Order {
    /// Several query rows at once (a prompt): the GEMM's single FMA chain per output.
    Gemm,
    /// One query row (a decode step): the dot product's four accumulators.
    Dot,
}

impl F16Order {
    /// The order llama.cpp uses for a product with `rows` query rows (it takes its GEMM
    /// from two rows up).
    pub fn for_rows(rows: usize) -> F16Order {
        if rows >= 2 {
            F16Order::Gemm
        } else {
            F16Order::Dot
        }
    }
}

/// The eight lanes of an AVX2 register summed as `hsum_float_8` and tinyBLAS's `hsum`
/// sum them: halves added, then (0 + 2) + (1 + 3).
#[inline(always)]
pub fn hsum8(x: &[f32; LANES]) -> f32 {
    let t = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// `Σ x_i · y_i` over two equally long rows of f16 values (held as f32), in `order`,
/// as llama.cpp's AVX2 build sums it:
///
/// - [`F16Order::Gemm`] (tinyBLAS; when `n % 8 == 0`, else the dot order): one eight-lane
///   accumulator, `acc = fma(x, y, acc)` chunk after chunk, then [`hsum8`].
/// - [`F16Order::Dot`] (`ggml_vec_dot_f16`): four accumulators over 32-number steps
///   (accumulator j takes numbers 8j..8j+7 of each step), then (0 + 2) and (1 + 3), then
///   their sum; its halves added and the four lanes summed as (0 + 1) + (2 + 3) (two
///   horizontal adds), widened to f64; numbers past the last whole step are added in
///   f64 one product at a time; the total is rounded to f32.
#[inline(always)]
pub fn dot_f16(x: &[f32], y: &[f32], order: F16Order) -> f32 {
    let n = x.len().min(y.len());
    if order == F16Order::Gemm && n.is_multiple_of(LANES) {
        let mut acc = [0.0f32; LANES];
        for (xc, yc) in x[..n].chunks_exact(LANES).zip(y[..n].chunks_exact(LANES)) {
            for l in 0..LANES {
                acc[l] = xc[l].mul_add(yc[l], acc[l]);
            }
        }
        return hsum8(&acc);
    }
    let step = 4 * LANES;
    let np = n - n % step;
    let mut sum = [[0.0f32; LANES]; 4];
    for i in (0..np).step_by(step) {
        for (j, s) in sum.iter_mut().enumerate() {
            let o = i + j * LANES;
            for l in 0..LANES {
                s[l] = x[o + l].mul_add(y[o + l], s[l]);
            }
        }
    }
    let mut total = 0.0f64;
    if np > 0 {
        let s = std::array::from_fn::<f32, LANES, _>(|l| {
            (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l])
        });
        let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
        total = ((t[0] + t[1]) + (t[2] + t[3])) as f64;
    }
    for i in np..n {
        total += (x[i] * y[i]) as f64;
    }
    total as f32
}

/// `ggml_v_expf` (AVX2): e^x by a range reduction to `x = n·ln 2 + b`, a degree-5
/// polynomial `p(b) − 1` and `2ⁿ + 2ⁿ·(p − 1)`, with 2ⁿ built from the exponent bits
/// (and split in two factors when |n| > 126; 0 or ∞ past |n| > 192). Within ~1.5 ulp
/// of e^x, and bit for bit what llama.cpp's softmax and SiLU compute.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let c = f32::from_bits;
    let r = c(0x4b40_0000); // 0x1.8p23: adding it rounds to an integer
    let z = x.mul_add(c(0x3fb8_aa3b), r); // x · log2(e) + r
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x)); // x − n·ln 2
    let e = z.to_bits() << 23;
    let k = c(e.wrapping_add(1.0f32.to_bits())); // 2ⁿ
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6) * b);
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = c(g.wrapping_add(0x7f00_0000));
    let s2 = c(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        return s1 * s1;
    }
    s2.mul_add(j, s2) * s1
}

/// SiLU as `ggml_v_silu` computes it: `x / (1 + expf(0 − x))` with [`expf`].
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + expf(0.0 - x))
}

/// One softmax row as `ggml_compute_forward_soft_max_f32` computes it, in place:
/// `x ← x · scale` (−∞ stays −∞), the maximum, `e = expf(x − max)` eight at a time with
/// each eight's [`hsum8`] added in f64, then `e · (f32)(1 / sum)`.
#[inline(always)]
pub fn softmax_row(row: &mut [f32], scale: f32) {
    for x in row.iter_mut() {
        *x *= scale;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    // llama.cpp's rows are padded to whole eights with masked (zero) entries, so a
    // short last chunk is an eight with zeros after it.
    let mut sum = 0.0f64;
    for ch in row.chunks_mut(LANES) {
        let mut e = [0.0f32; LANES];
        for (l, x) in ch.iter_mut().enumerate() {
            *x = expf(*x - max);
            e[l] = *x;
        }
        sum += hsum8(&e) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for x in row.iter_mut() {
        *x *= inv;
    }
}

/// RoPE as `ggml_rope_ext` computes it, in place on rows of `d` features (rows cycle
/// through `positions`): the angle of pair i is `p · s^i` with `s = powf(base, −2/d)`,
/// built by repeated f32 multiplication (`θ ← θ · s`), then `rope_yarn`'s steps in f32
/// (below), its cos and sin from the C library in f32 times the magnitude m, and each
/// pair rotated with the products fused as GCC fuses them:
/// `x₀' = fma(x₀, cos, −x₁·sin)`, `x₁' = fma(x₀, sin, x₁·cos)`.
///
/// The scaling steps ([`RopeFreqs`], formulas in [`crate::ops::rope`]): θ ← θ / fᵢ with
/// frequency factors; θ_interp = freq_scale · θ with freq_scale = 1/factor (linear
/// and YaRN); for YaRN (llama.cpp's ext_factor = 1) θ = fma(θ_interp, 1 − γᵢ, θ·γᵢ) and
/// m = a' · fma(0.1, ln(1/freq_scale), 1), where a' is the attention factor llama.cpp's
/// context computes (`get_mscale(factor)` / (1 + 0.1 ln factor) · attn_factor, without
/// fused multiply-adds: [`llama_cpp_yarn_attn_factor`]).
pub fn rope_rows(
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    rope_rows_at(crate::runtime::isa(), data, d, positions, freqs, convention)
}

/// [`rope_rows`] at the instruction-set level `isa` (one the CPU runs): FMA instructions
/// from [`Isa::Avx2`], the C library's `fmaf` below; the same numbers.
pub(crate) fn rope_rows_at(
    isa: Isa,
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    #[cfg(target_arch = "x86_64")]
    if fma_at(isa) {
        // SAFETY: the level has AVX2 and FMA, and the runtime caps it to the CPU's.
        unsafe { rope_rows_fma(data, d, positions, freqs, convention) };
        return;
    }
    rope_rows_with(data, d, positions, freqs, convention);
}

/// [`rope_rows`] compiled with FMA instructions.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rope_rows_fma(
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    rope_rows_with(data, d, positions, freqs, convention);
}

/// The attention factor llama.cpp's context hands its RoPE for `scaling` (llama.cpp's
/// `cparams.yarn_attn_factor`, with llama-cpp-python's default of 1 before it): for
/// YaRN `get_mscale(factor) · 1/(1 + 0.1·ln factor) · attn_factor` in f32 without fused
/// multiply-adds (its file is compiled without them), where factor = 1/freq_scale
/// and get_mscale(s) = 0.1·ln s + 1 for s > 1, else 1; 1 otherwise. With the kernel's
/// own (1 + 0.1·ln(1/freq_scale)) the product is attn_factor·(1 + 0.1·ln factor) up to
/// rounding.
pub fn llama_cpp_yarn_attn_factor(scaling: RopeScaling) -> f32 {
    match scaling {
        RopeScaling::Yarn {
            factor,
            attn_factor,
            ..
        } => {
            let factor = 1.0 / (1.0 / factor);
            let mut a = if factor <= 1.0 {
                1.0
            } else {
                0.1 * factor.ln() + 1.0
            };
            a *= 1.0 / (1.0 + 0.1 * factor.ln());
            a * attn_factor
        }
        _ => 1.0,
    }
}

#[inline(always)]
fn rope_rows_with(
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    if positions.is_empty() {
        return;
    }
    let half = d / 2;
    let scale = freqs.base.powf(-2.0 / d as f32);
    // llama.cpp's freq_scale (hparams: 1/factor), and YaRN's corrections.
    let (freq_scale, yarn) = match freqs.scaling {
        RopeScaling::None => (1.0f32, None),
        RopeScaling::Linear { factor } => (1.0 / factor, None),
        RopeScaling::Yarn {
            factor,
            original_context,
            ..
        } => {
            let fs = 1.0 / factor;
            let corr = yarn_corr_dims(d, original_context, freqs.base);
            let m =
                llama_cpp_yarn_attn_factor(freqs.scaling) * 0.1f32.mul_add((1.0 / fs).ln(), 1.0);
            (fs, Some((corr, m)))
        }
    };
    // The angles of each position once: (positions, half) cos and sin.
    let mut cos = vec![0.0f32; positions.len() * half];
    let mut sin = vec![0.0f32; positions.len() * half];
    for (k, &pos) in positions.iter().enumerate() {
        let mut theta = pos as f32;
        for i in 0..half {
            let extrap = match freqs.freq_factors {
                Some(f) => theta / f[i],
                None => theta,
            };
            let interp = extrap * freq_scale;
            let (angle, m) = match yarn {
                None => (interp, 1.0f32),
                Some((corr, m)) => {
                    let mix = yarn_ramp(corr, i);
                    (interp.mul_add(1.0 - mix, extrap * mix), m)
                }
            };
            cos[k * half + i] = angle.cos() * m;
            sin[k * half + i] = angle.sin() * m;
            theta *= scale;
        }
    }
    for (r, row) in data.chunks_exact_mut(d).enumerate() {
        let k = r % positions.len();
        let (cos, sin) = (&cos[k * half..][..half], &sin[k * half..][..half]);
        for i in 0..half {
            let (a, b) = match convention {
                RopeConvention::RotateHalf => (i, i + half),
                RopeConvention::Interleaved => (2 * i, 2 * i + 1),
            };
            let (x0, x1) = (row[a], row[b]);
            row[a] = x0.mul_add(cos[i], -(x1 * sin[i]));
            row[b] = x0.mul_add(sin[i], x1 * cos[i]);
        }
    }
}

/// Scaled dot-product attention in llama.cpp's arithmetic (the module doc's steps 2–4),
/// with the order `p.ggml` names. Q, K and V must hold f16 values already (step 1 is
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
    let isa = crate::runtime::isa();
    let job = Job {
        d,
        p,
        q: q.data(),
        k: k.data(),
        v: v.data(),
        order: p.ggml.unwrap_or(F16Order::for_rows(d.t_q)),
        fma: fma_at(isa),
        avx512: avx512_at(isa),
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

/// Whether the FMA-compiled paths run at `isa` (AVX2 and FMA): the same operations,
/// inlined and vectorised instead of calls to the C library's `fmaf`.
fn fma_at(isa: Isa) -> bool {
    cfg!(target_arch = "x86_64") && isa >= Isa::Avx2
}

/// Whether the AVX-512 softmax runs at `isa` (AVX-512F besides AVX2 and FMA).
fn avx512_at(isa: Isa) -> bool {
    cfg!(target_arch = "x86_64") && isa >= Isa::Avx512
}

/// One attention call's inputs, shared by its heads.
struct Job<'a> {
    d: AttentionDims,
    p: &'a AttentionParams<'a>,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    order: F16Order,
    /// AVX2 and FMA: the FMA-compiled head and the eight-key scores.
    fma: bool,
    /// AVX-512F as well: the sixteen-wide softmax.
    avx512: bool,
}

/// A head's working rows, reused from head to head: the scores / weights of one query
/// (t_k) and the lane accumulators of [`weigh_values`] (32 · d_v). llama.cpp's padding
/// of the positions to whole 32s is not stored: its zeros enter [`softmax_row`] as a
/// short last eight and [`weigh_values`] as lanes that receive nothing.
struct Scratch {
    row: Vec<f32>,
    acc: Vec<f32>,
}

impl Job<'_> {
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
                for (krow, s) in keys.chunks_exact(q.len()).zip(s.iter_mut()) {
                    *s = dot_f16(krow, q, order);
                }
            },
            |row| softmax_row(row, 1.0),
            weigh_values,
        );
    }

    /// [`Job::head`] compiled with FMA instructions: the scores eight keys at a time
    /// ([`dots_f16_avx2`]), with AVX-512 the softmax sixteen numbers at a time
    /// ([`softmax_row_avx512`]), and V weighed in registers ([`weigh_values_fma`]);
    /// the same bits as the plain twin.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
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
                    softmax_row(row, 1.0)
                }
            },
            |p, v, order, skip, acc, out| unsafe { weigh_values_fma(p, v, order, skip, acc, out) },
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
        dots: impl Fn(&[f32], &[f32], F16Order, &mut [f32]),
        softmax: impl Fn(&mut [f32]),
        weigh: impl Fn(&[f32], &[f32], F16Order, bool, &mut [f32], &mut [f32]),
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
        let skip_zeros = d.t_q > 1
            && vs
                .iter()
                .all(|&x| x.is_finite() && (x * 16_777_216.0).fract() == 0.0);
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
            weigh(
                &row[..d.t_k],
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

/// [`dot_f16`] with AVX2 registers for its eight lanes: the same operations in the
/// same order, so the same bits.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f16_avx2(x: &[f32], y: &[f32], order: F16Order) -> f32 {
    use std::arch::x86_64::*;
    let n = x.len().min(y.len());
    let lanes = |v: __m256| -> [f32; LANES] {
        let mut a = [0.0f32; LANES];
        // SAFETY: `a` holds eight f32.
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
        a
    };
    // SAFETY (loads): every load reads 8 numbers at i + 8j < n of x and y.
    unsafe {
        if order == F16Order::Gemm && n.is_multiple_of(LANES) {
            let mut acc = _mm256_setzero_ps();
            for i in (0..n).step_by(LANES) {
                let (a, b) = (
                    _mm256_loadu_ps(x.as_ptr().add(i)),
                    _mm256_loadu_ps(y.as_ptr().add(i)),
                );
                acc = _mm256_fmadd_ps(a, b, acc);
            }
            return hsum8(&lanes(acc));
        }
        let step = 4 * LANES;
        let np = n - n % step;
        let mut sum = [_mm256_setzero_ps(); 4];
        for i in (0..np).step_by(step) {
            for (j, s) in sum.iter_mut().enumerate() {
                let o = i + j * LANES;
                let (a, b) = (
                    _mm256_loadu_ps(x.as_ptr().add(o)),
                    _mm256_loadu_ps(y.as_ptr().add(o)),
                );
                *s = _mm256_fmadd_ps(a, b, *s);
            }
        }
        let mut total = 0.0f64;
        if np > 0 {
            let s = lanes(_mm256_add_ps(
                _mm256_add_ps(sum[0], sum[2]),
                _mm256_add_ps(sum[1], sum[3]),
            ));
            let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
            total = ((t[0] + t[1]) + (t[2] + t[3])) as f64;
        }
        for i in np..n {
            total += (x[i] * y[i]) as f64;
        }
        total as f32
    }
}

/// SiLU ([`silu`]) of every number in place, with FMA instructions when the CPU has them
/// (sixteen at a time with AVX-512): the same numbers as [`silu`] one by one.
pub fn silu_in_place(x: &mut [f32]) {
    silu_in_place_at(crate::runtime::isa(), x)
}

/// [`silu_in_place`] at the instruction-set level `isa` (one the CPU runs).
pub(crate) fn silu_in_place_at(isa: Isa, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512_at(isa) {
        // SAFETY: the level has AVX-512F, AVX2 and FMA; the runtime caps it to the CPU's.
        unsafe { silu_avx512(x) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if fma_at(isa) {
        // SAFETY: the level has AVX2 and FMA; the runtime caps it to the CPU's.
        unsafe { silu_fma(x) };
        return;
    }
    x.iter_mut().for_each(|v| *v = silu(*v));
}

/// [`silu_in_place`] compiled with FMA instructions.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_fma(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = silu(*v));
}

/// [`silu_in_place`] sixteen numbers a step: [`expf`]'s arithmetic lane by lane (the
/// same fused operations, its two range branches as masks), then `x / (1 + e)`.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn silu_avx512(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(16);
    for ch in &mut chunks {
        let v = _mm512_loadu_ps(ch.as_ptr());
        let ex = expf_avx512(_mm512_sub_ps(_mm512_setzero_ps(), v)); // e^(0 − x)
        let y = _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0), ex));
        _mm512_storeu_ps(ch.as_mut_ptr(), y);
    }
    chunks
        .into_remainder()
        .iter_mut()
        .for_each(|v| *v = silu(*v));
}

/// [`expf`] of sixteen numbers: its arithmetic lane by lane (the same fused operations,
/// its two range branches as masks), so every lane equals [`expf`] of it bit for bit.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn expf_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let c = |b: u32| _mm512_set1_ps(f32::from_bits(b));
    let r = c(0x4b40_0000);
    let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm512_sub_ps(z, r);
    let nn = _mm512_xor_ps(n, _mm512_set1_ps(-0.0)); // −n
    let b = _mm512_fmadd_ps(nn, c(0x35bf_be8e), _mm512_fmadd_ps(nn, c(0x3f31_7200), x));
    let e = _mm512_slli_epi32::<23>(_mm512_castps_si512(z));
    let k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_set1_epi32(0x3f80_0000)));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm512_mul_ps(c(0x3f7f_fff6), b),
    );
    let ex = _mm512_fmadd_ps(j, k, k);
    let an = _mm512_abs_ps(n);
    // Lanes where |n| ≤ 126 fails (NaN included, as the scalar `if` sends it on).
    let big = _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(an, _mm512_set1_ps(126.0));
    if big == 0 {
        return ex;
    }
    let neg = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
    let g = _mm512_maskz_mov_epi32(neg, _mm512_set1_epi32(0x8200_0000u32 as i32));
    let s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f00_0000)));
    let s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
    let huge = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(an, _mm512_set1_ps(192.0));
    let far = _mm512_mask_blend_ps(
        huge,
        _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1),
        _mm512_mul_ps(s1, s1),
    );
    _mm512_mask_blend_ps(big, ex, far)
}

/// [`softmax_row`] with scale 1, sixteen numbers a step: the maximum over lanes (as
/// `f32::max`, NaN left out), [`expf_avx512`], each eight's [`hsum8`] added in f64 in
/// order, then `e · (f32)(1 / sum)` — the same bits.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn softmax_row_avx512(row: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = row.len();
    let mask = |i: usize| -> __mmask16 {
        let left = n - i;
        if left >= 16 {
            0xFFFF
        } else {
            (1u16 << left) - 1
        }
    };
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mv = ninf;
    for i in (0..n).step_by(16) {
        // SAFETY: the mask keeps the load within the row.
        let v = unsafe { _mm512_mask_loadu_ps(ninf, mask(i), row.as_ptr().add(i)) };
        mv = _mm512_max_ps(v, mv); // a NaN in v leaves mv (as f32::max leaves it out)
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: `lanes` holds sixteen numbers.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), mv) };
    let max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0f64;
    for i in (0..n).step_by(16) {
        let m = mask(i);
        // SAFETY (load, store): the mask keeps both within the row.
        let v = unsafe { _mm512_maskz_loadu_ps(m, row.as_ptr().add(i)) };
        // Lanes past the row are zeros (llama.cpp's padding), as the twin's short eight.
        let e = _mm512_maskz_mov_ps(m, expf_avx512(_mm512_sub_ps(v, _mm512_set1_ps(max))));
        unsafe { _mm512_mask_storeu_ps(row.as_mut_ptr().add(i), m, e) };
        // SAFETY: `lanes` holds sixteen numbers.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), e) };
        let (lo, hi) = lanes.split_at(LANES);
        sum += hsum8(&std::array::from_fn(|l| lo[l])) as f64;
        if n - i > LANES {
            sum += hsum8(&std::array::from_fn(|l| hi[l])) as f64;
        }
    }
    let inv = _mm512_set1_ps((1.0 / sum) as f32);
    for i in (0..n).step_by(16) {
        let m = mask(i);
        // SAFETY (load, store): the mask keeps both within the row.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, row.as_ptr().add(i));
            _mm512_mask_storeu_ps(row.as_mut_ptr().add(i), m, _mm512_mul_ps(v, inv));
        }
    }
}

/// `s[j] = dot_f16(key j, q, order)` for every row of `keys` (each `q.len()` long),
/// eight keys at a time: each key's lanes accumulate as [`dot_f16_avx2`]'s, then the
/// eight keys' registers are transposed so that one vector addition does lane l's
/// step of the horizontal sum for all eight — the same additions in the same order per
/// key, so the same bits. Shapes the transposed sum does not cover (a length that is not
/// a whole number of the order's steps) and the last keys go through
/// [`dot_f16_avx2`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_f16_avx2(keys: &[f32], q: &[f32], order: F16Order, s: &mut [f32]) {
    use std::arch::x86_64::*;
    let dk = q.len();
    let n = s.len().min(keys.len() / dk.max(1));
    let whole = match order {
        F16Order::Gemm => dk.is_multiple_of(LANES),
        F16Order::Dot => dk.is_multiple_of(4 * LANES),
    };
    let mut j0 = 0;
    if whole && dk > 0 {
        while j0 + LANES <= n {
            // Each key's eight-lane vector before its horizontal sum.
            let mut v = [_mm256_setzero_ps(); LANES];
            for (k, vk) in v.iter_mut().enumerate() {
                let x = keys.as_ptr().add((j0 + k) * dk);
                // SAFETY (loads): key j0 + k < n is dk numbers at x; q is dk numbers.
                *vk = match order {
                    F16Order::Gemm => {
                        let mut acc = _mm256_setzero_ps();
                        for i in (0..dk).step_by(LANES) {
                            let (a, b) = (
                                _mm256_loadu_ps(x.add(i)),
                                _mm256_loadu_ps(q.as_ptr().add(i)),
                            );
                            acc = _mm256_fmadd_ps(a, b, acc);
                        }
                        acc
                    }
                    F16Order::Dot => {
                        let mut sum = [_mm256_setzero_ps(); 4];
                        for i in (0..dk).step_by(4 * LANES) {
                            for (j, sj) in sum.iter_mut().enumerate() {
                                let o = i + j * LANES;
                                let (a, b) = (
                                    _mm256_loadu_ps(x.add(o)),
                                    _mm256_loadu_ps(q.as_ptr().add(o)),
                                );
                                *sj = _mm256_fmadd_ps(a, b, *sj);
                            }
                        }
                        _mm256_add_ps(_mm256_add_ps(sum[0], sum[2]), _mm256_add_ps(sum[1], sum[3]))
                    }
                };
            }
            // t[l] = lane l of every key: row l of the transposed 8 × 8.
            let t = transpose8(v);
            let (t0, t1, t2, t3) = (
                _mm256_add_ps(t[0], t[4]),
                _mm256_add_ps(t[1], t[5]),
                _mm256_add_ps(t[2], t[6]),
                _mm256_add_ps(t[3], t[7]),
            );
            let total = match order {
                // hsum8: (t0 + t2) + (t1 + t3).
                F16Order::Gemm => _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3)),
                // The dot's ending: (t0 + t1) + (t2 + t3); its f64 round trip is exact.
                F16Order::Dot => _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)),
            };
            // SAFETY: j0 + 8 ≤ n ≤ s.len().
            _mm256_storeu_ps(s.as_mut_ptr().add(j0), total);
            j0 += LANES;
        }
    }
    for j in j0..n {
        s[j] = dot_f16_avx2(&keys[j * dk..][..dk], q, order);
    }
}

/// The 8 × 8 transpose of eight AVX2 registers: lane k of result l is lane l of input k.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose8(r: [std::arch::x86_64::__m256; LANES]) -> [std::arch::x86_64::__m256; LANES] {
    use std::arch::x86_64::*;
    let a0 = _mm256_unpacklo_ps(r[0], r[1]);
    let a1 = _mm256_unpackhi_ps(r[0], r[1]);
    let a2 = _mm256_unpacklo_ps(r[2], r[3]);
    let a3 = _mm256_unpackhi_ps(r[2], r[3]);
    let a4 = _mm256_unpacklo_ps(r[4], r[5]);
    let a5 = _mm256_unpackhi_ps(r[4], r[5]);
    let a6 = _mm256_unpacklo_ps(r[6], r[7]);
    let a7 = _mm256_unpackhi_ps(r[6], r[7]);
    let b0 = _mm256_shuffle_ps::<0x44>(a0, a2);
    let b1 = _mm256_shuffle_ps::<0xEE>(a0, a2);
    let b2 = _mm256_shuffle_ps::<0x44>(a1, a3);
    let b3 = _mm256_shuffle_ps::<0xEE>(a1, a3);
    let b4 = _mm256_shuffle_ps::<0x44>(a4, a6);
    let b5 = _mm256_shuffle_ps::<0xEE>(a4, a6);
    let b6 = _mm256_shuffle_ps::<0x44>(a5, a7);
    let b7 = _mm256_shuffle_ps::<0xEE>(a5, a7);
    [
        _mm256_permute2f128_ps::<0x20>(b0, b4),
        _mm256_permute2f128_ps::<0x20>(b1, b5),
        _mm256_permute2f128_ps::<0x20>(b2, b6),
        _mm256_permute2f128_ps::<0x20>(b3, b7),
        _mm256_permute2f128_ps::<0x31>(b0, b4),
        _mm256_permute2f128_ps::<0x31>(b1, b5),
        _mm256_permute2f128_ps::<0x31>(b2, b6),
        _mm256_permute2f128_ps::<0x31>(b3, b7),
    ]
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
#[inline(always)]
pub fn weigh_values(
    p: &[f32],
    v: &[f32],
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
fn weigh_columns(
    p: &[f32],
    v: &[f32],
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
            *x = y.mul_add(pj, *x);
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
#[target_feature(enable = "avx2,fma")]
unsafe fn weigh_values_fma(
    p: &[f32],
    v: &[f32],
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
                    8 => weigh_lane::<8>(at, to),
                    7 => weigh_lane::<7>(at, to),
                    6 => weigh_lane::<6>(at, to),
                    5 => weigh_lane::<5>(at, to),
                    4 => weigh_lane::<4>(at, to),
                    3 => weigh_lane::<3>(at, to),
                    2 => weigh_lane::<2>(at, to),
                    _ => weigh_lane::<1>(at, to),
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

/// Where [`weigh_lane`] reads.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct LaneAt<'a> {
    /// The weights of the positions.
    p: &'a [f32],
    /// V, rows of `dv` numbers.
    v: &'a [f32],
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
#[target_feature(enable = "avx2,fma")]
unsafe fn weigh_lane<const W: usize>(at: LaneAt, to: &mut [f32]) {
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
                *rk = _mm256_fmadd_ps(_mm256_loadu_ps(vj.add(LANES * k)), pv, *rk);
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

    #[test]
    fn silu_in_place_equals_silu_number_by_number() {
        // A dense sweep through both range branches of expf (|n| > 126 past |x| ≈ 87.3,
        // > 192 past ≈ 133), the ends of f32 and a tail shorter than a vector.
        let mut x: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 0.005).collect();
        x.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
            1e-40,
            -1e-40,
            0.0,
            -0.0,
            88.72,
            -88.72,
            -103.9,
            150.0,
            -150.0,
        ]);
        crate::ops::assert_in_place_equals_one_by_one(&x, silu_in_place, silu, "silu");
    }

    #[test]
    fn expf_is_within_two_ulp_of_exp() {
        for i in -2000..=200 {
            let x = i as f32 * 0.05;
            let (got, want) = (expf(x), (x as f64).exp());
            let ulp = (want as f32).to_bits().abs_diff(got.to_bits());
            assert!(ulp <= 2, "expf({x}) = {got}, e^x = {want} ({ulp} ulp)");
        }
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(0.0), 1.0);
    }

    #[test]
    fn both_orders_are_the_dot_product_up_to_rounding() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 8.0)
            .collect();
        let y: Vec<f32> = (0..256)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 16.0)
            .collect();
        for n in [16, 64, 100, 256] {
            let exact: f64 = x[..n]
                .iter()
                .zip(&y[..n])
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum();
            for order in [F16Order::Gemm, F16Order::Dot] {
                let got = dot_f16(&x[..n], &y[..n], order) as f64;
                assert!(
                    (got - exact).abs() <= 1e-5 * exact.abs().max(1.0),
                    "{order:?} n={n}: {got} vs {exact}"
                );
            }
        }
    }

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

    /// `dot_f16` at `isa`: the AVX2 kernel from [`Isa::Avx2`], else the statement.
    fn dot_at(isa: Isa, x: &[f32], y: &[f32], order: F16Order) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if fma_at(isa) {
            // SAFETY: an available level with AVX2 and FMA.
            return unsafe { dot_f16_avx2(x, y, order) };
        }
        dot_f16(x, y, order)
    }

    /// The scores of every key in `keys` against `q` at `isa` (eight at a time from
    /// [`Isa::Avx2`]).
    fn dots_at(isa: Isa, keys: &[f32], q: &[f32], order: F16Order, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if fma_at(isa) {
            // SAFETY: an available level with AVX2 and FMA.
            return unsafe { dots_f16_avx2(keys, q, order, out) };
        }
        for (j, o) in out.iter_mut().enumerate() {
            *o = dot_f16(&keys[j * q.len()..][..q.len()], q, order);
        }
    }

    /// The unscaled softmax at `isa` (sixteen wide from [`Isa::Avx512`]).
    fn softmax_at(isa: Isa, row: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if avx512_at(isa) {
            // SAFETY: an available level with AVX-512F, AVX2 and FMA.
            return unsafe { softmax_row_avx512(row) };
        }
        softmax_row(row, 1.0)
    }

    /// The dot at every level this CPU runs equals the scalar statement, bit for bit.
    #[test]
    fn dot_of_every_level_equals_the_scalar_statement() {
        let x: Vec<f32> = (0..300)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let y: Vec<f32> = (0..300)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 13.0)
            .collect();
        for isa in Isa::available() {
            for n in [8, 24, 32, 64, 100, 256, 300] {
                for order in [F16Order::Gemm, F16Order::Dot] {
                    let fast = dot_at(isa, &x[..n], &y[..n], order);
                    assert_eq!(
                        fast.to_bits(),
                        dot_f16(&x[..n], &y[..n], order).to_bits(),
                        "{isa}: {order:?} n={n}"
                    );
                }
            }
        }
    }

    /// The eight-keys-at-a-time scores equal one dot per key, bit for bit, in both
    /// orders: lengths the transposed sum covers and those it leaves to the plain dot,
    /// key counts below, at and past whole eights.
    #[test]
    fn eight_key_dots_equal_one_dot_per_key() {
        let val = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| round_f16((((i * 31 + seed * 17) % 113) as f32 - 56.0) / 9.0))
                .collect()
        };
        for isa in Isa::available() {
            for dk in [8, 24, 32, 40, 64, 256] {
                let q = val(dk, 1);
                for n in [0, 1, 7, 8, 9, 16, 19] {
                    let keys = val(n * dk, 2);
                    for order in [F16Order::Gemm, F16Order::Dot] {
                        let mut fast = vec![0.0f32; n];
                        dots_at(isa, &keys, &q, order, &mut fast);
                        for (j, f) in fast.iter().enumerate() {
                            let want = dot_f16(&keys[j * dk..][..dk], &q, order);
                            let what = format!("{isa}: {order:?} dk={dk} n={n} j={j}");
                            assert_eq!(f.to_bits(), want.to_bits(), "{what}");
                        }
                    }
                }
            }
        }
    }

    /// The sixteen-wide softmax equals the twin bit for bit: every length up to past two
    /// registers, masked (−∞) entries, a fully masked row, and spreads wide enough for
    /// expf's far branches (x − max below −87).
    #[test]
    fn softmax_of_every_level_equals_the_twin() {
        for isa in Isa::available() {
            for n in 1..=40usize {
                for spread in [0.1f32, 3.0, 60.0] {
                    let mut row: Vec<f32> = (0..n)
                        .map(|i| (((i * 37 + n) % 23) as f32 - 11.0) * spread)
                        .collect();
                    if n > 3 {
                        row[n / 2] = f32::NEG_INFINITY;
                    }
                    let mut twin = row.clone();
                    softmax_row(&mut twin, 1.0);
                    softmax_at(isa, &mut row);
                    let bits = |r: &[f32]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&row), bits(&twin), "{isa}: n={n} spread={spread}");
                }
            }
            let mut masked = vec![f32::NEG_INFINITY; 5];
            softmax_at(isa, &mut masked);
            assert_eq!(masked, vec![0.0; 5], "{isa}");
        }
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
        for order in [F16Order::Gemm, F16Order::Dot] {
            let p = AttentionParams {
                causal: true,
                want_weights: true,
                ggml: Some(order),
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

    #[test]
    fn softmax_row_sums_to_one_and_masks() {
        let mut row = vec![1.0, 2.0, f32::NEG_INFINITY, 0.5, 3.0];
        softmax_row(&mut row, 0.5);
        assert_eq!(row[2], 0.0);
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert!(row[4] > row[1] && row[1] > row[0] && row[0] > row[3]);
    }
}
