//! The fast kernels against their plain twins on random and awkward shapes, and both
//! against PyTorch golden values (tests/data/modules/elementwise.safetensors), at every
//! instruction-set level this CPU has (scalar, AVX2, AVX-512: `every_level`).
//!
//! Tolerances, per kernel:
//! - golden (LayerNorm, RMSNorm, GELU erf / tanh, SiLU, ReLU, softmax rows): 1e-5 absolute,
//!   for the twin and the fast path alike;
//! - activations fast vs twin: 1e-6 · (1 + |x|) (the SIMD erf / tanh / σ are within 1e-6);
//! - softmax fast vs twin: 1e-6 absolute on probabilities;
//! - norms fast vs twin: 2e-6 absolute (O(1) outputs, f32 statistics);
//! - RoPE table vs twin: 1e-6 absolute;
//! - fused attention vs twin: 1e-5 absolute on outputs and weights (O(1) values; the two
//!   sum dot products in different orders); both its row path (t_q < 8) and its blocked
//!   path (t_q ≥ 8, blocks of 64) are covered;
//! - matmul (gemv and gemm) vs the f64 twin: 1e-6 · (1 + Σ|a·b|) per output.
#![cfg(test)]

use std::path::PathBuf;

use crate::io::SafetensorsFile;
use crate::ops::attention::{self, AttentionParams};
use crate::ops::{self, activation, matmul, norm, rope, softmax, Activation, RopeConvention};
use crate::{Isa, Runtime, Tensor};
use rand::{rngs::StdRng, SeedableRng};

const AWKWARD: [usize; 12] = [1, 3, 7, 8, 9, 17, 33, 65, 129, 384, 576, 1000];

/// Run `f` in a two-thread runtime at every instruction-set level this CPU has (scalar,
/// AVX2, AVX-512): every fast path meets its twin and the PyTorch values here.
fn every_level(f: impl Fn() + Sync) {
    for isa in Isa::available() {
        let rt = Runtime::builder().threads(2).isa(isa).build().unwrap();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.install(&f)));
        if let Err(e) = run {
            eprintln!("failed at the {isa} level");
            std::panic::resume_unwind(e);
        }
    }
}

fn golden() -> SafetensorsFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/modules/elementwise.safetensors");
    SafetensorsFile::open(p).unwrap()
}

fn assert_close(got: &Tensor, want: &Tensor, tol: f32, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let err = got.max_abs_diff(want).unwrap();
    assert!(err <= tol, "{what}: max |diff| {err:e} > {tol:e}");
}

fn twin_map(x: &Tensor, f: impl Fn(&mut [f32]), d: usize) -> Tensor {
    let mut out = x.clone();
    out.data_mut().chunks_mut(d).for_each(f);
    out
}

// ---------------------------------------------------------------- golden values

#[test]
fn activations_match_pytorch() {
    every_level(|| {
        let g = golden();
        let a = g.tensor("a").unwrap();
        for (name, act) in [
            ("relu", Activation::Relu),
            ("gelu_erf", Activation::Gelu),
            ("gelu_tanh", Activation::GeluTanh),
            ("silu", Activation::Silu),
        ] {
            let want = g.tensor(name).unwrap();
            // Tolerance: 1e-5 absolute (single op vs PyTorch).
            assert_close(&act.apply(&a), &want, 1e-5, name);
            assert_close(
                &a.map(|x| act.scalar(x)),
                &want,
                1e-5,
                &format!("{name} twin"),
            );
            let mut inplace = a.data().to_vec();
            activation::apply_in_place(act, &mut inplace);
            assert_close(
                &Tensor::new(inplace, a.shape()).unwrap(),
                &want,
                1e-5,
                &format!("{name} in place"),
            );
        }
    });
}

