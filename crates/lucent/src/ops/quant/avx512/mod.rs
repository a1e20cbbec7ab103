//! AVX-512 VNNI kernels: the tile kernels of the 32-block types (Q4_0, Q4_1, Q5_0,
//! Q5_1, Q8_0) — a decoded token's four weight rows as two interleaved pairs
//! ([`decode::pair_tile`]; where GFNI and BMI2 are), one row two blocks per 512-bit
//! register ([`decode::tile`]), a prompt's rows in pairs ([`prefill::paired_tile`]) — their products summed by
//! `vpdpbusd` (unsigned 8-bit weights × signed 8-bit activations, four products into
//! each i32 lane, no saturation); and the K-quant dots, 64 numbers a step. Selected
//! only after [`available`] said yes; the callers' `unsafe` blocks rely on that.
//!
//! `vpdpbusd` wants one operand unsigned, so every weight enters as `u = q + o ≥ 0`
//! (o = 8 for Q4_0, 16 for Q5_0, 128 for Q8_0 by flipping the sign bit, 0 for the
//! `_1` kinds) and the integer sum starts at `−o · Σ qx` instead of 0: the block's sum
//! `Σ (u − o)·qx` is then exactly the twin's `Σ q·qx`.
//!
//! | file | holds |
//! | --- | --- |
//! | `mod` | the level check, the blocks' layouts as the kernels walk them, the unsigned weights of a block, the kernel tables, the shared lane shuffles |
//! | `kgemm` | a prompt's products sixteen weight rows by four activation rows a call, from rows decoded once into interleaved bytes: repacked Q4_K (llama.cpp's grouped `gemm` order), the other K-quants and IQ4_XS (its tiled order), repacked Q4_0 |
//! | `kgemv` | a token's product sixteen weight rows at a time: repacked Q4_K in llama.cpp's `gemv` order, Q6_K in its `vec_dot` order, repacked Q4_0 in its repacked order |
//! | `kquant` | the K-quant dots (Q4_K, Q5_K, Q6_K), one activation row or four |
//! | `lowbit` | the dots of Q2_K, Q3_K, IQ4_XS, one activation row or four (IQ4_NL takes the AVX2 kernels), and their 64-number steps unpacked (for `kgemm` too) |
//! | `decode` | a decoded token's tiles of the 32-block types: four rows as interleaved pairs, one row two blocks a register |
//! | `prefill` | a prompt's tiles of the 32-block types: activation rows in pairs against weight rows decoded once |
//! | `quantize` | activation rows quantised to Q8_0 / Q8_K blocks, 16 numbers a step |

pub(crate) mod decode;
pub(crate) mod kgemm;
pub(crate) mod kgemv;
pub(crate) mod kquant;
pub(crate) mod lowbit;
pub(crate) mod prefill;
pub(crate) mod quantize;

use std::arch::x86_64::*;
use std::mem::{offset_of, size_of};

use crate::ops::quant::avx2;
use crate::ops::quant::dispatch::{Dot4Fn, DotFn, KOrder};
use crate::runtime::{CpuFeatures, Isa};
use crate::tensor::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, GgmlType};

/// Whether these kernels run at `isa`: [`Isa::Avx512`] (AVX-512 F/BW/VL/VNNI and the
/// AVX2 kernels' features, whose helpers these kernels share).
pub(crate) fn available(isa: Isa) -> bool {
    isa >= Isa::Avx512
}

/// Whether [`decode::pair_tile`] also runs at `isa`: [`available`] plus GFNI (splits a
/// byte's nibbles in one instruction) and BMI2 (spreads the fifth bits).
pub(crate) fn pairs_available(isa: Isa) -> bool {
    CpuFeatures::get().pairs(isa)
}

