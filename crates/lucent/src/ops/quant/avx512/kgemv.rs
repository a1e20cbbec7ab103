//! A repacked Q4_K matrix's token product sixteen weight rows at a time, in llama.cpp's
//! `gemv` order ([`KOrder::Gemv`](crate::ops::quant::dispatch::KOrder::Gemv)): one f32
//! chain per output, one step per 256-block,
//!
//! ```text
//! acc   = fma(float(S_i), d_i · dx_i, acc)      S_i = Σ_j sc_j · Σ_{l ∈ j} q_l · qx_l
//! acc_m = fma(float(M_i), dmin_i · dx_i, acc_m) M_i = Σ_j mn_j · Σ_{l ∈ j} qx_l
//! y     = acc − acc_m
//! ```
//!
//! S_i and M_i are exact integers, so any order of their sums gives the same value; the
//! f32 steps are the twin's (`reference::dot_q4_k_repacked`) one for one, each output in
//! its own lane of a 512-bit register. So every output equals the one-row kernel's bit
//! for bit, while a block's conversion, scale products and two FMAs serve sixteen rows
//! at once and no row pays a horizontal sum of its own: the sixteen rows' i32 lanes are
//! folded together into one register of sixteen totals (`totals16`).
//!
//! Q6_K's token products take sixteen rows a call in its one-row order
//! ([`q6_k_gemv16`]), and a repacked Q4_0 matrix's in llama.cpp's repacked Q4_0 order
//! ([`q4_0_gemv16`]: one chain per output, a lane per row, the rows' numbers
//! interleaved in registers as `kgemm` decodes them).

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2;
use crate::tensor::quant::{BlockQ4_K, BlockQ6_K};

/// Weight rows a call multiplies.
pub(crate) const ROWS: usize = 16;

