//! SIMD building blocks for the fast kernels: vectorised exp, erf, tanh and sigmoid, and
//! dot / axpy / sum / max over slices, on AVX2 + FMA when the runtime's instruction-set
//! level ([`crate::runtime::isa`]) has them. Every function falls back to its plain scalar
//! twin (module [`reference`](mod@reference)) below [`Isa::Avx2`].
//!
//! How each function is approximated (written for lucent; the methods are the textbook
//! ones):
//!
//! - exp(x) = 2ⁿ · eʳ with n = round(x / ln 2) and r = x − n·ln 2 ∈ [−ln2/2, ln2/2]
//!   (ln 2 split in a high part with few mantissa bits and a low part, so n·ln2_hi is
//!   exact); eʳ by its Taylor polynomial of degree 7 (truncation < 6e-9 on that
//!   interval); 2ⁿ built in the exponent bits as 2^⌊n/2⌋ · 2^(n−⌊n/2⌋) so that results
//!   down to the subnormal range stay right. Inputs above ln(f32::MAX) give +∞, below
//!   −104 give 0, NaN gives NaN. Relative error ≤ 2e-7 on [−87, 88].
//! - erf(x) by Abramowitz & Stegun 7.1.26: erf(a) = 1 − t·P(t)·e^(−a²) with
//!   t = 1 / (1 + p·a), a = |x|, P of degree 4; absolute error ≤ 1.5e-7 in exact
//!   arithmetic, ≤ 1e-6 in f32. The same form gives erfc(a) = t·P(t)·e^(−a²) without
//!   cancellation, which GELU uses for negative inputs.
//! - σ(x) = 1 / (1 + e^(−x)); tanh(x) = 2σ(2x) − 1 (absolute error ≤ 1e-6).
//! - GELU(x) = ½x(1 + erf(x/√2)); GELU-tanh(x) = ½x(1 + tanh(u)) = x·σ(2u) with
//!   u = √(2/π)(x + 0.044715x³); SiLU(x) = x·σ(x).
//!
//! Slice tails shorter than 8 lanes are copied into a padded vector and go through the
//! same vector code, so every element of a slice is computed the same way.

use crate::runtime::Isa;
use crate::threads::threads;

/// Whether the AVX2 + FMA paths run here: the level of the runtime this thread works for
/// is [`Isa::Avx2`] or above (the runtime caps it to what the CPU runs).
pub fn has_avx2_fma() -> bool {
    cfg!(target_arch = "x86_64") && crate::runtime::isa() >= Isa::Avx2
}

/// An elementwise function the SIMD code knows. (exp, erf, tanh and σ on their own are
/// reached by the tests only; the activations use them inside.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub enum Unary {
    /// eˣ
    Exp,
    /// the error function
    Erf,
    /// the hyperbolic tangent
    Tanh,
    /// σ(x) = 1 / (1 + e⁻ˣ)
    Sigmoid,
    /// max(0, x)
    Relu,
    /// ½x(1 + erf(x/√2))
    Gelu,
    /// ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
    GeluTanh,
    /// x·σ(x)
    Silu,
}

impl Unary {
    /// The plain scalar twin of this function.
    pub fn reference(self, x: f32) -> f32 {
        match self {
            Unary::Exp => reference::exp(x),
            Unary::Erf => reference::erf(x),
            Unary::Tanh => reference::tanh(x),
            Unary::Sigmoid => reference::sigmoid(x),
            Unary::Relu => crate::ops::activation::reference::relu(x),
            Unary::Gelu => crate::ops::activation::reference::gelu(x),
            Unary::GeluTanh => crate::ops::activation::reference::gelu_tanh(x),
            Unary::Silu => crate::ops::activation::reference::silu(x),
        }
    }

    /// Elements below which splitting the work across threads costs more than it saves.
    fn parallel_min(self) -> usize {
        match self {
            Unary::Relu => 1 << 18,
            _ => 1 << 16,
        }
    }
}

/// `dst[i] = f(src[i])` for i < min(src.len(), dst.len()), on one thread.
pub fn map(op: Unary, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    #[cfg(target_arch = "x86_64")]
    if op == Unary::Gelu && crate::runtime::isa() >= Isa::Avx512 {
        // SAFETY: the Avx512 level includes AVX-512 F; both pointers cover n elements.
        unsafe { avx512::map_gelu(src.as_ptr(), dst.as_mut_ptr(), n) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the features were detected above; both pointers cover n elements.
        unsafe { avx2::map(op, src.as_ptr(), dst.as_mut_ptr(), n) };
        return;
    }
    for (d, &s) in dst[..n].iter_mut().zip(&src[..n]) {
        *d = op.reference(s);
    }
}

/// `x[i] = f(x[i])`, on one thread.
pub fn map_in_place(op: Unary, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if op == Unary::Gelu && crate::runtime::isa() >= Isa::Avx512 {
        let p = x.as_mut_ptr();
        // SAFETY: the Avx512 level includes AVX-512 F; source and destination are the
        // same n elements, and the kernel reads each vector before it writes it.
        unsafe { avx512::map_gelu(p, p, x.len()) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        let p = x.as_mut_ptr();
        // SAFETY: features detected; source and destination are the same n elements,
        // and the kernel reads each vector before it writes it.
        unsafe { avx2::map(op, p, p, x.len()) };
        return;
    }
    for v in x.iter_mut() {
        *v = op.reference(*v);
    }
}

/// dst = f(src), split across threads when the slice is large enough to pay for it.
pub fn map_parallel(op: Unary, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let parts = parts_for(n, n, op.parallel_min());
    if parts <= 1 {
        map(op, src, dst);
        return;
    }
    let chunk = n.div_ceil(parts).next_multiple_of(8);
    crate::threads::for_each_chunk_mut(&mut dst[..n], chunk, |c, d| {
        map(op, &src[c * chunk..][..d.len()], d)
    });
}

/// How many parts to split `elements` of work made of `units` independent pieces into:
/// 1 below `min_parallel` elements, else up to [`threads`].
pub(crate) fn parts_for(elements: usize, units: usize, min_parallel: usize) -> usize {
    if elements < min_parallel {
        return 1;
    }
    threads()
        .min(units)
        .min(elements / (min_parallel / 2).max(1))
        .max(1)
}

/// Run `f` on every row (of `d` elements) of `data`, split across threads when `data`
/// holds at least `min_parallel` elements and there is more than one row.
pub(crate) fn for_each_row(
    data: &mut [f32],
    d: usize,
    min_parallel: usize,
    f: impl Fn(&mut [f32]) + Sync,
) {
    for_each_row_group(data, d, min_parallel, |rows| {
        rows.chunks_mut(d).for_each(&f)
    });
}

/// Run `f` on groups of whole rows (of `d` elements) of `data`: all of it on the calling
/// thread below `min_parallel` elements or with one row, else one group per thread's
/// share, as [`for_each_row`] splits them.
pub(crate) fn for_each_row_group(
    data: &mut [f32],
    d: usize,
    min_parallel: usize,
    f: impl Fn(&mut [f32]) + Sync,
) {
    if d == 0 {
        return;
    }
    let rows = data.len() / d;
    let parts = parts_for(data.len(), rows, min_parallel);
    if parts <= 1 {
        f(data);
        return;
    }
    let per = rows.div_ceil(parts) * d;
    crate::threads::for_each_chunk_mut(data, per, |_, c| f(c));
}

/// [`for_each_row_group`] on a copy of `src`, returned: each group's rows are copied
/// into the new buffer by the thread that then runs `f` on them, so the copy is split
/// as the work is (a norm's `x.clone()` then `data_mut()` copied a whole prompt's
/// activations on the calling thread while the others waited).
pub(crate) fn map_row_groups(
    src: &[f32],
    d: usize,
    min_parallel: usize,
    f: impl Fn(&mut [f32]) + Sync,
) -> Vec<f32> {
    let n = src.len();
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let rows = n / d.max(1);
    let parts = parts_for(n, rows, min_parallel);
    let per = if parts <= 1 || d == 0 {
        n
    } else {
        rows.div_ceil(parts) * d
    };
    let copy_and_run = |c: usize, chunk: &mut [std::mem::MaybeUninit<f32>]| {
        let from = &src[c * per..][..chunk.len()];
        // SAFETY: `chunk` and `from` have the same length and do not overlap (one is
        // the new buffer); once written, every f32 of `chunk` is initialised.
        let rows = unsafe {
            std::ptr::copy_nonoverlapping(
                from.as_ptr(),
                chunk.as_mut_ptr().cast::<f32>(),
                from.len(),
            );
            std::slice::from_raw_parts_mut(chunk.as_mut_ptr().cast::<f32>(), from.len())
        };
        if d > 0 {
            f(rows);
        }
    };
    let spare = &mut out.spare_capacity_mut()[..n];
    if per >= n {
        copy_and_run(0, spare);
    } else {
        crate::threads::for_each_chunk_mut(spare, per, copy_and_run);
    }
    // SAFETY: the chunks cover 0..n, and each call wrote every number of its chunk.
    unsafe { out.set_len(n) };
    out
}

/// `Σ a[i]·b[i]` over the common length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; both slices hold at least n elements.
        return unsafe { avx2::dot(a.as_ptr(), b.as_ptr(), n) };
    }
    reference::dot(&a[..n], &b[..n])
}

