//! A prompt's products of the 32-block types on AVX-512 VNNI: activation rows in pairs
//! ([`Paired`], made once per product) against blocks of weight rows decoded once
//! ([`Decoded`]), two rows' chains in one 512-bit register ([`paired_tile`]). Every
//! result equals the decode tiles', and the twin's, bit for bit.

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2;

use super::{dtype, group_scales, hi, layout, lo, transpose_4x16, weights, Chunk};

/// One group of `n` blocks from `g` of the minimum chains of [`paired_tile`]: for each block
/// `i` in order, lane `a` of `e[w]` becomes `fma(m_w,i, s_a,i, e)`, with `mw[w]` the
/// group's minimums of weight row `w` (widened by the caller) and `s_a` activation row
/// `a`'s block sums. The sums are transposed once per group (block `i`'s four rows in
/// one 128-bit lane), so each block costs one FMA per weight row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn min_chain<const RW: usize, const RA: usize>(
    mut e: [__m128; RW],
    mw: &[__m512; RW],
    acts: [&QuantizedActs; RA],
    g: usize,
    n: usize,
    m: u16,
) -> [__m128; RW] {
    // sa[a]: row a's sums of the group's blocks (zero past the end and for a ≥ RA).
    let sa: [__m512; 4] = std::array::from_fn(|a| {
        if a < RA {
            _mm512_maskz_loadu_ps(m, acts[a].sum.as_ptr().add(g))
        } else {
            _mm512_setzero_ps()
        }
    });
    // Block i's four rows' sums at 16 (i % 4) + 4 (i / 4).
    let us = transpose_4x16(sa);
    let mut ms = [[0.0f32; 16]; RW];
    for w in 0..RW {
        _mm512_storeu_ps(ms[w].as_mut_ptr(), mw[w]);
    }
    // Block i indexes the transposed sums and every weight row's minimums.
    #[allow(clippy::needless_range_loop)]
    for i in 0..n {
        let sv = _mm_loadu_ps(us.as_ptr().add(16 * (i % 4) + 4 * (i / 4)));
        for w in 0..RW {
            e[w] = _mm_fmadd_ps(_mm_set1_ps(ms[w][i]), sv, e[w]);
        }
    }
    e
}

/// Two activation rows prepared for [`paired_tile`], block by block: the two rows'
/// 8-bit numbers interleaved four at a time (i32 lane `2k` holds row one's numbers
/// `4k..4k + 4`, lane `2k + 1` row two's), and the `−o · Σ qx` start of each i32 lane
/// for the weight type's offset `o`. Made once per product, read by every weight row.
pub(crate) struct Paired {
    chunks: Vec<Chunk>,
}

impl Paired {
    /// The pair (`a`, `b`), both prepared as Q8_0 of one length, for weights of type
    /// `K`.
    pub(crate) fn new<const K: u8>(a: &QuantizedActs, b: &QuantizedActs) -> Paired {
        // SAFETY: only called after available() said yes (`QMatrix::prefill_paired`).
        unsafe { Paired::build::<K>(a, b) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn build<const K: u8>(a: &QuantizedActs, b: &QuantizedActs) -> Paired {
        let nb = a.d.len();
        let (.., o, _) = layout(dtype(K));
        let mut chunks = vec![Chunk([0; 64]); 2 * nb];
        // Row one's lane k to lane 2k, row two's (lane 8 + k) to lane 2k + 1.
        let mix = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
        for j in 0..nb {
            let ab = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256(
                    a.qs.as_ptr().add(32 * j) as *const __m256i
                )),
                _mm256_loadu_si256(b.qs.as_ptr().add(32 * j) as *const __m256i),
                1,
            );
            let x = _mm512_permutexvar_epi32(mix, ab);
            let start = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(o), x),
            );
            let c = chunks.as_mut_ptr().add(2 * j) as *mut __m512i;
            _mm512_store_si512(c, x);
            _mm512_store_si512(c.add(1), start);
        }
        Paired { chunks }
    }
}

