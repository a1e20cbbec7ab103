//! The plain twins: dot products that read like the formulas in the module doc of
//! [`crate::ops::quant`], with integer inner sums per block (as the fast kernels have) and
//! f32 outer sums in llama.cpp's order ([`dot_blocks`] for the 32-blocks, the K-quant
//! twins such as [`dot_q4_k_repacked`] for the K-quants), which the fast kernels keep, so
//! they equal their twins bit for bit.

use half::{bf16, f16};

use crate::ops::f16_dot::{dot_f16 as dot_f16_ordered, hsum8, F16Order};
use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::dequant::iq4_indices;
use crate::ops::quant::dispatch::{Dot4Fn, DotFn};
use crate::tensor::quant::{
    blocks, f16_value, k_scale_min, q3_k_scales, Block, BlockIQ4_NL, BlockIQ4_XS, BlockQ2_K,
    BlockQ3_K, BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K,
    BlockQ8_0, GgmlType, KVALUES_IQ4NL,
};

/// [`crate::ops::quant::quantize_activations`] one number at a time: the twin the
/// AVX-512 quantisation is held to, bit for bit.
#[cfg(test)]
pub(crate) fn quantize_activations(dtype: GgmlType, x: &[f32]) -> crate::Result<QuantizedActs> {
    crate::ops::quant::activations::quantize_rows(dtype, x, crate::runtime::Isa::Scalar)
}

/// `w · x` for one row, scalar. Same contract as [`crate::ops::quant::vec_dot`].
#[cfg(test)]
pub(crate) fn vec_dot(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> crate::Result<f32> {
    crate::ops::quant::dispatch::check_dot(dtype, row, a)?;
    Ok(kernel(dtype)(row, a))
}

/// The twin dot kernel of `dtype`.
pub(crate) fn kernel(dtype: GgmlType) -> DotFn {
    match dtype {
        GgmlType::F32 => dot_f32,
        GgmlType::F16 => dot_f16,
        GgmlType::BF16 => dot_bf16,
        GgmlType::Q4_0 => dot_q4_0,
        GgmlType::Q4_1 => dot_q4_1,
        GgmlType::Q5_0 => dot_q5_0,
        GgmlType::Q5_1 => dot_q5_1,
        GgmlType::Q8_0 => dot_q8_0,
        GgmlType::Q4_K => dot_q4_k,
        GgmlType::Q5_K => dot_q5_k,
        GgmlType::Q6_K => dot_q6_k,
        GgmlType::Q2_K => dot_q2_k,
        GgmlType::Q3_K => dot_q3_k,
        GgmlType::IQ4_NL => dot_iq4_nl,
        GgmlType::IQ4_XS => dot_iq4_xs,
    }
}

/// A float weight row (F32, F16 or BF16 numbers, little-endian) widened to f32, exactly.
pub(crate) fn widen_float_row(dtype: GgmlType, row: &[u8]) -> Vec<f32> {
    match dtype {
        GgmlType::F32 => row
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => row
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        _ => row
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
    }
}

/// Numbers a step of llama.cpp's float dots: four accumulators of eight lanes.
const FLOAT_STEP: usize = 32;

/// The four eight-lane accumulators of llama.cpp's float dots over the whole 32-number
/// steps of `w · x` (accumulator j takes numbers 8j..8j+7 of each step, `fma` each),
/// and where the steps end.
fn float_accumulators(w: &[f32], x: &[f32]) -> ([[f32; 8]; 4], usize) {
    let n = w.len().min(x.len());
    let np = n - n % FLOAT_STEP;
    let mut sum = [[0.0f32; 8]; 4];
    for i in (0..np).step_by(FLOAT_STEP) {
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, v) in s.iter_mut().enumerate() {
                let k = i + 8 * j + l;
                *v = w[k].mul_add(x[k], *v);
            }
        }
    }
    (sum, np)
}

/// F32 weights, one output as llama.cpp's `ggml_vec_dot_f32` (AVX2 build) sums it:
/// [`float_accumulators`], reduced as `(0 + 2) + (1 + 3)` lane by lane, the register's
/// halves added, its four lanes as `(t0 + t1) + (t2 + t3)` (two `hadd`s); then the
/// numbers past the last whole step one at a time in f32, the compiler's way: the
/// products of the first `r − r mod 4` of the `r` leftovers rounded and added (its
/// vectorised loop), the last `r mod 4` fused, `fma(w, x, sum)` (its scalar epilogue).
pub(crate) fn dot_f32(row: &[u8], a: &QuantizedActs) -> f32 {
    let w = widen_float_row(GgmlType::F32, row);
    let x = &a.f32s;
    let n = w.len().min(x.len());
    let (sum, np) = float_accumulators(&w, x);
    let s: [f32; 8] = std::array::from_fn(|l| (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]));
    let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
    let mut total = (t[0] + t[1]) + (t[2] + t[3]);
    let fused_from = n - (n - np) % 4;
    for i in np..fused_from {
        total += w[i] * x[i];
    }
    for i in fused_from..n {
        total = w[i].mul_add(x[i], total);
    }
    total
}