/// `y[i] += alpha · x[i]` over the common length.
#[cfg(test)]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; both slices hold at least n elements.
        unsafe { avx2::axpy(y.as_mut_ptr(), alpha, x.as_ptr(), n) };
        return;
    }
    reference::axpy(&mut y[..n], alpha, &x[..n])
}

/// `x[i] *= s`.
pub fn scale(x: &mut [f32], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; the pointer covers x.len() elements.
        unsafe { avx2::scale(x.as_mut_ptr(), s, x.len()) };
        return;
    }
    x.iter_mut().for_each(|v| *v *= s);
}

/// `Σ x[i]`.
pub fn sum(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; the pointer covers x.len() elements.
        return unsafe { avx2::sum(x.as_ptr(), x.len()) };
    }
    // In f64: a long f32 running sum drifts (by ~2e-6 over a few hundred numbers), where
    // the AVX2 path's eight lanes keep each partial sum short.
    x.iter().map(|&v| v as f64).sum::<f64>() as f32
}

/// The largest element, ignoring NaN; −∞ for an empty slice.
pub fn max(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; the pointer covers x.len() elements.
        return unsafe { avx2::max(x.as_ptr(), x.len()) };
    }
    reference::max(x)
}

/// In place: `x[i] ← exp((x[i] − shift) · mul)`; returns Σ of the new values.
/// (The middle of a softmax.)
pub fn exp_shifted_sum(x: &mut [f32], shift: f32, mul: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= Isa::Avx512 {
        // SAFETY: the Avx512 level includes AVX-512 F; the pointer covers x.len() elements.
        return unsafe { avx512::exp_shifted_sum(x.as_mut_ptr(), x.len(), shift, mul) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; the pointer covers x.len() elements.
        return unsafe { avx2::exp_shifted_sum(x.as_mut_ptr(), x.len(), shift, mul) };
    }
    // The sum in f64, as in [`sum`].
    let mut s = 0.0f64;
    for v in x.iter_mut() {
        *v = ((*v - shift) * mul).exp();
        s += *v as f64;
    }
    s as f32
}

/// The backward of GELU-tanh: `gx[i] = g[i] · GELU-tanh'(x[i])`, for i < the shortest length.
///
/// With u = √(2/π)(x + 0.044715x³) and s = σ(2u): GELU-tanh(x) = x·s, so
/// d/dx = s + 2x·s·(1 − s)·u'. Both s and 1 − s come from one e = e^(−2u)
/// (s = 1/(1+e), 1 − s = e/(1+e)), so neither suffers cancellation.
pub fn gelu_tanh_backward(x: &[f32], g: &[f32], gx: &mut [f32]) {
    let n = x.len().min(g.len()).min(gx.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; the three pointers cover n elements.
        unsafe { avx2::gelu_tanh_backward(x.as_ptr(), g.as_ptr(), gx.as_mut_ptr(), n) };
        return;
    }
    for ((d, &xv), &gv) in gx[..n].iter_mut().zip(x).zip(g) {
        *d = gv * reference::gelu_tanh_derivative(xv);
    }
}

/// In place: `x[i] ← (x[i] − shift) · inv · gamma[i] + beta[i]` (or without beta): the last step
/// of LayerNorm (shift = μ, inv = 1/σ) and RMSNorm (shift = 0, inv = 1/rms).
pub fn shift_mul_add(x: &mut [f32], shift: f32, inv: f32, gamma: &[f32], beta: Option<&[f32]>) {
    let n = x
        .len()
        .min(gamma.len())
        .min(beta.map_or(usize::MAX, |b| b.len()));
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        let bp = beta.map_or(std::ptr::null(), |b| b.as_ptr());
        // SAFETY: features detected; every pointer covers n elements (bp is checked
        // for null before use).
        unsafe { avx2::shift_mul_add(x.as_mut_ptr(), shift, inv, gamma.as_ptr(), bp, n) };
        return;
    }
    for i in 0..n {
        x[i] = (x[i] - shift) * inv * gamma[i] + beta.map_or(0.0, |b| b[i]);
    }
}

/// `Σ (x[i] − c)²`, the spread of a row about c.
pub fn sum_sq_diff(x: &[f32], c: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; the pointer covers x.len() elements.
        return unsafe { avx2::sum_sq_diff(x.as_ptr(), x.len(), c) };
    }
    // The sum in f64, as in [`sum`].
    x.iter().map(|&v| ((v - c) * (v - c)) as f64).sum::<f64>() as f32
}

/// [`matvec_t`] with w's numbers stored as f16: half the bytes read, each number widened
/// exactly to f32 as it is loaded, then the same sums in the same order — the same
/// results as `matvec_t` on the widened matrix, bit for bit (a decoded token's logits
/// over a tied f16 table: Whisper's 51,864 × d head).
pub fn matvec_t_f16(y: &mut [f32], x: &[f32], w: &[half::f16]) {
    let Some((n, k)) = matvec_rows(y, x, w.len()) else {
        return;
    };
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2, FMA and F16C (all part of Isa::Avx2); y holds n, x holds k, w
        // holds at least n·k halves (u16 bit patterns).
        unsafe { gemv::rows_f16(y.as_mut_ptr(), x.as_ptr(), w.as_ptr().cast::<u16>(), n, k) };
        return;
    }
    let mut row = vec![0.0f32; k];
    for (j, y) in y[..n].iter_mut().enumerate() {
        for (r, h) in row.iter_mut().zip(&w[j * k..(j + 1) * k]) {
            *r = h.to_f32();
        }
        *y = reference::dot(x, &row);
    }
}

/// The rows n and width k of a matrix-vector product over `w_len` numbers; None (y
/// zeroed: empty sums) when x is empty.
fn matvec_rows(y: &mut [f32], x: &[f32], w_len: usize) -> Option<(usize, usize)> {
    let k = x.len();
    if k == 0 {
        y.fill(0.0);
        return None;
    }
    Some((y.len().min(w_len / k), k))
}

/// `y[j] = Σ_p x[p] · w[j·k + p]` for j < y.len(), k = x.len(): a row-major (n, k) matrix
/// (a Linear weight, or the keys of one head) times a vector. Rows that `w` does not
/// hold in full are left untouched.
pub fn matvec_t(y: &mut [f32], x: &[f32], w: &[f32]) {
    let Some((n, k)) = matvec_rows(y, x, w.len()) else {
        return;
    };
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; y holds n, x holds k, w holds at least n·k elements.
        unsafe { gemv::rows(y.as_mut_ptr(), x.as_ptr(), w.as_ptr(), n, k) };
        return;
    }
    for (j, y) in y[..n].iter_mut().enumerate() {
        *y = reference::dot(x, &w[j * k..(j + 1) * k]);
    }
}