#[test]
fn norms_and_softmax_match_pytorch() {
    every_level(|| {
        let g = golden();
        let x = g.tensor("x").unwrap();
        let d = x.last_dim();
        let ln_eps = g.meta_f64("layernorm_eps").unwrap() as f32;
        let rms_eps = g.meta_f64("rmsnorm_eps").unwrap() as f32;
        let (lw, lb) = (
            g.tensor("layernorm.weight").unwrap(),
            g.tensor("layernorm.bias").unwrap(),
        );
        let rw = g.tensor("rmsnorm.weight").unwrap();

        // Tolerance: 1e-5 absolute for every check here (single ops vs PyTorch).
        let want = g.tensor("layernorm.out").unwrap();
        assert_close(
            &ops::layer_norm(&x, &lw, Some(&lb), ln_eps).unwrap(),
            &want,
            1e-5,
            "layer_norm",
        );
        let twin = twin_map(
            &x,
            |r| norm::reference::layer_norm_row(r, lw.data(), Some(lb.data()), ln_eps),
            d,
        );
        assert_close(&twin, &want, 1e-5, "layer_norm twin");

        let want = g.tensor("rmsnorm.out").unwrap();
        assert_close(
            &ops::rms_norm(&x, &rw, rms_eps).unwrap(),
            &want,
            1e-5,
            "rms_norm",
        );
        let twin = twin_map(
            &x,
            |r| norm::reference::rms_norm_row(r, rw.data(), rms_eps),
            d,
        );
        assert_close(&twin, &want, 1e-5, "rms_norm twin");

        let want = g.tensor("softmax_rows").unwrap();
        assert_close(&ops::softmax(&x), &want, 1e-5, "softmax");
        let twin = twin_map(&x, |r| softmax::reference::softmax_row(r, 1.0), d);
        assert_close(&twin, &want, 1e-5, "softmax twin");
    });
}

// ---------------------------------------------------------------- fast vs twin

#[test]
fn activations_fast_equal_twins_on_awkward_lengths() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(21);
        for n in AWKWARD.into_iter().chain([100_003]) {
            let x = Tensor::rand_uniform(&[n], -8.0, 8.0, &mut rng);
            for act in [
                Activation::Relu,
                Activation::Gelu,
                Activation::GeluTanh,
                Activation::Silu,
            ] {
                let fast = act.apply(&x);
                for (&xi, &yi) in x.data().iter().zip(fast.data()) {
                    let want = act.scalar(xi);
                    // Tolerance: 1e-6 · (1 + |x|).
                    assert!(
                        (yi - want).abs() <= 1e-6 * (1.0 + xi.abs()),
                        "{} n={n} x={xi}: {yi} vs {want}",
                        act.name()
                    );
                }
            }
        }
    });
}

#[test]
fn softmax_fast_equals_twin_on_awkward_shapes() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(22);
        for &rows in &[1, 3, 200] {
            for n in AWKWARD {
                let x = Tensor::randn(&[rows, n], 4.0, &mut rng);
                for t in [0.5, 1.0, 3.0] {
                    let fast = ops::softmax_with_temperature(&x, t).unwrap();
                    let twin = twin_map(&x, |r| softmax::reference::softmax_row(r, t), n);
                    // Tolerance: 1e-6 absolute.
                    assert_close(
                        &fast,
                        &twin,
                        1e-6,
                        &format!("softmax rows={rows} n={n} T={t}"),
                    );
                }
            }
        }
    });
}

#[test]
fn norms_fast_equal_twins_on_awkward_shapes() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(23);
        for &rows in &[1, 5, 400] {
            for n in AWKWARD {
                let x = Tensor::randn(&[rows, n], 2.0, &mut rng).map(|v| v + 1.5);
                let g = Tensor::rand_uniform(&[n], 0.5, 1.5, &mut rng);
                let b = Tensor::rand_uniform(&[n], -0.5, 0.5, &mut rng);
                // Tolerance: 2e-6 absolute.
                let fast = ops::layer_norm(&x, &g, Some(&b), 1e-5).unwrap();
                let twin = twin_map(
                    &x,
                    |r| norm::reference::layer_norm_row(r, g.data(), Some(b.data()), 1e-5),
                    n,
                );
                assert_close(&fast, &twin, 2e-6, &format!("layer_norm rows={rows} n={n}"));
                let fast = ops::layer_norm(&x, &g, None, 1e-5).unwrap();
                let twin = twin_map(
                    &x,
                    |r| norm::reference::layer_norm_row(r, g.data(), None, 1e-5),
                    n,
                );
                assert_close(
                    &fast,
                    &twin,
                    2e-6,
                    &format!("layer_norm no bias rows={rows} n={n}"),
                );
                let fast = ops::rms_norm(&x, &g, 1e-6).unwrap();
                let twin = twin_map(&x, |r| norm::reference::rms_norm_row(r, g.data(), 1e-6), n);
                assert_close(&fast, &twin, 2e-6, &format!("rms_norm rows={rows} n={n}"));
            }
        }
    });
}

