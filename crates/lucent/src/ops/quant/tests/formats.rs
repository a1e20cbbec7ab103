//! Quantised block types: dequantisation against hand-computed values of each format's
//! definition (bit for bit), quantised dots against dequantise-then-dot, every
//! instruction-set path this CPU has (scalar, AVX2, AVX-512) against its scalar twin, and
//! `QMatrix` on awkward shapes.
#![cfg(test)]

use crate::ops::quant::{dequantize, quantize_activations, reference, vec_dot, QMatrix};
use crate::tensor::quant::{
    k_scale_min, k_scales_mins, ActKind, BlockIQ4_XS, BlockQ2_K, BlockQ3_K, GgmlType, QK_K,
};
use crate::{Isa, Numerics, Runtime};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The 32-number block kinds (one tile kernel, llama.cpp's summation order).
const BLOCK32: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_bits().to_le_bytes()
}

fn deq(t: GgmlType, b: &[u8]) -> Vec<f32> {
    let mut y = vec![0.0; t.block_len()];
    dequantize(t, b, &mut y).unwrap();
    y
}

#[test]
fn block_sizes_match_ggml() {
    let expect = [
        (GgmlType::F32, 0, 1, 4),
        (GgmlType::F16, 1, 1, 2),
        (GgmlType::BF16, 30, 1, 2),
        (GgmlType::Q4_0, 2, 32, 18),
        (GgmlType::Q4_1, 3, 32, 20),
        (GgmlType::Q5_0, 6, 32, 22),
        (GgmlType::Q5_1, 7, 32, 24),
        (GgmlType::Q8_0, 8, 32, 34),
        (GgmlType::Q4_K, 12, 256, 144),
        (GgmlType::Q5_K, 13, 256, 176),
        (GgmlType::Q6_K, 14, 256, 210),
        (GgmlType::Q2_K, 10, 256, 84),
        (GgmlType::Q3_K, 11, 256, 110),
        (GgmlType::IQ4_NL, 20, 32, 18),
        (GgmlType::IQ4_XS, 23, 256, 136),
    ];
    for (t, id, bl, bb) in expect {
        assert_eq!(
            (t.id(), t.block_len(), t.block_bytes()),
            (id, bl, bb),
            "{t}"
        );
        assert_eq!(GgmlType::from_id(id), Some(t));
    }
    assert_eq!(GgmlType::from_id(16), None); // IQ2_XXS: not read
    assert!(GgmlType::Q4_K.row_bytes(100).is_err());
}

#[test]
fn float_types_widen_exactly() {
    let mut y = [0.0f32; 2];
    dequantize(GgmlType::F16, &[0x00, 0x3C, 0x00, 0xC0], &mut y).unwrap();
    assert_eq!(y, [1.0, -2.0]);
    dequantize(GgmlType::BF16, &[0x80, 0x3F, 0x00, 0xC0], &mut y).unwrap();
    assert_eq!(y, [1.0, -2.0]);
    dequantize(
        GgmlType::F32,
        &[0.5f32.to_le_bytes(), (-3.25f32).to_le_bytes()].concat(),
        &mut y,
    )
    .unwrap();
    assert_eq!(y, [0.5, -3.25]);
}

#[test]
fn q4_0_block_by_definition() {
    // x = d (q − 8); low nibbles are numbers 0..16, high nibbles 16..32.
    let mut b = h(0.5).to_vec();
    b.extend([0x88u8; 16]);
    b[2] = 0x2F;
    b[2 + 15] = 0x80;
    let y = deq(GgmlType::Q4_0, &b);
    assert_eq!(
        (y[0], y[16], y[15], y[31], y[1]),
        (3.5, -3.0, -4.0, 0.0, 0.0)
    );
}

#[test]
fn q4_1_block_by_definition() {
    // x = d q + m.
    let mut b = [h(0.25), h(-1.0)].concat();
    b.extend([0u8; 16]);
    b[4] = 0x3A;
    let y = deq(GgmlType::Q4_1, &b);
    assert_eq!((y[0], y[16], y[1]), (1.5, -0.25, -1.0));
}

#[test]
fn q5_0_block_by_definition() {
    // x = d ((nibble | bit_i << 4) − 16), bit i of the little-endian u32 qh.
    let qh: u32 = 1 | (1 << 16) | (1 << 5);
    let mut b = h(1.0).to_vec();
    b.extend(qh.to_le_bytes());
    b.extend([0u8; 16]);
    b[6] = 0x21;
    b[6 + 1] = 0xFF;
    let y = deq(GgmlType::Q5_0, &b);
    assert_eq!(
        (y[0], y[16], y[5], y[21], y[1], y[17]),
        (1.0, 2.0, 0.0, -16.0, -1.0, -1.0)
    );
}

#[test]
fn q5_1_block_by_definition() {
    let mut b = [h(0.5), h(2.0)].concat();
    b.extend((1u32 << 31).to_le_bytes());
    b.extend([0u8; 16]);
    b[8 + 15] = 0xF3;
    let y = deq(GgmlType::Q5_1, &b);
    assert_eq!((y[15], y[31], y[0]), (3.5, 17.5, 2.0));
}

#[test]
fn q8_0_block_by_definition() {
    let mut b = h(0.125).to_vec();
    b.extend([0u8; 32]);
    b[2] = (-128i8) as u8;
    b[2 + 31] = 127;
    let y = deq(GgmlType::Q8_0, &b);
    assert_eq!((y[0], y[31], y[5]), (-16.0, 15.875, 0.0));
}

