//! A repacked Q4_K matrix's prompt product on AVX2, eight weight rows by four activation
//! rows at a time, in llama.cpp's grouped `gemm` order
//! ([`KOrder::Gemm`](crate::ops::quant::dispatch::KOrder::Gemm)): per output, one f32
//! chain with one step per 64 numbers (two sub-blocks of 32) and a chain of minimums,
//!
//! ```text
//! acc   = fma(float(T_c), d · dx, acc)         T_c = Σ_{j ∈ {2c, 2c+1}} sc_j · Σ_{l ∈ j} q_l · qx_l
//! acc_m = fma(float(M_c), dmin · dx, acc_m)    M_c = Σ_{j ∈ {2c, 2c+1}} mn_j · Σ_{l ∈ j} qx_l
//! y     = acc − acc_m                          (c = 0 .. 4 in each 256-block, blocks in order)
//! ```
//!
//! the arithmetic of the one-row kernel in that order (`avx2::q45_k` with
//! `KOrder::Gemm`) and of the twin `reference::dot_q4_k_repacked(.., true)`, so each
//! output equals theirs bit for bit. The AVX2 sibling of `avx512::kgemm`.
//!
//! Eight weight rows are decoded once ([`Decoded8::fill`]) into one byte per number,
//! interleaved four numbers at a time: register `j` of a block holds numbers 4j .. 4j + 4
//! of each of the eight rows, one row a 32-bit lane. `vpmaddubsw` of that register with
//! an activation row's four numbers at 4j (broadcast to every lane) gives each row's two
//! pair sums in its lane; a sub-block's eight registers add up in i16 (≤ 8 · 2 · 15 · 128
//! = 30720: no overflow), and one `vpmaddwd` with the rows' scales (each twice) makes the
//! eight rows' `sc_j · Σ q · qx`. No horizontal sum anywhere: a lane is an output, and
//! each step's two FMAs serve eight outputs. The one-row kernel pays, per output and 64
//! numbers, a horizontal sum and two scalar FMAs in one dependent chain.
//!
//! Q6_K's prompt products take the same shape in llama.cpp's tiled order
//! ([`q6_k_gemm8x4`]).

use std::arch::x86_64::*;

use crate::ops::quant::activations::QuantizedActs;
use crate::tensor::quant::{k_scales_mins, BlockQ4_K, BlockQ6_K};

/// Weight rows a call multiplies.
pub(crate) const ROWS: usize = 8;

/// Thirty-two bytes aligned for the loads of one AVX2 register.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct Lane8(pub(crate) [u8; 32]);

/// Eight repacked Q4_K rows decoded for [`q4_k_gemm8x4`], per 256-block: the 64
/// registers of interleaved numbers (module docs), the eight sub-blocks' scales as i16
/// pairs, the four steps' minimum pairs as i16 pairs, and `d`, `dmin` widened to f32.
#[derive(Default)]
pub(crate) struct Decoded8 {
    /// (nb, 64) registers: lane r holds row r's numbers 4j .. 4j + 4 as bytes.
    q: Vec<Lane8>,
    /// (nb, 8) registers: lane r holds row r's scale of sub-block j twice, as i16s.
    sc: Vec<Lane8>,
    /// (nb, 4) registers: lane r holds row r's minimums of sub-blocks 2c and 2c + 1 as
    /// two i16s.
    mn: Vec<Lane8>,
    /// (nb, 2) registers: each row's `d`, then each row's `dmin`, as f32 lanes.
    d: Vec<Lane8>,
    /// Blocks in a row.
    nb: usize,
}