#[test]
fn rope_table_equals_twin() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(24);
        let table = rope::RopeTable::new(10_000.0, 64, 0..2048).unwrap();
        for &t in &[1, 3, 9, 33, 129] {
            let x = Tensor::randn(&[2, 4, t, 64], 1.0, &mut rng);
            // a decode-like run of positions deep in the table
            let positions: Vec<usize> = (0..t).map(|i| 1900 + i).collect();
            for conv in [RopeConvention::RotateHalf, RopeConvention::Interleaved] {
                let fast = table.apply(&x, &positions, conv).unwrap();
                let free = ops::rope(&x, &positions, 10_000.0, conv).unwrap();
                let mut twin = x.clone();
                for (i, row) in twin.data_mut().chunks_mut(64).enumerate() {
                    rope::reference::rotate_row(row, positions[i % t], 10_000.0, conv);
                }
                // Tolerance: 1e-6 absolute.
                assert_close(&fast, &twin, 1e-6, &format!("rope table t={t} {conv:?}"));
                assert_close(&free, &twin, 1e-6, &format!("rope t={t} {conv:?}"));
            }
        }
    });
}

#[test]
fn matmul_fast_paths_equal_twin() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(25);
        for &(m, k, n) in &[
            (1, 576, 1536),
            (1, 1536, 576),
            (1, 7, 9),
            (1, 33, 65),
            (3, 129, 17),
            (32, 384, 384),
            // few rows × a large matrix: split over column blocks when threads > 1
            (12, 384, 1536),
            (5, 1536, 300),
        ] {
            for tb in [false, true] {
                let a = Tensor::randn(&[m, k], 1.0, &mut rng);
                let b_shape = if tb { [n, k] } else { [k, n] };
                let b = Tensor::randn(&b_shape, 1.0, &mut rng);
                let want = matmul::reference::gemm(a.data(), b.data(), m, k, n, tb);
                let mag = matmul::reference::gemm(
                    a.map(f32::abs).data(),
                    b.map(f32::abs).data(),
                    m,
                    k,
                    n,
                    tb,
                );
                let got = if tb {
                    ops::matmul_t(&a, &b)
                } else {
                    ops::matmul(&a, &b)
                }
                .unwrap();
                for (j, ((g, w), s)) in got.data().iter().zip(&want).zip(&mag).enumerate() {
                    // Tolerance: 1e-6 · (1 + Σ|a·b|).
                    assert!(
                        (g - w).abs() <= 1e-6 * (1.0 + s),
                        "({m},{k},{n}) tb={tb} at {j}: {g} vs {w}"
                    );
                }
            }
        }
    });
}

/// `linear` (bias first, then the GEMM accumulates onto it) equals x·Wᵀ + b from the
/// twin, for a few rows (column-split path) and many.
#[test]
fn linear_with_bias_equals_twin() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(27);
        for &(m, k, n) in &[(12, 384, 1536), (7, 1536, 384), (200, 64, 96)] {
            let x = Tensor::randn(&[m, k], 1.0, &mut rng);
            let w = Tensor::randn(&[n, k], 1.0, &mut rng);
            let b = Tensor::randn(&[n], 1.0, &mut rng);
            let got = ops::linear(&x, &w, Some(&b)).unwrap();
            let want = matmul::reference::gemm(x.data(), w.data(), m, k, n, true);
            for (j, (g, w)) in got.data().iter().zip(&want).enumerate() {
                let w = w + b.data()[j % n];
                // Tolerance: 1e-6 · (1 + k) · 4 (values are products of unit normals).
                assert!(
                    (g - w).abs() <= 4e-6 * (1.0 + k as f32),
                    "({m},{k},{n}) at {j}: {g} vs {w}"
                );
            }
        }
    });
}