#[test]
fn k_scales_unpack_six_bits() {
    let mut s = [0u8; 12];
    s[0] = 0b11_000011; // sc0 = 3; top bits of sc4 = 3
    s[4] = 0b01_000101; // mn0 = 5; top bits of mn4 = 1
    s[8] = 0x21; // sc4 low = 1, mn4 low = 2
    assert_eq!(k_scale_min(0, &s), (3, 5));
    assert_eq!(k_scale_min(4, &s), (49, 18));
    assert_eq!(k_scale_min(1, &s), (0, 0));
    // All eight at once equal the one-by-one unpacking, on every byte pattern's bits.
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..1000 {
        let s: [u8; 12] = std::array::from_fn(|_| rng.random());
        let (sc, mn) = k_scales_mins(&s);
        for j in 0..8 {
            assert_eq!((sc[j], mn[j]), k_scale_min(j, &s), "{s:?} sub-block {j}");
        }
    }
}

#[test]
fn q4_k_block_by_definition() {
    // x = d·sc_j·q − dmin·mn_j; sub-block 0 = low nibbles of bytes 0..32, 4 = of 64..96.
    let mut b = [h(1.0), h(0.5)].concat();
    let mut s = [0u8; 12];
    s[0] = 0b11_000011;
    s[4] = 0b01_000101;
    s[8] = 0x21;
    b.extend(s);
    let mut qs = [0u8; 128];
    qs[0] = 0x07;
    qs[64] = 0x0A;
    b.extend(qs);
    let y = deq(GgmlType::Q4_K, &b);
    assert_eq!((y[0], y[128], y[32], y[1]), (18.5, 481.0, 0.0, -2.5));
}

#[test]
fn q5_k_block_by_definition() {
    let mut b = [h(0.5), h(1.0)].concat();
    let mut s = [0u8; 12];
    s[1] = 2;
    s[5] = 1;
    b.extend(s);
    let mut qh = [0u8; 32];
    qh[3] = 0b10; // fifth bit of sub-block 1, position 3
    b.extend(qh);
    let mut qs = [0u8; 128];
    qs[3] = 0x40; // high nibble: sub-block 1
    b.extend(qs);
    let y = deq(GgmlType::Q5_K, &b);
    assert_eq!((y[35], y[34], y[3]), (19.0, -1.0, 0.0));
}

#[test]
fn q6_k_block_by_definition() {
    // x = d·sc_g·(q − 32); q = low 4 bits from ql, high 2 bits from qh.
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    let mut sc = [0u8; 16];
    ql[0] = 0x05;
    qh[0] = 0b10;
    sc[0] = 2;
    sc[7] = (-3i8) as u8;
    ql[48] = 0x90; // number 112 = 32·3 + 16: high nibble of ql[32 + 16]
    qh[16] = 0b1100_0000; // its bits 6..7
    let b = [&ql[..], &qh[..], &sc[..], &h(0.5)[..]].concat();
    let y = deq(GgmlType::Q6_K, &b);
    assert_eq!((y[0], y[112], y[1]), (5.0, -37.5, -32.0));
}

#[test]
fn q2_k_block_by_definition() {
    // x = d·sc_g·q − dmin·mn_g; number 162 = 128 + 32·1 + 2: bits 2..3 of qs[32 + 2].
    let mut scales = [0u8; 16];
    scales[0] = 0x23; // sc 3, mn 2
    scales[10] = 0x15; // sc 5, mn 1
    let mut qs = [0u8; 64];
    qs[0] = 0b11;
    qs[34] = 0b10_00;
    let b = [&scales[..], &qs[..], &h(0.5)[..], &h(0.25)[..]].concat();
    let y = deq(GgmlType::Q2_K, &b);
    assert_eq!((y[0], y[162], y[1], y[160]), (4.0, 4.75, -0.5, -0.25));
}

#[test]
fn q3_k_block_by_definition() {
    // x = d·(sc_g − 32)·(q − 4); q's third bit from hmask, bit 4n + k for number 128n + 32k + l.
    let mut hmask = [0u8; 32];
    hmask[0] = 1;
    let mut qs = [0u8; 64];
    qs[0] = 0b11;
    qs[54] = 0b01; // number 150 = 128 + 22: low bits of qs[32 + 22], third bit clear
    let mut s = [0u8; 12];
    s[0] = 0x01; // group 0: low nibble 1 ...
    s[8] = 0b10; // ... top bits 2: sc 33, scale 1
    s[1] = 0x40; // group 9: low nibble 4 (high nibble of s[1]) ...
    s[9] = 0b01_0000; // ... top bits 1 (bits 4..5 of s[8 + 1]): sc 20, scale −12
    let b = [&hmask[..], &qs[..], &s[..], &h(0.5)[..]].concat();
    let y = deq(GgmlType::Q3_K, &b);
    assert_eq!((y[0], y[150], y[1]), (1.5, 18.0, -2.0));
}

#[test]
fn iq4_nl_block_by_definition() {
    // x = d·K[q]; K = −127, −104, …, 1 (index 8), …, 113 (index 15).
    let mut qs = [0u8; 16];
    qs[0] = 0xF0;
    qs[1] = 0x08;
    let b = [&h(0.5)[..], &qs[..]].concat();
    let y = deq(GgmlType::IQ4_NL, &b);
    assert_eq!((y[0], y[16], y[1], y[17]), (-63.5, 56.5, 0.5, -63.5));
}

#[test]
fn iq4_xs_block_by_definition() {
    // x = d·(sc_j − 32)·K[q]; sub-block 3's scale: high nibble of scales_l[1], bits 6..7 of scales_h.
    let scales_h = 0x0080u16.to_le_bytes(); // sub-block 3: top bits 2
    let scales_l = [0u8, 0x20, 0, 0]; // sub-block 3: low nibble 2 → sc 34, scale 2
    let mut qs = [0u8; 128];
    qs[48] = 0x1E; // number 96: index 14 (89); number 112: index 1 (−104)
    let b = [&h(0.25)[..], &scales_h[..], &scales_l[..], &qs[..]].concat();
    let y = deq(GgmlType::IQ4_XS, &b);
    // Sub-block 0: scale 0 − 32, index 0 (−127).
    assert_eq!((y[96], y[112], y[0]), (44.5, -52.0, 1016.0));
}