/// `y[j] = Σ_p x[p] · b[p·ldb + j]` for j < y.len(), p < x.len(): a vector times the first
/// y.len() columns of a row-major matrix with row stride `ldb` (the weighted sum of the
/// value rows of one head, or a column block of a (k, n) weight). Does nothing unless
/// `b` holds every row and ldb ≥ y.len().
pub fn vecmat(y: &mut [f32], x: &[f32], b: &[f32], ldb: usize) {
    let (n, k) = (y.len(), x.len());
    if n == 0 || ldb < n || (k > 0 && b.len() < (k - 1) * ldb + n) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; y holds n, x holds k, and rows p < k of n elements
        // at stride ldb lie inside b (checked above).
        unsafe { gemv::cols(y.as_mut_ptr(), x.as_ptr(), b.as_ptr(), n, k, ldb) };
        return;
    }
    y.fill(0.0);
    for (p, &xp) in x.iter().enumerate() {
        reference::axpy(y, xp, &b[p * ldb..p * ldb + n]);
    }
}

/// Fused multiply-adds of `rounds` × 12 independent 8-lane chains (AVX2 + FMA; scalar
/// chains below that level), with nothing else in the loop: what one core can do at
/// most, the ceiling every product kernel is measured against (`lucent bench kernels`,
/// "fma peak"). Returns a sum of the chains so the work is kept.
pub fn fma_peak(rounds: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features detected; registers only.
        return unsafe { avx2::fma_chains(rounds) };
    }
    let mut acc = [0.0f32; 96];
    for _ in 0..rounds {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = (i as f32).mul_add(0.999, *a);
        }
    }
    acc.iter().sum()
}

/// The plain scalar twins, computed in f64 where that is the honest formula.
pub mod reference {
    /// eˣ
    pub fn exp(x: f32) -> f32 {
        (x as f64).exp() as f32
    }

    /// erf(x)
    pub fn erf(x: f32) -> f32 {
        libm::erf(x as f64) as f32
    }

    /// tanh(x)
    pub fn tanh(x: f32) -> f32 {
        (x as f64).tanh() as f32
    }

    /// 1 / (1 + e⁻ˣ)
    pub fn sigmoid(x: f32) -> f32 {
        (1.0 / (1.0 + (-(x as f64)).exp())) as f32
    }

    /// d/dx GELU-tanh(x) = s + 2x·s·(1 − s)·u', s = σ(2u), u = √(2/π)(x + 0.044715x³), in f64.
    pub fn gelu_tanh_derivative(x: f32) -> f32 {
        let x = x as f64;
        let c = (2.0 / std::f64::consts::PI).sqrt();
        let u = c * (x + 0.044715 * x * x * x);
        let e = (-2.0 * u).exp();
        let (s, one_minus_s) = (1.0 / (1.0 + e), e / (1.0 + e));
        let du = c * (1.0 + 3.0 * 0.044715 * x * x);
        let d = s + 2.0 * x * s * one_minus_s * du;
        // e overflows to ∞ for very negative x, where the derivative is 0.
        if d.is_nan() && !x.is_nan() {
            0.0
        } else {
            d as f32
        }
    }