/// Bytes of a block, where its quants start, where its 32 fifth bits start (Q5 kinds),
/// the weight offset `o`, and whether it has a minimum: per type, read off the block
/// structs (the kernels walk rows of blocks with these). Every type keeps `d` at the
/// block's start and, where it has one, `m` right after it (asserted below), which the
/// scale reads ([`group_scales`], `decode::short_scales`) take as one 32-bit word.
pub(crate) const fn layout(t: GgmlType) -> (usize, usize, Option<usize>, i8, bool) {
    match t {
        GgmlType::Q4_0 => (
            size_of::<BlockQ4_0>(),
            offset_of!(BlockQ4_0, qs),
            None,
            8,
            false,
        ),
        GgmlType::Q4_1 => (
            size_of::<BlockQ4_1>(),
            offset_of!(BlockQ4_1, qs),
            None,
            0,
            true,
        ),
        GgmlType::Q5_0 => (
            size_of::<BlockQ5_0>(),
            offset_of!(BlockQ5_0, qs),
            Some(offset_of!(BlockQ5_0, qh)),
            16,
            false,
        ),
        GgmlType::Q5_1 => (
            size_of::<BlockQ5_1>(),
            offset_of!(BlockQ5_1, qs),
            Some(offset_of!(BlockQ5_1, qh)),
            0,
            true,
        ),
        // Q8_0 (and, unused, anything else): the sign bit flipped, o = 128 (the byte
        // 0x80, read as unsigned by `vpdpbusd`).
        _ => (
            size_of::<BlockQ8_0>(),
            offset_of!(BlockQ8_0, qs),
            None,
            i8::MIN,
            false,
        ),
    }
}

// `d` first, `m` right after: what the scale reads take.
const _: () = assert!(
    offset_of!(BlockQ4_0, d) == 0
        && offset_of!(BlockQ4_1, d) == 0
        && offset_of!(BlockQ4_1, m) == 2
        && offset_of!(BlockQ5_0, d) == 0
        && offset_of!(BlockQ5_1, d) == 0
        && offset_of!(BlockQ5_1, m) == 2
        && offset_of!(BlockQ8_0, d) == 0
);

/// The tile kernel's types as const-generic ids (`GgmlType` is not a const parameter).
pub(crate) const Q4_0: u8 = 0;
/// See [`Q4_0`].
pub(crate) const Q4_1: u8 = 1;
/// See [`Q4_0`].
pub(crate) const Q5_0: u8 = 2;
/// See [`Q4_0`].
pub(crate) const Q5_1: u8 = 3;
/// See [`Q4_0`].
pub(crate) const Q8_0: u8 = 4;

pub(crate) const fn dtype(k: u8) -> GgmlType {
    match k {
        Q4_0 => GgmlType::Q4_0,
        Q4_1 => GgmlType::Q4_1,
        Q5_0 => GgmlType::Q5_0,
        Q5_1 => GgmlType::Q5_1,
        _ => GgmlType::Q8_0,
    }
}

/// The unsigned weights `u = q + o` of block `b` (and of the next block when `TWO`;
/// else the upper 32 bytes are don't-care, met by zero activations) as 64 bytes in
/// number order: block one's 32 numbers, then block two's.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn weights<const K: u8, const TWO: bool>(b: *const u8) -> __m512i {
    let (bb, qs, qh, _, _) = layout(dtype(K));
    if K == Q8_0 {
        let lo = _mm256_loadu_si256(b.add(qs) as *const __m256i);
        let z = if TWO {
            let hi = _mm256_loadu_si256(b.add(bb + qs) as *const __m256i);
            _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
        } else {
            _mm512_zextsi256_si512(lo)
        };
        return _mm512_xor_si512(z, _mm512_set1_epi8(-128));
    }
    // 128-bit lanes: [nibbles of block one ×2, nibbles of block two ×2]; the odd
    // lanes shifted by 4, so after the mask they hold the high nibbles (numbers 16..32).
    let mut z = _mm512_broadcast_i32x4(_mm_loadu_si128(b.add(qs) as *const __m128i));
    if TWO {
        let n = _mm_loadu_si128(b.add(bb + qs) as *const __m128i);
        z = _mm512_mask_broadcast_i32x4(z, 0xFF00, n);
    }
    z = _mm512_mask_srli_epi16(z, 0xFF00_FF00, z, 4);
    z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
    if let Some(h) = qh {
        let mut bits = std::ptr::read_unaligned(b.add(h) as *const u32) as u64;
        if TWO {
            bits |= (std::ptr::read_unaligned(b.add(bb + h) as *const u32) as u64) << 32;
        }
        z = _mm512_mask_add_epi8(z, bits, z, _mm512_set1_epi8(0x10));
    }
    z
}