/// The byte offsets of a block's f16 scales (and minimums) in type `t`.
pub(super) fn scale_offsets(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q6_K => &[208],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        _ => &[0],
    }
}

/// Random blocks of `t` with finite scales (random bytes elsewhere).
fn random_row(t: GgmlType, n: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut b: Vec<u8> = (0..t.row_bytes(n).unwrap()).map(|_| rng.random()).collect();
    let sc = |rng: &mut StdRng| h(rng.random_range(-0.1f32..0.1));
    for blk in b.chunks_exact_mut(t.block_bytes()) {
        match t {
            GgmlType::F32 => blk.copy_from_slice(&rng.random_range(-1.0f32..1.0).to_le_bytes()),
            GgmlType::F16 => blk.copy_from_slice(&sc(rng)),
            GgmlType::BF16 => blk.copy_from_slice(
                &half::bf16::from_f32(rng.random_range(-1.0..1.0))
                    .to_bits()
                    .to_le_bytes(),
            ),
            _ => {
                for &at in scale_offsets(t) {
                    blk[at..at + 2].copy_from_slice(&sc(rng));
                }
            }
        }
    }
    b
}

/// Σ a·b in f64.
fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// Σ |a·b| in f64 (the scale of the rounding error of a sum of these products).
fn abs_dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 * y as f64).abs())
        .sum()
}

#[test]
fn quantised_dots_equal_dequantise_then_dot() {
    every_level(1, |_| {
        let mut rng = StdRng::seed_from_u64(7);
        for t in GgmlType::ALL {
            for &n in &[256usize, 512, 2048, 4096] {
                for _ in 0..8 {
                    let row = random_row(t, n, &mut rng);
                    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect();
                    let mut w = vec![0.0; n];
                    dequantize(t, &row, &mut w).unwrap();
                    let a = quantize_activations(t, &x).unwrap();
                    let xq = a.dequantize();
                    let fast = vec_dot(t, &row, &a).unwrap() as f64;
                    let slow = reference::vec_dot(t, &row, &a).unwrap() as f64;
                    // 1. Against the dequantised activations the kernels are exact but for f32
                    //    rounding of block sums: within 1e-5 of Σ|w·xq|.
                    let exact = dot64(&w, &xq);
                    let scale = abs_dot64(&w, &xq) + 1e-6;
                    assert!(
                        (fast - exact).abs() <= 1e-5 * scale,
                        "{t} n={n}: fast {fast} vs {exact}"
                    );
                    assert!(
                        (slow - exact).abs() <= 1e-5 * scale,
                        "{t} n={n}: twin {slow} vs {exact}"
                    );
                    // 2. SIMD equals the scalar twin to the same rounding bound.
                    assert!(
                        (fast - slow).abs() <= 1e-5 * scale,
                        "{t} n={n}: simd {fast} vs twin {slow}"
                    );
                    // 3. Against the f32 activations: each x is rounded to the nearest multiple of
                    //    its block's dx = max|x|/127, and the stored scale is dx rounded to f16
                    //    for the 32-blocks (llama.cpp's), so |x_i − xq_i| ≤ dx/2 + |q_i|·|dx −
                    //    f16(dx)| and |error| ≤ Σ|w_i|·that (+ the rounding bound above).
                    let block = match t.activation_kind() {
                        ActKind::F32 | ActKind::F16 | ActKind::BF16 => 0,
                        ActKind::Q8_0 => 32,
                        ActKind::Q8_K => QK_K,
                    };
                    let bound: f64 = if block == 0 {
                        // The float kinds: each x rounded to the weight's type (exactly
                        // |x_i − xq_i|, 0 for F32).
                        w.iter()
                            .zip(x.iter().zip(&xq))
                            .map(|(wi, (xi, qi))| wi.abs() as f64 * (*xi as f64 - *qi as f64).abs())
                            .sum()
                    } else {
                        let dx: Vec<f64> = x
                            .chunks_exact(block)
                            .map(|b| b.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64)) / 127.0)
                            .collect();
                        w.iter()
                            .enumerate()
                            .map(|(i, wi)| {
                                let (d, ds) = (dx[i / block], (a.d[i / block] as f64).abs());
                                wi.abs() as f64
                                    * (d / 2.0 + (a.qs[i] as f64).abs() * (d - ds).abs())
                            })
                            .sum()
                    };
                    let truth = dot64(&w, &x);
                    let tol = bound * (1.0 + 1e-6) + 1e-5 * (abs_dot64(&w, &x) + 1e-6);
                    assert!(
                        (fast - truth).abs() <= tol,
                        "{t} n={n}: {fast} vs f32 dot {truth}, bound {tol}"
                    );
                }
            }
        }
    });
}

#[test]
fn dots_reject_mismatched_inputs() {
    let x = vec![0.5f32; 64];
    let a = quantize_activations(GgmlType::Q8_0, &x).unwrap();
    let row = vec![0u8; GgmlType::Q8_0.row_bytes(32).unwrap()];
    assert!(vec_dot(GgmlType::Q8_0, &row, &a).is_err()); // 32 numbers of weights, 64 of x
    assert!(vec_dot(GgmlType::Q4_K, &row, &a).is_err()); // wrong activation kind
    assert!(quantize_activations(GgmlType::Q4_K, &x).is_err()); // 64 is not a block of 256
    assert!(dequantize(GgmlType::Q4_0, &[0u8; 17], &mut [0.0; 32]).is_err());
}

