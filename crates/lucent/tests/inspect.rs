//! `lucent::pipeline::inspect` on the real GGUF files, held to what the `gguf` package
//! (llama.cpp's own Python reader) reads from them (tests/data/inspect_reference.json,
//! written by scripts/inspect_reference.py), and on hand-made files that lucent must
//! refuse by name: an unknown architecture and an unknown `rope.scaling.type`.

use std::path::PathBuf;

use lucent::io::fetch::{self, Silent};
use lucent::io::gguf::{GgufArray, GgufFile, GgufValue, GgufWriter};
use lucent::pipeline::inspect::{inspect_gguf, report};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    models: Vec<ModelRef>,
}

#[derive(Deserialize)]
struct TypeRef {
    #[serde(rename = "type")]
    dtype: String,
    tensors: usize,
    params: u64,
    bytes: u64,
}

#[derive(Deserialize)]
struct ModelRef {
    model: String,
    architecture: String,
    tensors: usize,
    parameters: u64,
    types: Vec<TypeRef>,
    context_length: u64,
    embedding_length: u64,
    block_count: u64,
    head_count: u64,
    head_count_kv: u64,
    key_length: Option<u64>,
    feed_forward_length: u64,
    rope_freq_base: f64,
    rope_dimension_count: Option<u64>,
    rope_scaling_keys: Vec<String>,
    tokenizer_model: String,
    tokenizer_pre: String,
    vocab_size: u64,
    chat_template: bool,
}

fn reference(name: &str) -> ModelRef {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/inspect_reference.json");
    let r: Reference =
        serde_json::from_str(&std::fs::read_to_string(path).expect("reference")).expect("json");
    r.models
        .into_iter()
        .find(|m| m.model == name)
        .expect("model in the reference")
}

fn check(name: &str) {
    let want = reference(name);
    let path = fetch::ensure(name, &mut Silent).expect("fetch model");
    let r = inspect_gguf(&path).unwrap();
    assert!(r.runs, "{name}: {:?}", r.refusal);
    assert_eq!(r.family.as_deref(), Some(want.architecture.as_str()));
    assert_eq!(r.architecture.as_deref(), Some(want.architecture.as_str()));
    assert_eq!((r.tensors, r.parameters), (want.tensors, want.parameters));
    let got: Vec<_> = r
        .types
        .iter()
        .map(|t| (t.dtype.clone(), t.tensors, t.params, t.bytes))
        .collect();
    let types: Vec<_> = want
        .types
        .iter()
        .map(|t| (t.dtype.clone(), t.tensors, t.params, t.bytes))
        .collect();
    assert_eq!(got, types, "{name}: block-type mix");
    let h = &r.hparams;
    assert_eq!(
        (
            h.context_length,
            h.embedding_length,
            h.block_count,
            h.head_count,
            h.head_count_kv,
            h.feed_forward_length,
            h.vocab_size
        ),
        (
            Some(want.context_length),
            Some(want.embedding_length),
            Some(want.block_count),
            Some(want.head_count),
            Some(want.head_count_kv),
            Some(want.feed_forward_length),
            Some(want.vocab_size)
        )
    );
    let head_dim = want
        .key_length
        .unwrap_or(want.embedding_length / want.head_count);
    assert_eq!(h.head_dim, Some(head_dim));
    assert_eq!(r.rope.freq_base, Some(want.rope_freq_base));
    assert_eq!(r.rope.dimension_count, want.rope_dimension_count);
    let keys: Vec<&str> = r.rope.scaling.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, want.rope_scaling_keys);
    assert_eq!(
        r.tokenizer.model.as_deref(),
        Some(want.tokenizer_model.as_str())
    );
    assert_eq!(
        r.tokenizer.pre.as_deref(),
        Some(want.tokenizer_pre.as_str())
    );
    assert_eq!(r.chat_template.present, want.chat_template);
    assert_eq!(r.chat_template.first_line.is_some(), want.chat_template);
}

#[test]
fn smollm2_matches_the_gguf_package() {
    check("smollm2");
}

#[test]
fn gemma3_matches_the_gguf_package() {
    check("gemma3");
}

