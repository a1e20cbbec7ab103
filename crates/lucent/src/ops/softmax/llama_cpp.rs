//! Softmax in llama.cpp's arithmetic ([`crate::runtime::Numerics::LlamaCpp`], its AVX2
//! build): one row as `ggml_compute_forward_soft_max_f32` computes it, with its vector
//! exp ([`expf`]), the exps summed eight at a time by the tree ([`hsum8`]) and the
//! eight-sums in f64. Attention in llama.cpp's order ([`crate::ops::attention::llama_cpp`])
//! runs it on every score row; the eight-wide AVX2 and sixteen-wide AVX-512 twins compute
//! the same bits.

use crate::ops::activation::llama_cpp::expf;
#[cfg(target_arch = "x86_64")]
use crate::ops::activation::llama_cpp::{expf_avx2, expf_avx512};
use crate::ops::f16_dot::{hsum8, LANES};

/// One softmax row as `ggml_compute_forward_soft_max_f32` computes it, in place:
/// `x ← x · scale` (−∞ stays −∞), the maximum, `e = expf(x − max)` eight at a time with
/// each eight's [`hsum8`] added in f64, then `e · (f32)(1 / sum)`.
#[inline(always)]
pub fn softmax_row(row: &mut [f32], scale: f32) {
    for x in row.iter_mut() {
        *x *= scale;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    // llama.cpp's rows are padded to whole eights with masked (zero) entries, so a
    // short last chunk is an eight with zeros after it.
    let mut sum = 0.0f64;
    for ch in row.chunks_mut(LANES) {
        let mut e = [0.0f32; LANES];
        for (l, x) in ch.iter_mut().enumerate() {
            *x = expf(*x - max);
            e[l] = *x;
        }
        sum += hsum8(&e) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for x in row.iter_mut() {
        *x *= inv;
    }
}

/// [`softmax_row`] with scale 1, eight numbers a step with AVX2 (as llama.cpp's AVX2
/// build itself runs it): the maximum over lanes (as `f32::max`, NaN left out),
/// [`expf_avx2`], each eight's [`hsum8`] in registers added in f64 in order, then
/// `e · (f32)(1 / sum)` — the same bits.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax_row_avx2(row: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = row.len();
    // The eight numbers from i (a short last eight padded with `pad`).
    let load = |row: &[f32], i: usize, pad: f32| -> __m256 {
        if n - i >= LANES {
            // SAFETY: eight numbers from i lie within the row.
            unsafe { _mm256_loadu_ps(row.as_ptr().add(i)) }
        } else {
            let mut part = [pad; LANES];
            part[..n - i].copy_from_slice(&row[i..]);
            // SAFETY: `part` holds eight numbers.
            unsafe { _mm256_loadu_ps(part.as_ptr()) }
        }
    };
    let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..n).step_by(LANES) {
        mv = _mm256_max_ps(load(row, i, f32::NEG_INFINITY), mv); // a NaN in v leaves mv
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: `lanes` holds eight numbers.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), mv) };
    let max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0f64;
    for i in (0..n).step_by(LANES) {
        let e = expf_avx2(_mm256_sub_ps(load(row, i, 0.0), _mm256_set1_ps(max)));
        let left = n - i;
        let e = if left >= LANES {
            // SAFETY: eight numbers from i lie within the row.
            unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(i), e) };
            e
        } else {
            // Lanes past the row are zeros (llama.cpp's padding), as the twin's short eight.
            // SAFETY: `lanes` holds eight numbers.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), e) };
            lanes[left..].fill(0.0);
            row[i..].copy_from_slice(&lanes[..left]);
            // SAFETY: as the store above.
            unsafe { _mm256_loadu_ps(lanes.as_ptr()) }
        };
        // hsum8: t_m = e_m + e_{m+4}, then (t0 + t2) + (t1 + t3).
        let t = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps::<1>(e));
        let s = _mm_add_ps(t, _mm_movehl_ps(t, t));
        let h = _mm_add_ss(s, _mm_shuffle_ps::<0b01>(s, s));
        sum += _mm_cvtss_f32(h) as f64;
    }
    let inv = _mm256_set1_ps((1.0 / sum) as f32);
    let mut chunks = row.chunks_exact_mut(LANES);
    for ch in &mut chunks {
        // SAFETY: `ch` holds eight numbers.
        unsafe {
            _mm256_storeu_ps(
                ch.as_mut_ptr(),
                _mm256_mul_ps(_mm256_loadu_ps(ch.as_ptr()), inv),
            )
        };
    }
    let inv = (1.0 / sum) as f32;
    chunks.into_remainder().iter_mut().for_each(|x| *x *= inv);
}

