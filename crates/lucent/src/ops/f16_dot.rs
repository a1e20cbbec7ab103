//! Dot products of f16 values (held as f32, or as f16 bits: an f16 KV cache,
//! [`F16Held`]) summed in f32 in llama.cpp's two orders
//! (its AVX2 build): a prompt's GEMM (tinyBLAS: one eight-lane FMA chain, then a tree
//! sum of the lanes) and a single token's dot product (`ggml_vec_dot_f16`: four
//! eight-lane accumulators over 32-number steps) — [`F16Order`]. Attention's scores and
//! its weighing of V in [`crate::runtime::Numerics::LlamaCpp`] are these products
//! ([`crate::ops::attention::llama_cpp`]).
//!
//! The plain functions ([`dot_f16`], [`hsum8`]) are scalar and read like llama.cpp's
//! statements; their AVX2 twins (one row, or eight keys' rows at once) compute the same
//! bits, and tests hold each to its plain function at every instruction-set level.

#[cfg(test)]
use crate::runtime::Isa;

/// Lanes of one AVX2 register of f32.
pub(crate) const LANES: usize = 8;

/// How the f16 values of an operand are held: as f32 numbers, or as f16 bits (an f16
/// KV cache, llama.cpp's own). Either way each widens to the same f32, so the products
/// are the same bits; the f16 bits are half the bytes to read.
pub(crate) trait F16Held: Copy + Send + Sync + 'static {
    /// Whether the numbers are f16 bits.
    const BITS: bool;
    /// The number as f32 (exact).
    fn widen(self) -> f32;
    /// Whether every number is a finite multiple of 2⁻²⁴ (every finite f16 is).
    /// Checked 64 numbers at a time without an early exit inside a run, so the compiler
    /// can use vector registers.
    fn all_f16_multiples(xs: &[Self]) -> bool;
}

impl F16Held for f32 {
    const BITS: bool = false;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn all_f16_multiples(xs: &[f32]) -> bool {
        xs.chunks(64).all(|run| {
            run.iter().fold(true, |ok, &x| {
                ok & (x.is_finite() & ((x * 16_777_216.0).fract() == 0.0))
            })
        })
    }
}

impl F16Held for u16 {
    const BITS: bool = true;
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self).to_f32()
    }
    #[inline(always)]
    fn all_f16_multiples(xs: &[u16]) -> bool {
        // Finite: the exponent bits are not all ones.
        xs.chunks(64)
            .all(|run| run.iter().fold(true, |ok, &x| ok & (x & 0x7C00 != 0x7C00)))
    }
}

/// Eight numbers from `p` as f32 (loaded, or widened from f16 bits).
///
/// # Safety
/// AVX2, FMA and F16C; `p` points at eight readable numbers.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load8<E: F16Held>(p: *const E) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    if E::BITS {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    } else {
        _mm256_loadu_ps(p as *const f32)
    }
}

/// Sixteen numbers from `p` as f32 (loaded, or widened from f16 bits).
///
/// # Safety
/// AVX-512F; `p` points at sixteen readable numbers.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) unsafe fn load16<E: F16Held>(p: *const E) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    if E::BITS {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    } else {
        _mm512_loadu_ps(p as *const f32)
    }
}

/// Which of llama.cpp's two summation orders an f16 product follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F16Order {
    /// Several query rows at once (a prompt): the GEMM's single FMA chain per output.
    Gemm,
    /// One query row (a decode step): the dot product's four accumulators.
    Dot,
}

impl F16Order {
    /// The order llama.cpp uses for a product with `rows` query rows (it takes its GEMM
    /// from two rows up).
    pub fn for_rows(rows: usize) -> F16Order {
        if rows >= 2 {
            F16Order::Gemm
        } else {
            F16Order::Dot
        }
    }
}

