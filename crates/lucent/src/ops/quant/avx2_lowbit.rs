//! AVX2 + FMA kernels of the low-bit block types `Q2_K`, `Q3_K`, `IQ4_XS` (against `Q8_K`
//! activations) and `IQ4_NL` (against `Q8_0`): their dots in llama.cpp's AVX2 orders —
//! `vec_dot` for a token, the tiled product for prompts of 8 rows or more
//! ([`KOrder::Tiled`](crate::ops::quant::dispatch::KOrder::Tiled)), the repacked IQ4_NL
//! kernels and IQ4_NL's tinyBLAS order — each equal to its twin in [`super::reference`] bit for bit. The integer
//! part of a block is eight i32 lanes (lane k: numbers 4k..4k+3 of every 32, times
//! their group's scale), exact, as the twins' [`k16_parts`](super::reference::k16_parts)
//! hold it; the f32 steps around it are the twins'. Selected only at
//! [`Isa::Avx2`](crate::runtime::Isa::Avx2) or above (the AVX-512 level takes IQ4_NL's
//! from here, and `avx512::lowbit`'s for the other three); the wrappers' `unsafe` blocks
//! rely on that.

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2::{f16p, hsum_epi32, hsum_ps};
use crate::ops::quant::dispatch::{Dot4Fn, DotFn};
use crate::tensor::quant::{
    q3_k_scales, BlockIQ4_NL, BlockIQ4_XS, BlockQ2_K, BlockQ3_K, GgmlType, KVALUES_IQ4NL,
};

/// The dot kernel of a low-bit `dtype` (llama.cpp's `vec_dot` order), or None.
pub(crate) fn kernel(dtype: GgmlType) -> Option<DotFn> {
    // SAFETY (all): selected only at Isa::Avx2 or above (AVX2+FMA+F16C detected); the
    // callers check that the row and the activations agree.
    Some(match dtype {
        GgmlType::Q2_K => |r, a| unsafe { q2_k(r, a, false) },
        GgmlType::Q3_K => |r, a| unsafe { k16::<Q3>(r, a, false) },
        GgmlType::IQ4_XS => |r, a| unsafe { k16::<Xs>(r, a, false) },
        GgmlType::IQ4_NL => |r, a| unsafe { iq4_nl(r, a, Iq4NlOrder::Dot) },
        _ => return None,
    })
}

/// The kernels of a low-bit `dtype` in llama.cpp's tiled order, one activation row and
/// four (one at a time); None for the others.
pub(crate) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    // SAFETY (all): as in `kernel`.
    Some(match dtype {
        GgmlType::Q2_K => (
            |r, a| unsafe { q2_k(r, a, true) },
            |r, a| std::array::from_fn(|k| unsafe { q2_k(r, a[k], true) }),
        ),
        GgmlType::Q3_K => (
            |r, a| unsafe { k16::<Q3>(r, a, true) },
            |r, a| std::array::from_fn(|k| unsafe { k16::<Q3>(r, a[k], true) }),
        ),
        GgmlType::IQ4_XS => (
            |r, a| unsafe { k16::<Xs>(r, a, true) },
            |r, a| std::array::from_fn(|k| unsafe { k16::<Xs>(r, a[k], true) }),
        ),
        _ => return None,
    })
}

/// IQ4_NL in the order of llama.cpp's repacked kernels (one chain per output, for one
/// activation row and for each of four).
pub(crate) fn iq4_nl_repacked_kernels() -> (DotFn, Dot4Fn) {
    // SAFETY (both): as in `kernel`.
    (
        |r, a| unsafe { iq4_nl(r, a, Iq4NlOrder::Repacked) },
        |r, a| std::array::from_fn(|k| unsafe { iq4_nl(r, a[k], Iq4NlOrder::Repacked) }),
    )
}

/// IQ4_NL in the order of llama.cpp's tinyBLAS (a prompt with a matrix it has not
/// repacked: one eight-lane accumulator per output), for one activation row and for each
/// of four.
pub(crate) fn iq4_nl_chain_kernels() -> (DotFn, Dot4Fn) {
    // SAFETY (both): as in `kernel`.
    (
        |r, a| unsafe { iq4_nl(r, a, Iq4NlOrder::Chain) },
        |r, a| std::array::from_fn(|k| unsafe { iq4_nl(r, a[k], Iq4NlOrder::Chain) }),
    )
}

/// Which of llama.cpp's IQ4_NL products a kernel sums like (their integer parts agree;
/// the f32 steps differ).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Iq4NlOrder {
    /// `ggml_vec_dot_iq4_nl_q8_0`: blocks in pairs into two eight-lane accumulators.
    Dot,
    /// The repacked `gemv` / `gemm`: one f32 chain, `acc = fma(S, d · dx, acc)`.
    Repacked,
    /// tinyBLAS: one eight-lane accumulator, `fma(d · dx, S_k, acc_k)`.
    Chain,
}

