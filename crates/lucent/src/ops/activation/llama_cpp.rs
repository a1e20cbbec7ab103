//! The activations in llama.cpp's arithmetic ([`crate::runtime::Numerics::LlamaCpp`],
//! its AVX2 build): its vector exp (`ggml_v_expf`, [`expf`]) and SiLU (`ggml_v_silu`,
//! [`silu`]), scalar statements with SIMD twins that compute the same bits. (Its f16
//! GELU table is [`super::gelu_tanh_f16`].) A gated feed-forward network picks these
//! through [`super::in_place_for`].

use crate::ops::{avx512_at, fma_at};
use crate::runtime::Isa;

/// `ggml_v_expf` (AVX2): e^x by a range reduction to `x = n·ln 2 + b`, a degree-5
/// polynomial `p(b) − 1` and `2ⁿ + 2ⁿ·(p − 1)`, with 2ⁿ built from the exponent bits
/// (and split in two factors when |n| > 126; 0 or ∞ past |n| > 192). Within ~1.5 ulp
/// of e^x, and bit for bit what llama.cpp's softmax and SiLU compute.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let c = f32::from_bits;
    let r = c(0x4b40_0000); // 0x1.8p23: adding it rounds to an integer
    let z = x.mul_add(c(0x3fb8_aa3b), r); // x · log2(e) + r
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x)); // x − n·ln 2
    let e = z.to_bits() << 23;
    let k = c(e.wrapping_add(1.0f32.to_bits())); // 2ⁿ
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6) * b);
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = c(g.wrapping_add(0x7f00_0000));
    let s2 = c(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        return s1 * s1;
    }
    s2.mul_add(j, s2) * s1
}

/// SiLU as `ggml_v_silu` computes it: `x / (1 + expf(0 − x))` with [`expf`].
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + expf(0.0 - x))
}

/// SiLU ([`silu`]) of every number in place, with FMA instructions when the CPU has them
/// (sixteen at a time with AVX-512): the same numbers as [`silu`] one by one.
pub fn silu_in_place(x: &mut [f32]) {
    silu_in_place_at(crate::runtime::isa(), x)
}

/// [`silu_in_place`] at the instruction-set level `isa` (one the CPU runs).
pub(crate) fn silu_in_place_at(isa: Isa, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512_at(isa) {
        // SAFETY: the level has AVX-512F, AVX2 and FMA; the runtime caps it to the CPU's.
        unsafe { silu_avx512(x) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if fma_at(isa) {
        // SAFETY: the level has AVX2 and FMA; the runtime caps it to the CPU's.
        unsafe { silu_fma(x) };
        return;
    }
    x.iter_mut().for_each(|v| *v = silu(*v));
}

/// [`silu_in_place`] eight numbers a step with AVX2 and FMA: [`expf_avx2`], then
/// `x / (1 + e)` — llama.cpp's own AVX2 `ggml_v_silu`, the same bits as [`silu`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_fma(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(8);
    for ch in &mut chunks {
        // SAFETY: `ch` holds eight numbers.
        let v = unsafe { _mm256_loadu_ps(ch.as_ptr()) };
        let ex = expf_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v)); // e^(0 − x)
        let y = _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), ex));
        // SAFETY: as the load.
        unsafe { _mm256_storeu_ps(ch.as_mut_ptr(), y) };
    }
    chunks
        .into_remainder()
        .iter_mut()
        .for_each(|v| *v = silu(*v));
}

