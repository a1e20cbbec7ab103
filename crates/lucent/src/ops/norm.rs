//! Normalisation over the last axis.
//!
//! LayerNorm (Ba et al. 2016, PyTorch semantics): y = (x − μ) / √(σ² + ε) · γ + β, with
//! μ the mean and σ² the *biased* variance (divide by n) of the row, ε inside the root.
//!
//! RMSNorm (Zhang & Sennrich 2019, as LLaMA uses it): y = x / √(mean(x²) + ε) · γ.
//!
//! The fast path makes two SIMD passes for LayerNorm's statistics (the mean, then the
//! sum of squared deviations from it: no cancellation as in E(x²) − μ²) and one for
//! RMSNorm's, accumulating in f32 over 8-lane partial sums, and a last pass that writes
//! (x − μ) · (γ/σ) + β with one fused multiply-add. Large tensors split their rows across
//! threads; one row (a decode step) stays on the calling thread.

use crate::ops::simd;
use crate::runtime::pool::in_pool;
use crate::tensor::tape::{needs_grad, record};
use crate::tensor::Tensor;
use crate::{Error, Result};
use rayon::prelude::*;

/// Elements below which a norm stays on one thread.
const PARALLEL_MIN: usize = 1 << 17;

/// LayerNorm over the last axis.
///
/// # Shapes
/// x: (..., d), gamma: (d), beta: (d) → (..., d)
pub fn layer_norm(x: &Tensor, gamma: &Tensor, beta: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    let d = check(x, gamma, beta, "layer_norm")?;
    let mut out = x.clone();
    let (g, b) = (gamma.data(), beta.map(|b| b.data()));
    simd::for_each_row(out.data_mut(), d, PARALLEL_MIN, |row| {
        layer_norm_row(row, g, b, eps)
    });
    Ok(record_layer_norm(out, x, gamma, beta, eps))
}

/// RMSNorm over the last axis.
///
/// # Shapes
/// x: (..., d), gamma: (d) → (..., d)
pub fn rms_norm(x: &Tensor, gamma: &Tensor, eps: f32) -> Result<Tensor> {
    let d = check(x, gamma, None, "rms_norm")?;
    let g = gamma.data();
    // Rows over the threads from fewer numbers than LayerNorm: the in-order f64 sum
    // makes a row cost more.
    let isa = crate::runtime::isa();
    let out = simd::map_row_groups(x.data(), d, PARALLEL_MIN / 4, |rows| {
        rms_norm_rows(rows, g, eps, isa)
    });
    let out = Tensor::new(out, x.shape())?;
    Ok(record_rms_norm(out, x, gamma, eps))
}

/// In place: LayerNorm of one row (the fast path of [`reference::layer_norm_row`]);
/// gamma and beta have the row's length.
pub(crate) fn layer_norm_row(row: &mut [f32], gamma: &[f32], beta: Option<&[f32]>, eps: f32) {
    let n = row.len() as f32;
    let mean = simd::sum(row) / n;
    let var = simd::sum_sq_diff(row, mean) / n;
    let inv = (1.0 / (var as f64 + eps as f64).sqrt()) as f32;
    simd::shift_mul_add(row, mean, inv, gamma, beta);
}

/// In place: RMSNorm of one row (the fast path of [`reference::rms_norm_row`]), with
/// llama.cpp's arithmetic so GGUF models see the same numbers there: the squares
/// (rounded to f32) summed in f64, the mean square and `s = 1/√(ms + ε)` in f32, then
/// `(x · s) · γ` with two roundings.
pub(crate) fn rms_norm_row(row: &mut [f32], gamma: &[f32], eps: f32) {
    // One f64 sum, in order, as llama.cpp's: an f64 sum of f32 squares is exact only
    // while their exponents span less than ~29 bits, so its order can reach the last
    // bit of the f32 mean square (a 1-ulp change in every output, sometimes enough to
    // move an 8-bit activation downstream).
    let sum = row.iter().fold(0.0f64, |s, &x| s + (x * x) as f64);
    rms_scale(row, sum, gamma, eps);
}

/// The end of [`rms_norm_row`] once the in-order f64 sum of the squares is known: the
/// mean square and `s = 1/√(ms + ε)` in f32, then `(x · s) · γ`.
#[inline(always)]
fn rms_scale(row: &mut [f32], sum: f64, gamma: &[f32], eps: f32) {
    let ms = (sum / row.len() as f64) as f32;
    let s = 1.0 / (ms + eps).sqrt();
    for (x, &g) in row.iter_mut().zip(gamma) {
        *x = *x * s * g;
    }
}

