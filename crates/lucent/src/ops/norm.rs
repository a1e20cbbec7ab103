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
use crate::tensor::Tensor;
use crate::{Error, Result};

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
    Ok(crate::autograd::rules::layer_norm(out, x, gamma, beta, eps))
}

/// RMSNorm over the last axis.
///
/// # Shapes
/// x: (..., d), gamma: (d) → (..., d)
pub fn rms_norm(x: &Tensor, gamma: &Tensor, eps: f32) -> Result<Tensor> {
    let d = check(x, gamma, None, "rms_norm")?;
    let mut out = x.clone();
    let g = gamma.data();
    // Rows over the threads from fewer numbers than LayerNorm: the in-order f64 sum
    // makes a row cost more.
    simd::for_each_row(out.data_mut(), d, PARALLEL_MIN / 4, |row| {
        rms_norm_row(row, g, eps)
    });
    Ok(crate::autograd::rules::rms_norm(out, x, gamma, eps))
}

/// In place: LayerNorm of one row (the fast path of [`reference::layer_norm_row`]);
/// gamma and beta have the row's length.
pub fn layer_norm_row(row: &mut [f32], gamma: &[f32], beta: Option<&[f32]>, eps: f32) {
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
pub fn rms_norm_row(row: &mut [f32], gamma: &[f32], eps: f32) {
    // One f64 sum, in order, as llama.cpp's: an f64 sum of f32 squares is exact only
    // while their exponents span less than ~29 bits, so its order can reach the last
    // bit of the f32 mean square (a 1-ulp change in every output, sometimes enough to
    // move an 8-bit activation downstream).
    let sum = row.iter().fold(0.0f64, |s, &x| s + (x * x) as f64);
    let ms = (sum / row.len() as f64) as f32;
    let s = 1.0 / (ms + eps).sqrt();
    for (x, &g) in row.iter_mut().zip(gamma) {
        *x = *x * s * g;
    }
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
pub mod reference {
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
            reference::rms_norm_row(&mut r, &g, 1e-6);
            for (a, c) in f.iter().zip(&r) {
                assert!((a - c).abs() <= 2e-6, "rms_norm n={n}: {a} vs {c}");
            }
        }
    }
}