impl Decoded8 {
    /// Decode `rows` (each `nb` Q4_K blocks), replacing what was held.
    ///
    /// # Safety
    /// AVX2 + FMA + F16C present; every row is at least `nb` Q4_K blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn fill(&mut self, rows: [&[u8]; ROWS], nb: usize) {
        let zero = Lane8([0; 32]);
        self.nb = nb;
        self.q.resize(64 * nb, zero);
        self.sc.resize(8 * nb, zero);
        self.mn.resize(4 * nb, zero);
        self.d.resize(2 * nb, zero);
        let lo4 = _mm256_set1_epi8(0x0F);
        // (8, 256) one block's numbers, a row after a row.
        let mut plain = [Lane8([0; 32]); 8 * ROWS];
        for i in 0..nb {
            let mut sc = [[0u32; ROWS]; 8];
            let mut mn = [[0u32; ROWS]; 4];
            let mut d = [[0u16; ROWS]; 2];
            for (r, row) in rows.iter().enumerate() {
                let b = (row.as_ptr() as *const BlockQ4_K).add(i);
                let qs = (*b).qs.as_ptr();
                for c in 0..4 {
                    // Numbers 64c .. 64c + 32: the low nibbles of qs[32c ..]; the next 32
                    // the high ones.
                    let z = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
                    let lo = _mm256_and_si256(z, lo4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), lo4);
                    _mm256_store_si256(plain.as_mut_ptr().add(8 * r + 2 * c) as *mut __m256i, lo);
                    _mm256_store_si256(
                        plain.as_mut_ptr().add(8 * r + 2 * c + 1) as *mut __m256i,
                        hi,
                    );
                }
                let (sc8, mn8) = k_scales_mins(&(*b).scales);
                for j in 0..8 {
                    sc[j][r] = sc8[j] as u32 * 0x1_0001;
                }
                for c in 0..4 {
                    mn[c][r] = mn8[2 * c] as u32 | (mn8[2 * c + 1] as u32) << 16;
                }
                let dp = &raw const (*b).d as *const u16;
                d[0][r] = dp.read_unaligned();
                d[1][r] = dp.add(1).read_unaligned();
            }
            interleave(&plain, &mut self.q[64 * i..64 * i + 64]);
            for (j, s) in sc.iter().enumerate() {
                let v = _mm256_loadu_si256(s.as_ptr() as *const __m256i);
                _mm256_store_si256(self.sc.as_mut_ptr().add(8 * i + j) as *mut __m256i, v);
            }
            for (c, m) in mn.iter().enumerate() {
                let v = _mm256_loadu_si256(m.as_ptr() as *const __m256i);
                _mm256_store_si256(self.mn.as_mut_ptr().add(4 * i + c) as *mut __m256i, v);
            }
            for (k, dk) in d.iter().enumerate() {
                // f16 → f32 is exact.
                let v = _mm256_cvtph_ps(_mm_loadu_si128(dk.as_ptr() as *const __m128i));
                _mm256_store_ps(self.d.as_mut_ptr().add(2 * i + k) as *mut f32, v);
            }
        }
    }
}

/// One block's numbers of eight rows (`plain`: (8, 256) bytes, a row after a row)
/// interleaved four at a time: register j of `q` holds numbers 4j .. 4j + 4 of each
/// row, row r in 32-bit lane r (an 8 × 8 transpose of 32-bit words per 32 numbers).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn interleave(plain: &[Lane8; 8 * ROWS], q: &mut [Lane8]) {
    for g in 0..8 {
        // Numbers 32g .. 32g + 32 of each row: words 8g .. 8g + 8.
        let v: [__m256i; ROWS] = std::array::from_fn(|r| {
            _mm256_load_si256(plain.as_ptr().add(8 * r + g) as *const __m256i)
        });
        for (e, w) in transpose8(&v).iter().enumerate() {
            _mm256_store_si256(&mut q[8 * g + e] as *mut Lane8 as *mut __m256i, *w);
        }
    }
}

/// Eight registers of 32-bit words transposed: word r of result e is word e of
/// register r.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transpose8(r: &[__m256i; ROWS]) -> [__m256i; ROWS] {
    // t[2m], t[2m + 1]: rows 2m, 2m + 1 interleaved (words 0, 1 / 2, 3 of each half).
    let t: [__m256i; ROWS] = std::array::from_fn(|k| {
        let (a, b) = (r[k & !1], r[k | 1]);
        if k % 2 == 0 {
            _mm256_unpacklo_epi32(a, b)
        } else {
            _mm256_unpackhi_epi32(a, b)
        }
    });
    // u[4h + e]: word e of each 128-bit half of rows 4h .. 4h + 4, in that half.
    let u: [__m256i; ROWS] = std::array::from_fn(|k| {
        let (h, e) = (k / 4, k % 4);
        let (a, b) = (t[4 * h + e / 2], t[4 * h + 2 + e / 2]);
        if e % 2 == 0 {
            _mm256_unpacklo_epi64(a, b)
        } else {
            _mm256_unpackhi_epi64(a, b)
        }
    });
    // Result e (< 4): the low halves of u[e] (rows 0..4) and u[4 + e] (rows 4..8);
    // result 4 + e: their high halves.
    std::array::from_fn(|k| {
        let e = k % 4;
        if k < 4 {
            _mm256_permute2x128_si256::<0x20>(u[e], u[4 + e])
        } else {
            _mm256_permute2x128_si256::<0x31>(u[e], u[4 + e])
        }
    })
}

