//! The AVX-512 VNNI K-quant dots (Q4_K, Q5_K, Q6_K), 64 numbers a step, one activation
//! row or several at once (each weight step decoded once for all of them), in each of
//! llama.cpp's orders. Their i32 lanes and f32 arithmetic are the AVX2 kernels'
//! ([`avx2::K45Acc`]): every result equals [`crate::ops::quant::avx2`]'s, and the
//! twin's, bit for bit. Selected only after [`available`](super::available) said yes.
//! (A prompt's products of repacked Q4_K and of Q6_K take [`super::kgemm`] where
//! sixteen weight rows are whole.)

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2;
use crate::ops::quant::dispatch::KOrder;
use crate::tensor::quant::{k_scales_mins, BlockQ6_K};

/// Q4_K (`five` false) and Q5_K (`five` true) in `order`, 64 numbers (two
/// sub-blocks) a step: `vpmaddubsw` pairs (q ≤ 31, |qx| ≤ 127: no saturation),
/// `vpmaddwd` with the sub-blocks' scales. The two halves of a step's i32 sums add up
/// to the AVX2 kernel's eight lanes, which then meet the same f32 arithmetic in the
/// same order ([`avx2::K45Acc`]): the results equal [`super::avx2`]'s bit for
/// bit.
///
/// # Safety
/// [`available`](super::available); `row` and `a` checked by `check_dot` for this type.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q45_k(row: &[u8], a: &QuantizedActs, five: bool, order: KOrder) -> f32 {
    q45_k_rows::<1>(row, [a], five, order)[0]
}

