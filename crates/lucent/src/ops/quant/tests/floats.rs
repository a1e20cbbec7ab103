//! The float weight types (`F32`, `F16`, `BF16`) as [`QMatrix`]es: every kernel of every
//! instruction-set level against its plain twin bit for bit (llama.cpp's `vec_dot` per
//! output, and tinyBLAS's chain for prompts), the products' choice between the two as
//! llama.cpp makes it, and the activations' rounding to f16 / bfloat16.
#![cfg(test)]

use half::{bf16, f16};
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::ops::quant::activations::{round_bf16, round_f16};
use crate::ops::quant::dispatch::{chain_kernels, dot_kernel, takes_chain};
use crate::ops::quant::{reference, QMatrix};
use crate::runtime::{Isa, Numerics};
use crate::tensor::quant::GgmlType;
use crate::Result;

const FLOATS: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];

/// The largest finite f16, and an f16 subnormal, an f32 subnormal, a bfloat16 one.
const EXTREMES: [f32; 8] = [
    65504.0,
    -65504.0,
    5.9604645e-8,
    -1.1920929e-7,
    1e-40,
    -2e-39,
    0.0,
    -0.0,
];

/// One number for a `t` weight: mostly N(0, 1)-ish, sometimes an extreme value.
fn number(rng: &mut StdRng) -> f32 {
    if rng.random_range(0..16) == 0 {
        EXTREMES[rng.random_range(0..EXTREMES.len())]
    } else {
        rng.random_range(-2.0f32..2.0)
    }
}