/// In place: [`rms_norm_row`] of every row of `rows` (whole rows of `gamma.len()`
/// numbers), the same bits. The in-order f64 sum is one dependent chain of additions per
/// row (a few cycles a number); with AVX2 eight rows go together, their chains side by
/// side in the lanes ([`rms_norm_eight_avx2`]).
pub(crate) fn rms_norm_rows(rows: &mut [f32], gamma: &[f32], eps: f32, isa: crate::Isa) {
    let d = gamma.len();
    if d == 0 {
        return;
    }
    #[allow(unused_mut)]
    let mut rest = rows;
    #[cfg(target_arch = "x86_64")]
    if crate::ops::fma_at(isa) {
        let whole = rest.len() / (8 * d) * (8 * d);
        let (eights, tail) = rest.split_at_mut(whole);
        for group in eights.chunks_exact_mut(8 * d) {
            // SAFETY: the level has AVX2 and FMA (capped to the CPU's); eight rows of d.
            unsafe { rms_norm_eight_avx2(group, gamma, eps) };
        }
        rest = tail;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa;
    rest.chunks_mut(d)
        .for_each(|row| rms_norm_row(row, gamma, eps));
}

/// [`rms_norm_row`] of eight rows at once ([`square_sums_eight_avx2`], then each row's
/// scale as [`rms_norm_row`] ends).
///
/// # Safety
/// The CPU must have AVX2 and FMA; `rows` holds eight rows of `gamma.len()` numbers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rms_norm_eight_avx2(rows: &mut [f32], gamma: &[f32], eps: f32) {
    let d = gamma.len();
    let sums = square_sums_eight_avx2(rows, d);
    for (row, sum) in rows.chunks_exact_mut(d).zip(sums) {
        rms_scale(row, sum, gamma, eps);
    }
}

/// The in-order f64 sums of the squares of eight rows of `d` numbers (each as
/// [`rms_norm_row`] sums its row): the squares of eight numbers of each row, transposed
/// so that a register holds one position of all eight rows, added in f64 position by
/// position (rows 0–3 in one register, 4–7 in another), so each row's sum meets the
/// same additions in the same order as its own chain. Numbers past the last whole eight
/// continue each row's sum one by one.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn square_sums_eight_avx2(rows: &[f32], d: usize) -> [f64; 8] {
    use std::arch::x86_64::*;
    assert_eq!(rows.len(), 8 * d, "eight rows");
    let wide = d - d % 8;
    let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    let p = rows.as_ptr();
    for j in (0..wide).step_by(8) {
        // SAFETY: position j + 8 ≤ d of each of the eight rows.
        let squares: [__m256; 8] = std::array::from_fn(|r| unsafe {
            let x = _mm256_loadu_ps(p.add(r * d + j));
            _mm256_mul_ps(x, x)
        });
        // Register k: position j + k of rows 0..8.
        for t in crate::ops::f16_dot::transpose8(squares) {
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(t)));
        }
    }
    let mut sums = [0.0f64; 8];
    // SAFETY: `sums` holds eight numbers.
    unsafe {
        _mm256_storeu_pd(sums.as_mut_ptr(), lo);
        _mm256_storeu_pd(sums.as_mut_ptr().add(4), hi);
    }
    for (row, sum) in rows.chunks_exact(d).zip(sums.iter_mut()) {
        *sum = row[wide..].iter().fold(*sum, |s, &x| s + (x * x) as f64);
    }
    sums
}

fn check(x: &Tensor, gamma: &Tensor, beta: Option<&Tensor>, op: &str) -> Result<usize> {
    let d = x.last_dim();
    if x.rank() == 0 || d == 0 {
        return Err(Error::Shape(format!(
            "{op} of an empty tensor {:?}",
            x.shape()
        )));
    }
    if gamma.shape() != [d] {
        return Err(Error::mismatch(
            format!("{op} (x vs weight)"),
            x.shape(),
            gamma.shape(),
        ));
    }
    if let Some(b) = beta {
        if b.shape() != [d] {
            return Err(Error::mismatch(
                format!("{op} (x vs bias)"),
                x.shape(),
                b.shape(),
            ));
        }
    }
    Ok(d)
}