/// F16 weights (activations rounded to f16), one output as `ggml_vec_dot_f16` sums it:
/// `ops::f16_dot::dot_f16`'s [`F16Order::Dot`] (the F32 dot's steps and reduction, the
/// leftovers' products added in f64).
pub(crate) fn dot_f16(row: &[u8], a: &QuantizedActs) -> f32 {
    let w = widen_float_row(GgmlType::F16, row);
    dot_f16_ordered(&w, &a.f32s, F16Order::Dot)
}

/// BF16 weights (activations rounded to bfloat16), one output as `ggml_vec_dot_bf16`'s
/// AVX2 branch sums it in the AVX2 build: [`float_accumulators`] (its `add(mul(x, y),
/// c)` is compiled to one `fma`), reduced as `(c1 + c3) + (c2 + c4)` lane by lane, the
/// halves added, then `(t0 + t2) + (t1 + t3)` (`movehl`, `movehdup`); widened to f64,
/// the leftovers' products added in f64, the total rounded to f32.
pub(crate) fn dot_bf16(row: &[u8], a: &QuantizedActs) -> f32 {
    let w = widen_float_row(GgmlType::BF16, row);
    let x = &a.f32s;
    let n = w.len().min(x.len());
    let (sum, np) = float_accumulators(&w, x);
    let s: [f32; 8] = std::array::from_fn(|l| (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]));
    let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
    let mut total = ((t[0] + t[2]) + (t[1] + t[3])) as f64;
    for i in np..n {
        total += (w[i] * x[i]) as f64;
    }
    total as f32
}

/// A float weight row's output as llama.cpp's tinyBLAS (`llamafile_sgemm`, AVX2) sums
/// it for a prompt (rows of `a.len` a multiple of 8): one eight-lane chain `acc =
/// fma(w, x, acc)` over the row, then [`hsum8`] — `ops::f16_dot::dot_f16`'s
/// [`F16Order::Gemm`], whatever the weights' type.
pub(crate) fn dot_float_chain(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> f32 {
    let w = widen_float_row(dtype, row);
    dot_f16_ordered(&w, &a.f32s, F16Order::Gemm)
}

/// The twins of a prompt product in tinyBLAS's order: a float type's
/// ([`dot_float_chain`]) and IQ4_NL's ([`dot_iq4_nl_chain`]), one activation row and
/// four; None for the other types.
pub(crate) fn chain_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    match dtype {
        GgmlType::F32 => Some((
            |r, a| dot_float_chain(GgmlType::F32, r, a),
            |r, a| std::array::from_fn(|k| dot_float_chain(GgmlType::F32, r, a[k])),
        )),
        GgmlType::F16 => Some((
            |r, a| dot_float_chain(GgmlType::F16, r, a),
            |r, a| std::array::from_fn(|k| dot_float_chain(GgmlType::F16, r, a[k])),
        )),
        GgmlType::BF16 => Some((
            |r, a| dot_float_chain(GgmlType::BF16, r, a),
            |r, a| std::array::from_fn(|k| dot_float_chain(GgmlType::BF16, r, a[k])),
        )),
        GgmlType::IQ4_NL => Some((dot_iq4_nl_chain, |r, a| {
            std::array::from_fn(|k| dot_iq4_nl_chain(r, a[k]))
        })),
        _ => None,
    }
}

/// The 32-blocks' dot in llama.cpp's order: per block, eight partial integer sums
/// (lane k: numbers 4k..4k+3) of `w_i · qx_i` where `block(b, i)` gives block i's
/// 32 weight integers, its scale `d · dx` and `(m, s)` (zero for kinds without a
/// minimum); each lane `acc_k = fma(d · dx, sum_k, acc_k)` block after block; the
/// lanes summed as ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)); plus `Σ fma(m, s)`.
pub(crate) fn dot_blocks<B: Block>(
    row: &[u8],
    a: &QuantizedActs,
    block: impl Fn(&B, usize) -> ([i32; 32], f32, f32, f32),
) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut extra = 0.0f32;
    for (i, b) in blocks::<B>(row).iter().enumerate() {
        let (w, sc, m, s) = block(b, i);
        let xq = &a.qs[32 * i..32 * i + 32];
        for (k, lane) in acc.iter_mut().enumerate() {
            let sum: i32 = (4 * k..4 * k + 4).map(|j| w[j] * xq[j] as i32).sum();
            *lane = sc.mul_add(sum as f32, *lane);
        }
        extra = m.mul_add(s, extra);
    }
    let t = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    ((t[0] + t[2]) + (t[1] + t[3])) + extra
}

