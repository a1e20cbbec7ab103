//! Rotary position embedding (RoPE, Su et al. 2021, "RoFormer").
//!
//! Each pair of features (x₁, x₂) of a query or key at position p is rotated by the
//! angle p·θᵢ, with θᵢ = base^(−2i/d) for pair i of a head of d features:
//!
//! (x₁, x₂) ↦ (x₁ cos pθᵢ − x₂ sin pθᵢ,  x₁ sin pθᵢ + x₂ cos pθᵢ)
//!
//! so that q·k depends only on the distance between positions. Which features form a
//! pair is a convention: [`RopeConvention::RotateHalf`] pairs feature i with i + d/2 (the
//! Hugging Face LLaMA code); [`RopeConvention::Interleaved`] pairs 2i with 2i + 1 (the
//! paper, Meta's original LLaMA, GGUF's `llama` tensors before llama.cpp's permutation).

use serde::{Deserialize, Serialize};

use crate::tensor::Tensor;
use crate::{Error, Result};

/// Which features RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeConvention {
    /// Pair i with i + d/2 (HF `rotate_half`).
    RotateHalf,
    /// Pair 2i with 2i + 1 (the paper's form).
    Interleaved,
}

/// Apply RoPE to the last dimension of `x`, where the second-to-last dimension is
/// position: row t is at position `positions[t]`.
///
/// # Shapes
/// x: (..., t, d) with d even; positions: t → (..., t, d)
pub fn rope(
    x: &Tensor,
    positions: &[usize],
    base: f32,
    convention: RopeConvention,
) -> Result<Tensor> {
    let r = x.rank();
    if r < 2 {
        return Err(Error::Shape(format!(
            "rope needs (..., t, d), got {:?}",
            x.shape()
        )));
    }
    let (t, d) = (x.shape()[r - 2], x.shape()[r - 1]);
    if d % 2 != 0 || d == 0 {
        return Err(Error::Shape(format!(
            "rope needs an even head dimension, got {d}"
        )));
    }
    if positions.len() != t {
        return Err(Error::Shape(format!(
            "rope: {} positions for {t} rows of {:?}",
            positions.len(),
            x.shape()
        )));
    }
    let mut out = x.clone();
    for (i, row) in out.data_mut().chunks_mut(d).enumerate() {
        reference::rotate_row(row, positions[i % t], base, convention);
    }
    Ok(crate::autograd::rules::rope(
        out, x, positions, base, convention,
    ))
}

/// The plain twin: one row rotated with angles computed in f64.
pub mod reference {
    use super::RopeConvention;

    /// θᵢ = base^(−2i/d) for pair i of d features.
    pub fn inv_freq(i: usize, d: usize, base: f32) -> f64 {
        (base as f64).powf(-2.0 * i as f64 / d as f64)
    }

    /// In place: rotate one row of d features at position `pos`.
    pub fn rotate_row(row: &mut [f32], pos: usize, base: f32, convention: RopeConvention) {
        let d = row.len();
        let half = d / 2;
        for i in 0..half {
            let angle = pos as f64 * inv_freq(i, d, base);
            let (sin, cos) = angle.sin_cos();
            let (a, b) = match convention {
                RopeConvention::RotateHalf => (i, i + half),
                RopeConvention::Interleaved => (2 * i, 2 * i + 1),
            };
            let (x1, x2) = (row[a] as f64, row[b] as f64);
            row[a] = (x1 * cos - x2 * sin) as f32;
            row[b] = (x1 * sin + x2 * cos) as f32;
        }
    }
}