    /// `Σ a[i]·b[i]`, left to right in f32.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// `y[i] += alpha · x[i]`
    pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += alpha * x;
        }
    }

    /// The largest element, ignoring NaN.
    pub fn max(x: &[f32]) -> f32 {
        x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The AVX2 + FMA kernels. Every function here requires those features; callers
    //! check [`super::has_avx2_fma`] first.

    use super::Unary;
    use std::arch::x86_64::*;

    /// [`super::fma_peak`]: 12 accumulators, each one FMA per round (a chain per
    /// register, as many chains as the FMA units' latency × throughput needs).
    ///
    /// # Safety
    /// AVX2 + FMA present.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_chains(rounds: usize) -> f32 {
        let (x, y) = (_mm256_set1_ps(0.999), _mm256_set1_ps(1e-3));
        let mut a = [_mm256_setzero_ps(); 12];
        for _ in 0..rounds {
            for a in &mut a {
                *a = _mm256_fmadd_ps(*a, x, y);
            }
        }
        let s = a
            .iter()
            .fold(_mm256_setzero_ps(), |s, &v| _mm256_add_ps(s, v));
        hsum(s)
    }

    pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// ln 2 to 16 significant bits: n · LN2_HI is exact for |n| < 2⁸.
    pub(super) const LN2_HI: f32 = 0.693_145_75;
    /// ln 2 − LN2_HI.
    pub(super) const LN2_LO: f32 = 1.428_606_8e-6;
    /// ln(f32::MAX): above it eˣ overflows.
    pub(super) const EXP_HI: f32 = 88.722_84;
    /// Below it eˣ rounds to 0 even as a subnormal.
    pub(super) const EXP_LO: f32 = -104.0;
    /// 1/k! for k = 2..=7, the Taylor coefficients of eʳ.
    pub(super) const E2: f32 = 1.0 / 2.0;
    pub(super) const E3: f32 = 1.0 / 6.0;
    pub(super) const E4: f32 = 1.0 / 24.0;
    pub(super) const E5: f32 = 1.0 / 120.0;
    pub(super) const E6: f32 = 1.0 / 720.0;
    pub(super) const E7: f32 = 1.0 / 5040.0;
    /// Abramowitz & Stegun 7.1.26.
    pub(super) const AS_P: f32 = 0.327_591_1;
    pub(super) const AS_A1: f32 = 0.254_829_6;
    pub(super) const AS_A2: f32 = -0.284_496_74;
    pub(super) const AS_A3: f32 = 1.421_413_8;
    pub(super) const AS_A4: f32 = -1.453_152;
    pub(super) const AS_A5: f32 = 1.061_405_4;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn splat(v: f32) -> __m256 {
        _mm256_set1_ps(v)
    }

    /// eˣ on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp8(x: __m256) -> __m256 {
        // min/max return their second operand when either is NaN: x second keeps NaN.
        let xc = _mm256_max_ps(splat(EXP_LO), _mm256_min_ps(splat(EXP_HI), x));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(xc, splat(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, splat(LN2_HI), xc);
        let r = _mm256_fnmadd_ps(n, splat(LN2_LO), r);
        let mut p = _mm256_fmadd_ps(splat(E7), r, splat(E6));
        p = _mm256_fmadd_ps(p, r, splat(E5));
        p = _mm256_fmadd_ps(p, r, splat(E4));
        p = _mm256_fmadd_ps(p, r, splat(E3));
        p = _mm256_fmadd_ps(p, r, splat(E2));
        p = _mm256_fmadd_ps(p, r, splat(1.0));
        p = _mm256_fmadd_ps(p, r, splat(1.0));
        // 2ⁿ = 2^n1 · 2^n2 with n1 = ⌊n/2⌋: both factors stay normal for n ∈ [−150, 128].
        let ni = _mm256_cvtps_epi32(n);
        let n1 = _mm256_srai_epi32::<1>(ni);
        let n2 = _mm256_sub_epi32(ni, n1);
        let bias = _mm256_set1_epi32(127);
        let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
        let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
        let y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
        let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, splat(EXP_HI));
        _mm256_blendv_ps(y, splat(f32::INFINITY), over)
    }

    /// |x| and the sign bit of x.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn abs_sign(x: __m256) -> (__m256, __m256) {
        let sign_mask = splat(-0.0);
        (_mm256_andnot_ps(sign_mask, x), _mm256_and_ps(sign_mask, x))
    }

    /// erfc(a) for a ≥ 0 (A&S 7.1.26): t·P(t)·e^(−a²), t = 1 / (1 + p·a).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn erfc_pos8(a: __m256) -> __m256 {
        let t = _mm256_div_ps(splat(1.0), _mm256_fmadd_ps(splat(AS_P), a, splat(1.0)));
        let mut p = _mm256_fmadd_ps(splat(AS_A5), t, splat(AS_A4));
        p = _mm256_fmadd_ps(p, t, splat(AS_A3));
        p = _mm256_fmadd_ps(p, t, splat(AS_A2));
        p = _mm256_fmadd_ps(p, t, splat(AS_A1));
        p = _mm256_mul_ps(p, t);
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
        _mm256_mul_ps(p, e)
    }

    /// erf(x) on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn erf8(x: __m256) -> __m256 {
        let (a, sign) = abs_sign(x);
        let y = _mm256_sub_ps(splat(1.0), erfc_pos8(a));
        _mm256_or_ps(y, sign)
    }

    /// σ(x) on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn sigmoid8(x: __m256) -> __m256 {
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_div_ps(splat(1.0), _mm256_add_ps(splat(1.0), e))
    }

    /// tanh(x) = 1 − 2 / (e^(2x) + 1) on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn tanh8(x: __m256) -> __m256 {
        let e = exp8(_mm256_add_ps(x, x));
        _mm256_sub_ps(
            splat(1.0),
            _mm256_div_ps(splat(2.0), _mm256_add_ps(e, splat(1.0))),
        )
    }

    /// GELU(x) = ½x(1 + erf(x/√2)), with 1 + erf(−a) = erfc(a) for negative x.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu8(x: __m256) -> __m256 {
        let z = _mm256_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2));
        let (a, _) = abs_sign(z);
        let q = erfc_pos8(a);
        let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
        let one_plus_erf = _mm256_blendv_ps(_mm256_sub_ps(splat(2.0), q), q, neg);
        _mm256_mul_ps(_mm256_mul_ps(splat(0.5), x), one_plus_erf)
    }

    /// GELU-tanh(x) = x·σ(2u), u = √(2/π)(x + 0.044715x³).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu_tanh8(x: __m256) -> __m256 {
        const C: f32 = 0.797_884_6; // √(2/π)
        let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        let u = _mm256_mul_ps(splat(C), _mm256_fmadd_ps(splat(0.044715), x3, x));
        _mm256_mul_ps(x, sigmoid8(_mm256_add_ps(u, u)))
    }

    /// SiLU(x) = x·σ(x).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn silu8(x: __m256) -> __m256 {
        _mm256_mul_ps(x, sigmoid8(x))
    }

    /// ReLU(x) = max(0, x) (NaN gives 0, as f32::max does).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn relu8(x: __m256) -> __m256 {
        _mm256_max_ps(x, _mm256_setzero_ps())
    }

    /// Load `n < 8` floats, the other lanes set to `fill`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_tail(p: *const f32, n: usize, fill: f32) -> __m256 {
        let mut buf = [fill; 8];
        // SAFETY: the caller guarantees p covers n < 8 elements.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n) };
        // SAFETY: buf holds 8 floats.
        unsafe { _mm256_loadu_ps(buf.as_ptr()) }
    }

    /// Store the first `n < 8` lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_tail(p: *mut f32, n: usize, v: __m256) {
        let mut buf = [0.0f32; 8];
        // SAFETY: buf holds 8 floats.
        unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), v) };
        // SAFETY: the caller guarantees p covers n < 8 elements.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n) };
    }

    /// Sum of the 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    macro_rules! map_kernel {
        ($name:ident, $f:ident) => {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn $name(src: *const f32, dst: *mut f32, n: usize) {
                let mut i = 0;
                while i + 8 <= n {
                    // SAFETY: i + 8 ≤ n; src and dst cover n elements (they may be equal:
                    // each vector is read before it is written).
                    unsafe { _mm256_storeu_ps(dst.add(i), $f(_mm256_loadu_ps(src.add(i)))) };
                    i += 8;
                }
                if i < n {
                    // SAFETY: n − i < 8 elements remain in both.
                    unsafe { store_tail(dst.add(i), n - i, $f(load_tail(src.add(i), n - i, 0.0))) };
                }
            }
        };
    }
    map_kernel!(map_exp, exp8);
    map_kernel!(map_erf, erf8);
    map_kernel!(map_tanh, tanh8);
    map_kernel!(map_sigmoid, sigmoid8);
    map_kernel!(map_relu, relu8);
    map_kernel!(map_gelu, gelu8);
    map_kernel!(map_gelu_tanh, gelu_tanh8);
    map_kernel!(map_silu, silu8);

    /// dst[i] = op(src[i]) for i < n. Safety: AVX2 + FMA present; src and dst cover n
    /// elements and are either equal or do not overlap.
    pub unsafe fn map(op: Unary, src: *const f32, dst: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match op {
                Unary::Exp => map_exp(src, dst, n),
                Unary::Erf => map_erf(src, dst, n),
                Unary::Tanh => map_tanh(src, dst, n),
                Unary::Sigmoid => map_sigmoid(src, dst, n),
                Unary::Relu => map_relu(src, dst, n),
                Unary::Gelu => map_gelu(src, dst, n),
                Unary::GeluTanh => map_gelu_tanh(src, dst, n),
                Unary::Silu => map_silu(src, dst, n),
            }
        }
    }

    /// gx[i] = g[i] · GELU-tanh'(x[i]) (see [`super::gelu_tanh_backward`]).
    /// Safety: AVX2 + FMA present; the pointers cover n elements.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn gelu_tanh_backward(x: *const f32, g: *const f32, gx: *mut f32, n: usize) {
        const C: f32 = 0.797_884_6; // √(2/π)
        let one = splat(1.0);
        let kernel = |xv: __m256, gv: __m256| {
            let x2 = _mm256_mul_ps(xv, xv);
            let u = _mm256_mul_ps(
                splat(C),
                _mm256_fmadd_ps(_mm256_mul_ps(splat(0.044715), x2), xv, xv),
            );
            // e = e^(−2u), the argument capped at 80 so that e stays finite (where the cap
            // bites, s < 1e-34 and the derivative is 0 to f32 precision).
            let e = exp8(_mm256_min_ps(splat(80.0), _mm256_mul_ps(splat(-2.0), u)));
            let inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
            let one_minus_s = _mm256_mul_ps(e, inv);
            let du = _mm256_mul_ps(splat(C), _mm256_fmadd_ps(splat(3.0 * 0.044715), x2, one));
            let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(xv, xv), one_minus_s), du);
            // s + 2x·s·(1−s)·u' = s·(1 + 2x(1−s)u')
            _mm256_mul_ps(gv, _mm256_mul_ps(inv, _mm256_add_ps(one, t)))
        };
        let mut i = 0;
        // SAFETY (loads and stores): i + 8 ≤ n, or the tail helpers move n − i < 8 lanes.
        unsafe {
            while i + 8 <= n {
                let r = kernel(_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(g.add(i)));
                _mm256_storeu_ps(gx.add(i), r);
                i += 8;
            }
            if i < n {
                let r = kernel(
                    load_tail(x.add(i), n - i, 0.0),
                    load_tail(g.add(i), n - i, 0.0),
                );
                store_tail(gx.add(i), n - i, r);
            }
        }
    }

    /// Σ a[i]·b[i], four accumulators of 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads): i + width ≤ n and both pointers cover n elements.
        unsafe {
            while i + 32 <= n {
                for (j, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps(
                        _mm256_loadu_ps(a.add(i + 8 * j)),
                        _mm256_loadu_ps(b.add(i + 8 * j)),
                        *acc,
                    );
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] =
                    _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
                i += 8;
            }
            if i < n {
                acc[1] = _mm256_fmadd_ps(
                    load_tail(a.add(i), n - i, 0.0),
                    load_tail(b.add(i), n - i, 0.0),
                    acc[1],
                );
            }
        }
        hsum(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ))
    }

    #[cfg(test)]
    /// y[i] += alpha · x[i].
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy(y: *mut f32, alpha: f32, x: *const f32, n: usize) {
        let av = splat(alpha);
        let mut i = 0;
        // SAFETY (all accesses): i + width ≤ n and both pointers cover n elements.
        unsafe {
            while i + 8 <= n {
                let v = _mm256_fmadd_ps(av, _mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(y.add(i)));
                _mm256_storeu_ps(y.add(i), v);
                i += 8;
            }
            while i < n {
                *y.add(i) = alpha.mul_add(*x.add(i), *y.add(i));
                i += 1;
            }
        }
    }

    /// x[i] *= s.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scale(x: *mut f32, s: f32, n: usize) {
        let sv = splat(s);
        let mut i = 0;
        // SAFETY (all accesses): i + width ≤ n and x covers n elements.
        unsafe {
            while i + 8 <= n {
                _mm256_storeu_ps(x.add(i), _mm256_mul_ps(sv, _mm256_loadu_ps(x.add(i))));
                i += 8;
            }
            while i < n {
                *x.add(i) *= s;
                i += 1;
            }
        }
    }

    /// Σ x[i].
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn sum(x: *const f32, n: usize) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads): i + width ≤ n and x covers n elements.
        unsafe {
            while i + 32 <= n {
                for (j, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_add_ps(*acc, _mm256_loadu_ps(x.add(i + 8 * j)));
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(x.add(i)));
                i += 8;
            }
            if i < n {
                acc[1] = _mm256_add_ps(acc[1], load_tail(x.add(i), n - i, 0.0));
            }
        }
        hsum(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ))
    }

    /// Σ (x[i] − c)².
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn sum_sq_diff(x: *const f32, n: usize, c: f32) -> f32 {
        let cv = splat(c);
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut i = 0;
        // SAFETY (all loads): i + width ≤ n and x covers n elements.
        unsafe {
            while i + 16 <= n {
                for (j, acc) in acc.iter_mut().enumerate() {
                    let d = _mm256_sub_ps(_mm256_loadu_ps(x.add(i + 8 * j)), cv);
                    *acc = _mm256_fmadd_ps(d, d, *acc);
                }
                i += 16;
            }
            while i + 8 <= n {
                let d = _mm256_sub_ps(_mm256_loadu_ps(x.add(i)), cv);
                acc[0] = _mm256_fmadd_ps(d, d, acc[0]);
                i += 8;
            }
            if i < n {
                // padded with c: those lanes add (c − c)² = 0
                let d = _mm256_sub_ps(load_tail(x.add(i), n - i, c), cv);
                acc[1] = _mm256_fmadd_ps(d, d, acc[1]);
            }
        }
        hsum(_mm256_add_ps(acc[0], acc[1]))
    }

    /// The largest element, ignoring NaN.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn max(x: *const f32, n: usize) -> f32 {
        let mut acc = [splat(f32::NEG_INFINITY); 2];
        let mut i = 0;
        // max_ps(v, acc) returns acc when v is NaN: NaN lanes are skipped.
        // SAFETY (all loads): i + width ≤ n and x covers n elements.
        unsafe {
            while i + 16 <= n {
                acc[0] = _mm256_max_ps(_mm256_loadu_ps(x.add(i)), acc[0]);
                acc[1] = _mm256_max_ps(_mm256_loadu_ps(x.add(i + 8)), acc[1]);
                i += 16;
            }
            while i + 8 <= n {
                acc[0] = _mm256_max_ps(_mm256_loadu_ps(x.add(i)), acc[0]);
                i += 8;
            }
            if i < n {
                acc[1] = _mm256_max_ps(load_tail(x.add(i), n - i, f32::NEG_INFINITY), acc[1]);
            }
        }
        let m = _mm256_max_ps(acc[0], acc[1]);
        let mut lanes = [0.0f32; 8];
        // SAFETY: lanes holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
        lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    }

    /// x[i] ← exp((x[i] − shift)·mul); returns the sum.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_shifted_sum(x: *mut f32, n: usize, shift: f32, mul: f32) -> f32 {
        let (sv, mv) = (splat(shift), splat(mul));
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY (all accesses): i + width ≤ n and x covers n elements.
        unsafe {
            while i + 8 <= n {
                let e = exp8(_mm256_mul_ps(
                    _mm256_sub_ps(_mm256_loadu_ps(x.add(i)), sv),
                    mv,
                ));
                _mm256_storeu_ps(x.add(i), e);
                acc = _mm256_add_ps(acc, e);
                i += 8;
            }
            if i < n {
                // padded with −∞: those lanes add e^−∞ = 0
                let v = load_tail(x.add(i), n - i, f32::NEG_INFINITY);
                let e = exp8(_mm256_mul_ps(_mm256_sub_ps(v, sv), mv));
                store_tail(x.add(i), n - i, e);
                acc = _mm256_add_ps(acc, e);
            }
        }
        hsum(acc)
    }

    /// x[i] ← (x[i] − shift)·inv·gamma[i] + beta[i] (beta may be null).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn shift_mul_add(
        x: *mut f32,
        shift: f32,
        inv: f32,
        gamma: *const f32,
        beta: *const f32,
        n: usize,
    ) {
        let (sv, iv) = (splat(shift), splat(inv));
        let mut i = 0;
        // SAFETY (all accesses): i + width ≤ n and every non-null pointer covers n.
        unsafe {
            while i + 8 <= n {
                let g = _mm256_mul_ps(_mm256_loadu_ps(gamma.add(i)), iv);
                let d = _mm256_sub_ps(_mm256_loadu_ps(x.add(i)), sv);
                let b = if beta.is_null() {
                    _mm256_setzero_ps()
                } else {
                    _mm256_loadu_ps(beta.add(i))
                };
                _mm256_storeu_ps(x.add(i), _mm256_fmadd_ps(d, g, b));
                i += 8;
            }
            while i < n {
                let b = if beta.is_null() { 0.0 } else { *beta.add(i) };
                *x.add(i) = (*x.add(i) - shift).mul_add(*gamma.add(i) * inv, b);
                i += 1;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! GELU and the softmax's exponentials sixteen lanes wide, for the Avx512 level:
    //! each lane takes exactly the AVX2 kernels' steps (the same constants, the same
    //! operations in the same order, all correctly rounded per lane), so every level
    //! from Avx2 up gives the same bits; the sum of [`exp_shifted_sum`] is kept in
    //! eight lanes, added half by half in the AVX2 loop's order.

    use super::avx2::{
        hsum, AS_A1, AS_A2, AS_A3, AS_A4, AS_A5, AS_P, E2, E3, E4, E5, E6, E7, EXP_HI, EXP_LO,
        LN2_HI, LN2_LO, LOG2E,
    };
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn splat(v: f32) -> __m512 {
        _mm512_set1_ps(v)
    }

    /// eˣ on 16 lanes (`avx2::exp8`'s steps).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn exp16(x: __m512) -> __m512 {
        // min/max return their second operand when either is NaN: x second keeps NaN.
        let xc = _mm512_max_ps(splat(EXP_LO), _mm512_min_ps(splat(EXP_HI), x));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(xc, splat(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, splat(LN2_HI), xc);
        let r = _mm512_fnmadd_ps(n, splat(LN2_LO), r);
        let mut p = _mm512_fmadd_ps(splat(E7), r, splat(E6));
        p = _mm512_fmadd_ps(p, r, splat(E5));
        p = _mm512_fmadd_ps(p, r, splat(E4));
        p = _mm512_fmadd_ps(p, r, splat(E3));
        p = _mm512_fmadd_ps(p, r, splat(E2));
        p = _mm512_fmadd_ps(p, r, splat(1.0));
        p = _mm512_fmadd_ps(p, r, splat(1.0));
        // 2ⁿ = 2^n1 · 2^n2 with n1 = ⌊n/2⌋: both factors stay normal for n ∈ [−150, 128].
        let ni = _mm512_cvtps_epi32(n);
        let n1 = _mm512_srai_epi32::<1>(ni);
        let n2 = _mm512_sub_epi32(ni, n1);
        let bias = _mm512_set1_epi32(127);
        let s1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n1, bias)));
        let s2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n2, bias)));
        let y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
        let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, splat(EXP_HI));
        _mm512_mask_blend_ps(over, y, splat(f32::INFINITY))
    }

    /// GELU(x) on 16 lanes (`avx2::gelu8`'s steps: erfc of |x|/√2 by A&S 7.1.26).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn gelu16(x: __m512) -> __m512 {
        let z = _mm512_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2));
        let a = _mm512_castsi512_ps(_mm512_and_si512(
            _mm512_castps_si512(z),
            _mm512_set1_epi32(0x7fff_ffff),
        ));
        let t = _mm512_div_ps(splat(1.0), _mm512_fmadd_ps(splat(AS_P), a, splat(1.0)));
        let mut p = _mm512_fmadd_ps(splat(AS_A5), t, splat(AS_A4));
        p = _mm512_fmadd_ps(p, t, splat(AS_A3));
        p = _mm512_fmadd_ps(p, t, splat(AS_A2));
        p = _mm512_fmadd_ps(p, t, splat(AS_A1));
        p = _mm512_mul_ps(p, t);
        let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a)));
        let q = _mm512_mul_ps(p, e);
        let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
        let one_plus_erf = _mm512_mask_blend_ps(neg, _mm512_sub_ps(splat(2.0), q), q);
        _mm512_mul_ps(_mm512_mul_ps(splat(0.5), x), one_plus_erf)
    }

    /// Lanes 8..16 (AVX-512 F has no f32 extract of a half: the bits as f64s).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn high8(v: __m512) -> __m256 {
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
    }

    /// The mask of the first `n < 16` lanes.
    fn first(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }

    /// dst[i] = GELU(src[i]) for i < n.
    ///
    /// # Safety
    /// AVX-512 F; src and dst cover n elements and are either equal or do not overlap.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn map_gelu(src: *const f32, dst: *mut f32, n: usize) {
        let mut i = 0;
        // SAFETY (all accesses): i + 16 ≤ n, or a mask of the n − i < 16 lanes left;
        // each vector is read before it is written.
        unsafe {
            while i + 16 <= n {
                _mm512_storeu_ps(dst.add(i), gelu16(_mm512_loadu_ps(src.add(i))));
                i += 16;
            }
            if i < n {
                let m = first(n - i);
                let v = _mm512_maskz_loadu_ps(m, src.add(i));
                _mm512_mask_storeu_ps(dst.add(i), m, gelu16(v));
            }
        }
    }

    /// x[i] ← exp((x[i] − shift)·mul); returns the sum, in `avx2::exp_shifted_sum`'s
    /// eight lanes and order.
    ///
    /// # Safety
    /// AVX-512 F; x covers n elements.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn exp_shifted_sum(x: *mut f32, n: usize, shift: f32, mul: f32) -> f32 {
        let (sv, mv) = (splat(shift), splat(mul));
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY (all accesses): i + 16 ≤ n, or a mask of the n − i < 16 lanes left.
        unsafe {
            while i + 16 <= n {
                let e = exp16(_mm512_mul_ps(
                    _mm512_sub_ps(_mm512_loadu_ps(x.add(i)), sv),
                    mv,
                ));
                _mm512_storeu_ps(x.add(i), e);
                acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
                acc = _mm256_add_ps(acc, high8(e));
                i += 16;
            }
            if i < n {
                // the lanes past n read −∞ and add e^−∞ = 0, as the AVX2 tail's padding
                let m = first(n - i);
                let v = _mm512_mask_loadu_ps(splat(f32::NEG_INFINITY), m, x.add(i));
                let e = exp16(_mm512_mul_ps(_mm512_sub_ps(v, sv), mv));
                _mm512_mask_storeu_ps(x.add(i), m, e);
                acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
                if n - i > 8 {
                    acc = _mm256_add_ps(acc, high8(e));
                }
            }
        }
        hsum(acc)
    }
}