/// The eight lanes of an AVX2 register summed as `hsum_float_8` and tinyBLAS's `hsum`
/// sum them: halves added, then (0 + 2) + (1 + 3).
#[inline(always)]
pub fn hsum8(x: &[f32; LANES]) -> f32 {
    let t = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// `Σ x_i · y_i` over two equally long rows of f16 values (held as f32), in `order`,
/// as llama.cpp's AVX2 build sums it:
///
/// - [`F16Order::Gemm`] (tinyBLAS; when `n % 8 == 0`, else the dot order): one eight-lane
///   accumulator, `acc = fma(x, y, acc)` chunk after chunk, then [`hsum8`].
/// - [`F16Order::Dot`] (`ggml_vec_dot_f16`): four accumulators over 32-number steps
///   (accumulator j takes numbers 8j..8j+7 of each step), then (0 + 2) and (1 + 3), then
///   their sum; its halves added and the four lanes summed as (0 + 1) + (2 + 3) (two
///   horizontal adds), widened to f64; numbers past the last whole step are added in
///   f64 one product at a time; the total is rounded to f32.
#[inline(always)]
pub fn dot_f16(x: &[f32], y: &[f32], order: F16Order) -> f32 {
    let n = x.len().min(y.len());
    if order == F16Order::Gemm && n.is_multiple_of(LANES) {
        let mut acc = [0.0f32; LANES];
        for (xc, yc) in x[..n].chunks_exact(LANES).zip(y[..n].chunks_exact(LANES)) {
            for l in 0..LANES {
                acc[l] = xc[l].mul_add(yc[l], acc[l]);
            }
        }
        return hsum8(&acc);
    }
    let step = 4 * LANES;
    let np = n - n % step;
    let mut sum = [[0.0f32; LANES]; 4];
    for i in (0..np).step_by(step) {
        for (j, s) in sum.iter_mut().enumerate() {
            let o = i + j * LANES;
            for l in 0..LANES {
                s[l] = x[o + l].mul_add(y[o + l], s[l]);
            }
        }
    }
    let mut total = 0.0f64;
    if np > 0 {
        let s = std::array::from_fn::<f32, LANES, _>(|l| {
            (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l])
        });
        let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
        total = ((t[0] + t[1]) + (t[2] + t[3])) as f64;
    }
    for i in np..n {
        total += (x[i] * y[i]) as f64;
    }
    total as f32
}

/// [`dot_f16`] with AVX2 registers for its eight lanes: the same operations in the
/// same order, so the same bits; `x` held as f32 numbers or f16 bits ([`F16Held`]).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_avx2<E: F16Held>(x: &[E], y: &[f32], order: F16Order) -> f32 {
    use std::arch::x86_64::*;
    let n = x.len().min(y.len());
    let lanes = |v: __m256| -> [f32; LANES] {
        let mut a = [0.0f32; LANES];
        // SAFETY: `a` holds eight f32.
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
        a
    };
    // SAFETY (loads): every load reads 8 numbers at i + 8j < n of x and y.
    unsafe {
        if order == F16Order::Gemm && n.is_multiple_of(LANES) {
            let mut acc = _mm256_setzero_ps();
            for i in (0..n).step_by(LANES) {
                let (a, b) = (load8(x.as_ptr().add(i)), _mm256_loadu_ps(y.as_ptr().add(i)));
                acc = _mm256_fmadd_ps(a, b, acc);
            }
            return hsum8(&lanes(acc));
        }
        let step = 4 * LANES;
        let np = n - n % step;
        let mut sum = [_mm256_setzero_ps(); 4];
        for i in (0..np).step_by(step) {
            for (j, s) in sum.iter_mut().enumerate() {
                let o = i + j * LANES;
                let (a, b) = (load8(x.as_ptr().add(o)), _mm256_loadu_ps(y.as_ptr().add(o)));
                *s = _mm256_fmadd_ps(a, b, *s);
            }
        }
        let mut total = 0.0f64;
        if np > 0 {
            let s = lanes(_mm256_add_ps(
                _mm256_add_ps(sum[0], sum[2]),
                _mm256_add_ps(sum[1], sum[3]),
            ));
            let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
            total = ((t[0] + t[1]) + (t[2] + t[3])) as f64;
        }
        for i in np..n {
            total += (x[i].widen() * y[i]) as f64;
        }
        total as f32
    }
}