/// The 32 four-bit numbers of a block (low nibbles first), each with `fifth(j)`·16 added.
fn nibbles(qs: &[u8; 16], fifth: impl Fn(usize) -> i32) -> [i32; 32] {
    std::array::from_fn(|j| {
        let q = if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        };
        q as i32 | (fifth(j) << 4)
    })
}

/// Σ_blocks d·dx·Σ (q − 8)·qx.
fn dot_q4_0(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_blocks(row, a, |b: &BlockQ4_0, i| {
        let w = nibbles(&b.qs, |_| 0).map(|q| q - 8);
        (w, f16_value(b.d) * a.d[i], 0.0, 0.0)
    })
}

/// Q4_0 in the order of llama.cpp's repacked kernels (`ggml_gemv_q4_0_8x8_q8_0` and
/// `ggml_gemm_q4_0_8x8_q8_0`, which it uses for every Q4_0 matrix whose row count is a
/// multiple of 8 on an AVX2 CPU; one activation row and four sum alike): one f32 chain,
/// per block `acc = fma(S, d · dx, acc)` with `S` the block's exact `Σ (q − 8) · qx`.
pub(crate) fn dot_q4_0_repacked(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = 0.0f32;
    for (i, b) in blocks::<BlockQ4_0>(row).iter().enumerate() {
        let w = nibbles(&b.qs, |_| 0);
        let s: i32 = w
            .iter()
            .zip(&a.qs[32 * i..32 * i + 32])
            .map(|(&q, &x)| (q - 8) * x as i32)
            .sum();
        acc = (s as f32).mul_add(f16_value(b.d) * a.d[i], acc);
    }
    acc
}

/// Σ_blocks d·dx·Σ q·qx + m·(dx·Σ qx).
fn dot_q4_1(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_blocks(row, a, |b: &BlockQ4_1, i| {
        let w = nibbles(&b.qs, |_| 0);
        (w, f16_value(b.d) * a.d[i], f16_value(b.m), a.sum[i])
    })
}

/// Σ_blocks d·dx·Σ (q − 16)·qx, q with its fifth bit from qh.
fn dot_q5_0(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_blocks(row, a, |b: &BlockQ5_0, i| {
        let qh = b.high_bits();
        let w = nibbles(&b.qs, |j| ((qh >> j) & 1) as i32).map(|q| q - 16);
        (w, f16_value(b.d) * a.d[i], 0.0, 0.0)
    })
}

/// Σ_blocks d·dx·Σ q·qx + m·(dx·Σ qx), q with its fifth bit from qh.
fn dot_q5_1(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_blocks(row, a, |b: &BlockQ5_1, i| {
        let qh = b.high_bits();
        let w = nibbles(&b.qs, |j| ((qh >> j) & 1) as i32);
        (w, f16_value(b.d) * a.d[i], f16_value(b.m), a.sum[i])
    })
}

/// Σ_blocks d·dx·Σ q·qx.
fn dot_q8_0(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_blocks(row, a, |b: &BlockQ8_0, i| {
        let w: [i32; 32] = std::array::from_fn(|j| b.qs[j] as i32);
        (w, f16_value(b.d) * a.d[i], 0.0, 0.0)
    })
}

/// The exact integer parts of a Q4_K / Q5_K block's dot ([`k45_parts`]).
pub(crate) struct K45Parts {
    /// Per step of 64 numbers, the eight i32 lanes.
    pub(crate) sums: [[i32; 8]; 4],
    /// Per step, the minimums times the activations' 32-sums.
    pub(crate) mins: [i32; 4],
}

/// A Q4_K or Q5_K block's fields the twins read: `(d, dmin, scales, qs, qh)`.
type K45Block<'a> = (f32, f32, &'a [u8; 12], &'a [u8; 128], Option<&'a [u8; 32]>);

/// Block `i` of a Q4_K (`five` false) or Q5_K row, as [`K45Block`].
fn k45_block(row: &[u8], i: usize, five: bool) -> K45Block<'_> {
    if five {
        let b = &blocks::<BlockQ5_K>(row)[i];
        (
            f16_value(b.d),
            f16_value(b.dmin),
            &b.scales,
            &b.qs,
            Some(&b.qh),
        )
    } else {
        let b = &blocks::<BlockQ4_K>(row)[i];
        (f16_value(b.d), f16_value(b.dmin), &b.scales, &b.qs, None)
    }
}

