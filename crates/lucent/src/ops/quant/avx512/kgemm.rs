//! A repacked Q4_K matrix's prompt product sixteen weight rows by four activation rows
//! at a time, in llama.cpp's grouped `gemm` order
//! ([`KOrder::Gemm`](crate::ops::quant::dispatch::KOrder::Gemm)): per output, one f32
//! chain with one step per 64 numbers (two sub-blocks of 32) and a chain of minimums,
//!
//! ```text
//! acc   = fma(float(T_c), d · dx, acc)         T_c = Σ_{j ∈ {2c, 2c+1}} sc_j · Σ_{l ∈ j} q_l · qx_l
//! acc_m = fma(float(M_c), dmin · dx, acc_m)    M_c = Σ_{j ∈ {2c, 2c+1}} mn_j · Σ_{l ∈ j} qx_l
//! y     = acc − acc_m                          (c = 0 .. 4 in each 256-block, blocks in order)
//! ```
//!
//! the arithmetic of [`q45_k_rows::<4>`](super::kquant::q45_k_rows) in that order and of
//! the twin `reference::dot_q4_k_repacked(.., true)`, so each output equals theirs bit
//! for bit. Q6_K's prompt products take the same shape in llama.cpp's tiled order
//! ([`q6_k_gemm16x4`]), and a repacked Q4_0 matrix's in llama.cpp's repacked Q4_0 order
//! ([`q4_0_gemm16x4`]: one chain per output, `acc = fma(float(S), d · dx, acc)` per
//! 32-block).
//!
//! What differs is where the integers are made. Sixteen weight rows are decoded once
//! ([`Decoded16::fill`]) into one byte per number, interleaved four numbers at a time:
//! register `j` of a block holds numbers 4j .. 4j + 4 of each of the sixteen rows, one
//! row a 32-bit lane. One `vpdpbusd` of that register with an activation row's four
//! numbers at 4j (broadcast to every lane) then adds 64 products into sixteen outputs'
//! sums at once, with no unpacking and no horizontal sum: a lane is an output. The
//! sub-block's scale multiplies its sixteen lane sums in one `vpmulld`, the minimums'
//! pair of 6-bit factors meet the activation's sub-block sums in one `vpmaddwd`, and
//! each step's two FMAs serve sixteen outputs. A prompt's activation rows pass the
//! same decoded rows four at a time, so the decoding is paid once per sixteen rows.

use std::arch::x86_64::*;

use super::kquant::k45_step;
use super::lowbit::{iq4_xs_step, q2_k_step, q3_k_step};
use super::Chunk;
use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::avx2::K45Ptr;
use crate::tensor::quant::{
    k_scales_mins, q3_k_scales, BlockIQ4_XS, BlockQ2_K, BlockQ3_K, BlockQ6_K, GgmlType,
    KVALUES_IQ4NL,
};

/// Weight rows a call multiplies.
pub(crate) const ROWS: usize = 16;

/// Sixteen Q4_K (or Q5_K) rows decoded for [`q4_k_gemm16x4`] and
/// [`k45_tiled_gemm16x4`], per 256-block: the 64
/// registers of interleaved numbers (module docs), the eight sub-blocks' scales as i32
/// lanes, the four steps' minimum pairs as i16 pairs, and `d`, `dmin` widened to f32.
#[derive(Default)]
pub(crate) struct Decoded16 {
    /// (nb, 64) registers: lane r holds row r's numbers 4j .. 4j + 4 as bytes.
    q: Vec<Chunk>,
    /// (nb, 8) registers: lane r holds row r's scale of sub-block j as an i32.
    sc: Vec<Chunk>,
    /// (nb, 4) registers: lane r holds row r's minimums of sub-blocks 2c and 2c + 1 as
    /// two i16s.
    mn: Vec<Chunk>,
    /// (nb, 2) registers: each row's `d`, then each row's `dmin`, as f32 lanes.
    d: Vec<Chunk>,
    /// Blocks in a row.
    nb: usize,
}