/// Eight i32 lanes of `Σ sc · w · x` over 32 numbers, from the bytes `p` of their 16-bit
/// pair sums (`maddubs`: lane pairs 2m, 2m + 1) and the scales of their two groups of 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scaled(p: __m256i, sc_lo: i32, sc_hi: i32) -> __m256i {
    let s = _mm256_set_m128i(_mm_set1_epi16(sc_hi as i16), _mm_set1_epi16(sc_lo as i16));
    _mm256_madd_epi16(p, s)
}

/// Bit `s` (0..8) of each of 32 bytes, as bytes 0 or 1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bit_of_bytes(v: __m256i, s: i32) -> __m256i {
    _mm256_and_si256(
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(s)),
        _mm256_set1_epi8(1),
    )
}

/// Two bits `2k, 2k + 1` of each of 32 bytes, as bytes 0..4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_of_bytes(v: __m256i, k: usize) -> __m256i {
    _mm256_and_si256(
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * k as i32)),
        _mm256_set1_epi8(3),
    )
}

/// The sixteen grid values of [`KVALUES_IQ4NL`] in both 128-bit halves (a byte shuffle
/// table).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid() -> __m256i {
    // SAFETY: KVALUES_IQ4NL holds 16 bytes.
    let v = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i) };
    _mm256_set_m128i(v, v)
}

/// The 32 grid values of 16 bytes of indices at `p` (low nibbles: numbers 0..16, high:
/// 16..32), as signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn grid_values(p: *const u8, table: __m256i) -> __m256i {
    let b = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    let idx = _mm256_set_m128i(
        _mm_and_si128(_mm_srli_epi16(b, 4), m4),
        _mm_and_si128(b, m4),
    );
    _mm256_shuffle_epi8(table, idx)
}

/// The 16-bit pair sums of signed `w` (|w| ≤ 127) times signed `x` (|x| ≤ 127): exact.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pairs_i8(w: __m256i, x: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
}

/// Q2_K in llama.cpp's dot order (`tiled` false) or its tiled product's (see the twins
/// `dot_q2_k`, `dot_k16_tiled`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k(row: &[u8], a: &QuantizedActs, tiled: bool) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut chain = 0.0f32;
    let blocks = row.as_ptr() as *const BlockQ2_K;
    for i in 0..a.d.len() {
        let b = std::ptr::read_unaligned(blocks.add(i));
        let xq = a.qs.as_ptr().add(256 * i);
        let bs = &a.bsums[16 * i..16 * i + 16];
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let bits = _mm256_loadu_si256(b.qs.as_ptr().add(32 * n) as *const __m256i);
            for k in 0..4 {
                let q = pair_of_bytes(bits, k);
                let x = _mm256_loadu_si256(xq.add(128 * n + 32 * k) as *const __m256i);
                let g = 8 * n + 2 * k;
                let (s0, s1) = ((b.scales[g] & 0x0F) as i32, (b.scales[g + 1] & 0x0F) as i32);
                sumi = _mm256_add_epi32(sumi, scaled(_mm256_maddubs_epi16(q, x), s0, s1));
            }
        }
        let mins: [i32; 8] = std::array::from_fn(|k| {
            (b.scales[2 * k] >> 4) as i32 * bs[2 * k]
                + (b.scales[2 * k + 1] >> 4) as i32 * bs[2 * k + 1]
        });
        let (dw, dminw) = (f16p(&raw const b.d), f16p(&raw const b.dmin));
        if tiled {
            let s = hsum_epi32(sumi) as f32;
            let m: i32 = mins.iter().sum();
            let r = (-dminw).mul_add(m as f32, dw * s);
            chain = r.mul_add(a.d[i], chain);
        } else {
            let d = a.d[i] * dw;
            let dmin = -a.d[i] * dminw;
            let m = _mm256_loadu_si256(mins.as_ptr() as *const __m256i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(m), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    if tiled {
        chain
    } else {
        hsum_ps(acc)
    }
}

/// A type without minimums whose block's integer lanes [`k16`] sums: Q3_K, IQ4_XS.
trait K16Simd {
    /// The block's scale `d` and its eight i32 lanes against the 256 activations at `xq`.
    ///
    /// # Safety
    /// AVX2 + FMA + F16C; `blk` is one whole block and `xq` 256 readable bytes.
    unsafe fn lanes(blk: *const u8, xq: *const i8) -> (f32, __m256i);
    /// Bytes per block.
    const BYTES: usize;
}

/// Q3_K ([`K16Simd`]).
struct Q3;
/// IQ4_XS ([`K16Simd`]).
struct Xs;

impl K16Simd for Q3 {
    const BYTES: usize = std::mem::size_of::<BlockQ3_K>();
    #[inline]
    unsafe fn lanes(blk: *const u8, xq: *const i8) -> (f32, __m256i) {
        q3_lanes(blk, xq)
    }
}

impl K16Simd for Xs {
    const BYTES: usize = std::mem::size_of::<BlockIQ4_XS>();
    #[inline]
    unsafe fn lanes(blk: *const u8, xq: *const i8) -> (f32, __m256i) {
        xs_lanes(blk, xq)
    }
}

/// A Q3_K block's lanes: `Σ (sc − 32) · (q − 4) · x`, as `q · x` less `4 · x` in 16 bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_lanes(blk: *const u8, xq: *const i8) -> (f32, __m256i) {
    let b = std::ptr::read_unaligned(blk as *const BlockQ3_K);
    let sc = q3_k_scales(&b.scales);
    let hm = _mm256_loadu_si256(b.hmask.as_ptr() as *const __m256i);
    let four = _mm256_set1_epi8(4);
    let mut sumi = _mm256_setzero_si256();
    for n in 0..2 {
        let bits = _mm256_loadu_si256(b.qs.as_ptr().add(32 * n) as *const __m256i);
        for k in 0..4 {
            let high = bit_of_bytes(hm, (4 * n + k) as i32);
            let q = _mm256_or_si256(pair_of_bytes(bits, k), _mm256_slli_epi16(high, 2));
            let x = _mm256_loadu_si256(xq.add(128 * n + 32 * k) as *const __m256i);
            let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, x), _mm256_maddubs_epi16(four, x));
            let g = 8 * n + 2 * k;
            sumi = _mm256_add_epi32(sumi, scaled(p, sc[g] as i32, sc[g + 1] as i32));
        }
    }
    (f16p(&raw const b.d), sumi)
}

