//! Softmax over the last axis, numerically stable, with temperature.
//!
//! softmax(x / T)_i = exp((x_i − max x) / T) / Σ_j exp((x_j − max x) / T)
//!
//! Subtracting the row maximum changes nothing mathematically and keeps exp from
//! overflowing. T < 1 sharpens the distribution, T > 1 flattens it. A row that is
//! entirely −∞ (every position masked) gives all zeros rather than NaN.

use crate::tensor::Tensor;
use crate::{Error, Result};

/// Softmax over the last axis (temperature 1).
///
/// # Shapes
/// x: (..., n) → (..., n), each row summing to 1
pub fn softmax(x: &Tensor) -> Tensor {
    let mut out = x.clone();
    let n = x.last_dim();
    if n > 0 {
        for row in out.data_mut().chunks_mut(n) {
            softmax_row(row, 1.0);
        }
    }
    crate::autograd::rules::softmax(out, x, 1.0)
}

/// Softmax of x / T over the last axis. Errors unless T is finite and > 0.
pub fn softmax_with_temperature(x: &Tensor, temperature: f32) -> Result<Tensor> {
    if !(temperature.is_finite() && temperature > 0.0) {
        return Err(Error::Argument(format!(
            "temperature must be a finite number > 0, got {temperature}"
        )));
    }
    let mut out = x.clone();
    let n = x.last_dim();
    if n > 0 {
        for row in out.data_mut().chunks_mut(n) {
            softmax_row(row, temperature);
        }
    }
    Ok(crate::autograd::rules::softmax(out, x, temperature))
}

/// In place: one row ← softmax(row / T).
pub fn softmax_row(row: &mut [f32], temperature: f32) {
    reference::softmax_row(row, temperature)
}

/// The plain twin: the formula, in f32, one pass for each step.
pub mod reference {
    /// In place: row ← softmax(row / T).
    pub fn softmax_row(row: &mut [f32], temperature: f32) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            row.fill(0.0);
            return;
        }
        let inv_t = 1.0 / temperature;
        let mut sum = 0.0f32;
        for x in row.iter_mut() {
            *x = ((*x - max) * inv_t).exp();
            sum += *x;
        }
        let inv = 1.0 / sum;
        for x in row.iter_mut() {
            *x *= inv;
        }
    }
}
