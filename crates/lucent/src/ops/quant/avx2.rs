//! AVX2 + FMA (+ F16C) kernels of the quantised dot products: the 32-block types' dots
//! and their tile kernel (several weight rows × several activation rows), the K-quant
//! dots in each of llama.cpp's orders ([`K45Acc`]), and the helpers the AVX-512 kernels
//! and [`super::avx2_lowbit`] share (`f16p`, `hsum_ps`, `hsum_epi32`). Each is selected by [`kernel`] only at
//! [`Isa::Avx2`](crate::runtime::Isa::Avx2) or above (a level the runtime caps to the
//! CPU's); the wrappers' `unsafe` blocks rely on that. Every result equals its twin in
//! [`super::reference`] bit for bit.

use std::arch::x86_64::*;

use half::f16;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::dispatch::{Dot4Fn, DotFn, KOrder};
use crate::ops::quant::{avx2_float, avx2_lowbit, avx512, reference};
use crate::tensor::quant::{
    k_scales_mins, BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K,
    BlockQ8_0, GgmlType,
};

pub(crate) fn kernel(dtype: GgmlType) -> DotFn {
    match dtype {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            avx2_float::kernel(dtype).unwrap_or_else(|| reference::kernel(dtype))
        }
        GgmlType::Q4_0 => |r, a| unsafe { q4_0(r, a) }, // SAFETY: AVX2+FMA detected
        GgmlType::Q4_1 => |r, a| unsafe { q4_1(r, a) }, // SAFETY: AVX2+FMA detected
        GgmlType::Q5_0 => |r, a| unsafe { q5_0(r, a) }, // SAFETY: AVX2+FMA detected
        GgmlType::Q5_1 => |r, a| unsafe { q5_1(r, a) }, // SAFETY: AVX2+FMA detected
        GgmlType::Q8_0 => |r, a| unsafe { q8_0(r, a) }, // SAFETY: AVX2+FMA detected
        // SAFETY (both): AVX2+FMA detected.
        GgmlType::Q4_K => |r, a| unsafe { q45_k(r, a, false, KOrder::Dot) },
        GgmlType::Q5_K => |r, a| unsafe { q45_k(r, a, true, KOrder::Dot) },
        GgmlType::Q6_K => |r, a| unsafe { q6_k(r, a, false) }, // SAFETY: AVX2+FMA detected
        _ => avx2_lowbit::kernel(dtype).unwrap_or_else(|| reference::kernel(dtype)),
    }
}

/// The K-quant kernels of `dtype` in llama.cpp's tiled order ([`KOrder::Tiled`]):
/// one activation row, and four (one at a time).
pub(crate) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    // SAFETY (all): AVX2+FMA detected; the callers check rows and acts.
    match dtype {
        GgmlType::Q4_K => Some((
            |r, a| unsafe { q45_k(r, a, false, KOrder::Tiled) },
            |r, a| std::array::from_fn(|k| unsafe { q45_k(r, a[k], false, KOrder::Tiled) }),
        )),
        GgmlType::Q5_K => Some((
            |r, a| unsafe { q45_k(r, a, true, KOrder::Tiled) },
            |r, a| std::array::from_fn(|k| unsafe { q45_k(r, a[k], true, KOrder::Tiled) }),
        )),
        GgmlType::Q6_K => Some((
            |r, a| unsafe { q6_k(r, a, true) },
            |r, a| std::array::from_fn(|k| unsafe { q6_k(r, a[k], true) }),
        )),
        _ => avx2_lowbit::tiled_kernels(dtype),
    }
}

/// The kernels in the order of llama.cpp's repacked kernels: Q4_K's ([`KOrder::Gemv`]
/// for one row, [`KOrder::Gemm`] for each of four), IQ4_NL's, Q4_0's.
pub(crate) fn repacked_kernels(dtype: GgmlType) -> (DotFn, Dot4Fn) {
    if dtype == GgmlType::IQ4_NL {
        return avx2_lowbit::iq4_nl_repacked_kernels();
    }
    if dtype == GgmlType::Q4_0 {
        // SAFETY (both): AVX2+FMA detected; the callers check rows and acts.
        return (
            |r, a| unsafe { q4_0_repacked(r, a) },
            |r, a| std::array::from_fn(|k| unsafe { q4_0_repacked(r, a[k]) }),
        );
    }
    (
        // SAFETY (both): AVX2+FMA detected; the callers check rows and acts.
        |r, a| unsafe { q45_k(r, a, false, KOrder::Gemv) },
        |r, a| std::array::from_fn(|k| unsafe { q45_k(r, a[k], false, KOrder::Gemm) }),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Eight i32 sums of four products each of signed 8-bit `w` and `x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mul_sum_i8(w: __m256i, x: __m256i) -> __m256i {
    let aw = _mm256_sign_epi8(w, w);
    let sx = _mm256_sign_epi8(x, w);
    _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1))
}

/// Eight i32 sums of four products each of unsigned 8-bit `w` (≤ 127) and signed `x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mul_sum_u8_i8(w: __m256i, x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
}

/// 16 bytes of nibbles → 32 bytes: low nibbles (numbers 0..16) then high (16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let b = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(
        _mm_and_si128(_mm_srli_epi16(b, 4), m4),
        _mm_and_si128(b, m4),
    )
}

