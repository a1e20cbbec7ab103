//! RoPE in llama.cpp's arithmetic ([`crate::runtime::Numerics::LlamaCpp`]): the angles
//! and rotations as `ggml_rope_ext` computes them (θ by repeated f32 products, the C
//! library's cos and sin in f32, the products fused as GCC fuses them), with its
//! frequency factors, linear scaling and YaRN. [`super::apply`] runs it for the numerics
//! that ask for it; compiled with FMA instructions from AVX2, with the same numbers.

use crate::ops::fma_at;
use crate::ops::rope::{yarn_corr_dims, yarn_ramp, RopeConvention, RopeFreqs, RopeScaling};
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
    rope_rows_at(crate::runtime::isa(), data, d, positions, freqs, convention)
}

/// [`rope_rows`] at the instruction-set level `isa` (one the CPU runs): FMA instructions
/// from [`Isa::Avx2`], the C library's `fmaf` below; the same numbers.
pub(crate) fn rope_rows_at(
    isa: Isa,
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    #[cfg(target_arch = "x86_64")]
    if fma_at(isa) {
        // SAFETY: the level has AVX2 and FMA, and the runtime caps it to the CPU's.
        unsafe { rope_rows_fma(data, d, positions, freqs, convention) };
        return;
    }
    rope_rows_with(data, d, positions, freqs, convention);
}

/// [`rope_rows`] compiled with FMA instructions.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rope_rows_fma(
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    rope_rows_with(data, d, positions, freqs, convention);
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

#[inline(always)]
fn rope_rows_with(
    data: &mut [f32],
    d: usize,
    positions: &[usize],
    freqs: &RopeFreqs<'_>,
    convention: RopeConvention,
) {
    if positions.is_empty() {
        return;
    }
    let half = d / 2;
    let scale = freqs.base.powf(-2.0 / d as f32);
    // llama.cpp's freq_scale (hparams: 1/factor), and YaRN's corrections.
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
    // The angles of each position once: (positions, half) cos and sin.
    let mut cos = vec![0.0f32; positions.len() * half];
    let mut sin = vec![0.0f32; positions.len() * half];
    for (k, &pos) in positions.iter().enumerate() {
        let mut theta = pos as f32;
        for i in 0..half {
            let extrap = match freqs.freq_factors {
                Some(f) => theta / f[i],
                None => theta,
            };
            let interp = extrap * freq_scale;
            let (angle, m) = match yarn {
                None => (interp, 1.0f32),
                Some((corr, m)) => {
                    let mix = yarn_ramp(corr, i);
                    (interp.mul_add(1.0 - mix, extrap * mix), m)
                }
            };
            cos[k * half + i] = angle.cos() * m;
            sin[k * half + i] = angle.sin() * m;
            theta *= scale;
        }
    }
    for (r, row) in data.chunks_exact_mut(d).enumerate() {
        let k = r % positions.len();
        let (cos, sin) = (&cos[k * half..][..half], &sin[k * half..][..half]);
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
