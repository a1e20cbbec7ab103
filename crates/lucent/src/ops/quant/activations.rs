//! Activation rows quantised for dot products with quantised weights, with llama.cpp's
//! rules to the bit ([`quantize_activations`]): 8-bit blocks of 32 (`Q8_0`) against the
//! 32-block weight types, of 256 with 16-sums (`Q8_K`) against the K-quants, or as
//! numbers against float weights: kept in f32 against F32, rounded to f16 against F16
//! and to bfloat16 against BF16, as llama.cpp converts them ([`ActKind`]).

use half::f16;

#[cfg(target_arch = "x86_64")]
use crate::ops::quant::{avx2_quantize, avx512};
use crate::runtime::Isa;
use crate::tensor::quant::{ActKind, GgmlType, QK, QK_K};
use crate::{Error, Result};

/// An activation row prepared for dot products with one matrix type's rows
/// ([`QMatrix::prepare`](super::QMatrix::prepare)): its 8-bit blocks and their scales.
#[derive(Clone, Debug)]
pub struct QuantizedActs {
    /// The preparation.
    pub(crate) kind: ActKind,
    /// Numbers in the row.
    pub(crate) len: usize,
    /// Per block: the scale `dx` (`x ≈ dx · q`).
    pub(crate) d: Vec<f32>,
    /// Per block of 32 (Q8_0 only): `dx · Σ q`, rounded to f16 as llama.cpp stores it.
    pub(crate) sum: Vec<f32>,
    /// Per group of 16 (Q8_K) or per block of 32 (Q8_0): `Σ q`.
    pub(crate) bsums: Vec<i32>,
    /// The 8-bit values, in [−127, 127].
    pub(crate) qs: Vec<i8>,
    /// The row as numbers (the float kinds only): itself for `ActKind::F32`, each
    /// number rounded to f16 (`F16`) or bfloat16 (`BF16`) and widened back, exactly.
    pub(crate) f32s: Vec<f32>,
}

impl QuantizedActs {
    /// The values these activations stand for (`dx · q`), for tests and bounds.
    pub fn dequantize(&self) -> Vec<f32> {
        match self.kind {
            ActKind::F32 | ActKind::F16 | ActKind::BF16 => self.f32s.clone(),
            ActKind::Q8_0 | ActKind::Q8_K => {
                let b = if self.kind == ActKind::Q8_0 { QK } else { QK_K };
                self.qs
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| self.d[i / b] * q as f32)
                    .collect()
            }
        }
    }
}

/// Quantise the activation row `x` for dot products with weights of `dtype`, with
/// llama.cpp's rules to the bit (so the two engines see the same 8-bit activations):
///
/// - 32-blocks (`Q8_0` kind): `q = round(x · 127 / max|x|)` (ties to even), and the
///   scale kept as llama.cpp stores it, `dx = f16(max|x| / 127)`; for the `_1` weight
///   kinds also `s = f16(max|x| / 127 · Σ q)`.
/// - 256-blocks (`Q8_K` kind): with `m` the value of largest magnitude (sign kept),
///   `q = round(x · (−127 / m))` (ties to even) and `dx = 1 / (−127 / m)` in f32.
///
/// An all-zero block has `dx = 0` and `q = 0`. Errors if `x.len()` is not a whole number
/// of blocks.
pub(crate) fn quantize_activations(dtype: GgmlType, x: &[f32]) -> Result<QuantizedActs> {
    quantize_rows(dtype, x, crate::runtime::isa())
}

