//! Softmax over the last axis, numerically stable, with temperature.
//!
//! softmax(x / T)_i = exp((x_i − max x) / T) / Σ_j exp((x_j − max x) / T)
//!
//! Subtracting the row maximum changes nothing mathematically and keeps exp from
//! overflowing. T < 1 sharpens the distribution, T > 1 flattens it. A row that is
//! entirely −∞ (every position masked) gives all zeros rather than NaN.
//!
//! The fast path runs max, exp-and-sum and scale as three SIMD passes over the row
//! (see [`crate::ops::simd`]); large tensors split their rows across threads.
//!
//! llama.cpp's softmax ([`crate::runtime::Numerics::LlamaCpp`]: its vector exp and
//! summation order) is [`llama_cpp::softmax_row`], beside it.

pub(crate) mod llama_cpp;

use crate::ops::simd;
use crate::tensor::tape::{needs_grad, record};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The index of the largest value of `row` (the first of equal ones; 0 for an empty
/// row): the limit T → 0 of softmax(x / T), greedy decoding's choice. Every greedy loop
/// (generation, the server, Whisper, trained encoder-decoders) picks with this one.
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// Elements below which a softmax stays on one thread.
const PARALLEL_MIN: usize = 1 << 16;

/// Softmax over the last axis (temperature 1).
///
/// # Shapes
/// x: (..., n) → (..., n), each row summing to 1
pub fn softmax(x: &Tensor) -> Tensor {
    let mut out = x.clone();
    let n = x.last_dim();
    simd::for_each_row(out.data_mut(), n, PARALLEL_MIN, |row| softmax_row(row, 1.0));
    record_softmax(out, x, 1.0)
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
    simd::for_each_row(out.data_mut(), n, PARALLEL_MIN, |row| {
        softmax_row(row, temperature)
    });
    Ok(record_softmax(out, x, temperature))
}

/// In place: one row ← softmax(row / T) (T > 0; the fast path of
/// [`reference::softmax_row`]).
pub fn softmax_row(row: &mut [f32], temperature: f32) {
    let max = simd::max(row);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let sum = simd::exp_shifted_sum(row, max, 1.0 / temperature);
    simd::scale(row, 1.0 / sum);
}

/// The plain twin: the formula, one pass for each step, with exp and the sum in f64
/// (a long f32 running sum drifts by a few 1e-6; this twin is the yardstick).
pub mod reference {
    /// In place: row ← softmax(row / T).
    pub fn softmax_row(row: &mut [f32], temperature: f32) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            row.fill(0.0);
            return;
        }
        let inv_t = 1.0 / temperature as f64;
        let e: Vec<f64> = row
            .iter()
            .map(|&x| ((x as f64 - max as f64) * inv_t).exp())
            .collect();
        let sum: f64 = e.iter().sum();
        for (x, e) in row.iter_mut().zip(e) {
            *x = (e / sum) as f32;
        }
    }
}

// ------------------------------------------------------------------ backward

// The recording of softmax on the tape.
/// Recording for [`crate::ops::softmax`] and [`crate::ops::softmax_with_temperature`]:
/// ∂x = y ⊙ (g − Σ g ⊙ y) / T, row by row.
pub(crate) fn record_softmax(out: Tensor, x: &Tensor, temperature: f32) -> Tensor {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn fast_row_equals_twin() {
        let mut rng = StdRng::seed_from_u64(2);
        for n in [1, 3, 7, 8, 9, 17, 33, 65, 129, 384, 576, 1000] {
            for t in [0.5f32, 1.0, 2.0] {
                let x: Vec<f32> = (0..n).map(|_| rng.random_range(-20.0f32..20.0)).collect();
                let mut fast = x.clone();
                softmax_row(&mut fast, t);
                let mut slow = x.clone();
                reference::softmax_row(&mut slow, t);
                // Tolerance: 1e-6 absolute on probabilities (f32 exp within 2e-7 relative).
                for (a, b) in fast.iter().zip(&slow) {
                    assert!((a - b).abs() <= 1e-6, "n={n} T={t}: {a} vs {b}");
                }
            }
        }
        let mut masked = vec![f32::NEG_INFINITY; 9];
        softmax_row(&mut masked, 1.0);
        assert_eq!(masked, vec![0.0; 9]);
        let mut some = vec![f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY];
        softmax_row(&mut some, 1.0);
        assert_eq!(some, vec![0.0, 1.0, 0.0]);
    }
}