/// [`expf`] of eight numbers (llama.cpp's `ggml_v_expf` as its AVX2 build has it): the
/// same fused operations lane by lane, its two range branches as blends, so every lane
/// equals [`expf`] of it bit for bit.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn expf_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let c = |b: u32| _mm256_set1_ps(f32::from_bits(b));
    let r = c(0x4b40_0000);
    let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm256_sub_ps(z, r);
    let nn = _mm256_xor_ps(n, _mm256_set1_ps(-0.0)); // −n
    let b = _mm256_fmadd_ps(nn, c(0x35bf_be8e), _mm256_fmadd_ps(nn, c(0x3f31_7200), x));
    let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
    let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f80_0000)));
    let u = _mm256_mul_ps(b, b);
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm256_mul_ps(c(0x3f7f_fff6), b),
    );
    let ex = _mm256_fmadd_ps(j, k, k);
    let an = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n); // |n|
                                                        // Lanes where |n| ≤ 126 fails (NaN included, as the scalar `if` sends it on).
    let big = _mm256_cmp_ps::<_CMP_NLE_UQ>(an, _mm256_set1_ps(126.0));
    if _mm256_movemask_ps(big) == 0 {
        return ex;
    }
    let neg = _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps());
    let g = _mm256_and_si256(
        _mm256_castps_si256(neg),
        _mm256_set1_epi32(0x8200_0000u32 as i32),
    );
    let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
    let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    let huge = _mm256_cmp_ps::<_CMP_GT_OQ>(an, _mm256_set1_ps(192.0));
    let far = _mm256_blendv_ps(
        _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1),
        _mm256_mul_ps(s1, s1),
        huge,
    );
    _mm256_blendv_ps(ex, far, big)
}

/// [`silu_in_place`] sixteen numbers a step: [`expf`]'s arithmetic lane by lane (the
/// same fused operations, its two range branches as masks), then `x / (1 + e)`.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn silu_avx512(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(16);
    for ch in &mut chunks {
        let v = _mm512_loadu_ps(ch.as_ptr());
        let ex = expf_avx512(_mm512_sub_ps(_mm512_setzero_ps(), v)); // e^(0 − x)
        let y = _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0), ex));
        _mm512_storeu_ps(ch.as_mut_ptr(), y);
    }
    chunks
        .into_remainder()
        .iter_mut()
        .for_each(|v| *v = silu(*v));
}

/// [`expf`] of sixteen numbers: its arithmetic lane by lane (the same fused operations,
/// its two range branches as masks), so every lane equals [`expf`] of it bit for bit.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn expf_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let c = |b: u32| _mm512_set1_ps(f32::from_bits(b));
    let r = c(0x4b40_0000);
    let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm512_sub_ps(z, r);
    let nn = _mm512_xor_ps(n, _mm512_set1_ps(-0.0)); // −n
    let b = _mm512_fmadd_ps(nn, c(0x35bf_be8e), _mm512_fmadd_ps(nn, c(0x3f31_7200), x));
    let e = _mm512_slli_epi32::<23>(_mm512_castps_si512(z));
    let k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_set1_epi32(0x3f80_0000)));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm512_mul_ps(c(0x3f7f_fff6), b),
    );
    let ex = _mm512_fmadd_ps(j, k, k);
    let an = _mm512_abs_ps(n);
    // Lanes where |n| ≤ 126 fails (NaN included, as the scalar `if` sends it on).
    let big = _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(an, _mm512_set1_ps(126.0));
    if big == 0 {
        return ex;
    }
    let neg = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
    let g = _mm512_maskz_mov_epi32(neg, _mm512_set1_epi32(0x8200_0000u32 as i32));
    let s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f00_0000)));
    let s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
    let huge = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(an, _mm512_set1_ps(192.0));
    let far = _mm512_mask_blend_ps(
        huge,
        _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1),
        _mm512_mul_ps(s1, s1),
    );
    _mm512_mask_blend_ps(big, ex, far)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_in_place_equals_silu_number_by_number() {
        // A dense sweep through both range branches of expf (|n| > 126 past |x| ≈ 87.3,
        // > 192 past ≈ 133), the ends of f32 and a tail shorter than a vector.
        let mut x: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 0.005).collect();
        x.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
            1e-40,
            -1e-40,
            0.0,
            -0.0,
            88.72,
            -88.72,
            -103.9,
            150.0,
            -150.0,
        ]);
        crate::ops::assert_in_place_equals_one_by_one(&x, silu_in_place, silu, "silu");
    }

    #[test]
    fn expf_is_within_two_ulp_of_exp() {
        for i in -2000..=200 {
            let x = i as f32 * 0.05;
            let (got, want) = (expf(x), (x as f64).exp());
            let ulp = (want as f32).to_bits().abs_diff(got.to_bits());
            assert!(ulp <= 2, "expf({x}) = {got}, e^x = {want} ({ulp} ulp)");
        }
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(0.0), 1.0);
    }
}
