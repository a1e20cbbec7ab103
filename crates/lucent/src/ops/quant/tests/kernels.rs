//! The private kernels of every instruction-set level against the scalar twin, bit for
//! bit (`formats` holds the entry points to the twins and to the formats' definitions).
#![cfg(test)]

use half::f16;
use rand::{rngs::StdRng, Rng, SeedableRng};

use super::formats::scale_offsets;
use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::dispatch::{
    chain_kernels, dot_kernel, repacked_kernels, tiled_kernels, DotFn,
};
use crate::ops::quant::{avx512, reference, QMatrix};
use crate::runtime::Isa;
use crate::tensor::quant::{BlockIQ4_XS, BlockQ2_K, BlockQ3_K, GgmlType, QK, QK_K};
use crate::Result;

/// `rows` random rows of `t` with finite f16 scales (and minimums) in every block.
fn random_matrix(t: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> Result<QMatrix> {
    let mut b: Vec<u8> = (0..rows * t.row_bytes(cols)?)
        .map(|_| rng.random())
        .collect();
    for blk in b.chunks_exact_mut(t.block_bytes()) {
        for &at in scale_offsets(t) {
            let v = f16::from_f32(rng.random_range(-0.1f32..0.1)).to_le_bytes();
            blk[at..at + 2].copy_from_slice(&v);
        }
    }
    QMatrix::from_vec(t, rows, cols, b)
}

/// The 32-block types (the decode and prefill tiles' kinds).
const BLOCK32_TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// `len` activations uniform in (−1, 1) with every 97th (from the 6th) an outlier of
/// 40, so a row's integer sums reach past 2²⁴ and round.
fn with_outliers(len: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..len)
        .map(|p| {
            if p % 97 == 5 {
                40.0
            } else {
                rng.random_range(-1.0..1.0)
            }
        })
        .collect()
}

/// Every output of `ys` (t, rows), the product of `m` with the activation rows `xs`
/// (t, cols), equals `twin`'s dot of that weight row with that activation row, bit for
/// bit; `what(r, i)` names activation row r and weight row i in a failure.
fn each_output_is_the_twins(
    m: &QMatrix,
    xs: &[f32],
    ys: &[f32],
    twin: DotFn,
    what: impl Fn(usize, usize) -> String,
) -> Result<()> {
    let rows = m.rows();
    for (r, x) in xs.chunks_exact(m.cols()).enumerate() {
        let a = m.prepare(x)?;
        for i in 0..rows {
            let want = twin(m.row_bytes_of(i), &a);
            assert_eq!(ys[r * rows + i].to_bits(), want.to_bits(), "{}", what(r, i));
        }
    }
    Ok(())
}

/// `check(isa)` in a runtime capped at every level this CPU runs, with each of
/// `threads` threads.
fn at_every_level(threads: &[usize], check: impl Fn(Isa) -> Result<()> + Sync) -> Result<()> {
    for isa in Isa::available() {
        for &n in threads {
            let rt = crate::Runtime::builder().threads(n).isa(isa).build()?;
            rt.install(|| check(isa))?;
        }
    }
    Ok(())
}

/// Every kernel of every level this CPU runs against the scalar twin, bit for bit:
/// the decode tiles of the 32-block types (and the AVX-512 four-row tile, which
/// machines without GFNI take), the K-quant dots, their tiled and repacked orders.
#[test]
fn kernels_of_every_level_equal_the_twin_bit_for_bit() -> Result<()> {
    for isa in Isa::available() {
        let rt = crate::Runtime::builder().threads(1).isa(isa).build()?;
        rt.install(|| kernels_equal_the_twin(isa))?;
    }
    Ok(())
}

/// A prompt's products of the 32-block types (more rows than the unpacked few-row
/// tiles take, so the AVX-512 level runs the paired prefill tiles: pairs of four and of
/// two, a last odd row, short row blocks, groups of sixteen blocks and a short one) at
/// every level, one thread and two, against the scalar twin's dot of each row, bit for
/// bit.
#[test]
fn prompt_products_of_every_level_equal_the_twin_bit_for_bit() -> Result<()> {
    at_every_level(&[1, 2], prompt_products_equal_the_twin)
}