/// Blocks in a Q4_K (`five` false) or Q5_K row.
fn k45_count(row: &[u8], five: bool) -> usize {
    if five {
        blocks::<BlockQ5_K>(row).len()
    } else {
        blocks::<BlockQ4_K>(row).len()
    }
}

/// The integer parts of one Q4_K / Q5_K 256-block against its activations, as
/// llama.cpp's AVX2 kernels hold them: `sums[j][k]` for the step `j` over sub-blocks
/// 2j and 2j + 1 is lane k's `Σ sc · q · qx` over numbers 4k..4k+3 of each of the two
/// (eight i32 lanes), and `mins[j] = mn_2j · s_2j + mn_2j+1 · s_2j+1` with `s` the
/// 32-sums of the activations. All exact integers.
fn k45_parts(b: K45Block, xq: &[i8], bsums: &[i32]) -> K45Parts {
    let (_, _, scales, qs, qh) = b;
    let mut p = K45Parts {
        sums: [[0; 8]; 4],
        mins: [0; 4],
    };
    for j in 0..8 {
        let (sc, mn) = k_scale_min(j, scales);
        let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
        for l in 0..32 {
            let mut q = if j % 2 == 0 {
                chunk[l] & 0x0F
            } else {
                chunk[l] >> 4
            };
            if let Some(qh) = qh {
                q |= ((qh[l] >> j) & 1) << 4;
            }
            p.sums[j / 2][l / 4] += sc as i32 * q as i32 * xq[32 * j + l] as i32;
        }
        p.mins[j / 2] += mn as i32 * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    p
}

/// The parts of block `i` of a Q4_K / Q5_K row against `a` ([`k45_parts`]), with the
/// block's `d` and `dmin`.
fn k45_block_parts(row: &[u8], a: &QuantizedActs, i: usize, five: bool) -> (K45Parts, f32, f32) {
    let b = k45_block(row, i, five);
    let (d, dmin) = (b.0, b.1);
    let p = k45_parts(
        b,
        &a.qs[256 * i..256 * i + 256],
        &a.bsums[16 * i..16 * i + 16],
    );
    (p, d, dmin)
}

/// Q4_K and Q5_K in llama.cpp's `ggml_vec_dot_q4_K_q8_K` / `_q5_K_` order (AVX2):
/// per block, the eight lanes of Σ_j sums[j] meet `d·dx` in one FMA each; the minimum
/// sums meet `−dx·dmin` in four lanes (Q4_K, folded at the end as (0 + 2) + (1 + 3))
/// or, summed, in one f32 chain (Q5_K); the lanes are summed by [`hsum8`].
fn dot_k45(row: &[u8], a: &QuantizedActs, five: bool) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut acc_m = [0.0f32; 4];
    let mut summs = 0.0f32;
    for i in 0..k45_count(row, five) {
        let (p, dw, dminw) = k45_block_parts(row, a, i, five);
        let d = a.d[i] * dw;
        let dmin = -a.d[i] * dminw;
        if five {
            summs = dmin.mul_add(p.mins.iter().sum::<i32>() as f32, summs);
        } else {
            for (m, &v) in acc_m.iter_mut().zip(&p.mins) {
                *m = dmin.mul_add(v as f32, *m);
            }
        }
        for (k, l) in acc.iter_mut().enumerate() {
            let s: i32 = p.sums.iter().map(|sj| sj[k]).sum();
            *l = d.mul_add(s as f32, *l);
        }
    }
    let m = if five {
        summs
    } else {
        (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])
    };
    hsum8(&acc) + m
}

fn dot_q4_k(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_k45(row, a, false)
}

fn dot_q5_k(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_k45(row, a, true)
}

/// Q4_K in the order of llama.cpp's repacked kernels (its weights interleaved eight
/// rows at a time, `ggml_gemv_q4_K_8x8_q8_K` and `ggml_gemm_q4_K_8x8_q8_K`, which it
/// uses for every Q4_K matrix whose row count is a multiple of 8 on an AVX2 CPU):
/// each output is one f32 chain. The token path (`grouped` false) adds per block
/// `fma(Σ sums, d·dx)` and `fma(Σ mins, dmin·dx)`; the prompt path for rows in
/// groups of four (`grouped` true) does so once per step j of 64 numbers. The result
/// is the first chain minus the second.
pub(crate) fn dot_q4_k_repacked(row: &[u8], a: &QuantizedActs, grouped: bool) -> f32 {
    let (mut acc, mut acc_m) = (0.0f32, 0.0f32);
    for i in 0..k45_count(row, false) {
        let (p, dw, dminw) = k45_block_parts(row, a, i, false);
        let (d, dmin) = (dw * a.d[i], dminw * a.d[i]);
        let step = |s: &[[i32; 8]], m: &[i32]| -> (f32, f32) {
            let s: i32 = s.iter().flatten().sum();
            (s as f32, m.iter().sum::<i32>() as f32)
        };
        if grouped {
            for j in 0..4 {
                let (s, m) = step(&p.sums[j..j + 1], &p.mins[j..j + 1]);
                acc = s.mul_add(d, acc);
                acc_m = m.mul_add(dmin, acc_m);
            }
        } else {
            let (s, m) = step(&p.sums, &p.mins);
            acc = s.mul_add(d, acc);
            acc_m = m.mul_add(dmin, acc_m);
        }
    }
    acc - acc_m
}