impl Decoded16 {
    /// Decode `rows` (each `nb` Q4_K blocks, Q5_K when `five`), replacing what was held.
    ///
    /// # Safety
    /// [`available`](super::available); every row is at least `nb` blocks of the type.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn fill(&mut self, rows: [&[u8]; ROWS], nb: usize, five: bool) {
        let zero = Chunk([0; 64]);
        self.nb = nb;
        self.q.resize(64 * nb, zero);
        self.sc.resize(8 * nb, zero);
        self.mn.resize(4 * nb, zero);
        self.d.resize(2 * nb, zero);
        // (16, 256) one block's numbers, a row after a row.
        let mut plain = [Chunk([0; 64]); 4 * ROWS];
        for i in 0..nb {
            let mut sc = [[0i32; ROWS]; 8];
            let mut mn = [[0u32; ROWS]; 4];
            let mut d = [[0.0f32; ROWS]; 2];
            for (r, row) in rows.iter().enumerate() {
                let blk = K45Ptr::new(row, i, five);
                let qh = if five {
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.qh as *const __m256i))
                } else {
                    _mm512_setzero_si512()
                };
                let (sc8, mn8) = k_scales_mins(&*blk.scales);
                for c in 0..4 {
                    // Numbers 64c .. 64c + 64 (the low nibbles of qs[32c ..], then the
                    // high; with their fifth bits for Q5_K).
                    let (q, _) = k45_step(blk.qs, qh, &sc8, c, five);
                    _mm512_store_si512(plain.as_mut_ptr().add(4 * r + c) as *mut __m512i, q);
                }
                for j in 0..8 {
                    sc[j][r] = sc8[j] as i32;
                }
                for c in 0..4 {
                    mn[c][r] = mn8[2 * c] as u32 | (mn8[2 * c + 1] as u32) << 16;
                }
                let dp = blk.d as *const u16;
                d[0][r] = f16_f32(dp.read_unaligned());
                d[1][r] = f16_f32(dp.add(1).read_unaligned());
            }
            interleave(&plain, &mut self.q[64 * i..64 * i + 64]);
            for (j, s) in sc.iter().enumerate() {
                let v = _mm512_loadu_si512(s.as_ptr() as *const __m512i);
                _mm512_store_si512(self.sc.as_mut_ptr().add(8 * i + j) as *mut __m512i, v);
            }
            for (c, m) in mn.iter().enumerate() {
                let v = _mm512_loadu_si512(m.as_ptr() as *const __m512i);
                _mm512_store_si512(self.mn.as_mut_ptr().add(4 * i + c) as *mut __m512i, v);
            }
            for (k, dk) in d.iter().enumerate() {
                let v = _mm512_loadu_ps(dk.as_ptr());
                _mm512_store_ps(self.d.as_mut_ptr().add(2 * i + k) as *mut f32, v);
            }
        }
    }
}

/// One block's numbers of sixteen rows (`plain`: (16, 256) bytes, a row after a row)
/// interleaved four at a time: register j of `q` holds numbers 4j .. 4j + 4 of each
/// row, row r in 32-bit lane r.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn interleave(plain: &[Chunk; 4 * ROWS], q: &mut [Chunk]) {
    for c in 0..4 {
        // Numbers 64c .. 64c + 64 of each row: 32-bit words 16c .. 16c + 16.
        let v: [__m512i; ROWS] = std::array::from_fn(|r| {
            _mm512_load_si512(plain.as_ptr().add(4 * r + c) as *const __m512i)
        });
        for (d, w) in transpose16(&v).iter().enumerate() {
            _mm512_store_si512(&mut q[16 * c + d] as *mut Chunk as *mut __m512i, *w);
        }
    }
}