/// The dot kernel for `dtype`: the K-quants here, the rest from [`super::avx2`].
pub(crate) fn kernel(dtype: GgmlType) -> DotFn {
    match dtype {
        // SAFETY (all): available() said yes.
        GgmlType::Q4_K => |r, a| unsafe { kquant::q45_k(r, a, false, KOrder::Dot) },
        GgmlType::Q5_K => |r, a| unsafe { kquant::q45_k(r, a, true, KOrder::Dot) },
        GgmlType::Q6_K => |r, a| unsafe { kquant::q6_k(r, a, false) },
        GgmlType::Q2_K => |r, a| unsafe { lowbit::rows::<1>(GgmlType::Q2_K, r, [a], false)[0] },
        GgmlType::Q3_K => |r, a| unsafe { lowbit::rows::<1>(GgmlType::Q3_K, r, [a], false)[0] },
        GgmlType::IQ4_XS => |r, a| unsafe { lowbit::rows::<1>(GgmlType::IQ4_XS, r, [a], false)[0] },
        _ => avx2::kernel(dtype),
    }
}

/// The K-quant kernel of one weight row with four activation rows (a prompt's
/// product), each result equal to [`kernel`]'s; None for the other types.
pub(crate) fn kernel4(dtype: GgmlType) -> Option<Dot4Fn> {
    match dtype {
        // SAFETY (all): available() said yes; the callers check rows and acts.
        GgmlType::Q4_K => Some(|r, a| unsafe { kquant::q45_k_rows::<4>(r, a, false, KOrder::Dot) }),
        GgmlType::Q5_K => Some(|r, a| unsafe { kquant::q45_k_rows::<4>(r, a, true, KOrder::Dot) }),
        GgmlType::Q6_K => Some(|r, a| unsafe { kquant::q6_k_rows::<4>(r, a, false) }),
        GgmlType::Q2_K => Some(|r, a| unsafe { lowbit::rows::<4>(GgmlType::Q2_K, r, a, false) }),
        GgmlType::Q3_K => Some(|r, a| unsafe { lowbit::rows::<4>(GgmlType::Q3_K, r, a, false) }),
        GgmlType::IQ4_XS => {
            Some(|r, a| unsafe { lowbit::rows::<4>(GgmlType::IQ4_XS, r, a, false) })
        }
        _ => None,
    }
}

/// The K-quant kernels of `dtype` in llama.cpp's tiled order ([`KOrder::Tiled`]):
/// one activation row and four.
pub(crate) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    // SAFETY (all): available() said yes; the callers check rows and acts.
    match dtype {
        GgmlType::Q4_K => Some((
            |r, a| unsafe { kquant::q45_k(r, a, false, KOrder::Tiled) },
            |r, a| unsafe { kquant::q45_k_rows::<4>(r, a, false, KOrder::Tiled) },
        )),
        GgmlType::Q5_K => Some((
            |r, a| unsafe { kquant::q45_k(r, a, true, KOrder::Tiled) },
            |r, a| unsafe { kquant::q45_k_rows::<4>(r, a, true, KOrder::Tiled) },
        )),
        GgmlType::Q6_K => Some((
            |r, a| unsafe { kquant::q6_k(r, a, true) },
            |r, a| unsafe { kquant::q6_k_rows::<4>(r, a, true) },
        )),
        GgmlType::Q2_K => Some((
            |r, a| unsafe { lowbit::rows::<1>(GgmlType::Q2_K, r, [a], true)[0] },
            |r, a| unsafe { lowbit::rows::<4>(GgmlType::Q2_K, r, a, true) },
        )),
        GgmlType::Q3_K => Some((
            |r, a| unsafe { lowbit::rows::<1>(GgmlType::Q3_K, r, [a], true)[0] },
            |r, a| unsafe { lowbit::rows::<4>(GgmlType::Q3_K, r, a, true) },
        )),
        GgmlType::IQ4_XS => Some((
            |r, a| unsafe { lowbit::rows::<1>(GgmlType::IQ4_XS, r, [a], true)[0] },
            |r, a| unsafe { lowbit::rows::<4>(GgmlType::IQ4_XS, r, a, true) },
        )),
        _ => avx2::tiled_kernels(dtype),
    }
}