/// 32 bits → 32 bytes, byte i = 0x10 if bit i is set (the fifth bit of number i).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    let shuf = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bytes = _mm256_shuffle_epi8(v, shuf);
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The f16 at `p` (a block's field, any alignment) as f32 (F16C; `half`'s conversion
/// checks the CPU on every call).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16p(p: *const f16) -> f32 {
    let bits = u16::from_le(std::ptr::read_unaligned(p as *const u16));
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Σ over `nb` blocks of `scale_i · isum_i` (+ Σ `m_i · s_i`), where `block(i)` gives
/// (scale, eight i32 partial sums, m, s), in llama.cpp's order: one eight-lane
/// accumulator taking `fma(scale, isum, acc)` block after block, reduced by
/// [`hsum_ps`], plus the `m · s` terms summed one FMA at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum_blocks(nb: usize, block: impl Fn(usize) -> (f32, __m256i, f32, f32)) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut extra = 0.0f32;
    for i in 0..nb {
        let (sc, v, m, s) = block(i);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(sc), _mm256_cvtepi32_ps(v), acc);
        extra = m.mul_add(s, extra);
    }
    hsum_ps(acc) + extra
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0(row: &[u8], a: &QuantizedActs) -> f32 {
    let (w, x, d) = (
        row.as_ptr() as *const BlockQ4_0,
        a.qs.as_ptr(),
        a.d.as_ptr(),
    );
    sum_blocks(a.d.len(), |i| {
        let b = w.add(i);
        let q = _mm256_sub_epi8(nibbles32((*b).qs.as_ptr()), _mm256_set1_epi8(8));
        let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
        (
            f16p(&raw const (*b).d) * *d.add(i),
            mul_sum_i8(q, xv),
            0.0,
            0.0,
        )
    })
}

/// Q4_0 in the order of llama.cpp's repacked kernels: one chain, per block
/// `acc = fma(S, d · dx, acc)` with `S` the block's exact sum (twin
/// `reference::dot_q4_0_repacked`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_repacked(row: &[u8], a: &QuantizedActs) -> f32 {
    let w = row.as_ptr() as *const BlockQ4_0;
    let mut acc = 0.0f32;
    for i in 0..a.d.len() {
        let b = w.add(i);
        let q = _mm256_sub_epi8(nibbles32((*b).qs.as_ptr()), _mm256_set1_epi8(8));
        let xv = _mm256_loadu_si256(a.qs.as_ptr().add(32 * i) as *const __m256i);
        let s = hsum_epi32(mul_sum_i8(q, xv));
        acc = (s as f32).mul_add(f16p(&raw const (*b).d) * a.d[i], acc);
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1(row: &[u8], a: &QuantizedActs) -> f32 {
    let w = row.as_ptr() as *const BlockQ4_1;
    let (x, d, s) = (a.qs.as_ptr(), a.d.as_ptr(), a.sum.as_ptr());
    sum_blocks(a.d.len(), |i| {
        let b = w.add(i);
        let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
        (
            f16p(&raw const (*b).d) * *d.add(i),
            mul_sum_u8_i8(nibbles32((*b).qs.as_ptr()), xv),
            f16p(&raw const (*b).m),
            *s.add(i),
        )
    })
}

/// Dots of `RW` weight rows with `RA` activation rows at once, for the 32-block type
/// `K` (`avx512::Q4_0` .. `avx512::Q8_0`), reading the weight blocks' scales (and
/// Q4_1's and Q5_1's minimums) from a per-row f32 table (`QMatrix::scale_table`)
/// instead of converting f16 per block: eight blocks' scales are multiplied with eight
/// activation scales in one step. Each weight block is unpacked once for all
/// activation rows (a signed type's magnitudes too), each activation block loaded once
/// for all weight rows, and every pair's arithmetic is the one-row kernel's
/// ([`sum_blocks`]: one accumulator per pair, the same eight i32 lanes; the `Σ m·sx`
/// of the types with minimums as a separate dot), so a result never depends on the
/// tile it was computed in (batch invariance) and equals [`kernel`]'s bit for bit.
///
/// # Safety
/// AVX2+FMA+F16C present; every row is `acts[0].len` numbers of type `K`, each
/// `scales[w]` its row's table (nb scales, then nb minimums for Q4_1 and Q5_1), and
/// every `acts[j]` prepared for the type (Q8_0, or Q8_1 with its sums) of the same
/// length.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile<const K: u8, const RW: usize, const RA: usize>(
    rows: [&[u8]; RW],
    scales: [&[f32]; RW],
    acts: [&QuantizedActs; RA],
    out: &mut [[f32; RA]; RW],
) {
    tile_from::<K, RW, RA>(|i| unpack_blocks::<K, RW>(&rows, i), scales, acts, out)
}

/// A weight block unpacked for [`tile_block`]: (the magnitudes `vpmaddubsw` takes as
/// unsigned bytes, the numbers whose signs the activations take). The types with
/// minimums are unsigned already: both are the numbers.
type Unpacked = [__m256i; 2];

