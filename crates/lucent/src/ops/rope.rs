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
//!
//! The fast path reads cos pθᵢ and sin pθᵢ from a [`RopeTable`] (computed once in f64,
//! stored in f32) and rotates each row with f32 multiply-adds. A model keeps one table
//! per (base, d) covering the positions it will see and calls [`RopeTable::apply`].

use serde::{Deserialize, Serialize};

use crate::ops::simd;
use crate::tensor::tape::{needs_grad, record};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Elements below which RoPE stays on one thread.
const PARALLEL_MIN: usize = 1 << 17;

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
    let (_, d) = check(x, positions)?;
    let lo = positions.iter().copied().min().unwrap_or(0);
    let hi = positions.iter().copied().max().map_or(0, |p| p + 1);
    let table = RopeTable::new(base, d, lo..hi)?;
    let out = table.apply(x, positions, convention)?;
    Ok(record_rope(out, x, positions, base, convention))
}

/// Check x is (..., t, d) with d even and one position per row; return (t, d).
fn check(x: &Tensor, positions: &[usize]) -> Result<(usize, usize)> {
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
    Ok((t, d))
}

/// cos pθᵢ and sin pθᵢ for a run of positions p and the d/2 pairs i of a head of d
/// features: RoPE's angles computed once (in f64, stored in f32) and reused by every
/// layer, head and step.
#[derive(Clone, Debug)]
pub(crate) struct RopeTable {
    d: usize,
    positions: std::ops::Range<usize>,
    /// (positions, d/2)
    cos: Vec<f32>,
    /// (positions, d/2)
    sin: Vec<f32>,
}

impl RopeTable {
    /// The table for heads of `d` features (even) at `positions`, with θᵢ = base^(−2i/d).
    pub fn new(base: f32, d: usize, positions: std::ops::Range<usize>) -> Result<RopeTable> {
        if !d.is_multiple_of(2) || d == 0 {
            return Err(Error::Shape(format!(
                "rope needs an even head dimension, got {d}"
            )));
        }
        if !(base.is_finite() && base > 0.0) {
            return Err(Error::Argument(format!(
                "rope base must be a finite number > 0, got {base}"
            )));
        }
        let half = d / 2;
        let n = positions.len();
        let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
        let inv: Vec<f64> = (0..half).map(|i| reference::inv_freq(i, d, base)).collect();
        for p in positions.clone() {
            for &f in &inv {
                let (s, c) = (p as f64 * f).sin_cos();
                cos.push(c as f32);
                sin.push(s as f32);
            }
        }
        Ok(RopeTable {
            d,
            positions,
            cos,
            sin,
        })
    }

    /// (cos, sin) rows of d/2 values for `pos`, or an error naming the table's range.
    fn angles(&self, pos: usize) -> Result<(&[f32], &[f32])> {
        if !self.positions.contains(&pos) {
            return Err(Error::Argument(format!(
                "rope table covers positions {:?}, asked for {pos}; build a larger RopeTable",
                self.positions
            )));
        }
        let half = self.d / 2;
        let r = (pos - self.positions.start) * half;
        Ok((&self.cos[r..r + half], &self.sin[r..r + half]))
    }

    /// Apply RoPE to `x` with this table's angles (the fast path of [`rope`]).
    ///
    /// # Shapes
    /// x: (..., t, d) with d = the table's head_dim; positions: t → (..., t, d)
    pub fn apply(
        &self,
        x: &Tensor,
        positions: &[usize],
        convention: RopeConvention,
    ) -> Result<Tensor> {
        let (t, d) = check(x, positions)?;
        if d != self.d {
            return Err(Error::Shape(format!(
                "rope table is for heads of {} features, x has {d} ({:?})",
                self.d,
                x.shape()
            )));
        }
        for &pos in positions {
            self.angles(pos)?;
        }
        let mut out = x.clone();
        let data = out.data_mut();
        // Rows are (..., t) flattened: row r sits at position positions[r % t].
        simd::for_each_row(data, t * d, PARALLEL_MIN, |block| {
            for (row, &pos) in block.chunks_mut(d).zip(positions) {
                if let Ok((cos, sin)) = self.angles(pos) {
                    rotate_row(row, cos, sin, convention);
                }
            }
        });
        Ok(out)
    }