/// The kernels in the order of llama.cpp's repacked kernels: Q4_K's ([`KOrder::Gemv`]
/// for one row at a time, [`KOrder::Gemm`] for the four-row kernel); IQ4_NL's from
/// [`super::avx2`].
pub(crate) fn repacked_kernels(dtype: GgmlType) -> (DotFn, Dot4Fn) {
    if dtype != GgmlType::Q4_K {
        return avx2::repacked_kernels(dtype);
    }
    (
        // SAFETY (both): available() said yes; the callers check rows and acts.
        |r, a| unsafe { kquant::q45_k(r, a, false, KOrder::Gemv) },
        |r, a| unsafe { kquant::q45_k_rows::<4>(r, a, false, KOrder::Gemm) },
    )
}

/// The scales `d` (and, for the kinds with one, the minimums `m`) of blocks
/// `g .. g + 16` of every row, widened from the f16s at the blocks' starts (the
/// scale table's values, read from the bytes the kernels stream anyway); zero for the
/// blocks past the row's end (`m` masks the group) and `m` zero for the kinds without
/// a minimum. A whole group's words come from plain loads and word shuffles
/// ([`group_words`]); a short one's from a masked gather.
///
/// # Safety
/// [`available`]; the masked blocks lie within each row of type `K`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group_scales<const K: u8, const RW: usize>(
    rows: [&[u8]; RW],
    g: usize,
    m: u16,
) -> ([__m512; RW], [__m512; RW]) {
    let (bb, .., has_min) = layout(dtype(K));
    let mut d = [_mm512_setzero_ps(); RW];
    let mut mn = [_mm512_setzero_ps(); RW];
    if m == u16::MAX {
        for w in 0..RW {
            let words = group_words::<K>(rows[w].as_ptr().add(bb * g));
            d[w] = _mm512_cvtph_ps(_mm512_castsi512_si256(words));
            if has_min {
                mn[w] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(words));
            }
        }
        return (d, mn);
    }
    // Byte offsets of 16 consecutive blocks.
    let offs = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(bb as i32),
    );
    for w in 0..RW {
        let base = rows[w].as_ptr().add(bb * g) as *const i32;
        let h = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), m, offs, base);
        d[w] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
        if has_min {
            // The minimums are the f16s right after the scales: the words' upper halves.
            mn[w] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
        }
    }
    (d, mn)
}

/// Where [`group_words`] finds sixteen blocks' scale words: the group's bytes taken
/// as windows of 128 (two 64-byte loads, words `64 w .. 64 w + 64`), and for each
/// window the word shuffle that brings its words into place.
struct ScaleWindows {
    /// Windows to read (at most five: sixteen Q8_0 blocks are 544 bytes).
    n: usize,
    /// Per window: for each output word, its word within the window (0..64).
    idx: [[u16; 32]; 5],
    /// Per window: the output words it supplies.
    take: [u32; 5],
    /// Per window, per 64-byte half: the words to load (those up to the last scale
    /// word; a masked load reads nothing past them, so a group at a matrix's end
    /// reads only its own bytes).
    load: [[u32; 2]; 5],
}

/// [`ScaleWindows`] for blocks of `bb` bytes (even) holding `d` at their start and,
/// when `has_min`, `m` right after it: output word `j` is block j's `d`, word
/// `16 + j` its `m` (left zero without one).
const fn scale_windows(bb: usize, has_min: bool) -> ScaleWindows {
    let mut w = ScaleWindows {
        n: 0,
        idx: [[0; 32]; 5],
        take: [0; 5],
        load: [[0; 2]; 5],
    };
    // Words 0 .. span hold every scale word wanted.
    let span = (bb / 2) * 15 + 1 + has_min as usize;
    w.n = span.div_ceil(64);
    let mut o = 0;
    while o < 32 {
        let (j, is_min) = (o % 16, o >= 16);
        if !is_min || has_min {
            let src = (bb / 2) * j + is_min as usize;
            w.idx[src / 64][o] = (src % 64) as u16;
            w.take[src / 64] |= 1 << o;
        }
        o += 1;
    }
    let mut k = 0;
    while k < w.n {
        let mut half = 0;
        while half < 2 {
            let first = 64 * k + 32 * half;
            let count = span.saturating_sub(first);
            w.load[k][half] = if count >= 32 {
                u32::MAX
            } else {
                (1u32 << count) - 1
            };
            half += 1;
        }
        k += 1;
    }
    w
}

