//! A decoded token's products of the 32-block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) on
//! AVX-512 VNNI: four or eight weight rows as interleaved pairs ([`pair_tile`], where GFNI
//! and BMI2 are; the activations spread once per product, [`Spread`]), unpacked once
//! for up to eight activation rows (the decode step of several sequences), and one row
//! two blocks per 512-bit register ([`tile`]). Every result equals the AVX2 tile
//! kernel's, and the twin's, bit for bit.

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2;
use crate::ops::quant::dispatch::Tile;

use super::{block_major_4x16, dtype, group_scales, hi, layout, lo, transpose_4x16, weights, Q8_0};

/// How many tiles ahead the decode kernels prefetch the weights they will read next:
/// [`pair_tile`] that many four-row tiles (32 rows; 11.5 KB past SmolLM2's 360-byte
/// Q4_1 rows, time for the memory to answer its non-temporal prefetch before the rows
/// are read), [`tile`] that many of its own tiles (a plain prefetch; it serves CPUs
/// without GFNI and a matrix's last rows).
/// A token's products of SmolLM2 (`quant_bench`, `USE_ORDER=1`, one thread, three runs)
/// 3.29–3.43 ms with four tiles, 2.98–3.09 with eight, 3.05–3.23 with twelve, 3.11–3.47
/// with sixteen; Gemma 3's 6.77–6.97 → 6.58–6.81.
const PREFETCH_TILES: usize = 8;

/// Dots of `RW` weight rows of type `K` with one activation row (a decoded token's
/// product): the contract of [`avx2::tile`], for blocks in pairs (16 i32
/// lanes: 8 per block), scales in groups of 16 blocks.
///
/// Every result equals the AVX2 path's bit for bit: each block's eight i32 lane sums
/// are the same integers (lane k sums numbers 4k..4k+4), and they meet their scales
/// in the same FMAs in the same order (one chain, block after block), then the same
/// horizontal sum and, for the kinds with a minimum, the same `Σ m·s` chain. So a
/// machine with VNNI and one without compute the same numbers.
///
/// Unlike the AVX2 kernel it reads the blocks' scales (and minimums) from the blocks
/// themselves, 16 at a time, not from the f32 table: the table is a third more bytes
/// to stream for Q4_1, and decode waits on memory. `_scales` is not read (it is there
/// so both kernels have one signature). Several activation rows (a prompt) go
/// through [`paired_tile`](super::prefill::paired_tile) instead.
///
/// # Safety
/// [`available`](super::available); every row is `acts[0].len` numbers of type `K` and `acts[0]`
/// prepared as Q8_0 of the same length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn tile<const K: u8, const RW: usize>(
    rows: [&[u8]; RW],
    _scales: [&[f32]; RW],
    acts: [&QuantizedActs; 1],
    out: &mut [[f32; 1]; RW],
) {
    const { assert!(RW <= 4, "one lane of `mins` per weight row") };
    let a = acts[0];
    let nb = a.d.len();
    let (.., has_min) = layout(dtype(K));
    let mut acc = [_mm256_setzero_ps(); RW];
    // The kinds with a minimum: lane w holds weight row w's chain Σ_i fma(m_w,i, s_i, e).
    let mut mins = _mm_setzero_ps();
    // sc[w][jj]: the product d_w · dx of the group's block g + jj (zero past the end),
    // read by the FMAs as a broadcast from memory.
    let mut sc = [[0.0f32; 16]; RW];
    let mut g = 0;
    while g < nb {
        let n = (nb - g).min(16);
        let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
        let (dw, mw) = group_scales::<K, RW>(rows, g, m);
        let dx = _mm512_maskz_loadu_ps(m, a.d.as_ptr().add(g));
        for w in 0..RW {
            _mm512_storeu_ps(sc[w].as_mut_ptr(), _mm512_mul_ps(dw[w], dx));
        }
        // Block jj's minimums of the four rows (zero for w ≥ RW) at
        // 16 (jj % 4) + 4 (jj / 4), for the chains' FMAs among the pairs' work.
        let ms = if has_min {
            transpose_4x16(std::array::from_fn(|w| {
                if w < RW {
                    mw[w]
                } else {
                    _mm512_setzero_ps()
                }
            }))
        } else {
            [0.0; 64]
        };
        let mut j = 0;
        while j + 2 <= n {
            pair::<K, true, RW>(rows, a, &sc, &ms, g, j, &mut acc, &mut mins);
            j += 2;
        }
        if j < n {
            pair::<K, false, RW>(rows, a, &sc, &ms, g, j, &mut acc, &mut mins);
        }
        g += 16;
    }
    // avx2::tile's ending (llama.cpp's): the 8 lanes summed, then Σ m·s for the kinds
    // with a minimum.
    let mut e = [0.0f32; 4];
    _mm_storeu_ps(e.as_mut_ptr(), mins);
    for w in 0..RW {
        out[w][0] = avx2::hsum_ps(acc[w]) + e[w];
    }
}