/// A small `arch` file: LLaMA's hyper-parameters, a SentencePiece vocabulary of five
/// tokens, one tensor, plus `extra` metadata.
fn tiny(arch: &str, extra: &[(&str, GgufValue)]) -> GgufFile {
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{arch}.{s}");
    w.add("general.architecture", GgufValue::String(arch.into()));
    for (key, v) in [
        ("block_count", 1),
        ("context_length", 64),
        ("embedding_length", 8),
        ("feed_forward_length", 16),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
    ] {
        w.add(&k(key), GgufValue::U32(v));
    }
    w.add(&k("attention.layer_norm_rms_epsilon"), GgufValue::F32(1e-6));
    w.add(&k("rope.freq_base"), GgufValue::F32(10_000.0));
    for (key, v) in extra {
        w.add(key, v.clone());
    }
    let tokens: Vec<String> = ["<unk>", "<s>", "</s>", "▁a", "▁b"]
        .map(String::from)
        .into();
    w.add("tokenizer.ggml.model", GgufValue::String("llama".into()));
    w.add(
        "tokenizer.ggml.tokens",
        GgufValue::Array(GgufArray::String(tokens)),
    );
    w.add(
        "tokenizer.ggml.scores",
        GgufValue::Array(GgufArray::F32(vec![0.0, 0.0, 0.0, -1.0, -2.0])),
    );
    w.add(
        "tokenizer.ggml.token_type",
        GgufValue::Array(GgufArray::I32(vec![2, 3, 3, 1, 1])),
    );
    w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
    w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
    w.add("tokenizer.ggml.unknown_token_id", GgufValue::U32(0));
    w.add_f32("token_embd.weight", &[5, 8], &[0.5; 40]).unwrap();
    GgufFile::from_bytes(&w.to_bytes(), &format!("tiny-{arch}.gguf")).unwrap()
}

#[test]
fn a_plain_tiny_llama_runs() {
    let r = report(&tiny("llama", &[]));
    assert!(r.runs, "{:?}", r.refusal);
    assert_eq!(r.hparams.head_dim, Some(4));
    assert_eq!(r.parameters, 40);
}

#[test]
fn an_unknown_architecture_is_refused_by_name() {
    let r = report(&tiny("mamba", &[]));
    assert!(!r.runs);
    let why = r.refusal.unwrap();
    assert!(
        why.contains("'mamba'") && why.contains("general.architecture"),
        "{why}"
    );
    // What inspect can still read.
    assert_eq!(r.hparams.embedding_length, Some(8));
}

#[test]
fn an_unknown_rope_scaling_type_is_refused_naming_the_key() {
    let longrope = [(
        "llama.rope.scaling.type",
        GgufValue::String("longrope".into()),
    )];
    let r = report(&tiny("llama", &longrope));
    assert!(!r.runs);
    let why = r.refusal.unwrap();
    assert!(
        why.contains("llama.rope.scaling.type") && why.contains("longrope"),
        "{why}"
    );
    assert_eq!(
        r.rope.scaling,
        vec![(
            "llama.rope.scaling.type".to_string(),
            "longrope".to_string()
        )]
    );
    assert_eq!(r.rope.computed, None);
}

/// A scaling lucent reads is shown as it computes it, next to the file's keys.
#[test]
fn a_rope_scaling_is_shown_as_computed() {
    let yarn = [
        ("llama.rope.scaling.type", GgufValue::String("yarn".into())),
        ("llama.rope.scaling.factor", GgufValue::F32(4.0)),
        (
            "llama.rope.scaling.original_context_length",
            GgufValue::U32(16),
        ),
    ];
    let r = report(&tiny("llama", &yarn));
    assert!(r.runs, "{:?}", r.refusal);
    let shown = r.rope.computed.unwrap();
    assert!(
        shown.contains("YaRN")
            && shown.contains("factor 4")
            && shown.contains("original context 16"),
        "{shown}"
    );
    let r = report(&tiny("llama", &[]));
    assert_eq!(r.rope.computed.as_deref(), Some("none"));
}