    /// In place: rotate one row of d features at `pos`.
    #[cfg(test)]
    pub fn apply_row(&self, row: &mut [f32], pos: usize, convention: RopeConvention) -> Result<()> {
        if row.len() != self.d {
            return Err(Error::Shape(format!(
                "rope table is for heads of {} features, the row has {}",
                self.d,
                row.len()
            )));
        }
        let (cos, sin) = self.angles(pos)?;
        rotate_row(row, cos, sin, convention);
        Ok(())
    }
}

/// Rotate one row by the given angles' cos and sin (d/2 each).
///
/// Plain multiplies and adds, which the compiler vectorises; not `f32::mul_add`, which
/// is a slow library call unless the whole crate is built with the FMA feature.
fn rotate_row(row: &mut [f32], cos: &[f32], sin: &[f32], convention: RopeConvention) {
    let half = cos.len();
    match convention {
        RopeConvention::RotateHalf => {
            let (x1, x2) = row.split_at_mut(half);
            for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
                let (u, v) = (*a, *b);
                *a = u * c - v * s;
                *b = u * s + v * c;
            }
        }
        RopeConvention::Interleaved => {
            for ((pair, &c), &s) in row.chunks_exact_mut(2).zip(cos).zip(sin) {
                let (u, v) = (pair[0], pair[1]);
                pair[0] = u * c - v * s;
                pair[1] = u * s + v * c;
            }
        }
    }
}

/// The plain twin: one row rotated with angles computed in f64.
pub(crate) mod reference {
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

// ------------------------------------------------------------------ backward

// The recording of RoPE on the tape.
/// Swap the two members of every rotated pair of each row (halves for rotate-half,
/// neighbours for interleaved): the P with R(θ)ᵀ = P R(θ) P.
fn swap_pairs(t: &Tensor, convention: RopeConvention) -> Result<Tensor> {
    let d = t.last_dim();
    let half = d / 2;
    let mut out = t.data().to_vec();
    for row in out.chunks_mut(d.max(1)) {
        for i in 0..half {
            match convention {
                RopeConvention::RotateHalf => row.swap(i, i + half),
                RopeConvention::Interleaved => row.swap(2 * i, 2 * i + 1),
            }
        }
    }
    Tensor::new(out, t.shape())
}

/// Recording for [`crate::ops::rope`]: ∂x = R(θ)ᵀ g = P R(θ) P g.
pub(crate) fn record_rope(
    out: Tensor,
    x: &Tensor,
    positions: &[usize],
    base: f32,
    convention: RopeConvention,
) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let positions = positions.to_vec();
    record(out, "rope", &[x], move |g| {
        let swapped = swap_pairs(g, convention)?;
        let rotated = crate::ops::rope(&swapped, &positions, base, convention)?;
        Ok(vec![Some(swap_pairs(&rotated, convention)?)])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn table_equals_twin_both_conventions() -> TestResult {
        let mut rng = StdRng::seed_from_u64(6);
        for &(t, d) in &[(1, 2), (3, 8), (7, 18), (17, 64), (33, 128)] {
            let x = Tensor::randn(&[2, 3, t, d], 1.0, &mut rng);
            let positions: Vec<usize> = (0..t).map(|i| 5 + 3 * i).collect();
            for conv in [RopeConvention::RotateHalf, RopeConvention::Interleaved] {
                let fast = rope(&x, &positions, 10_000.0, conv)?;
                let mut slow = x.clone();
                for (i, row) in slow.data_mut().chunks_mut(d).enumerate() {
                    reference::rotate_row(row, positions[i % t], 10_000.0, conv);
                }
                // Tolerance: 1e-6 absolute (f32 angles within 6e-8, inputs O(1)).
                let err = fast.max_abs_diff(&slow)?;
                assert!(err <= 1e-6, "t={t} d={d} {conv:?}: {err}");
            }
        }
        Ok(())
    }

    #[test]
    fn table_errors_name_the_problem() -> TestResult {
        let table = RopeTable::new(10_000.0, 8, 0..4)?;
        let x = Tensor::zeros(&[1, 8]);
        let e = table
            .apply(&x, &[4], RopeConvention::RotateHalf)
            .unwrap_err()
            .to_string();
        assert!(e.contains("0..4") && e.contains('4'), "{e}");
        let e = table
            .apply(&Tensor::zeros(&[1, 6]), &[0], RopeConvention::RotateHalf)
            .unwrap_err()
            .to_string();
        assert!(e.contains('8') && e.contains('6'), "{e}");
        assert!(RopeTable::new(10_000.0, 7, 0..4).is_err());
        let mut row = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        table.apply_row(&mut row, 0, RopeConvention::Interleaved)?;
        assert_eq!(row, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        Ok(())
    }
}