/// Weight rows `rows` (each `a.d.len()` Q4_K blocks) times one activation row `a`
/// (Q8_K), in the `gemv` order (module docs): output r for row r. `ahead`: how many
/// bytes past each block read the memory is asked for the next weights (0: not asked;
/// the caller passes the sixteen rows' size, so the next call's rows arrive while these
/// are multiplied: the sweep across sixteen short rows is one the hardware prefetcher
/// does not follow, and without the hint a token's product waits on every line).
///
/// Each block's scales, minimums and `M` are unpacked for the sixteen rows at once
/// (their first sixteen bytes transposed to a lane per row, `k_scales_mins`'s word
/// operations on the lanes, `M` as four word products): one row at a time these had
/// been half the kernel's instructions. The Qwen3 shape's Q4_K matrices, repeated in
/// cache (`quant_bench`, 1 thread): 1024 × 1024 33.6 → 44.3 GB/s, 3072 × 1024 33.0 →
/// 42.7.
///
/// # Safety
/// [`available`](super::available); every row holds `a.d.len()` Q4_K blocks and `a` was
/// prepared as Q8_K for them (its `qs`, `d`, `bsums` of that many blocks).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_k_gemv16(
    rows: [&[u8]; ROWS],
    a: &QuantizedActs,
    ahead: usize,
) -> [f32; ROWS] {
    let nb = a.d.len();
    let lo4 = _mm512_set1_epi8(0x0F);
    // Step c's scale words: sub-block 2c's in the lower 16 words, 2c + 1's in the upper.
    let idx: [__m512i; 4] = std::array::from_fn(|c| {
        _mm512_mask_blend_epi16(
            0xFFFF_0000,
            _mm512_set1_epi16(2 * c as i16),
            _mm512_set1_epi16(2 * c as i16 + 1),
        )
    });
    let (mut acc, mut acc_m) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let (low6, low4, bits45) = (
        _mm512_set1_epi32(0x3f3f_3f3f),
        _mm512_set1_epi32(0x0f0f_0f0f),
        _mm512_set1_epi32(0x3030_3030),
    );
    let even_bytes = _mm512_set1_epi32(0x00ff_00ff);
    // Row r's eight scale bytes in `scale_bytes`: the interleaving below puts rows
    // 4L, 4L + 1 in the first eight words' 128-bit lane L and rows 4L + 2, 4L + 3 in
    // the last eight's.
    const AT: [usize; ROWS] = {
        let mut at = [0; ROWS];
        let mut r = 0;
        while r < ROWS {
            let (lane, m) = (r / 4, r % 4);
            at[r] = if m < 2 {
                2 * lane + m
            } else {
                8 + 2 * lane + m - 2
            };
            r += 1;
        }
        at
    };
    let mut scale_bytes = [0u64; ROWS];
    for i in 0..nb {
        // (4, 64) the block's activations, step by step.
        let x: [__m512i; 4] = std::array::from_fn(|c| {
            _mm512_loadu_si512(a.qs.as_ptr().add(256 * i + 64 * c) as *const __m512i)
        });
        // Σ qx of each sub-block of 32 (|Σ| ≤ 32 · 128: an i16), as word pairs
        // (j, j + 2) for the minimums' word products below.
        let bs = &a.bsums[16 * i..16 * i + 16];
        let mut b8 = [0u32; 8];
        for (j, b) in b8.iter_mut().enumerate() {
            *b = (bs[2 * j] + bs[2 * j + 1]) as u16 as u32;
        }
        let pair = |j: usize| _mm512_set1_epi32((b8[j] | b8[j + 2] << 16) as i32);
        // The sixteen blocks' first sixteen bytes (d, dmin, the twelve scale bytes) as
        // four dword columns, lane r = row r: w[0] = d | dmin << 16, w[1..4] = the
        // scale words a, b, c. z[g]'s 128-bit lane L holds row 4L + g.
        let head = |r: usize| (rows[r].as_ptr() as *const BlockQ4_K).add(i) as *const __m128i;
        let mut z = [_mm512_setzero_si512(); 4];
        for (g, zg) in z.iter_mut().enumerate() {
            let v = _mm512_castsi128_si512(_mm_loadu_si128(head(g)));
            let v = _mm512_inserti32x4::<1>(v, _mm_loadu_si128(head(4 + g)));
            let v = _mm512_inserti32x4::<2>(v, _mm_loadu_si128(head(8 + g)));
            *zg = _mm512_inserti32x4::<3>(v, _mm_loadu_si128(head(12 + g)));
        }
        let (t0, t1) = (
            _mm512_unpacklo_epi32(z[0], z[1]),
            _mm512_unpackhi_epi32(z[0], z[1]),
        );
        let (t2, t3) = (
            _mm512_unpacklo_epi32(z[2], z[3]),
            _mm512_unpackhi_epi32(z[2], z[3]),
        );
        let w0 = _mm512_unpacklo_epi64(t0, t2);
        let (wa, wb, wc) = (
            _mm512_unpackhi_epi64(t0, t2),
            _mm512_unpacklo_epi64(t1, t3),
            _mm512_unpackhi_epi64(t1, t3),
        );
        // `k_scales_mins` on sixteen rows at once: scales 0..4 = a & 63, 4..8 =
        // c & 15 | (a >> 6) << 4; minimums 0..4 = b & 63, 4..8 = c >> 4 | (b >> 6) << 4.
        let sc_lo = _mm512_and_si512(wa, low6);
        let sc_hi = _mm512_or_si512(
            _mm512_and_si512(wc, low4),
            _mm512_and_si512(_mm512_srli_epi32(wa, 2), bits45),
        );
        let mn_lo = _mm512_and_si512(wb, low6);
        let mn_hi = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(wc, 4), low4),
            _mm512_and_si512(_mm512_srli_epi32(wb, 2), bits45),
        );
        // M = Σ_j mn_j · Σ qx of sub-block j, exact in i32: the minimums as word pairs
        // (j, j + 2) against the activations' pairs.
        let words = |v: __m512i| {
            (
                _mm512_and_si512(v, even_bytes),
                _mm512_and_si512(_mm512_srli_epi32(v, 8), even_bytes),
            )
        };
        let ((m0, m1), (m4, m5)) = (words(mn_lo), words(mn_hi));
        let mut m = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m0, pair(0));
        m = _mm512_dpwssd_epi32(m, m1, pair(1));
        m = _mm512_dpwssd_epi32(m, m4, pair(4));
        m = _mm512_dpwssd_epi32(m, m5, pair(5));
        _mm512_storeu_si512(
            scale_bytes.as_mut_ptr() as *mut __m512i,
            _mm512_unpacklo_epi32(sc_lo, sc_hi),
        );
        _mm512_storeu_si512(
            scale_bytes.as_mut_ptr().add(8) as *mut __m512i,
            _mm512_unpackhi_epi32(sc_lo, sc_hi),
        );
        let mut lanes = [_mm512_setzero_si512(); ROWS];
        for (r, row) in rows.iter().enumerate() {
            let b = (row.as_ptr() as *const BlockQ4_K).add(i);
            if ahead != 0 {
                // Non-temporal: weights read once a token need not displace what stays
                // (the KV cache) from L3 (Qwen3-shape decode +4 % at 1 thread, +5 % at 2).
                let p = (b as *const i8).wrapping_add(ahead);
                _mm_prefetch::<_MM_HINT_NTA>(p);
                _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(64));
                _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(128));
            }
            // The eight scales as words in the lowest 128 bits.
            let scw = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(
                scale_bytes.as_ptr().add(AT[r]) as *const __m128i,
            )));
            let qs = (*b).qs.as_ptr();
            let mut s = _mm512_setzero_si512();
            for (c, (xc, ic)) in x.iter().zip(&idx).enumerate() {
                // Numbers 64c .. 64c + 64: the low nibbles of qs[32c ..], then the high.
                let z =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(qs.add(32 * c) as *const __m256i));
                let q = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFFFF_0000, z, 4), lo4);
                // q ≤ 15, |qx| ≤ 127: the pair sums fit in i16 (no saturation).
                let p = _mm512_maddubs_epi16(q, *xc);
                s = _mm512_dpwssd_epi32(s, p, _mm512_permutexvar_epi16(*ic, scw));
            }
            lanes[r] = s;
        }
        let sums = totals16(&lanes);
        let dx = _mm512_set1_ps(a.d[i]);
        let d = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0)), dx);
        let dmin = _mm512_mul_ps(
            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w0, 16))),
            dx,
        );
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), d, acc);
        acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), dmin, acc_m);
    }
    let mut y = [0.0f32; ROWS];
    _mm512_storeu_ps(y.as_mut_ptr(), _mm512_sub_ps(acc, acc_m));
    y
}

