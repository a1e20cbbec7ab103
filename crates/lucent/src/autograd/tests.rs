//! Finite-difference checks of every backward rule.
//!
//! For an op y = f(x₁, …) and a fixed random R, the analytic gradient of L = Σ y ⊙ R
//! (from `backward_with(R)`) must match the central difference
//! (L(x + εeᵢ) − L(x − εeᵢ)) / 2ε, computed with f64 sums over f32 forwards.
//! ε = 10⁻², tolerance |analytic − numeric| ≤ 5·10⁻³ + 10⁻²·|numeric| (f32 rounding in
//! the forward divided by 2ε dominates; the truncation error is O(ε²)).

#![allow(clippy::cloned_ref_to_slice_refs)] // check(&[x.clone()], ..) reads better in tests

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::nn::Dropout;
use crate::ops::activation::{activation_derivative, activation_grad_row};
use crate::ops::{self, Activation, AttentionParams, RopeConvention};
use crate::tensor::Tensor;
use crate::Result;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

const EPS: f32 = 1e-2;
const ATOL: f64 = 5e-3;
const RTOL: f64 = 1e-2;

fn weighted_sum(y: &Tensor, r: &Tensor) -> f64 {
    y.data()
        .iter()
        .zip(r.data())
        .map(|(&a, &b)| a as f64 * b as f64)
        .sum()
}

/// Check d(Σ f(inputs) ⊙ R)/d input against central differences, for every input.
fn check(name: &str, inputs: &[Tensor], f: &dyn Fn(&[Tensor]) -> Result<Tensor>) -> TestResult {
    let mut rng = StdRng::seed_from_u64(99);
    let params: Vec<Tensor> = inputs.iter().map(|t| t.clone().requires_grad()).collect();
    let y = f(&params)?;
    let r = Tensor::randn(y.shape(), 1.0, &mut rng);
    y.backward_with(r.clone())?;
    for (i, p) in params.iter().enumerate() {
        let analytic = p
            .grad()
            .ok_or_else(|| format!("{name}: input {i} got no gradient"))?;
        let eval = |x: &Tensor| -> Result<f64> {
            let mut xs: Vec<Tensor> = inputs.to_vec();
            xs[i] = x.clone();
            no_grad(|| f(&xs).map(|y| weighted_sum(&y, &r)))
        };
        for j in 0..p.numel() {
            let mut plus = inputs[i].clone();
            plus.data_mut()[j] += EPS;
            let mut minus = inputs[i].clone();
            minus.data_mut()[j] -= EPS;
            let numeric = (eval(&plus)? - eval(&minus)?) / (2.0 * EPS as f64);
            let a = analytic.data()[j] as f64;
            assert!(
                (a - numeric).abs() <= ATOL + RTOL * numeric.abs(),
                "{name}: input {i} element {j}: analytic {a} vs numeric {numeric}"
            );
        }
    }
    Ok(())
}

fn rnd(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, 1.0, &mut StdRng::seed_from_u64(seed))
}

#[test]
fn elementwise_with_broadcast() -> TestResult {
    let (a, b) = (rnd(&[2, 3, 5], 1), rnd(&[3, 5], 2));
    check("add", &[a.clone(), b.clone()], &|x| x[0].add(&x[1]))?;
    check("sub", &[a.clone(), b.clone()], &|x| x[0].sub(&x[1]))?;
    check("mul", &[a.clone(), b.clone()], &|x| x[0].mul(&x[1]))?;
    check("mul same shape", &[a.clone(), a.scale(0.5)], &|x| {
        x[0].mul(&x[1])
    })?;
    check("scale", &[a], &|x| Ok(x[0].scale(-1.7)))?;
    Ok(())
}

#[test]
fn layout_ops() -> TestResult {
    let a = rnd(&[2, 3, 4], 3);
    check("reshape", &[a.clone()], &|x| x[0].reshape(&[6, 4]))?;
    check("transpose", &[a.clone()], &|x| x[0].transpose(0, 2))?;
    check("permute", &[a.clone()], &|x| x[0].permute(&[1, 2, 0]))?;
    check("narrow", &[a.clone()], &|x| x[0].narrow(1, 1, 2))?;
    let b = rnd(&[2, 1, 4], 4);
    check("cat", &[a, b], &|x| Tensor::cat(&[&x[0], &x[1]], 1))?;
    let table = rnd(&[5, 3], 5);
    check("select_rows (repeated ids)", &[table], &|x| {
        x[0].select_rows(&[4, 0, 4, 2])
    })?;
    Ok(())
}