/// `s[j] = dot_f16(key j, q, order)` for every row of `keys` (each `q.len()` long),
/// eight keys at a time: each key's lanes accumulate as [`dot_f16_avx2`]'s, then the
/// eight keys' registers are transposed so that one vector addition does lane l's
/// step of the horizontal sum for all eight — the same additions in the same order per
/// key, so the same bits. Shapes the transposed sum does not cover (a length that is not
/// a whole number of the order's steps) and the last keys go through
/// [`dot_f16_avx2`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dots_f16_avx2<E: F16Held>(
    keys: &[E],
    q: &[f32],
    order: F16Order,
    s: &mut [f32],
) {
    use std::arch::x86_64::*;
    let dk = q.len();
    let n = s.len().min(keys.len() / dk.max(1));
    let whole = match order {
        F16Order::Gemm => dk.is_multiple_of(LANES),
        F16Order::Dot => dk.is_multiple_of(4 * LANES),
    };
    let mut j0 = 0;
    if whole && dk > 0 {
        while j0 + LANES <= n {
            // Each key's eight-lane vector before its horizontal sum.
            let mut v = [_mm256_setzero_ps(); LANES];
            for (k, vk) in v.iter_mut().enumerate() {
                let x = keys.as_ptr().add((j0 + k) * dk);
                // SAFETY (loads): key j0 + k < n is dk numbers at x; q is dk numbers.
                *vk = match order {
                    F16Order::Gemm => {
                        let mut acc = _mm256_setzero_ps();
                        for i in (0..dk).step_by(LANES) {
                            let (a, b) = (load8(x.add(i)), _mm256_loadu_ps(q.as_ptr().add(i)));
                            acc = _mm256_fmadd_ps(a, b, acc);
                        }
                        acc
                    }
                    F16Order::Dot => {
                        let mut sum = [_mm256_setzero_ps(); 4];
                        for i in (0..dk).step_by(4 * LANES) {
                            for (j, sj) in sum.iter_mut().enumerate() {
                                let o = i + j * LANES;
                                let (a, b) = (load8(x.add(o)), _mm256_loadu_ps(q.as_ptr().add(o)));
                                *sj = _mm256_fmadd_ps(a, b, *sj);
                            }
                        }
                        _mm256_add_ps(_mm256_add_ps(sum[0], sum[2]), _mm256_add_ps(sum[1], sum[3]))
                    }
                };
            }
            // t[l] = lane l of every key: row l of the transposed 8 × 8.
            let t = transpose8(v);
            let (t0, t1, t2, t3) = (
                _mm256_add_ps(t[0], t[4]),
                _mm256_add_ps(t[1], t[5]),
                _mm256_add_ps(t[2], t[6]),
                _mm256_add_ps(t[3], t[7]),
            );
            let total = match order {
                // hsum8: (t0 + t2) + (t1 + t3).
                F16Order::Gemm => _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3)),
                // The dot's ending: (t0 + t1) + (t2 + t3); its f64 round trip is exact.
                F16Order::Dot => _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)),
            };
            // SAFETY: j0 + 8 ≤ n ≤ s.len().
            _mm256_storeu_ps(s.as_mut_ptr().add(j0), total);
            j0 += LANES;
        }
    }
    // The last keys one by one.
    for j in j0..n {
        s[j] = dot_f16_avx2(&keys[j * dk..][..dk], q, order);
    }
}