/// [`q45_k`] of one weight row with `RA` activation rows: each weight step decoded
/// once for all of them, each row's arithmetic exactly [`q45_k`]'s (so each result
/// equals it bit for bit).
///
/// # Safety
/// As [`q45_k`]'s, for every row of `acts`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q45_k_rows<const RA: usize>(
    row: &[u8],
    acts: [&QuantizedActs; RA],
    five: bool,
    order: KOrder,
) -> [f32; RA] {
    // Plain loops, not `array::from_fn` closures, wherever an intrinsic is inside: a
    // closure does not inherit this function's target features, and here it was left
    // a call per element (Q5_K's token product ran at 8 GB/s).
    let mut acc = [avx2::K45Acc::new(); RA];
    // Four rows in llama.cpp's grouped order: their chains, lane k for row k.
    let (mut rows4, mut mins4) = (_mm_setzero_ps(), _mm_setzero_ps());
    for i in 0..acts[0].d.len() {
        let blk = avx2::K45Ptr::new(row, i, five);
        let scales = &*blk.scales;
        let qs = blk.qs;
        let qh = if five {
            _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.qh as *const __m256i))
        } else {
            _mm512_setzero_si512()
        };
        // Each minimum in its two 16-groups' lanes, against the 16-sums: summed four
        // lanes at a time, the four steps' minimum sums (exact integers).
        let (sc8, mn8) = k_scales_mins(scales);
        let mn16 = k45_mins16(&mn8);
        // Each minimum times its 16-group's sum, per activation row (16 lanes, step c in
        // 128-bit lane c).
        let mut mv = [_mm512_setzero_si512(); RA];
        for (m, a) in mv.iter_mut().zip(&acts) {
            let bs = _mm512_loadu_si512(a.bsums.as_ptr().add(16 * i) as *const __m512i);
            *m = _mm512_mullo_epi32(mn16, bs);
        }
        let gemm4 = RA == 4 && order == KOrder::Gemm;
        // Four rows in the grouped order: the per-step sums come from one interleaving
        // (below); the others want each row's four step sums.
        let mut mins = [[0i32; 4]; RA];
        if !gemm4 {
            for (m, &v) in mins.iter_mut().zip(&mv) {
                let v = _mm512_add_epi32(v, _mm512_srli_epi64(v, 32));
                let v = _mm512_add_epi32(v, _mm512_bsrli_epi128(v, 8));
                let g = _mm512_maskz_compress_epi32(0x1111, v);
                _mm_storeu_si128(m.as_mut_ptr() as *mut __m128i, _mm512_castsi512_si128(g));
            }
        }
        // gemm4: the rows' scale products, lane k for row k.
        let dx4 = if gemm4 {
            _mm_set_ps(acts[3].d[i], acts[2].d[i], acts[1].d[i], acts[0].d[i])
        } else {
            _mm_setzero_ps()
        };
        let (dw, dminw) = (avx2::f16p(blk.d), avx2::f16p(blk.d.add(1)));
        let sc4 = _mm_mul_ps(_mm_set1_ps(dw), dx4);
        // Dot, Gemv, Tiled: the block's lanes (only their sums per lane or in all
        // are used). Gemm: each step's lanes (`steps`), or for four rows each step's
        // four totals (`totals`).
        let mut sumi = [_mm512_setzero_si512(); RA];
        let mut steps = [[_mm256_setzero_si256(); 4]; RA];
        let fold = |p: __m512i| {
            // The AVX2 kernel's eight lanes: lane k of both sub-blocks of the step.
            _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1))
        };
        for c in 0..4 {
            let (q, sc) = k45_step(qs, qh, &sc8, c, five);
            let mut ps = [_mm512_setzero_si512(); RA];
            for (a, p) in acts.iter().zip(ps.iter_mut()) {
                let x = _mm512_loadu_si512(a.qs.as_ptr().add(256 * i + 64 * c) as *const __m512i);
                *p = _mm512_madd_epi16(_mm512_maddubs_epi16(q, x), sc);
            }
            if order != KOrder::Gemm {
                for (si, p) in sumi.iter_mut().zip(ps) {
                    *si = _mm512_add_epi32(*si, p);
                }
            } else if gemm4 {
                // Step c's four totals (lane k: row k) into the four chains.
                let t = fold_lanes(interleave4(ps[0], ps[1], ps[2], ps[3]));
                rows4 = _mm_fmadd_ps(_mm_cvtepi32_ps(t), sc4, rows4);
            } else {
                for (st, p) in steps.iter_mut().zip(ps) {
                    st[c] = fold(p);
                }
            }
        }
        if gemm4 {
            // The minimums' chains, step after step: 128-bit lane c of the interleaved
            // products holds step c's four sums.
            let mt = interleave4(mv[0], mv[1], mv[2], mv[3]);
            mins4 = min_steps(mt, _mm_mul_ps(_mm_set1_ps(dminw), dx4), mins4);
            continue;
        }
        for k in 0..RA {
            let st = if order == KOrder::Gemm {
                steps[k]
            } else {
                let z = _mm256_setzero_si256();
                [fold(sumi[k]), z, z, z]
            };
            acc[k].block(st, mins[k], blk.d, acts[k].d[i], five, order);
        }
    }
    if RA == 4 && order == KOrder::Gemm {
        let mut r = [0.0f32; 4];
        _mm_storeu_ps(r.as_mut_ptr(), _mm_sub_ps(rows4, mins4));
        return std::array::from_fn(|k| r[k]);
    }
    let mut y = [0.0f32; RA];
    for (y, acc) in y.iter_mut().zip(&acc) {
        *y = acc.finish(five, order);
    }
    y
}

/// Each of a K-quant block's eight sub-block minimums `mn8` in its two 16-number
/// groups' i32 lanes (to meet the activations' 16-sums).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn k45_mins16(mn8: &[u8; 8]) -> __m512i {
    // The eight bytes widened to i32 lanes 0..8, then each lane doubled.
    let m8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(mn8.as_ptr() as *const __m128i));
    let twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    _mm512_permutexvar_epi32(twice, _mm512_castsi256_si512(m8))
}