/// Block `i` of each of the `RW` rows (of the 32-block type `K`) unpacked to bytes.
///
/// # Safety
/// AVX2+FMA+F16C present; block `i` lies within every row, which is of type `K`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_blocks<const K: u8, const RW: usize>(
    rows: &[&[u8]; RW],
    i: usize,
) -> [Unpacked; RW] {
    std::array::from_fn(|w| {
        let p = rows[w].as_ptr();
        // The block's numbers as bytes: unsigned for the types with minimums, else signed.
        let q = match K {
            avx512::Q4_0 => {
                let b = (p as *const BlockQ4_0).add(i);
                _mm256_sub_epi8(nibbles32((*b).qs.as_ptr()), _mm256_set1_epi8(8))
            }
            avx512::Q4_1 => nibbles32((*(p as *const BlockQ4_1).add(i)).qs.as_ptr()),
            avx512::Q5_0 => {
                let b = (p as *const BlockQ5_0).add(i);
                _mm256_sub_epi8(
                    _mm256_or_si256(nibbles32((*b).qs.as_ptr()), fifth_bits((*b).high_bits())),
                    _mm256_set1_epi8(16),
                )
            }
            avx512::Q5_1 => {
                let b = (p as *const BlockQ5_1).add(i);
                _mm256_or_si256(nibbles32((*b).qs.as_ptr()), fifth_bits((*b).high_bits()))
            }
            _ => {
                _mm256_loadu_si256((*(p as *const BlockQ8_0).add(i)).qs.as_ptr() as *const __m256i)
            }
        };
        // The signed types: |q| once, the activations take q's signs per pair.
        if has_min(K) {
            [q, q]
        } else {
            [_mm256_sign_epi8(q, q), q]
        }
    })
}

/// [`tile`] with its weight blocks from `blocks(i)` (block i of every weight row,
/// unpacked: [`unpack_blocks`] of the rows, or the same bytes unpacked once before).
///
/// # Safety
/// As [`tile`]'s, with `blocks(i)` the unpacking of the rows' block i for every block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_from<const K: u8, const RW: usize, const RA: usize>(
    blocks: impl Fn(usize) -> [Unpacked; RW],
    scales: [&[f32]; RW],
    acts: [&QuantizedActs; RA],
    out: &mut [[f32; RA]; RW],
) {
    let nb = acts[0].d.len();
    let mut acc = [[_mm256_setzero_ps(); RA]; RW];
    // (RW, RA) the types with minimums: Σ m·sx, one FMA a block in llama.cpp's order
    // (after the lanes' sum). Each pair's chain of nb dependent FMAs goes along with the
    // blocks, where the block's integer work hides its latency: as a loop of its own
    // after the blocks it took a fifth of SmolLM2's (Q4_1) prompt products.
    let mut extra = [[0.0f32; RA]; RW];
    let mins = |extra: &mut [[f32; RA]; RW], i: usize| {
        if has_min(K) {
            for (w, ew) in extra.iter_mut().enumerate() {
                let m = *scales[w].get_unchecked(nb + i);
                for (e, act) in ew.iter_mut().zip(&acts) {
                    *e = m.mul_add(*act.sum.get_unchecked(i), *e);
                }
            }
        }
    };
    // (RW, RA, 8) a group's scale products, each block's broadcast from memory (a load,
    // where a lane permute would take a shuffle unit the unpacking needs).
    let mut s8 = [[[0.0f32; 8]; RA]; RW];
    let groups = nb / 8;
    for g in 0..groups {
        // The group's eight scale products d_w · dx_a, one per lane.
        for (w, sw) in s8.iter_mut().enumerate() {
            let dw = _mm256_loadu_ps(scales[w].as_ptr().add(8 * g));
            for (a, swa) in sw.iter_mut().enumerate() {
                let p = _mm256_mul_ps(dw, _mm256_loadu_ps(acts[a].d.as_ptr().add(8 * g)));
                _mm256_storeu_ps(swa.as_mut_ptr(), p);
            }
        }
        for (j, i) in (8 * g..8 * g + 8).enumerate() {
            tile_block::<K, RW, RA>(blocks(i), &acts, i, &mut acc, |w, a| {
                _mm256_broadcast_ss(&s8[w][a][j])
            });
            mins(&mut extra, i);
        }
    }
    for i in 8 * groups..nb {
        tile_block::<K, RW, RA>(blocks(i), &acts, i, &mut acc, |w, a| {
            _mm256_set1_ps(*scales[w].get_unchecked(i) * *acts[a].d.get_unchecked(i))
        });
        mins(&mut extra, i);
    }
    for w in 0..RW {
        for a in 0..RA {
            out[w][a] = hsum_ps(acc[w][a]) + extra[w][a];
        }
    }
}

