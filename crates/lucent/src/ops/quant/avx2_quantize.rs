//! Activation rows quantised on AVX2, 8 numbers a step: a 32-block as Q8_0
//! ([`quantize_q8_0`]) and a 256-block as Q8_K ([`quantize_q8_k`]), each equal to the
//! scalar rules of [`crate::ops::quant::activations`] bit for bit (blocks with a NaN or
//! an infinity are left to the scalar rules). The AVX-512 twins of these are in
//! `avx512::quantize`; on an AVX2 machine the scalar rules took 4 % of Gemma 3's prompt.

use std::arch::x86_64::*;

use crate::ops::quant::activations::{push_q8_0_scales, push_q8_k_zero, q8_0_factor};
use crate::tensor::quant::QK_K;

/// One 32-block of activations quantised as
/// [`quantize_activations`](crate::ops::quant::quantize_activations) does (`q` into `qb`,
/// f16-rounded `dx`, `dx · Σq` and `Σq` pushed onto `d`, `sum` and `bsums`), 8 numbers a step. Returns
/// false, touching nothing, for a block with a NaN or an infinity: the scalar twin then
/// takes it (its rules for those differ from what the vector conversions would give).
///
/// # Safety
/// AVX2 present; `xb` and `qb` hold 32 numbers.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_q8_0(
    xb: &[f32],
    qb: &mut [i8],
    d: &mut Vec<f32>,
    sum: &mut Vec<f32>,
    bsums: &mut Vec<i32>,
) -> bool {
    let v: [__m256; 4] = std::array::from_fn(|k| _mm256_loadu_ps(xb.as_ptr().add(8 * k)));
    let mut m = _mm256_setzero_ps();
    let mut nan = _mm256_setzero_ps();
    for vk in &v {
        m = _mm256_max_ps(m, abs(*vk));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(*vk, *vk));
    }
    let amax = hmax(m);
    let Some(id) = q8_0_factor(amax).filter(|_| _mm256_movemask_ps(nan) == 0) else {
        return false;
    };
    let id = _mm256_set1_ps(id);
    let q: [__m256i; 4] = std::array::from_fn(|k| round_clamp(_mm256_mul_ps(v[k], id)));
    let sq = hsum_i32(_mm256_add_epi32(
        _mm256_add_epi32(q[0], q[1]),
        _mm256_add_epi32(q[2], q[3]),
    ));
    store_bytes(qb.as_mut_ptr(), q);
    push_q8_0_scales(amax / 127.0, sq, d, sum, bsums);
    true
}

/// One 256-block of activations quantised as
/// [`quantize_activations`](crate::ops::quant::quantize_activations) does for the
/// K-quants (`q` into `qb`, `dx` onto `d`, the 16 group sums onto `bsums`), 32 numbers
/// a step. Returns false, touching nothing, for a block with a NaN or an infinity (the
/// scalar twin takes it).
///
/// # Safety
/// AVX2 present; `xb` and `qb` hold 256 numbers.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_q8_k(
    xb: &[f32],
    qb: &mut [i8],
    d: &mut Vec<f32>,
    bsums: &mut Vec<i32>,
) -> bool {
    let load = |k: usize| _mm256_loadu_ps(xb.as_ptr().add(8 * k));
    let mut m = _mm256_setzero_ps();
    let mut nan = _mm256_setzero_ps();
    for k in 0..QK_K / 8 {
        let vk = load(k);
        m = _mm256_max_ps(m, abs(vk));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(vk, vk));
    }
    let amax = hmax(m);
    if !amax.is_finite() || _mm256_movemask_ps(nan) != 0 {
        return false;
    }
    if amax == 0.0 {
        push_q8_k_zero(d, bsums);
        return true; // qb stays zero
    }
    // The first number of largest magnitude, sign kept (the twin's strict `>`).
    let mut max = 0.0f32;
    for k in 0..QK_K / 8 {
        let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(
            abs(load(k)),
            _mm256_set1_ps(amax),
        ));
        if hit != 0 {
            max = xb[8 * k + hit.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0 / max;
    if !iscale.is_finite() {
        return false; // a subnormal maximum: the twin's
    }
    let s = _mm256_set1_ps(iscale);
    for c in 0..QK_K / 32 {
        // (4, 8) the chunk's numbers; its two groups of 16 are q[0..2] and q[2..4].
        let q: [__m256i; 4] =
            std::array::from_fn(|k| round_clamp(_mm256_mul_ps(s, load(4 * c + k))));
        bsums.push(hsum_i32(_mm256_add_epi32(q[0], q[1])));
        bsums.push(hsum_i32(_mm256_add_epi32(q[2], q[3])));
        store_bytes(qb.as_mut_ptr().add(32 * c), q);
    }
    d.push(1.0 / iscale);
    true
}

/// |x| lane by lane (the sign bit cleared).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn abs(x: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), x)
}

/// The largest of the eight lanes (none a NaN).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
}

/// The sum of the eight integer lanes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// Round to the nearest integer, ties to even (the conversion's default mode, as the
/// twin's `round_even`), clamped to [−127, 127].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn round_clamp(x: __m256) -> __m256i {
    let q = _mm256_cvtps_epi32(x);
    _mm256_max_epi32(
        _mm256_min_epi32(q, _mm256_set1_epi32(127)),
        _mm256_set1_epi32(-127),
    )
}

/// 32 integers in [−127, 127] (four vectors of eight, in order) stored as bytes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_bytes(p: *mut i8, q: [__m256i; 4]) {
    // The packs work within 128-bit halves: bytes come out as (q0 lo, q1 lo, q2 lo,
    // q3 lo | q0 hi, q1 hi, q2 hi, q3 hi) in 4-byte groups; the permute puts them back.
    let w = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(p as *mut __m256i, _mm256_permutevar8x32_epi32(w, order));
}