/// The plain twins, in f64 accumulation.
pub(crate) mod reference {
    /// In place: LayerNorm of one row.
    pub fn layer_norm_row(row: &mut [f32], gamma: &[f32], beta: Option<&[f32]>, eps: f32) {
        let n = row.len() as f64;
        let mean = row.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = row.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for (i, x) in row.iter_mut().enumerate() {
            let y = (*x as f64 - mean) * inv * gamma[i] as f64;
            *x = (y + beta.map_or(0.0, |b| b[i] as f64)) as f32;
        }
    }

    /// In place: RMSNorm of one row.
    pub fn rms_norm_row(row: &mut [f32], gamma: &[f32], eps: f32) {
        let n = row.len() as f64;
        let ms = row.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        for (i, x) in row.iter_mut().enumerate() {
            *x = (*x as f64 * inv * gamma[i] as f64) as f32;
        }
    }
}

// ------------------------------------------------------------------ backward

// The recordings of LayerNorm and RMSNorm on the tape.
/// Recording for [`crate::ops::layer_norm`].
pub(crate) fn record_layer_norm(
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
pub(crate) fn record_rms_norm(out: Tensor, x: &Tensor, gamma: &Tensor, eps: f32) -> Tensor {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn fast_rows_equal_twins() {
        let mut rng = StdRng::seed_from_u64(4);
        for n in [1, 3, 7, 8, 9, 17, 33, 65, 129, 384, 576, 1536] {
            // an offset mean, as real activations have
            let x: Vec<f32> = (0..n)
                .map(|_| 3.0 + rng.random_range(-2.0f32..2.0))
                .collect();
            let g: Vec<f32> = (0..n).map(|_| rng.random_range(0.5f32..1.5)).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.random_range(-0.5f32..0.5)).collect();
            let (mut f, mut r) = (x.clone(), x.clone());
            layer_norm_row(&mut f, &g, Some(&b), 1e-5);
            reference::layer_norm_row(&mut r, &g, Some(&b), 1e-5);
            // Tolerance: 2e-6 absolute (outputs are O(1); f32 statistics over ≤ 1536).
            for (a, c) in f.iter().zip(&r) {
                assert!((a - c).abs() <= 2e-6, "layer_norm n={n}: {a} vs {c}");
            }
            let (mut f, mut r) = (x.clone(), x.clone());
            rms_norm_row(&mut f, &g, 1e-6);
            rows_equal_one_by_one(&x, &g, n);
            reference::rms_norm_row(&mut r, &g, 1e-6);
            for (a, c) in f.iter().zip(&r) {
                assert!((a - c).abs() <= 2e-6, "rms_norm n={n}: {a} vs {c}");
            }
        }
    }

    /// [`rms_norm_rows`] at every level this CPU has equals [`rms_norm_row`] row by row,
    /// bit for bit: 1 to 19 rows (eights and a remainder) made from `x`, each row
    /// different (scaled and shifted) so that a row's sum read from a neighbour's lane
    /// shows, and every number times 2^k for k from −20 to 20, so that the squares span
    /// more exponents than an f64 holds and the order of the sum shows in its bits.
    fn rows_equal_one_by_one(x: &[f32], g: &[f32], n: usize) {
        for rows in [1usize, 7, 8, 9, 16, 19] {
            let data: Vec<f32> = (0..rows)
                .flat_map(|r| {
                    x.iter().enumerate().map(move |(i, &v)| {
                        let k = ((i * 7 + r * 3) % 41) as i32 - 20;
                        (v * (1.0 + r as f32 * 0.37) - r as f32) * 2f32.powi(k)
                    })
                })
                .collect();
            #[cfg(target_arch = "x86_64")]
            if crate::ops::fma_at(crate::Isa::detected()) && rows >= 8 {
                // The sums themselves (a changed order seldom reaches the f32 mean).
                let want: Vec<u64> = data[..8 * n]
                    .chunks(n)
                    .map(|row| {
                        row.iter()
                            .fold(0.0f64, |s, &x| s + (x * x) as f64)
                            .to_bits()
                    })
                    .collect();
                // SAFETY: the CPU has AVX2 and FMA.
                let got = unsafe { square_sums_eight_avx2(&data[..8 * n], n) };
                let got: Vec<u64> = got.iter().map(|s| s.to_bits()).collect();
                assert_eq!(got, want, "square sums n={n}");
            }
            let mut want = data.clone();
            want.chunks_mut(n)
                .for_each(|row| rms_norm_row(row, g, 1e-6));
            for isa in crate::Isa::available() {
                let mut got = data.clone();
                rms_norm_rows(&mut got, g, 1e-6, isa);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{isa}: rms_norm_rows n={n} rows={rows}"
                );
            }
        }
    }
}