// ---------------------------------------------------------------- fused attention

struct Case {
    b: usize,
    h: usize,
    h_kv: usize,
    t_q: usize,
    t_k: usize,
    d_k: usize,
    d_v: usize,
}

fn check_attention(
    c: &Case,
    causal: bool,
    window: Option<usize>,
    bias: Option<&Tensor>,
    rng: &mut StdRng,
) {
    let q = Tensor::randn(&[c.b, c.h, c.t_q, c.d_k], 1.0, rng);
    let k = Tensor::randn(&[c.b, c.h_kv, c.t_k, c.d_k], 1.0, rng);
    let v = Tensor::randn(&[c.b, c.h_kv, c.t_k, c.d_v], 1.0, rng);
    for want_weights in [false, true] {
        let p = AttentionParams {
            causal,
            window,
            bias,
            want_weights,
            ..AttentionParams::new(c.d_k)
        };
        // the fused kernel itself (what `attention::attention` runs in lucent's numerics)
        let fast = attention::fused(&q, &k, &v, &p).unwrap();
        let twin = attention::reference::attention(&q, &k, &v, &p).unwrap();
        let what = format!(
            "b={} h={} hkv={} tq={} tk={} dk={} dv={} causal={causal} window={window:?} bias={} weights={want_weights}",
            c.b,
            c.h,
            c.h_kv,
            c.t_q,
            c.t_k,
            c.d_k,
            c.d_v,
            bias.is_some()
        );
        // Tolerance: 1e-5 absolute on outputs and weights.
        assert_close(&fast.output, &twin.output, 1e-5, &what);
        match (fast.weights, twin.weights) {
            (Some(fw), Some(tw)) => assert_close(&fw, &tw, 1e-5, &what),
            (None, None) => assert!(!want_weights, "{what}: weights missing"),
            _ => panic!("{what}: weights present in one only"),
        }
    }
}

#[test]
fn fused_attention_equals_twin() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(26);
        let cases = [
            Case {
                b: 1,
                h: 1,
                h_kv: 1,
                t_q: 1,
                t_k: 1,
                d_k: 1,
                d_v: 1,
            },
            Case {
                b: 2,
                h: 3,
                h_kv: 3,
                t_q: 7,
                t_k: 7,
                d_k: 9,
                d_v: 5,
            },
            Case {
                b: 2,
                h: 4,
                h_kv: 2,
                t_q: 17,
                t_k: 17,
                d_k: 16,
                d_v: 16,
            },
            Case {
                b: 1,
                h: 4,
                h_kv: 1,
                t_q: 33,
                t_k: 33,
                d_k: 33,
                d_v: 17,
            },
            // a KV cache: fewer queries than keys
            Case {
                b: 2,
                h: 4,
                h_kv: 2,
                t_q: 3,
                t_k: 65,
                d_k: 64,
                d_v: 64,
            },
            Case {
                b: 1,
                h: 9,
                h_kv: 3,
                t_q: 1,
                t_k: 129,
                d_k: 64,
                d_v: 64,
            },
            // blocked path (t_q ≥ 8): a cache with many new queries, a partial last block
            Case {
                b: 1,
                h: 4,
                h_kv: 2,
                t_q: 17,
                t_k: 80,
                d_k: 24,
                d_v: 8,
            },
            Case {
                b: 1,
                h: 2,
                h_kv: 1,
                t_q: 70,
                t_k: 70,
                d_k: 65,
                d_v: 9,
            },
            // large enough to split over threads
            Case {
                b: 2,
                h: 12,
                h_kv: 12,
                t_q: 128,
                t_k: 128,
                d_k: 32,
                d_v: 32,
            },
        ];
        for c in &cases {
            check_attention(c, false, None, None, &mut rng);
            check_attention(c, true, None, None, &mut rng);
            check_attention(c, true, Some(4), None, &mut rng);
            check_attention(c, true, Some(1), None, &mut rng);
            // additive biases: (t_q, t_k), and (b, 1, t_q, t_k) with padding as −∞
            let bias2 = Tensor::randn(&[c.t_q, c.t_k], 1.0, &mut rng);
            check_attention(c, false, None, Some(&bias2), &mut rng);
            check_attention(c, true, None, Some(&bias2), &mut rng);
            let pad = Tensor::from_fn(&[c.b, 1, c.t_q, c.t_k], |i| {
                let (bi, j) = (i / (c.t_q * c.t_k), i % c.t_k);
                if bi == 1 && j + 2 >= c.t_k && j > 0 {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            });
            check_attention(c, false, None, Some(&pad), &mut rng);
            let per_head = Tensor::randn(&[c.b, c.h, c.t_q, c.t_k], 1.0, &mut rng);
            check_attention(c, false, None, Some(&per_head), &mut rng);
        }
    });
}

