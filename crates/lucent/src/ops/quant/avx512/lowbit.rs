//! AVX-512 kernels of the 256-blocks without a 32-block layout of their own: `Q2_K`,
//! `Q3_K`, `IQ4_XS`, 64 numbers a step, one activation row or four (each weight step
//! decoded once for all of them). A step's 16-bit pair sums meet their groups' scales in
//! `vpmaddwd`, giving sixteen i32 lanes: lanes 0..8 for the step's first 32 numbers and
//! 8..16 for its second, each lane k holding numbers 4k..4k+3, so the block's two halves
//! added are exactly the eight lanes of the AVX2 kernels (`super::super::avx2_lowbit`) and
//! of the twins; the f32 steps around them are theirs (llama.cpp's `vec_dot`, or its tiled
//! product), so every result equals the twin bit for bit. IQ4_NL keeps the AVX2 kernels.
//! The steps' unpacking (`q2_k_step`, `q3_k_step`, `iq4_xs_step`) also feeds the
//! sixteen-row prompt kernels of `super::kgemm`.

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2;
use crate::tensor::quant::{
    q3_k_scales, BlockIQ4_XS, BlockQ2_K, BlockQ3_K, GgmlType, KVALUES_IQ4NL,
};

/// Word indices of a step's groups: word w of a step's 32 pair sums belongs to its group
/// `w / 8` (16 numbers are 8 pair sums).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
fn group_words(first: i16) -> __m512i {
    let w = _mm512_set_epi16(
        31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9,
        8, 7, 6, 5, 4, 3, 2, 1, 0,
    );
    _mm512_add_epi16(_mm512_set1_epi16(first), _mm512_srli_epi16(w, 3))
}

/// Shift counts per 16-bit word: `lo` in the low 256 bits, `hi` in the high.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
fn halves(lo: i16, hi: i16) -> __m512i {
    _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(lo), _mm512_set1_epi16(hi))
}

/// One decoded step of a block: 64 weights as the first operand of `vpmaddubsw`
/// (unsigned), the mask of those whose activation is to be negated (IQ4_XS's signs),
/// whether `4 · x` is to be taken off (Q3_K's offset), and the groups' scales per word.
struct Step {
    w: __m512i,
    neg: __mmask64,
    minus4: bool,
    sc: __m512i,
}

/// Step `s` (numbers 64s .. 64s + 64, in order) of a Q2_K block: its 2-bit `q`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q2_k_step(b: &BlockQ2_K, s: usize) -> __m512i {
    let h = (s % 2) as i16;
    let bits = _mm512_broadcast_i64x4(_mm256_loadu_si256(
        b.qs.as_ptr().add(32 * (s / 2)) as *const __m256i
    ));
    _mm512_and_si512(
        _mm512_srlv_epi16(bits, halves(4 * h, 4 * h + 2)),
        _mm512_set1_epi8(3),
    )
}

/// Step `s` (numbers 64s .. 64s + 64, in order) of a Q3_K block as `q = w + 4`
/// (0 ..= 7): two bits from `qs`, the third from `hmask`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q3_k_step(b: &BlockQ3_K, s: usize) -> __m512i {
    let (n, h) = ((s / 2) as i16, (s % 2) as i16);
    let bits = _mm512_broadcast_i64x4(_mm256_loadu_si256(
        b.qs.as_ptr().add(32 * (s / 2)) as *const __m256i
    ));
    let hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(b.hmask.as_ptr() as *const __m256i));
    let q = _mm512_and_si512(
        _mm512_srlv_epi16(bits, halves(4 * h, 4 * h + 2)),
        _mm512_set1_epi8(3),
    );
    let hb = _mm512_and_si512(
        _mm512_srlv_epi16(hm, halves(4 * n + 2 * h, 4 * n + 2 * h + 1)),
        _mm512_set1_epi8(1),
    );
    _mm512_or_si512(q, _mm512_slli_epi16(hb, 2))
}

/// Step `s` (numbers 64s .. 64s + 64, in order: sub-blocks 2s and 2s + 1) of an
/// IQ4_XS block as its 4-bit table indices, one a byte.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn iq4_xs_step(b: &BlockIQ4_XS, s: usize) -> __m512i {
    let v = _mm256_loadu_si256(b.qs.as_ptr().add(32 * s) as *const __m256i);
    let m4 = _mm256_set1_epi8(0x0F);
    let lo = _mm256_and_si256(v, m4);
    let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    // [lo 0..16, lo 16..32, hi 0..16, hi 16..32] → [lo, hi of sub-block 2s, lo, hi of
    // 2s + 1]: each sub-block's numbers 0..16 then 16..32.
    let z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    _mm512_shuffle_i64x2(z, z, 0b11_01_10_00)
}

