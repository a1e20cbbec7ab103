//! Activation rows quantised on AVX-512, 16 numbers a step: a 32-block as Q8_0
//! ([`quantize_q8_0`]) and a 256-block as Q8_K ([`quantize_q8_k`]), each equal to the
//! scalar rules of [`crate::ops::quant::activations`] bit for bit (blocks with a NaN or
//! an infinity are left to the scalar rules).

use std::arch::x86_64::*;

use crate::ops::quant::activations::{push_q8_0_scales, push_q8_k_zero, q8_0_factor};

/// One 32-block of activations quantised as [`quantize_activations`](crate::ops::quant::quantize_activations) does
/// (`q` into `qb`, f16-rounded `dx`, `dx · Σq` and `Σq` pushed onto `d`, `sum` and `bsums`), 16
/// numbers a step. Returns false, touching nothing, for a block with a NaN or an
/// infinity: the scalar twin then takes it (its rules for those differ from what
/// the vector conversions would give).
///
/// # Safety
/// [`available`](super::available); `xb` and `qb` hold 32 numbers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn quantize_q8_0(
    xb: &[f32],
    qb: &mut [i8],
    d: &mut Vec<f32>,
    sum: &mut Vec<f32>,
    bsums: &mut Vec<i32>,
) -> bool {
    let v = [
        _mm512_loadu_ps(xb.as_ptr()),
        _mm512_loadu_ps(xb.as_ptr().add(16)),
    ];
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v[0], v[1]);
    let Some(id) = q8_0_factor(amax).filter(|_| nan == 0) else {
        return false;
    };
    let id = _mm512_set1_ps(id);
    let mut sq = _mm512_setzero_si512();
    for (k, vk) in v.iter().enumerate() {
        let q = round_clamp(_mm512_mul_ps(*vk, id));
        sq = _mm512_add_epi32(sq, q);
        _mm_storeu_si128(
            qb.as_mut_ptr().add(16 * k) as *mut __m128i,
            _mm512_cvtepi32_epi8(q),
        );
    }
    push_q8_0_scales(amax / 127.0, _mm512_reduce_add_epi32(sq), d, sum, bsums);
    true
}

/// One 256-block of activations quantised as [`quantize_activations`](crate::ops::quant::quantize_activations) does for
/// the K-quants (`q` into `qb`, `dx` onto `d`, the 16 group sums onto `bsums`), one
/// group of 16 a step. Returns false, touching nothing, for a block with a NaN or an
/// infinity (the scalar twin takes it).
///
/// # Safety
/// [`available`](super::available); `xb` and `qb` hold 256 numbers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn quantize_q8_k(
    xb: &[f32],
    qb: &mut [i8],
    d: &mut Vec<f32>,
    bsums: &mut Vec<i32>,
) -> bool {
    let v: [__m512; 16] = std::array::from_fn(|g| _mm512_loadu_ps(xb.as_ptr().add(16 * g)));
    let mut m = _mm512_setzero_ps();
    let mut nan = 0u16;
    for vg in &v {
        m = _mm512_max_ps(m, _mm512_abs_ps(*vg));
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(*vg, *vg);
    }
    let amax = _mm512_reduce_max_ps(m);
    if !amax.is_finite() || nan != 0 {
        return false;
    }
    if amax == 0.0 {
        push_q8_k_zero(d, bsums);
        return true; // qb stays zero
    }
    // The first number of largest magnitude, sign kept (the twin's strict `>`).
    let mut max = 0.0f32;
    for (g, vg) in v.iter().enumerate() {
        let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(*vg), _mm512_set1_ps(amax));
        if hit != 0 {
            max = xb[16 * g + hit.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0 / max;
    if !iscale.is_finite() {
        return false; // a subnormal maximum: the twin's
    }
    for (g, vg) in v.iter().enumerate() {
        let q = round_clamp(_mm512_mul_ps(_mm512_set1_ps(iscale), *vg));
        bsums.push(_mm512_reduce_add_epi32(q));
        _mm_storeu_si128(
            qb.as_mut_ptr().add(16 * g) as *mut __m128i,
            _mm512_cvtepi32_epi8(q),
        );
    }
    d.push(1.0 / iscale);
    true
}

/// Round to the nearest integer, ties to even (the conversion's default mode, as the
/// twin's `round_even`), clamped to [−127, 127].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn round_clamp(x: __m512) -> __m512i {
    let q = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
    _mm512_max_epi32(
        _mm512_min_epi32(q, _mm512_set1_epi32(127)),
        _mm512_set1_epi32(-127),
    )
}