/// A query row's output is the same bits whichever rows it is attended with: in a long
/// block of queries (the keys packed once for all blocks), in a short one (packed per
/// block) or alone (the decode step's path), at every level and over several blocks of
/// keys.
#[test]
fn a_query_row_is_the_same_bits_in_any_block() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(31);
        let (h, t, d) = (3, 300, 40);
        let q = Tensor::randn(&[1, h, t, d], 1.0, &mut rng); // (b, h, t_q, d_k)
        let k = Tensor::randn(&[1, h, t, d], 1.0, &mut rng); // (b, h, t_k, d_k)
        let v = Tensor::randn(&[1, h, t, d], 1.0, &mut rng); // (b, h, t_k, d_v)
        let p = AttentionParams::new(d);
        let all = attention::attention(&q, &k, &v, &p).unwrap().output; // (1, h, t, d)
        for (i0, i1) in [(0, 10), (60, 75), (130, 131), (299, 300), (0, 1)] {
            let rows = i1 - i0;
            let sub = Tensor::from_fn(&[1, h, rows, d], |x| {
                let (hi, r, e) = (x / (rows * d), x / d % rows, x % d);
                q.data()[(hi * t + i0 + r) * d + e]
            });
            let got = attention::attention(&sub, &k, &v, &p).unwrap().output;
            for hi in 0..h {
                let want = &all.data()[(hi * t + i0) * d..(hi * t + i1) * d];
                let got = &got.data()[hi * rows * d..(hi + 1) * rows * d];
                assert!(
                    want.iter()
                        .zip(got)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "rows {i0}..{i1} of head {hi}"
                );
            }
        }
    });
}

#[test]
fn fully_masked_rows_give_zeros() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(27);
        let (q, k, v) = (
            Tensor::randn(&[1, 2, 3, 8], 1.0, &mut rng),
            Tensor::randn(&[1, 2, 5, 8], 1.0, &mut rng),
            Tensor::randn(&[1, 2, 5, 8], 1.0, &mut rng),
        );
        let bias = Tensor::full(&[3, 5], f32::NEG_INFINITY);
        let p = AttentionParams {
            bias: Some(&bias),
            want_weights: true,
            ..AttentionParams::new(8)
        };
        let out = attention::attention(&q, &k, &v, &p).unwrap();
        assert!(out.output.data().iter().all(|&x| x == 0.0));
        assert!(out.weights.unwrap().data().iter().all(|&x| x == 0.0));
    });
}

#[test]
fn attention_shape_errors_are_values() {
    let q = Tensor::zeros(&[1, 3, 2, 8]);
    let kv = Tensor::zeros(&[1, 2, 2, 8]);
    let e = attention::attention(&q, &kv, &kv, &AttentionParams::new(8))
        .unwrap_err()
        .to_string();
    assert!(e.contains('3') && e.contains('2'), "{e}");
}