#[test]
fn qmatrix_matvec_and_prefill_on_awkward_shapes() {
    every_level(2, |_| {
        let mut rng = StdRng::seed_from_u64(11);
        // (rows, cols): single row, odd counts, and one large enough to take the threaded path.
        for t in GgmlType::ALL {
            for &(rows, cols) in &[(1usize, 256usize), (3, 512), (17, 256), (1000, 512)] {
                let bytes: Vec<u8> = (0..rows)
                    .flat_map(|_| random_row(t, cols, &mut rng))
                    .collect();
                let m = QMatrix::from_vec(t, rows, cols, bytes).unwrap();
                let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let y = m.matvec(&x).unwrap();
                let yr = m.matvec_reference(&x).unwrap();
                let w = m.dequantize_all().unwrap();
                let a = m.prepare(&x).unwrap().dequantize();
                for i in 0..rows {
                    let wi = &w[i * cols..(i + 1) * cols];
                    let scale = abs_dot64(wi, &a) + 1e-6;
                    assert!(
                        ((y[i] - yr[i]) as f64).abs() <= 1e-5 * scale,
                        "{t} {rows}×{cols} row {i}"
                    );
                }
                // Prefill: X (t, cols) · Wᵀ through dequantised tiles and the GEMM, against
                // the f64 three-loop product of the dequantised weights (f32 GEMM rounding: 1e-5 relative).
                for &tk in &[1usize, 5] {
                    let xs: Vec<f32> = (0..tk * cols)
                        .map(|_| rng.random_range(-1.0f32..1.0))
                        .collect();
                    let ys = m.matmul_t(&xs, tk).unwrap();
                    for r in 0..tk {
                        for i in 0..rows {
                            let xr = &xs[r * cols..(r + 1) * cols];
                            let wi = &w[i * cols..(i + 1) * cols];
                            let e = dot64(xr, wi);
                            let scale = abs_dot64(xr, wi) + 1e-6;
                            assert!(
                                (ys[r * rows + i] as f64 - e).abs() <= 1e-5 * scale,
                                "{t} prefill {r},{i}"
                            );
                        }
                    }
                }
                let part = m.dequantize_rows(rows / 2..rows).unwrap();
                assert_eq!(&part[..], &w[(rows / 2) * cols..]);
            }
        }
        let m = QMatrix::from_vec(GgmlType::Q8_0, 2, 32, vec![0; 68]).unwrap();
        assert!(m.matvec(&[0.0; 31]).is_err());
        assert!(m.dequantize_rows(1..3).is_err());
        assert!(QMatrix::from_vec(GgmlType::Q8_0, 2, 32, vec![0; 67]).is_err());
    });
}

#[test]
fn extreme_blocks_do_not_saturate() {
    every_level(1, |_| {
        // Every quant byte 0xFF or 0x80 (largest magnitudes: Q8_0's −128, nibbles of 15, Q6_K's
        // q = 63) against activations at ±127: the 16-bit pair sums of the SIMD kernels must
        // not saturate, so the fast path still equals the twin and dequantise-then-dot.
        for t in GgmlType::ALL.into_iter().filter(|t| t.block_len() > 1) {
            for fill in [0xFFu8, 0x80] {
                let mut row = vec![fill; t.row_bytes(512).unwrap()];
                for blk in row.chunks_exact_mut(t.block_bytes()) {
                    for (k, &at) in scale_offsets(t).iter().enumerate() {
                        blk[at..at + 2].copy_from_slice(&h(if k == 0 { 1.0 } else { 0.5 }));
                    }
                }
                for sign in [1.0f32, -1.0] {
                    let x = vec![sign; 512];
                    let a = quantize_activations(t, &x).unwrap();
                    let mut w = vec![0.0; 512];
                    dequantize(t, &row, &mut w).unwrap();
                    let exact = dot64(&w, &a.dequantize());
                    let scale = abs_dot64(&w, &a.dequantize()) + 1e-6;
                    let fast = vec_dot(t, &row, &a).unwrap() as f64;
                    let slow = reference::vec_dot(t, &row, &a).unwrap() as f64;
                    assert!(
                        (fast - exact).abs() <= 1e-5 * scale,
                        "{t} fill {fill:#x} sign {sign}: {fast} vs {exact}"
                    );
                    assert!(
                        (slow - exact).abs() <= 1e-5 * scale,
                        "{t} twin: {slow} vs {exact}"
                    );
                }
            }
        }
    });
}

/// Run `body` in a runtime of `threads` threads at every instruction-set level this CPU
/// has (scalar, AVX2, AVX-512): each kernel path meets its twin here, none is skipped.
fn every_level(threads: usize, mut body: impl FnMut(Isa) + Send) {
    for isa in Isa::available() {
        let rt = Runtime::builder()
            .threads(threads)
            .isa(isa)
            .build()
            .unwrap();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.install(|| {
                assert_eq!(crate::runtime::isa(), isa);
                body(isa)
            })
        }));
        if let Err(e) = run {
            eprintln!("failed at the {isa} level, {threads} threads");
            std::panic::resume_unwind(e);
        }
    }
}

/// The tile kernels (1 activation row: 4 weight rows at a time; several: 1 × 4 and 1 × 1)
/// against the scalar twin on row counts that are not multiples of the tile height and on
/// block counts that are odd or leave part of a 16-block scale group; and prefill through
/// the same tiles equal to decode bit for bit (batch invariance).
#[test]
fn tile_kernels_equal_their_twins() {
    every_level(1, |_| {
        let mut rng = StdRng::seed_from_u64(13);
        for t in BLOCK32 {
            for &rows in &[1usize, 2, 3, 4, 5, 7, 9, 13] {
                for &blocks in &[1usize, 2, 3, 15, 16, 17, 18, 33] {
                    let cols = 32 * blocks;
                    let bytes: Vec<u8> = (0..rows)
                        .flat_map(|_| random_row(t, cols, &mut rng))
                        .collect();
                    let m = QMatrix::from_vec(t, rows, cols, bytes).unwrap();
                    let w = m.dequantize_all().unwrap();
                    let xs: Vec<f32> = (0..5 * cols)
                        .map(|_| rng.random_range(-1.0f32..1.0))
                        .collect();
                    let ys = m.matmul_t_quantized(&xs, 5, Numerics::LlamaCpp).unwrap(); // (5, rows)
                    for (r, x) in xs.chunks_exact(cols).enumerate() {
                        let y = m.matvec(x).unwrap();
                        let yr = m.matvec_reference(x).unwrap();
                        let a = m.prepare(x).unwrap().dequantize();
                        for i in 0..rows {
                            let wi = &w[i * cols..(i + 1) * cols];
                            let scale = abs_dot64(wi, &a) + 1e-6;
                            assert!(
                                ((y[i] - yr[i]) as f64).abs() <= 1e-5 * scale,
                                "{t} {rows}×{cols} row {i}: {} vs twin {}",
                                y[i],
                                yr[i]
                            );
                            assert_eq!(
                                ys[r * rows + i].to_bits(),
                                y[i].to_bits(),
                                "{t} {rows}×{cols} row {i}: prefill of 5 vs decode"
                            );
                        }
                    }
                }
            }
        }
    });
}

