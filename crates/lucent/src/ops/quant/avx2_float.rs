//! AVX2 + FMA + F16C kernels of the float weight types (`F32`, `F16`, `BF16`), in the two
//! orders llama.cpp's AVX2 build sums them (docs/quantization.md, "F32, F16 and BF16
//! matrices in llama.cpp"): its `vec_dot` per output (four eight-lane accumulators over
//! 32-number steps, each type with its own reduction and leftovers: [`kernel`]) and
//! tinyBLAS's one eight-lane chain per output for a prompt ([`chain_kernels`]). Weights
//! are widened eight at a time (`vcvtph2ps` for F16, the 16 bits shifted up for BF16);
//! the activations come already rounded to the weight's type
//! ([`QuantizedActs::f32s`](super::QuantizedActs)). Each kernel equals its twin in
//! [`super::reference`] bit for bit; the AVX-512 level runs these same kernels.

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::dispatch::{Dot4Fn, DotFn};
use crate::tensor::quant::GgmlType;

/// The weight types of [`load8`] and [`load1`], as const parameters.
const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// Bytes of one weight of type `T`.
const fn width<const T: u8>() -> usize {
    if T == F32 {
        4
    } else {
        2
    }
}

/// Eight weights of type `T` from `p`, widened to f32 (exact).
///
/// # Safety
/// AVX2 + F16C; `p` points at eight weights.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const T: u8>(p: *const u8) -> __m256 {
    unsafe {
        match T {
            F32 => _mm256_loadu_ps(p as *const f32),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
            _ => _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
                16,
            )),
        }
    }
}

/// Weight `i` of a row of type `T`, widened to f32.
#[inline(always)]
fn load1<const T: u8>(row: &[u8], i: usize) -> f32 {
    match T {
        F32 => f32::from_le_bytes([row[4 * i], row[4 * i + 1], row[4 * i + 2], row[4 * i + 3]]),
        F16 => f16::from_bits(u16::from_le_bytes([row[2 * i], row[2 * i + 1]])).to_f32(),
        _ => bf16::from_bits(u16::from_le_bytes([row[2 * i], row[2 * i + 1]])).to_f32(),
    }
}

/// The dot kernel of a float type: llama.cpp's `vec_dot` order (the twins
/// `reference::dot_f32`, `dot_f16`, `dot_bf16`); None for the other types.
pub(crate) fn kernel(dtype: GgmlType) -> Option<DotFn> {
    // SAFETY (all): selected only after AVX2+FMA+F16C were detected; the callers check
    // that the row and the activations agree in length.
    match dtype {
        GgmlType::F32 => Some(|r, a| unsafe { dot::<F32>(r, &a.f32s) }),
        GgmlType::F16 => Some(|r, a| unsafe { dot::<F16>(r, &a.f32s) }),
        GgmlType::BF16 => Some(|r, a| unsafe { dot::<BF16>(r, &a.f32s) }),
        _ => None,
    }
}

/// The prompt kernels of a float type in tinyBLAS's order (the twin
/// `reference::dot_float_chain`): one activation row and four; None for the other types.
pub(crate) fn chain_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    // SAFETY (all): as in `kernel`; the callers take these only for rows whose length is
    // a multiple of 8.
    match dtype {
        GgmlType::F32 => Some((
            |r, a| unsafe { chain::<F32, 1>(r, [a])[0] },
            |r, a| unsafe { chain::<F32, 4>(r, a) },
        )),
        GgmlType::F16 => Some((
            |r, a| unsafe { chain::<F16, 1>(r, [a])[0] },
            |r, a| unsafe { chain::<F16, 4>(r, a) },
        )),
        GgmlType::BF16 => Some((
            |r, a| unsafe { chain::<BF16, 1>(r, [a])[0] },
            |r, a| unsafe { chain::<BF16, 4>(r, a) },
        )),
        _ => None,
    }
}