/// Packed segments: one (1, h, t, d) call over sentences laid end to end equals each
/// sentence attended alone, in the fused kernel and its twin; with weights, a query's
/// weight outside its own segment is 0. Segments include an empty one and one longer
/// than a 64-query block.
#[test]
fn segmented_attention_equals_each_segment_alone() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(31);
        let seg = [0usize, 3, 3, 20, 90, 100];
        let (h, h_kv, t, d) = (4, 2, 100, 8);
        let q = Tensor::randn(&[1, h, t, d], 1.0, &mut rng);
        let k = Tensor::randn(&[1, h_kv, t, d], 1.0, &mut rng);
        let v = Tensor::randn(&[1, h_kv, t, d], 1.0, &mut rng);
        for causal in [false, true] {
            let p = AttentionParams {
                causal,
                segments: Some(&seg),
                want_weights: true,
                ..AttentionParams::new(d)
            };
            let fast = attention::fused(&q, &k, &v, &p).unwrap();
            let twin = attention::reference::attention(&q, &k, &v, &p).unwrap();
            let what = format!("segments causal={causal}");
            assert_close(&fast.output, &twin.output, 1e-5, &what);
            let weights = fast.weights.unwrap();
            assert_close(&weights, &twin.weights.unwrap(), 1e-5, &what);
            for w in seg.windows(2) {
                let (a, n) = (w[0], w[1] - w[0]);
                if n == 0 {
                    continue;
                }
                let part = |x: &Tensor| x.narrow(2, a, n).unwrap();
                let alone = AttentionParams {
                    causal,
                    ..AttentionParams::new(d)
                };
                let one = attention::fused(&part(&q), &part(&k), &part(&v), &alone).unwrap();
                assert_close(
                    &part(&fast.output),
                    &one.output,
                    1e-5,
                    &format!("{what}, segment {a}..{}", w[1]),
                );
                // rows of this segment: no weight on keys outside it
                let rows = part(&weights); // (1, h, n, t)
                for (i, row) in rows.data().chunks(t).enumerate() {
                    let outside: f32 = row[..a].iter().chain(&row[a + n..]).map(|x| x.abs()).sum();
                    assert_eq!(
                        outside, 0.0,
                        "{what}: row {i} of segment {a} looks outside it"
                    );
                }
            }
        }
        let bad = AttentionParams {
            segments: Some(&[0, 50]),
            ..AttentionParams::new(d)
        };
        assert!(
            attention::attention(&q, &k, &v, &bad).is_err(),
            "segments must end at t"
        );
    });
}

/// Keys read in place from a larger store (a KV cache: `kv_len` of `cap` positions)
/// equal the same keys copied out, in the fused kernel and its twin, causal or not.
#[test]
fn attention_over_a_cache_store_equals_the_copied_keys() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(32);
        let (b, h, h_kv, t_q, cap, n, d) = (2, 4, 2, 3, 20, 11, 8);
        let q = Tensor::randn(&[b, h, t_q, d], 1.0, &mut rng);
        let k = Tensor::randn(&[b, h_kv, cap, d], 1.0, &mut rng);
        let v = Tensor::randn(&[b, h_kv, cap, d], 1.0, &mut rng);
        let (k_n, v_n) = (k.narrow(2, 0, n).unwrap(), v.narrow(2, 0, n).unwrap());
        for causal in [false, true] {
            let plain = AttentionParams {
                causal,
                want_weights: true,
                ..AttentionParams::new(d)
            };
            let in_place = AttentionParams {
                kv_len: Some(n),
                ..plain
            };
            let want = attention::reference::attention(&q, &k_n, &v_n, &plain).unwrap();
            for got in [
                attention::fused(&q, &k, &v, &in_place).unwrap(),
                attention::reference::attention(&q, &k, &v, &in_place).unwrap(),
            ] {
                let what = format!("kv_len causal={causal}");
                assert_close(&got.output, &want.output, 1e-5, &what);
                assert_close(
                    &got.weights.unwrap(),
                    want.weights.as_ref().unwrap(),
                    1e-5,
                    &what,
                );
            }
        }
        let too_long = AttentionParams {
            kv_len: Some(cap + 1),
            ..AttentionParams::new(d)
        };
        assert!(
            attention::attention(&q, &k, &v, &too_long).is_err(),
            "kv_len beyond the store"
        );
    });
}