/// Sixteen registers of 32-bit words transposed: word r of result d is word d of
/// register r. Pairs of rows, then fours, within each 128-bit lane; then the 128-bit
/// lanes of each four exchanged.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn transpose16(r: &[__m512i; ROWS]) -> [__m512i; ROWS] {
    // t[2m], t[2m + 1]: rows 2m, 2m + 1 interleaved (words 0, 1 / 2, 3 of each lane).
    let t: [__m512i; ROWS] = std::array::from_fn(|k| {
        let (a, b) = (r[k & !1], r[k | 1]);
        if k % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    // u[4q + e]: word e of each 128-bit lane of rows 4q .. 4q + 4, in that lane.
    let u: [__m512i; ROWS] = std::array::from_fn(|k| {
        let (q, e) = (k / 4, k % 4);
        let (a, b) = (t[4 * q + e / 2], t[4 * q + 2 + e / 2]);
        if e % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    let mut out = [_mm512_setzero_si512(); ROWS];
    for e in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0b10_00_10_00>(u[e], u[4 + e]);
        let v1 = _mm512_shuffle_i32x4::<0b11_01_11_01>(u[e], u[4 + e]);
        let v2 = _mm512_shuffle_i32x4::<0b10_00_10_00>(u[8 + e], u[12 + e]);
        let v3 = _mm512_shuffle_i32x4::<0b11_01_11_01>(u[8 + e], u[12 + e]);
        // Lane L of the result: lane L of u[e], u[4 + e], u[8 + e], u[12 + e].
        out[e] = _mm512_shuffle_i32x4::<0b10_00_10_00>(v0, v2);
        out[8 + e] = _mm512_shuffle_i32x4::<0b11_01_11_01>(v0, v2);
        out[4 + e] = _mm512_shuffle_i32x4::<0b10_00_10_00>(v1, v3);
        out[12 + e] = _mm512_shuffle_i32x4::<0b11_01_11_01>(v1, v3);
    }
    out
}

/// An f16 bit pattern widened to f32 (exact).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn f16_f32(h: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// The sums of quads `first .. first + n` (`n` even) of interleaved registers `q` (lane
/// r: row r's four numbers of the quad) with four activation rows, each row's four
/// numbers of the quad at `xs[k]` broadcast to every lane: one `vpdpbusd` a quad and
/// row, in two chains (even and odd quads) for the adder's latency. Exact integers, so
/// the order is free.
///
/// # Safety
/// [`available`](super::available); `q` holds the quads, each `xs[k]` their numbers.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quad_sums(
    q: *const __m512i,
    xs: &[*const i32; 4],
    first: usize,
    n: usize,
) -> [__m512i; 4] {
    let mut s0 = [_mm512_setzero_si512(); 4];
    let mut s1 = [_mm512_setzero_si512(); 4];
    for p in (first..first + n).step_by(2) {
        let w0 = _mm512_load_si512(q.add(p));
        let w1 = _mm512_load_si512(q.add(p + 1));
        for k in 0..4 {
            let x0 = _mm512_set1_epi32(xs[k].add(p).read_unaligned());
            let x1 = _mm512_set1_epi32(xs[k].add(p + 1).read_unaligned());
            s0[k] = _mm512_dpbusd_epi32(s0[k], w0, x0);
            s1[k] = _mm512_dpbusd_epi32(s1[k], w1, x1);
        }
    }
    let mut s = [_mm512_setzero_si512(); 4];
    for k in 0..4 {
        s[k] = _mm512_add_epi32(s0[k], s1[k]);
    }
    s
}

/// The sixteen decoded rows of `dec` times four activation rows `acts` (each prepared
/// as Q8_K for them), in the grouped order (module docs): `y[k][r]` is activation row
/// k's product with weight row r.
///
/// # Safety
/// [`available`](super::available); `dec` filled with rows of `acts`' length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_k_gemm16x4(dec: &Decoded16, acts: [&QuantizedActs; 4]) -> [[f32; ROWS]; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut acc_m = [_mm512_setzero_ps(); 4];
    for i in 0..dec.nb {
        let q = dec.q.as_ptr().add(64 * i) as *const __m512i;
        let dv = _mm512_load_ps(dec.d.as_ptr().add(2 * i) as *const f32);
        let dmv = _mm512_load_ps(dec.d.as_ptr().add(2 * i + 1) as *const f32);
        let dx: [__m512; 4] = std::array::from_fn(|k| _mm512_set1_ps(acts[k].d[i]));
        let d: [__m512; 4] = std::array::from_fn(|k| _mm512_mul_ps(dv, dx[k]));
        let dm: [__m512; 4] = std::array::from_fn(|k| _mm512_mul_ps(dmv, dx[k]));
        // The activation rows' numbers of this block, read four at a time as i32s.
        let xs: [*const i32; 4] =
            std::array::from_fn(|k| acts[k].qs.as_ptr().add(256 * i) as *const i32);
        for c in 0..4 {
            let mut t = [_mm512_setzero_si512(); 4];
            for j in [2 * c, 2 * c + 1] {
                let s = quad_sums(q, &xs, 8 * j, 8);
                let scv = _mm512_load_si512(dec.sc.as_ptr().add(8 * i + j) as *const __m512i);
                for k in 0..4 {
                    t[k] = _mm512_add_epi32(t[k], _mm512_mullo_epi32(s[k], scv));
                }
            }
            // The minimums of sub-blocks 2c, 2c + 1 against each activation row's sums
            // over them (each two 16-sums; |Σ| ≤ 32 · 128 fits an i16).
            let mnv = _mm512_load_si512(dec.mn.as_ptr().add(4 * i + c) as *const __m512i);
            for k in 0..4 {
                let bs = &acts[k].bsums[16 * i + 4 * c..16 * i + 4 * c + 4];
                let pair = ((bs[0] + bs[1]) as u16 as u32) | ((bs[2] + bs[3]) as u16 as u32) << 16;
                let m = _mm512_madd_epi16(mnv, _mm512_set1_epi32(pair as i32));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[k]), d[k], acc[k]);
                acc_m[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), dm[k], acc_m[k]);
            }
        }
    }
    let mut y = [[0.0f32; ROWS]; 4];
    for k in 0..4 {
        _mm512_storeu_ps(y[k].as_mut_ptr(), _mm512_sub_ps(acc[k], acc_m[k]));
    }
    y
}