/// An IQ4_XS block's lanes: `Σ (sc_j − 32) · K[q] · x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn xs_lanes(blk: *const u8, xq: *const i8) -> (f32, __m256i) {
    let b = &*(blk as *const BlockIQ4_XS);
    let sc = b.sub_scales();
    let table = grid();
    let mut sumi = _mm256_setzero_si256();
    for (j, &s) in sc.iter().enumerate() {
        let w = grid_values(
            blk.add(std::mem::offset_of!(BlockIQ4_XS, qs) + 16 * j),
            table,
        );
        let x = _mm256_loadu_si256(xq.add(32 * j) as *const __m256i);
        sumi = _mm256_add_epi32(sumi, scaled(pairs_i8(w, x), s as i32, s as i32));
    }
    (f16p(&raw const b.d), sumi)
}

/// Q3_K and IQ4_XS in llama.cpp's dot order (`tiled` false: eight lanes, one FMA with
/// `d · dx` per block) or its tiled product's (`acc = fma(d · S, dx, acc)`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k16<K: K16Simd>(row: &[u8], a: &QuantizedActs, tiled: bool) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut chain = 0.0f32;
    for i in 0..a.d.len() {
        let (dw, sumi) = K::lanes(row.as_ptr().add(K::BYTES * i), a.qs.as_ptr().add(256 * i));
        if tiled {
            chain = (dw * hsum_epi32(sumi) as f32).mul_add(a.d[i], chain);
        } else {
            let d = a.d[i] * dw;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    if tiled {
        chain
    } else {
        hsum_ps(acc)
    }
}

/// IQ4_NL in llama.cpp's dot order ([`Iq4NlOrder::Dot`]: blocks in pairs into two
/// eight-lane accumulators, a last odd block added alone; twin `dot_iq4_nl`), its
/// repacked kernels' (one chain, `acc = fma(S, d · dx, acc)`; `dot_iq4_nl_repacked`) or
/// tinyBLAS's (one eight-lane accumulator; `dot_iq4_nl_chain`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl(row: &[u8], a: &QuantizedActs, order: Iq4NlOrder) -> f32 {
    let table = grid();
    let blocks = row.as_ptr() as *const BlockIQ4_NL;
    let nb = a.d.len();
    let lanes = |i: usize| {
        let b = blocks.add(i);
        let w = grid_values((&raw const (*b).qs) as *const u8, table);
        let x = _mm256_loadu_si256(a.qs.as_ptr().add(32 * i) as *const __m256i);
        let s = _mm256_madd_epi16(pairs_i8(w, x), _mm256_set1_epi16(1));
        (f16p(&raw const (*b).d), s)
    };
    if order == Iq4NlOrder::Chain {
        let mut acc = _mm256_setzero_ps();
        for i in 0..nb {
            let (dw, s) = lanes(i);
            let d = dw * a.d[i];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
        }
        return hsum_ps(acc);
    }
    if order == Iq4NlOrder::Repacked {
        let mut acc = 0.0f32;
        for i in 0..nb {
            let (dw, s) = lanes(i);
            acc = (hsum_epi32(s) as f32).mul_add(dw * a.d[i], acc);
        }
        return acc;
    }
    let mut acc = [_mm256_setzero_ps(); 2];
    let pairs = nb / 2 * 2;
    for i in 0..pairs {
        let (dw, s) = lanes(i);
        let d = a.d[i] * dw;
        acc[i % 2] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[i % 2]);
    }
    let mut sum = hsum_ps(_mm256_add_ps(acc[0], acc[1]));
    for i in pairs..nb {
        let (dw, s) = lanes(i);
        sum = (a.d[i] * dw).mul_add(hsum_epi32(s) as f32, sum);
    }
    sum
}