/// [`softmax_row`] with scale 1, sixteen numbers a step: the maximum over lanes (as
/// `f32::max`, NaN left out), [`expf_avx512`], each eight's [`hsum8`] added in f64 in
/// order, then `e · (f32)(1 / sum)` — the same bits.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn softmax_row_avx512(row: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = row.len();
    let mask = |i: usize| -> __mmask16 {
        let left = n - i;
        if left >= 16 {
            0xFFFF
        } else {
            (1u16 << left) - 1
        }
    };
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mv = ninf;
    for i in (0..n).step_by(16) {
        // SAFETY: the mask keeps the load within the row.
        let v = unsafe { _mm512_mask_loadu_ps(ninf, mask(i), row.as_ptr().add(i)) };
        mv = _mm512_max_ps(v, mv); // a NaN in v leaves mv (as f32::max leaves it out)
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: `lanes` holds sixteen numbers.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), mv) };
    let max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0f64;
    for i in (0..n).step_by(16) {
        let m = mask(i);
        // SAFETY (load, store): the mask keeps both within the row.
        let v = unsafe { _mm512_maskz_loadu_ps(m, row.as_ptr().add(i)) };
        // Lanes past the row are zeros (llama.cpp's padding), as the twin's short eight.
        let e = _mm512_maskz_mov_ps(m, expf_avx512(_mm512_sub_ps(v, _mm512_set1_ps(max))));
        unsafe { _mm512_mask_storeu_ps(row.as_mut_ptr().add(i), m, e) };
        // SAFETY: `lanes` holds sixteen numbers.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), e) };
        let (lo, hi) = lanes.split_at(LANES);
        sum += hsum8(&std::array::from_fn(|l| lo[l])) as f64;
        if n - i > LANES {
            sum += hsum8(&std::array::from_fn(|l| hi[l])) as f64;
        }
    }
    let inv = _mm512_set1_ps((1.0 / sum) as f32);
    for i in (0..n).step_by(16) {
        let m = mask(i);
        // SAFETY (load, store): the mask keeps both within the row.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, row.as_ptr().add(i));
            _mm512_mask_storeu_ps(row.as_mut_ptr().add(i), m, _mm512_mul_ps(v, inv));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::avx512_at;
    use crate::runtime::Isa;

    /// The unscaled softmax at `isa` (eight wide from [`Isa::Avx2`], sixteen from
    /// [`Isa::Avx512`]).
    fn softmax_at(isa: Isa, row: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if avx512_at(isa) {
            // SAFETY: an available level with AVX-512F, AVX2 and FMA.
            return unsafe { softmax_row_avx512(row) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::ops::fma_at(isa) {
            // SAFETY: an available level with AVX2 and FMA.
            return unsafe { softmax_row_avx2(row) };
        }
        softmax_row(row, 1.0)
    }

    /// The sixteen-wide softmax equals the twin bit for bit: every length up to past two
    /// registers, masked (−∞) entries, a fully masked row, and spreads wide enough for
    /// expf's far branches (x − max below −87).
    #[test]
    fn softmax_of_every_level_equals_the_twin() {
        for isa in Isa::available() {
            for n in 1..=40usize {
                for spread in [0.1f32, 3.0, 60.0] {
                    let mut row: Vec<f32> = (0..n)
                        .map(|i| (((i * 37 + n) % 23) as f32 - 11.0) * spread)
                        .collect();
                    if n > 3 {
                        row[n / 2] = f32::NEG_INFINITY;
                    }
                    let mut twin = row.clone();
                    softmax_row(&mut twin, 1.0);
                    softmax_at(isa, &mut row);
                    let bits = |r: &[f32]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&row), bits(&twin), "{isa}: n={n} spread={spread}");
                }
            }
            let mut masked = vec![f32::NEG_INFINITY; 5];
            softmax_at(isa, &mut masked);
            assert_eq!(masked, vec![0.0; 5], "{isa}");
        }
    }

    #[test]
    fn softmax_row_sums_to_one_and_masks() {
        let mut row = vec![1.0, 2.0, f32::NEG_INFINITY, 0.5, 3.0];
        softmax_row(&mut row, 0.5);
        assert_eq!(row[2], 0.0);
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert!(row[4] > row[1] && row[1] > row[0] && row[0] > row[3]);
    }
}