/// The sixteen decoded Q4_K or Q5_K rows of `dec` times four activation rows `acts`
/// (each prepared as Q8_K), in llama.cpp's tiled order (the twin `dot_k45_tiled`):
/// per output one f32 chain, per block `r = fma(−dmin, float(M), d · float(S))` and
/// `acc = fma(r, dx, acc)`, with the block's exact `S = Σ_j sc_j · Σ_{l ∈ j} q_l · qx_l`
/// and `M = Σ_j mn_j · Σ_{l ∈ j} qx_l`. A lane is an output, as in [`q4_k_gemm16x4`].
/// `y[k][r]`: activation row k with weight row r.
///
/// # Safety
/// [`available`](super::available); `dec` filled with rows of `acts`' length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn k45_tiled_gemm16x4(
    dec: &Decoded16,
    acts: [&QuantizedActs; 4],
) -> [[f32; ROWS]; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    for i in 0..dec.nb {
        let q = dec.q.as_ptr().add(64 * i) as *const __m512i;
        let xs: [*const i32; 4] =
            std::array::from_fn(|k| acts[k].qs.as_ptr().add(256 * i) as *const i32);
        let mut t = [_mm512_setzero_si512(); 4];
        let mut m = [_mm512_setzero_si512(); 4];
        for c in 0..4 {
            for j in [2 * c, 2 * c + 1] {
                let s = quad_sums(q, &xs, 8 * j, 8);
                let scv = _mm512_load_si512(dec.sc.as_ptr().add(8 * i + j) as *const __m512i);
                for k in 0..4 {
                    t[k] = _mm512_add_epi32(t[k], _mm512_mullo_epi32(s[k], scv));
                }
            }
            // The minimums of sub-blocks 2c, 2c + 1 against each activation row's sums
            // over them (each two 16-sums; |Σ| ≤ 32 · 128 fits an i16).
            let mnv = _mm512_load_si512(dec.mn.as_ptr().add(4 * i + c) as *const __m512i);
            for k in 0..4 {
                let bs = &acts[k].bsums[16 * i + 4 * c..16 * i + 4 * c + 4];
                let pair = ((bs[0] + bs[1]) as u16 as u32) | ((bs[2] + bs[3]) as u16 as u32) << 16;
                m[k] =
                    _mm512_add_epi32(m[k], _mm512_madd_epi16(mnv, _mm512_set1_epi32(pair as i32)));
            }
        }
        let dv = _mm512_load_ps(dec.d.as_ptr().add(2 * i) as *const f32);
        let dmv = _mm512_load_ps(dec.d.as_ptr().add(2 * i + 1) as *const f32);
        for k in 0..4 {
            // fnmadd: −(dmin · M) + d · S in one rounding, fma(−dmin, M, d · S).
            let ds = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(t[k]));
            let r = _mm512_fnmadd_ps(dmv, _mm512_cvtepi32_ps(m[k]), ds);
            acc[k] = _mm512_fmadd_ps(r, _mm512_set1_ps(acts[k].d[i]), acc[k]);
        }
    }
    let mut y = [[0.0f32; ROWS]; 4];
    for k in 0..4 {
        _mm512_storeu_ps(y[k].as_mut_ptr(), acc[k]);
    }
    y
}

/// Sixteen rows of a 256-block type whose groups of 16 have one signed scale each and
/// no minimum (Q6_K, Q3_K, IQ4_XS) decoded for [`q6_k_gemm16x4`], per 256-block: the
/// 64 registers of interleaved numbers as unsigned `u = w + o` (Q6_K: q, o = 32; Q3_K:
/// q, o = 4; IQ4_XS: its table's value + 128, o = 128; the `− o` not yet taken), the
/// sixteen groups' scales as i32 lanes, the eight pairs of groups' scales as i16
/// pairs, and `d` widened to f32.
#[derive(Default)]
pub(crate) struct Decoded16Q6 {
    /// log2 of the offset `o` (5, 2 or 7).
    shift: i32,
    /// Q2_K: the type has minimums (then `sc2` holds them, `o` is 0, and `dmin`
    /// is filled).
    has_min: bool,
    /// Q2_K: (nb) registers, each row's `dmin` as an f32 lane.
    dmin: Vec<Chunk>,
    /// (nb, 64) registers: lane r holds row r's numbers 4j .. 4j + 4 as bytes.
    q: Vec<Chunk>,
    /// (nb, 16) registers: lane r holds row r's scale of group g (16 numbers) as an i32.
    sc: Vec<Chunk>,
    /// (nb, 8) registers: lane r holds row r's scales of groups 2h and 2h + 1 as i16s.
    sc2: Vec<Chunk>,
    /// (nb) registers: each row's `d` as an f32 lane.
    d: Vec<Chunk>,
    /// Blocks in a row.
    nb: usize,
}