/// Weight rows of one row block decoded once for [`paired_tile`]: per block, the 32
/// unsigned weights `u = q + o` in number order with every four doubled (i32 lanes
/// `2k` and `2k + 1` both hold numbers `4k..4k + 4`, to meet a [`Paired`] block), the
/// scale `d` and (for the kinds with one) the minimum `m` widened to f32. A prompt's
/// activation pairs all pass the same rows, so decoding each block once, not once per
/// pair, takes the nibble unpacking and the scale conversions out of the kernel's
/// inner loop.
#[derive(Default)]
pub(crate) struct Decoded {
    /// (rows, nb) blocks of weights, each doubled into 64 bytes.
    u: Vec<Chunk>,
    /// (rows, nb) scales.
    d: Vec<f32>,
    /// (rows, nb) minimums (zero for the kinds without).
    m: Vec<f32>,
    /// Blocks in a row.
    nb: usize,
}

impl Decoded {
    /// Bytes one decoded row of `nb` blocks takes.
    pub(crate) const fn row_bytes(nb: usize) -> usize {
        nb * (64 + 4 + 4)
    }

    /// Decode `rows` (each `nb` blocks of type `K`), replacing what was held.
    ///
    /// # Safety
    /// [`available`](super::available); every row is at least `nb` blocks of type `K`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn fill<'a, const K: u8>(
        &mut self,
        rows: impl ExactSizeIterator<Item = &'a [u8]>,
        nb: usize,
    ) {
        let bb = layout(dtype(K)).0;
        let n = rows.len() * nb;
        self.nb = nb;
        self.u.resize(n, Chunk([0; 64]));
        self.d.resize(n, 0.0);
        self.m.resize(n, 0.0);
        // The first block's lane k to lanes 2k and 2k + 1; the second's (lane 8 + k) too.
        let first = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        let second = _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
        for (r, row) in rows.enumerate() {
            let b = row.as_ptr();
            let u = self.u.as_mut_ptr().add(r * nb) as *mut __m512i;
            let mut j = 0;
            while j + 2 <= nb {
                // Two blocks' 64 weights, block j's then block j + 1's.
                let z = weights::<K, true>(b.add(bb * j));
                _mm512_store_si512(u.add(j), _mm512_permutexvar_epi32(first, z));
                _mm512_store_si512(u.add(j + 1), _mm512_permutexvar_epi32(second, z));
                j += 2;
            }
            if j < nb {
                let z = weights::<K, false>(b.add(bb * j));
                _mm512_store_si512(u.add(j), _mm512_permutexvar_epi32(first, z));
            }
            // The scales and minimums (zero without), sixteen blocks at a time.
            for g in (0..nb).step_by(16) {
                let n = (nb - g).min(16);
                let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
                let ([d], [mn]) = group_scales::<K, 1>([row], g, m);
                _mm512_mask_storeu_ps(self.d.as_mut_ptr().add(r * nb + g), m, d);
                _mm512_mask_storeu_ps(self.m.as_mut_ptr().add(r * nb + g), m, mn);
            }
        }
    }
}

