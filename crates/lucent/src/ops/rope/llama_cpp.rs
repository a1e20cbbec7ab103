//! RoPE in llama.cpp's arithmetic ([`crate::runtime::Numerics::LlamaCpp`]): the angles
//! and rotations as `ggml_rope_ext` computes them (θ by repeated f32 products, the C
//! library's cos and sin in f32, the products fused as GCC fuses them), with its
//! frequency factors, linear scaling and YaRN. [`super::apply`] runs it for the numerics
//! that ask for it; compiled with FMA instructions from AVX2, with the same numbers.

use crate::ops::rope::{yarn_corr_dims, yarn_ramp, RopeConvention, RopeFreqs, RopeScaling};
use crate::ops::{fma_at, simd};
use crate::runtime::Isa;

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
/// fused multiply-adds: [`yarn_attn_factor`]).
pub fn rope_rows(
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    rope_rows_at(
        crate::runtime::isa(),
        &mut [data],
        d,
        positions,
        freqs,
        convention,
    )
}

/// [`rope_rows`] of several tensors whose rows cycle through the same `positions` (a
/// prompt's Q and K): the angles are computed once for all of them.
pub fn rope_rows_shared(
    data: &mut [&mut [f32]],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    rope_rows_at(crate::runtime::isa(), data, d, positions, freqs, convention)
}

/// Numbers from which a RoPE call splits its work over the threads: the angles by
/// positions, the rotations by rows. A team's loop costs a few microseconds; a
/// 128-token prompt's K of one 256-wide head (Gemma 3) is 32768 numbers, which one
/// thread rotated while the other waited.
const PARALLEL_MIN: usize = 1 << 14;

/// [`rope_rows_shared`] at the instruction-set level `isa` (one the CPU runs): FMA
/// instructions from [`Isa::Avx2`], the C library's `fmaf` below; the same numbers,
/// whatever the threads and their split.
pub(crate) fn rope_rows_at(
    isa: Isa,
    data: &mut [&mut [f32]],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    let t = positions.len();
    if t == 0 || d < 2 {
        return;
    }
    let half = d / 2;
    let steps = AngleSteps::new(d, freqs);
    // (t, 2, half): each position's cos row, then its sin row.
    let mut angles = vec![0.0f32; 2 * t * half];
    let fill = |c: usize, per: usize, chunk: &mut [f32]| {
        let at = &positions[c * per..][..chunk.len() / (2 * half)];
        #[cfg(target_arch = "x86_64")]
        if fma_at(isa) {
            // SAFETY: the level has AVX2 and FMA, and the runtime caps it to the CPU's.
            unsafe { angles_fma(chunk, at, &steps, freqs.freq_factors) };
            return;
        }
        angles_with(chunk, at, &steps, freqs.freq_factors);
    };
    // A small call (a decoded token's) stays on the calling thread.
    match simd::parts_for(t * half, t, PARALLEL_MIN) {
        0 | 1 => fill(0, t, &mut angles),
        parts => {
            let per = t.div_ceil(parts);
            crate::threads::for_each_chunk_mut(&mut angles, per * 2 * half, |c, chunk| {
                fill(c, per, chunk)
            });
        }
    }
    let angles = &angles;
    let rotate = |c: usize, per: usize, chunk: &mut [f32]| {
        let first = c * per;
        #[cfg(target_arch = "x86_64")]
        if fma_at(isa) {
            // SAFETY: as above.
            unsafe { rotate_fma(chunk, first, d, t, angles, convention) };
            return;
        }
        rotate_with(chunk, first, d, t, angles, convention);
    };
    for x in data.iter_mut() {
        let rows = x.len() / d;
        match simd::parts_for(x.len(), rows, PARALLEL_MIN) {
            0 | 1 => rotate(0, rows, x),
            parts => {
                let per = rows.div_ceil(parts);
                crate::threads::for_each_chunk_mut(x, per * d, |c, chunk| rotate(c, per, chunk));
            }
        }
    }
}