impl Decoded16Q6 {
    /// Decode `rows` (each `nb` Q6_K blocks), replacing what was held.
    ///
    /// # Safety
    /// [`available`](super::available); every row is at least `nb` Q6_K blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn fill(&mut self, rows: [&[u8]; ROWS], nb: usize) {
        let zero = Chunk([0; 64]);
        self.nb = nb;
        self.shift = 5;
        self.has_min = false;
        self.q.resize(64 * nb, zero);
        self.sc.resize(16 * nb, zero);
        self.sc2.resize(8 * nb, zero);
        self.d.resize(nb, zero);
        let m4 = _mm256_set1_epi8(0x0F);
        let m3 = _mm256_set1_epi8(0x03);
        let mut plain = [Chunk([0; 64]); 4 * ROWS];
        for i in 0..nb {
            let mut sc = [[0i32; ROWS]; 16];
            let mut sc2 = [[0u32; ROWS]; 8];
            let mut d = [0.0f32; ROWS];
            for (r, row) in rows.iter().enumerate() {
                let b = (row.as_ptr() as *const BlockQ6_K).add(i);
                let (ql, qh) = ((*b).ql.as_ptr(), (*b).qh.as_ptr());
                let out = plain.as_mut_ptr().add(4 * r) as *mut u8;
                for n in 0..2 {
                    // Number 128n + 32k + l: the low four bits from ql[64n + 32(k % 2) + l]
                    // (low nibble for k < 2, high for k ≥ 2), the high two from bits 2k,
                    // 2k + 1 of qh[32n + l].
                    let l0 = _mm256_loadu_si256(ql.add(64 * n) as *const __m256i);
                    let l1 = _mm256_loadu_si256(ql.add(64 * n + 32) as *const __m256i);
                    let h = _mm256_loadu_si256(qh.add(32 * n) as *const __m256i);
                    let lows = [
                        _mm256_and_si256(l0, m4),
                        _mm256_and_si256(l1, m4),
                        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    ];
                    for (k, lo) in lows.iter().enumerate() {
                        let hi = _mm256_and_si256(
                            _mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * k as i32)),
                            m3,
                        );
                        let q = _mm256_or_si256(*lo, _mm256_slli_epi16(hi, 4));
                        _mm256_storeu_si256(out.add(128 * n + 32 * k) as *mut __m256i, q);
                    }
                }
                let scales = &(*b).scales;
                for g in 0..16 {
                    sc[g][r] = scales[g] as i32;
                }
                for h in 0..8 {
                    sc2[h][r] = scales[2 * h] as i16 as u16 as u32
                        | (scales[2 * h + 1] as i16 as u16 as u32) << 16;
                }
                d[r] = f16_f32((&raw const (*b).d as *const u16).read_unaligned());
            }
            interleave(&plain, &mut self.q[64 * i..64 * i + 64]);
            for (g, v) in sc.iter().enumerate() {
                let v = _mm512_loadu_si512(v.as_ptr() as *const __m512i);
                _mm512_store_si512(self.sc.as_mut_ptr().add(16 * i + g) as *mut __m512i, v);
            }
            for (h, v) in sc2.iter().enumerate() {
                let v = _mm512_loadu_si512(v.as_ptr() as *const __m512i);
                _mm512_store_si512(self.sc2.as_mut_ptr().add(8 * i + h) as *mut __m512i, v);
            }
            _mm512_store_ps(
                self.d.as_mut_ptr().add(i) as *mut f32,
                _mm512_loadu_ps(d.as_ptr()),
            );
        }
    }
}

