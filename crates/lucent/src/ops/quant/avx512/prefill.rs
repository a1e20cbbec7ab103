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
/// 8-bit numbers side by side (row one's 32, then row two's), the `−o · Σ qx` start of
/// each i32 lane for the weight type's offset `o`, and each lane's `dx` (eight lanes of
/// row one's block scale, eight of row two's). Made once per product, read by every
/// weight row.
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
        let mut chunks = vec![Chunk([0; 64]); 3 * nb];
        for j in 0..nb {
            let x = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256(
                    a.qs.as_ptr().add(32 * j) as *const __m256i
                )),
                _mm256_loadu_si256(b.qs.as_ptr().add(32 * j) as *const __m256i),
                1,
            );
            let start = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(o), x),
            );
            let dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a.d[j]), _mm512_set1_ps(b.d[j]));
            let c = chunks.as_mut_ptr().add(3 * j) as *mut __m512i;
            _mm512_store_si512(c, x);
            _mm512_store_si512(c.add(1), start);
            _mm512_store_ps(c.add(2) as *mut f32, dx);
        }
        Paired { chunks }
    }
}

/// 32 bytes, aligned as a 256-bit register: one block's decoded weights in [`Decoded`].
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Half([u8; 32]);

/// Weight rows of one row block decoded once for [`paired_tile`]: per block, the 32
/// unsigned weights `u = q + o` in number order, the scale `d` and (for the kinds with
/// one) the minimum `m` widened to f32. A prompt's activation pairs all pass the same
/// rows, so decoding each block once, not once per pair, takes the nibble unpacking
/// and the scale conversions out of the kernel's inner loop.
#[derive(Default)]
pub(crate) struct Decoded {
    /// (rows, nb) blocks of weights.
    u: Vec<Half>,
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
        nb * (32 + 4 + 4)
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
        self.u.resize(n, Half([0; 32]));
        self.d.resize(n, 0.0);
        self.m.resize(n, 0.0);
        for (r, row) in rows.enumerate() {
            let b = row.as_ptr();
            let u = self.u.as_mut_ptr().add(r * nb) as *mut __m256i;
            let mut j = 0;
            while j + 2 <= nb {
                // Two blocks' 64 weights, block j's then block j + 1's.
                _mm512_storeu_si512(u.add(j) as *mut __m512i, weights::<K, true>(b.add(bb * j)));
                j += 2;
            }
            if j < nb {
                let z = weights::<K, false>(b.add(bb * j));
                _mm256_store_si256(u.add(j), _mm512_castsi512_si256(z));
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
/// block sums): each weight block, loaded once into both halves of a register, meets
/// all `RA` rows, and one 512-bit FMA advances two rows' chains (row one's eight
/// lanes below, row two's above) by one block.
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
    let u: [*const __m256i; RW] =
        std::array::from_fn(|w| dec.u.as_ptr().add(rows[w] * nb) as *const __m256i);
    let d: [*const f32; RW] = std::array::from_fn(|w| dec.d.as_ptr().add(rows[w] * nb));
    let mut acc = [[_mm512_setzero_ps(); PA]; RW];
    let mut mins = [_mm_setzero_ps(); RW];
    let mut g = 0;
    while g < nb {
        let n = (nb - g).min(16);
        if has_min {
            let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
            let mw = std::array::from_fn(|w| {
                _mm512_maskz_loadu_ps(m, dec.m.as_ptr().add(rows[w] * nb + g))
            });
            mins = min_chain::<RW, RA>(mins, &mw, acts, g, n, m);
        }
        for j in g..g + n {
            let q: [__m512i; RW] =
                std::array::from_fn(|w| _mm512_broadcast_i64x4(_mm256_load_si256(u[w].add(j))));
            for p in 0..PA {
                let c = pairs[p].chunks.as_ptr().add(3 * j) as *const __m512i;
                let x = _mm512_load_si512(c);
                let start = if o != 0 {
                    _mm512_load_si512(c.add(1))
                } else {
                    _mm512_setzero_si512()
                };
                let dx = _mm512_load_ps(c.add(2) as *const f32);
                for w in 0..RW {
                    let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[w], x));
                    let sc = _mm512_mul_ps(_mm512_set1_ps(*d[w].add(j)), dx);
                    acc[w][p] = _mm512_fmadd_ps(sc, s, acc[w][p]);
                }
            }
        }
        g += 16;
    }
    for w in 0..RW {
        let mut e = [0.0f32; 4];
        _mm_storeu_ps(e.as_mut_ptr(), mins[w]);
        for p in 0..PA {
            out[w][2 * p] = avx2::hsum_ps(lo(acc[w][p])) + e[2 * p];
            out[w][2 * p + 1] = avx2::hsum_ps(hi(acc[w][p])) + e[2 * p + 1];
        }
    }
}