/// The eight decoded rows of `dec` times four activation rows `acts` (each prepared as
/// Q8_K for them), in the grouped order (module docs): `y[k][r]` is activation row k's
/// product with weight row r. Two rows a pass ([`gemm8`]): the sums of four would not
/// fit AVX2's sixteen registers.
///
/// # Safety
/// AVX2 + FMA + F16C present; `dec` filled with rows of `acts`' length.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_gemm8x4(dec: &Decoded8, acts: [&QuantizedActs; 4]) -> [[f32; ROWS]; 4] {
    let [a, b] = gemm8::<2>(dec, [acts[0], acts[1]]);
    let [c, d] = gemm8::<2>(dec, [acts[2], acts[3]]);
    [a, b, c, d]
}

/// [`q4_k_gemm8x4`] for `A` activation rows.
///
/// # Safety
/// As [`q4_k_gemm8x4`]'s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm8<const A: usize>(dec: &Decoded8, acts: [&QuantizedActs; A]) -> [[f32; ROWS]; A] {
    let mut acc = [_mm256_setzero_ps(); A];
    let mut acc_m = [_mm256_setzero_ps(); A];
    for i in 0..dec.nb {
        let q = dec.q.as_ptr().add(64 * i) as *const __m256i;
        let dv = _mm256_load_ps(dec.d.as_ptr().add(2 * i) as *const f32);
        let dmv = _mm256_load_ps(dec.d.as_ptr().add(2 * i + 1) as *const f32);
        let dx: [__m256; A] = std::array::from_fn(|k| _mm256_set1_ps(acts[k].d[i]));
        let d: [__m256; A] = std::array::from_fn(|k| _mm256_mul_ps(dv, dx[k]));
        let dm: [__m256; A] = std::array::from_fn(|k| _mm256_mul_ps(dmv, dx[k]));
        // The activation rows' numbers of this block, read four at a time as i32s.
        let xs: [*const i32; A] =
            std::array::from_fn(|k| acts[k].qs.as_ptr().add(256 * i) as *const i32);
        // Each activation row's sums over the sub-blocks (each two 16-sums; |Σ| ≤
        // 32 · 128 fits an i16), as i16 pairs: `pairs[c][k]` for step c, row k.
        let pairs: [[i32; A]; 4] = std::array::from_fn(|c| {
            std::array::from_fn(|k| {
                let bs = &acts[k].bsums[16 * i + 4 * c..16 * i + 4 * c + 4];
                let (lo, hi) = (bs[0] + bs[1], bs[2] + bs[3]);
                (lo as u16 as u32 | (hi as u16 as u32) << 16) as i32
            })
        });
        for (c, pc) in pairs.iter().enumerate() {
            let mut t = [_mm256_setzero_si256(); A];
            for j in [2 * c, 2 * c + 1] {
                // Sub-block j's pair sums per row, in i16 (bound in the module docs).
                let mut s = [_mm256_setzero_si256(); A];
                // Row k's 32 numbers of sub-block j as two 16-byte halves, each in both
                // lanes, and group p (4 bytes) broadcast from them by a shuffle: the
                // shuffles take pipes the products leave free, where a broadcast load per
                // group made the loads a bound (Qwen3 shape prefill +2 to +6 %).
                let halves: [[__m256i; 2]; A] = std::array::from_fn(|k| {
                    std::array::from_fn(|h| {
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(
                            xs[k].add(8 * j + 4 * h) as *const __m128i
                        ))
                    })
                });
                for p in 0..8 {
                    let w = _mm256_load_si256(q.add(8 * j + p));
                    for k in 0..A {
                        let v = halves[k][p / 4];
                        let x = match p % 4 {
                            0 => _mm256_shuffle_epi32::<0x00>(v),
                            1 => _mm256_shuffle_epi32::<0x55>(v),
                            2 => _mm256_shuffle_epi32::<0xAA>(v),
                            _ => _mm256_shuffle_epi32::<0xFF>(v),
                        };
                        s[k] = _mm256_add_epi16(s[k], _mm256_maddubs_epi16(w, x));
                    }
                }
                let scv = _mm256_load_si256(dec.sc.as_ptr().add(8 * i + j) as *const __m256i);
                for k in 0..A {
                    t[k] = _mm256_add_epi32(t[k], _mm256_madd_epi16(s[k], scv));
                }
            }
            // The minimums of sub-blocks 2c, 2c + 1 against each row's sums over them.
            let mnv = _mm256_load_si256(dec.mn.as_ptr().add(4 * i + c) as *const __m256i);
            for k in 0..A {
                let m = _mm256_madd_epi16(mnv, _mm256_set1_epi32(pc[k]));
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[k]), d[k], acc[k]);
                acc_m[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dm[k], acc_m[k]);
            }
        }
    }
    let mut y = [[0.0f32; ROWS]; A];
    for (k, yk) in y.iter_mut().enumerate() {
        _mm256_storeu_ps(yk.as_mut_ptr(), _mm256_sub_ps(acc[k], acc_m[k]));
    }
    y
}