impl Decoded16Q6 {
    /// Decode `rows` (each `nb` blocks of `t`: Q2_K, Q3_K or IQ4_XS), replacing what was
    /// held. Q2_K's groups keep their minimums where the others keep the scale pairs of
    /// the offset (`sc2`): its numbers are unsigned as they are.
    ///
    /// # Safety
    /// [`available`](super::available); every row is at least `nb` blocks of `t`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn fill_k16(&mut self, t: GgmlType, rows: [&[u8]; ROWS], nb: usize) {
        let zero = Chunk([0; 64]);
        let iq4 = t == GgmlType::IQ4_XS;
        self.nb = nb;
        self.shift = if iq4 { 7 } else { 2 };
        self.has_min = t == GgmlType::Q2_K;
        self.dmin.resize(if self.has_min { nb } else { 0 }, zero);
        self.q.resize(64 * nb, zero);
        self.sc.resize(16 * nb, zero);
        self.sc2.resize(8 * nb, zero);
        self.d.resize(nb, zero);
        let bytes = t.block_bytes();
        // IQ4_XS's table, each value + 128 (1 ..= 241: unsigned bytes).
        let mut plus = [0u8; 16];
        for (p, &k) in plus.iter_mut().zip(KVALUES_IQ4NL.iter()) {
            *p = (k as i16 + 128) as u8;
        }
        let table = _mm512_broadcast_i32x4(_mm_loadu_si128(plus.as_ptr() as *const __m128i));
        let mut plain = [Chunk([0; 64]); 4 * ROWS];
        for i in 0..nb {
            let mut sc = [[0i32; ROWS]; 16];
            let mut sc2 = [[0u32; ROWS]; 8];
            let mut d = [0.0f32; ROWS];
            let mut dmin = [0.0f32; ROWS];
            for (r, row) in rows.iter().enumerate() {
                let blk = row.as_ptr().add(bytes * i);
                // The groups' scales, and what `sc2` pairs: the scales (the offset's
                // factors) or Q2_K's minimums.
                let mut pairs = [0i8; 16];
                let (scales, dh): ([i8; 16], u16) = if self.has_min {
                    let b = &*(blk as *const BlockQ2_K);
                    let mut sc = [0i8; 16];
                    for (g, (sc, mn)) in sc.iter_mut().zip(pairs.iter_mut()).enumerate() {
                        *sc = (b.scales[g] & 0x0F) as i8;
                        *mn = (b.scales[g] >> 4) as i8;
                    }
                    dmin[r] = f16_f32((&raw const b.dmin as *const u16).read_unaligned());
                    (sc, (&raw const b.d as *const u16).read_unaligned())
                } else if iq4 {
                    let b = &*(blk as *const BlockIQ4_XS);
                    let sub = b.sub_scales();
                    let mut g16 = [0i8; 16];
                    for (g, v) in g16.iter_mut().enumerate() {
                        *v = sub[g / 2];
                    }
                    (g16, (&raw const b.d as *const u16).read_unaligned())
                } else {
                    let b = &*(blk as *const BlockQ3_K);
                    (
                        q3_k_scales(&b.scales),
                        (&raw const b.d as *const u16).read_unaligned(),
                    )
                };
                if !self.has_min {
                    pairs = scales;
                }
                for s in 0..4 {
                    let u = if self.has_min {
                        q2_k_step(&*(blk as *const BlockQ2_K), s)
                    } else if iq4 {
                        _mm512_shuffle_epi8(table, iq4_xs_step(&*(blk as *const BlockIQ4_XS), s))
                    } else {
                        q3_k_step(&*(blk as *const BlockQ3_K), s)
                    };
                    _mm512_store_si512(plain.as_mut_ptr().add(4 * r + s) as *mut __m512i, u);
                }
                for g in 0..16 {
                    sc[g][r] = scales[g] as i32;
                }
                for h in 0..8 {
                    sc2[h][r] = pairs[2 * h] as i16 as u16 as u32
                        | (pairs[2 * h + 1] as i16 as u16 as u32) << 16;
                }
                d[r] = f16_f32(dh);
            }
            interleave(&plain, &mut self.q[64 * i..64 * i + 64]);
            for (g, v) in sc.iter().enumerate() {
                let v = _mm512_loadu_si512(v.as_ptr() as *const __m512i);
                _mm512_store_si512(self.sc.as_mut_ptr().add(16 * i + g) as *mut __m512i, v);
            }
            for (h, v) in sc2.iter().enumerate() {
                let v = _mm512_loadu_si512(v.as_ptr() as *const __m512i);
                _mm512_store_si512(self.sc2.as_mut_ptr().add(8 * i + h) as *mut __m512i, v);
            }
            _mm512_store_ps(
                self.d.as_mut_ptr().add(i) as *mut f32,
                _mm512_loadu_ps(d.as_ptr()),
            );
            if self.has_min {
                _mm512_store_ps(
                    self.dmin.as_mut_ptr().add(i) as *mut f32,
                    _mm512_loadu_ps(dmin.as_ptr()),
                );
            }
        }
    }
}