/// A token's products of the 32-block type `K`: `out[k] = ` the dot of weight row
/// `i0 + k` (of `row_bytes` bytes each in `bytes`, its scale table `per` numbers each in
/// `table`) with the one activation row `act`, row after row through the 1 × 1 [`tile`]
/// (so bit for bit what it gives). One loop compiled with the kernel instead of a call
/// through a pointer per row: with short rows (SmolLM2's 576 numbers are 18 blocks) the
/// call and its slices were a tenth of a decoded token, and the next row's block
/// chain can start while this row's sums finish.
///
/// A token's product streams its weights from memory once, and on AVX2 one row after
/// the other is the faster stream: on a Zen 3 core Gemma 3's Q8_0 head (262144 × 640,
/// 178 MB) took 15.1–16.7 ms row by row against 21.0–23.1 ms four rows at a time with
/// the prefetch hints and 23.9–28.4 ms without them (medians of 15 interleaved runs, one
/// thread; at two, 9.2–9.7 against 12.3–14.2 ms); SmolLM2's decode, four rows a tile,
/// lost 5–15 % again (2026-11-28). Every row's arithmetic is the same either way.
///
/// # Safety
/// As [`tile`]'s for every row: AVX2+FMA+F16C present, rows `i0 .. i0 + out.len()` of
/// `bytes` are of type `K` and `act.len` numbers, `table` holds their scale tables, and
/// `act` is prepared for the type.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn token_rows<const K: u8>(
    bytes: &[u8],
    row_bytes: usize,
    table: &[f32],
    i0: usize,
    act: &QuantizedActs,
    out: &mut [f32],
) {
    let per = table.len() / (bytes.len() / row_bytes.max(1)).max(1);
    // Each row asks for the cache lines of the row four ahead: the hardware prefetcher
    // alone falls behind the stream (decode of 64 tokens, medians of 7 alternating
    // rounds, 1 / 2 threads: Gemma 3 +9 % / +12 %, SmolLM2 +2 % / +6 %; two or eight
    // rows ahead measured the same within the noise).
    let ahead = 4 * row_bytes;
    let end = bytes.len();
    for (k, y) in out.iter_mut().enumerate() {
        let w = i0 + k;
        let from = (w * row_bytes + ahead).min(end);
        let to = (from + row_bytes).min(end);
        let mut p = from & !63;
        while p < to {
            _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(p) as *const i8);
            p += 64;
        }
        let mut o = [[0.0f32; 1]; 1];
        tile::<K, 1, 1>(
            [bytes.get_unchecked(w * row_bytes..(w + 1) * row_bytes)],
            [table.get_unchecked(w * per..(w + 1) * per)],
            [act],
            &mut o,
        );
        *y = o[0][0];
    }
}

/// A prompt's products of the 32-block type `K`: `out[w · t + a]` = the dot of weight
/// row `i0 + w` with activation row `a` of the `t = acts.len()` rows, `RW` weight rows ×
/// 4 activation rows a [`tile`] call (from [`UNPACK_MIN_ROWS`] activation rows up a
/// [`tile_from`] call over the `RW` rows' blocks unpacked once), the last activation
/// rows one at a time and the last weight rows one at a time: every pair through the
/// same per-pair arithmetic, so bit for bit the 1 × 1 tile's result. Layout and safety
/// as [`token_rows`].
///
/// # Safety
/// As [`token_rows`], for every row of `acts`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn prompt_rows<const K: u8, const RW: usize>(
    bytes: &[u8],
    row_bytes: usize,
    table: &[f32],
    i0: usize,
    acts: &[QuantizedActs],
    out: &mut [f32],
) {
    let t = acts.len();
    let n = out.len() / t.max(1);
    let per = table.len() / (bytes.len() / row_bytes.max(1)).max(1);
    let row = |w: usize| bytes.get_unchecked((i0 + w) * row_bytes..(i0 + w + 1) * row_bytes);
    let sc = |w: usize| table.get_unchecked((i0 + w) * per..(i0 + w + 1) * per);
    let nb = acts.first().map_or(0, |a| a.d.len());
    // (nb, RW) the group's blocks unpacked once, when several tiles will read them.
    let mut unpacked: Vec<[Unpacked; RW]> = Vec::new();
    let mut w = 0;
    while w + RW <= n {
        let rows: [&[u8]; RW] = std::array::from_fn(|k| row(w + k));
        let scales: [&[f32]; RW] = std::array::from_fn(|k| sc(w + k));
        if t >= UNPACK_MIN_ROWS {
            unpacked.clear();
            unpacked.extend((0..nb).map(|i| unpack_blocks::<K, RW>(&rows, i)));
        }
        let mut a = 0;
        while a + 4 <= t {
            let mut o = [[0.0f32; 4]; RW];
            let four = [&acts[a], &acts[a + 1], &acts[a + 2], &acts[a + 3]];
            if t >= UNPACK_MIN_ROWS {
                tile_from::<K, RW, 4>(|i| *unpacked.get_unchecked(i), scales, four, &mut o);
            } else {
                tile::<K, RW, 4>(rows, scales, four, &mut o);
            }
            for (k, ok) in o.iter().enumerate() {
                out[(w + k) * t + a..(w + k) * t + a + 4].copy_from_slice(ok);
            }
            a += 4;
        }
        while a < t {
            let mut o = [[0.0f32; 1]; RW];
            tile::<K, RW, 1>(rows, scales, [&acts[a]], &mut o);
            for (k, ok) in o.iter().enumerate() {
                out[(w + k) * t + a] = ok[0];
            }
            a += 1;
        }
        w += RW;
    }
    if w < n {
        prompt_rows::<K, 1>(bytes, row_bytes, table, i0 + w, acts, &mut out[w * t..]);
    }
}