/// Dots of `RW` decoded weight rows of type `K` (`rows[w]` indexes `dec`) with `PA`
/// [`Paired`] activation row pairs (`RA` = 2·PA rows, `acts` the same rows, for their
/// scales and block sums): each doubled weight block meets all `RA` rows, and one
/// 512-bit FMA advances two rows' chains (row one's eight lanes at the even places,
/// row two's at the odd) by one block. The scale products `d_w · dx` are made sixteen
/// blocks at a time and reach the FMA as one 64-bit broadcast load, pair by pair.
///
/// Every result equals [`tile`](super::decode::tile)'s (and so the AVX2 kernel's and the twin's) bit for
/// bit: each block's eight i32 lane sums are the same integers, scaled by the same
/// `d_w · dx` product in the same block order, and the lanes meet the same horizontal
/// sum and minimum chain.
///
/// # Safety
/// [`available`](super::available); `dec` holds rows of type `K` (filled by [`Decoded::fill::<K>`]) as
/// long as `acts[0]`, every `acts[j]` prepared as Q8_0 of that length, and `pairs[p]`
/// made by [`Paired::new::<K>`] from `acts[2p]` and `acts[2p + 1]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn paired_tile<const K: u8, const RW: usize, const PA: usize, const RA: usize>(
    dec: &Decoded,
    rows: [usize; RW],
    pairs: [&Paired; PA],
    acts: [&QuantizedActs; RA],
    out: &mut [[f32; RA]; RW],
) {
    const {
        assert!(
            RA == 2 * PA && RA <= 4,
            "two activation rows per pair, at most four"
        )
    };
    let nb = dec.nb;
    let (.., o, has_min) = layout(dtype(K));
    let u: [*const __m512i; RW] =
        std::array::from_fn(|w| dec.u.as_ptr().add(rows[w] * nb) as *const __m512i);
    let d: [*const f32; RW] = std::array::from_fn(|w| dec.d.as_ptr().add(rows[w] * nb));
    let mut acc = [[_mm512_setzero_ps(); PA]; RW];
    let mut mins = [_mm_setzero_ps(); RW];
    // scp[w][p][2i], scp[w][p][2i + 1]: d_w · dx of block g + i for pair p's two rows.
    let mut scp = [[[0.0f32; 32]; PA]; RW];
    let lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    let hi_idx = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    let mut g = 0;
    while g < nb {
        let n = (nb - g).min(16);
        let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
        if has_min {
            let mw = std::array::from_fn(|w| {
                _mm512_maskz_loadu_ps(m, dec.m.as_ptr().add(rows[w] * nb + g))
            });
            mins = min_chain::<RW, RA>(mins, &mw, acts, g, n, m);
        }
        let dx: [__m512; RA] =
            std::array::from_fn(|a| _mm512_maskz_loadu_ps(m, acts[a].d.as_ptr().add(g)));
        for w in 0..RW {
            let dw = _mm512_maskz_loadu_ps(m, d[w].add(g));
            for p in 0..PA {
                let s0 = _mm512_mul_ps(dw, dx[2 * p]);
                let s1 = _mm512_mul_ps(dw, dx[2 * p + 1]);
                let sc = scp[w][p].as_mut_ptr();
                _mm512_storeu_ps(sc, _mm512_permutex2var_ps(s0, lo_idx, s1));
                _mm512_storeu_ps(sc.add(16), _mm512_permutex2var_ps(s0, hi_idx, s1));
            }
        }
        for i in 0..n {
            let j = g + i;
            let q: [__m512i; RW] = std::array::from_fn(|w| _mm512_load_si512(u[w].add(j)));
            for p in 0..PA {
                let c = pairs[p].chunks.as_ptr().add(2 * j) as *const __m512i;
                let x = _mm512_load_si512(c);
                let start = if o != 0 {
                    _mm512_load_si512(c.add(1))
                } else {
                    _mm512_setzero_si512()
                };
                for w in 0..RW {
                    let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[w], x));
                    let sc = _mm512_castpd_ps(_mm512_set1_pd(std::ptr::read_unaligned(
                        scp[w][p].as_ptr().add(2 * i) as *const f64,
                    )));
                    acc[w][p] = _mm512_fmadd_ps(sc, s, acc[w][p]);
                }
            }
        }
        g += 16;
    }
    // Row one's lanes (the even places) below, row two's above.
    let split = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    for w in 0..RW {
        let mut e = [0.0f32; 4];
        _mm_storeu_ps(e.as_mut_ptr(), mins[w]);
        for p in 0..PA {
            let v = _mm512_permutexvar_ps(split, acc[w][p]);
            out[w][2 * p] = avx2::hsum_ps(lo(v)) + e[2 * p];
            out[w][2 * p + 1] = avx2::hsum_ps(hi(v)) + e[2 * p + 1];
        }
    }
}