/// Matrix-vector products (one row times a matrix), on AVX2 + FMA; the safe entry points
/// are [`matvec_t`] and [`vecmat`].
#[cfg(target_arch = "x86_64")]
mod gemv {
    use std::arch::x86_64::*;

    /// How far ahead of the rows being read the row kernels prefetch W, in bytes: 8 KB
    /// measured best for Whisper's 51,864 × 384 and × 512 f16 heads (a sweep of 4–16 KB on
    /// Zen 4; without it the head read at 8 GB/s, with it at 25–30).
    const PREFETCH_AHEAD: usize = 8192;

    /// One body for [`rows`] (f32 numbers) and [`rows_f16`] (f16 bit patterns, widened by
    /// F16C as they are loaded): four rows at a time with two accumulators each over
    /// steps of 16, then 8, the scalar tail, the last rows one at a time through a dot —
    /// so the f16 kernel's sums are the f32 kernel's on the widened numbers, bit for bit.
    /// `$load` loads 8 numbers as f32 lanes, `$wide` one number as f32, `$row_dot(x, w,
    /// j, k)` is row j's dot through [`super::avx2::dot`] (for the last n mod 4 rows).
    macro_rules! gemv_rows {
        ($(#[$doc:meta])* $name:ident, $t:ty, $features:literal, $load:expr, $wide:expr, $row_dot:expr) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub unsafe fn $name(y: *mut f32, x: *const f32, w: *const $t, n: usize, k: usize) {
                /// Bytes of W one step of 16 columns reads over the four rows.
                const STEP_BYTES: usize = 4 * 16 * std::mem::size_of::<$t>();
                let (load, wide, row_dot) = ($load, $wide, $row_dot);
                let mut j = 0;
                // SAFETY (all accesses): row r < n starts at r·k and every load stays
                // below p + 16 ≤ k (or p + 8 ≤ k) inside it.
                unsafe {
                    while j + 4 <= n {
                        let r = [
                            w.add(j * k),
                            w.add((j + 1) * k),
                            w.add((j + 2) * k),
                            w.add((j + 3) * k),
                        ];
                        let mut a = [_mm256_setzero_ps(); 8];
                        let mut p = 0;
                        // The four rows are one stretch of memory read as four short
                        // interleaved streams, which the hardware prefetcher does not
                        // follow: each step asks for the stretch PREFETCH_AHEAD bytes on,
                        // as many bytes as the step reads (a hint: it cannot fault).
                        let mut ahead = r[0].cast::<i8>().wrapping_add(PREFETCH_AHEAD);
                        while p + 16 <= k {
                            for line in 0..STEP_BYTES / 64 {
                                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line));
                            }
                            ahead = ahead.wrapping_add(STEP_BYTES);
                            let x0 = _mm256_loadu_ps(x.add(p));
                            let x1 = _mm256_loadu_ps(x.add(p + 8));
                            for q in 0..4 {
                                a[2 * q] = _mm256_fmadd_ps(load(r[q].add(p)), x0, a[2 * q]);
                                a[2 * q + 1] =
                                    _mm256_fmadd_ps(load(r[q].add(p + 8)), x1, a[2 * q + 1]);
                            }
                            p += 16;
                        }
                        while p + 8 <= k {
                            let x0 = _mm256_loadu_ps(x.add(p));
                            for q in 0..4 {
                                a[2 * q] = _mm256_fmadd_ps(load(r[q].add(p)), x0, a[2 * q]);
                            }
                            p += 8;
                        }
                        for q in 0..4 {
                            let mut s = super::avx2::hsum(_mm256_add_ps(a[2 * q], a[2 * q + 1]));
                            for pp in p..k {
                                s = (*x.add(pp)).mul_add(wide(r[q].add(pp)), s);
                            }
                            *y.add(j + q) = s;
                        }
                        j += 4;
                    }
                    // The last rows one at a time.
                    while j < n {
                        *y.add(j) = row_dot(x, w, j, k);
                        j += 1;
                    }
                }
            }
        };
    }

    gemv_rows!(
        /// y[j] = Σ_p x[p] · w[j·k + p] for j < n: w is (n, k) row-major (a Linear weight).
        ///
        /// # Safety
        /// AVX2 + FMA present; x covers k, w covers n·k, y covers n elements.
        rows,
        f32,
        "avx2,fma",
        |q: *const f32| unsafe { _mm256_loadu_ps(q) },
        |q: *const f32| unsafe { *q },
        |x: *const f32, w: *const f32, j: usize, k: usize| unsafe {
            super::avx2::dot(x, w.add(j * k), k)
        }
    );

    gemv_rows!(
        /// [`rows`] over f16 numbers (bit patterns), widened by F16C as they are loaded:
        /// the same results as `rows` on the widened matrix.
        ///
        /// # Safety
        /// AVX2, FMA and F16C present; x covers k, w covers n·k halves, y covers n elements.
        rows_f16,
        u16,
        "avx2,fma,f16c",
        |q: *const u16| unsafe { _mm256_cvtph_ps(_mm_loadu_si128(q.cast::<__m128i>())) },
        |q: *const u16| half::f16::from_bits(unsafe { *q }).to_f32(),
        |x: *const f32, w: *const u16, j: usize, k: usize| {
            // Widened first (on the stack for any model's width up to 4,096), then the
            // same dot as the f32 rows.
            let mut stack = [0.0f32; 4096];
            let mut heap = Vec::new();
            let row: &mut [f32] = if k <= stack.len() {
                &mut stack[..k]
            } else {
                heap.resize(k, 0.0);
                &mut heap
            };
            for (p, v) in row.iter_mut().enumerate() {
                *v = half::f16::from_bits(unsafe { *w.add(j * k + p) }).to_f32();
            }
            unsafe { super::avx2::dot(x, row.as_ptr(), k) }
        }
    );

    /// y[j] = Σ_p x[p] · b[p·ldb + j] for j < n: columns of a (k, ldb) row-major matrix
    /// whose block starts at `b`.
    ///
    /// # Safety
    /// AVX2 + FMA present; x covers k, y covers n elements, b covers rows p < k of
    /// `n` elements at stride ldb.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn cols(y: *mut f32, x: *const f32, b: *const f32, n: usize, k: usize, ldb: usize) {
        let mut j = 0;
        // SAFETY (all accesses): columns j..j+width < n of rows p < k.
        unsafe {
            while j + 64 <= n {
                let mut a = [_mm256_setzero_ps(); 8];
                for p in 0..k {
                    let xv = _mm256_set1_ps(*x.add(p));
                    let row = b.add(p * ldb + j);
                    for (q, a) in a.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row.add(8 * q)), *a);
                    }
                }
                for (q, a) in a.iter().enumerate() {
                    _mm256_storeu_ps(y.add(j + 8 * q), *a);
                }
                j += 64;
            }
            while j + 8 <= n {
                let mut a = _mm256_setzero_ps();
                for p in 0..k {
                    a = _mm256_fmadd_ps(
                        _mm256_set1_ps(*x.add(p)),
                        _mm256_loadu_ps(b.add(p * ldb + j)),
                        a,
                    );
                }
                _mm256_storeu_ps(y.add(j), a);
                j += 8;
            }
            while j < n {
                let mut s = 0.0f32;
                for p in 0..k {
                    s = (*x.add(p)).mul_add(*b.add(p * ldb + j), s);
                }
                *y.add(j) = s;
                j += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Run `f` in a one-thread runtime at every instruction-set level this CPU has, so the
    /// AVX2 kernels and the scalar twins both meet the checks.
    fn every_level(f: impl Fn() + Sync) {
        for isa in crate::Isa::available() {
            at_level(isa, || {
                assert_eq!(has_avx2_fma(), isa >= Isa::Avx2);
                f()
            });
        }
    }

    /// Run `f` in a one-thread runtime capped at instruction-set level `isa`.
    fn at_level<R: Send>(isa: Isa, f: impl FnOnce() -> R + Send) -> R {
        crate::Runtime::builder()
            .threads(1)
            .isa(isa)
            .build()
            .expect("a runtime")
            .install(f)
    }

    fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .collect()
    }

    fn mapped(op: Unary, xs: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; xs.len()];
        map(op, xs, &mut out);
        out
    }

    /// map_row_groups returns the copy with `f` run on every row exactly once, each
    /// row where it was, at one and two threads, below and above the split's threshold,
    /// and leaves the source alone.
    #[test]
    fn map_row_groups_runs_f_on_a_copy_of_every_row() {
        let d = 24;
        for (rows, min_parallel) in [(1, 16), (7, 1 << 20), (101, 64), (1000, 256)] {
            let src: Vec<f32> = (0..rows * d).map(|i| i as f32 * 0.5).collect();
            // Each row's numbers doubled plus its first number: a row moved or run twice
            // shows.
            let f = |rows: &mut [f32]| {
                for row in rows.chunks_mut(d) {
                    let first = row[0];
                    row.iter_mut().for_each(|v| *v = 2.0 * *v + first);
                }
            };
            let mut want = src.clone();
            f(&mut want);
            for threads in [1, 2] {
                let rt = crate::Runtime::builder()
                    .threads(threads)
                    .build()
                    .expect("a runtime");
                let got = rt.install(|| map_row_groups(&src, d, min_parallel, f));
                assert_eq!(got, want, "{rows} rows, {threads} threads");
            }
            assert_eq!(src[rows * d - 1], (rows * d - 1) as f32 * 0.5);
        }
    }

    #[test]
    fn gelu_tanh_backward_equals_f64_twin() {
        every_level(|| {
            let mut xs = grid(-12.0, 12.0, 100_000);
            xs.extend([0.0, -0.0, 1e-30, -30.0, 30.0, -200.0, 200.0]);
            let g: Vec<f32> = (0..xs.len()).map(|i| 1.0 - (i % 7) as f32 * 0.3).collect();
            let mut fast = vec![0.0; xs.len()];
            gelu_tanh_backward(&xs, &g, &mut fast);
            for ((&x, &gv), &f) in xs.iter().zip(&g).zip(&fast) {
                let want = gv * reference::gelu_tanh_derivative(x);
                let err = (f - want).abs();
                assert!(
                    err <= 2e-6 * (1.0 + want.abs()),
                    "x={x} g={gv}: {f} vs {want}"
                );
            }
        });
    }

    #[test]
    fn exp_relative_error_on_dense_grid_and_random() {
        every_level(|| {
            let mut xs = grid(-87.0, 88.0, 400_000);
            let mut rng = StdRng::seed_from_u64(3);
            xs.extend((0..100_000).map(|_| rng.random_range(-87.0f32..88.0)));
            xs.extend([
                0.0,
                -0.0,
                1e-30,
                -1e-30,
                88.0,
                -87.0,
                0.5 * std::f32::consts::LN_2,
            ]);
            let got = mapped(Unary::Exp, &xs);
            let mut worst = 0.0f64;
            for (&x, &y) in xs.iter().zip(&got) {
                let want = (x as f64).exp();
                worst = worst.max(((y as f64) - want).abs() / want);
            }
            // Tolerance: 2e-7 relative (about 1.7 ulp of f32).
            assert!(worst <= 2e-7, "exp max relative error {worst:e}");
        });
    }

    #[test]
    fn exp_edges_nan_and_infinities() {
        every_level(|| {
            let xs = [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                89.0,
                88.8,
                -104.0,
                -200.0,
                -95.0,
                -87.5,
            ];
            let got = mapped(Unary::Exp, &xs);
            assert!(got[0].is_nan());
            assert_eq!(got[1], f32::INFINITY);
            assert_eq!(got[2], 0.0);
            assert_eq!(got[3], f32::INFINITY);
            assert_eq!(got[4], f32::INFINITY);
            assert_eq!(got[5], 0.0);
            assert_eq!(got[6], 0.0);
            // subnormal results: within 1e-3 relative (subnormals have fewer bits)
            for i in 7..9 {
                let want = (xs[i] as f64).exp();
                assert!(
                    ((got[i] as f64 - want) / want).abs() < 1e-3,
                    "exp({}) = {} vs {want}",
                    xs[i],
                    got[i]
                );
            }
        });
    }

    fn max_abs_err(op: Unary, xs: &[f32], f: impl Fn(f64) -> f64) -> f64 {
        let got = mapped(op, xs);
        xs.iter()
            .zip(&got)
            .map(|(&x, &y)| (y as f64 - f(x as f64)).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn erf_and_tanh_absolute_error() {
        every_level(|| {
            let mut xs = grid(-10.0, 10.0, 400_000);
            let mut rng = StdRng::seed_from_u64(5);
            xs.extend((0..100_000).map(|_| rng.random_range(-12.0f32..12.0)));
            xs.extend([0.0, -0.0, 1e-20, -1e-20, 1e6, -1e6, f32::MAX, f32::MIN]);
            // Tolerance: 1e-6 absolute for both.
            let e = max_abs_err(Unary::Erf, &xs, libm::erf);
            assert!(e <= 1e-6, "erf max abs error {e:e}");
            let t = max_abs_err(Unary::Tanh, &xs, f64::tanh);
            assert!(t <= 1e-6, "tanh max abs error {t:e}");
            let s = max_abs_err(Unary::Sigmoid, &xs, |x| 1.0 / (1.0 + (-x).exp()));
            assert!(s <= 1e-6, "sigmoid max abs error {s:e}");
        });
    }

    #[test]
    fn erf_tanh_sigmoid_edges() {
        every_level(|| {
            let xs = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
            for op in [Unary::Erf, Unary::Tanh] {
                let got = mapped(op, &xs);
                assert!(got[0].is_nan(), "{op:?}(NaN)");
                assert_eq!(got[1], 1.0, "{op:?}(inf)");
                assert_eq!(got[2], -1.0, "{op:?}(-inf)");
            }
            let got = mapped(Unary::Sigmoid, &xs);
            assert!(got[0].is_nan());
            assert_eq!((got[1], got[2]), (1.0, 0.0));
            let got = mapped(
                Unary::Relu,
                &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.5, 2.0],
            );
            assert_eq!(got, [0.0, f32::INFINITY, 0.0, 0.0, 2.0]);
        });
    }

    #[test]
    fn activations_match_their_twins() {
        every_level(|| {
            let mut xs = grid(-12.0, 12.0, 200_003);
            xs.extend([0.0, -0.0, 1e-30, 50.0, -50.0]);
            // Tolerance: 1e-6 · (1 + |x|): the twins' 1e-6 function error scaled by the x factor.
            for op in [
                Unary::Relu,
                Unary::Gelu,
                Unary::GeluTanh,
                Unary::Silu,
                Unary::Sigmoid,
            ] {
                let got = mapped(op, &xs);
                for (&x, &y) in xs.iter().zip(&got) {
                    let want = op.reference(x);
                    assert!(
                        (y - want).abs() <= 1e-6 * (1.0 + x.abs()),
                        "{op:?}({x}) = {y} vs {want}"
                    );
                }
            }
        });
    }

    #[test]
    fn in_place_and_parallel_equal_map() {
        every_level(|| {
            let mut rng = StdRng::seed_from_u64(9);
            for n in [0, 1, 3, 7, 8, 9, 17, 33, 65, 129, 1000, 200_001] {
                let xs: Vec<f32> = (0..n).map(|_| rng.random_range(-6.0f32..6.0)).collect();
                for op in [Unary::Gelu, Unary::Exp, Unary::Relu] {
                    let want = mapped(op, &xs);
                    let mut a = xs.clone();
                    map_in_place(op, &mut a);
                    assert_eq!(a, want);
                    let mut b = vec![0.0; n];
                    map_parallel(op, &xs, &mut b);
                    assert_eq!(b, want);
                }
            }
        });
    }

    #[test]
    fn reductions_match_twins() {
        every_level(|| {
            let mut rng = StdRng::seed_from_u64(11);
            for n in [0, 1, 3, 7, 8, 9, 17, 31, 33, 65, 129, 384, 576, 1000] {
                let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
                let mag: f64 = a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &y)| (x as f64 * y as f64).abs())
                    .sum();
                // Tolerance: 1e-6 · Σ|a·b| (f32 rounding of a blocked sum).
                assert!(
                    (dot(&a, &b) as f64 - exact).abs() <= 1e-6 * (1.0 + mag),
                    "dot n={n}"
                );
                let s: f64 = a.iter().map(|&x| x as f64).sum();
                assert!(
                    (sum(&a) as f64 - s).abs() <= 1e-6 * (1.0 + n as f64),
                    "sum n={n}"
                );
                assert_eq!(max(&a), reference::max(&a), "max n={n}");
                let mut y = b.clone();
                axpy(&mut y, 0.75, &a);
                let mut y2 = b.clone();
                reference::axpy(&mut y2, 0.75, &a);
                for (u, v) in y.iter().zip(&y2) {
                    assert!((u - v).abs() <= 1e-6, "axpy n={n}");
                }
            }
            assert_eq!(
                max(&[
                    f32::NAN,
                    1.0,
                    f32::NAN,
                    -3.0,
                    2.0,
                    0.0,
                    0.0,
                    0.0,
                    0.0,
                    f32::NAN
                ]),
                2.0
            );
            assert_eq!(max(&[]), f32::NEG_INFINITY);
        });
    }

    /// GELU and the softmax's exponentials give the same bits at the Avx512 level as
    /// at the Avx2 level (the sixteen-lane kernels take the eight-lane ones' steps),
    /// over the whole range, the edges, NaN and ±∞, at every length up to 40 (whole
    /// and partial vectors of 8 and 16), in place and not, with shifts and scales of
    /// both signs. On a CPU without AVX-512 only the Avx2 level runs (nothing to
    /// compare), so the test holds where the level exists.
    #[test]
    fn avx512_gelu_and_exp_equal_the_avx2_kernels_bit_for_bit() {
        let mut xs = grid(-120.0, 120.0, 20_000);
        xs.extend(grid(-6.0, 6.0, 20_000));
        let mut rng = StdRng::seed_from_u64(7);
        xs.extend((0..4000).map(|_| f32::from_bits(rng.random::<u32>())));
        xs.extend([
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            -f32::from_bits(1),
            88.72,
            88.73,
            -104.0,
            -104.5,
        ]);
        let run = |isa: Isa| {
            at_level(isa, || {
                let mut out = Vec::new();
                let mut sums = Vec::new();
                out.push(mapped(Unary::Gelu, &xs));
                let mut inplace = xs.clone();
                map_in_place(Unary::Gelu, &mut inplace);
                out.push(inplace);
                for len in (0..=40).chain([xs.len()]) {
                    let row = &xs[xs.len() - len..];
                    out.push(mapped(Unary::Gelu, row));
                    for (shift, mul) in [(0.0, 1.0), (3.5, 0.125), (-2.0, -0.5), (1e3, 1.0)] {
                        // finite rows only: a softmax's row minus its maximum
                        let mut e: Vec<f32> = row
                            .iter()
                            .map(|v| {
                                if v.is_finite() {
                                    v.clamp(-200.0, 200.0)
                                } else {
                                    1.0
                                }
                            })
                            .collect();
                        sums.push(exp_shifted_sum(&mut e, shift, mul).to_bits());
                        out.push(e);
                    }
                }
                (out, sums)
            })
        };
        let levels = crate::Isa::available();
        if !levels.contains(&Isa::Avx512) {
            return;
        }
        let (want, want_sums) = run(Isa::Avx2);
        let (got, got_sums) = run(Isa::Avx512);
        assert_eq!(want_sums, got_sums);
        for (w, g) in want.iter().zip(&got) {
            let (w, g): (Vec<u32>, Vec<u32>) = (
                w.iter().map(|v| v.to_bits()).collect(),
                g.iter().map(|v| v.to_bits()).collect(),
            );
            assert_eq!(w, g, "{} numbers", w.len());
        }
    }
}