#[test]
fn matmul_family() -> TestResult {
    let (a, b) = (rnd(&[2, 3, 4], 6), rnd(&[2, 4, 5], 7));
    check("matmul batched", &[a.clone(), b], &|x| {
        ops::matmul(&x[0], &x[1])
    })?;
    let shared = rnd(&[4, 5], 8);
    check("matmul shared rhs", &[a.clone(), shared], &|x| {
        ops::matmul(&x[0], &x[1])
    })?;
    let bt = rnd(&[2, 5, 4], 9);
    check("matmul_t batched", &[a.clone(), bt], &|x| {
        ops::matmul_t(&x[0], &x[1])
    })?;
    let (w, bias) = (rnd(&[7, 4], 10), rnd(&[7], 11));
    check("linear", &[a, w, bias], &|x| {
        ops::linear(&x[0], &x[1], Some(&x[2]))
    })?;
    let (a1, b1) = (rnd(&[1, 1], 12), rnd(&[1, 3], 13));
    check("matmul 1×1·1×3", &[a1, b1], &|x| {
        ops::matmul(&x[0], &x[1])
    })?;
    Ok(())
}

#[test]
fn softmax_family_and_loss() -> TestResult {
    let x = rnd(&[3, 6], 14);
    check("softmax", &[x.clone()], &|x| Ok(ops::softmax(&x[0])))?;
    check("softmax T=0.7", &[x.clone()], &|x| {
        ops::softmax_with_temperature(&x[0], 0.7)
    })?;
    check("log_softmax", &[x.clone()], &|x| ops::log_softmax(&x[0]))?;
    check("cross_entropy", &[x.clone()], &|x| {
        ops::cross_entropy(&x[0], &[1, 5, 0], None)
    })?;
    check("cross_entropy ignore", &[x], &|x| {
        ops::cross_entropy(&x[0], &[1, 9, 0], Some(9))
    })?;
    Ok(())
}

#[test]
fn norms_and_activations() -> TestResult {
    let (x, g, b) = (rnd(&[2, 3, 7], 15), rnd(&[7], 16), rnd(&[7], 17));
    check("layer_norm", &[x.clone(), g.clone(), b], &|x| {
        ops::layer_norm(&x[0], &x[1], Some(&x[2]), 1e-5)
    })?;
    check("layer_norm no bias", &[x.clone(), g.clone()], &|x| {
        ops::layer_norm(&x[0], &x[1], None, 1e-5)
    })?;
    check("rms_norm", &[x.clone(), g], &|x| {
        ops::rms_norm(&x[0], &x[1], 1e-6)
    })?;
    check("gelu", &[x.clone()], &|x| Ok(ops::gelu(&x[0])))?;
    check("gelu_tanh", &[x.clone()], &|x| Ok(ops::gelu_tanh(&x[0])))?;
    check("silu", &[x.clone()], &|x| Ok(ops::silu(&x[0])))?;
    // ReLU away from its kink at 0 (ε = 0.01 must not cross it).
    let away = x.map(|v| if v.abs() < 0.05 { v + 0.1 } else { v });
    check("relu", &[away], &|x| Ok(ops::relu(&x[0])))?;
    Ok(())
}

#[test]
fn rope_both_conventions() -> TestResult {
    let x = rnd(&[2, 3, 8], 18);
    for c in [RopeConvention::RotateHalf, RopeConvention::Interleaved] {
        check("rope", &[x.clone()], &move |x| {
            ops::rope(&x[0], &[3, 4, 9], 10000.0, c)
        })?;
        // YaRN's magnitude and frequency factors: the backward is the same rotation.
        check("rope (YaRN, factors)", &[x.clone()], &move |x| {
            let freqs = ops::RopeFreqs {
                base: 10000.0,
                scaling: ops::RopeScaling::Yarn {
                    factor: 4.0,
                    original_context: 16,
                    attn_factor: 1.2,
                },
                freq_factors: Some(&[1.0, 2.0, 0.5, 4.0]),
            };
            ops::rope_with(&x[0], &[3, 4, 9], &freqs, c)
        })?;
    }
    Ok(())
}

#[test]
fn attention_with_masks_gqa_and_cache_shape() -> TestResult {
    let (q, k, v) = (
        rnd(&[2, 4, 3, 5], 19),
        rnd(&[2, 2, 3, 5], 20),
        rnd(&[2, 2, 3, 6], 21),
    );
    for causal in [false, true] {
        check("attention", &[q.clone(), k.clone(), v.clone()], &move |x| {
            let p = AttentionParams {
                causal,
                ..AttentionParams::new(5)
            };
            Ok(ops::attention(&x[0], &x[1], &x[2], &p)?.output)
        })?;
    }
    // Additive bias (a padding mask), and 2 queries over 4 keys (the last 2 positions).
    let bias = Tensor::from_fn(&[2, 1, 2, 4], |i| {
        if i % 4 == 0 && i >= 8 {
            f32::NEG_INFINITY
        } else {
            0.1 * i as f32
        }
    });
    let (q2, k2, v2) = (
        rnd(&[2, 2, 2, 3], 22),
        rnd(&[2, 1, 4, 3], 23),
        rnd(&[2, 1, 4, 3], 24),
    );
    check("attention bias + cache shape", &[q2, k2, v2], &move |x| {
        let p = AttentionParams {
            causal: true,
            bias: Some(&bias),
            ..AttentionParams::new(3)
        };
        Ok(ops::attention(&x[0], &x[1], &x[2], &p)?.output)
    })?;
    Ok(())
}