/// From how many activation rows [`prompt_rows`] unpacks a group of weight rows once
/// (to memory, read back by every tile of four activation rows) instead of in each
/// tile: unpacking a Q5_0 block takes a dozen instructions, three of them shuffles,
/// against the five of each (weight row, activation row) pair it serves.
const UNPACK_MIN_ROWS: usize = 8;

/// Whether the 32-block type `k` has minimums (Q4_1, Q5_1: unsigned numbers and a
/// `Σ m·sx` term).
const fn has_min(k: u8) -> bool {
    k == avx512::Q4_1 || k == avx512::Q5_1
}

/// Block `i` of every (weight row, activation row) pair of a [`tile`] into `acc`:
/// `acc = fma(scale(w, a), Σ4 q·qx, acc)`, with the pair's eight 4-number integer sums
/// (those of the one-row kernels: `vpmaddubsw` of the unsigned magnitudes with the
/// signed activations, then `vpmaddwd` with ones); `wq` is block i of each weight row
/// ([`Unpacked`]).
///
/// # Safety
/// As [`tile`]'s; `i` is a block of the rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_block<const K: u8, const RW: usize, const RA: usize>(
    wq: [Unpacked; RW],
    acts: &[&QuantizedActs; RA],
    i: usize,
    acc: &mut [[__m256; RA]; RW],
    scale: impl Fn(usize, usize) -> __m256,
) {
    let xv: [__m256i; RA] = std::array::from_fn(|a| {
        _mm256_loadu_si256(acts[a].qs.as_ptr().add(32 * i) as *const __m256i)
    });
    for (w, [mag, q]) in wq.into_iter().enumerate() {
        for a in 0..RA {
            let x = if has_min(K) {
                xv[a]
            } else {
                _mm256_sign_epi8(xv[a], q)
            };
            let v = mul_sum_u8_i8(mag, x);
            acc[w][a] = _mm256_fmadd_ps(scale(w, a), _mm256_cvtepi32_ps(v), acc[w][a]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0(row: &[u8], a: &QuantizedActs) -> f32 {
    let (w, x, d) = (
        row.as_ptr() as *const BlockQ5_0,
        a.qs.as_ptr(),
        a.d.as_ptr(),
    );
    sum_blocks(a.d.len(), |i| {
        let b = w.add(i);
        let qh = (*b).high_bits();
        let q = _mm256_sub_epi8(
            _mm256_or_si256(nibbles32((*b).qs.as_ptr()), fifth_bits(qh)),
            _mm256_set1_epi8(16),
        );
        let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
        (
            f16p(&raw const (*b).d) * *d.add(i),
            mul_sum_i8(q, xv),
            0.0,
            0.0,
        )
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1(row: &[u8], a: &QuantizedActs) -> f32 {
    let w = row.as_ptr() as *const BlockQ5_1;
    let (x, d, s) = (a.qs.as_ptr(), a.d.as_ptr(), a.sum.as_ptr());
    sum_blocks(a.d.len(), |i| {
        let b = w.add(i);
        let qh = (*b).high_bits();
        let q = _mm256_or_si256(nibbles32((*b).qs.as_ptr()), fifth_bits(qh));
        let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
        (
            f16p(&raw const (*b).d) * *d.add(i),
            mul_sum_u8_i8(q, xv),
            f16p(&raw const (*b).m),
            *s.add(i),
        )
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0(row: &[u8], a: &QuantizedActs) -> f32 {
    let (w, x, d) = (
        row.as_ptr() as *const BlockQ8_0,
        a.qs.as_ptr(),
        a.d.as_ptr(),
    );
    sum_blocks(a.d.len(), |i| {
        let b = w.add(i);
        let q = _mm256_loadu_si256((*b).qs.as_ptr() as *const __m256i);
        let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
        (
            f16p(&raw const (*b).d) * *d.add(i),
            mul_sum_i8(q, xv),
            0.0,
            0.0,
        )
    })
}

/// Q4_K (`five` false) and Q5_K (`five` true) in `order` (Q5_K: always
/// [`KOrder::Dot`]): per block the four steps of 64 numbers as eight i32 lanes each
/// (lane k: numbers 4k..4k+3 of both sub-blocks, times their scales) and the minimum
/// sums, which [`K45Acc`] meets with the scales as llama.cpp's kernel of that order.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q45_k(row: &[u8], a: &QuantizedActs, five: bool, order: KOrder) -> f32 {
    q45_k_rows::<1>(row, [a], five, order)[0]
}

/// [`q45_k`] of one weight row with `RA` activation rows: each weight step decoded
/// once for all of them, each row's arithmetic exactly [`q45_k`]'s (so each result
/// equals it bit for bit).
///
/// # Safety
/// AVX2 + FMA + F16C present; `row` and every row of `acts` as [`q45_k`]'s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q45_k_rows<const RA: usize>(
    row: &[u8],
    acts: [&QuantizedActs; RA],
    five: bool,
    order: KOrder,
) -> [f32; RA] {
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc: [K45Acc; RA] = std::array::from_fn(|_| K45Acc::new());
    for i in 0..acts[0].d.len() {
        let k = K45Ptr::new(row, i, five);
        let scales = &*k.scales;
        let qs = k.qs;
        let qh = if five {
            _mm256_loadu_si256(k.qh as *const __m256i)
        } else {
            _mm256_setzero_si256()
        };
        let mut steps = [[_mm256_setzero_si256(); 4]; RA];
        let (sc8, mn8) = k_scales_mins(scales);
        // The eight scales as words in both 128-bit halves; sub-block j's spread over
        // a register by one byte shuffle.
        let scw = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(
            sc8.as_ptr() as *const __m128i
        )));
        for c in 0..4 {
            let sc0 = _mm256_shuffle_epi8(scw, WORD_PICK[2 * c]);
            let sc1 = _mm256_shuffle_epi8(scw, WORD_PICK[2 * c + 1]);
            let qb = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
            let mut lo = _mm256_and_si256(qb, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            if five {
                let h0 =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32)), one);
                let h1 = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32 + 1)),
                    one,
                );
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
            }
            for (a, st) in acts.iter().zip(steps.iter_mut()) {
                let xq = a.qs.as_ptr().add(256 * i);
                let xl = _mm256_loadu_si256(xq.add(64 * c) as *const __m256i);
                let xh = _mm256_loadu_si256(xq.add(64 * c + 32) as *const __m256i);
                let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), sc0);
                let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), sc1);
                st[c] = _mm256_add_epi32(pl, ph);
            }
        }
        for ((a, st), ac) in acts.iter().zip(steps).zip(acc.iter_mut()) {
            let mins = k45_mins(&mn8, &a.bsums[16 * i..16 * i + 16]);
            ac.block(st, mins, k.d, a.d[i], five, order);
        }
    }
    std::array::from_fn(|r| acc[r].finish(five, order))
}