/// Step `c` of a Q4_K (`five` false) or Q5_K block: its unsigned weights, numbers
/// `64c .. 64c + 64` (the low nibbles of `qs[32c..32c+32]`, then the high ones, with
/// the fifth bits from `qh`, the block's 32 high-bit bytes twice, for Q5_K), and the
/// two sub-blocks' scales from `sc8` as words (the first's in the lower 16 words).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn k45_step(
    qs: *const u8,
    qh: __m512i,
    sc8: &[u8; 8],
    c: usize,
    five: bool,
) -> (__m512i, __m512i) {
    let z = _mm512_broadcast_i64x4(_mm256_loadu_si256(qs.add(32 * c) as *const __m256i));
    let mut q = _mm512_and_si512(
        _mm512_mask_srli_epi16(z, 0xFFFF_0000, z, 4),
        _mm512_set1_epi8(0x0F),
    );
    if five {
        // Fifth bits: bit 2c of qh[l] (lower half), bit 2c + 1 (upper half).
        let sh = _mm512_mask_blend_epi16(
            0xFFFF_0000,
            _mm512_set1_epi16(2 * c as i16),
            _mm512_set1_epi16(2 * c as i16 + 1),
        );
        let h = _mm512_and_si512(_mm512_srlv_epi16(qh, sh), _mm512_set1_epi8(1));
        q = _mm512_or_si512(q, _mm512_slli_epi16(h, 4));
    }
    let sc = _mm512_mask_blend_epi16(
        0xFFFF_0000,
        _mm512_set1_epi16(sc8[2 * c] as i16),
        _mm512_set1_epi16(sc8[2 * c + 1] as i16),
    );
    (q, sc)
}

/// The grouped order's minimum chains over one block: 128-bit lane c of `mt` holds
/// step c's four minimum sums (lane k: row k), each converted and added to `mins4`
/// scaled by `dm` (`dmin · dx` per row), step after step.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn min_steps(mt: __m512i, dm: __m128, mut mins4: __m128) -> __m128 {
    let lanes = [
        _mm512_castsi512_si128(mt),
        _mm512_extracti32x4_epi32(mt, 1),
        _mm512_extracti32x4_epi32(mt, 2),
        _mm512_extracti32x4_epi32(mt, 3),
    ];
    for m in lanes {
        mins4 = _mm_fmadd_ps(_mm_cvtepi32_ps(m), dm, mins4);
    }
    mins4
}

/// Four vectors' i32 lanes summed within each 128-bit lane and interleaved: 128-bit
/// lane j of the result holds `[Σ a_j, Σ b_j, Σ c_j, Σ d_j]`, the sums of the four
/// numbers in lane j of each (exact integers).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn interleave4(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> __m512i {
    let ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    let cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd))
}

/// The four 128-bit lanes of `u` added: with [`interleave4`], lane k of the result is
/// vector k's total.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn fold_lanes(u: __m512i) -> __m128i {
    let v = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))
}

/// Q6_K, 64 numbers (four groups of 16) a step, unsigned q (0..63) in `vpmaddubsw`
/// pairs (no saturation) and `vpmaddwd` with the groups' i8 scales; the `− 32` of
/// every q enters as `− 32 · Σ_g sc_g · Σ_{i∈g} qx_i` (the stored 16-sums). As in
/// [`q45_k`], the i32 lanes and the f32 arithmetic are the AVX2 kernel's: the results
/// equal it bit for bit.
///
/// # Safety
/// [`available`](super::available); `row` and `a` checked by `check_dot` for this type.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q6_k(row: &[u8], a: &QuantizedActs, tiled: bool) -> f32 {
    q6_k_rows::<1>(row, [a], tiled)[0]
}

/// [`q6_k`] of one weight row with `RA` activation rows: each weight step decoded
/// once for all of them, each row's arithmetic exactly [`q6_k`]'s (so each result
/// equals it bit for bit).
///
/// # Safety
/// As [`q6_k`]'s, for every row of `acts`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q6_k_rows<const RA: usize>(
    row: &[u8],
    acts: [&QuantizedActs; RA],
    tiled: bool,
) -> [f32; RA] {
    let mut chain = [0.0f32; RA];
    let mut acc = [_mm256_setzero_ps(); RA];
    for i in 0..acts[0].d.len() {
        let blk = (row.as_ptr() as *const BlockQ6_K).add(i);
        let dw = avx2::f16p(&raw const (*blk).d);
        let lanes = q6_k_block(blk, acts, i);
        for k in 0..RA {
            if tiled {
                let t = avx2::hsum_epi32(lanes[k]) as f32;
                chain[k] = (dw * t).mul_add(acts[k].d[i], chain[k]);
            } else {
                let d = dw * acts[k].d[i];
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes[k]), acc[k]);
            }
        }
    }
    if tiled {
        return chain;
    }
    std::array::from_fn(|k| avx2::hsum_ps(acc[k]))
}