/// A decoded token's activations spread for [`pair_tile`]: block `i`'s 32 numbers
/// as 16 i32 lanes where lane `m` holds the four numbers of the block's lane `m / 2`
/// (each lane twice: once for each weight row of a pair), and, for the kinds with an
/// offset `o`, the lanes' starting sums `−o · Σ qx`. Filled once per product's task,
/// into storage each thread keeps.
#[derive(Default)]
pub(crate) struct Spread {
    /// Per block: the activations, lanes doubled.
    x: Vec<__m512i>,
    /// Per block (kinds with an offset; else empty): `−o · Σ qx` per lane.
    start: Vec<__m512i>,
}

impl Spread {
    /// `a` (prepared as Q8_0) spread for the weight type `K`, replacing what was
    /// held (the storage is reused).
    ///
    /// # Safety
    /// [`available`](super::available); `a` holds whole 32-blocks (`a.qs.len() == 32 · a.d.len()`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn fill<const K: u8>(&mut self, a: &QuantizedActs) {
        let (.., o, _) = layout(dtype(K));
        let nb = a.d.len();
        let twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        self.x.clear();
        self.start.clear();
        for i in 0..nb {
            let b = _mm256_loadu_si256(a.qs.as_ptr().add(32 * i) as *const __m256i);
            let v = _mm512_permutexvar_epi32(twice, _mm512_castsi256_si512(b));
            self.x.push(v);
            if o != 0 {
                let z = _mm512_setzero_si512();
                self.start.push(_mm512_sub_epi32(
                    z,
                    _mm512_dpbusd_epi32(z, _mm512_set1_epi8(o), v),
                ));
            }
        }
    }
}

/// The unsigned weights `u = q + o` of the same block of two weight rows (`a`, `b`
/// point at the blocks) for [`pair_tile`]: i32 lane `m` holds the four numbers of
/// lane `m / 2` of row `a` (even `m`) or `b` (odd `m`), so one `vpdpbusd` with
/// [`Spread`] activations gives both rows' eight lane sums, interleaved.
///
/// For the nibble kinds, one GFNI affine byte transform takes the low nibbles to
/// lanes 0..8 and the high nibbles to lanes 8..16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,gfni")]
unsafe fn pair_weights<const K: u8>(a: *const u8, b: *const u8) -> __m512i {
    let (_, qs, qh, _, _) = layout(dtype(K));
    if K == Q8_0 {
        let za = _mm512_castsi256_si512(_mm256_loadu_si256(a.add(qs) as *const __m256i));
        let zb = _mm512_castsi256_si512(_mm256_loadu_si256(b.add(qs) as *const __m256i));
        let idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        let z = _mm512_permutex2var_epi32(za, idx, zb);
        return _mm512_xor_si512(z, _mm512_set1_epi8(-128));
    }
    // Lanes 0..8: the low nibbles of both rows' quant bytes, four bytes of `a`, four
    // of `b`, ... (numbers 0..16); lanes 8..16 the same bytes' high nibbles (16..32).
    let za = _mm512_castsi128_si512(_mm_loadu_si128(a.add(qs) as *const __m128i));
    let zb = _mm512_castsi128_si512(_mm_loadu_si128(b.add(qs) as *const __m128i));
    let idx = _mm512_set_epi32(19, 3, 18, 2, 17, 1, 16, 0, 19, 3, 18, 2, 17, 1, 16, 0);
    // Bit matrices (output bit i from byte 7 − i's row): x & 0x0F in the low four
    // 64-bit lanes, x >> 4 in the high four.
    let (low, high) = (0x0102_0408_0000_0000i64, 0x1020_4080_0000_0000i64);
    let m = _mm512_set_epi64(high, high, high, high, low, low, low, low);
    let mut z = _mm512_gf2p8affine_epi64_epi8::<0>(_mm512_permutex2var_epi32(za, idx, zb), m);
    if let Some(h) = qh {
        // Byte 8k + j holds number 4k + j of `a`, byte 8k + 4 + j that of `b`: the
        // fifth bits spread four at a time.
        let ha = std::ptr::read_unaligned(a.add(h) as *const u32) as u64;
        let hb = std::ptr::read_unaligned(b.add(h) as *const u32) as u64;
        let bits = _pdep_u64(ha, 0x0F0F_0F0F_0F0F_0F0F) | _pdep_u64(hb, 0xF0F0_F0F0_F0F0_F0F0);
        z = _mm512_mask_add_epi8(z, bits, z, _mm512_set1_epi8(0x10));
    }
    z
}