/// Eight Q6_K rows decoded for [`q6_k_gemm8x4`], per 256-block: the 64 registers of
/// interleaved numbers (0 ..= 63, the `− 32` left to the offsets), the sixteen groups'
/// scales, each twice as i16s, the groups' scales in pairs (groups 2m, 2m + 1) for
/// the offsets, and `d` widened to f32.
#[derive(Default)]
pub(crate) struct Decoded8Q6 {
    /// (nb, 64) registers: lane r holds row r's numbers 4j .. 4j + 4 as bytes.
    q: Vec<Lane8>,
    /// (nb, 16) registers: lane r holds row r's scale of group g twice, as i16s.
    sc: Vec<Lane8>,
    /// (nb, 8) registers: lane r holds row r's scales of groups 2m and 2m + 1 as i16s.
    pairs: Vec<Lane8>,
    /// (nb, 1) registers: each row's `d` as f32 lanes.
    d: Vec<Lane8>,
    /// Blocks in a row.
    nb: usize,
}

impl Decoded8Q6 {
    /// Decode `rows` (each `nb` Q6_K blocks), replacing what was held.
    ///
    /// # Safety
    /// AVX2 + FMA + F16C present; every row is at least `nb` Q6_K blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn fill(&mut self, rows: [&[u8]; ROWS], nb: usize) {
        let zero = Lane8([0; 32]);
        self.nb = nb;
        self.q.resize(64 * nb, zero);
        self.sc.resize(16 * nb, zero);
        self.pairs.resize(8 * nb, zero);
        self.d.resize(nb, zero);
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        let mut plain = [Lane8([0; 32]); 8 * ROWS];
        for i in 0..nb {
            let mut sc = [[0u32; ROWS]; 16];
            let mut pairs = [[0u32; ROWS]; 8];
            let mut d = [0u16; ROWS];
            for (r, row) in rows.iter().enumerate() {
                let b = (row.as_ptr() as *const BlockQ6_K).add(i);
                let (ql, qh) = ((*b).ql.as_ptr(), (*b).qh.as_ptr());
                for n in 0..2 {
                    // Numbers 128n + 32k .. + 32: nibbles of ql[64n + 32 (k % 2) ..] (low
                    // for k < 2), with bits 2k, 2k + 1 of qh[32n ..] above them.
                    let l0 = _mm256_loadu_si256(ql.add(64 * n) as *const __m256i);
                    let l1 = _mm256_loadu_si256(ql.add(64 * n + 32) as *const __m256i);
                    let h = _mm256_loadu_si256(qh.add(32 * n) as *const __m256i);
                    let lo = [
                        _mm256_and_si256(l0, m4),
                        _mm256_and_si256(l1, m4),
                        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    ];
                    let hi = [
                        _mm256_and_si256(h, m2),
                        _mm256_and_si256(_mm256_srli_epi16(h, 2), m2),
                        _mm256_and_si256(_mm256_srli_epi16(h, 4), m2),
                        _mm256_and_si256(_mm256_srli_epi16(h, 6), m2),
                    ];
                    for k in 0..4 {
                        let q = _mm256_or_si256(lo[k], _mm256_slli_epi16(hi[k], 4));
                        _mm256_store_si256(
                            plain.as_mut_ptr().add(8 * r + 4 * n + k) as *mut __m256i,
                            q,
                        );
                    }
                }
                let s = &(*b).scales;
                for g in 0..16 {
                    sc[g][r] = (s[g] as i16 as u16 as u32) * 0x1_0001;
                }
                for m in 0..8 {
                    pairs[m][r] =
                        s[2 * m] as i16 as u16 as u32 | (s[2 * m + 1] as i16 as u16 as u32) << 16;
                }
                d[r] = (&raw const (*b).d as *const u16).read_unaligned();
            }
            interleave(&plain, &mut self.q[64 * i..64 * i + 64]);
            for (g, v) in sc.iter().enumerate() {
                let v = _mm256_loadu_si256(v.as_ptr() as *const __m256i);
                _mm256_store_si256(self.sc.as_mut_ptr().add(16 * i + g) as *mut __m256i, v);
            }
            for (m, v) in pairs.iter().enumerate() {
                let v = _mm256_loadu_si256(v.as_ptr() as *const __m256i);
                _mm256_store_si256(self.pairs.as_mut_ptr().add(8 * i + m) as *mut __m256i, v);
            }
            let v = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr() as *const __m128i));
            _mm256_store_ps(self.d.as_mut_ptr().add(i) as *mut f32, v);
        }
    }
}