/// The sixteen decoded Q6_K (or Q3_K, IQ4_XS, Q2_K) rows of `dec` times four activation rows
/// `acts` (each prepared as Q8_K), in llama.cpp's tiled order (the twins
/// `dot_q6_k_tiled`, `dot_k16_tiled`): per block `acc = fma(d · float(S), dx, acc)`, S
/// the block's exact `Σ_g sc_g · Σ_{l ∈ g} (u_l − o) · qx_l`, here `Σ_g sc_g · Σ u · qx −
/// o · Σ_g sc_g · Σ_{l ∈ g} qx_l` (the stored 16-sums). Q2_K (minimums, no offset):
/// `r = fma(−dmin, float(M), d · float(S))`, `M = Σ_g mn_g · Σ_{l ∈ g} qx_l`, then
/// `acc = fma(r, dx, acc)`. `y[k][r]`: activation row k with weight row r.
///
/// # Safety
/// [`available`](super::available); `dec` filled with rows of `acts`' length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q6_k_gemm16x4(
    dec: &Decoded16Q6,
    acts: [&QuantizedActs; 4],
) -> [[f32; ROWS]; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    for i in 0..dec.nb {
        let q = dec.q.as_ptr().add(64 * i) as *const __m512i;
        let xs: [*const i32; 4] =
            std::array::from_fn(|k| acts[k].qs.as_ptr().add(256 * i) as *const i32);
        let mut t = [_mm512_setzero_si512(); 4];
        for g in 0..16 {
            // Group g: numbers 16g .. 16g + 16, four quads.
            let s = quad_sums(q, &xs, 4 * g, 4);
            let scv = _mm512_load_si512(dec.sc.as_ptr().add(16 * i + g) as *const __m512i);
            for k in 0..4 {
                t[k] = _mm512_add_epi32(t[k], _mm512_mullo_epi32(s[k], scv));
            }
        }
        let dv = _mm512_load_ps(dec.d.as_ptr().add(i) as *const f32);
        for k in 0..4 {
            // Σ_g sc_g · (16-sum g), pairs of groups a step (|16-sum| ≤ 16 · 128: an i16).
            let bs = &acts[k].bsums[16 * i..16 * i + 16];
            let mut off = _mm512_setzero_si512();
            for h in 0..8 {
                let sc2 = _mm512_load_si512(dec.sc2.as_ptr().add(8 * i + h) as *const __m512i);
                let pair = (bs[2 * h] as u16 as u32) | (bs[2 * h + 1] as u16 as u32) << 16;
                off = _mm512_add_epi32(off, _mm512_madd_epi16(sc2, _mm512_set1_epi32(pair as i32)));
            }
            let r = if dec.has_min {
                // `off` is M: fnmadd gives fma(−dmin, M, d · S) in one rounding.
                let ds = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(t[k]));
                let dmv = _mm512_load_ps(dec.dmin.as_ptr().add(i) as *const f32);
                _mm512_fnmadd_ps(dmv, _mm512_cvtepi32_ps(off), ds)
            } else {
                let s = _mm512_sub_epi32(t[k], _mm512_sll_epi32(off, _mm_cvtsi32_si128(dec.shift)));
                _mm512_mul_ps(dv, _mm512_cvtepi32_ps(s))
            };
            acc[k] = _mm512_fmadd_ps(r, _mm512_set1_ps(acts[k].d[i]), acc[k]);
        }
    }
    let mut y = [[0.0f32; ROWS]; 4];
    for k in 0..4 {
        _mm512_storeu_ps(y[k].as_mut_ptr(), acc[k]);
    }
    y
}

/// Blocks `i` and (when `two`) `i + 1` of sixteen Q4_0 rows interleaved for the
/// repacked order's kernels ([`q4_0_gemm16x4`], `kgemv::q4_0_gemv16`): register `j`
/// holds numbers 4j .. 4j + 4 of each row's block `i + j / 8`, row r in 32-bit lane
/// r, as the unsigned nibbles `q` (0 ..= 15; the block's value is `q − 8`). Without
/// `two`, registers 8 .. 16 are don't-care.
///
/// # Safety
/// [`available`](super::available); every row holds block `i` (and `i + 1` when `two`)
/// of Q4_0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_0_interleaved(
    rows: &[&[u8]; ROWS],
    i: usize,
    two: bool,
) -> [__m512i; ROWS] {
    const BB: usize = std::mem::size_of::<crate::tensor::quant::BlockQ4_0>();
    // (16, 64): each row's two blocks, 32 numbers each, in number order. A plain loop,
    // not a closure: a closure would not inherit this function's target features and
    // leave `weights` a call per row.
    let mut plain = [_mm512_setzero_si512(); ROWS];
    for (p, row) in plain.iter_mut().zip(rows) {
        let b = row.as_ptr().add(BB * i);
        *p = if two {
            super::weights::<{ super::Q4_0 }, true>(b)
        } else {
            super::weights::<{ super::Q4_0 }, false>(b)
        };
    }
    transpose16(&plain)
}