/// [`quantize_activations`], block by block with the AVX-512 kernels at
/// [`Isa::Avx512`], the AVX2 ones at [`Isa::Avx2`], else with the scalar twin ([`reference::quantize_activations`](super::reference::quantize_activations)).
pub(crate) fn quantize_rows(dtype: GgmlType, x: &[f32], isa: Isa) -> Result<QuantizedActs> {
    let kind = dtype.activation_kind();
    let block = match kind {
        ActKind::F32 | ActKind::F16 | ActKind::BF16 => 1,
        ActKind::Q8_0 => QK,
        ActKind::Q8_K => QK_K,
    };
    if !x.len().is_multiple_of(block) {
        return Err(Error::Shape(format!(
            "activations for {dtype} weights come in blocks of {block}; this row has {} numbers",
            x.len()
        )));
    }
    let mut a = QuantizedActs {
        kind,
        len: x.len(),
        d: Vec::new(),
        sum: Vec::new(),
        bsums: Vec::new(),
        qs: Vec::new(),
        f32s: Vec::new(),
    };
    match kind {
        ActKind::F32 => {
            a.f32s = x.to_vec();
            return Ok(a);
        }
        ActKind::F16 => {
            a.f32s = x.iter().map(|&v| round_f16(v)).collect();
            return Ok(a);
        }
        ActKind::BF16 => {
            a.f32s = x.iter().map(|&v| round_bf16(v)).collect();
            return Ok(a);
        }
        ActKind::Q8_0 | ActKind::Q8_K => {}
    }
    let nb = x.len() / block;
    a.d.reserve(nb);
    a.qs.resize(x.len(), 0);
    for (bi, xb) in x.chunks_exact(block).enumerate() {
        let qb = &mut a.qs[bi * block..(bi + 1) * block];
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            // SAFETY: the runtime caps `isa` to the CPU's level; xb and qb hold one block.
            let done = unsafe {
                match (kind, isa >= Isa::Avx512) {
                    (ActKind::Q8_0, true) => {
                        avx512::quantize::quantize_q8_0(xb, qb, &mut a.d, &mut a.sum, &mut a.bsums)
                    }
                    (ActKind::Q8_0, false) => {
                        avx2_quantize::quantize_q8_0(xb, qb, &mut a.d, &mut a.sum, &mut a.bsums)
                    }
                    (_, true) => avx512::quantize::quantize_q8_k(xb, qb, &mut a.d, &mut a.bsums),
                    (_, false) => avx2_quantize::quantize_q8_k(xb, qb, &mut a.d, &mut a.bsums),
                }
            };
            if done {
                continue;
            }
        }
        match kind {
            ActKind::Q8_0 => {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                for (q, &v) in qb.iter_mut().zip(xb) {
                    *q = round_even(v * id).clamp(-127.0, 127.0) as i8;
                }
                let sq: i32 = qb.iter().map(|&q| q as i32).sum();
                push_q8_0_scales(d, sq, &mut a.d, &mut a.sum, &mut a.bsums);
            }
            ActKind::Q8_K => {
                // The first value of largest magnitude, with its sign.
                let (mut amax, mut max) = (0.0f32, 0.0f32);
                for &v in xb {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    push_q8_k_zero(&mut a.d, &mut a.bsums);
                    continue;
                }
                let iscale = -127.0 / max;
                for (q, &v) in qb.iter_mut().zip(xb) {
                    *q = round_even(iscale * v).clamp(-127.0, 127.0) as i8;
                }
                a.d.push(1.0 / iscale);
                for g in qb.chunks_exact(16) {
                    a.bsums.push(g.iter().map(|&q| q as i32).sum());
                }
            }
            ActKind::F32 | ActKind::F16 | ActKind::BF16 => {}
        }
    }
    Ok(a)
}

/// The factor `127 / max|x|` a Q8_0 block's numbers are multiplied by before rounding
/// (0 for an all-zero block), for the vector kernels: None where they leave the block
/// to the scalar rules (a largest magnitude that is not finite, or so small, a
/// subnormal, that the factor overflows).
pub(crate) fn q8_0_factor(amax: f32) -> Option<f32> {
    if amax == 0.0 {
        Some(0.0)
    } else {
        Some(127.0 / amax).filter(|id| amax.is_finite() && id.is_finite())
    }
}

/// A Q8_0 block's scales as llama.cpp stores them, from `dx = max|x| / 127` and the sum
/// of its numbers: `f16(dx)` onto `d`, `f16(dx · Σq)` onto `sum`; and `Σq` itself onto
/// `bsums`.
pub(crate) fn push_q8_0_scales(
    dx: f32,
    sq: i32,
    d: &mut Vec<f32>,
    sum: &mut Vec<f32>,
    bsums: &mut Vec<i32>,
) {
    d.push(f16::from_f32(dx).to_f32());
    sum.push(f16::from_f32(dx * sq as f32).to_f32());
    bsums.push(sq);
}

/// An all-zero Q8_K block's scale and group sums (its numbers stay 0).
pub(crate) fn push_q8_k_zero(d: &mut Vec<f32>, bsums: &mut Vec<i32>) {
    d.push(0.0);
    bsums.extend([0; QK_K / 16]);
}

/// `x` rounded to the nearest f16, ties to even (±65504 past which it is ±∞, f16
/// subnormals kept), widened back to f32: llama.cpp's `ggml_cpu_fp32_to_fp16` (F16C
/// `vcvtps2ph` with rounding mode 0) for an F16 weight's activations.
#[inline]
pub(crate) fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// `x` rounded to the nearest bfloat16 as llama.cpp's `ggml_compute_fp32_to_bf16` does it
/// (`(u + 0x7fff + ((u >> 16) & 1)) >> 16` on the bits `u`, a NaN kept NaN and made
/// quiet), widened back to f32: a BF16 weight's activations.
#[inline]
pub(crate) fn round_bf16(x: f32) -> f32 {
    let u = x.to_bits();
    let h = if (u & 0x7fff_ffff) > 0x7f80_0000 {
        (u >> 16) | 64
    } else {
        (u + (0x7fff + ((u >> 16) & 1))) >> 16
    };
    f32::from_bits(h << 16)
}

/// `x` rounded to the nearest integer, ties to even, for |x| < 2²²: adding and taking
/// away 1.5·2²³ leaves no fraction bits (ggml's `nearest_int`; inline, where
/// `round_ties_even` is a library call).
#[inline(always)]
pub(crate) fn round_even(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}