/// Dots of `W` weight rows of type `K` (four or eight: two or four pairs, back to
/// back in memory) with `RA` activation rows, each spread as [`Spread`]: a decoded
/// token's product (`RA` = 1, eight weight rows a call), or the decode step of `RA`
/// sequences at once (four). Each pair's blocks meet in one register (lanes
/// interleaved: [`pair_weights`]), unpacked once per block for all `RA` rows, so a
/// block of two weight rows costs each activation row one `vpdpbusd`, one conversion
/// and one 512-bit FMA, the scales of both rows broadcast as one 64-bit pair. Eight
/// rows a call keep four independent FMA chains in flight and pay the call's ending
/// (the horizontal sums) and each group's scale reads once per eight rows: Q4_1
/// 1536 × 576 in L2, 32.3 → 36–38 GB/s (`matvec_bench`; [`QMatrix::decode_pairs`]
/// says which types take eight).
///
/// [`QMatrix::decode_pairs`]: crate::ops::quant::QMatrix
///
/// Every lane's arithmetic is [`tile`]'s, for each activation row alone: the same i32
/// lane sums, met by the same scale products `d_w · dx` in the same FMAs block after
/// block, then the same horizontal sum of each row's eight lanes and the same `Σ m·s`
/// chain. So the results equal `tile`'s (and the AVX2 kernel's) bit for bit, whatever
/// `W` and `RA` are and whichever rows share the call.
///
/// It prefetches the rows that follow its own in memory (a matrix's next rows).
///
/// # Safety
/// [`pairs_available`](super::pairs_available); every row is `acts[a].len` numbers of
/// type `K`, every `acts[a]` prepared as Q8_0 of the same length, and `sp[a]` spread
/// from `acts[a]` for `K`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,gfni")]
pub(crate) unsafe fn pair_tile<const K: u8, const W: usize, const RA: usize>(
    rows: [&[u8]; W],
    acts: [&QuantizedActs; RA],
    sp: [&Spread; RA],
    out: &mut [[f32; W]; RA],
) {
    const { assert!(RA >= 1 && RA <= 8, "one to eight activation rows") };
    const { assert!(W == 4 || W == 8, "two or four pairs of weight rows") };
    let (bb, .., o, has_min) = layout(dtype(K));
    let nb = acts[0].d.len();
    // acc[a][p]: activation row a against pair p (rows 2p, 2p + 1), lanes interleaved
    // (the first W / 2 used).
    let mut acc = [[_mm512_setzero_ps(); 4]; RA];
    // The kinds with a minimum: lane w of mins[a][qd] holds weight row 4 qd + w's
    // chain Σ_i fma(m_w,i, s_a,i, e).
    let mut mins = [[_mm_setzero_ps(); 2]; RA];
    // scp[a][p][2jj], scp[a][p][2jj + 1]: the products d_w · dx_a of block g + jj of
    // pair p's two rows, read by one 64-bit broadcast.
    let mut scp = [[[0.0f32; 32]; 4]; RA];
    let lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    let hi_idx = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    // The rows ahead (PREFETCH_TILES four-row tiles on), prefetched over this call's
    // blocks (a hint; past the matrix's end it reads nothing, and the address is never
    // dereferenced).
    let ahead = rows[0]
        .as_ptr()
        .wrapping_add(PREFETCH_TILES * 4 * rows[0].len());
    let lines = (W * bb).div_ceil(64);
    let mut g = 0;
    while g < nb {
        let n = (nb - g).min(16);
        let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
        // ms[qd]: the minimums of rows 4 qd .. 4 qd + 4, block-major.
        let mut ms = [[0.0f32; 64]; 2];
        if n < 16 {
            // A short group (a row's last): block by block, which costs a few
            // instructions a block instead of the whole group's gathers and
            // transposes (Q4_1 576 columns: 19.7 → 23.9 GB/s in L2).
            for jj in 0..n {
                for (a, sc) in scp.iter_mut().enumerate() {
                    let dx = *acts[a].d.get_unchecked(g + jj);
                    for qd in 0..W / 4 {
                        let quad = [
                            rows[4 * qd],
                            rows[4 * qd + 1],
                            rows[4 * qd + 2],
                            rows[4 * qd + 3],
                        ];
                        short_scales::<K>(quad, bb * (g + jj), dx, jj, sc, qd, &mut ms[qd]);
                    }
                }
            }
        } else {
            let (dw, mw) = group_scales::<K, W>(rows, g, m);
            for (a, sc) in scp.iter_mut().enumerate() {
                let dx = _mm512_maskz_loadu_ps(m, acts[a].d.as_ptr().add(g));
                for p in 0..W / 2 {
                    let s0 = _mm512_mul_ps(dw[2 * p], dx);
                    let s1 = _mm512_mul_ps(dw[2 * p + 1], dx);
                    _mm512_storeu_ps(sc[p].as_mut_ptr(), _mm512_permutex2var_ps(s0, lo_idx, s1));
                    _mm512_storeu_ps(
                        sc[p].as_mut_ptr().add(16),
                        _mm512_permutex2var_ps(s0, hi_idx, s1),
                    );
                }
            }
            if has_min {
                for qd in 0..W / 4 {
                    ms[qd] = block_major_4x16([
                        mw[4 * qd],
                        mw[4 * qd + 1],
                        mw[4 * qd + 2],
                        mw[4 * qd + 3],
                    ]);
                }
            }
        }
        for jj in 0..n {
            let i = g + jj;
            for c in 0..lines {
                let p = ahead.wrapping_add(W * bb * i + 64 * c);
                // Non-temporal, as kgemv's: the weights pass, the KV cache stays in L3.
                _mm_prefetch::<_MM_HINT_NTA>(p as *const i8);
            }
            let mut mv = [_mm_setzero_ps(); 2];
            if has_min {
                for qd in 0..W / 4 {
                    mv[qd] = _mm_loadu_ps(ms[qd].as_ptr().add(4 * jj));
                }
            }
            // The pairs' blocks, unpacked once for every activation row.
            let mut q = [_mm512_setzero_si512(); 4];
            for p in 0..W / 2 {
                q[p] = pair_weights::<K>(
                    rows[2 * p].as_ptr().add(bb * i),
                    rows[2 * p + 1].as_ptr().add(bb * i),
                );
            }
            for a in 0..RA {
                if has_min {
                    let s = _mm_set1_ps(*acts[a].sum.get_unchecked(i));
                    for qd in 0..W / 4 {
                        mins[a][qd] = _mm_fmadd_ps(mv[qd], s, mins[a][qd]);
                    }
                }
                let x = *sp[a].x.get_unchecked(i);
                let start = if o != 0 {
                    *sp[a].start.get_unchecked(i)
                } else {
                    _mm512_setzero_si512()
                };
                for p in 0..W / 2 {
                    let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[p], x));
                    let pair =
                        std::ptr::read_unaligned(scp[a][p].as_ptr().add(2 * jj) as *const f64);
                    let scale = _mm512_castpd_ps(_mm512_set1_pd(pair));
                    acc[a][p] = _mm512_fmadd_ps(scale, s, acc[a][p]);
                }
            }
        }
        g += 16;
    }
    // Each row's eight lanes gathered (even lanes: the pair's first row), then
    // tile's ending.
    let split = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    for a in 0..RA {
        let mut e = [0.0f32; 8];
        _mm_storeu_ps(e.as_mut_ptr(), mins[a][0]);
        _mm_storeu_ps(e.as_mut_ptr().add(4), mins[a][1]);
        for p in 0..W / 2 {
            let v = _mm512_permutexvar_ps(split, acc[a][p]);
            out[a][2 * p] = avx2::hsum_ps(lo(v)) + e[2 * p];
            out[a][2 * p + 1] = avx2::hsum_ps(hi(v)) + e[2 * p + 1];
        }
    }
}

