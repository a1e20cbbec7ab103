//! Normalisation over the last axis.
//!
//! LayerNorm (Ba et al. 2016, PyTorch semantics): y = (x − μ) / √(σ² + ε) · γ + β, with
//! μ the mean and σ² the *biased* variance (divide by n) of the row, ε inside the root.
//!
//! RMSNorm (Zhang & Sennrich 2019, as LLaMA uses it): y = x / √(mean(x²) + ε) · γ.

use crate::tensor::Tensor;
use crate::{Error, Result};

/// LayerNorm over the last axis.
///
/// # Shapes
/// x: (..., d), gamma: (d), beta: (d) → (..., d)
pub fn layer_norm(x: &Tensor, gamma: &Tensor, beta: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    let d = check(x, gamma, beta, "layer_norm")?;
    let mut out = x.clone();
    let (g, b) = (gamma.data(), beta.map(|b| b.data()));
    for row in out.data_mut().chunks_mut(d) {
        reference::layer_norm_row(row, g, b, eps);
    }
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
    for row in out.data_mut().chunks_mut(d) {
        reference::rms_norm_row(row, g, eps);
    }
    Ok(crate::autograd::rules::rms_norm(out, x, gamma, eps))
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