/// The tile kernels on the largest magnitudes (every quant byte 0xFF or 0x80: Q8_0's −128,
/// nibbles of 15 with the fifth bit set) against activations at ±127: the unsigned-times-
/// signed products and their offsets must neither saturate nor overflow.
#[test]
fn tile_kernels_on_extreme_blocks() {
    every_level(1, |_| {
        for t in BLOCK32 {
            for fill in [0xFFu8, 0x80, 0x7F] {
                let (rows, cols) = (5, 32 * 19);
                let mut bytes = vec![fill; rows * t.row_bytes(cols).unwrap()];
                for blk in bytes.chunks_exact_mut(t.block_bytes()) {
                    blk[0..2].copy_from_slice(&h(1.0));
                    if matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1) {
                        blk[2..4].copy_from_slice(&h(0.5));
                    }
                }
                let m = QMatrix::from_vec(t, rows, cols, bytes).unwrap();
                let w = m.dequantize_all().unwrap();
                for sign in [1.0f32, -1.0] {
                    let x: Vec<f32> = (0..cols)
                        .map(|i| if i % 3 == 0 { -sign } else { sign })
                        .collect();
                    let y = m.matvec(&x).unwrap();
                    let yr = m.matvec_reference(&x).unwrap();
                    let a = m.prepare(&x).unwrap().dequantize();
                    for i in 0..rows {
                        let wi = &w[i * cols..(i + 1) * cols];
                        let exact = dot64(wi, &a);
                        let scale = abs_dot64(wi, &a) + 1e-6;
                        assert!(
                            (y[i] as f64 - exact).abs() <= 1e-5 * scale,
                            "{t} fill {fill:#x} sign {sign} row {i}: {} vs {exact}",
                            y[i]
                        );
                        assert!(
                            ((y[i] - yr[i]) as f64).abs() <= 1e-5 * scale,
                            "{t} fill {fill:#x} sign {sign} row {i}: {} vs twin {}",
                            y[i],
                            yr[i]
                        );
                    }
                }
            }
        }
    });
}

/// The K-quant dots (AVX-512 VNNI where the CPU has it) against the twin on 1 to 8
/// blocks, odd counts included, to the rounding bound.
#[test]
fn k_quant_dots_equal_their_twins() {
    every_level(1, |_| {
        let mut rng = StdRng::seed_from_u64(17);
        for t in [
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q2_K,
            GgmlType::Q3_K,
            GgmlType::IQ4_XS,
        ] {
            for &blocks in &[1usize, 2, 3, 5, 8] {
                let n = QK_K * blocks;
                for _ in 0..16 {
                    let row = random_row(t, n, &mut rng);
                    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-3.0f32..3.0)).collect();
                    let a = quantize_activations(t, &x).unwrap();
                    let fast = vec_dot(t, &row, &a).unwrap();
                    let slow = reference::vec_dot(t, &row, &a).unwrap();
                    // Both sum in llama.cpp's order: the same bits.
                    assert_eq!(
                        fast.to_bits(),
                        slow.to_bits(),
                        "{t} n={n}: {fast} vs twin {slow}"
                    );
                    let mut w = vec![0.0; n];
                    dequantize(t, &row, &mut w).unwrap();
                    let scale = abs_dot64(&w, &a.dequantize()) + 1e-6;
                    let exact = dot64(&w, &a.dequantize());
                    assert!(
                        (fast as f64 - exact).abs() <= 1e-5 * scale,
                        "{t} n={n}: {fast} vs dequantise-then-dot {exact}"
                    );
                }
            }
        }
    });
}

/// The 32-block kinds sum in llama.cpp's order on every path (the scalar twin, the AVX2
/// dot, the tile kernel of `matvec`, and the prefill product `matmul_t_quantized`), so
/// they agree bit for bit: a model's decode and its prompt see the same numbers. (A Q4_0
/// matrix with a multiple of 8 rows, which llama.cpp repacks, takes its repacked order
/// on every path of the matrix: the twin `dot_q4_0_repacked`.)
#[test]
fn block32_kernels_equal_their_twin_bit_for_bit() {
    every_level(2, |_| {
        let mut rng = StdRng::seed_from_u64(5);
        for t in BLOCK32 {
            for &(rows, cols) in &[(1usize, 32usize), (7, 96), (13, 576), (600, 1536)] {
                let bytes: Vec<u8> = (0..rows)
                    .flat_map(|_| random_row(t, cols, &mut rng))
                    .collect();
                let m = QMatrix::from_vec(t, rows, cols, bytes).unwrap();
                // Seven prompt rows: two pairs (a four-row tile), one pair, one row alone.
                let xs: Vec<f32> = (0..7 * cols)
                    .map(|_| rng.random_range(-3.0f32..3.0))
                    .collect();
                let prefill = m.matmul_t_quantized(&xs, 7, Numerics::LlamaCpp).unwrap(); // (7, rows)
                for r in 0..7 {
                    let x = &xs[r * cols..(r + 1) * cols];
                    let a = quantize_activations(t, x).unwrap();
                    let y = m.matvec(x).unwrap();
                    let yr = m.matvec_reference(x).unwrap();
                    for i in 0..rows {
                        let dot = reference::vec_dot(t, m.row_bytes_of(i), &a).unwrap();
                        let fast = vec_dot(t, m.row_bytes_of(i), &a).unwrap();
                        assert_eq!(
                            fast.to_bits(),
                            dot.to_bits(),
                            "{t} {rows}×{cols} dot row {i}"
                        );
                        let twin = if t == GgmlType::Q4_0 && rows % 8 == 0 {
                            reference::dot_q4_0_repacked(m.row_bytes_of(i), &a)
                        } else {
                            dot
                        };
                        assert_eq!(
                            y[i].to_bits(),
                            twin.to_bits(),
                            "{t} {rows}×{cols} matvec row {i}"
                        );
                        assert_eq!(
                            yr[i].to_bits(),
                            twin.to_bits(),
                            "{t} {rows}×{cols} twin row {i}"
                        );
                        assert_eq!(
                            prefill[r * rows + i].to_bits(),
                            twin.to_bits(),
                            "{t} {rows}×{cols} prefill row {r}, {i}"
                        );
                    }
                }
            }
        }
    });
}

