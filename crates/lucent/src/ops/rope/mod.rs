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
//! Under llama.cpp's numerics the angles and rotations are its own ([`llama_cpp`]);
//! [`apply`] picks by [`Numerics`].
//!
//! # Scalings (contexts longer than the training one)
//!
//! [`RopeFreqs`] changes the angles as llama.cpp's `ggml_rope_ext` does (read from a
//! GGUF file's `{arch}.rope.scaling.*` keys and `rope_freqs.weight` tensor):
//!
//! - **frequency factors** fᵢ (Llama 3.1/3.2's frequency bands): θᵢ ← θᵢ / fᵢ;
//! - **linear** (position interpolation) with factor s: θᵢ ← θᵢ / s;
//! - **YaRN** (Peng et al. 2023) with factor s, original context L and magnitude a:
//!   θᵢ ← (θᵢ/s)(1 − γᵢ) + θᵢ γᵢ, where γᵢ = 1 − clamp((i − lo) / max(0.001, hi − lo), 0, 1)
//!   ramps from pure extrapolation (γ = 1, the fast pairs) to pure interpolation
//!   (γ = 0, the slow pairs) between the correction dims
//!   lo = max(0, ⌊c(32)⌋), hi = min(d − 1, ⌈c(1)⌉), c(β) = d·ln(L / (2πβ)) / (2 ln base),
//!   and both cos and sin are multiplied by m = a·(1 + 0.1·ln s), so that q·k grows
//!   by m² (YaRN's attention temperature).

use serde::{Deserialize, Serialize};

pub(crate) mod llama_cpp;

use crate::ops::simd;
use crate::runtime::Numerics;
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

/// How a model stretches RoPE's angles beyond the context it was trained on (the
/// module docs give the formulas). `None` leaves θᵢ = base^(−2i/d) alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum RopeScaling {
    /// No scaling.
    #[default]
    None,
    /// Position interpolation: θᵢ ← θᵢ / factor.
    Linear {
        /// s > 0 (the context is stretched s times).
        factor: f32,
    },
    /// YaRN: interpolation of the slow pairs, extrapolation of the fast ones, a ramp
    /// between, and cos and sin multiplied by attn_factor·(1 + 0.1·ln factor).
    Yarn {
        /// s > 0.
        factor: f32,
        /// L, the context the model was trained on before the scaling (> 0).
        original_context: usize,
        /// a, a further multiplier of cos and sin (1 for most files).
        attn_factor: f32,
    },
}

impl RopeScaling {
    /// An error naming the field unless the factors are finite and > 0 and YaRN's
    /// original context is > 0.
    pub fn check(&self) -> Result<()> {
        let positive = |x: f32| x.is_finite() && x > 0.0;
        match *self {
            RopeScaling::None => Ok(()),
            RopeScaling::Linear { factor } if positive(factor) => Ok(()),
            RopeScaling::Yarn {
                factor,
                original_context,
                attn_factor,
            } if positive(factor) && positive(attn_factor) && original_context > 0 => Ok(()),
            other => Err(Error::Config(format!(
                "rope scaling {other:?}: factor and attn_factor must be finite numbers > 0 and \
                 original_context > 0"
            ))),
        }
    }
}

impl std::fmt::Display for RopeScaling {
    /// "none", "linear, factor s", or "YaRN, factor s, original context L, attn factor a
    /// (cos and sin × m)" with m = a·(1 + 0.1 ln s).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            RopeScaling::None => write!(f, "none"),
            RopeScaling::Linear { factor } => write!(f, "linear, factor {factor}"),
            RopeScaling::Yarn {
                factor,
                original_context,
                attn_factor,
            } => write!(
                f,
                "YaRN, factor {factor}, original context {original_context}, attn factor \
                 {attn_factor} (cos and sin × {:.4})",
                attn_factor as f64 * (1.0 + 0.1 * (factor as f64).ln())
            ),
        }
    }
}

/// Everything that sets RoPE's angles: the base, a scaling and optional per-frequency
/// factors (the module docs give the formulas).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeFreqs<'a> {
    /// θ base (10 000 in the paper).
    pub base: f32,
    /// Linear or YaRN scaling, if any.
    pub scaling: RopeScaling,
    /// fᵢ, one per pair (d/2 values > 0): θᵢ is divided by fᵢ (Llama 3.1's `rope_freqs`).
    pub freq_factors: Option<&'a [f32]>,
}