/// One block's scales for [`pair_tile`], four rows at once (the call's rows
/// `4 qd .. 4 qd + 4`): block `jj` of the group, whose bytes start at `at` in each row,
/// with the activations' scale `dx`. Writes the products `d_w · dx` into pairs `2 qd`
/// and `2 qd + 1` of `scp` and the minimums into `ms` (block-major), the same numbers
/// as the whole group's path.
///
/// # Safety
/// [`available`](super::available); each row holds a block of type `K` at `at`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn short_scales<const K: u8>(
    rows: [&[u8]; 4],
    at: usize,
    dx: f32,
    jj: usize,
    scp: &mut [[f32; 32]; 4],
    qd: usize,
    ms: &mut [f32; 64],
) {
    let has_min = layout(dtype(K)).4;
    // The block's first four bytes: d and m (or d and two quant bytes, unused).
    let first = |w: usize| std::ptr::read_unaligned(rows[w].as_ptr().add(at) as *const i32);
    let h = _mm_set_epi32(first(3), first(2), first(1), first(0));
    // [d0 m0 d1 m1 d2 m2 d3 m3] → [d0 d1 d2 d3 | m0 m1 m2 m3]
    let pick = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0);
    let dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(h), pick);
    let d = _mm_castps_pd(_mm_mul_ps(_mm256_castps256_ps128(dm), _mm_set1_ps(dx)));
    _mm_storel_pd(scp[2 * qd].as_mut_ptr().add(2 * jj) as *mut f64, d);
    _mm_storeh_pd(scp[2 * qd + 1].as_mut_ptr().add(2 * jj) as *mut f64, d);
    if has_min {
        _mm_storeu_ps(ms.as_mut_ptr().add(4 * jj), _mm256_extractf128_ps(dm, 1));
    }
}