/// Block i of one Q6_K weight row (at `blk`) times block i of each activation row:
/// the eight i32 lanes of Σ_g sc_g · Σ_{l∈g} q_l · qx_l − 32 · Σ_g sc_g · Σ_{l∈g} qx_l
/// that the AVX2 kernel converts and multiplies (so [`q6_k_rows`] and
/// [`super::kgemv::q6_k_gemv16`] meet the same f32 steps), the weight step decoded once
/// for all `RA` rows.
///
/// # Safety
/// As [`q6_k`]'s: `blk` points at a whole Q6_K block, and every row of `acts` holds
/// more than i blocks prepared as Q8_K.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q6_k_block<const RA: usize>(
    blk: *const BlockQ6_K,
    acts: [&QuantizedActs; RA],
    i: usize,
) -> [__m256i; RA] {
    let m4 = _mm512_set1_epi8(0x0F);
    let m30 = _mm512_set1_epi8(0x30);
    // Word shifts that bring qh's bit pair k to bits 4..6 of each byte: k = 0, 1 in
    // the low and high 256-bit halves of the first step, k = 2, 3 in the second.
    let left = _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    let right = _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_setzero_si512(), _mm512_set1_epi16(2));
    let (ql, qhp, scp) = (
        (*blk).ql.as_ptr(),
        (*blk).qh.as_ptr(),
        (*blk).scales.as_ptr(),
    );
    // The 16 scales as words; group g's scale sits in the 8 words of its 16 numbers.
    let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(scp as *const __m128i));
    let sc16 = _mm512_castsi256_si512(sc16);
    let sc32 = _mm512_cvtepi8_epi32(_mm_loadu_si128(scp as *const __m128i));
    let mut sumi = [_mm512_setzero_si512(); RA];
    for n in 0..2 {
        let l = _mm512_loadu_si512(ql.add(64 * n) as *const __m512i);
        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(qhp.add(32 * n) as *const __m256i));
        let q = [
            _mm512_or_si512(
                _mm512_and_si512(l, m4),
                _mm512_and_si512(_mm512_sllv_epi16(qh, left), m30),
            ),
            _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                _mm512_and_si512(_mm512_srlv_epi16(qh, right), m30),
            ),
        ];
        for (h, qk) in q.iter().enumerate() {
            // Numbers 128n + 64h .. +64: groups 8n + 4h .. +4, 8 words each.
            let g0 = (8 * n + 4 * h) as i16;
            let idx = _mm512_add_epi16(
                _mm512_set1_epi16(g0),
                _mm512_srli_epi16(
                    _mm512_set_epi16(
                        31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                        12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
                    ),
                    3,
                ),
            );
            let sc = _mm512_permutexvar_epi16(idx, sc16);
            for (a, si) in acts.iter().zip(sumi.iter_mut()) {
                let x = _mm512_loadu_si512(
                    a.qs.as_ptr().add(256 * i + 128 * n + 64 * h) as *const __m512i
                );
                let p = _mm512_madd_epi16(_mm512_maddubs_epi16(*qk, x), sc);
                *si = _mm512_add_epi32(*si, p);
            }
        }
    }
    std::array::from_fn(|k| {
        let bsums = _mm512_loadu_si512(acts[k].bsums.as_ptr().add(16 * i) as *const __m512i);
        // Lane k of the offsets: groups 2k and 2k + 1 (llama.cpp's q8sclsub / 32).
        let v = _mm512_mullo_epi32(sc32, bsums);
        let off = _mm512_cvtepi64_epi32(_mm512_add_epi32(v, _mm512_srli_epi64(v, 32)));
        let s = _mm256_add_epi32(
            _mm512_castsi512_si256(sumi[k]),
            _mm512_extracti64x4_epi64(sumi[k], 1),
        );
        _mm256_sub_epi32(s, _mm256_slli_epi32(off, 5))
    })
}