/// Activations are quantised with llama.cpp's rules to the bit: q = round(x·127/max|x|)
/// with ties to even, the scale kept in f16 (and, for the `_1` kinds, f16(d·Σq)); for
/// the K-quants q = round(x·(−127/m)) with m the signed value of largest magnitude.
#[test]
fn activations_quantise_as_llama_cpp_does() {
    every_level(1, |_| {
        // A block whose largest magnitude is 127: the multiplier is exactly 1.
        let mut x = vec![0.0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5; // tie → 2
        x[2] = 3.5; // tie → 4
        x[3] = -2.5; // tie → −2
        x[4] = 0.49;
        let a = quantize_activations(GgmlType::Q4_1, &x).unwrap();
        assert_eq!(&a.qs[..5], &[127, 2, 4, -2, 0]);
        assert_eq!(a.d[0], 1.0);
        assert_eq!(a.sum[0], f16::from_f32(127.0 + 2.0 + 4.0 - 2.0).to_f32());
        // A scale that f16 cannot hold: it is kept rounded, as llama.cpp stores it.
        let y: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) * 0.013).collect();
        let a = quantize_activations(GgmlType::Q8_0, &y).unwrap();
        let amax = 15.5 * 0.013f32;
        assert_eq!(a.d[0], f16::from_f32(amax / 127.0).to_f32());
        assert_ne!(a.d[0], amax / 127.0);
        for (q, v) in a.qs.iter().zip(&y) {
            assert_eq!(*q as f32, (v * (127.0 / amax)).round_ties_even());
        }
        // K-quant activations: the sign of the largest value is kept in the scale.
        let mut z = vec![0.25f32; 256];
        z[7] = -2.0;
        let a = quantize_activations(GgmlType::Q4_K, &z).unwrap();
        let iscale = -127.0f32 / -2.0;
        assert_eq!(a.d[0], 1.0 / iscale);
        assert_eq!(a.qs[7], -127);
        assert_eq!(a.qs[0] as f32, (0.25 * iscale).round_ties_even());
        assert_eq!(
            a.bsums[0],
            a.qs[..16].iter().map(|&q| q as i32).sum::<i32>()
        );
    });
}

/// Several matrices over one x (Q, K, V) in one pass give each matrix's own `matvec`,
/// bit for bit, on one thread and on two, and mixed types fall back to one by one.
#[test]
fn matvec_group_equals_each_matvec() {
    let mut rng = StdRng::seed_from_u64(21);
    let cols = 768; // whole blocks of 32 and of 256
    let mk = |t: GgmlType, rows: usize, rng: &mut StdRng| {
        let bytes: Vec<u8> = (0..rows).flat_map(|_| random_row(t, cols, rng)).collect();
        QMatrix::from_vec(t, rows, cols, bytes).unwrap()
    };
    let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    for threads in [1, 2] {
        every_level(threads, |_| {
            for t in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K] {
                let ms = [
                    mk(t, 768, &mut rng),
                    mk(t, 192, &mut rng),
                    mk(t, 200, &mut rng),
                ];
                let refs: Vec<&QMatrix> = ms.iter().collect();
                let ys = QMatrix::matvec_group(&refs, &x).unwrap();
                for (m, y) in ms.iter().zip(&ys) {
                    let want = m.matvec(&x).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(y), bits(&want), "{t} {threads} threads");
                }
            }
            let mixed = [
                mk(GgmlType::Q4_1, 64, &mut rng),
                mk(GgmlType::Q8_0, 64, &mut rng),
            ];
            let ys = QMatrix::matvec_group(&[&mixed[0], &mixed[1]], &x).unwrap();
            assert_eq!(ys[1], mixed[1].matvec(&x).unwrap());
        });
    }
    assert!(QMatrix::matvec_group(&[], &x).unwrap().is_empty());
}

/// A prompt's product of the K-quants (four activation rows per weight row on AVX-512,
/// then the rows left over) equals each row's decode product bit for bit, so a model's
/// prompt and its decode steps see the same numbers.
#[test]
fn k_quant_prefill_equals_decode_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(17);
    for threads in [1, 2] {
        every_level(threads, |_| {
            for t in [
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
                GgmlType::Q2_K,
                GgmlType::Q3_K,
                GgmlType::IQ4_XS,
                GgmlType::IQ4_NL,
            ] {
                // 8 and 64 rows: repacked Q4_K (llama.cpp's grouped order for whole fours)
                // and IQ4_NL (one order for any number of prompt rows).
                for &(rows, blocks) in &[(1usize, 1usize), (5, 2), (8, 1), (9, 3), (64, 4)] {
                    let cols = 256 * blocks;
                    let bytes: Vec<u8> = (0..rows)
                        .flat_map(|_| random_row(t, cols, &mut rng))
                        .collect();
                    let m = QMatrix::from_vec(t, rows, cols, bytes).unwrap();
                    // 9 rows: llama.cpp's tiled order (8 rows or more) where it does not repack.
                    for n in [1usize, 4, 7, 9] {
                        let xs: Vec<f32> = (0..n * cols)
                            .map(|_| rng.random_range(-3.0f32..3.0))
                            .collect();
                        let what = format!("{t} {rows}×{cols}, {threads} threads, {n} prompt rows");
                        check_prompt_rows(&m, &xs, n, &what);
                    }
                }
            }
        });
    }
}