impl RopeFreqs<'static> {
    /// Plain RoPE at `base`: no scaling, no factors.
    pub fn plain(base: f32) -> RopeFreqs<'static> {
        RopeFreqs {
            base,
            scaling: RopeScaling::None,
            freq_factors: None,
        }
    }
}

impl RopeFreqs<'_> {
    /// An error naming the problem unless these angles can be computed for heads of `d`
    /// features (base > 0, a valid scaling, d/2 factors > 0).
    pub fn check(&self, d: usize) -> Result<()> {
        if !(self.base.is_finite() && self.base > 0.0) {
            return Err(Error::Argument(format!(
                "rope base must be a finite number > 0, got {}",
                self.base
            )));
        }
        self.scaling.check()?;
        if let Some(f) = self.freq_factors {
            if f.len() != d / 2 {
                return Err(Error::Shape(format!(
                    "rope frequency factors: {} values for heads of {d} features, need d/2 = {}",
                    f.len(),
                    d / 2
                )));
            }
            if let Some(bad) = f.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return Err(Error::Argument(format!(
                    "rope frequency factors must be finite numbers > 0, got {bad}"
                )));
            }
        }
        Ok(())
    }
}

/// YaRN's correction dims [lo, hi] for heads of `d` features at `base` and original
/// context `original_context`, with llama.cpp's β_fast = 32 and β_slow = 1, computed in
/// f32 in the order of `ggml_rope_yarn_corr_dims` (both RoPE paths use these values).
pub fn yarn_corr_dims(d: usize, original_context: usize, base: f32) -> [f32; 2] {
    let dim = |beta: f32| {
        d as f32 * (original_context as f32 / (beta * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let lo = dim(32.0).floor();
    let hi = dim(1.0).ceil();
    [
        if 0.0 > lo { 0.0 } else { lo },
        if (d as f32 - 1.0) < hi {
            d as f32 - 1.0
        } else {
            hi
        },
    ]
}

/// YaRN's ramp γ for pair `i` between the correction dims (1: extrapolate, 0:
/// interpolate), in llama.cpp's f32 order.
pub fn yarn_ramp(corr: [f32; 2], i: usize) -> f32 {
    let y = (i as f32 - corr[0]) / f32::max(0.001, corr[1] - corr[0]);
    1.0 - y.clamp(0.0, 1.0)
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
    rope_with(x, positions, &RopeFreqs::plain(base), convention)
}

/// [`rope`] with the angles of `freqs` (a scaling, frequency factors: the module docs).
///
/// # Shapes
/// x: (..., t, d) with d even; positions: t → (..., t, d)
pub fn rope_with(
    x: &Tensor,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) -> Result<Tensor> {
    let (_, d) = check(x, positions)?;
    let lo = positions.iter().copied().min().unwrap_or(0);
    let hi = positions.iter().copied().max().map_or(0, |p| p + 1);
    let table = RopeTable::with_freqs(freqs, d, lo..hi)?;
    let out = table.apply(x, positions, convention)?;
    Ok(record_rope(out, x, positions, freqs, convention))
}

/// RoPE of `x` in place, in `numerics`' arithmetic: lucent's table and rotation
/// ([`rope_with`], recorded for training) or llama.cpp's angles and fused products
/// ([`llama_cpp::rope_rows`], for [`Numerics::LlamaCpp`] and [`Numerics::RowInvariant`]).
///
/// # Shapes
/// x: (..., t, d) with d even; positions: t → (..., t, d)
pub fn apply(
    x: &mut Tensor,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
    numerics: Numerics,
) -> Result<()> {
    if numerics.llama_cpp() {
        let d = x.last_dim();
        llama_cpp::rope_rows(x.data_mut(), d, positions, freqs, convention);
    } else {
        *x = rope_with(x, positions, freqs, convention)?;
    }
    Ok(())
}

/// [`apply`] to several tensors whose rows sit at the same `positions` (a prompt's Q
/// and K in self-attention): under llama.cpp's numerics the angles are computed once
/// for all of them; the numbers are [`apply`]'s on each.
///
/// # Shapes
/// each x: (..., t, d) with the same d even; positions: t → each (..., t, d)
pub fn apply_shared(
    xs: &mut [&mut Tensor],
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
    numerics: Numerics,
) -> Result<()> {
    let d = xs.first().map_or(0, |x| x.last_dim());
    if !numerics.llama_cpp() || xs.iter().any(|x| x.last_dim() != d) {
        for x in xs.iter_mut() {
            apply(x, positions, freqs, convention, numerics)?;
        }
        return Ok(());
    }
    let mut data: Vec<&mut [f32]> = xs.iter_mut().map(|x| x.data_mut()).collect();
    llama_cpp::rope_rows_shared(&mut data, d, positions, freqs, convention);
    Ok(())
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
        RopeTable::with_freqs(&RopeFreqs::plain(base), d, positions)
    }

    /// The table for heads of `d` features (even) at `positions`, with the angles of
    /// `freqs` (each computed in f64 by [`reference::angle`], stored in f32).
    pub fn with_freqs(
        freqs: &RopeFreqs<'_>,
        d: usize,
        positions: std::ops::Range<usize>,
    ) -> Result<RopeTable> {
        if !d.is_multiple_of(2) || d == 0 {
            return Err(Error::Shape(format!(
                "rope needs an even head dimension, got {d}"
            )));
        }
        freqs.check(d)?;
        let half = d / 2;
        let n = positions.len();
        let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
        for p in positions.clone() {
            for i in 0..half {
                let (angle, m) = reference::angle(p, i, d, freqs);
                let (s, c) = angle.sin_cos();
                cos.push((c * m) as f32);
                sin.push((s * m) as f32);
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
    use super::{RopeConvention, RopeFreqs, RopeScaling};

    /// θᵢ = base^(−2i/d) for pair i of d features.
    pub fn inv_freq(i: usize, d: usize, base: f32) -> f64 {
        (base as f64).powf(-2.0 * i as f64 / d as f64)
    }

    /// The angle of pair `i` of `d` features at position `p` under `freqs`, and the
    /// multiplier m of its cos and sin (1 but for YaRN), in f64: p·θᵢ / fᵢ, then the
    /// scaling of the module docs.
    pub fn angle(p: usize, i: usize, d: usize, freqs: &RopeFreqs<'_>) -> (f64, f64) {
        let ff = freqs.freq_factors.map_or(1.0, |f| f[i] as f64);
        let theta = p as f64 * inv_freq(i, d, freqs.base) / ff;
        match freqs.scaling {
            RopeScaling::None => (theta, 1.0),
            RopeScaling::Linear { factor } => (theta / factor as f64, 1.0),
            RopeScaling::Yarn {
                factor,
                original_context,
                attn_factor,
            } => {
                let s = factor as f64;
                let gamma =
                    super::yarn_ramp(super::yarn_corr_dims(d, original_context, freqs.base), i)
                        as f64;
                let angle = theta / s * (1.0 - gamma) + theta * gamma;
                (angle, attn_factor as f64 * (1.0 + 0.1 * s.ln()))
            }
        }
    }

    /// In place: rotate one row of d features at position `pos` with the angles of
    /// `freqs`.
    #[cfg(test)]
    pub fn rotate_row_with(
        row: &mut [f32],
        pos: usize,
        freqs: &RopeFreqs<'_>,
        convention: RopeConvention,
    ) {
        let d = row.len();
        let half = d / 2;
        for i in 0..half {
            let (angle, m) = angle(pos, i, d, freqs);
            let (sin, cos) = angle.sin_cos();
            let (a, b) = match convention {
                RopeConvention::RotateHalf => (i, i + half),
                RopeConvention::Interleaved => (2 * i, 2 * i + 1),
            };
            let (x1, x2) = (row[a] as f64, row[b] as f64);
            row[a] = (m * (x1 * cos - x2 * sin)) as f32;
            row[b] = (m * (x1 * sin + x2 * cos)) as f32;
        }
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

/// Recording for [`crate::ops::rope`]: ∂x = (m R(θ))ᵀ g = P (m R(θ)) P g.
pub(crate) fn record_rope(
    out: Tensor,
    x: &Tensor,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let positions = positions.to_vec();
    let (base, scaling) = (freqs.base, freqs.scaling);
    let factors: Option<Vec<f32>> = freqs.freq_factors.map(<[f32]>::to_vec);
    record(out, "rope", &[x], move |g| {
        let swapped = swap_pairs(g, convention)?;
        let freqs = RopeFreqs {
            base,
            scaling,
            freq_factors: factors.as_deref(),
        };
        let rotated = rope_with(&swapped, &positions, &freqs, convention)?;
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

    /// Every scaling lucent reads, with and without frequency factors (d = 16: 8 pairs).
    fn scaled_cases(factors: &[f32]) -> Vec<RopeFreqs<'_>> {
        let scalings = [
            RopeScaling::None,
            RopeScaling::Linear { factor: 8.0 },
            RopeScaling::Yarn {
                factor: 4.0,
                original_context: 64,
                attn_factor: 1.0,
            },
            RopeScaling::Yarn {
                factor: 16.0,
                original_context: 4096,
                attn_factor: 1.25,
            },
        ];
        let mut out = Vec::new();
        for scaling in scalings {
            for freq_factors in [None, Some(factors)] {
                out.push(RopeFreqs {
                    base: 10_000.0,
                    scaling,
                    freq_factors,
                });
            }
        }
        out
    }

    #[test]
    fn scaled_table_and_llama_cpp_order_equal_twin() -> TestResult {
        let mut rng = StdRng::seed_from_u64(7);
        let d = 16;
        let factors = [1.0, 0.5, 2.0, 3.5, 8.0, 1.25, 6.0, 0.75];
        let t = 9;
        let x = Tensor::randn(&[2, t, d], 1.0, &mut rng);
        let positions: Vec<usize> = (0..t).map(|i| 3 + 7 * i).collect();
        for freqs in scaled_cases(&factors) {
            for conv in [RopeConvention::RotateHalf, RopeConvention::Interleaved] {
                let mut twin = x.clone();
                for (i, row) in twin.data_mut().chunks_mut(d).enumerate() {
                    reference::rotate_row_with(row, positions[i % t], &freqs, conv);
                }
                let fast = rope_with(&x, &positions, &freqs, conv)?;
                // Tolerance: 2e-6 absolute (f32 angles and magnitudes within 1e-7
                // relative, m ≤ 1.6, inputs O(1)).
                let err = fast.max_abs_diff(&twin)?;
                assert!(err <= 2e-6, "{freqs:?} {conv:?}: table {err}");
                // llama.cpp's order builds θ by repeated f32 products: its angles drift
                // from the f64 ones by ~1e-6 relative (angles here ≤ 59 rad).
                let mut in_order = x.clone();
                llama_cpp::rope_rows(in_order.data_mut(), d, &positions, &freqs, conv);
                let err = in_order.max_abs_diff(&twin)?;
                assert!(err <= 2e-4, "{freqs:?} {conv:?}: llama.cpp order {err}");
            }
        }
        Ok(())
    }

    /// llama.cpp's RoPE gives the same bits whatever the threads and the split of its
    /// angles (by positions) and rotations (by rows), at every level (FMA instructions
    /// or the C library's `fmaf`), and whether Q and K share one computation of the
    /// angles or each has its own. The sizes put both splits above their threshold.
    #[test]
    fn llama_cpp_rope_is_the_same_split_shared_or_alone() -> TestResult {
        use crate::runtime::{Isa, Runtime};
        let mut rng = StdRng::seed_from_u64(11);
        let (t, d) = (301, 128);
        let q = Tensor::randn(&[2, t, d], 1.0, &mut rng);
        let k = Tensor::randn(&[1, t, d], 1.0, &mut rng);
        let positions: Vec<usize> = (0..t).map(|i| 5 + 3 * i).collect();
        let factors: Vec<f32> = (0..d / 2).map(|i| 1.0 + (i % 7) as f32 * 0.5).collect();
        let bits = |x: &Tensor| x.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for freqs in scaled_cases(&factors) {
            for conv in [RopeConvention::RotateHalf, RopeConvention::Interleaved] {
                // One thread, no FMA instructions, each tensor alone.
                let one = Runtime::builder().threads(1).isa(Isa::Scalar).build()?;
                let (mut q1, mut k1) = (q.clone(), k.clone());
                one.install(|| {
                    llama_cpp::rope_rows(q1.data_mut(), d, &positions, &freqs, conv);
                    llama_cpp::rope_rows(k1.data_mut(), d, &positions, &freqs, conv);
                });
                assert_ne!(bits(&q1), bits(&q), "{freqs:?} {conv:?}: nothing rotated");
                for isa in [Isa::Scalar, Isa::Avx2] {
                    for threads in [1, 2] {
                        let rt = Runtime::builder().threads(threads).isa(isa).build()?;
                        let (mut q2, mut k2) = (q.clone(), k.clone());
                        rt.install(|| {
                            let data = &mut [q2.data_mut(), k2.data_mut()];
                            llama_cpp::rope_rows_shared(data, d, &positions, &freqs, conv);
                        });
                        let case = format!("{freqs:?} {conv:?} {isa:?} {threads} threads");
                        assert_eq!(bits(&q2), bits(&q1), "{case}: Q");
                        assert_eq!(bits(&k2), bits(&k1), "{case}: K");
                    }
                }
            }
        }
        Ok(())
    }

    /// The scalings change the angles (a twin that ignored them would pass the test
    /// above against a table that ignored them too).
    #[test]
    fn each_scaling_changes_the_angles() {
        let factors = [1.0, 0.5, 2.0, 3.5, 8.0, 1.25, 6.0, 0.75];
        let cases = scaled_cases(&factors);
        let angles = |f: &RopeFreqs<'_>| -> Vec<(f64, f64)> {
            (0..8).map(|i| reference::angle(40, i, 16, f)).collect()
        };
        for (i, a) in cases.iter().enumerate() {
            for b in &cases[i + 1..] {
                assert_ne!(angles(a), angles(b), "{a:?} and {b:?} give the same angles");
            }
        }
        // YaRN: the fastest pair extrapolates (θ as without scaling), the slowest
        // interpolates (θ / s), and the magnitude is a·(1 + 0.1 ln s).
        let plain = RopeFreqs::plain(10_000.0);
        let yarn = cases[4];
        let (p0, _) = reference::angle(40, 0, 16, &plain);
        let (y0, m) = reference::angle(40, 0, 16, &yarn);
        let (p7, _) = reference::angle(40, 7, 16, &plain);
        let (y7, _) = reference::angle(40, 7, 16, &yarn);
        assert_eq!(p0, y0);
        assert!((y7 - p7 / 4.0).abs() < 1e-12, "{y7} {p7}");
        assert!((m - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-12, "{m}");
    }

    #[test]
    fn bad_scalings_are_refused_by_name() {
        let x = Tensor::zeros(&[1, 8]);
        let four = [1.0f32; 4];
        let three = [1.0f32; 3];
        for (freqs, want) in [
            (
                RopeFreqs {
                    base: 10_000.0,
                    scaling: RopeScaling::Linear { factor: 0.0 },
                    freq_factors: None,
                },
                "factor",
            ),
            (
                RopeFreqs {
                    base: 10_000.0,
                    scaling: RopeScaling::Yarn {
                        factor: 4.0,
                        original_context: 0,
                        attn_factor: 1.0,
                    },
                    freq_factors: None,
                },
                "original_context",
            ),
            (
                RopeFreqs {
                    base: 10_000.0,
                    scaling: RopeScaling::None,
                    freq_factors: Some(&three),
                },
                "d/2 = 4",
            ),
            (
                RopeFreqs {
                    base: 10_000.0,
                    scaling: RopeScaling::None,
                    freq_factors: Some(&[1.0, 1.0, -1.0, 1.0]),
                },
                "> 0",
            ),
        ] {
            let e = rope_with(&x, &[0], &freqs, RopeConvention::RotateHalf)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{freqs:?}: {e}");
        }
        let ok = RopeFreqs {
            base: 10_000.0,
            scaling: RopeScaling::None,
            freq_factors: Some(&four),
        };
        assert!(rope_with(&x, &[0], &ok, RopeConvention::RotateHalf).is_ok());
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