/// `w · x` for one row of `T` weights in `vec_dot`'s order: four accumulators over the
/// 32-number steps, then the type's reduction and leftovers (F32: `(0 + 2) + (1 + 3)`,
/// halves, two `hadd`s, leftovers in f32, the last `r mod 4` fused; F16: the same
/// reduction, leftovers in f64; BF16: halves, then `movehl` and `movehdup`, leftovers in
/// f64).
///
/// # Safety
/// AVX2 + FMA + F16C; `row` holds `x.len()` weights of `T`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot<const T: u8>(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    debug_assert!(row.len() >= n * width::<T>());
    let np = n - n % 32;
    let (w, xp) = (row.as_ptr(), x.as_ptr());
    // SAFETY: i + 32 ≤ np ≤ n numbers of both rows (this function's contract).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < np {
            for (j, s) in acc.iter_mut().enumerate() {
                let k = i + 8 * j;
                *s = _mm256_fmadd_ps(
                    load8::<T>(w.add(k * width::<T>())),
                    _mm256_loadu_ps(xp.add(k)),
                    *s,
                );
            }
            i += 32;
        }
        // (c1 + c3) + (c2 + c4), then the halves.
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let h = _mm_add_ps(_mm256_extractf128_ps::<1>(s), _mm256_castps256_ps128(s));
        if T == BF16 {
            let g = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let g = _mm_add_ss(g, _mm_movehdup_ps(g));
            let mut total = _mm_cvtss_f32(g) as f64;
            for (i, &xi) in x.iter().enumerate().skip(np) {
                total += (load1::<T>(row, i) * xi) as f64;
            }
            return total as f32;
        }
        let g = _mm_hadd_ps(h, h);
        let g = _mm_hadd_ps(g, g);
        if T == F16 {
            let mut total = _mm_cvtss_f32(g) as f64;
            for (i, &xi) in x.iter().enumerate().skip(np) {
                total += (load1::<T>(row, i) * xi) as f64;
            }
            return total as f32;
        }
        let mut total = _mm_cvtss_f32(g);
        let fused_from = n - (n - np) % 4;
        for (i, &xi) in x.iter().enumerate().take(fused_from).skip(np) {
            total += load1::<T>(row, i) * xi;
        }
        for (i, &xi) in x.iter().enumerate().skip(fused_from) {
            total = load1::<T>(row, i).mul_add(xi, total);
        }
        total
    }
}

/// One row of `T` weights against `R` activation rows in tinyBLAS's order: per
/// activation row one eight-lane chain `acc = fma(w, x, acc)` over the row, then the
/// lanes summed as `hsum`: halves added, `(0 + 2) + (1 + 3)`.
///
/// # Safety
/// AVX2 + FMA + F16C; every `a[r]` has the same length, a multiple of 8, and `row` holds
/// that many weights of `T`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn chain<const T: u8, const R: usize>(row: &[u8], a: [&QuantizedActs; R]) -> [f32; R] {
    let n = a[0].f32s.len();
    debug_assert!(n.is_multiple_of(8) && row.len() >= n * width::<T>());
    let w = row.as_ptr();
    // SAFETY: i + 8 ≤ n numbers of every row (this function's contract).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut i = 0;
        while i < n {
            let wv = load8::<T>(w.add(i * width::<T>()));
            for (s, x) in acc.iter_mut().zip(a.iter()) {
                *s = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.f32s.as_ptr().add(i)), *s);
            }
            i += 8;
        }
        let mut out = [0.0f32; R];
        for (o, s) in out.iter_mut().zip(acc) {
            let h = _mm_add_ps(_mm256_extractf128_ps::<1>(s), _mm256_castps256_ps128(s));
            let g = _mm_add_ps(h, _mm_movehl_ps(h, h));
            *o = _mm_cvtss_f32(_mm_add_ss(g, _mm_movehdup_ps(g)));
        }
        out
    }
}