/// The 8 × 8 transpose of eight AVX2 registers: lane k of result l is lane l of input k.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn transpose8(
    r: [std::arch::x86_64::__m256; LANES],
) -> [std::arch::x86_64::__m256; LANES] {
    use std::arch::x86_64::*;
    let a0 = _mm256_unpacklo_ps(r[0], r[1]);
    let a1 = _mm256_unpackhi_ps(r[0], r[1]);
    let a2 = _mm256_unpacklo_ps(r[2], r[3]);
    let a3 = _mm256_unpackhi_ps(r[2], r[3]);
    let a4 = _mm256_unpacklo_ps(r[4], r[5]);
    let a5 = _mm256_unpackhi_ps(r[4], r[5]);
    let a6 = _mm256_unpacklo_ps(r[6], r[7]);
    let a7 = _mm256_unpackhi_ps(r[6], r[7]);
    let b0 = _mm256_shuffle_ps::<0x44>(a0, a2);
    let b1 = _mm256_shuffle_ps::<0xEE>(a0, a2);
    let b2 = _mm256_shuffle_ps::<0x44>(a1, a3);
    let b3 = _mm256_shuffle_ps::<0xEE>(a1, a3);
    let b4 = _mm256_shuffle_ps::<0x44>(a4, a6);
    let b5 = _mm256_shuffle_ps::<0xEE>(a4, a6);
    let b6 = _mm256_shuffle_ps::<0x44>(a5, a7);
    let b7 = _mm256_shuffle_ps::<0xEE>(a5, a7);
    [
        _mm256_permute2f128_ps::<0x20>(b0, b4),
        _mm256_permute2f128_ps::<0x20>(b1, b5),
        _mm256_permute2f128_ps::<0x20>(b2, b6),
        _mm256_permute2f128_ps::<0x20>(b3, b7),
        _mm256_permute2f128_ps::<0x31>(b0, b4),
        _mm256_permute2f128_ps::<0x31>(b1, b5),
        _mm256_permute2f128_ps::<0x31>(b2, b6),
        _mm256_permute2f128_ps::<0x31>(b3, b7),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::round_f16;
    use crate::ops::fma_at;

    #[test]
    fn both_orders_are_the_dot_product_up_to_rounding() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 8.0)
            .collect();
        let y: Vec<f32> = (0..256)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 16.0)
            .collect();
        for n in [16, 64, 100, 256] {
            let exact: f64 = x[..n]
                .iter()
                .zip(&y[..n])
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum();
            for order in [F16Order::Gemm, F16Order::Dot] {
                let got = dot_f16(&x[..n], &y[..n], order) as f64;
                assert!(
                    (got - exact).abs() <= 1e-5 * exact.abs().max(1.0),
                    "{order:?} n={n}: {got} vs {exact}"
                );
            }
        }
    }

    /// `dot_f16` at `isa`: the AVX2 kernel from [`Isa::Avx2`], else the statement.
    fn dot_at(isa: Isa, x: &[f32], y: &[f32], order: F16Order) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if fma_at(isa) {
            // SAFETY: an available level with AVX2 and FMA.
            return unsafe { dot_f16_avx2(x, y, order) };
        }
        dot_f16(x, y, order)
    }

    /// The scores of every key in `keys` against `q` at `isa` (eight at a time from
    /// [`Isa::Avx2`]).
    fn dots_at(isa: Isa, keys: &[f32], q: &[f32], order: F16Order, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if fma_at(isa) {
            // SAFETY: an available level with AVX2 and FMA.
            return unsafe { dots_f16_avx2(keys, q, order, out) };
        }
        for (j, o) in out.iter_mut().enumerate() {
            *o = dot_f16(&keys[j * q.len()..][..q.len()], q, order);
        }
    }

    /// The dot at every level this CPU runs equals the scalar statement, bit for bit.
    #[test]
    fn dot_of_every_level_equals_the_scalar_statement() {
        let x: Vec<f32> = (0..300)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let y: Vec<f32> = (0..300)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 13.0)
            .collect();
        for isa in Isa::available() {
            for n in [8, 24, 32, 64, 100, 256, 300] {
                for order in [F16Order::Gemm, F16Order::Dot] {
                    let fast = dot_at(isa, &x[..n], &y[..n], order);
                    assert_eq!(
                        fast.to_bits(),
                        dot_f16(&x[..n], &y[..n], order).to_bits(),
                        "{isa}: {order:?} n={n}"
                    );
                }
            }
        }
    }

    /// The eight-keys-at-a-time scores equal one dot per key, bit for bit, in both
    /// orders: lengths the transposed sum covers and those it leaves to the plain dot,
    /// key counts below, at and past whole eights.
    #[test]
    fn eight_key_dots_equal_one_dot_per_key() {
        let val = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| round_f16((((i * 31 + seed * 17) % 113) as f32 - 56.0) / 9.0))
                .collect()
        };
        for isa in Isa::available() {
            for dk in [8, 20, 24, 32, 40, 64, 256] {
                let q = val(dk, 1);
                for n in [0, 1, 7, 8, 9, 16, 19] {
                    let keys = val(n * dk, 2);
                    // The same keys as f16 bits (an f16 KV cache).
                    let bits: Vec<u16> = keys
                        .iter()
                        .map(|&x| half::f16::from_f32(x).to_bits())
                        .collect();
                    for order in [F16Order::Gemm, F16Order::Dot] {
                        let mut fast = vec![0.0f32; n];
                        dots_at(isa, &keys, &q, order, &mut fast);
                        let mut halves = vec![0.0f32; n];
                        #[cfg(target_arch = "x86_64")]
                        if fma_at(isa) {
                            // SAFETY: an available level with AVX2, FMA and F16C.
                            unsafe { dots_f16_avx2(&bits, &q, order, &mut halves) };
                        } else {
                            halves.copy_from_slice(&fast);
                        }
                        #[cfg(not(target_arch = "x86_64"))]
                        halves.copy_from_slice(&fast);
                        for (j, (f, h)) in fast.iter().zip(&halves).enumerate() {
                            let want = dot_f16(&keys[j * dk..][..dk], &q, order);
                            let what = format!("{isa}: {order:?} dk={dk} n={n} j={j}");
                            assert_eq!(f.to_bits(), want.to_bits(), "{what}");
                            assert_eq!(h.to_bits(), want.to_bits(), "{what}, keys as f16 bits");
                        }
                    }
                }
            }
        }
    }
}
