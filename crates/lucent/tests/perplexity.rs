//! `lucent::pipeline::perplexity` held to llama.cpp: SmolLM2 (Q4_1) and Gemma 3 (Q4_K_M)
//! on the first 100,000 characters of Moby Dick, against llama-perplexity's procedure
//! run on llama-cpp-python 0.3.36's logits (tests/data/perplexity_reference.json, written
//! by scripts/perplexity_reference.py: every window of the text, its running estimates
//! and the final PPL ± error). The whole text's token count and first ids are equal, and
//! every window is scored here (about a minute a model on 2 threads).
//!
//! The reference comes from an AVX2 build of llama.cpp (its `meta.system_info` without
//! `AVX512 = 1`; the families' AVX2 build, as `scripts/parity-llama-avx2.sh` makes it),
//! whose arithmetic lucent reproduces bit for bit (tests/decoders.rs): every window's
//! running estimate, the final PPL and its ± must equal llama-perplexity's at 4
//! decimals, as it prints them. (An AVX-512 build sums its f16 products 16 lanes at a
//! time; its logits differ in the last bits, grown by the models' 8-bit activations, and
//! it is refused as a reference.)
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

#[derive(Deserialize)]
struct ModelRef {
    model: String,
    n_tokens: usize,
    first_ids: Vec<u32>,
    chunks: usize,
    running_ppl: Vec<f64>,
    ppl: f64,
    ppl_err: f64,
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
    assert!(
        !r.meta.system_info.contains("AVX512 = 1"),
        "the reference must come from an AVX2 build of llama.cpp (module docs): {}",
        r.meta.system_info
    );
    let got = perplexity(&tm, &text, r.meta.ctx, None, &mut |_, _, _| {}).unwrap();
    let first = r.meta.ctx / 2;
    assert_eq!(
        (got.n_tokens, got.chunks, got.tokens_scored),
        (
            want.n_tokens,
            want.chunks,
            want.chunks * (r.meta.ctx - first - 1)
        ),
        "{name}: tokens, windows, tokens scored"
    );
    let four = |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>();
    assert_eq!(
        four(&got.running),
        four(&want.running_ppl),
        "{name}: running estimates"
    );
    assert_eq!(
        four(&[got.ppl, got.ppl_err]),
        four(&[want.ppl, want.ppl_err]),
        "{name}: PPL ± error"
    );
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