/// Where block `i` of a Q4_K or Q5_K row keeps what the kernels read (the fields of
/// [`BlockQ4_K`] / [`BlockQ5_K`]).
pub(crate) struct K45Ptr {
    /// `d`, followed by `dmin`.
    pub(crate) d: *const f16,
    /// The 12 scale bytes.
    pub(crate) scales: *const [u8; 12],
    /// The 128 bytes of nibbles.
    pub(crate) qs: *const u8,
    /// Q5_K: the 32 bytes of fifth bits (null for Q4_K).
    pub(crate) qh: *const u8,
}

impl K45Ptr {
    /// Block `i` of `row` (Q5_K when `five`).
    ///
    /// # Safety
    /// `row` holds at least `i + 1` blocks of the type.
    #[inline(always)]
    pub(crate) unsafe fn new(row: &[u8], i: usize, five: bool) -> K45Ptr {
        // SAFETY: block i lies within `row` (the caller's contract); the blocks are
        // packed, so any address is aligned for them.
        unsafe {
            if five {
                let b = (row.as_ptr() as *const BlockQ5_K).add(i);
                K45Ptr {
                    d: &raw const (*b).d,
                    scales: &raw const (*b).scales,
                    qs: (*b).qs.as_ptr(),
                    qh: (*b).qh.as_ptr(),
                }
            } else {
                let b = (row.as_ptr() as *const BlockQ4_K).add(i);
                K45Ptr {
                    d: &raw const (*b).d,
                    scales: &raw const (*b).scales,
                    qs: (*b).qs.as_ptr(),
                    qh: std::ptr::null(),
                }
            }
        }
    }
}

// `dmin` right after `d`, as K45Acc::block reads them.
const _: () = assert!(
    std::mem::offset_of!(BlockQ4_K, dmin) == std::mem::offset_of!(BlockQ4_K, d) + 2
        && std::mem::offset_of!(BlockQ5_K, dmin) == std::mem::offset_of!(BlockQ5_K, d) + 2
);

/// The byte shuffles that spread word `w` of a 128-bit half over the whole register
/// (as `_mm256_shuffle_epi8` patterns, for registers whose halves are equal).
pub(crate) const WORD_PICK: [__m256i; 8] = {
    let mut p = [[0u8; 32]; 8];
    let mut w = 0;
    while w < 8 {
        let mut b = 0;
        while b < 32 {
            p[w][b] = (2 * w + b % 2) as u8;
            b += 1;
        }
        w += 1;
    }
    // SAFETY: [u8; 32] and __m256i have the same size, and any bits are an __m256i.
    unsafe { std::mem::transmute::<[[u8; 32]; 8], [__m256i; 8]>(p) }
};

/// `mins[j] = mn_2j · s_2j + mn_2j+1 · s_2j+1` of a Q4_K / Q5_K block, with `mn` its
/// eight minimums (unpacked by `k_scales_mins`) and `s` the 32-sums of the activations
/// (`bsums`: the block's 16-sums).
#[inline]
pub(crate) fn k45_mins(mn: &[u8; 8], bsums: &[i32]) -> [i32; 4] {
    std::array::from_fn(|j| {
        mn[2 * j] as i32 * (bsums[4 * j] + bsums[4 * j + 1])
            + mn[2 * j + 1] as i32 * (bsums[4 * j + 2] + bsums[4 * j + 3])
    })
}