/// Q4_K (`five` false) and Q5_K in the order of llama.cpp's tiled product (its
/// `ggml_compute_forward_mul_mat_tiled`, for 8 activation rows or more): per block
/// `r = fma(−dmin, M, d·S)` with `S = Σ sums`, `M = Σ mins`, then `acc = fma(r, dx, acc)`.
pub(crate) fn dot_k45_tiled(row: &[u8], a: &QuantizedActs, five: bool) -> f32 {
    let mut acc = 0.0f32;
    for i in 0..k45_count(row, five) {
        let (p, d, dmin) = k45_block_parts(row, a, i, five);
        let s: i32 = p.sums.iter().flatten().sum();
        let m: i32 = p.mins.iter().sum();
        let r = (-dmin).mul_add(m as f32, d * s as f32);
        acc = r.mul_add(a.d[i], acc);
    }
    acc
}

/// The twins in the order of llama.cpp's repacked kernels
/// ([`repacked_kernels`](crate::ops::quant::dispatch::repacked_kernels)): Q4_K's
/// ([`dot_q4_k_repacked`]), IQ4_NL's ([`dot_iq4_nl_repacked`]) and Q4_0's
/// ([`dot_q4_0_repacked`]), one activation row and four.
pub(crate) fn repacked_kernels(dtype: GgmlType) -> (DotFn, Dot4Fn) {
    if dtype == GgmlType::IQ4_NL {
        return (dot_iq4_nl_repacked, |r, a| {
            std::array::from_fn(|k| dot_iq4_nl_repacked(r, a[k]))
        });
    }
    if dtype == GgmlType::Q4_0 {
        return (dot_q4_0_repacked, |r, a| {
            std::array::from_fn(|k| dot_q4_0_repacked(r, a[k]))
        });
    }
    (
        |r, a| dot_q4_k_repacked(r, a, false),
        |r, a| std::array::from_fn(|k| dot_q4_k_repacked(r, a[k], true)),
    )
}

/// The twins in llama.cpp's tiled order ([`KOrder::Tiled`](crate::ops::quant::dispatch::KOrder::Tiled)):
/// one activation row and four; None for the types it does not tile.
pub(crate) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    match dtype {
        GgmlType::Q4_K => Some((
            |r, a| dot_k45_tiled(r, a, false),
            |r, a| std::array::from_fn(|k| dot_k45_tiled(r, a[k], false)),
        )),
        GgmlType::Q5_K => Some((
            |r, a| dot_k45_tiled(r, a, true),
            |r, a| std::array::from_fn(|k| dot_k45_tiled(r, a[k], true)),
        )),
        GgmlType::Q6_K => Some((dot_q6_k_tiled, |r, a| {
            std::array::from_fn(|k| dot_q6_k_tiled(r, a[k]))
        })),
        GgmlType::Q2_K => Some((
            |r, a| dot_k16_tiled::<BlockQ2_K>(r, a),
            |r, a| std::array::from_fn(|k| dot_k16_tiled::<BlockQ2_K>(r, a[k])),
        )),
        GgmlType::Q3_K => Some((
            |r, a| dot_k16_tiled::<BlockQ3_K>(r, a),
            |r, a| std::array::from_fn(|k| dot_k16_tiled::<BlockQ3_K>(r, a[k])),
        )),
        GgmlType::IQ4_XS => Some((
            |r, a| dot_k16_tiled::<BlockIQ4_XS>(r, a),
            |r, a| std::array::from_fn(|k| dot_k16_tiled::<BlockIQ4_XS>(r, a[k])),
        )),
        _ => None,
    }
}

/// Q6_K in the order of llama.cpp's tiled product (see [`dot_k45_tiled`]): per block
/// `acc = fma(d · S, dx, acc)` with `S` the block's exact `Σ sc · (q − 32) · qx`.
pub(crate) fn dot_q6_k_tiled(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = 0.0f32;
    for (i, b) in blocks::<BlockQ6_K>(row).iter().enumerate() {
        let s = q6_k_total(b, &a.qs[256 * i..256 * i + 256]);
        acc = (f16_value(b.d) * s as f32).mul_add(a.d[i], acc);
    }
    acc
}

