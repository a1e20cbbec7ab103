//! The guides' worked examples against their true values (tests/data/seed_examples.json,
//! computed with numpy), ALiBi slopes against tests/data/modules/elementwise.safetensors
//! (PyTorch/BLOOM rule), and the mask patterns exactly.

use lucent::io::safetensors::SafetensorsFile;
use lucent::nn::mask::{bidirectional_mask, causal_mask, prefix_lm_mask};
use lucent::nn::position::{Alibi, SinusoidalEncoding};
use lucent::ops::{attention, matmul_t, softmax_with_temperature, AttentionParams};
use lucent::Tensor;
use serde_json::Value;

fn data_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

fn seed() -> Value {
    let text = std::fs::read_to_string(data_dir().join("seed_examples.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

fn flat(v: &Value) -> Vec<f64> {
    matrix(v).into_iter().flatten().collect()
}

/// (t, d) rows → a tensor of (1, 1, t, d).
fn heads(v: &Value) -> Tensor {
    let m = matrix(v);
    let rows: Vec<Vec<f32>> = m
        .iter()
        .map(|r| r.iter().map(|&x| x as f32).collect())
        .collect();
    let t = Tensor::from_rows(&rows).unwrap();
    let (r, c) = (m.len(), m[0].len());
    t.reshape(&[1, 1, r, c]).unwrap() // (1, 1, t, d)
}

fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}[{k}]: got {g}, want {w} (tolerance {tol})"
        );
    }
}

/// The seed-42 single-head example: scores, scaled scores, weights and output, 1e-6 (f32).
#[test]
fn attention_seed42() {
    let s = seed();
    let ex = &s["attention_seed42"];
    let (q, k, v) = (heads(&ex["Q"]), heads(&ex["K"]), heads(&ex["V"]));
    let tol = 1e-6;
    let scores = matmul_t(&q, &k).unwrap(); // (1, 1, 3, 3)
    assert_close("scores", scores.data(), &flat(&ex["scores"]), tol);
    let scaled = scores.scale(1.0 / 2.0); // √d_k = √4
    assert_close("scaled", scaled.data(), &flat(&ex["scaled"]), tol);
    let mut p = AttentionParams::new(4);
    p.want_weights = true;
    let out = attention(&q, &k, &v, &p).unwrap();
    assert_close(
        "weights",
        out.weights.as_ref().unwrap().data(),
        &flat(&ex["weights"]),
        tol,
    );
    assert_close("output", out.output.data(), &flat(&ex["output"]), tol);
}

/// The causal example: the mask pattern exactly, weights and output to 1e-6, and the same
/// result through the additive bias of `causal_mask` as through the kernel's causal rule.
#[test]
fn causal_attention() {
    let s = seed();
    let ex = &s["causal_attention"];
    let (q, k, v) = (heads(&ex["Q"]), heads(&ex["K"]), heads(&ex["V"]));
    let d_k = q.shape()[3];
    let want_mask: Vec<Vec<bool>> = matrix(&ex["mask"])
        .into_iter()
        .map(|r| r.into_iter().map(|x| x == 1.0).collect())
        .collect();
    let mask = causal_mask(5).unwrap();
    assert_eq!(mask.matrix(0), want_mask);

    let tol = 1e-6;
    let mut p = AttentionParams::new(d_k);
    p.want_weights = true;
    p.causal = true;
    let by_rule = attention(&q, &k, &v, &p).unwrap();
    assert_close(
        "weights",
        by_rule.weights.as_ref().unwrap().data(),
        &flat(&ex["weights"]),
        tol,
    );
    assert_close("output", by_rule.output.data(), &flat(&ex["output"]), tol);

    let bias = mask.to_bias().unwrap();
    p.causal = false;
    p.bias = Some(&bias);
    let by_bias = attention(&q, &k, &v, &p).unwrap();
    assert_close(
        "weights via bias",
        by_bias.weights.as_ref().unwrap().data(),
        &flat(&ex["weights"]),
        tol,
    );
    assert_close(
        "output via bias",
        by_bias.output.data(),
        &flat(&ex["output"]),
        tol,
    );
}

/// softmax([2, 4, 1] / T) at T = 0.5, 1, 2, to 1e-6.
#[test]
fn softmax_temperature() {
    let s = seed();
    let ex = &s["softmax_temperature"];
    let scores: Vec<f32> = ex["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    for t in ["0.5", "1.0", "2.0"] {
        let want: Vec<f64> = ex[t]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let p = softmax_with_temperature(&Tensor::from_slice(&scores), t.parse().unwrap()).unwrap();
        assert_close(&format!("T={t}"), p.data(), &want, 1e-6);
    }
}

/// |got − want| ≤ 1e-9 · max(1, |want|): the f64 formula against numpy's f64.
fn assert_close_f64(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-9 * w.abs().max(1.0),
            "{what}[{k}]: got {g}, want {w} (1e-9 relative)"
        );
    }
}

/// The sinusoidal table, 10×8 and rows 0, 50, 99 of 100×64: the f64 formula to 1e-9
/// relative, the f32 table to 1e-6.
#[test]
fn sinusoidal_pe() {
    let s = seed();
    let want = flat(&s["sinusoidal_pe_10x8"]);
    assert_close_f64(
        "PE 10x8 (f64)",
        &SinusoidalEncoding::table_f64(10, 8),
        &want,
    );
    let pe = SinusoidalEncoding::new(10, 8).unwrap();
    assert_close("PE 10x8 (f32)", pe.table().data(), &want, 1e-6);

    let rows = matrix(&s["sinusoidal_pe_100x64_rows_0_50_99"]);
    let full = SinusoidalEncoding::table_f64(100, 64);
    let pe = SinusoidalEncoding::new(100, 64).unwrap();
    for (k, pos) in [0usize, 50, 99].into_iter().enumerate() {
        assert_close_f64(
            &format!("PE 100x64 row {pos} (f64)"),
            &full[pos * 64..(pos + 1) * 64],
            &rows[k],
        );
        assert_close(
            &format!("PE 100x64 row {pos} (f32)"),
            pe.table().row(pos),
            &rows[k],
            1e-6,
        );
    }
}

/// ALiBi slopes for 8 heads (a power of two) and 12 (not), to 1e-7 against the f32 values
/// PyTorch wrote.
#[test]
fn alibi_slopes() {
    let f = SafetensorsFile::open(data_dir().join("modules/elementwise.safetensors")).unwrap();
    for h in [8usize, 12] {
        let want = f.tensor(&format!("alibi_slopes_{h}")).unwrap();
        let got = Alibi::new(h).unwrap();
        let want64: Vec<f64> = want.data().iter().map(|&x| x as f64).collect();
        assert_close(
            &format!("ALiBi slopes, {h} heads"),
            got.slopes(),
            &want64,
            1e-7,
        );
    }
}

/// The three classic masks for t = 4, exactly.
#[test]
fn mask_patterns() {
    let b = |rows: [[u8; 4]; 4]| rows.map(|r| r.map(|x| x == 1).to_vec()).to_vec();
    assert_eq!(bidirectional_mask(4).unwrap().matrix(0), b([[1; 4]; 4]));
    assert_eq!(
        causal_mask(4).unwrap().matrix(0),
        b([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    );
    assert_eq!(
        prefix_lm_mask(4, 2).unwrap().matrix(0),
        b([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    );
}