/// The one-row product over an f16 matrix equals, bit for bit, the f32 one over the same
/// numbers widened (Whisper's tied head reads the f16 copy), on every level and every
/// split over threads: the same kernel structure, only the loads differ.
#[test]
fn f16_matvec_equals_the_widened_f32_one_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(16);
    for &(n, k) in &[
        (1, 1),
        (3, 7),
        (5, 17),
        (9, 33),
        (130, 384),
        (1027, 64),
        (5003, 129),
    ] {
        let w: Vec<half::f16> = Tensor::randn(&[n * k], 1.0, &mut rng)
            .data()
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        let wide: Vec<f32> = w.iter().map(|h| h.to_f32()).collect();
        let x = Tensor::randn(&[k], 1.0, &mut rng);
        every_level(|| {
            let mut want = vec![f32::NAN; n];
            matmul::gemm_into(&mut want, x.data(), &wide, 1, k, n, true);
            let mut got = vec![f32::NAN; n];
            matmul::gemv_t_f16(&mut got, x.data(), &w, k, n);
            if crate::ops::simd::has_avx2_fma() {
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "({n}, {k}): f16 and widened f32 differ"
                );
            } else {
                // The scalar level's one-row product is the gemm crate's; the f16 path
                // (not taken there by the model) is the twin's dot: close, not equal.
                for (a, b) in got.iter().zip(&want) {
                    assert!(
                        (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                        "({n}, {k}): {a} vs {b}"
                    );
                }
            }
        });
    }
}

/// The fused kernel's causal path: each query row of a prompt gives the same bits as
/// that query alone over its visible prefix of the key store (a decode step after a
/// KV cache), and as part of a later piece of the prompt (a prefill in pieces), on every
/// level, in blocks of any size: causal attention could be served by
/// it without cached decoding drifting from the full forward.
#[test]
fn fused_causal_rows_equal_their_decode_steps() {
    every_level(|| {
        let mut rng = StdRng::seed_from_u64(33);
        for &(h, h_kv, t, d) in &[(2, 1, 9, 8), (4, 2, 70, 24), (3, 3, 140, 64)] {
            let q = Tensor::randn(&[1, h, t, d], 1.0, &mut rng); // (b, h, t_q, d_k)
            let k = Tensor::randn(&[1, h_kv, t, d], 1.0, &mut rng); // (b, h_kv, t_k, d_k)
            let v = Tensor::randn(&[1, h_kv, t, d], 1.0, &mut rng); // (b, h_kv, t_k, d_v)
            let full = AttentionParams {
                causal: true,
                ..AttentionParams::new(d)
            };
            let all = attention::fused(&q, &k, &v, &full).unwrap().output; // (1, h, t, d)
                                                                           // (i0, i1): the queries i0..i1 over the keys 0..i1: one decode step after a
                                                                           // cache of i0 positions (i1 = i0 + 1), or a prompt's later piece (a prefill in
                                                                           // pieces through the cache).
            let (half, last) = (t / 2, t - 1);
            for (i0, i1) in [
                (0, 1),
                (1, 2),
                (half, half + 1),
                (last, t),
                (1, half),
                (half, t),
            ] {
                let n = i1 - i0;
                let step = AttentionParams {
                    kv_len: Some(i1),
                    ..full
                };
                let qi = q.narrow(2, i0, n).unwrap(); // (1, h, n, d)
                let got = attention::fused(&qi, &k, &v, &step).unwrap().output; // (1, h, n, d)
                for hi in 0..h {
                    let want = &all.data()[(hi * t + i0) * d..][..n * d];
                    let got = &got.data()[hi * n * d..][..n * d];
                    assert!(
                        want.iter()
                            .zip(got)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "h={h} t={t} d={d}: rows {i0}..{i1} of head {hi} differ over a cache of {i0}"
                    );
                }
            }
        }
    });
}