/// `Σ sc · (q − 32) · qx` of one Q6_K block, exact.
fn q6_k_total(b: &BlockQ6_K, xq: &[i8]) -> i32 {
    let (ql, qh, sc) = (&b.ql, &b.qh, &b.scales);
    let mut s = 0i32;
    for e in 0..256 {
        let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
        let lb = ql[64 * n + 32 * (k % 2) + l];
        let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
        let hi = (qh[32 * n + l] >> (2 * k)) & 3;
        let q = (lo | (hi << 4)) as i32 - 32;
        s += sc[e / 16] as i32 * q * xq[e] as i32;
    }
    s
}

/// Q6_K in llama.cpp's `ggml_vec_dot_q6_K_q8_K` order (AVX2): per block, eight i32
/// lanes (lane k: numbers 4k..4k+3 of every 32, times their group's scale), each less
/// `32 · (sc_2k · s_2k + sc_2k+1 · s_2k+1)` (the −32 offset, from the 16-sums `s`),
/// one FMA with `d·dx` per lane; the lanes summed by [`hsum8`].
fn dot_q6_k(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = [0.0f32; 8];
    for (i, b) in blocks::<BlockQ6_K>(row).iter().enumerate() {
        let (ql, qh, sc) = (&b.ql, &b.qh, &b.scales);
        let d = a.d[i] * f16_value(b.d);
        let xq = &a.qs[256 * i..256 * i + 256];
        let bs = &a.bsums[16 * i..16 * i + 16];
        let mut lanes = [0i32; 8];
        for n in 0..2 {
            for k in 0..4 {
                for l in 0..32 {
                    let lb = ql[64 * n + 32 * (k % 2) + l];
                    let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
                    let hi = (qh[32 * n + l] >> (2 * k)) & 3;
                    let q = (lo | (hi << 4)) as i32;
                    let e = 128 * n + 32 * k + l;
                    lanes[l / 4] += sc[e / 16] as i32 * q * xq[e] as i32;
                }
            }
        }
        for (k, (l, v)) in acc.iter_mut().zip(lanes).enumerate() {
            let off = sc[2 * k] as i32 * bs[2 * k] + sc[2 * k + 1] as i32 * bs[2 * k + 1];
            *l = d.mul_add((v - 32 * off) as f32, *l);
        }
    }
    hsum8(&acc)
}

/// A 256-block whose number i stands for `d · sc_(i/16) · w_i − dmin · mn_(i/16)`, with
/// small signed integers `w` and `sc` (and `mn`, zero where the type has none): Q2_K,
/// Q3_K and IQ4_XS (whose sub-blocks of 32 give both their groups of 16 one scale), as
/// the dots read them.
pub(crate) trait K16Block: Block {
    /// Whether the type has minimums (Q2_K).
    const HAS_MIN: bool;
    /// `(d, dmin)` as f32 (`dmin` 0 for the types without minimums).
    fn scales_f32(&self) -> (f32, f32);
    /// The 256 weight integers `w` (Q2_K: q; Q3_K: q − 4; IQ4_XS: K[q]).
    fn ints(&self) -> [i32; 256];
    /// The sixteen groups' scales and minimums.
    fn groups(&self) -> ([i32; 16], [i32; 16]);
}

impl K16Block for BlockQ2_K {
    const HAS_MIN: bool = true;
    fn scales_f32(&self) -> (f32, f32) {
        (f16_value(self.d), f16_value(self.dmin))
    }
    fn ints(&self) -> [i32; 256] {
        std::array::from_fn(|i| {
            let (n, k, l) = (i / 128, (i % 128) / 32, i % 32);
            ((self.qs[32 * n + l] >> (2 * k)) & 3) as i32
        })
    }
    fn groups(&self) -> ([i32; 16], [i32; 16]) {
        (
            self.scales.map(|s| (s & 0x0F) as i32),
            self.scales.map(|s| (s >> 4) as i32),
        )
    }
}

impl K16Block for BlockQ3_K {
    const HAS_MIN: bool = false;
    fn scales_f32(&self) -> (f32, f32) {
        (f16_value(self.d), 0.0)
    }
    fn ints(&self) -> [i32; 256] {
        std::array::from_fn(|i| {
            let (n, k, l) = (i / 128, (i % 128) / 32, i % 32);
            let low = ((self.qs[32 * n + l] >> (2 * k)) & 3) as i32;
            let high = ((self.hmask[l] >> (4 * n + k)) & 1) as i32;
            (low | (high << 2)) - 4
        })
    }
    fn groups(&self) -> ([i32; 16], [i32; 16]) {
        (q3_k_scales(&self.scales).map(|s| s as i32), [0; 16])
    }
}

