//! A repacked Q4_K matrix's token product on AVX2, eight weight rows at a time, in
//! llama.cpp's `gemv` order ([`KOrder::Gemv`](crate::ops::quant::dispatch::KOrder::Gemv)):
//! one f32 chain per output, one step per 256-block,
//!
//! ```text
//! acc   = fma(float(S_i), d_i · dx_i, acc)      S_i = Σ_j sc_j · Σ_{l ∈ j} q_l · qx_l
//! acc_m = fma(float(M_i), dmin_i · dx_i, acc_m) M_i = Σ_j mn_j · Σ_{l ∈ j} qx_l
//! y     = acc − acc_m
//! ```
//!
//! S_i and M_i are exact integers, so any order of their sums gives the same value; the
//! f32 steps are the twin's (`reference::dot_q4_k_repacked`) one for one, each output in
//! its own lane of a 256-bit register. So every output equals the one-row kernel's
//! (`avx2::q45_k` in that order) bit for bit, while a block's conversions, scale products
//! and two FMAs serve eight rows at once, and no row pays a horizontal sum or a scalar
//! chain of its own: the eight rows' i32 lanes fold into one register of eight totals
//! ([`totals8`]), their minimum sums into another ([`mins8`]). The AVX2 sibling of
//! `avx512::kgemv`.

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2::WORD_PICK;
use crate::tensor::quant::BlockQ4_K;

/// Weight rows a call multiplies.
pub(crate) const ROWS: usize = 8;

/// Weight rows `rows` (each `a.d.len()` Q4_K blocks) times one activation row `a`
/// (Q8_K), in the `gemv` order (module docs): output r for row r. `ahead`: how many
/// bytes past each block read the memory is asked for the next weights (0: not asked;
/// the caller passes the eight rows' size, so the next call's rows arrive while these
/// are multiplied).
///
/// # Safety
/// AVX2 + FMA + F16C present; every row holds `a.d.len()` Q4_K blocks and `a` was
/// prepared as Q8_K for them (its `qs`, `d`, `bsums` of that many blocks).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_gemv8(
    rows: [&[u8]; ROWS],
    a: &QuantizedActs,
    ahead: usize,
) -> [f32; ROWS] {
    let nb = a.d.len();
    let lo4 = _mm256_set1_epi8(0x0F);
    let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for i in 0..nb {
        let xq = a.qs.as_ptr().add(256 * i);
        // Σ qx of each sub-block of 32 (its two 16-sums), as eight i16 words (|Σ| ≤
        // 32 · 128: they fit), in the lower 128 bits.
        let bs = a.bsums.as_ptr().add(16 * i) as *const __m256i;
        // [b0, b1, b4, b5 | b2, b3, b6, b7], put in order, packed.
        let b32 = _mm256_hadd_epi32(_mm256_loadu_si256(bs), _mm256_loadu_si256(bs.add(1)));
        let b32 = _mm256_permute4x64_epi64(b32, 0b11_01_10_00);
        let b16 = _mm_packs_epi32(
            _mm256_castsi256_si128(b32),
            _mm256_extracti128_si256(b32, 1),
        );
        let mut lanes = [_mm256_setzero_si256(); ROWS];
        let mut mins = [_mm_setzero_si128(); ROWS];
        let mut d16 = [0u32; ROWS];
        for (r, row) in rows.iter().enumerate() {
            let b = (row.as_ptr() as *const BlockQ4_K).add(i);
            if ahead != 0 {
                let p = (b as *const i8).wrapping_add(ahead);
                _mm_prefetch::<_MM_HINT_T0>(p);
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(128));
            }
            // `d` and `dmin`, the two halves of one word.
            d16[r] = (&raw const (*b).d as *const u32).read_unaligned();
            let (scw, mnw) = scales_mins(&raw const (*b).scales as *const u8);
            // Σ_j mn_j · Σ qx: four i32 lanes whose total is M.
            mins[r] = _mm_madd_epi16(mnw, b16);
            let scw = _mm256_broadcastsi128_si256(scw);
            let qs = (*b).qs.as_ptr();
            let mut s = _mm256_setzero_si256();
            for c in 0..4 {
                // Numbers 64c .. 64c + 64: the low nibbles of qs[32c ..], then the high.
                let qb = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
                let lo = _mm256_and_si256(qb, lo4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), lo4);
                let xl = _mm256_loadu_si256(xq.add(64 * c) as *const __m256i);
                let xh = _mm256_loadu_si256(xq.add(64 * c + 32) as *const __m256i);
                // q ≤ 15, |qx| ≤ 128: the pair sums fit in i16 (no saturation).
                let pl = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, xl),
                    _mm256_shuffle_epi8(scw, WORD_PICK[2 * c]),
                );
                let ph = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, xh),
                    _mm256_shuffle_epi8(scw, WORD_PICK[2 * c + 1]),
                );
                s = _mm256_add_epi32(s, _mm256_add_epi32(pl, ph));
            }
            lanes[r] = s;
        }
        let sums = totals8(&lanes);
        let m = mins8(&mins);
        let dx = _mm256_set1_ps(a.d[i]);
        // Lane r of `dd`: row r's d (low half) and dmin (high half); split and widen.
        let dd = _mm256_loadu_si256(d16.as_ptr() as *const __m256i);
        let dw = _mm256_and_si256(dd, _mm256_set1_epi32(0xFFFF));
        let dminw = _mm256_srli_epi32(dd, 16);
        let to_f32 = |w: __m256i| {
            // Eight u16 in the low halves of 32-bit lanes: packed to eight words, widened.
            let p = _mm256_packus_epi32(w, w);
            let p = _mm256_permute4x64_epi64(p, 0b00_00_10_00);
            _mm256_cvtph_ps(_mm256_castsi256_si128(p))
        };
        let d = _mm256_mul_ps(to_f32(dw), dx);
        let dmin = _mm256_mul_ps(to_f32(dminw), dx);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc);
        acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dmin, acc_m);
    }
    let mut y = [0.0f32; ROWS];
    _mm256_storeu_ps(y.as_mut_ptr(), _mm256_sub_ps(acc, acc_m));
    y
}