/// Rows of a fused IQ4_NL tensor follow the whole tensor's repacking, as llama.cpp
/// decides it per tensor: 4 rows of an 8-row tensor take the repacked order for a token
/// and a prompt; 8 rows of a 12-row tensor the dot for a token and tinyBLAS's order for
/// a prompt; an expert of 4 rows the dot for both.
#[test]
fn iq4_nl_parts_follow_the_whole_tensor() {
    let mut rng = StdRng::seed_from_u64(23);
    let t = GgmlType::IQ4_NL;
    let cols = 96;
    for (rows, whole, expert) in [(4usize, 8usize, false), (8, 12, false), (4, 4, true)] {
        let bytes: Vec<u8> = (0..rows)
            .flat_map(|_| random_row(t, cols, &mut rng))
            .collect();
        let m = QMatrix::from_vec(t, rows, cols, bytes)
            .unwrap()
            .part_of(whole);
        let m = if expert { m.expert() } else { m };
        let n = 3;
        let xs: Vec<f32> = (0..n * cols)
            .map(|_| rng.random_range(-3.0f32..3.0))
            .collect();
        let ys = m.matmul_t_quantized(&xs, n, Numerics::LlamaCpp).unwrap(); // (n, rows)
        for (r, x) in xs.chunks_exact(cols).enumerate() {
            let y = m.matvec(x).unwrap();
            let a = quantize_activations(t, x).unwrap();
            for i in 0..rows {
                let w = m.row_bytes_of(i);
                let (token, prompt) = match (whole % 8 == 0, expert) {
                    (true, _) => {
                        let v = reference::dot_iq4_nl_repacked(w, &a);
                        (v, v)
                    }
                    (false, true) => {
                        let v = reference::kernel(t)(w, &a);
                        (v, v)
                    }
                    (false, false) => (
                        reference::kernel(t)(w, &a),
                        reference::dot_iq4_nl_chain(w, &a),
                    ),
                };
                let what = format!("{rows} rows of {whole}, expert {expert}: row {i}");
                assert_eq!(y[i].to_bits(), token.to_bits(), "{what}: token");
                assert_eq!(
                    ys[r * rows + i].to_bits(),
                    prompt.to_bits(),
                    "{what}: prompt row {r}"
                );
            }
        }
    }
}

/// `m`'s product with the `n` prompt rows `xs` against llama.cpp's rules, bit for bit:
/// each row as one decoded token, except that a repacked Q4_K matrix (a multiple of 8
/// rows) sums the rows in whole fours in its grouped order (the twin
/// `dot_q4_k_repacked(.., true)`), and the other K-quant matrices sum a product of 8
/// rows or more in its tiled order (the twins `dot_k45_tiled`, `dot_q6_k_tiled`); under
/// `Numerics::RowInvariant`, every row as a token. An IQ4_NL matrix sums every row in
/// its repacked order (a multiple of 8 rows), else a prompt's rows in tinyBLAS's
/// (`dot_iq4_nl_chain`).
fn check_prompt_rows(m: &QMatrix, xs: &[f32], n: usize, what: &str) {
    let (rows, cols) = (m.rows(), m.cols());
    let ys = m.matmul_t_quantized(xs, n, Numerics::LlamaCpp).unwrap(); // (n, rows)
    let yi = m.matmul_t_quantized(xs, n, Numerics::RowInvariant).unwrap();
    let grouped = m.dtype() == GgmlType::Q4_K && rows % 8 == 0;
    for (r, x) in xs.chunks_exact(cols).enumerate() {
        let y = m.matvec(x).unwrap();
        let a = quantize_activations(m.dtype(), x).unwrap();
        for i in 0..rows {
            let w = m.row_bytes_of(i);
            let want = match m.dtype() {
                GgmlType::Q4_K if grouped && r < n - n % 4 => {
                    reference::dot_q4_k_repacked(w, &a, true)
                }
                GgmlType::Q4_K if !grouped && n >= 8 => reference::dot_k45_tiled(w, &a, false),
                GgmlType::Q5_K if n >= 8 => reference::dot_k45_tiled(w, &a, true),
                GgmlType::Q6_K if n >= 8 => reference::dot_q6_k_tiled(w, &a),
                GgmlType::Q2_K if n >= 8 => reference::dot_k16_tiled::<BlockQ2_K>(w, &a),
                GgmlType::Q3_K if n >= 8 => reference::dot_k16_tiled::<BlockQ3_K>(w, &a),
                GgmlType::IQ4_XS if n >= 8 => reference::dot_k16_tiled::<BlockIQ4_XS>(w, &a),
                GgmlType::IQ4_NL if rows % 8 == 0 => reference::dot_iq4_nl_repacked(w, &a),
                GgmlType::IQ4_NL if n >= 2 => reference::dot_iq4_nl_chain(w, &a),
                _ => y[i],
            };
            assert_eq!(
                ys[r * rows + i].to_bits(),
                want.to_bits(),
                "{what}: prompt row {r}, weight row {i}"
            );
            assert_eq!(
                yi[r * rows + i].to_bits(),
                y[i].to_bits(),
                "{what}, row invariant: prompt row {r}, weight row {i}"
            );
        }
    }
}