impl K16Block for BlockIQ4_XS {
    const HAS_MIN: bool = false;
    fn scales_f32(&self) -> (f32, f32) {
        (f16_value(self.d), 0.0)
    }
    fn ints(&self) -> [i32; 256] {
        let mut w = [0i32; 256];
        for (j, run) in w.chunks_exact_mut(32).enumerate() {
            for (w, q) in run
                .iter_mut()
                .zip(iq4_indices(&self.qs[16 * j..16 * j + 16]))
            {
                *w = KVALUES_IQ4NL[q as usize] as i32;
            }
        }
        w
    }
    fn groups(&self) -> ([i32; 16], [i32; 16]) {
        let sc = self.sub_scales();
        (std::array::from_fn(|g| sc[g / 2] as i32), [0; 16])
    }
}

/// The integer parts of one [`K16Block`] against its 256 activations `xq` and their
/// 16-sums `bsums`, as llama.cpp's AVX2 dots hold them: eight i32 lanes (lane k:
/// `Σ sc · w · qx` over numbers 4k..4k+3 of every 32) and, per pair of groups
/// (2k, 2k + 1), `mn_2k · s_2k + mn_2k+1 · s_2k+1`. All exact integers.
pub(crate) fn k16_parts<B: K16Block>(b: &B, xq: &[i8], bsums: &[i32]) -> ([i32; 8], [i32; 8]) {
    let w = b.ints();
    let (sc, mn) = b.groups();
    let mut lanes = [0i32; 8];
    for (e, (&w, &x)) in w.iter().zip(xq).enumerate() {
        lanes[(e % 32) / 4] += sc[e / 16] * w * x as i32;
    }
    let mins = std::array::from_fn(|k| mn[2 * k] * bsums[2 * k] + mn[2 * k + 1] * bsums[2 * k + 1]);
    (lanes, mins)
}

/// Block `i` of `a` (a Q8_K row): its 256 values and sixteen 16-sums.
fn q8_k_block(a: &QuantizedActs, i: usize) -> (&[i8], &[i32]) {
    (&a.qs[256 * i..256 * i + 256], &a.bsums[16 * i..16 * i + 16])
}

/// Q2_K in llama.cpp's `ggml_vec_dot_q2_K_q8_K` order (AVX2): per block, each of
/// eight lanes first `fma(−dx · dmin, M_k, acc_k)` with `M_k` the minimums' pair sum
/// ([`k16_parts`]), then `fma(dx · d, S_k, acc_k)`; the lanes summed by [`hsum8`].
fn dot_q2_k(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = [0.0f32; 8];
    for (i, b) in blocks::<BlockQ2_K>(row).iter().enumerate() {
        let (xq, bs) = q8_k_block(a, i);
        let (lanes, mins) = k16_parts(b, xq, bs);
        let (dw, dminw) = b.scales_f32();
        let d = a.d[i] * dw;
        let dmin = -a.d[i] * dminw;
        for ((l, &s), &m) in acc.iter_mut().zip(&lanes).zip(&mins) {
            *l = dmin.mul_add(m as f32, *l);
            *l = d.mul_add(s as f32, *l);
        }
    }
    hsum8(&acc)
}

/// Q3_K and IQ4_XS in llama.cpp's `ggml_vec_dot_q3_K_q8_K` / `_iq4_xs_q8_K` order
/// (AVX2): per block, each of eight lanes `fma(dx · d, S_k, acc_k)` ([`k16_parts`]);
/// the lanes summed by [`hsum8`].
pub(crate) fn dot_k16_lanes<B: K16Block>(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = [0.0f32; 8];
    for (i, b) in blocks::<B>(row).iter().enumerate() {
        let (xq, bs) = q8_k_block(a, i);
        let (lanes, _) = k16_parts(b, xq, bs);
        let d = a.d[i] * b.scales_f32().0;
        for (l, &s) in acc.iter_mut().zip(&lanes) {
            *l = d.mul_add(s as f32, *l);
        }
    }
    hsum8(&acc)
}

fn dot_q3_k(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_k16_lanes::<BlockQ3_K>(row, a)
}

fn dot_iq4_xs(row: &[u8], a: &QuantizedActs) -> f32 {
    dot_k16_lanes::<BlockIQ4_XS>(row, a)
}