/// A repacked Q4_K matrix's token products, alone and grouped (`avx512::kgemv::q4_k_gemv16` on AVX-512:
/// sixteen weight rows a call, a last group of eight through the one-row kernel;
/// `avx2_kgemv::q4_k_gemv8` on AVX2: eight a call) and its
/// row-invariant prompt products (a batched step, an expert's rows) at every level, one
/// thread and two, against the twin's `gemv` order of each row, bit for bit; the same
/// for a repacked Q4_0 matrix (`avx512::kgemv::q4_0_gemv16` on AVX-512: odd and even
/// block counts). Rows are multiples of 8 (else the matrix is not repacked); blocks of
/// large and small scales and activations with an outlier, so the integer sums reach
/// past 2²⁴ and round.
#[test]
fn repacked_q4_k_token_products_of_every_level_equal_the_twin_bit_for_bit() -> Result<()> {
    at_every_level(&[1, 2], repacked_q4_k_token_products_equal_the_twin)
}

fn repacked_q4_k_token_products_equal_the_twin(isa: Isa) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(11);
    for (t, block, block_counts) in [
        (GgmlType::Q4_K, QK_K, &[1usize, 3, 8][..]),
        (GgmlType::Q4_0, QK, &[1, 2, 3, 18, 33][..]),
    ] {
        repacked_token_products_equal_the_twin(isa, t, block, block_counts, &mut rng)?;
    }
    Ok(())
}

fn repacked_token_products_equal_the_twin(
    isa: Isa,
    t: GgmlType,
    block: usize,
    block_counts: &[usize],
    rng: &mut StdRng,
) -> Result<()> {
    let twin = reference::repacked_kernels(t).0;
    for rows in [8usize, 16, 40, 264] {
        for &blocks in block_counts {
            let cols = block * blocks;
            let m = random_matrix(t, rows, cols, rng)?;
            for n in [1usize, 3, 9] {
                let xs = with_outliers(n * cols, rng);
                let ys = if n == 1 {
                    // A token's products alone and grouped (Q, K, V; gate and up).
                    let group = QMatrix::matvec_group(&[&m, &m], &xs)?;
                    let ys = m.matvec(&xs)?;
                    assert!(group.iter().all(|g| *g == ys), "{isa}: matvec_group");
                    ys
                } else {
                    // (n, rows)
                    m.matmul_t_quantized(&xs, n, crate::Numerics::RowInvariant)?
                };
                each_output_is_the_twins(&m, &xs, &ys, twin, |r, i| {
                    format!("{isa}: {t} {rows}×{cols}, {n} rows, row {r}, weight row {i}")
                })?;
            }
        }
    }
    Ok(())
}

/// The prompt products of `avx512::kgemm` (sixteen weight rows by four activation rows
/// a call; a task's last rows outside whole sixteens through the four-row kernel, the
/// activation rows outside whole fours through the one-row kernel) at every level, one
/// thread and two, against the twin of each output, bit for bit: a repacked Q4_K
/// matrix in llama.cpp's grouped order (whole fours; the `gemv` order for the rest)
/// Q4_K (not repacked) and Q5_K matrices in their tiled order (`k45_tiled_gemm16x4`; 8
/// rows or more, the token's order below), Q6_K, Q2_K, Q3_K and IQ4_XS matrices in
/// their tiled order (`q6_k_gemm16x4`), and
/// a repacked Q4_0 matrix (`q4_0_gemm16x4`; its one chain per output, under llama.cpp's
/// numerics and the row-invariant ones).
/// Row counts with and without whole sixteens (Q4_K's multiples of 8, else it is not
/// repacked); an outlier among the activations, so the integer sums reach past 2²⁴
/// and round.
#[test]
fn sixteen_row_prompt_products_of_every_level_equal_the_twin_bit_for_bit() -> Result<()> {
    at_every_level(&[1, 2], sixteen_row_prompt_products_equal_the_twin)
}