#[test]
fn dropout_backward_uses_the_same_mask() -> TestResult {
    let x = rnd(&[4, 5], 25);
    check("dropout", &[x], &|x| Dropout::new(0.3, 5)?.forward(&x[0]))?;
    Ok(())
}

#[test]
fn shared_use_accumulates_and_no_grad_records_nothing() -> TestResult {
    let w = rnd(&[3, 3], 26).requires_grad();
    // y = w·w (w used twice): ∂/∂w Σ y = 1·wᵀ + wᵀ·1.
    let y = ops::matmul(&w, &w)?;
    y.backward_with(Tensor::full(&[3, 3], 1.0))?;
    let g = w.grad().ok_or("no gradient")?;
    let wd = w.data();
    for i in 0..3 {
        for j in 0..3 {
            let want: f32 = (0..3).map(|k| wd[j * 3 + k] + wd[k * 3 + i]).sum();
            assert!((g.data()[i * 3 + j] - want).abs() < 1e-5);
        }
    }
    let z = no_grad(|| ops::matmul(&w, &w))?;
    assert!(!z.tracks_grad(), "no_grad must not record");
    assert!(
        z.backward().is_err(),
        "backward without history is an error"
    );
    let x = rnd(&[3, 3], 27);
    assert!(
        !ops::matmul(&x, &x)?.tracks_grad(),
        "constants record nothing"
    );
    w.zero_grad();
    assert!(w.grad().is_none());
    let loss = ops::cross_entropy(&w, &[0, 1, 2], None)?;
    loss.backward()?;
    loss.backward()?;
    let twice = w.grad().ok_or("no gradient")?;
    w.zero_grad();
    ops::cross_entropy(&w, &[0, 1, 2], None)?.backward()?;
    let once = w.grad().ok_or("no gradient")?;
    assert!(
        twice.max_abs_diff(&once.scale(2.0))? < 1e-6,
        "gradients accumulate"
    );
    assert!(
        ops::matmul(&w, &w)?.backward().is_err(),
        "backward needs a scalar"
    );
    Ok(())
}

#[test]
fn fast_activation_gradients_match_their_f64_twin() -> TestResult {
    let x: Vec<f32> = (0..2001).map(|i| (i as f32 - 1000.0) * 0.012).collect();
    let g = vec![1.0f32; x.len()];
    for act in [
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ] {
        let mut fast = vec![0.0; x.len()];
        activation_grad_row(act, &x, &g, &mut fast);
        for (&xv, &f) in x.iter().zip(&fast) {
            let want = activation_derivative(act, xv);
            assert!(
                (f - want).abs() <= 1e-6,
                "{}: f'({xv}) fast {f} vs f64 {want}",
                act.name()
            );
        }
    }
    Ok(())
}

#[test]
fn recorded_attention_forward_equals_the_kernel() -> TestResult {
    // Training computes attention's forward itself (it keeps P); it must agree with the
    // inference kernel to 1e-5 on awkward shapes, with masks and GQA.
    let bias = Tensor::from_fn(&[1, 3, 5, 7], |i| {
        if i % 5 == 0 {
            f32::NEG_INFINITY
        } else {
            0.01 * i as f32
        }
    });
    for (causal, bias) in [
        (false, None),
        (true, None),
        (true, Some(&bias)),
        (false, Some(&bias)),
    ] {
        let (q, k, v) = (
            rnd(&[2, 3, 5, 4], 30),
            rnd(&[2, 1, 7, 4], 31),
            rnd(&[2, 1, 7, 3], 32),
        );
        let p = AttentionParams {
            causal,
            bias,
            want_weights: true,
            ..AttentionParams::new(4)
        };
        let plain = ops::attention(&q, &k, &v, &p)?;
        let (qg, kg, vg) = (q.requires_grad(), k.requires_grad(), v.requires_grad());
        let rec = ops::attention(&qg, &kg, &vg, &p)?;
        assert!(rec.output.tracks_grad());
        assert!(rec.output.max_abs_diff(&plain.output)? <= 1e-5);
        let (wr, wp) = (
            rec.weights.ok_or("no weights")?,
            plain.weights.ok_or("no weights")?,
        );
        assert!(wr.max_abs_diff(&wp)? <= 1e-5);
    }
    Ok(())
}