/// `rows × cols` random numbers of `t` (with extremes), as a matrix.
fn random_float_matrix(t: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> Result<QMatrix> {
    let mut b = Vec::with_capacity(rows * t.row_bytes(cols)?);
    for _ in 0..rows * cols {
        let v = number(rng);
        match t {
            GgmlType::F32 => b.extend(v.to_le_bytes()),
            GgmlType::F16 => b.extend(f16::from_f32(v).to_bits().to_le_bytes()),
            _ => b.extend(bf16::from_f32(v).to_bits().to_le_bytes()),
        }
    }
    QMatrix::from_vec(t, rows, cols, b)
}

/// What llama.cpp gives for output (`r`, `i`) of a product of `t` rows, by the twins:
/// the chain where it takes tinyBLAS, else the dot.
fn twin_output(m: &QMatrix, a: &crate::ops::quant::QuantizedActs, i: usize, chain: bool) -> f32 {
    if chain {
        reference::dot_float_chain(m.dtype(), m.row_bytes_of(i), a)
    } else {
        reference::kernel(m.dtype())(m.row_bytes_of(i), a)
    }
}

/// Every float kernel of every level this CPU runs equals its twin bit for bit, on
/// random and extreme numbers, rows of every length from 1 (not multiples of 8 or 32
/// among them), and prompts of 1 to 9 rows (multiples of 4 and not) against matrices
/// whose row count is a multiple of 4 and not.
#[test]
fn float_kernels_of_every_level_equal_the_twin_bit_for_bit() -> Result<()> {
    for isa in Isa::available() {
        let rt = crate::Runtime::builder().threads(2).isa(isa).build()?;
        rt.install(|| float_kernels_equal_the_twin(isa))?;
    }
    Ok(())
}

fn float_kernels_equal_the_twin(isa: Isa) -> Result<()> {
    assert_eq!(crate::runtime::isa(), isa);
    let mut rng = StdRng::seed_from_u64(31);
    for t in FLOATS {
        for cols in [
            1usize, 3, 7, 8, 9, 16, 31, 32, 33, 36, 40, 64, 100, 142, 256, 1000,
        ] {
            for rows in [1usize, 3, 4, 5, 8, 12] {
                let m = random_float_matrix(t, rows, cols, &mut rng)?;
                let x: Vec<f32> = (0..cols * 9).map(|_| number(&mut rng)).collect();
                let what = |s: &str| format!("{isa}: {t} {rows}×{cols}: {s}");
                // One token: the dot, through matvec and the kernel itself.
                let a = m.prepare(&x[..cols])?;
                let mut y = vec![0.0; rows];
                m.matvec_prepared(&a, &mut y)?;
                for (i, &got) in y.iter().enumerate() {
                    let want = twin_output(&m, &a, i, false);
                    assert_eq!(got.to_bits(), want.to_bits(), "{} row {i}", what("matvec"));
                    let dot = dot_kernel(t, isa)(m.row_bytes_of(i), &a);
                    assert_eq!(dot.to_bits(), want.to_bits(), "{} row {i}", what("dot"));
                }
                // The chain kernels, one activation row and four, where they apply.
                if cols.is_multiple_of(8) {
                    let (k, k4) = chain_kernels(t, isa).expect("a float type");
                    let acts: Vec<_> = (0..4)
                        .map(|r| m.prepare(&x[r * cols..(r + 1) * cols]))
                        .collect::<Result<_>>()?;
                    for i in 0..rows {
                        let w = m.row_bytes_of(i);
                        let four = k4(w, [&acts[0], &acts[1], &acts[2], &acts[3]]);
                        for (r, a) in acts.iter().enumerate() {
                            let want = reference::dot_float_chain(t, w, a);
                            assert_eq!(
                                k(w, a).to_bits(),
                                want.to_bits(),
                                "{} row {i}",
                                what("chain")
                            );
                            assert_eq!(
                                four[r].to_bits(),
                                want.to_bits(),
                                "{} row {i}",
                                what("chain of 4")
                            );
                        }
                    }
                }
                // Prompts: each output as llama.cpp computes it (RowInvariant: the dot).
                for n in 1..=9 {
                    let xs = &x[..n * cols];
                    for numerics in [Numerics::LlamaCpp, Numerics::RowInvariant] {
                        let got = m.matmul_t_quantized(xs, n, numerics)?; // (n, rows)
                        let chain = !numerics.row_invariant() && takes_chain(t, rows, cols, n);
                        for r in 0..n {
                            let a = m.prepare(&xs[r * cols..(r + 1) * cols])?;
                            for i in 0..rows {
                                let want = twin_output(&m, &a, i, chain);
                                assert_eq!(
                                    got[r * rows + i].to_bits(),
                                    want.to_bits(),
                                    "{} prompt of {n} ({numerics:?}), row {r}, output {i}",
                                    what("matmul_t_quantized")
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// llama.cpp's choice for a float prompt: tinyBLAS only for two rows or more, rows of a
/// multiple of 8 numbers and a multiple of 4 rows (a fused matrix's whole count); a
/// mixture's expert never.
#[test]
fn float_prompts_take_tinyblas_where_llama_cpp_does() -> Result<()> {
    assert!(takes_chain(GgmlType::F16, 128, 128, 2));
    assert!(!takes_chain(GgmlType::F16, 128, 128, 1));
    assert!(!takes_chain(GgmlType::F32, 142, 128, 5));
    assert!(!takes_chain(GgmlType::BF16, 128, 142, 5));
    assert!(!takes_chain(GgmlType::Q8_0, 128, 128, 5));
    let mut rng = StdRng::seed_from_u64(3);
    // 3 rows of a fused matrix of 12: tinyBLAS, as for the whole; as an expert: the dot.
    let part = random_float_matrix(GgmlType::F16, 3, 64, &mut rng)?;
    let x: Vec<f32> = (0..5 * 64).map(|_| number(&mut rng)).collect();
    for (m, chain) in [
        (part.clone(), false),
        (part.clone().part_of(12), true),
        (part.part_of(12).expert(), false),
    ] {
        let got = m.matmul_t_quantized(&x, 5, Numerics::LlamaCpp)?; // (5, 3)
        for r in 0..5 {
            let a = m.prepare(&x[r * 64..(r + 1) * 64])?;
            for i in 0..3 {
                let want = twin_output(&m, &a, i, chain);
                assert_eq!(
                    got[r * 3 + i].to_bits(),
                    want.to_bits(),
                    "chain {chain}, row {r}, output {i}"
                );
            }
        }
    }
    Ok(())
}

/// The activations' rounding: to f16 as `half` rounds (to nearest even, ±∞ past
/// 65519.99, subnormals kept), to bfloat16 by llama.cpp's formula, which equals
/// `half`'s rounding to nearest even on every non-NaN number and keeps NaN a NaN.
#[test]
fn activations_round_to_the_weights_type() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(9);
    for _ in 0..100_000 {
        let x = f32::from_bits(rng.random());
        let b = round_bf16(x);
        if x.is_nan() {
            assert!(b.is_nan(), "{x:?}");
        } else {
            assert_eq!(b.to_bits(), bf16::from_f32(x).to_f32().to_bits(), "{x:e}");
        }
        if !x.is_nan() {
            assert_eq!(
                round_f16(x).to_bits(),
                f16::from_f32(x).to_f32().to_bits(),
                "{x:e}"
            );
        }
    }
    let x = [1.0f32, 65519.0, 65520.0, 3e-8, 1e-3];
    let a16 = crate::ops::quant::quantize_activations(GgmlType::F16, &x)?;
    let want: Vec<f32> = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(a16.dequantize(), want);
    let a32 = crate::ops::quant::quantize_activations(GgmlType::F32, &x)?;
    assert_eq!(a32.dequantize(), x.to_vec());
    let abf = crate::ops::quant::quantize_activations(GgmlType::BF16, &x)?;
    let want: Vec<f32> = x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    assert_eq!(abf.dequantize(), want);
    Ok(())
}
