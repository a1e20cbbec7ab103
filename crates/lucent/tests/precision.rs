//! `Precision::Int8` on a real encoder (all-MiniLM-L6-v2, fetched into the lucent cache
//! on first use), held to the exact mode: the distance the issue allows (every
//! sentence's cosine to its exact embedding ≥ 0.99, the median ≥ 0.998) on the
//! reference sentences and the benchmark's 256; batch invariance (a sentence alone =
//! the same sentence in any batch, bit for bit); the exact mode unchanged after a
//! round trip through int8; and a one-line refusal where a precision is not built.

use std::sync::OnceLock;

use lucent::pipeline::embed::Embedder;
use lucent::{OpenOptions, Precision};

fn data(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn exact() -> &'static Embedder {
    static E: OnceLock<Embedder> = OnceLock::new();
    E.get_or_init(|| {
        let m = lucent::open("minilm").expect("open minilm");
        m.embedder().expect("an encoder").as_ref().clone()
    })
}

fn int8() -> &'static Embedder {
    static E: OnceLock<Embedder> = OnceLock::new();
    E.get_or_init(|| {
        let m = OpenOptions::new()
            .precision(Precision::Int8)
            .open("minilm")
            .expect("open minilm in int8");
        assert_eq!(m.precision(), Precision::Int8);
        m.embedder().expect("an encoder").as_ref().clone()
    })
}

fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(data(path))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.replace("\\n", "\n"))
        .collect()
}

fn cosines(a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<f64> {
    let mut c: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            let dot: f64 = x
                .iter()
                .zip(y)
                .map(|(p, q)| f64::from(*p) * f64::from(*q))
                .sum();
            let nx: f64 = x.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
            let ny: f64 = y.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
            dot / (nx * ny)
        })
        .collect();
    c.sort_by(f64::total_cmp);
    c
}

#[test]
fn int8_lands_near_exact_on_every_test_set() {
    for set in ["tests/data/minilm_sentences.txt", "benches/sentences.txt"] {
        let texts = lines(set);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let want = exact().embed_batched(&refs, 32).unwrap();
        let got = int8().embed_batched(&refs, 32).unwrap();
        let c = cosines(&want, &got);
        let (min, median) = (c[0], c[c.len() / 2]);
        eprintln!(
            "{set}: {} sentences, int8 cosine to exact min {min:.6} median {median:.6}",
            c.len()
        );
        assert!(min >= 0.99, "{set}: min cosine {min}");
        assert!(median >= 0.998, "{set}: median cosine {median}");
        assert!(min < 1.0, "{set}: int8 gave the exact numbers: is it on?");
    }
}

#[test]
fn int8_is_batch_invariant() {
    let texts = lines("benches/sentences.txt");
    let refs: Vec<&str> = texts.iter().take(40).map(String::as_str).collect();
    let batched = int8().embed_batched(&refs, 16).unwrap();
    for (i, s) in refs.iter().enumerate().step_by(7) {
        let alone = int8().embed_one(s).unwrap();
        assert!(
            alone
                .iter()
                .zip(&batched[i])
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "sentence {i} alone differs from its row in a batch"
        );
    }
}

#[test]
fn exact_after_int8_is_exact_again() {
    let texts = lines("tests/data/minilm_sentences.txt");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut e = int8().clone();
    e.set_precision(Precision::Exact);
    assert_eq!(e.precision(), Precision::Exact);
    let want = exact().embed_batched(&refs, 8).unwrap();
    let got = e.embed_batched(&refs, 8).unwrap();
    for (w, g) in want.iter().zip(&got) {
        assert!(w.iter().zip(g).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn a_precision_that_is_not_built_is_refused_in_one_line() {
    let e = "bf16".parse::<Precision>().unwrap_err().to_string();
    assert!(e.contains("exact, int8") && !e.contains('\n'), "{e}");
    let e = OpenOptions::new()
        .precision(Precision::Int8)
        .open("smollm2")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("int8") && e.contains("encoders") && !e.contains('\n'),
        "{e}"
    );
}