/// The f32 accumulators of a Q4_K / Q5_K dot in one of llama.cpp's orders
/// (`reference::dot_k45`, [`reference::dot_q4_k_repacked`]), fed one block at a
/// time with its exact integer parts.
#[derive(Clone, Copy)]
pub(crate) struct K45Acc {
    /// [`KOrder::Dot`]: eight lanes of `fma(d·dx, Σ steps)`.
    acc: __m256,
    /// Q4_K [`KOrder::Dot`]: four lanes of `fma(−dx·dmin, mins)`.
    acc_m: __m128,
    /// Q5_K: `fma(−dx·dmin, Σ mins)`; [`KOrder::Gemv`]/[`KOrder::Gemm`]: the
    /// minimums' chain.
    summs: f32,
    /// [`KOrder::Gemv`]/[`KOrder::Gemm`]: the products' chain.
    chain: f32,
}

impl K45Acc {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn new() -> K45Acc {
        K45Acc {
            acc: _mm256_setzero_ps(),
            acc_m: _mm_setzero_ps(),
            summs: 0.0,
            chain: 0.0,
        }
    }

    /// One block: its four steps' lanes, its minimum sums, the block's `d` (`dmin`
    /// follows it: [`K45Ptr::d`]) and the activations' scale `dx`.
    ///
    /// # Safety
    /// `blk` points at a Q4_K / Q5_K block's `d`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn block(
        &mut self,
        steps: [__m256i; 4],
        mins: [i32; 4],
        blk: *const f16,
        dx: f32,
        five: bool,
        order: KOrder,
    ) {
        let (dw, dminw) = (f16p(blk), f16p(blk.add(1)));
        match order {
            KOrder::Dot => {
                let sumi = _mm256_add_epi32(
                    _mm256_add_epi32(steps[0], steps[1]),
                    _mm256_add_epi32(steps[2], steps[3]),
                );
                self.acc =
                    _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi), self.acc);
                let dmin = -dx * dminw;
                if five {
                    self.summs = dmin.mul_add(mins.iter().sum::<i32>() as f32, self.summs);
                } else {
                    let m = _mm_loadu_si128(mins.as_ptr() as *const __m128i);
                    self.acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(m), self.acc_m);
                }
            }
            KOrder::Gemv => {
                let s = hsum_epi32(_mm256_add_epi32(
                    _mm256_add_epi32(steps[0], steps[1]),
                    _mm256_add_epi32(steps[2], steps[3]),
                ));
                self.chain = (s as f32).mul_add(dw * dx, self.chain);
                let m: i32 = mins.iter().sum();
                self.summs = (m as f32).mul_add(dminw * dx, self.summs);
            }
            KOrder::Gemm => {
                for (st, &m) in steps.iter().zip(&mins) {
                    self.chain = (hsum_epi32(*st) as f32).mul_add(dw * dx, self.chain);
                    self.summs = (m as f32).mul_add(dminw * dx, self.summs);
                }
            }
            KOrder::Tiled => {
                let s = hsum_epi32(_mm256_add_epi32(
                    _mm256_add_epi32(steps[0], steps[1]),
                    _mm256_add_epi32(steps[2], steps[3]),
                ));
                let m: i32 = mins.iter().sum();
                let r = (-dminw).mul_add(m as f32, dw * s as f32);
                self.chain = r.mul_add(dx, self.chain);
            }
        }
    }

    /// The dot product.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn finish(&self, five: bool, order: KOrder) -> f32 {
        // SAFETY: hsum_ps needs AVX2, which this function's features include.
        let hsum_ps = |v| unsafe { hsum_ps(v) };
        match order {
            KOrder::Dot if five => hsum_ps(self.acc) + self.summs,
            KOrder::Dot => {
                // llama.cpp's fold of the four minimum lanes: (0 + 2) + (1 + 3).
                let m = _mm_add_ps(self.acc_m, _mm_movehl_ps(self.acc_m, self.acc_m));
                let m = _mm_add_ss(m, _mm_movehdup_ps(m));
                hsum_ps(self.acc) + _mm_cvtss_f32(m)
            }
            KOrder::Tiled => self.chain,
            _ => self.chain - self.summs,
        }
    }
}

/// The eight i32 lanes summed (exact while the sum fits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Q6_K in llama.cpp's dot order, or (`tiled`) in its tiled product's
/// ([`KOrder::Tiled`]).
///
/// Each block asks for the bytes two rows ahead: a token's product calls this row
/// after row, and the hardware prefetcher alone fell behind the stream (the Q6_K
/// output heads of the Qwen3 shapes and the MoE shape's Q6_K expert `down` rows, 630
/// bytes each). Decode of 64 tokens, medians of 9 alternating rounds, one thread, on
/// a Zen 3 core: MoE shape +14 %, Qwen3-0.6B shape +6 %; one row ahead +7 % / −1 %, a
/// fixed 4 KiB +13 % / −3 % (2026-11-29).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k(row: &[u8], a: &QuantizedActs, tiled: bool) -> f32 {
    q6_k_rows::<1>(row, [a], tiled, 2 * row.len())[0]
}