/// The vectorised activation quantisation equals its scalar twin bit for bit (numbers,
/// scales, sums), on random rows and on awkward blocks: all zeros, ties, one large
/// value of either sign, both signs of the largest magnitude, subnormals, NaN and
/// infinities (which the twin handles for it).
#[test]
fn activation_quantisation_equals_its_twin() {
    every_level(1, |_| {
        let mut rng = StdRng::seed_from_u64(23);
        let mut rows: Vec<Vec<f32>> = (0..20)
            .map(|i| {
                let scale = 10f32.powi(i % 7 - 3);
                (0..512)
                    .map(|_| rng.random_range(-1.0f32..1.0) * scale)
                    .collect()
            })
            .collect();
        let mut awkward = vec![0.0f32; 512]; // zeros, then ties in block two
        for (k, v) in awkward[32..64].iter_mut().enumerate() {
            *v = k as f32 - 15.5;
        }
        awkward[300] = 4.0; // the largest magnitude twice, positive first
        awkward[301] = -4.0;
        rows.push(awkward);
        let mut odd = vec![1e-40f32; 512]; // subnormal blocks
        odd[40] = f32::NAN;
        odd[300] = f32::INFINITY;
        odd[400] = -3.0;
        rows.push(odd);
        for t in [
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            for x in &rows {
                let fast = quantize_activations(t, x).unwrap();
                let twin = crate::ops::quant::reference::quantize_activations(t, x).unwrap();
                assert_eq!(fast.qs, twin.qs, "{t}: numbers");
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fast.d), bits(&twin.d), "{t}: scales");
                assert_eq!(bits(&fast.sum), bits(&twin.sum), "{t}: block sums");
                assert_eq!(fast.bsums, twin.bsums, "{t}: group sums");
            }
        }
    });
}

/// A prompt through several matrices at once (Q, K, V of mixed types, as Gemma 3's are)
/// gives each matrix's own `matmul_t_quantized`, bit for bit.
#[test]
fn matmul_t_group_equals_each_product() {
    every_level(2, |_| {
        let mut rng = StdRng::seed_from_u64(29);
        let cols = 512;
        let mk = |t: GgmlType, rows: usize, rng: &mut StdRng| {
            let b: Vec<u8> = (0..rows).flat_map(|_| random_row(t, cols, rng)).collect();
            QMatrix::from_vec(t, rows, cols, b).unwrap()
        };
        let mats = [
            mk(GgmlType::Q5_0, 40, &mut rng),
            mk(GgmlType::Q4_K, 12, &mut rng),
            mk(GgmlType::Q8_0, 12, &mut rng),
            mk(GgmlType::Q6_K, 8, &mut rng),
        ];
        let refs: Vec<&QMatrix> = mats.iter().collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for t in [2usize, 5, 9] {
            let x: Vec<f32> = (0..t * cols).map(|_| rng.random_range(-2.0..2.0)).collect();
            let ys = QMatrix::matmul_t_quantized_group(&refs, &x, t, Numerics::LlamaCpp).unwrap();
            for (m, y) in mats.iter().zip(&ys) {
                assert_eq!(
                    bits(y),
                    bits(&m.matmul_t_quantized(&x, t, Numerics::LlamaCpp).unwrap()),
                    "{} t={t}",
                    m.dtype()
                );
            }
        }
        assert!(
            QMatrix::matmul_t_quantized_group(&refs, &[0.0; 7], 1, Numerics::LlamaCpp).is_err()
        );
    });
}

/// A prompt large enough that its preparation (quantisation, pairing, the transpose of
/// the results) runs on the threads gives, row by row, what decode gives, bit for bit.
#[test]
fn large_prompt_on_threads_equals_decode() {
    every_level(2, |_| {
        let mut rng = StdRng::seed_from_u64(31);
        let (rows, cols, t) = (512usize, 1024usize, 37usize);
        for ty in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q4_K] {
            let b: Vec<u8> = (0..rows)
                .flat_map(|_| random_row(ty, cols, &mut rng))
                .collect();
            let m = QMatrix::from_vec(ty, rows, cols, b).unwrap();
            let x: Vec<f32> = (0..t * cols).map(|_| rng.random_range(-2.0..2.0)).collect();
            check_prompt_rows(&m, &x, t, &format!("{ty} {rows}×{cols}, 2 threads"));
        }
    });
}

/// A product with a few activation rows (the decode step of several sequences: on
/// AVX-512 with GFNI each weight tile unpacked once for up to eight rows) equals each
/// row's lone decode product bit for bit, under both numerics, for every 32-block type,
/// on row counts that leave partial tiles, block counts that leave partial scale
/// groups, every row count up to past the unpacked path's limit, and a matrix large
/// enough to be split over two threads.
#[test]
fn few_rows_equal_decode_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(41);
    for threads in [1, 2] {
        every_level(threads, |_| {
            for ty in BLOCK32 {
                let shapes: &[(usize, usize)] = if threads == 1 {
                    &[(1, 1), (3, 2), (4, 16), (5, 17), (9, 18), (13, 33)]
                } else {
                    &[(260, 48)]
                };
                for &(rows, blocks) in shapes {
                    let cols = 32 * blocks;
                    let bytes: Vec<u8> = (0..rows)
                        .flat_map(|_| random_row(ty, cols, &mut rng))
                        .collect();
                    let m = QMatrix::from_vec(ty, rows, cols, bytes).unwrap();
                    let xs: Vec<f32> = (0..17 * cols)
                        .map(|_| rng.random_range(-2.0f32..2.0))
                        .collect();
                    let lone: Vec<Vec<f32>> = xs
                        .chunks_exact(cols)
                        .map(|x| m.matvec(x).unwrap())
                        .collect();
                    for t in [2usize, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17] {
                        for numerics in [Numerics::LlamaCpp, Numerics::RowInvariant] {
                            let y = m.matmul_t_quantized(&xs[..t * cols], t, numerics).unwrap();
                            for (r, want) in lone.iter().take(t).enumerate() {
                                for (i, w) in want.iter().enumerate() {
                                    assert_eq!(
                                        y[r * rows + i].to_bits(),
                                        w.to_bits(),
                                        "{ty} {rows}×{cols}, {threads} threads, {t} rows \
                                         ({numerics:?}): row {r}, weight row {i}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        });
    }
}