/// What every angle of one call shares: the ratio `s = powf(base, −2/d)` of successive
/// pairs' angles, llama.cpp's `freq_scale`, and YaRN's corrections and magnitude.
struct AngleSteps {
    /// Pairs a row.
    half: usize,
    /// θ's ratio from pair i to i + 1.
    scale: f32,
    /// llama.cpp's freq_scale (hparams: 1/factor).
    freq_scale: f32,
    /// YaRN's correction dims and magnitude m.
    yarn: Option<([f32; 2], f32)>,
}

impl AngleSteps {
    fn new(d: usize, freqs: &RopeFreqs<'_>) -> AngleSteps {
        let scale = freqs.base.powf(-2.0 / d as f32);
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
                let m = yarn_attn_factor(freqs.scaling) * 0.1f32.mul_add((1.0 / fs).ln(), 1.0);
                (fs, Some((corr, m)))
            }
        };
        AngleSteps {
            half: d / 2,
            scale,
            freq_scale,
            yarn,
        }
    }
}

/// [`angles_with`] compiled with FMA instructions.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn angles_fma(
    out: &mut [f32],
    positions: &[usize],
    steps: &AngleSteps,
    freq_factors: Option<&[f32]>,
) {
    angles_with(out, positions, steps, freq_factors);
}

/// [`rotate_with`] compiled with FMA instructions.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rotate_fma(
    rows: &mut [f32],
    first: usize,
    d: usize,
    t: usize,
    angles: &[f32],
    convention: RopeConvention,
) {
    rotate_with(rows, first, d, t, angles, convention);
}

/// The attention factor llama.cpp's context hands its RoPE for `scaling` (llama.cpp's
/// `cparams.yarn_attn_factor`, with llama-cpp-python's default of 1 before it): for
/// YaRN `get_mscale(factor) · 1/(1 + 0.1·ln factor) · attn_factor` in f32 without fused
/// multiply-adds (its file is compiled without them), where factor = 1/freq_scale
/// and get_mscale(s) = 0.1·ln s + 1 for s > 1, else 1; 1 otherwise. With the kernel's
/// own (1 + 0.1·ln(1/freq_scale)) the product is attn_factor·(1 + 0.1·ln factor) up to
/// rounding.
pub fn yarn_attn_factor(scaling: RopeScaling) -> f32 {
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

/// The cos and sin rows (`out`: (positions, 2, half)) of `positions`, each angle as
/// `ggml_rope_ext` builds it (the steps in [`rope_rows`]'s doc).
#[inline(always)]
fn angles_with(
    out: &mut [f32],
    positions: &[usize],
    steps: &AngleSteps,
    freq_factors: Option<&[f32]>,
) {
    let half = steps.half;
    for (row, &pos) in out.chunks_exact_mut(2 * half).zip(positions) {
        let (cos, sin) = row.split_at_mut(half);
        let mut theta = pos as f32;
        for i in 0..half {
            let extrap = match freq_factors {
                Some(f) => theta / f[i],
                None => theta,
            };
            let interp = extrap * steps.freq_scale;
            let (angle, m) = match steps.yarn {
                None => (interp, 1.0f32),
                Some((corr, m)) => {
                    let mix = yarn_ramp(corr, i);
                    (interp.mul_add(1.0 - mix, extrap * mix), m)
                }
            };
            cos[i] = angle.cos() * m;
            sin[i] = angle.sin() * m;
            theta *= steps.scale;
        }
    }
}

/// Rotate `rows` (rows `first ..` of a tensor whose rows cycle through `t` positions)
/// by their positions' `angles` ((t, 2, d/2)), each pair with the products fused as
/// GCC fuses them.
#[inline(always)]
fn rotate_with(
    rows: &mut [f32],
    first: usize,
    d: usize,
    t: usize,
    angles: &[f32],
    convention: RopeConvention,
) {
    let half = d / 2;
    for (r, row) in rows.chunks_exact_mut(d).enumerate() {
        let k = (first + r) % t;
        let (cos, sin) = angles[2 * k * half..][..2 * half].split_at(half);
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