fn sixteen_row_prompt_products_equal_the_twin(isa: Isa) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(13);
    for t in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_XS,
        GgmlType::Q4_0,
    ] {
        let twin = |w: &[u8], a: &QuantizedActs, r: usize, n: usize, rows: usize| match t {
            GgmlType::Q4_K if rows.is_multiple_of(8) && r < n - n % 4 => {
                reference::dot_q4_k_repacked(w, a, true)
            }
            GgmlType::Q4_K if rows.is_multiple_of(8) => reference::repacked_kernels(t).0(w, a),
            GgmlType::Q4_0 => reference::repacked_kernels(t).0(w, a),
            GgmlType::Q4_K | GgmlType::Q5_K if n >= 8 => {
                reference::dot_k45_tiled(w, a, t == GgmlType::Q5_K)
            }
            GgmlType::Q6_K if n >= 8 => reference::dot_q6_k_tiled(w, a),
            GgmlType::Q2_K if n >= 8 => reference::dot_k16_tiled::<BlockQ2_K>(w, a),
            GgmlType::Q3_K if n >= 8 => reference::dot_k16_tiled::<BlockQ3_K>(w, a),
            GgmlType::IQ4_XS if n >= 8 => reference::dot_k16_tiled::<BlockIQ4_XS>(w, a),
            _ => reference::kernel(t)(w, a),
        };
        // Q4_K: repacked (multiples of 8) and not (its tiled order from 8 prompt rows).
        let row_counts: &[usize] = match t {
            GgmlType::Q4_K => &[8, 15, 16, 37, 40, 264],
            GgmlType::Q4_0 => &[8, 16, 40, 264],
            _ => &[15, 16, 37, 264],
        };
        let (block, block_counts) = if t == GgmlType::Q4_0 {
            (QK, &[1usize, 3, 18, 33][..])
        } else {
            (QK_K, &[1, 3, 13][..])
        };
        // Q4_0 sums four rows as one, so it takes its sixteen-row kernel under every
        // numerics.
        let numerics: &[crate::Numerics] = if t == GgmlType::Q4_0 {
            &[crate::Numerics::LlamaCpp, crate::Numerics::RowInvariant]
        } else {
            &[crate::Numerics::LlamaCpp]
        };
        for (&rows, &numerics) in row_counts
            .iter()
            .flat_map(|r| numerics.iter().map(move |n| (r, n)))
        {
            for &blocks in block_counts {
                let cols = block * blocks;
                let m = random_matrix(t, rows, cols, &mut rng)?;
                for n in [4usize, 9, 35] {
                    let xs = with_outliers(n * cols, &mut rng);
                    // (n, rows)
                    let ys = m.matmul_t_quantized(&xs, n, numerics)?;
                    for (r, x) in xs.chunks_exact(cols).enumerate() {
                        let a = m.prepare(x)?;
                        for i in 0..rows {
                            let want = twin(m.row_bytes_of(i), &a, r, n, rows);
                            assert_eq!(
                                ys[r * rows + i].to_bits(),
                                want.to_bits(),
                                "{isa}: {t} {rows}×{cols}, {n} rows, row {r}, weight row {i}"
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn prompt_products_equal_the_twin(isa: Isa) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(7);
    for t in BLOCK32_TYPES {
        // Row counts off multiples of 8 (Q4_0's are repacked, another order).
        for rows in [1usize, 5, 7, 13] {
            for blocks in [1usize, 15, 16, 17, 33] {
                let cols = QK * blocks;
                let m = random_matrix(t, rows, cols, &mut rng)?;
                for n in [17usize, 18, 23] {
                    let xs: Vec<f32> = (0..n * cols).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let ys = m.matmul_t_quantized(&xs, n, crate::Numerics::LlamaCpp)?; // (n, rows)
                    each_output_is_the_twins(&m, &xs, &ys, reference::kernel(t), |r, i| {
                        format!("{isa}: {t} {rows}×{cols}, prompt of {n} row {r}, weight row {i}")
                    })?;
                }
            }
        }
    }
    Ok(())
}

fn kernels_equal_the_twin(isa: Isa) -> Result<()> {
    assert_eq!(crate::runtime::isa(), isa);
    let mut rng = StdRng::seed_from_u64(5);
    for t in BLOCK32_TYPES {
        for rows in [1usize, 3, 4, 5, 9] {
            for blocks in [1usize, 2, 3, 15, 16, 17, 18, 33] {
                let cols = QK * blocks;
                let m = random_matrix(t, rows, cols, &mut rng)?;
                let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0..1.0)).collect();
                let a = m.prepare(&x)?;
                let mut y = vec![0.0; rows];
                m.matvec_prepared(&a, &mut y)?; // this level's tiles or dots
                for (i, &got) in y.iter().enumerate() {
                    let want = reference::kernel(t)(m.row_bytes_of(i), &a);
                    let what = format!("{isa}: {t} {rows}×{cols} row {i}");
                    assert_eq!(got.to_bits(), want.to_bits(), "{what}");
                    let dot = dot_kernel(t, isa)(m.row_bytes_of(i), &a);
                    assert_eq!(dot.to_bits(), want.to_bits(), "{what}: dot");
                }
                // matvec took the paired tiles where the CPU runs them; the four-row
                // tile it takes elsewhere gives the same numbers.
                #[cfg(target_arch = "x86_64")]
                if rows >= 4 && avx512::available(isa) {
                    let (Some(k41), _, _) = (match t {
                        GgmlType::Q4_0 => avx512::decode::tiles::<{ avx512::Q4_0 }>(),
                        GgmlType::Q4_1 => avx512::decode::tiles::<{ avx512::Q4_1 }>(),
                        GgmlType::Q5_0 => avx512::decode::tiles::<{ avx512::Q5_0 }>(),
                        GgmlType::Q5_1 => avx512::decode::tiles::<{ avx512::Q5_1 }>(),
                        _ => avx512::decode::tiles::<{ avx512::Q8_0 }>(),
                    }) else {
                        panic!("AVX-512 has a four-row token tile");
                    };
                    let rs: [&[u8]; 4] = std::array::from_fn(|w| m.row_bytes_of(w));
                    let mut o = [[0.0f32; 1]; 4];
                    // SAFETY: available(isa), a level the runtime capped to the CPU's;
                    // the rows and activations are this matrix's.
                    unsafe { k41(rs, [&[]; 4], [&a], &mut o) };
                    for w in 0..4 {
                        assert_eq!(o[w][0].to_bits(), y[w].to_bits(), "{t} 4×{cols} row {w}");
                    }
                }
            }
        }
    }
    for t in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_XS,
    ] {
        for blocks in [1usize, 2, 3, 5] {
            let cols = QK_K * blocks;
            let m = random_matrix(t, 4, cols, &mut rng)?;
            let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-3.0..3.0)).collect();
            let a = m.prepare(&x)?;
            for i in 0..4 {
                let row = m.row_bytes_of(i);
                let what = format!("{isa}: {t} {cols} row {i}");
                // llama.cpp's dot order, as the twin.
                let (got, twin) = (dot_kernel(t, isa)(row, &a), reference::kernel(t)(row, &a));
                assert_eq!(got.to_bits(), twin.to_bits(), "{what}");
                #[cfg(target_arch = "x86_64")]
                if let Some(k4) = avx512::kernel4(t).filter(|_| avx512::available(isa)) {
                    for v in k4(row, [&a; 4]) {
                        assert_eq!(v.to_bits(), twin.to_bits(), "{what}: four rows");
                    }
                }
                // The tiled order (prompts of 8 rows or more).
                let Some((k1, k4)) = tiled_kernels(t, isa) else {
                    panic!("{t}: no tiled kernels at {isa}");
                };
                let tw = reference::tiled_kernels(t).map(|k| k.0(row, &a));
                let tw = tw.unwrap_or_else(|| panic!("{t}: no tiled twin"));
                for v in std::iter::once(k1(row, &a)).chain(k4(row, [&a; 4])) {
                    assert_eq!(v.to_bits(), tw.to_bits(), "{what}: tiled");
                }
                if t == GgmlType::Q4_K {
                    // The repacked orders, token and grouped prompt rows.
                    let (v1, g4) = repacked_kernels(t, isa);
                    let v = reference::dot_q4_k_repacked(row, &a, false);
                    let g = reference::dot_q4_k_repacked(row, &a, true);
                    assert_eq!(v1(row, &a).to_bits(), v.to_bits(), "{what}: repacked");
                    for x in g4(row, [&a; 4]) {
                        assert_eq!(x.to_bits(), g.to_bits(), "{what}: grouped");
                    }
                }
            }
        }
    }
    // IQ4_NL: its dot (blocks in pairs, odd counts included), its repacked order and
    // tinyBLAS's.
    let t = GgmlType::IQ4_NL;
    for blocks in [1usize, 2, 3, 8, 9] {
        let cols = QK * blocks;
        let m = random_matrix(t, 4, cols, &mut rng)?;
        let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-3.0..3.0)).collect();
        let a = m.prepare(&x)?;
        for i in 0..4 {
            let row = m.row_bytes_of(i);
            let what = format!("{isa}: {t} {cols} row {i}");
            let (got, twin) = (dot_kernel(t, isa)(row, &a), reference::kernel(t)(row, &a));
            assert_eq!(got.to_bits(), twin.to_bits(), "{what}");
            let (v1, v4) = repacked_kernels(t, isa);
            let r = reference::dot_iq4_nl_repacked(row, &a);
            for v in std::iter::once(v1(row, &a)).chain(v4(row, [&a; 4])) {
                assert_eq!(v.to_bits(), r.to_bits(), "{what}: repacked");
            }
            let (c1, c4) = chain_kernels(t, isa).expect("IQ4_NL has tinyBLAS's order");
            let c = reference::dot_iq4_nl_chain(row, &a);
            for v in std::iter::once(c1(row, &a)).chain(c4(row, [&a; 4])) {
                assert_eq!(v.to_bits(), c.to_bits(), "{what}: tinyBLAS's chain");
            }
        }
    }
    // Q4_0 with a multiple of 8 rows, which llama.cpp repacks: its repacked order (one
    // chain) for a token, a prompt and each kernel.
    let t = GgmlType::Q4_0;
    for blocks in [1usize, 2, 3, 9] {
        let cols = QK * blocks;
        let m = random_matrix(t, 8, cols, &mut rng)?;
        let n = 5;
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.random_range(-3.0..3.0)).collect();
        let ys = m.matmul_t_quantized(&xs, n, crate::Numerics::LlamaCpp)?; // (n, 8)
        let (v1, v4) = repacked_kernels(t, isa);
        for (r, x) in xs.chunks_exact(cols).enumerate() {
            let a = m.prepare(x)?;
            let y = m.matvec(x)?;
            for i in 0..8 {
                let row = m.row_bytes_of(i);
                let want = reference::dot_q4_0_repacked(row, &a);
                let what = format!("{isa}: repacked {t} 8×{cols} row {i}");
                assert_eq!(y[i].to_bits(), want.to_bits(), "{what}: token");
                assert_eq!(
                    ys[r * 8 + i].to_bits(),
                    want.to_bits(),
                    "{what}: prompt row {r}"
                );
                for v in std::iter::once(v1(row, &a)).chain(v4(row, [&a; 4])) {
                    assert_eq!(v.to_bits(), want.to_bits(), "{what}: kernels");
                }
            }
        }
    }
    // The low-bit types on extreme blocks: every quant byte 0xFF, 0x80 or random, the
    // scales at f16's largest magnitude, its smallest subnormal, or zero, against
    // activations at full scale of either sign: the 16-bit pair sums must not saturate.
    for t in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_XS,
        GgmlType::IQ4_NL,
    ] {
        let cols = 3 * QK_K;
        for (case, fill) in [Some(0xFFu8), Some(0x80), None].into_iter().enumerate() {
            let mut m = random_matrix(t, 8, cols, &mut rng)?.bytes().to_vec();
            if let Some(f) = fill {
                m.fill(f);
            }
            for (k, blk) in m.chunks_exact_mut(t.block_bytes()).enumerate() {
                for &at in scale_offsets(t) {
                    let v = [65504.0f32, -65504.0, 6e-8, 0.0][(k + at + case) % 4];
                    blk[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
                }
            }
            let m = QMatrix::from_vec(t, 8, cols, m)?;
            for sign in [1.0f32, -1.0] {
                let x: Vec<f32> = (0..cols).map(|j| sign * (1.0 + (j % 7) as f32)).collect();
                let a = m.prepare(&x)?;
                for i in 0..8 {
                    let row = m.row_bytes_of(i);
                    let what = format!("{isa}: extreme {t} fill {fill:?} sign {sign} row {i}");
                    let twin = reference::kernel(t)(row, &a);
                    assert_eq!(
                        dot_kernel(t, isa)(row, &a).to_bits(),
                        twin.to_bits(),
                        "{what}"
                    );
                    let others = match t {
                        GgmlType::IQ4_NL => {
                            let (v1, v4) = repacked_kernels(t, isa);
                            (reference::dot_iq4_nl_repacked(row, &a), v1, v4)
                        }
                        _ => {
                            let Some((k1, k4)) = tiled_kernels(t, isa) else {
                                panic!("{t}: no tiled kernels at {isa}");
                            };
                            let tw = reference::tiled_kernels(t).map(|k| k.0(row, &a));
                            (tw.unwrap_or_else(|| panic!("{t}: no tiled twin")), k1, k4)
                        }
                    };
                    let (want, k1, k4) = others;
                    for v in std::iter::once(k1(row, &a)).chain(k4(row, [&a; 4])) {
                        assert_eq!(v.to_bits(), want.to_bits(), "{what}: tiled or repacked");
                    }
                    if let Some((c1, c4)) = chain_kernels(t, isa) {
                        let c = reference::dot_iq4_nl_chain(row, &a);
                        for v in std::iter::once(c1(row, &a)).chain(c4(row, [&a; 4])) {
                            assert_eq!(v.to_bits(), c.to_bits(), "{what}: tinyBLAS's chain");
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
