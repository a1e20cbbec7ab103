//! `lucent::pipeline::perplexity` held to llama.cpp: SmolLM2 (Q4_1) and Gemma 3 (Q4_K_M)
//! on the first 100,000 characters of Moby Dick, against llama-perplexity's procedure
//! run on llama-cpp-python 0.3.36's logits (tests/data/perplexity_reference.json, written
//! by scripts/perplexity_reference.py: every window of the text, its running estimates
//! and the final PPL ± error). The whole text's token count and first ids are equal; the
//! first [`WINDOWS`] windows are scored here (about a minute a model on 2 threads) and
//! their running estimates compared with the reference's.
//!
//! How close depends on the build that made the reference. lucent reproduces llama.cpp's
//! AVX2 arithmetic bit for bit (tests/decoders.rs); with a reference from an AVX2 build
//! (its `meta.system_info` without `AVX512 = 1`, e.g. `scripts/parity-llama-avx2.sh`'s
//! venv) the estimates must equal at 4 decimals, as llama-perplexity prints them. The
//! reference committed now comes from the AVX-512 build of llama-cpp-python, whose
//! logits differ from the AVX2 build's in the last bits, grown by the models' 8-bit
//! activations (its first-step logits on the decoder golden prompts differ from the AVX2
//! build's by up to 0.50 for SmolLM2 and 0.55 for Gemma 3); against it the estimates
//! must agree within [`AVX512_GAP`]. Measured over the first 8 windows: SmolLM2 at most
//! 0.38 % below (its final PPL over all 50 windows 0.04 % off), Gemma 3 0.46–1.04 %
//! above in every window. Whether Gemma's gap is all the build's is for the AVX2
//! reference to show (docs/perplexity.md).
//!
//! The models and the corpus come from the cache (`fetch::ensure`,
//! `corpus::resolve_corpus`, fetching if needed).

use std::path::PathBuf;

use lucent::io::corpus::resolve_corpus;
use lucent::io::fetch::{self, Silent};
use lucent::pipeline::generate::TextModel;
use lucent::pipeline::perplexity::perplexity;
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    meta: Meta,
    models: Vec<ModelRef>,
}

#[derive(Deserialize)]
struct Meta {
    chars: usize,
    ctx: usize,
    system_info: String,
}

/// Windows scored by the test (the reference holds every window of the text).
const WINDOWS: usize = 8;

/// Largest relative difference of a running estimate from an AVX-512 build's (module
/// docs: measured at most 1.04 %).
const AVX512_GAP: f64 = 1.5e-2;

#[derive(Deserialize)]
struct ModelRef {
    model: String,
    n_tokens: usize,
    first_ids: Vec<u32>,
    running_ppl: Vec<f64>,
}

fn reference() -> Reference {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/perplexity_reference.json");
    let text = std::fs::read_to_string(path).expect("reference file");
    serde_json::from_str(&text).expect("reference json")
}

fn moby_dick(chars: usize) -> String {
    let path = resolve_corpus("moby-dick", &mut Silent).expect("fetch moby-dick");
    let text = std::fs::read_to_string(path).expect("read corpus");
    text.chars().take(chars).collect()
}

fn load(name: &str) -> TextModel {
    let path = fetch::ensure(name, &mut Silent).expect("fetch model");
    TextModel::load(&path).expect("load model")
}

fn check(name: &str) {
    let r = reference();
    let want = r
        .models
        .iter()
        .find(|m| m.model == name)
        .expect("model in the reference");
    let text = moby_dick(r.meta.chars);
    let tm = load(name);
    let ids = tm.tokenizer.encode_ids(&text, true, false).unwrap();
    assert_eq!(ids.len(), want.n_tokens, "{name}: token count");
    assert_eq!(
        &ids[..want.first_ids.len()],
        &want.first_ids[..],
        "{name}: first ids"
    );
    let got = perplexity(&tm, &text, r.meta.ctx, Some(WINDOWS), &mut |_, _, _| {}).unwrap();
    let first = r.meta.ctx / 2;
    assert_eq!(
        (got.n_tokens, got.chunks, got.tokens_scored),
        (want.n_tokens, WINDOWS, WINDOWS * (r.meta.ctx - first - 1)),
        "{name}: tokens, windows, tokens scored"
    );
    let want_running = &want.running_ppl[..WINDOWS];
    if r.meta.system_info.contains("AVX512 = 1") {
        for (i, (g, w)) in got.running.iter().zip(want_running).enumerate() {
            assert!(
                (g / w - 1.0).abs() <= AVX512_GAP,
                "{name}: window {}: lucent {g:.4}, llama.cpp (AVX-512 build) {w:.4}",
                i + 1
            );
        }
    } else {
        let four = |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>();
        assert_eq!(
            four(&got.running),
            four(want_running),
            "{name}: running estimates"
        );
    }
}

#[test]
fn smollm2_agrees_with_llama_perplexity() {
    check("smollm2");
}

#[test]
fn gemma3_agrees_with_llama_perplexity() {
    check("gemma3");
}

#[test]
fn refusals_name_the_argument() {
    let tm = load("smollm2");
    let text = moby_dick(3000);
    let err = |ctx: usize, text: &str| {
        perplexity(&tm, text, ctx, None, &mut |_, _, _| {})
            .unwrap_err()
            .to_string()
    };
    let e = err(512, "   \n");
    assert!(e.contains("empty"), "{e}");
    let e = err(8, &text);
    assert!(e.contains("--ctx 8") && e.contains("16"), "{e}");
    let e = err(8193, &text);
    assert!(e.contains("--ctx 8193") && e.contains("8192"), "{e}");
    // About 800 tokens: fewer than two windows of 512.
    let e = err(512, &text);
    assert!(
        e.contains("at least 1024") && e.contains("smaller --ctx"),
        "{e}"
    );
}