/// Q2_K, Q3_K and IQ4_XS in the order of llama.cpp's tiled product (see
/// [`dot_k45_tiled`]): per block `r = fma(−dmin, M, d · S)` (`r = d · S` without
/// minimums) with `S`, `M` the block's exact totals, then `acc = fma(r, dx, acc)`.
pub(crate) fn dot_k16_tiled<B: K16Block>(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = 0.0f32;
    for (i, b) in blocks::<B>(row).iter().enumerate() {
        let (xq, bs) = q8_k_block(a, i);
        let (lanes, mins) = k16_parts(b, xq, bs);
        let (d, dmin) = b.scales_f32();
        let s: i32 = lanes.iter().sum();
        let m: i32 = mins.iter().sum();
        let r = if B::HAS_MIN {
            (-dmin).mul_add(m as f32, d * s as f32)
        } else {
            d * s as f32
        };
        acc = r.mul_add(a.d[i], acc);
    }
    acc
}

/// `Σ K[q] · qx` of one IQ4_NL block, in eight lanes (lane k: numbers 4k..4k+3).
fn iq4_nl_lanes(b: &BlockIQ4_NL, xq: &[i8]) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (e, (q, &x)) in iq4_indices(&b.qs).into_iter().zip(xq).enumerate() {
        lanes[e / 4] += KVALUES_IQ4NL[q as usize] as i32 * x as i32;
    }
    lanes
}

/// IQ4_NL in llama.cpp's `ggml_vec_dot_iq4_nl_q8_0` order (AVX2): blocks in pairs, the
/// first of each pair into one eight-lane accumulator and the second into another, each
/// lane `fma(dx · d, S_k, acc_k)`; the two accumulators added lane by lane and summed
/// by [`hsum8`]; a last unpaired block added as `fma(dx · d, S, sum)`.
fn dot_iq4_nl(row: &[u8], a: &QuantizedActs) -> f32 {
    let bl = blocks::<BlockIQ4_NL>(row);
    let mut acc = [[0.0f32; 8]; 2];
    let pairs = bl.len() / 2 * 2;
    for (i, b) in bl[..pairs].iter().enumerate() {
        let lanes = iq4_nl_lanes(b, &a.qs[32 * i..32 * i + 32]);
        let d = a.d[i] * f16_value(b.d);
        for (l, &s) in acc[i % 2].iter_mut().zip(&lanes) {
            *l = d.mul_add(s as f32, *l);
        }
    }
    let both: [f32; 8] = std::array::from_fn(|k| acc[0][k] + acc[1][k]);
    let mut sum = hsum8(&both);
    for (i, b) in bl.iter().enumerate().skip(pairs) {
        let s: i32 = iq4_nl_lanes(b, &a.qs[32 * i..32 * i + 32]).iter().sum();
        sum = (a.d[i] * f16_value(b.d)).mul_add(s as f32, sum);
    }
    sum
}

/// IQ4_NL in the order of llama.cpp's tinyBLAS (`tinyBLAS_Q0_AVX<block_iq4_nl>`, its
/// product of a prompt with an IQ4_NL matrix it has not repacked: a row count not a
/// multiple of 8): one eight-lane accumulator, per block each lane
/// `acc_k = fma(d · dx, S_k, acc_k)` with `S_k` the exact `Σ K[q] · qx` of numbers
/// 4k..4k+3 ([`iq4_nl_lanes`]); the lanes summed by [`hsum8`] (the 32-blocks' order,
/// [`dot_blocks`], which tinyBLAS shares with their `vec_dot`s).
pub(crate) fn dot_iq4_nl_chain(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = [0.0f32; 8];
    for (i, b) in blocks::<BlockIQ4_NL>(row).iter().enumerate() {
        let lanes = iq4_nl_lanes(b, &a.qs[32 * i..32 * i + 32]);
        let d = f16_value(b.d) * a.d[i];
        for (l, &s) in acc.iter_mut().zip(&lanes) {
            *l = d.mul_add(s as f32, *l);
        }
    }
    hsum8(&acc)
}

/// IQ4_NL in the order of llama.cpp's repacked kernels (its weights interleaved eight
/// rows at a time, `ggml_gemv_iq4_nl_8x8_q8_0` and `ggml_gemm_iq4_nl_8x8_q8_0`, which
/// it uses for every IQ4_NL matrix whose row count is a multiple of 8 on an AVX2 CPU;
/// one activation row and four sum alike): one f32 chain, per block
/// `acc = fma(S, d · dx, acc)` with `S` the block's exact `Σ K[q] · qx`.
pub(crate) fn dot_iq4_nl_repacked(row: &[u8], a: &QuantizedActs) -> f32 {
    let mut acc = 0.0f32;
    for (i, b) in blocks::<BlockIQ4_NL>(row).iter().enumerate() {
        let s: i32 = iq4_nl_lanes(b, &a.qs[32 * i..32 * i + 32]).iter().sum();
        acc = (s as f32).mul_add(f16_value(b.d) * a.d[i], acc);
    }
    acc
}