/// [`q6_k`] of one weight row with `RA` activation rows: each weight step decoded
/// once for all of them, each row's arithmetic exactly [`q6_k`]'s (so each result
/// equals it bit for bit). `ahead`: how many bytes past each block the memory is
/// asked for (0: not asked); a hint, never read.
///
/// # Safety
/// AVX2 + FMA + F16C present; `row` and every row of `acts` as [`q6_k`]'s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_rows<const RA: usize>(
    row: &[u8],
    acts: [&QuantizedActs; RA],
    tiled: bool,
    ahead: usize,
) -> [f32; RA] {
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let mut acc = [_mm256_setzero_ps(); RA];
    let mut chain = [0.0f32; RA];
    let blocks = row.as_ptr() as *const BlockQ6_K;
    for i in 0..acts[0].d.len() {
        let blk = blocks.add(i);
        if ahead != 0 {
            // Four lines a 210-byte block: with the next block's four, every line is asked.
            let p = (blk as *const i8).wrapping_add(ahead);
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(128));
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(192));
        }
        let sc = &(*blk).scales;
        let dw = f16p(&raw const (*blk).d);
        let (ql, qhp) = ((*blk).ql.as_ptr(), (*blk).qh.as_ptr());
        // The sixteen scales as words, each 128-bit half of `scw[n]` holding groups
        // 8n .. 8n + 8; step (n, k) takes group 8n + 2k's in its lower half and
        // 8n + 2k + 1's in its upper (one byte shuffle each).
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr() as *const __m128i));
        let scw = [
            _mm256_permute2x128_si256::<0x00>(sc16, sc16),
            _mm256_permute2x128_si256::<0x11>(sc16, sc16),
        ];
        let mut sumi = [_mm256_setzero_si256(); RA];
        for (n, sw) in scw.iter().enumerate() {
            let ql0 = _mm256_loadu_si256(ql.add(64 * n) as *const __m256i);
            let ql1 = _mm256_loadu_si256(ql.add(64 * n + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(qhp.add(32 * n) as *const __m256i);
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4),
                ),
            ];
            for (k, qk) in q.iter().enumerate() {
                // Numbers 128n + 32k .. + 32: groups 8n + 2k, 8n + 2k + 1.
                let s = _mm256_shuffle_epi8(*sw, Q6_SCALE_PICK[k]);
                for (a, si) in acts.iter().zip(sumi.iter_mut()) {
                    let xq = a.qs.as_ptr().add(256 * i);
                    let x = _mm256_loadu_si256(xq.add(128 * n + 32 * k) as *const __m256i);
                    let p = _mm256_maddubs_epi16(*qk, x);
                    *si = _mm256_add_epi32(*si, _mm256_madd_epi16(p, s));
                }
            }
        }
        for r in 0..RA {
            let a = acts[r];
            let off = q6_k_offsets(sc16, a.bsums.as_ptr().add(16 * i));
            let sumi = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(off, 5));
            if tiled {
                chain[r] = (dw * hsum_epi32(sumi) as f32).mul_add(a.d[i], chain[r]);
            } else {
                let d = dw * a.d[i];
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
    }
    if tiled {
        chain
    } else {
        std::array::from_fn(|r| hsum_ps(acc[r]))
    }
}

/// The K-quant kernels of one weight row with four activation rows (each weight step
/// decoded once for the four) in llama.cpp's dot order: Q4_K, Q5_K, Q6_K; None for the
/// other types.
pub(crate) fn kernel4(dtype: GgmlType) -> Option<Dot4Fn> {
    // SAFETY (all): AVX2+FMA detected; the callers check rows and acts.
    match dtype {
        GgmlType::Q4_K => Some(|r, a| unsafe { q45_k_rows::<4>(r, a, false, KOrder::Dot) }),
        GgmlType::Q5_K => Some(|r, a| unsafe { q45_k_rows::<4>(r, a, true, KOrder::Dot) }),
        GgmlType::Q6_K => Some(|r, a| unsafe { q6_k_rows::<4>(r, a, false, 0) }),
        _ => None,
    }
}

/// The byte shuffles that spread word `2k` of a 128-bit half over its lower half and
/// word `2k + 1` over its upper half (as `_mm256_shuffle_epi8` patterns).
const Q6_SCALE_PICK: [__m256i; 4] = {
    let mut p = [[0u8; 32]; 4];
    let mut k = 0;
    while k < 4 {
        let mut b = 0;
        while b < 32 {
            let word = if b < 16 { 2 * k } else { 2 * k + 1 };
            p[k][b] = (2 * word + b % 2) as u8;
            b += 1;
        }
        k += 1;
    }
    // SAFETY: [u8; 32] and __m256i have the same size, and any bits are an __m256i.
    unsafe { std::mem::transmute::<[[u8; 32]; 4], [__m256i; 4]>(p) }
};

/// Lane k: `sc_2k · s_2k + sc_2k+1 · s_2k+1` of a Q6_K block, from its i8 scales as
/// words (`sc16`) and the activations' sixteen 16-sums `s` at `bsums` (each |s| ≤
/// 16 · 128, so they narrow to words exactly): one `vpmaddwd`. 32 times it is the
/// lane's share of the `− 32` offset (llama.cpp's `q8sclsub`).
///
/// # Safety
/// AVX2 present; `bsums` points at sixteen i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_offsets(sc16: __m256i, bsums: *const i32) -> __m256i {
    let lo = _mm256_loadu_si256(bsums as *const __m256i);
    let hi = _mm256_loadu_si256(bsums.add(8) as *const __m256i);
    // packs works within 128-bit halves: [lo0..3, hi0..3 | lo4..7, hi4..7] → reorder.
    let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
    _mm256_madd_epi16(sc16, w)
}