/// Q6_K weight rows `rows` (each `a.d.len()` blocks) times one activation row `a`
/// (Q8_K) in llama.cpp's `vec_dot` order, output r for row r: row after row, each
/// block's eight i32 lanes ([`super::kquant::q6_k_block`]) meet the one-row kernel's f32
/// steps (`acc = fma(d · dx, float(lanes), acc)`, then its horizontal sum), so every
/// output equals [`super::kquant::q6_k`]'s bit for bit. The rows are read in order, one
/// stream (two threads' sixteen interleaved streams each measured 10 % slower than
/// this); each block asks for the bytes `ahead` past it (the caller passes the sixteen
/// rows' size: the next call's rows arrive while these are multiplied).
///
/// # Safety
/// [`available`](super::available); every row holds `a.d.len()` Q6_K blocks and `a` was
/// prepared as Q8_K for them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q6_k_gemv16(
    rows: [&[u8]; ROWS],
    a: &QuantizedActs,
    ahead: usize,
) -> [f32; ROWS] {
    let mut y = [0.0f32; ROWS];
    for (row, y) in rows.iter().zip(y.iter_mut()) {
        let mut acc = _mm256_setzero_ps();
        for i in 0..a.d.len() {
            let b = (row.as_ptr() as *const BlockQ6_K).add(i);
            if ahead != 0 {
                let q = (b as *const i8).wrapping_add(ahead);
                for line in 0..4 {
                    _mm_prefetch::<_MM_HINT_NTA>(q.wrapping_add(64 * line));
                }
            }
            let d = avx2::f16p(&raw const (*b).d) * a.d[i];
            let lanes = super::kquant::q6_k_block(b, [a], i)[0];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
        }
        *y = avx2::hsum_ps(acc);
    }
    y
}