/// A Q4_K block's twelve scale bytes at `s` unpacked (as `k_scales_mins` does): the
/// eight 6-bit scales, then the eight 6-bit minimums, each as eight i16 words.
///
/// # Safety
/// AVX2 present; 16 bytes readable at `s` (a block's scales are followed by its
/// nibbles).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_mins(s: *const u8) -> (__m128i, __m128i) {
    // 32-bit lanes [a, b, c, ·]: scales 0–3 are a's low 6 bits, minimums 0–3 b's;
    // scales 4–7 c's low nibbles under a's top 2 bits, minimums 4–7 c's high nibbles
    // under b's top 2 bits.
    let v = _mm_loadu_si128(s as *const __m128i);
    let low = _mm_and_si128(v, _mm_set1_epi32(0x3f3f_3f3f));
    let c = _mm_shuffle_epi32(v, 0b10_10_10_10);
    let c = _mm_and_si128(
        _mm_srlv_epi32(c, _mm_set_epi32(0, 0, 4, 0)),
        _mm_set1_epi32(0x0f0f_0f0f),
    );
    let top = _mm_slli_epi32(
        _mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x0303_0303)),
        4,
    );
    // [sc 0–3, mn 0–3, ·, ·] and [sc 4–7, mn 4–7, ·, ·].
    let high = _mm_or_si128(c, top);
    // [sc 0–3, sc 4–7, mn 0–3, mn 4–7].
    let all = _mm_unpacklo_epi32(low, high);
    (
        _mm_cvtepu8_epi16(all),
        _mm_cvtepu8_epi16(_mm_unpackhi_epi64(all, all)),
    )
}

/// Eight registers of i32 lanes folded into one: lane r holds the sum of register r's
/// eight lanes (exact integer adds, so the order is free).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn totals8(v: &[__m256i; ROWS]) -> __m256i {
    // Within each 128-bit half: [v0, v1, v2, v3]'s partial of that half, and v4..v8's.
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    let lo = _mm256_hadd_epi32(h01, h23);
    let hi = _mm256_hadd_epi32(h45, h67);
    // Lower halves of both, then upper halves of both, added: [v0 .. v8].
    _mm256_add_epi32(
        _mm256_permute2x128_si256(lo, hi, 0x20),
        _mm256_permute2x128_si256(lo, hi, 0x31),
    )
}

/// Eight rows' four-lane minimum sums folded into one register: lane r holds the sum
/// of `m[r]`'s four lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mins8(m: &[__m128i; ROWS]) -> __m256i {
    // [m0 | m4], [m1 | m5], …: rows r and r + 4 side by side.
    let p: [__m256i; 4] = std::array::from_fn(|r| _mm256_set_m128i(m[r + 4], m[r]));
    _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]))
}