/// The `d` of block `i` of sixteen Q4_0 rows, widened to f32: lane r is row r's.
///
/// # Safety
/// [`available`](super::available); every row holds block `i` of Q4_0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_0_scales(rows: &[&[u8]; ROWS], i: usize) -> __m512 {
    const BB: usize = std::mem::size_of::<crate::tensor::quant::BlockQ4_0>();
    let mut d16 = [0u16; ROWS];
    for (d, row) in d16.iter_mut().zip(rows) {
        *d = (row.as_ptr().add(BB * i) as *const u16).read_unaligned();
    }
    _mm512_cvtph_ps(_mm256_loadu_si256(d16.as_ptr() as *const __m256i))
}

/// Sixteen Q4_0 rows decoded for [`q4_0_gemm16x4`], per 32-block: its eight registers
/// of interleaved numbers ([`q4_0_interleaved`]) and the rows' `d` as f32 lanes.
#[derive(Default)]
pub(crate) struct Decoded16Q40 {
    /// (nb, 8) registers: lane r holds row r's numbers 4j .. 4j + 4 as bytes.
    q: Vec<Chunk>,
    /// (nb) registers: lane r holds row r's `d`.
    d: Vec<Chunk>,
    /// Blocks in a row.
    nb: usize,
}

impl Decoded16Q40 {
    /// Decode `rows` (each `nb` Q4_0 blocks), replacing what was held.
    ///
    /// # Safety
    /// [`available`](super::available); every row is at least `nb` Q4_0 blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn fill(&mut self, rows: [&[u8]; ROWS], nb: usize) {
        let zero = Chunk([0; 64]);
        self.nb = nb;
        self.q.resize(8 * nb, zero);
        self.d.resize(nb, zero);
        for i in (0..nb).step_by(2) {
            let two = i + 1 < nb;
            let regs = q4_0_interleaved(&rows, i, two);
            let kept = if two { ROWS } else { ROWS / 2 };
            for (j, v) in regs.iter().take(kept).enumerate() {
                _mm512_store_si512(self.q.as_mut_ptr().add(8 * i + j) as *mut __m512i, *v);
            }
        }
        for i in 0..nb {
            let d = q4_0_scales(&rows, i);
            _mm512_store_ps(self.d.as_mut_ptr().add(i) as *mut f32, d);
        }
    }
}

/// The sixteen decoded Q4_0 rows of `dec` times four activation rows `acts` (each
/// prepared as Q8_0), in the order of llama.cpp's repacked Q4_0 kernels (the twin
/// `dot_q4_0_repacked`): per output one f32 chain, per block
/// `acc = fma(float(S), d · dx, acc)` with `S = Σ (q − 8) · qx`, here
/// `Σ q · qx − 8 · Σ qx` (the activations' block sums). A lane is an output, so each
/// `vpdpbusd` adds 64 products into sixteen of them. `y[k][r]`: activation row k with
/// weight row r.
///
/// # Safety
/// [`available`](super::available); `dec` filled with rows of `acts`' length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_0_gemm16x4(
    dec: &Decoded16Q40,
    acts: [&QuantizedActs; 4],
) -> [[f32; ROWS]; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    for i in 0..dec.nb {
        let q = dec.q.as_ptr().add(8 * i) as *const __m512i;
        let xs: [*const i32; 4] =
            std::array::from_fn(|k| acts[k].qs.as_ptr().add(32 * i) as *const i32);
        let sums = quad_sums(q, &xs, 0, 8);
        let dv = _mm512_load_ps(dec.d.as_ptr().add(i) as *const f32);
        for k in 0..4 {
            let s = _mm512_sub_epi32(sums[k], _mm512_set1_epi32(8 * acts[k].bsums[i]));
            let p = _mm512_mul_ps(dv, _mm512_set1_ps(acts[k].d[i]));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), p, acc[k]);
        }
    }
    let mut y = [[0.0f32; ROWS]; 4];
    for k in 0..4 {
        _mm512_storeu_ps(y[k].as_mut_ptr(), acc[k]);
    }
    y
}