/// Q4_0 weight rows `rows` (each `a.d.len()` blocks) times one activation row `a`
/// (Q8_0) in the order of llama.cpp's repacked Q4_0 kernels, output r for row r: per
/// row one f32 chain, per block `acc = fma(float(S), d · dx, acc)` with
/// `S = Σ (q − 8) · qx` (the twin `dot_q4_0_repacked`), so every output equals the
/// one-row kernel's bit for bit. Two blocks of the sixteen rows are interleaved in
/// registers at a time ([`super::kgemm::q4_0_interleaved`]: a lane is a row), so each
/// `vpdpbusd` adds 64 products into sixteen outputs; each block asks for the bytes
/// `ahead` past it (the caller passes the sixteen rows' size).
///
/// # Safety
/// [`available`](super::available); every row holds `a.d.len()` Q4_0 blocks and `a` was
/// prepared as Q8_0 for them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_0_gemv16(
    rows: [&[u8]; ROWS],
    a: &QuantizedActs,
    ahead: usize,
) -> [f32; ROWS] {
    use super::kgemm::{q4_0_interleaved, q4_0_scales};
    const BB: usize = std::mem::size_of::<crate::tensor::quant::BlockQ4_0>();
    let nb = a.d.len();
    let mut acc = _mm512_setzero_ps();
    for i in (0..nb).step_by(2) {
        if ahead != 0 {
            for row in &rows {
                let p = (row.as_ptr().add(BB * i) as *const i8).wrapping_add(ahead);
                _mm_prefetch::<_MM_HINT_NTA>(p);
            }
        }
        let two = i + 1 < nb;
        let q = q4_0_interleaved(&rows, i, two);
        for (h, q) in q.chunks_exact(8).take(1 + two as usize).enumerate() {
            let b = i + h;
            let x = a.qs.as_ptr().add(32 * b) as *const i32;
            // Two chains for the adder's latency (exact integers).
            let (mut s0, mut s1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for p in (0..8).step_by(2) {
                s0 = _mm512_dpbusd_epi32(s0, q[p], _mm512_set1_epi32(x.add(p).read_unaligned()));
                s1 = _mm512_dpbusd_epi32(
                    s1,
                    q[p + 1],
                    _mm512_set1_epi32(x.add(p + 1).read_unaligned()),
                );
            }
            let s = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(8 * a.bsums[b]));
            let d = _mm512_mul_ps(q4_0_scales(&rows, b), _mm512_set1_ps(a.d[b]));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
        }
    }
    let mut y = [0.0f32; ROWS];
    _mm512_storeu_ps(y.as_mut_ptr(), acc);
    y
}

/// Sixteen registers of i32 lanes folded into one: lane r holds the sum of register
/// r's sixteen lanes (exact integer adds, so the order is free).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn totals16(v: &[__m512i; ROWS]) -> __m512i {
    // Within each 128-bit lane: pairs, then quads, give [a, b, c, d] = each of four
    // registers' partial over that 128-bit lane.
    let pair = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
    };
    let quad = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
    };
    // u[g]: registers 4g .. 4g + 4, 128-bit lane L holding their four partials of L.
    let u: [__m512i; 4] = std::array::from_fn(|g| {
        quad(
            pair(v[4 * g], v[4 * g + 1]),
            pair(v[4 * g + 2], v[4 * g + 3]),
        )
    });
    // Across the 128-bit lanes: [u0 L0+L1, u0 L2+L3, u1 L0+L1, u1 L2+L3], then the halves.
    let across = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_i32x4::<0b11_01_11_01>(a, b),
        )
    };
    let w01 = across(u[0], u[1]);
    let w23 = across(u[2], u[3]);
    across(w01, w23)
}