/// The scale words of the sixteen blocks of type `K` from `base` on: word `j` holds
/// block j's `d`, word `16 + j` its `m` (zero for the kinds without one) — the same
/// f16s a gather of the blocks' first 32-bit words finds, from a few plain loads and
/// one word shuffle per 128 bytes instead (the gather was a quarter of a decoded
/// token's Q4_1 product: 25.7 → 33 GB/s in L2 without it).
///
/// # Safety
/// [`available`]; the sixteen blocks lie within the row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group_words<const K: u8>(base: *const u8) -> __m512i {
    let w: &ScaleWindows = &const {
        let (bb, .., has_min) = layout(dtype(K));
        scale_windows(bb, has_min)
    };
    let p = base as *const i16;
    let mut out = _mm512_setzero_si512();
    for k in 0..w.n {
        let [lo, hi] = std::array::from_fn(|h| {
            let at = p.add(64 * k + 32 * h);
            match w.load[k][h] {
                0 => _mm512_setzero_si512(),
                u32::MAX => _mm512_loadu_si512(at as *const __m512i),
                mask => _mm512_maskz_loadu_epi16(mask, at),
            }
        });
        let idx = _mm512_loadu_si512(w.idx[k].as_ptr() as *const __m512i);
        let words = _mm512_permutex2var_epi16(lo, idx, hi);
        out = _mm512_mask_mov_epi16(out, w.take[k], words);
    }
    out
}

/// The four rows of 16 numbers `v` unpacked so that register `r`'s 128-bit lane `l`
/// holds column `4 l + r` (its four numbers, row by row).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn unpack_4x16(v: [__m512; 4]) -> [__m512; 4] {
    let t0 = _mm512_unpacklo_ps(v[0], v[1]);
    let t1 = _mm512_unpackhi_ps(v[0], v[1]);
    let t2 = _mm512_unpacklo_ps(v[2], v[3]);
    let t3 = _mm512_unpackhi_ps(v[2], v[3]);
    let pd = _mm512_castps_pd;
    [
        _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t0), pd(t2))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t0), pd(t2))),
        _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t1), pd(t3))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t1), pd(t3))),
    ]
}

/// The 4 × 16 numbers `v` (four rows of 16) column by column, in the order that
/// puts column `i`'s four numbers at `16 (i % 4) + 4 (i / 4)`: one 128-bit lane of
/// the unpacked registers.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn transpose_4x16(v: [__m512; 4]) -> [f32; 64] {
    let u = unpack_4x16(v);
    let mut out = [0.0f32; 64];
    for (r, x) in u.iter().enumerate() {
        _mm512_storeu_ps(out.as_mut_ptr().add(16 * r), *x);
    }
    out
}

/// The 4 × 16 numbers `v` (four rows of 16) column by column: column `i`'s four
/// numbers at `4 i`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn block_major_4x16(v: [__m512; 4]) -> [f32; 64] {
    // u[r]'s 128-bit lane l: column 4 l + r.
    let u = unpack_4x16(v);
    // The 128-bit lanes transposed: register l holds lane l of u[0..4], columns
    // 4 l .. 4 l + 4 in order.
    let w01 = _mm512_shuffle_f32x4::<0b01_00_01_00>(u[0], u[1]);
    let w23 = _mm512_shuffle_f32x4::<0b01_00_01_00>(u[2], u[3]);
    let x01 = _mm512_shuffle_f32x4::<0b11_10_11_10>(u[0], u[1]);
    let x23 = _mm512_shuffle_f32x4::<0b11_10_11_10>(u[2], u[3]);
    let c = [
        _mm512_shuffle_f32x4::<0b10_00_10_00>(w01, w23),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(w01, w23),
        _mm512_shuffle_f32x4::<0b10_00_10_00>(x01, x23),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(x01, x23),
    ];
    let mut out = [0.0f32; 64];
    for (l, x) in c.iter().enumerate() {
        _mm512_storeu_ps(out.as_mut_ptr().add(16 * l), *x);
    }
    out
}

/// 64 bytes, aligned as a 512-bit register: the unit of [`prefill::Paired`] and of
/// [`kgemm`]'s decoded rows.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Chunk(pub(crate) [u8; 64]);

/// The low 8 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn lo(v: __m512) -> __m256 {
    _mm512_castps512_ps256(v)
}

/// The high 8 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn hi(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
}