/// Blocks `g + j` and (when `TWO`) `g + j + 1` of every weight row with the
/// activation row `a` into `acc`, each block scaled by its product in `sc`; for the
/// kinds with a minimum, also those blocks' steps of the `Σ m·s` chains in `mins`
/// (lane w for weight row w: `fma(m_w,i, s_i, e)`, the group's minimums transposed in
/// `ms`). Interleaved with the products, the chain's latency hides behind them.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pair<const K: u8, const TWO: bool, const RW: usize>(
    rows: [&[u8]; RW],
    a: &QuantizedActs,
    sc: &[[f32; 16]; RW],
    ms: &[f32; 64],
    g: usize,
    j: usize,
    acc: &mut [__m256; RW],
    mins: &mut __m128,
) {
    let (bb, _, _, o, has_min) = layout(dtype(K));
    if has_min {
        for jj in j..j + 1 + TWO as usize {
            let mv = _mm_loadu_ps(ms.as_ptr().add(16 * (jj % 4) + 4 * (jj / 4)));
            *mins = _mm_fmadd_ps(mv, _mm_set1_ps(a.sum[g + jj]), *mins);
        }
    }
    let i = g + j;
    let mut q = [_mm512_setzero_si512(); RW];
    // The rows of a tile lie back to back, and the next tiles follow them: fetch the
    // same place in the row PREFETCH_TILES tiles on while this one computes (a hint;
    // past the matrix's end it reads nothing, and the address is never dereferenced).
    let ahead = PREFETCH_TILES * RW * rows[0].len();
    for w in 0..RW {
        let p = rows[w].as_ptr().wrapping_add(bb * i + ahead);
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
        q[w] = weights::<K, TWO>(rows[w].as_ptr().add(bb * i));
    }
    let p = a.qs.as_ptr().add(32 * i);
    let x = if TWO {
        _mm512_loadu_si512(p as *const __m512i)
    } else {
        _mm512_maskz_loadu_epi8(0xFFFF_FFFF, p)
    };
    // −o · Σ qx per lane, so that Σ u·qx starts from it.
    let start = if o != 0 {
        _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(o), x),
        )
    } else {
        _mm512_setzero_si512()
    };
    for w in 0..RW {
        let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[w], x));
        // One chain: block j, then block j + 1 (llama.cpp's).
        let mut c = _mm256_fmadd_ps(_mm256_set1_ps(sc[w][j]), lo(s), acc[w]);
        if TWO {
            c = _mm256_fmadd_ps(_mm256_set1_ps(sc[w][j + 1]), hi(s), c);
        }
        acc[w] = c;
    }
}

/// The kernels of type `K` for `QMatrix::tile_rows`: 4 × 1 and 1 × 1. No 1 × 4:
/// with AVX-512, several activation rows go through [`paired_tile`](super::prefill::paired_tile) instead, so
/// `tile_rows` only ever sees one.
pub(crate) fn tiles<const K: u8>() -> (Option<Tile<4, 1>>, Option<Tile<1, 4>>, Tile<1, 1>) {
    (Some(tile::<K, 4>), None, tile::<K, 1>)
}