/// The eight decoded Q6_K rows of `dec` times four activation rows `acts` (each
/// prepared as Q8_K for them), in llama.cpp's tiled order (`KOrder::Tiled`): per
/// output and block, `acc = fma(d · float(T), dx, acc)` with T the block's exact total
/// `Σ_g sc_g · Σ_{l ∈ g} (q_l − 32) · qx_l`, the twin `reference::dot_q6_k_tiled`'s
/// steps, so each output equals it bit for bit. `y[k][r]`: activation row k, weight
/// row r.
///
/// # Safety
/// AVX2 + FMA + F16C present; `dec` filled with rows of `acts`' length.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_gemm8x4(dec: &Decoded8Q6, acts: [&QuantizedActs; 4]) -> [[f32; ROWS]; 4] {
    let [a, b] = q6_gemm8::<2>(dec, [acts[0], acts[1]]);
    let [c, d] = q6_gemm8::<2>(dec, [acts[2], acts[3]]);
    [a, b, c, d]
}

/// [`q6_k_gemm8x4`] for `A` activation rows.
///
/// # Safety
/// As [`q6_k_gemm8x4`]'s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_gemm8<const A: usize>(
    dec: &Decoded8Q6,
    acts: [&QuantizedActs; A],
) -> [[f32; ROWS]; A] {
    let mut acc = [_mm256_setzero_ps(); A];
    for i in 0..dec.nb {
        let q = dec.q.as_ptr().add(64 * i) as *const __m256i;
        let xs: [*const i32; A] =
            std::array::from_fn(|k| acts[k].qs.as_ptr().add(256 * i) as *const i32);
        let mut t = [_mm256_setzero_si256(); A];
        for g in 0..16 {
            // Group g (16 numbers, 4 registers): two pair sums added in i16 (|·| ≤
            // 2 · 2 · 63 · 128 = 32256), then the group's scale.
            let scv = _mm256_load_si256(dec.sc.as_ptr().add(16 * i + g) as *const __m256i);
            for h in 0..2 {
                let j = 4 * g + 2 * h;
                let (w0, w1) = (_mm256_load_si256(q.add(j)), _mm256_load_si256(q.add(j + 1)));
                for k in 0..A {
                    let x0 = _mm256_set1_epi32(xs[k].add(j).read_unaligned());
                    let x1 = _mm256_set1_epi32(xs[k].add(j + 1).read_unaligned());
                    let s = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w0, x0),
                        _mm256_maddubs_epi16(w1, x1),
                    );
                    t[k] = _mm256_add_epi32(t[k], _mm256_madd_epi16(s, scv));
                }
            }
        }
        let dv = _mm256_load_ps(dec.d.as_ptr().add(i) as *const f32);
        for k in 0..A {
            // The `− 32` of every number: 32 · Σ_g sc_g · s_g (the 16-sums s, |s| ≤
            // 16 · 128, as i16 pairs).
            let bs = &acts[k].bsums[16 * i..16 * i + 16];
            let mut off = _mm256_setzero_si256();
            for m in 0..8 {
                let pair = (bs[2 * m] as u16 as u32 | (bs[2 * m + 1] as u16 as u32) << 16) as i32;
                let pv = _mm256_load_si256(dec.pairs.as_ptr().add(8 * i + m) as *const __m256i);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(pv, _mm256_set1_epi32(pair)));
            }
            let total = _mm256_sub_epi32(t[k], _mm256_slli_epi32(off, 5));
            let v = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(total));
            acc[k] = _mm256_fmadd_ps(v, _mm256_set1_ps(acts[k].d[i]), acc[k]);
        }
    }
    let mut y = [[0.0f32; ROWS]; A];
    for (k, yk) in y.iter_mut().enumerate() {
        _mm256_storeu_ps(yk.as_mut_ptr(), acc[k]);
    }
    y
}