/// The eight i32 lanes (the twins' `k16_parts` lanes) of a block of `t` at `blk` against
/// each of `RA` activation rows (256 values at each `xq`), and the block's `d`, `dmin`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C; `blk` one whole block of `t`, each `xq` 256
/// readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_lanes<const RA: usize>(
    t: GgmlType,
    blk: *const u8,
    xq: [*const i8; RA],
) -> (f32, f32, [__m256i; RA]) {
    let mut sumi = [_mm512_setzero_si512(); RA];
    let (d, dmin, sc16) = match t {
        GgmlType::Q2_K => {
            let b = &*(blk as *const BlockQ2_K);
            let s = _mm_loadu_si128(b.scales.as_ptr() as *const __m128i);
            let s = _mm_and_si128(s, _mm_set1_epi8(0x0F));
            (
                avx2::f16p(&raw const b.d),
                avx2::f16p(&raw const b.dmin),
                _mm256_cvtepu8_epi16(s),
            )
        }
        GgmlType::Q3_K => {
            let b = &*(blk as *const BlockQ3_K);
            let sc = q3_k_scales(&b.scales);
            let s = _mm_loadu_si128(sc.as_ptr() as *const __m128i);
            (avx2::f16p(&raw const b.d), 0.0, _mm256_cvtepi8_epi16(s))
        }
        _ => {
            let b = &*(blk as *const BlockIQ4_XS);
            let sub = b.sub_scales();
            let mut sc = [0i8; 16];
            for (g, c) in sc.iter_mut().enumerate() {
                *c = sub[g / 2];
            }
            let s = _mm_loadu_si128(sc.as_ptr() as *const __m128i);
            (avx2::f16p(&raw const b.d), 0.0, _mm256_cvtepi8_epi16(s))
        }
    };
    let sc16 = _mm512_castsi256_si512(sc16);
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    for s in 0..4 {
        let sc = _mm512_permutexvar_epi16(group_words(4 * s as i16), sc16);
        let step = match t {
            GgmlType::Q2_K => {
                let q = q2_k_step(&*(blk as *const BlockQ2_K), s);
                Step {
                    w: q,
                    neg: 0,
                    minus4: false,
                    sc,
                }
            }
            GgmlType::Q3_K => {
                let q = q3_k_step(&*(blk as *const BlockQ3_K), s);
                Step {
                    w: q,
                    neg: 0,
                    minus4: true,
                    sc,
                }
            }
            _ => {
                let idx = iq4_xs_step(&*(blk as *const BlockIQ4_XS), s);
                let w = _mm512_shuffle_epi8(table, idx);
                Step {
                    w: _mm512_abs_epi8(w),
                    neg: _mm512_movepi8_mask(w),
                    minus4: false,
                    sc,
                }
            }
        };
        for (x, si) in xq.iter().zip(sumi.iter_mut()) {
            let x = _mm512_loadu_si512(x.add(64 * s) as *const __m512i);
            let x = _mm512_mask_sub_epi8(x, step.neg, _mm512_setzero_si512(), x);
            let mut p = _mm512_maddubs_epi16(step.w, x);
            if step.minus4 {
                p = _mm512_sub_epi16(p, _mm512_maddubs_epi16(_mm512_set1_epi8(4), x));
            }
            *si = _mm512_add_epi32(*si, _mm512_madd_epi16(p, step.sc));
        }
    }
    let lanes =
        sumi.map(|v| _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
    (d, dmin, lanes)
}

/// A low-bit 256-block `t` (Q2_K, Q3_K, IQ4_XS) row against `RA` activation rows, each
/// in llama.cpp's dot order (`tiled` false) or its tiled product's, exactly as the
/// twins `dot_q2_k`, `dot_k16_lanes` and `dot_k16_tiled` sum.
///
/// # Safety
/// [`super::available`] said yes; `row` is whole blocks of `t` of every act's length,
/// each prepared as Q8_K.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows<const RA: usize>(
    t: GgmlType,
    row: &[u8],
    acts: [&QuantizedActs; RA],
    tiled: bool,
) -> [f32; RA] {
    let bytes = t.block_bytes();
    let mut acc = [_mm256_setzero_ps(); RA];
    let mut chain = [0.0f32; RA];
    for i in 0..acts[0].d.len() {
        let blk = row.as_ptr().add(bytes * i);
        let xq = acts.map(|a| a.qs.as_ptr().add(256 * i));
        let (dw, dminw, lanes) = block_lanes::<RA>(t, blk, xq);
        for r in 0..RA {
            let (a, sumi) = (acts[r], lanes[r]);
            let mins: [i32; 8] = if t == GgmlType::Q2_K {
                let sc = &(*(blk as *const BlockQ2_K)).scales;
                let bs = &a.bsums[16 * i..16 * i + 16];
                std::array::from_fn(|k| {
                    (sc[2 * k] >> 4) as i32 * bs[2 * k]
                        + (sc[2 * k + 1] >> 4) as i32 * bs[2 * k + 1]
                })
            } else {
                [0; 8]
            };
            if tiled {
                let s = avx2::hsum_epi32(sumi) as f32;
                let r_ = if t == GgmlType::Q2_K {
                    (-dminw).mul_add(mins.iter().sum::<i32>() as f32, dw * s)
                } else {
                    dw * s
                };
                chain[r] = r_.mul_add(a.d[i], chain[r]);
            } else {
                if t == GgmlType::Q2_K {
                    let dmin = -a.d[i] * dminw;
                    let m = _mm256_loadu_si256(mins.as_ptr() as *const __m256i);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(m), acc[r]);
                }
                let d = a.d[i] * dw;
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
    }
    if tiled {
        chain
    } else {
        acc.map(|v| avx2::hsum_ps(v))
    }
}
